//! The twin of `scripts/promote.lua`: up to `limit` due jobs (score ≤ now) from `scheduled` to ready
//! (to `pending` or its lane at a fresh rank of its priority, the ring step), one wake per
//! job made claimable; and, in the same step, the time until the next scheduled job after them is
//! due. A missing row is dropped; a row not in state scheduled (or without data) goes dead naming
//! the defect. Reads first, as the script: the due ids, the next one due after them, their rows,
//! the groups and the flat set they join, then the writes.

use std::collections::HashMap;
use std::time::Duration;

use rusqlite::{params, OptionalExtension};

use super::common::{bury, flat_step, lane_step, paused_read, ready, wake};
use super::db::{text, Col, Db};
use super::schedule_common::{self as schedules, Joined};
use crate::error::{Error, Result};
use crate::store::Promoted;

pub(crate) fn promote(db: &Db, limit: i64, grace: i64) -> Result<Promoted> {
    if limit < 1 {
        return Err(Error::Store {
            verb: "promote",
            reason: "promote: limit".into(),
        });
    }
    // the idle path: nothing scheduled and no schedule, nothing to read the clock for
    let shead = db.zfirst("schedule_due")?.map(|(_, at)| at);
    let jhead = db.zfirst("scheduled")?.map(|(_, at)| at);
    if jhead.is_none() && shead.is_none() {
        return Ok(Promoted::default());
    }
    let now = db.now();
    // nothing due (the common beat of a queue with delayed jobs or schedules): only when the next is
    let in_ms = |at: i64| Duration::from_millis((at - now).max(0) as u64);
    if jhead.is_none_or(|at| at > now) && shead.is_none_or(|at| at > now) {
        let at = [jhead, shead].into_iter().flatten().min();
        return Ok(Promoted {
            next_due_in: at.map(in_ms),
            ..Promoted::default()
        });
    }
    // the due jobs are the set's first members: once they leave, the next one due is the member
    // ranked right after them (none due: the head)
    let (due, mut next_at) = match jhead {
        Some(at) if at <= now => {
            let due = db.zrange_upto("scheduled", now, limit)?;
            let next = match db.zrange("scheduled", due.len() as i64, 1, false)?.first() {
                Some(next) => db.zscore("scheduled", next)?,
                None => None,
            };
            (due, next)
        }
        head => (Vec::new(), head),
    };
    let fires = schedules::plan_due(db, now, grace)?;
    if let Some(at) = fires.next_at {
        next_at = Some(next_at.map_or(at, |n| n.min(at)));
    }
    let next_due_in = next_at.map(in_ms);
    if due.is_empty() && fires.plans.is_empty() {
        return Ok(Promoted {
            next_due_in,
            ..Promoted::default()
        });
    }
    // HMGET state, group, data of every row, and the groups (in the order their first job came:
    // the fired jobs', then the due rows') and the flat set the moves join
    let mut joined = Joined::default();
    fires.join(db, &mut joined)?;
    let mut rows = Vec::with_capacity(due.len());
    for id in &due {
        let row = state_group_data(db, id)?;
        if let (Some("scheduled"), true) = (row.0.as_deref(), row.2) {
            joined.join(db, row.1.as_deref())?;
        }
        rows.push(row);
    }
    let paused = paused_read(db)?;
    let mut order = match joined.flat.is_some() || !joined.lanes.is_empty() {
        true => Some(super::common::Order::read(db)?),
        false => None,
    };

    let (mut nflat, mut added) = (0i64, HashMap::<String, i64>::new());
    if let Some(order) = order.as_mut() {
        for g in schedules::write_fires(db, &fires, &mut joined, order)? {
            match g {
                Some(g) => *added.entry(g).or_default() += 1,
                None => nflat += 1,
            }
        }
    } else {
        schedules::write_fires_plans(db, &fires)?;
    }
    let Joined { mut lanes, mut flat } = joined;
    for id in &due {
        db.zrem("scheduled", id)?;
    }
    let (mut moved, mut failed) = (0u64, 0i64);
    for (id, (state, g, has_data, waited, priority)) in due.iter().zip(rows) {
        match (state.as_deref(), order.as_mut()) {
            (Some("scheduled"), Some(order)) if has_data => {
                let priority = priority.as_deref();
                match (g.as_deref(), flat.as_mut()) {
                    (Some(g), _) => {
                        if let Some(s) = lanes.get(g) {
                            ready(db, id, Some(g), &mut s.len, order, priority)?;
                        }
                        *added.entry(g.to_string()).or_default() += 1;
                    }
                    (None, Some(s)) => {
                        ready(db, id, None, &mut s.len, order, priority)?;
                        nflat += 1;
                    }
                    (None, None) => {}
                }
                db.hdel(id, &[Col::RunAt])?;
                moved += 1;
            }
            (Some(state), _) => {
                let defect = if has_data { "" } else { ", no data" };
                bury(db, id, &format!("malformed row: state {state}{defect} in scheduled"))?;
                db.notify(waited.as_deref(), id);
                failed += 1;
            }
            // a missing row: only dropped from scheduled
            (None, _) => {}
        }
    }
    if let Some(o) = &order {
        o.write(db)?;
    }
    let mut wakes = nflat;
    if let Some(s) = flat.as_mut() {
        flat_step(db, s)?;
    }
    for (g, s) in lanes.iter_mut() {
        let n = added.get(g).copied().unwrap_or(0);
        wakes += lane_step(db, g, s, n)?;
    }
    wake(db, wakes, paused)?;
    db.count("failed", failed)?;
    Ok(Promoted {
        moved,
        next_due_in,
        fired: fires.len() as u64,
        refills: fires.refills,
    })
}

/// HMGET job:<id> state group data waited — the payload only tested for presence, never read.
type Look = (Option<String>, Option<String>, bool, Option<String>, Option<String>);

fn state_group_data(db: &Db, id: &str) -> Result<Look> {
    db.sql()
        .prepare_cached(
            "SELECT state, grp, data IS NOT NULL, waited, priority FROM emq_jobs WHERE queue = ?1 AND id = ?2",
        )
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| {
                Ok((text(r, 0)?, text(r, 1)?, r.get(2)?, text(r, 3)?, text(r, 4)?))
            })
            .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
