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
use crate::store::{check_claim, positive, ClaimRequest, Claimed, BATCH_BYTES_MAX, BATCH_MAX};

pub(crate) async fn claim(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    request: &ClaimRequest,
) -> Result<Claimed> {
    let n = request.n;
    positive("n", n as u64)?;
    check_claim(request.lease, request.max_attempts)?;
    request.kinds.check()?;
    let k = QueueKeys::new(queue);
    let mut out = Claimed::default();
    let mut left = n as usize;
    // the jobs started at once come first: each call starts what is left of them
    let mut slots = n.saturating_sub(request.held) as usize;
    while left > 0 {
        let take = left.min(BATCH_MAX);
        let call = claim_call(store, &k, take, slots.min(take), request);
        let v = store.run(call.script, &call.keys, call.args).await?;
        let got = parse_claimed(v, &mut out)?;
        slots = slots.saturating_sub(got);
        if got < take {
            break;
        }
        left -= take;
    }
    Ok(out)
}

/// Of a claim call of `n` jobs (the first call of `request`), how many its caller starts at once.
pub(crate) fn slots_of(n: usize, request: &ClaimRequest) -> usize {
    n.min((request.n.saturating_sub(request.held)) as usize)
}

/// One claim script call of `n` jobs (at most [`BATCH_MAX`]) as `request` asks them (its lease,
/// budget, settle options and kinds; its `n` is the caller's to split), `slots` of them started at
/// once (the rest held: [`ClaimRequest::held`]).
pub(crate) fn claim_call<'a>(
    store: &'a (impl Engine + ?Sized),
    k: &QueueKeys,
    n: usize,
    slots: usize,
    request: &ClaimRequest,
) -> Call<'a> {
    let recmax = settle_arg(request.settle);
    let mut args = vec![
        k.base().as_bytes().to_vec(),
        num(n),
        ms(request.lease),
        num(request.max_attempts),
        recmax,
        num(BATCH_BYTES_MAX),
    ];
    let kinds = request.kinds.store_list();
    if kinds.is_some() || slots < n {
        let kinds = kinds.unwrap_or_default();
        args.push(num(kinds.len()));
        args.extend(kinds.iter().map(|kind| kind.as_bytes().to_vec()));
    }
    if slots < n {
        args.push(num(slots));
    }
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
        args,
    }
}

/// A job's elements in the claim's reply, in order: the script names the same positions
/// (`claim.lua`; a test holds the two equal). The reply ends with two more elements, the wait and
/// whose limit it is.
pub(crate) const CLAIM_REPLY_FIELDS: [&str; 9] = [
    "id",
    "payload",
    "token",
    "attempt",
    "group",
    "kind",
    "max_attempts",
    "retry",
    "wait",
];

/// The elements of one job in the claim's reply.
const PER_JOB: usize = CLAIM_REPLY_FIELDS.len();

/// The elements after the jobs: the wait, and whether it is the queue's limit.
const TAIL: usize = 2;

/// The position of `name` in [`CLAIM_REPLY_FIELDS`] (past its end when absent: then indexing a
/// job's elements with it fails the build).
const fn at(name: &str) -> usize {
    let mut i = 0;
    while i < PER_JOB {
        let field = CLAIM_REPLY_FIELDS[i].as_bytes();
        let wanted = name.as_bytes();
        if field.len() == wanted.len() {
            let mut j = 0;
            while j < field.len() && field[j] == wanted[j] {
                j += 1;
            }
            if j == field.len() {
                return i;
            }
        }
        i += 1;
    }
    PER_JOB
}

const ID: usize = at("id");
const PAYLOAD: usize = at("payload");
const TOKEN: usize = at("token");
const ATTEMPT: usize = at("attempt");
const GROUP: usize = at("group");
const KIND: usize = at("kind");
const MAX_ATTEMPTS: usize = at("max_attempts");
const RETRY: usize = at("retry");
const WAIT: usize = at("wait");

