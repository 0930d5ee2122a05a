//! The twin of `scripts/release.lua`: fenced; the holder gives the job back without using an
//! attempt. The row's `free` + 1 (its attempts, the fencing token, stay, so the released holder's
//! late settle is refused as stale). Delay 0: ready at once at the front of its set (flat: pending
//! at score 0; a lane job: its lane's head); else scheduled until now + delay. A lane job frees its
//! slot with the ring step. A wake per job made claimable.

use super::common::{fence_held, free_slot, lane, lua_number, ring_step, ring_step_flat};
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::Settled;

pub(crate) fn release(db: &Db, id: &str, token: u64, delay_ms: i64) -> Result<Settled> {
    let held = match fence_held(db, id, token)? {
        Ok(held) => held,
        Err(refused) => return Ok(refused),
    };
    if !db.zrem("active", id)? {
        return Ok(Settled::Stale);
    }
    // a malformed count (by hand) starts again from 0
    let free = held.free.as_deref().and_then(lua_number).map_or(0, |f| f as i64);
    db.hset(id, &[Field::Free(free + 1)])?;
    let g = held.group.as_deref();
    let wakes = if delay_ms > 0 {
        let due = db.now() + delay_ms;
        db.hset(id, &[Field::State("scheduled"), Field::RunAt(due)])?;
        db.zadd("scheduled", due, id)?;
        match g {
            Some(g) => {
                free_slot(db, g)?;
                i64::from(ring_step(db, g)?)
            }
            None => 0,
        }
    } else {
        db.hset(id, &[Field::State("pending")])?;
        match g {
            Some(g) => {
                db.lpush(&lane(g), id)?;
                free_slot(db, g)?;
                ring_step(db, g)?;
            }
            None => {
                db.zadd("pending", 0, id)?;
                ring_step_flat(db)?;
            }
        }
        1
    };
    db.wake(wakes)?;
    Ok(Settled::Ok)
}
