//! get (`scripts/get.lua`): a job's row and its score, read into a [`JobRow`].

use super::{reply, Engine};
use crate::error::{Error, Result};
use crate::job::{JobRow, JobState};
use crate::keyspace::{GroupName, JobId, QueueKeys, QueueName};
use crate::store::reply::Reply;

pub(crate) async fn get(store: &(impl Engine + ?Sized), queue: &QueueName, id: &JobId) -> Result<Option<JobRow>> {
    let k = QueueKeys::new(queue);
    let verb = "get";
    let v = store
        .run(
            &store.scripts().get,
            &[
                k.job(id),
                k.active(),
                k.scheduled(),
                k.dead(),
                k.completed(),
                k.cancelled(),
            ],
            vec![id.as_str().as_bytes().to_vec()],
        )
        .await?;
    let items = reply::array(verb, v)?;
    row(verb, id, items).map(|r| r.map(|r| *r))
}

/// A job's row from a reply of HGETALL field/value pairs followed by its score (`''` for none):
/// get's, and mark_waited's for a finished job. `None` for an empty reply (no row).
pub(crate) fn row(verb: &'static str, id: &JobId, mut items: Vec<Reply>) -> Result<Option<Box<JobRow>>> {
    let Some(score) = items.pop() else {
        return Ok(None);
    };
    let score = reply::string(verb, score)?;
    let mut job = JobRow {
        id: id.clone(),
        state: JobState::Pending,
        payload: Vec::new(),
        attempts: 0,
        free: 0,
        max_attempts: None,
        group: None,
        kind: None,
        priority: 0,
        retry: None,
        run_at: None,
        stalled: 0,
        last_error: None,
        cancel: None,
        output: None,
        output_dropped: None,
        finished_at: None,
        score: score.parse::<f64>().ok().map(|s| s as u64),
    };
    let mut it = items.into_iter();
    let bad = |field: &str| Error::Protocol {
        verb,
        reply: format!("malformed field {field} in the row of job {id}"),
    };
    while let (Some(f), Some(val)) = (it.next(), it.next()) {
        let f = reply::string(verb, f)?;
        let val = reply::bytes(verb, val)?;
        let text = || String::from_utf8_lossy(&val).into_owned();
        let int = || text().parse::<u64>().map_err(|_| bad(&f));
        match f.as_str() {
            "data" => job.payload = val.clone(),
            "state" => job.state = JobState::parse(&text()).ok_or_else(|| bad(&f))?,
            "attempts" => job.attempts = int()?,
            "free" => job.free = int()?,
            "max_attempts" => job.max_attempts = Some(int()?),
            "group" => job.group = Some(GroupName::new(text())?),
            "kind" => job.kind = Some(text()),
            "priority" => job.priority = text().parse().map_err(|_| bad(&f))?,
            "retry" => job.retry = Some(text()),
            "run_at" => job.run_at = Some(int()?),
            "stalled" => job.stalled = int()?,
            "last_error" => job.last_error = Some(text()),
            "cancel" => job.cancel = Some(text()),
            "output" => job.output = Some(val.clone()),
            "output_dropped" => job.output_dropped = Some(int()?),
            "finished_at" => job.finished_at = Some(int()?),
            _ => {}
        }
    }
    // the attempts it has used: its claims less those that used none
    job.attempts = job.attempts.saturating_sub(job.free);
    Ok(Some(Box::new(job)))
}