/// Appends the claimed jobs of one claim reply to `out` and takes its wait; returns how many jobs.
/// The reply (claim.lua's header): [`CLAIM_REPLY_FIELDS`] per job — group '' for a flat job, kind
/// '' for a raw one, retry '' for a job without a retry policy of its own, wait the ms it waited
/// ready ('' when its rank tells none); then the µs until a rate limit admits a start again (0:
/// none held work back) and whether that limit is the queue's (1/0).
pub(crate) fn parse_claimed(v: Reply, out: &mut Claimed) -> Result<usize> {
    let verb = "claim";
    let mut items = reply::array(verb, v)?;
    if items.len() % PER_JOB != TAIL {
        return Err(Error::Protocol {
            verb,
            reply: format!("{} elements: not {PER_JOB} per job and {TAIL} after them", items.len()),
        });
    }
    let count = |v: &Reply| u64::try_from(reply::int(verb, v)?).map_err(|_| reply::protocol(verb, v));
    let queue_limited = items.pop().map(|w| count(&w)).transpose()?.unwrap_or(0) == 1;
    let wait = items.pop().map(|w| count(&w)).transpose()?.unwrap_or(0);
    out.wait = (wait > 0).then(|| Duration::from_micros(wait));
    out.queue_limited = queue_limited && wait > 0;
    let got = items.len() / PER_JOB;
    let out = &mut out.jobs;
    let mut it = items.into_iter();
    for _ in 0..got {
        let mut job: [Reply; PER_JOB] = std::array::from_fn(|_| it.next().unwrap_or(Reply::Nil));
        let mut take = |i: usize| std::mem::replace(&mut job[i], Reply::Nil);
        let wait = match take(WAIT) {
            Reply::Bulk(b) if b.is_empty() => None,
            w => Some(Duration::from_millis(count(&w)?)),
        };
        let group = reply::string(verb, take(GROUP))?;
        let kind = reply::string(verb, take(KIND))?;
        let id = JobId::from_store(reply::string(verb, take(ID))?);
        let retry = crate::retry::stored(&id, &reply::string(verb, take(RETRY))?);
        out.push(ClaimedJob {
            id,
            payload: reply::bytes(verb, take(PAYLOAD))?,
            token: count(&take(TOKEN))?,
            attempts: count(&take(ATTEMPT))?,
            // a ring member that is no valid name (the keyspace edited by hand) is the handler's
            // information only, as on the embedded store: it must not fail the batch, whose jobs
            // are leased already and would wait out their leases (the settles read the row's group)
            group: (!group.is_empty()).then(|| GroupName::new(group).ok()).flatten(),
            kind: (!kind.is_empty()).then_some(kind),
            max_attempts: count(&take(MAX_ATTEMPTS))?,
            retry,
            wait,
        });
    }
    Ok(got)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_names_the_reply_fields_as_the_verb_reads_them() {
        let lua = include_str!("../../../scripts/claim.lua");
        let named = crate::store::scripts::lua_positions(lua, "CLAIM_REPLY_FIELDS");
        assert_eq!(named, CLAIM_REPLY_FIELDS, "claim.lua's positions");
        let read = [ID, PAYLOAD, TOKEN, ATTEMPT, GROUP, KIND, MAX_ATTEMPTS, RETRY, WAIT];
        let mut sorted = read;
        sorted.sort_unstable();
        assert_eq!(sorted, std::array::from_fn(|i| i), "each field read once");
    }

    #[test]
    fn a_reply_is_read_by_the_named_positions() {
        let job = |id: &str| {
            vec![
                Reply::Bulk(id.as_bytes().to_vec()),
                Reply::Bulk(b"data".to_vec()),
                Reply::Int(3),
                Reply::Int(2),
                Reply::Bulk(b"g".to_vec()),
                Reply::Bulk(b"k".to_vec()),
                Reply::Int(5),
                Reply::Bulk(Vec::new()),
                Reply::Int(7),
            ]
        };
        let mut items = job("a");
        items.extend(job("b"));
        items.extend([Reply::Int(0), Reply::Int(0)]);
        let mut out = Claimed::default();
        assert_eq!(parse_claimed(Reply::Array(items), &mut out).unwrap(), 2);
        let a = &out.jobs[0];
        assert_eq!((a.id.as_str(), a.payload.as_slice()), ("a", &b"data"[..]));
        assert_eq!((a.token, a.attempts, a.max_attempts), (3, 2, 5));
        assert_eq!(a.group.as_ref().map(|g| g.as_str()), Some("g"));
        assert_eq!(a.kind.as_deref(), Some("k"));
        assert_eq!(a.wait, Some(Duration::from_millis(7)));
        assert_eq!(out.jobs[1].id.as_str(), "b");
        assert!(out.wait.is_none());
        let short = Reply::Array(vec![Reply::Int(0)]);
        assert!(parse_claimed(short, &mut Claimed::default()).is_err());
    }
}
