//! extend_lock (`scripts/extend_lock.lua`): the holder renews its lease. Its stale answer is an
//! error reply (`EMQSTALE`: the script's raw EVAL contract keeps it), read here as
//! [`Extended::Stale`] before the store's error mapping sees it.

use std::time::Duration;

use redis::{ErrorKind, Value};

use super::args::{ms, num};
use super::{reply, RedisStore};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{millis, positive, Extended};

pub(super) async fn extend_lock(
    store: &RedisStore,
    queue: &QueueName,
    id: &JobId,
    token: u64,
    lease: Duration,
) -> Result<Extended> {
    positive("lease", millis("lease", lease)?)?;
    let k = QueueKeys::new(queue);
    let cmd = RedisStore::evalsha(
        &store.scripts.extend_lock,
        &[k.active(), k.job(id)],
        vec![id.as_str().as_bytes().to_vec(), num(token), ms(lease)],
    );
    let mut conn = store.conn.clone();
    let mut result = cmd.query_async::<Value>(&mut conn).await;
    if matches!(&result, Err(e) if e.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)) {
        store.load(&store.scripts.extend_lock).await?;
        result = cmd.query_async::<Value>(&mut conn).await;
    }
    match result {
        Ok(v) => match reply::int("extend_lock", &v)? {
            1 => Ok(Extended::Ok),
            -1 => Ok(Extended::Gone),
            _ => Err(reply::protocol("extend_lock", &v)),
        },
        Err(e) if e.code() == Some("EMQSTALE") => Ok(Extended::Stale),
        Err(e) => Err(store.error("extend_lock", e)),
    }
}
