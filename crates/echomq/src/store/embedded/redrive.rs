//! The twin of scripts/redrive.lua: a dead job back to ready (pending or its lane at a fresh rank of its priority;
//! lane: its tail and the ring step), attempts kept (they never go down), its budget raised:
//! `max_attempts` = the attempts it has used (attempts − free) + extra; its stall count cleared. One
//! id, or the oldest dead jobs in a chunk (the store loops). One wake per job made claimable (at
//! most 16). Reads first, as the script: the dead ids, their rows, the groups and the flat set they
//! join, then the writes.

use std::collections::HashMap;

use super::common::{self, flat_read, flat_step, lane_step, paused_read, wake, Count, Flat, Lanes};
use super::db::{Col, Db, Field, Row};
use crate::error::Result;
use crate::store::Redriven;

pub(crate) fn redrive(db: &Db, id: &str, extra: i64) -> Result<Redriven> {
    let rows = vec![(id.to_string(), db.row(id)?)];
    match rows[0].1.as_ref().and_then(|r| r.state.as_deref()) {
        None => return Ok(Redriven::Gone),
        Some("dead") => {}
        Some(_) => return Ok(Redriven::NotDead),
    }
    let plan = plan(db, &rows)?;
    drive(db, &rows, extra, plan)?;
    Ok(Redriven::Redriven)
}

/// One chunk of up to `limit` of the oldest dead jobs: (redriven, dead members looked at); 0
/// looked at = no dead job left.
pub(crate) fn redrive_all(db: &Db, extra: i64, limit: i64) -> Result<(u64, u64)> {
    let ids = db.zrange("dead", 0, limit, false)?;
    let mut rows = Vec::with_capacity(ids.len());
    for id in ids {
        let row = db.row(&id)?;
        rows.push((id, row));
    }
    let plan = plan(db, &rows)?;
    let done = drive(db, &rows, extra, plan)?;
    Ok((done, rows.len() as u64))
}

/// What the moves need, read before the first write: the groups of the dead rows (in the order
/// their first job came), the flat set, whether the queue is paused.
struct Plan {
    lanes: Lanes,
    flat: Option<Flat>,
    paused: bool,
    order: common::Order,
}

fn plan(db: &Db, rows: &[(String, Option<Row>)]) -> Result<Plan> {
    let (mut lanes, mut flat) = (Lanes::default(), None);
    for (_, row) in rows {
        let Some(row) = row.as_ref().filter(|r| r.state.as_deref() == Some("dead")) else {
            continue;
        };
        match row.group.as_deref() {
            Some(g) => {
                lanes.read(db, g, Count::Whole)?;
            }
            None if flat.is_none() => flat = Some(flat_read(db)?),
            None => {}
        }
    }
    let paused = paused_read(db)?;
    let order = common::Order::read(db)?;
    Ok(Plan {
        lanes,
        flat,
        paused,
        order,
    })
}

/// The writes of both modes: every member leaves `dead`; those whose row says dead go ready.
/// Then the ring steps (the flat set first, then each group in the order its first job came; the
/// script walks its groups in that order too) and the wakes.
fn drive(db: &Db, rows: &[(String, Option<Row>)], extra: i64, mut plan: Plan) -> Result<u64> {
    for (id, _) in rows {
        db.zrem("dead", id)?;
    }
    let (mut done, mut nflat) = (0u64, 0i64);
    let mut added: HashMap<&str, i64> = HashMap::new();
    for (id, row) in rows {
        let Some(row) = row else { continue };
        if row.state.as_deref() != Some("dead") {
            continue;
        }
        let attempts = common::used(row.attempts.as_deref(), row.free.as_deref());
        db.hset(id, &[Field::MaxAttempts(&(attempts + extra).to_string())])?;
        // a cancel asked of an earlier run is spent: the operator asked for this one
        db.hdel(id, &[Col::Stalled, Col::Cancel])?;
        let g = row.group.as_deref();
        match (g, plan.flat.as_mut()) {
            (Some(g), _) => {
                if let Some(s) = plan.lanes.get(g) {
                    common::ready(db, id, Some(g), &mut s.len, &mut plan.order, row.priority.as_deref())?;
                }
                *added.entry(g).or_default() += 1;
            }
            (None, Some(s)) => {
                common::ready(db, id, None, &mut s.len, &mut plan.order, row.priority.as_deref())?;
                nflat += 1;
            }
            (None, None) => {}
        }
        done += 1;
    }
    let mut wakes = nflat;
    if let Some(s) = plan.flat.as_mut() {
        flat_step(db, s)?;
    }
    for (g, s) in plan.lanes.iter_mut() {
        let n = added.get(g).copied().unwrap_or(0);
        wakes += lane_step(db, g, s, n)?;
    }
    plan.order.write(db)?;
    wake(db, wakes, plan.paused)?;
    Ok(done)
}
