//! The twin of `scripts/discard.lua`: fenced; the holder gives up on the job: dead now (metrics
//! failed), the reason as last_error. A lane job frees its slot.

use super::common::{bury, fence_held, leave_lane};
use super::db::Db;
use crate::error::Result;
use crate::store::{Discarded, Settled};

pub(crate) fn discard(db: &Db, id: &str, token: u64, error: &str, recmax: i64) -> Result<Discarded> {
    let held = match fence_held(db, id, token)? {
        Ok(held) => held,
        Err(Settled::Gone) => return Ok(Discarded::Gone),
        Err(_) => return Ok(Discarded::Stale),
    };
    if !db.zrem("active", id)? {
        return Ok(Discarded::Stale);
    }
    bury(db, id, error)?;
    if let Some(g) = held.group.as_deref() {
        leave_lane(db, g)?;
    }
    db.count("failed", 1)?;
    db.record(
        recmax,
        id,
        "dead",
        &held.used.to_string(),
        "error",
        Some(error.as_bytes()),
    )?;
    Ok(Discarded::Dead)
}
