//! discard (`scripts/discard.lua`): the holder's failure that buries the job at once.

use super::args::{num, settle_arg};
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{Discarded, SettleOptions};

pub(crate) async fn discard(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    token: u64,
    error: &str,
    settle: SettleOptions,
) -> Result<Discarded> {
    let k = QueueKeys::new(queue);
    let recmax = settle_arg(settle);
    let v = store
        .run(
            &store.scripts().discard,
            &[k.active(), k.job(id), k.dead()],
            vec![
                k.base().as_bytes().to_vec(),
                id.as_str().as_bytes().to_vec(),
                num(token),
                error.as_bytes().to_vec(),
                recmax,
            ],
        )
        .await?;
    match reply::int("discard", &v)? {
        2 => Ok(Discarded::Dead),
        0 => Ok(Discarded::Stale),
        -1 => Ok(Discarded::Gone),
        _ => Err(reply::protocol("discard", &v)),
    }
}
