//! The twin of scripts/redrive.lua: a dead job back to ready (flat: pending at a fresh sequence;
//! lane: its tail and the ring step), attempts kept (they never go down), its budget raised:
//! `max_attempts` = the attempts it has used (attempts − free) + extra; its stall count cleared. One id, or the oldest dead jobs in a
//! chunk (the store loops). One wake per job made claimable (at most 16).

use super::common;
use super::db::{Col, Db, Field, Row};
use crate::error::Result;
use crate::store::Redriven;

pub(crate) fn redrive(db: &Db, id: &str, extra: i64) -> Result<Redriven> {
    let Some(row) = db.row(id)? else {
        return Ok(Redriven::Gone);
    };
    match row.state.as_deref() {
        None => return Ok(Redriven::Gone),
        Some("dead") => {}
        Some(_) => return Ok(Redriven::NotDead),
    }
    drive(db, &[(id.to_string(), Some(row))], extra)?;
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
    let done = drive(db, &rows, extra)?;
    Ok((done, rows.len() as u64))
}

/// The writes of both modes: every member leaves `dead`; those whose row says dead go ready.
/// Then the ring steps (the flat set first, then each group in the order its first job came; the
/// script walks its groups in Lua table order) and the wakes.
fn drive(db: &Db, rows: &[(String, Option<Row>)], extra: i64) -> Result<u64> {
    let (mut done, mut flat) = (0u64, 0i64);
    let mut lanes: Vec<(String, i64)> = Vec::new();
    for (id, row) in rows {
        db.zrem("dead", id)?;
        let Some(row) = row else { continue };
        if row.state.as_deref() != Some("dead") {
            continue;
        }
        let attempts = common::used(row.attempts.as_deref(), row.free.as_deref());
        db.hset(id, &[Field::MaxAttempts(&(attempts + extra).to_string())])?;
        // a cancel asked of an earlier run is spent: the operator asked for this one
        db.hdel(id, &[Col::Stalled, Col::Cancel])?;
        let g = row.group.as_deref();
        common::ready(db, id, g)?;
        match g {
            Some(g) => match lanes.iter_mut().find(|(name, _)| name == g) {
                Some((_, added)) => *added += 1,
                None => lanes.push((g.to_string(), 1)),
            },
            None => flat += 1,
        }
        done += 1;
    }
    let mut wakes = flat;
    if flat > 0 {
        common::ring_step_flat(db)?;
    }
    for (g, added) in &lanes {
        wakes += common::claimable(db, g, *added)?;
        common::ring_step(db, g)?;
    }
    db.wake(wakes)?;
    Ok(done)
}
