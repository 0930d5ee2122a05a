//! update_data (`scripts/update_data.lua`): the holder replaces its job's payload.

use super::args::num;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{check_payload, Settled};

pub(crate) async fn update_data(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    token: u64,
    payload: &[u8],
) -> Result<Settled> {
    check_payload(payload.len(), store.payload_limit())?;
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().update_data,
            &[k.active(), k.job(id)],
            vec![id.as_str().as_bytes().to_vec(), num(token), payload.to_vec()],
        )
        .await?;
    reply::settled("update_data", &v)
}
