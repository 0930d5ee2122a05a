//! The twin of `scripts/trigger_schedule.lua`: one job of a schedule's template now, outside its
//! slots, its id `sched:<name>:run<n>` from the queue's id counter (past values whose id a caller
//! took, the next 16 at most); it becomes the schedule's last job.

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
    // the next counter values in turn, past any a caller took as its own id (at most 16)
    let counter = db.kv_get("id")?.unwrap_or(0);
    let mut taken = None;
    for k in 1..=16 {
        let candidate = format!("sched:{name}:run{}", counter + k);
        if !db.row_exists(&candidate)? {
            taken = Some((k, candidate));
            break;
        }
    }
    let Some((step, id)) = taken else {
        return Err(Error::Store {
            verb: "trigger_schedule",
            reason: "trigger_schedule: the next 16 trigger ids are taken".into(),
        });
    };
    let mut joined = Joined::default();
    joined.join(db, t.group.as_deref())?;
    let paused = paused_read(db)?;
    let mut order = Order::read(db)?;

    db.kv_incr("id", step)?;
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
