//! The twin of `scripts/pause_schedule.lua`: a schedule fires, and misses, nothing until resumed.

use super::db::Db;
use super::schedule_common::{fields, set};
use crate::error::Result;

/// The twin of `pause_schedule.lua`.
pub(crate) fn pause_schedule(db: &Db, name: &str) -> Result<bool> {
    if fields(db, name)?.is_empty() {
        return Ok(false);
    }
    set(db, name, &[("paused", b"1".to_vec())])?;
    db.zrem("schedule_due", name)?;
    Ok(true)
}
