//! The twin of scripts/register_consumer.lua, on the registry's file (`registry.rs`): on a first
//! registration up to ten lapsed entries deleted, then the consumer's entry written with its
//! deadline; answers the beat.

use rusqlite::{params, Connection};

use super::registry::now_ms;
use super::sql_error;
use crate::error::Result;

pub(crate) fn register_consumer(
    conn: &Connection,
    q: &str,
    id: &str,
    entry: &str,
    ttl_ms: i64,
    first: bool,
) -> Result<i64> {
    let e = |e| sql_error("register_consumer", e);
    let now = now_ms();
    let tx = conn.unchecked_transaction().map_err(e)?;
    if first {
        tx.prepare_cached(
            "DELETE FROM emq_consumers WHERE queue = ?1 AND id IN \
             (SELECT id FROM emq_consumers WHERE queue = ?1 AND deadline <= ?2 ORDER BY deadline LIMIT 10)",
        )
        .and_then(|mut s| s.execute(params![q, now]))
        .map_err(e)?;
    }
    tx.prepare_cached("INSERT OR REPLACE INTO emq_consumers (queue, id, deadline, entry) VALUES (?1, ?2, ?3, ?4)")
        .and_then(|mut s| s.execute(params![q, id, now + ttl_ms, entry]))
        .map_err(e)?;
    tx.commit().map_err(e)?;
    Ok(now)
}
