//! The twin of `scripts/release.lua`: fenced; the holder gives the job back without using an
//! attempt. The row's `free` + 1 (its attempts, the fencing token, stay, so the released holder's
//! late settle is refused as stale). Delay 0: ready at once at the front of its set (flat: pending
//! at score 0; a lane job: its lane's head); else scheduled until now + delay. A lane job frees its
//! slot with the ring step. A wake per job made claimable. Reads first, as the script: the row, its
//! group or the flat set, then the writes.

use super::common::{
    fence_held, flat_read, flat_ready, flat_step, lane_front, lane_leave, lane_read, lua_number, paused_read, wake,
    Count,
};
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::Settled;

pub(crate) fn release(db: &Db, id: &str, token: u64, delay_ms: i64) -> Result<Settled> {
    let held = match fence_held(db, id, token)? {
        Ok(held) => held,
        Err(refused) => return Ok(refused),
    };
    let g = held.group.as_deref();
    let mut lane = match g {
        Some(g) => Some(lane_read(db, g, Count::Any)?),
        None => None,
    };
    let mut flat = match g {
        None if delay_ms == 0 => Some(flat_read(db)?),
        _ => None,
    };
    let paused = paused_read(db)?;
    if !db.zrem("active", id)? {
        return Ok(Settled::Stale);
    }
    // a malformed count (by hand) starts again from 0
    let free = held.free.as_deref().and_then(lua_number).map_or(0, |f| f as i64);
    db.hset(id, &[Field::Free(free + 1)])?;
    let mut wakes = 0;
    if delay_ms > 0 {
        let due = db.now() + delay_ms;
        db.hset(id, &[Field::State("scheduled"), Field::RunAt(due)])?;
        db.zadd("scheduled", due, id)?;
        if let (Some(g), Some(s)) = (g, lane.as_mut()) {
            wakes = lane_leave(db, g, s)?;
        }
    } else if let (Some(g), Some(s)) = (g, lane.as_mut()) {
        lane_front(db, g, s, id)?;
        lane_leave(db, g, s)?;
        wakes = 1;
    } else if let Some(s) = flat.as_mut() {
        flat_ready(db, s, id, 0)?;
        flat_step(db, s)?;
        wakes = 1;
    }
    wake(db, wakes, paused)?;
    Ok(Settled::Ok)
}
