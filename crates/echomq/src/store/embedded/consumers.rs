//! The twin of scripts/consumers.lua, on the registry's file (`registry.rs`): the entries not past
//! their deadline, at most 1000.

use rusqlite::{params, Connection};

use super::registry::now_ms;
use super::sql_error;
use crate::error::Result;
use crate::registry::{self, ConsumerEntry, CONSUMERS_LISTED_MAX};

pub(crate) fn consumers(conn: &Connection, q: &str) -> Result<Vec<ConsumerEntry>> {
    let e = |e| sql_error("consumers", e);
    let mut stmt = conn
        .prepare_cached(
            "SELECT id, deadline, entry FROM emq_consumers WHERE queue = ?1 AND deadline > ?2 \
             ORDER BY deadline LIMIT ?3",
        )
        .map_err(e)?;
    let rows = stmt
        .query_map(params![q, now_ms(), CONSUMERS_LISTED_MAX as i64], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?, r.get::<_, String>(2)?))
        })
        .map_err(e)?;
    let mut out = Vec::new();
    for row in rows {
        let (id, deadline, text) = row.map_err(e)?;
        if let Some(entry) = registry::decode(id, deadline, &text) {
            out.push(entry);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}
