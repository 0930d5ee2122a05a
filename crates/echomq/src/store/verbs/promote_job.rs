//! promote_job (`scripts/promote_job.lua`): one scheduled job made due now.

use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::PromotedJob;

pub(crate) async fn promote_job(store: &(impl Engine + ?Sized), queue: &QueueName, id: &JobId) -> Result<PromotedJob> {
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().promote_job,
            &[k.job(id), k.scheduled()],
            vec![k.base().as_bytes().to_vec(), id.as_str().as_bytes().to_vec()],
        )
        .await?;
    match reply::int("promote_job", &v)? {
        1 => Ok(PromotedJob::Promoted),
        0 => Ok(PromotedJob::NotScheduled),
        -1 => Ok(PromotedJob::Gone),
        _ => Err(reply::protocol("promote_job", &v)),
    }
}
