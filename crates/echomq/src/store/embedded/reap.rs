//! The twin of `scripts/reap.lua`: recovery without a token, guarded by the lease deadline: up to
//! `limit` lapsed leases go back to ready at the front (`pending` or its lane at rank 0; a lane job's
//! slot freed and the ring step), metrics reaped. Without
//! `max_redeliveries` a lapse has used the attempt its claim took (claim buries a job with none
//! left: "lease expired on the last attempt"); with it, each lapse gives that attempt back (its
//! `free` raised by one) and is counted (its `stalled` raised by one), and a job whose count passes
//! the budget goes dead ("lease lapsed N times: its worker died or stalled each time"). A missing
//! row is dropped from `active`; a row not in state active goes dead naming the defect. Replies how
//! many went back to ready. Reads first, as the script: the lapsed ids, their rows, their groups
//! and the flat set, then the writes.

use rusqlite::{params, OptionalExtension};

use super::common::{
    bury, flat_read, flat_ready, flat_step, lane_front, lane_leave, lua_number, number, paused_read, wake, Count, Lanes,
};
use super::db::{text, Db, Field};
use crate::error::{Error, Result};

pub(crate) fn reap(db: &Db, limit: i64, max_redeliveries: Option<i64>) -> Result<u64> {
    if limit < 1 {
        return Err(Error::Store {
            verb: "reap",
            reason: "reap: limit".into(),
        });
    }
    if max_redeliveries.is_some_and(|m| m < 1) {
        return Err(Error::Store {
            verb: "reap",
            reason: "reap: max_redeliveries".into(),
        });
    }
    let now = db.now();
    let lapsed = db.zrange_upto("active", now, limit)?;
    if lapsed.is_empty() {
        return Ok(0);
    }
    // HMGET state, group, waited, stalled, free of every row, and what their moves need of their
    // groups and the flat set
    let (mut lanes, mut flat) = (Lanes::default(), None);
    let mut rows = Vec::with_capacity(lapsed.len());
    for id in &lapsed {
        let row = state_group(db, id)?;
        let (state, g) = (&row.state, &row.group);
        if let Some(g) = g.as_deref() {
            lanes.read(db, g, Count::Any)?;
        }
        if state.as_deref() == Some("active") && g.is_none() && flat.is_none() {
            flat = Some(flat_read(db)?);
        }
        rows.push(row);
    }
    let paused = paused_read(db)?;

    for id in &lapsed {
        db.zrem("active", id)?;
    }
    // walked backwards: each LPUSH puts a job ahead of the one lapsed after it, so recovered lane
    // jobs keep their order at the lane's front
    let (mut back, mut freed, mut failed) = (0i64, 0i64, 0i64);
    for (id, row) in lapsed.iter().zip(rows).rev() {
        let Look {
            state,
            group: g,
            waited,
            stalled,
            free,
        } = row;
        let lane = match g.as_deref() {
            Some(g) => lanes.get(g).map(|s| (g, s)),
            None => None,
        };
        // under a budget: the lapses counted with this one, and the attempt its claim took given
        // back (a malformed count, by hand, starts again from 0)
        let lapses = max_redeliveries.map(|_| number(stalled.as_deref(), 0).unwrap_or(0) + 1);
        let refund = || {
            let free = free.as_deref().and_then(lua_number).map_or(0, |f| f as i64);
            lapses.map(|n| [Field::Stalled(n), Field::Free(free + 1)])
        };
        match state.as_deref() {
            Some("active") if lapses.zip(max_redeliveries).is_some_and(|(n, m)| n > m) => {
                if let Some(fields) = refund() {
                    db.hset(id, &fields)?;
                }
                let n = lapses.unwrap_or_default();
                bury(
                    db,
                    id,
                    &format!("lease lapsed {n} times: its worker died or stalled each time"),
                )?;
                db.notify(waited.as_deref(), id);
                if let Some((g, s)) = lane {
                    freed += lane_leave(db, g, s)?;
                }
                failed += 1;
            }
            Some("active") => {
                if let Some(fields) = refund() {
                    db.hset(id, &fields)?;
                }
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

/// HMGET job:<id> state group waited stalled free — without reading the payload.
#[derive(Default)]
struct Look {
    state: Option<String>,
    group: Option<String>,
    waited: Option<String>,
    stalled: Option<String>,
    free: Option<String>,
}

fn state_group(db: &Db, id: &str) -> Result<Look> {
    db.sql()
        .prepare_cached("SELECT state, grp, waited, stalled, free FROM emq_jobs WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| {
                Ok(Look {
                    state: text(r, 0)?,
                    group: text(r, 1)?,
                    waited: text(r, 2)?,
                    stalled: text(r, 3)?,
                    free: text(r, 4)?,
                })
            })
            .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
