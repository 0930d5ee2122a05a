//! The twin of `scripts/remove_schedule.lua`: a schedule deleted, its name and due entry with it;
//! the jobs it fired stay.

use super::db::Db;
use super::schedule_common::del;
use crate::error::Result;

/// The twin of `remove_schedule.lua`.
pub(crate) fn remove_schedule(db: &Db, name: &str) -> Result<bool> {
    let existed = db.zscore("schedules", name)?.is_some();
    del(db, name, None)?;
    db.zrem("schedules", name)?;
    db.zrem("schedule_due", name)?;
    Ok(existed)
}
