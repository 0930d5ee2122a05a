//! The twin of `scripts/refill_schedule.lua`: a refill's slots appended while the schedule keeps
//! the request's version and cursor (and is not paused), its omitted slots added to the backlog.

use super::db::Db;
use super::schedule_common::{fields, num, number, set, text};
use crate::error::Result;
use crate::schedule::{self, RefillRequest};

/// The twin of `refill_schedule.lua`.
pub(crate) fn refill_schedule(db: &Db, req: &RefillRequest, omitted: u64, slots: &[i64]) -> Result<bool> {
    let name = req.name.as_str();
    let f = fields(db, name)?;
    if number(&f, "version") != Some(req.version as i64)
        || number(&f, "cursor") != Some(req.cursor)
        || text(&f, "paused").as_deref() == Some("1")
    {
        return Ok(false);
    }
    let mut all = schedule::slots_read(&text(&f, "slots").unwrap_or_default());
    all.extend(slots.iter().copied().filter(|s| *s > req.cursor));
    let cursor = slots.last().copied().unwrap_or(req.cursor);
    let backlog = number(&f, "backlog").unwrap_or(0) + omitted as i64;
    set(
        db,
        name,
        &[
            ("slots", schedule::slots_text(&all).into_bytes()),
            ("cursor", num(cursor)),
            ("backlog", num(backlog)),
        ],
    )?;
    if let Some(first) = all.first() {
        db.zadd("schedule_due", *first, name)?;
    }
    Ok(true)
}
