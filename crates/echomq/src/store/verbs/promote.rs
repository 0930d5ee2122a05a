//! promote (`scripts/promote.lua`): due scheduled jobs to ready and due schedule slots fired; its
//! call is also the round's promote leg.

use std::time::Duration;

use crate::store::reply::Reply;

use super::args::num;
use super::Call;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::schedule::{RefillRequest, ScheduleName};
use crate::store::{positive, Promoted};

pub(crate) async fn promote(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    limit: u32,
    grace: Duration,
) -> Result<Promoted> {
    positive("limit", limit as u64)?;
    let call = promote_call(store, &QueueKeys::new(queue), limit, grace);
    parse_promoted(store.run(call.script, &call.keys, call.args).await?)
}

/// One promote script call of at most `limit` jobs, schedule slots missed past `grace`.
pub(crate) fn promote_call<'a>(
    store: &'a (impl Engine + ?Sized),
    k: &QueueKeys,
    limit: u32,
    grace: Duration,
) -> Call<'a> {
    Call {
        script: &store.scripts().promote,
        keys: vec![k.scheduled(), k.pending(), k.order(), k.schedule_due()],
        args: vec![k.base().as_bytes().to_vec(), num(limit), num(grace.as_millis())],
    }
}

/// How many moved, when the next scheduled job or slot is due (none: `None`), how many jobs the
/// schedules fired, and the schedules to refill (8 items each).
pub(crate) fn parse_promoted(v: Reply) -> Result<Promoted> {
    let verb = "promote";
    let items = reply::array(verb, v)?;
    if items.len() < 3 || (items.len() - 3) % 8 != 0 {
        return Err(reply::protocol_text(verb, &format!("{} elements", items.len())));
    }
    let mut it = items.into_iter();
    let mut int = || reply::int(verb, &it.next().unwrap_or(Reply::Nil));
    let moved = int()?.max(0) as u64;
    let next = int()?;
    let fired = int()?.max(0) as u64;
    let mut refills = Vec::new();
    let rest: Vec<Reply> = it.collect();
    for r in rest.chunks(8) {
        let text = |i: usize| reply::string(verb, r[i].clone());
        let int = |i: usize| reply::int(verb, &r[i]);
        refills.push(RefillRequest {
            name: ScheduleName::new(text(0)?).map_err(|e| reply::protocol_text(verb, &e.to_string()))?,
            version: int(1)?.max(0) as u64,
            timing: text(2)?,
            zone: text(3)?,
            misfire: text(4)?,
            grace_ms: int(5)?,
            cursor: int(6)?,
            now_ms: int(7)?,
        });
    }
    Ok(Promoted {
        moved,
        next_due_in: (next >= 0).then(|| Duration::from_millis(next as u64)),
        fired,
        refills,
    })
}
