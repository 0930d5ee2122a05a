//! promote (`scripts/promote.lua`): due scheduled jobs to ready; its call is also the round's
//! promote leg.

use std::time::Duration;

use redis::Value;

use super::args::num;
use super::connection::Call;
use super::{reply, RedisStore};
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::{positive, Promoted};

pub(super) async fn promote(store: &RedisStore, queue: &QueueName, limit: u32) -> Result<Promoted> {
    positive("limit", limit as u64)?;
    let call = promote_call(store, &QueueKeys::new(queue), limit);
    parse_promoted(store.run(call.script, &call.keys, call.args).await?)
}

/// One promote script call of at most `limit` jobs.
pub(super) fn promote_call<'a>(store: &'a RedisStore, k: &QueueKeys, limit: u32) -> Call<'a> {
    Call {
        script: &store.scripts.promote,
        keys: vec![k.scheduled(), k.pending(), k.order()],
        args: vec![k.base().as_bytes().to_vec(), num(limit)],
    }
}

/// How many moved, and when the next scheduled job is due (none left: `None`).
pub(super) fn parse_promoted(v: Value) -> Result<Promoted> {
    let [moved, next] = reply::tuple("promote", v)?;
    let next = reply::int("promote", &next)?;
    Ok(Promoted {
        moved: reply::int("promote", &moved)?.max(0) as u64,
        next_due_in: (next >= 0).then(|| Duration::from_millis(next as u64)),
    })
}
