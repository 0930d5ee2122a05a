//! The twin of scripts/unregister_consumer.lua, on the registry's file (`registry.rs`).

use rusqlite::{params, Connection};

use super::sql_error;
use crate::error::Result;

pub(crate) fn unregister_consumer(conn: &Connection, q: &str, id: &str) -> Result<bool> {
    conn.prepare_cached("DELETE FROM emq_consumers WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| s.execute(params![q, id]))
        .map(|n| n > 0)
        .map_err(|e| sql_error("unregister_consumer", e))
}
