//! reap (`scripts/reap.lua`): lapsed leases back to ready, each having used the attempt its claim
//! took, or with `max_redeliveries` given that attempt back and counted against that budget; its
//! call is also the round's `Recovery::Reap` and `Recovery::Redeliver` leg.

use crate::store::reply::Reply;

use super::args::num;
use super::Call;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::positive;

pub(crate) async fn reap(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    limit: u32,
    max_redeliveries: Option<u32>,
) -> Result<u64> {
    positive("limit", limit as u64)?;
    if let Some(m) = max_redeliveries {
        positive("max_redeliveries", m as u64)?;
    }
    let call = reap_call(store, &QueueKeys::new(queue), limit, max_redeliveries);
    parse_reaped(store.run(call.script, &call.keys, call.args).await?)
}

/// One reap script call of at most `limit` leases; `max_redeliveries` `None` sends ARGV[3] empty
/// (no budget: a lapse keeps its attempt used).
pub(crate) fn reap_call<'a>(
    store: &'a (impl Engine + ?Sized),
    k: &QueueKeys,
    limit: u32,
    max_redeliveries: Option<u32>,
) -> Call<'a> {
    Call {
        script: &store.scripts().reap,
        keys: vec![k.active(), k.pending()],
        args: vec![
            k.base().as_bytes().to_vec(),
            num(limit),
            max_redeliveries.map(num).unwrap_or_default(),
        ],
    }
}

/// How many leases went back to ready.
pub(crate) fn parse_reaped(v: Reply) -> Result<u64> {
    Ok(reply::int("reap", &v)?.max(0) as u64)
}
