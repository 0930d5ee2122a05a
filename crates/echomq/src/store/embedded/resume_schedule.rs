//! The twin of `scripts/resume_schedule.lua`: a paused schedule's slots dropped under a new version
//! (its cursor now), so the next beat asks for a refill of the slots after now.

use super::common::{paused_read, wake};
use super::db::Db;
use super::schedule_common::{del, fields, number, slots_write, text};
use crate::error::Result;

/// The twin of `resume_schedule.lua`.
pub(crate) fn resume_schedule(db: &Db, name: &str) -> Result<bool> {
    let old = fields(db, name)?;
    if !old.contains_key("timing") {
        return Ok(false);
    }
    if text(&old, "paused").as_deref() != Some("1") {
        return Ok(true);
    }
    let queue_paused = paused_read(db)?;
    let version = db.kv_incr("id", 1)?;
    del(db, name, Some("paused"))?;
    slots_write(db, name, &[], number(&old, "last_slot"), false, version, None)?;
    wake(db, 1, queue_paused)?;
    Ok(true)
}
