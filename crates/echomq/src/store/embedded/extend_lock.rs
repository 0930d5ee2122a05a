//! The twin of `scripts/extend_lock.lua`: re-scores one lease, token-fenced, on the store's clock —
//! the lease is the active score. Gone when there is no row; Stale when the row is not active, the
//! token is not its attempts, or the id is not in `active` (never re-added: a settled or reaped job
//! stays out of `active`). Reads first, as the script: the row and the membership, then the write.

use rusqlite::{params, OptionalExtension};

use super::db::{text, Db};
use crate::error::{Error, Result};
use crate::store::Extended;

pub(crate) fn extend_lock(db: &Db, id: &str, token: u64, lease_ms: i64) -> Result<Extended> {
    if lease_ms <= 0 {
        return Err(Error::Store {
            verb: "extend_lock",
            reason: "extend_lock: lease must be > 0".into(),
        });
    }
    // HMGET state attempts (the payload is never read); no state = no row, as in the script
    let (state, attempts) = state_attempts(db, id)?;
    let Some(state) = state else {
        return Ok(Extended::Gone);
    };
    if state != "active"
        || attempts.as_deref() != Some(token.to_string().as_str())
        || db.zscore("active", id)?.is_none()
    {
        return Ok(Extended::Stale);
    }
    db.zadd_xx("active", db.now() + lease_ms, id)?;
    Ok(Extended::Ok)
}

/// The row's (state, attempts), both `None` when there is no row.
fn state_attempts(db: &Db, id: &str) -> Result<(Option<String>, Option<String>)> {
    db.sql()
        .prepare_cached("SELECT state, attempts FROM emq_jobs WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| Ok((text(r, 0)?, text(r, 1)?)))
                .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
