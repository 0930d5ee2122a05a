//! The twin of `scripts/discard.lua`: fenced; the holder gives up on the job: dead now (metrics
//! failed), the reason as last_error. A lane job frees its slot. Reads first, as the script: the
//! row, its group, then the writes.

use super::common::{bury, fence_held, lane_leave, lane_read, paused_read, wake, Count};
use super::db::Db;
use crate::error::Result;
use crate::store::{Discarded, Settled};

pub(crate) fn discard(db: &Db, id: &str, token: u64, error: &str, recmax: i64) -> Result<Discarded> {
    let held = match fence_held(db, id, token)? {
        Ok(held) => held,
        Err(Settled::Gone) => return Ok(Discarded::Gone),
        Err(_) => return Ok(Discarded::Stale),
    };
    let g = held.group.as_deref();
    let (mut lane, mut paused) = (None, false);
    if let Some(g) = g {
        lane = Some(lane_read(db, g, Count::Any)?);
        paused = paused_read(db)?;
    }
    if !db.zrem("active", id)? {
        return Ok(Discarded::Stale);
    }
    bury(db, id, error)?;
    if let (Some(g), Some(s)) = (g, lane.as_mut()) {
        let pushed = lane_leave(db, g, s)?;
        wake(db, pushed, paused)?;
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
    db.notify(held.waited.as_deref(), id);
    Ok(Discarded::Dead)
}
