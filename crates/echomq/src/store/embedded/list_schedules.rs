//! The twin of `scripts/list_schedules.lua`: every schedule of the queue, by name.

use super::db::Db;
use super::schedule_common::fields;
use crate::error::Result;
use crate::schedule::ScheduleInfo;

/// The twin of `list_schedules.lua`.
pub(crate) fn list_schedules(db: &Db) -> Result<Vec<ScheduleInfo>> {
    let mut out = Vec::new();
    for name in db.zrange("schedules", 0, -1, false)? {
        let f = fields(db, &name)?;
        if !f.is_empty() {
            out.push(ScheduleInfo::read(&name, &f)?);
        }
    }
    Ok(out)
}
