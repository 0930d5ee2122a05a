//! The twin of `scripts/upsert_schedule.lua`: a schedule created, or changed in place: its definition
//! written over the old one, its next slots replacing the old ones (a slot already decided never
//! fires again; those already due and not decided are kept, with the missed count), its version
//! from the queue's id counter; its counts, last fire and pause kept.

use super::common::{paused_read, wake};
use super::db::Db;
use super::schedule_common::{fields, number, set, slots_write, text, Carry};
use crate::error::{Error, Result};
use crate::schedule;

/// The twin of `upsert_schedule.lua`. Returns the version.
pub(crate) fn upsert_schedule(db: &Db, name: &str, def: &[(&'static str, Vec<u8>)], slots: &[i64]) -> Result<u64> {
    if db.exists_flag("obliterating")? {
        return Err(Error::Obliterating {
            queue: db.queue().to_string(),
        });
    }
    let old = fields(db, name)?;
    let queue_paused = paused_read(db)?;
    let version = db.kv_incr("id", 1)?;
    set(db, name, def)?;
    let paused = text(&old, "paused").as_deref() == Some("1");
    // the old slots already due and not decided, and the missed count not yet recorded, carried
    let carry = Carry {
        slots: schedule::slots_read(&text(&old, "slots").unwrap_or_default()),
        backlog: number(&old, "backlog").unwrap_or(0),
    };
    slots_write(db, name, slots, number(&old, "last_slot"), paused, version, Some(carry))?;
    db.zadd("schedules", 0, name)?;
    if !paused {
        wake(db, 1, queue_paused)?;
    }
    db.register()?;
    Ok(version.max(0) as u64)
}
