//! The twin of scripts/remove.lua: an operator deletes a job wherever it is (a waited job
//! announced). An active job only
//! with force (then its lane slot is freed and the ring step runs, keeping the slot invariant).
//! Reads first, as the script: the row and, for a forced lane job, its group, then the writes.

use super::common::{self, lane_leave, lane_read, paused_read, wake, Count};
use super::db::Db;
use crate::error::Result;
use crate::store::Removed;

pub(crate) fn remove(db: &Db, id: &str, force: bool) -> Result<Removed> {
    let Some(row) = db.row(id)? else {
        return Ok(Removed::Gone);
    };
    let Some(state) = row.state.as_deref() else {
        return Ok(Removed::Gone);
    };
    let g = row.group.as_deref();
    match state {
        "active" => {
            if !force {
                return Ok(Removed::Active);
            }
            let (mut lane, mut paused) = (None, false);
            if let Some(g) = g {
                lane = Some(lane_read(db, g, Count::Any)?);
                paused = paused_read(db)?;
            }
            if db.zrem("active", id)? {
                if let (Some(g), Some(s)) = (g, lane.as_mut()) {
                    let pushed = lane_leave(db, g, s)?;
                    wake(db, pushed, paused)?;
                }
            }
        }
        "pending" | "scheduled" => {
            common::unwait(db, id, state, g)?;
        }
        "dead" => {
            db.zrem("dead", id)?;
        }
        _ => {
            // a finished row
            db.zrem("completed", id)?;
            if state == "cancelled" {
                db.zrem("cancelled", id)?;
            }
        }
    }
    db.del_row(id)?;
    db.notify(row.waited.as_deref(), id);
    Ok(Removed::Removed)
}
