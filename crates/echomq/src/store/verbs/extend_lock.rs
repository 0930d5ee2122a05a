//! extend_lock (`scripts/extend_lock.lua`): the holder renews its lease. Its stale answer is an
//! error reply (`EMQSTALE`: the script's raw EVAL contract keeps it), read here as
//! [`Extended::Stale`] before the store's error mapping sees it.

use std::time::Duration;

use super::args::{ms, num};
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::reply::Reply;
use crate::store::{millis, positive, Extended};

pub(crate) async fn extend_lock(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    token: u64,
    lease: Duration,
) -> Result<Extended> {
    positive("lease", millis("lease", lease)?)?;
    let k = QueueKeys::new(queue);
    let result = store
        .run_raw(
            &store.scripts().extend_lock,
            &[k.active(), k.job(id)],
            vec![id.as_str().as_bytes().to_vec(), num(token), ms(lease)],
        )
        .await?;
    match result {
        Reply::Error(text) if text.starts_with("EMQSTALE") => Ok(Extended::Stale),
        Reply::Error(text) => Err(
            reply::script_error("extend_lock", &text).unwrap_or(crate::Error::Store {
                verb: "extend_lock",
                reason: text,
            }),
        ),
        v => match reply::int("extend_lock", &v)? {
            1 => Ok(Extended::Ok),
            -1 => Ok(Extended::Gone),
            _ => Err(reply::protocol("extend_lock", &v)),
        },
    }
}
