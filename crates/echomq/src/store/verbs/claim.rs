//! claim (`scripts/claim.lua`): up to 1000 jobs a script call, the calls repeated until the claim
//! has its jobs or comes back short; the reading of a claim reply (also the round's claim leg).

use std::time::Duration;

use crate::store::reply::Reply;

use super::args::{ms, num, settle_arg};
use super::Call;
use super::{reply, Engine};
use crate::error::{Error, Result};
use crate::job::ClaimedJob;
use crate::keyspace::{GroupName, JobId, QueueKeys, QueueName};
use crate::store::{check_claim, positive, Claimed, SettleOptions, BATCH_BYTES_MAX, BATCH_MAX};

pub(crate) async fn claim(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    n: u32,
    lease: Duration,
    max_attempts: u32,
    settle: SettleOptions,
) -> Result<Claimed> {
    positive("n", n as u64)?;
    check_claim(lease, max_attempts)?;
    let k = QueueKeys::new(queue);
    let mut out = Claimed::default();
    let mut left = n as usize;
    while left > 0 {
        let take = left.min(BATCH_MAX);
        let call = claim_call(store, &k, take, lease, max_attempts, settle);
        let v = store.run(call.script, &call.keys, call.args).await?;
        let got = parse_claimed(v, &mut out)?;
        if got < take {
            break;
        }
        left -= take;
    }
    Ok(out)
}

/// One claim script call of `n` jobs (at most [`BATCH_MAX`]).
pub(crate) fn claim_call<'a>(
    store: &'a (impl Engine + ?Sized),
    k: &QueueKeys,
    n: usize,
    lease: Duration,
    max_attempts: u32,
    settle: SettleOptions,
) -> Call<'a> {
    let recmax = settle_arg(settle);
    Call {
        script: &store.scripts().claim,
        keys: vec![
            k.ring(),
            k.groups(),
            k.pending(),
            k.active(),
            k.paused(),
            k.obliterating(),
            k.throttled(),
            k.tats(),
            k.tat(),
        ],
        args: vec![
            k.base().as_bytes().to_vec(),
            num(n),
            ms(lease),
            num(max_attempts),
            recmax,
            num(BATCH_BYTES_MAX),
        ],
    }
}

/// Appends the claimed jobs of one claim reply to `out` and takes its wait; returns how many jobs.
/// The reply (claim.lua's header): (id, payload, token, attempt, group, kind, max_attempts, retry,
/// wait) per job, group '' for a flat job, kind '' for a raw one, retry '' for a job without a retry
/// policy of its own, wait the ms it waited ready ('' when its rank tells none); then the µs until a rate limit admits a start again (0: none held work back)
/// and whether that limit is the queue's (1/0).
pub(crate) fn parse_claimed(v: Reply, out: &mut Claimed) -> Result<usize> {
    let verb = "claim";
    let mut items = reply::array(verb, v)?;
    if items.len() % 9 != 2 {
        return Err(Error::Protocol {
            verb,
            reply: format!("{} elements: not nine per job and the wait", items.len()),
        });
    }
    let count = |v: &Reply| u64::try_from(reply::int(verb, v)?).map_err(|_| reply::protocol(verb, v));
    let queue_limited = items.pop().map(|w| count(&w)).transpose()?.unwrap_or(0) == 1;
    let wait = items.pop().map(|w| count(&w)).transpose()?.unwrap_or(0);
    out.wait = (wait > 0).then(|| Duration::from_micros(wait));
    out.queue_limited = queue_limited && wait > 0;
    let got = items.len() / 9;
    let out = &mut out.jobs;
    let mut it = items.into_iter();
    while let (
        Some(id),
        Some(payload),
        Some(token),
        Some(attempt),
        Some(group),
        Some(kind),
        Some(max),
        Some(retry),
        Some(waited),
    ) = (
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
        it.next(),
    ) {
        let wait = match &waited {
            Reply::Bulk(b) if b.is_empty() => None,
            w => Some(Duration::from_millis(count(w)?)),
        };
        let group = reply::string(verb, group)?;
        let kind = reply::string(verb, kind)?;
        let id = JobId::from_store(reply::string(verb, id)?);
        let retry = crate::retry::stored(&id, &reply::string(verb, retry)?);
        out.push(ClaimedJob {
            id,
            payload: reply::bytes(verb, payload)?,
            token: count(&token)?,
            attempts: count(&attempt)?,
            // a ring member that is no valid name (the keyspace edited by hand) is the handler's
            // information only, as on the embedded store: it must not fail the batch, whose jobs
            // are leased already and would wait out their leases (the settles read the row's group)
            group: (!group.is_empty()).then(|| GroupName::new(group).ok()).flatten(),
            kind: (!kind.is_empty()).then_some(kind),
            max_attempts: count(&max)?,
            retry,
            wait,
        });
    }
    Ok(got)
}
