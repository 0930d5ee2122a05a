//! complete_cancelled (`scripts/complete_cancelled.lua`): complete's settle
//! ([`super::complete::finish`]) with the cancel reason as its value.

use super::complete::finish;
use super::Engine;
use crate::error::Result;
use crate::keyspace::{JobId, QueueName};
use crate::store::{SettleOptions, Settled};

pub(crate) async fn complete_cancelled(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    token: u64,
    reason: Option<&str>,
    settle: SettleOptions,
) -> Result<Settled> {
    finish(
        store,
        &store.scripts().complete_cancelled,
        queue,
        id,
        token,
        reason.map(str::as_bytes),
        settle,
    )
    .await
}
