//! The twin of `scripts/trigger_schedule.lua`: one job of a schedule's template now, outside its
//! slots, its id `sched:<name>:run<n>` from the queue's id counter; it becomes the schedule's last job.

use super::common::{flat_step, lane_step, paused_read, wake, Order};
use super::db::Db;
use super::schedule_common::{fields, fire, num, set, Joined, Template};
use crate::error::{Error, Result};

/// The twin of `trigger_schedule.lua`.
pub(crate) fn trigger_schedule(db: &Db, name: &str) -> Result<Option<String>> {
    if db.exists_flag("obliterating")? {
        return Err(Error::Obliterating {
            queue: db.queue().to_string(),
        });
    }
    let f = fields(db, name)?;
    if f.is_empty() {
        return Ok(None);
    }
    let t = Template::read(&f);
    let id = format!("sched:{name}:run{}", db.kv_get("id")?.unwrap_or(0) + 1);
    let mut joined = Joined::default();
    joined.join(db, t.group.as_deref())?;
    let paused = paused_read(db)?;
    let mut order = Order::read(db)?;

    db.kv_incr("id", 1)?;
    fire(db, &id, &t, &mut joined, &mut order)?;
    order.write(db)?;
    let mut wakes = 1;
    match t.group.as_deref() {
        Some(g) => {
            if let Some(s) = joined.lanes.get(g) {
                wakes = lane_step(db, g, s, 1)?;
            }
        }
        None => {
            if let Some(s) = joined.flat.as_mut() {
                flat_step(db, s)?;
            }
        }
    }
    wake(db, wakes, paused)?;
    set(
        db,
        name,
        &[("last_job", id.clone().into_bytes()), ("last_fire", num(db.now()))],
    )?;
    Ok(Some(id))
}
