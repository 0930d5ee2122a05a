//! list (`scripts/list.lua`): a page of the ids in one state, from a cursor.

use super::args::num;
use super::{reply, Engine};
use crate::error::Result;
use crate::job::JobState;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{check_list_limit, After, JobsPage};

pub(crate) async fn list(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    state: JobState,
    cursor: Option<&str>,
    limit: u32,
) -> Result<JobsPage> {
    check_list_limit(limit)?;
    let verb = "list";
    let after = After::parse(state, cursor)?;
    let (from, chunk, group, score, id) = match &after {
        After::Start => ("", "", "", String::new(), ""),
        After::Job { score, id } => ("z", "", "", score.to_string(), id.as_str()),
        After::Lanes { chunk, at: None } => ("l", chunk.as_str(), "", String::new(), ""),
        After::Lanes {
            chunk,
            at: Some((g, score, id)),
        } => ("l", chunk.as_str(), g.as_str(), score.to_string(), id.as_str()),
    };
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().list,
            &[
                k.pending(),
                k.scheduled(),
                k.active(),
                k.dead(),
                k.completed(),
                k.cancelled(),
                k.groups(),
            ],
            vec![
                k.base().as_bytes().to_vec(),
                state.as_str().as_bytes().to_vec(),
                num(limit),
                from.as_bytes().to_vec(),
                chunk.as_bytes().to_vec(),
                group.as_bytes().to_vec(),
                score.into_bytes(),
                id.as_bytes().to_vec(),
            ],
        )
        .await?;
    let mut items = reply::array(verb, v)?.into_iter();
    let mut next = || -> Result<String> {
        let item = items
            .next()
            .ok_or_else(|| reply::protocol_text(verb, "a reply shorter than its head"))?;
        reply::string(verb, item)
    };
    let (kind, chunk, group, score, id) = (next()?, next()?, next()?, next()?, next()?);
    // a score as Redis prints it: an integer below 2^53 (every score the queue writes is one)
    let score = || -> Result<i64> {
        score
            .parse::<f64>()
            .ok()
            .filter(|s| s.fract() == 0.0 && s.abs() < 9.007_199_254_740_992e15)
            .map(|s| s as i64)
            .ok_or_else(|| reply::protocol_text(verb, &format!("a score that is no whole number: {score}")))
    };
    let after = match kind.as_str() {
        "" => After::Start,
        "z" => After::Job { score: score()?, id },
        "l" if group.is_empty() => After::Lanes { chunk, at: None },
        "l" => After::Lanes {
            chunk,
            at: Some((group, score()?, id)),
        },
        other => return Err(reply::protocol_text(verb, &format!("a next page of kind {other:?}"))),
    };
    let ids = items
        .map(|i| reply::string(verb, i).map(JobId::from_store))
        .collect::<Result<Vec<_>>>()?;
    Ok(JobsPage {
        ids,
        next: after.text(state),
    })
}
