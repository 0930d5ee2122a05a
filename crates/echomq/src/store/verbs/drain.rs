//! drain (`scripts/drain.lua`), and the chunked cursor loop it shares with obliterate.

use super::args::num;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::scripts::Script;
use crate::store::CHUNK_DEFAULT;

pub(crate) async fn drain(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<u64> {
    let k = QueueKeys::new(queue);
    drain_chunk(
        store,
        &store.scripts().drain,
        vec![k.pending(), k.scheduled(), k.groups()],
        k.base(),
        vec![num(CHUNK_DEFAULT)],
    )
    .await
}

/// Calls `script` with ARGV `base, mid…, cursor`, chunk after chunk, until a reply says finished;
/// returns the rows removed in all. A refusal (`{-1, active count, 0}`: obliterate with active
/// jobs, not forced) returns `u64::MAX - active count`.
pub(crate) async fn drain_chunk(
    store: &(impl Engine + ?Sized),
    script: &Script,
    keys: Vec<String>,
    base: &str,
    mid: Vec<Vec<u8>>,
) -> Result<u64> {
    let mut cursor = b"0".to_vec();
    let mut total = 0u64;
    loop {
        let mut args = vec![base.as_bytes().to_vec()];
        args.extend(mid.iter().cloned());
        args.push(cursor.clone());
        let v = store.run(script, &keys, args).await?;
        let [removed, next, finished] = reply::tuple(script.name, v)?;
        let removed = reply::int(script.name, &removed)?;
        if removed < 0 {
            return Ok(u64::MAX - reply::int(script.name, &next)?.max(0) as u64);
        }
        total += removed as u64;
        cursor = reply::bytes(script.name, next)?;
        if reply::int(script.name, &finished)? == 1 {
            return Ok(total);
        }
    }
}
