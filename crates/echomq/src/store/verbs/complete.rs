//! complete (`scripts/complete.lua`), and the holder's settle that finishes a job with an optional
//! value, shared with complete_cancelled.

use super::args::{num, opt_arg, settle_arg};
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::scripts::Script;
use crate::store::{check_payload, SettleOptions, Settled};

pub(crate) async fn complete(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    token: u64,
    output: Option<&[u8]>,
    settle: SettleOptions,
) -> Result<Settled> {
    if let Some(o) = output {
        check_payload(o.len(), store.payload_limit())?;
    }
    finish(store, &store.scripts().complete, queue, id, token, output, settle).await
}

/// complete and complete_cancelled: the holder's settle that finishes a job, with an optional
/// value (the output, or the reason).
pub(crate) async fn finish(
    store: &(impl Engine + ?Sized),
    script: &Script,
    queue: &QueueName,
    id: &JobId,
    token: u64,
    value: Option<&[u8]>,
    settle: SettleOptions,
) -> Result<Settled> {
    let k = QueueKeys::new(queue);
    let recmax = settle_arg(settle);
    let args = vec![
        k.base().as_bytes().to_vec(),
        id.as_str().as_bytes().to_vec(),
        num(token),
        recmax,
        opt_arg(value),
    ];
    let v = store.run(script, &[k.active(), k.job(id)], args).await?;
    reply::settled(script.name, &v)
}
