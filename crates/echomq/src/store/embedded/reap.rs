//! The twin of `scripts/reap.lua`: recovery without a token, guarded by the lease deadline: up to
//! `limit` lapsed leases go back to ready at the front (flat: `pending` at score 0; a lane job: its
//! lane's head, in lapse order, its slot freed and the ring step), metrics reaped, no stall
//! counting. A missing row is dropped from `active`; a row not in state active goes dead naming the
//! defect. Replies how many went back to ready.

use rusqlite::{params, OptionalExtension};

use super::common::{bury, free_slot, lane, ring_step, ring_step_flat};
use super::db::{text, Db, Field};
use crate::error::{Error, Result};

pub(crate) fn reap(db: &Db, limit: i64) -> Result<u64> {
    if limit < 1 {
        return Err(Error::Store {
            verb: "reap",
            reason: "reap: limit".into(),
        });
    }
    let now = db.now();
    let lapsed = db.zrange_upto("active", now, limit)?;
    if lapsed.is_empty() {
        return Ok(0);
    }
    // HMGET state, group of every row first
    let mut rows = Vec::with_capacity(lapsed.len());
    for id in &lapsed {
        rows.push(state_group(db, id)?);
    }
    for id in &lapsed {
        db.zrem("active", id)?;
    }
    // walked backwards: each LPUSH puts a job ahead of the one lapsed after it, so recovered lane
    // jobs keep their order at the lane's front
    let (mut back, mut freed, mut flat) = (0i64, 0i64, false);
    for (id, (state, g)) in lapsed.iter().zip(rows).rev() {
        match state.as_deref() {
            Some("active") => {
                db.hset(id, &[Field::State("pending")])?;
                match g.as_deref() {
                    Some(g) => {
                        free_slot(db, g)?;
                        db.lpush(&lane(g), id)?;
                        ring_step(db, g)?;
                    }
                    None => {
                        db.zadd("pending", 0, id)?;
                        flat = true;
                    }
                }
                back += 1;
            }
            Some(state) => {
                bury(db, id, &format!("malformed row: state {state} in active"))?;
                // the slot invariant, and the ring step: the freed slot may make the lane's next
                // job claimable
                if let Some(g) = g.as_deref() {
                    free_slot(db, g)?;
                    freed += i64::from(ring_step(db, g)?);
                }
                db.count("failed", 1)?;
            }
            // a missing row: only dropped from active
            None => {}
        }
    }
    if flat {
        ring_step_flat(db)?;
    }
    db.wake(back + freed)?;
    db.count("reaped", back)?;
    Ok(back as u64)
}

/// HMGET job:<id> state group — without reading the payload.
fn state_group(db: &Db, id: &str) -> Result<(Option<String>, Option<String>)> {
    db.sql()
        .prepare_cached("SELECT state, grp FROM emq_jobs WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| Ok((text(r, 0)?, text(r, 1)?)))
                .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
