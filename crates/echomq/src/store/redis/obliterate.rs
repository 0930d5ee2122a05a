//! obliterate (`scripts/obliterate.lua`): every key of the queue deleted in chunks
//! ([`super::drain::drain_chunk`]), then its registration in `emq:queues`.

use redis::Value;

use super::args::num;
use super::drain::drain_chunk;
use super::RedisStore;
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName, QUEUES_KEY};
use crate::store::{Obliterated, CHUNK_DEFAULT};

pub(super) async fn obliterate(store: &RedisStore, queue: &QueueName, force: bool) -> Result<Obliterated> {
    let k = QueueKeys::new(queue);
    let keys = vec![
        k.active(),
        k.obliterating(),
        k.pending(),
        k.scheduled(),
        k.dead(),
        k.completed(),
        k.groups(),
    ];
    let removed = drain_chunk(
        store,
        &store.scripts.obliterate,
        keys,
        k.base(),
        vec![num(u8::from(force)), num(CHUNK_DEFAULT)],
    )
    .await?;
    if removed > u64::MAX / 2 {
        return Ok(Obliterated::Active {
            active: u64::MAX - removed,
        });
    }
    // the registration goes with the queue's last key (the last chunk deleted `registered`). An
    // enqueue that landed after the last chunk (the mark gone) began the queue's next life and
    // wrote its `registered`; its client's SADD may come before this SREM, which would undo it and
    // leave the new jobs in a queue no tool lists: the key says so, and the queue is registered
    // again
    let mut conn = store.conn().await?;
    let (recreated,): (bool,) = redis::pipe()
        .cmd("SREM")
        .arg(QUEUES_KEY)
        .arg(queue.as_str())
        .ignore()
        .cmd("EXISTS")
        .arg(k.registered())
        .query_async(&mut conn)
        .await
        .map_err(|e| store.error("obliterate", e))?;
    if recreated {
        redis::cmd("SADD")
            .arg(QUEUES_KEY)
            .arg(queue.as_str())
            .query_async::<Value>(&mut conn)
            .await
            .map_err(|e| store.error("obliterate", e))?;
    }
    Ok(Obliterated::Done { removed })
}
