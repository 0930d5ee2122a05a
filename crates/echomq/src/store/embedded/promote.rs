//! The twin of `scripts/promote.lua`: up to `limit` due jobs (score ≤ now) from `scheduled` to ready
//! (flat: `pending` at a fresh sequence; a lane job: its lane's tail, the ring step), one wake per
//! job made claimable; then, in the same step, the time until the next scheduled job is due. A
//! missing row is dropped; a row not in state scheduled (or without data) goes dead naming the defect.

use std::time::Duration;

use rusqlite::{params, OptionalExtension};

use super::common::{bury, claimable, ready, ring_step, ring_step_flat};
use super::db::{text, Col, Db};
use crate::error::{Error, Result};
use crate::store::Promoted;

pub(crate) fn promote(db: &Db, limit: i64) -> Result<Promoted> {
    if limit < 1 {
        return Err(Error::Store {
            verb: "promote",
            reason: "promote: limit".into(),
        });
    }
    // the idle path: nothing scheduled, nothing to read the clock for
    if db.zfirst("scheduled")?.is_none() {
        return Ok(Promoted {
            moved: 0,
            next_due_in: None,
        });
    }
    let now = db.now();
    let due = db.zrange_upto("scheduled", now, limit)?;
    let mut moved = 0u64;
    if !due.is_empty() {
        // HMGET state, group, data of every row first
        let mut rows = Vec::with_capacity(due.len());
        for id in &due {
            rows.push(state_group_data(db, id)?);
        }
        for id in &due {
            db.zrem("scheduled", id)?;
        }
        // the groups in the order their first job came due, with how many each got
        let (mut flat, mut lanes) = (0i64, Vec::<(String, i64)>::new());
        for (id, (state, g, has_data)) in due.iter().zip(rows) {
            match state.as_deref() {
                Some("scheduled") if has_data => {
                    ready(db, id, g.as_deref())?;
                    db.hdel(id, &[Col::RunAt])?;
                    match g {
                        Some(g) => match lanes.iter_mut().find(|(name, _)| *name == g) {
                            Some((_, added)) => *added += 1,
                            None => lanes.push((g, 1)),
                        },
                        None => flat += 1,
                    }
                    moved += 1;
                }
                Some(state) => {
                    let defect = if has_data { "" } else { ", no data" };
                    bury(db, id, &format!("malformed row: state {state}{defect} in scheduled"))?;
                    db.count("failed", 1)?;
                }
                // a missing row: only dropped from scheduled
                None => {}
            }
        }
        let mut wakes = flat;
        if flat > 0 {
            ring_step_flat(db)?;
        }
        for (g, added) in &lanes {
            wakes += claimable(db, g, *added)?;
            ring_step(db, g)?;
        }
        db.wake(wakes)?;
    }
    let next_due_in = db
        .zfirst("scheduled")?
        .map(|(_, due)| Duration::from_millis((due - now).max(0) as u64));
    Ok(Promoted { moved, next_due_in })
}

/// HMGET job:<id> state group data — the payload only tested for presence, never read.
fn state_group_data(db: &Db, id: &str) -> Result<(Option<String>, Option<String>, bool)> {
    db.sql()
        .prepare_cached("SELECT state, grp, data IS NOT NULL FROM emq_jobs WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| Ok((text(r, 0)?, text(r, 1)?, r.get(2)?)))
                .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
