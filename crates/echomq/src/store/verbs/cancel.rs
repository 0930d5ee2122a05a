//! cancel (`scripts/cancel.lua`): a waiting job cancelled at once, a running one asked to stop (the
//! request on its row, and published to the queue's consumers).

use super::args::{opt_arg, settle_arg};
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{CancelOutcome, SettleOptions};

pub(crate) async fn cancel(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    reason: Option<&str>,
    settle: SettleOptions,
) -> Result<CancelOutcome> {
    let k = QueueKeys::new(queue);
    let recmax = settle_arg(settle);
    let v = store
        .run(
            &store.scripts().cancel,
            &[k.job(id), k.cancel()],
            vec![
                k.base().as_bytes().to_vec(),
                id.as_str().as_bytes().to_vec(),
                opt_arg(reason.map(str::as_bytes)),
                recmax,
            ],
        )
        .await?;
    match reply::int("cancel", &v)? {
        1 => Ok(CancelOutcome::Cancelled),
        2 => Ok(CancelOutcome::Requested),
        0 => Ok(CancelOutcome::Finished),
        -1 => Ok(CancelOutcome::Gone),
        _ => Err(reply::protocol("cancel", &v)),
    }
}
