//! The twin of scripts/remove.lua: an operator deletes a job wherever it is. An active job only
//! with force (then its lane slot is freed and the ring step runs, keeping the slot invariant).

use super::common;
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
            if db.zrem("active", id)? {
                if let Some(g) = g {
                    common::leave_lane(db, g)?;
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
            db.zrem("completed", id)?;
        }
    }
    db.del_row(id)?;
    Ok(Removed::Removed)
}
