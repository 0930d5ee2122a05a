//! The twin of `scripts/reap.lua`: recovery without a token, guarded by the lease deadline: up to
//! `limit` lapsed leases go back to ready at the front (flat: `pending` at score 0; a lane job: its
//! lane's head, in lapse order, its slot freed and the ring step), metrics reaped, no stall
//! counting. A missing row is dropped from `active`; a row not in state active goes dead naming the
//! defect. Replies how many went back to ready. Reads first, as the script: the lapsed ids, their
//! rows, their groups and the flat set, then the writes.

use rusqlite::{params, OptionalExtension};

use super::common::{bury, flat_read, flat_ready, flat_step, lane_front, lane_leave, paused_read, wake, Count, Lanes};
use super::db::{text, Db};
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
    // HMGET state, group of every row, and what their moves need of their groups and the flat set
    let (mut lanes, mut flat) = (Lanes::default(), None);
    let mut rows = Vec::with_capacity(lapsed.len());
    for id in &lapsed {
        let (state, g, waited) = state_group(db, id)?;
        if let Some(g) = g.as_deref() {
            lanes.read(db, g, Count::Any)?;
        }
        if state.as_deref() == Some("active") && g.is_none() && flat.is_none() {
            flat = Some(flat_read(db)?);
        }
        rows.push((state, g, waited));
    }
    let paused = paused_read(db)?;

    for id in &lapsed {
        db.zrem("active", id)?;
    }
    // walked backwards: each LPUSH puts a job ahead of the one lapsed after it, so recovered lane
    // jobs keep their order at the lane's front
    let (mut back, mut freed, mut failed) = (0i64, 0i64, 0i64);
    for (id, (state, g, waited)) in lapsed.iter().zip(rows).rev() {
        let lane = match g.as_deref() {
            Some(g) => lanes.get(g).map(|s| (g, s)),
            None => None,
        };
        match state.as_deref() {
            Some("active") => {
                match (lane, flat.as_mut()) {
                    (Some((g, s)), _) => {
                        lane_front(db, g, s, id)?;
                        lane_leave(db, g, s)?;
                    }
                    (None, Some(s)) => flat_ready(db, s, id, 0)?,
                    (None, None) => {}
                }
                back += 1;
            }
            Some(state) => {
                bury(db, id, &format!("malformed row: state {state} in active"))?;
                db.notify(waited.as_deref(), id);
                // the slot invariant, and the ring step: the freed slot may make the lane's next
                // job claimable
                if let Some((g, s)) = lane {
                    freed += lane_leave(db, g, s)?;
                }
                failed += 1;
            }
            // a missing row: only dropped from active
            None => {}
        }
    }
    if let Some(s) = flat.as_mut() {
        flat_step(db, s)?;
    }
    wake(db, back + freed, paused)?;
    db.count("failed", failed)?;
    db.count("reaped", back)?;
    Ok(back as u64)
}

/// HMGET job:<id> state group waited — without reading the payload.
fn state_group(db: &Db, id: &str) -> Result<(Option<String>, Option<String>, Option<String>)> {
    db.sql()
        .prepare_cached("SELECT state, grp, waited FROM emq_jobs WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| Ok((text(r, 0)?, text(r, 1)?, text(r, 2)?)))
                .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
