//! remove (`scripts/remove.lua`): one job deleted, an active one only when forced.

use super::args::num;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::Removed;

pub(crate) async fn remove(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    force: bool,
) -> Result<Removed> {
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().remove,
            &[k.job(id), k.active()],
            vec![
                k.base().as_bytes().to_vec(),
                id.as_str().as_bytes().to_vec(),
                num(u8::from(force)),
            ],
        )
        .await?;
    match reply::int("remove", &v)? {
        1 => Ok(Removed::Removed),
        0 => Ok(Removed::Active),
        -1 => Ok(Removed::Gone),
        _ => Err(reply::protocol("remove", &v)),
    }
}
