//! obliterate (`scripts/obliterate.lua`): every key of the queue deleted in chunks
//! ([`super::drain::drain_chunk`]), then its registration in `emq:queues`.

use crate::store::reply::Reply;

use super::args::{num, words};
use super::drain::drain_chunk;
use super::Engine;
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName, QUEUES_KEY};
use crate::store::{Obliterated, CHUNK_DEFAULT};

pub(crate) async fn obliterate(store: &(impl Engine + ?Sized), queue: &QueueName, force: bool) -> Result<Obliterated> {
    let k = QueueKeys::new(queue);
    let keys = vec![
        k.active(),
        k.obliterating(),
        k.pending(),
        k.scheduled(),
        k.dead(),
        k.completed(),
        k.groups(),
        k.cancelled(),
    ];
    let removed = drain_chunk(
        store,
        &store.scripts().obliterate,
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
    // (two commands, in this order: emq:queues has a slot of its own on a cluster)
    let srem = words(["SREM", QUEUES_KEY, queue.as_str()]);
    first_error(store.commands("obliterate", QUEUES_KEY, vec![srem]).await?)?;
    let exists = words(["EXISTS", &k.registered()]);
    let recreated = first_error(store.commands("obliterate", &k.registered(), vec![exists]).await?)?;
    if matches!(recreated, Some(Reply::Int(n)) if n > 0) {
        let sadd = words(["SADD", QUEUES_KEY, queue.as_str()]);
        first_error(store.commands("obliterate", QUEUES_KEY, vec![sadd]).await?)?;
    }
    Ok(Obliterated::Done { removed })
}

/// The last reply of `replies`, or the first error among them.
fn first_error(replies: Vec<Result<Reply>>) -> Result<Option<Reply>> {
    let mut last = None;
    for r in replies {
        last = Some(r?);
    }
    Ok(last)
}
