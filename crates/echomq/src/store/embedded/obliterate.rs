//! The twin of scripts/obliterate.lua: deletes every key of the queue, at most `limit` job rows per
//! call (the store loops while the reply says more is left), then unregisters the queue in the same
//! transaction as the last chunk. The first call marks the queue (`obliterating`) so enqueues are
//! refused meanwhile. Active jobs refuse it unless forced (then their lane slots are freed as they
//! go, keeping the slot invariant). Reads first, as the script: the held jobs' groups, the heads of
//! the other sets, then (budget left) the lanes' heads, then the writes.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};

use super::common::{self, lane_eligible, lane_leave, Count, Lane, Lanes};
use super::db::Db;
use super::drain::{lanes_cut, lanes_read, zset_head_read, zset_purge};
use crate::error::Result;

/// One obliterate call's outcome.
pub(crate) enum Step {
    /// Active jobs and no force: nothing done.
    Refused(u64),
    /// A chunk deleted; finished when every key is gone.
    Chunk { removed: u64, finished: bool },
}

pub(crate) fn obliterate(db: &Db, force: bool, limit: i64) -> Result<Step> {
    let running = db.zcard("active")?;
    if running > 0 && !force {
        return Ok(Step::Refused(running as u64));
    }
    // a forced lane job leaves active: its slot freed, then the ring step (no wake), because the
    // lanes are found by their a:/r: fields: a group whose last slot this frees while jobs wait in
    // its lane would otherwise keep no field, and its lane and rows would outlive the queue
    let held = zset_head_read(db, "active", limit)?;
    let mut lanes = Lanes::default();
    let mut leaving = Vec::with_capacity(held.len());
    for id in &held {
        let g = db.row(id)?.and_then(|r| r.group);
        if let Some(g) = g.as_deref() {
            lanes.read(db, g, Count::Any)?;
        }
        leaving.push(g);
    }
    // the groups hash as the lanes walk meets it once those leaves are written (planned on copies
    // of the lanes' state): the a: field of a group whose last slot they free is gone, the r: field
    // of a group they put back on the ring is there
    let (mut gone, mut pushed) = (HashSet::new(), Vec::new());
    let mut plan: HashMap<&str, Lane> = HashMap::new();
    for g in leaving.iter().flatten() {
        let s = match plan.entry(g.as_str()) {
            Entry::Occupied(e) => e.into_mut(),
            Entry::Vacant(e) => match lanes.get(g) {
                Some(s) => e.insert(s.clone()),
                None => continue,
            },
        };
        s.a -= 1;
        if s.a <= 0 {
            s.a = 0;
            gone.insert(format!("a:{g}"));
        }
        if lane_eligible(s) {
            s.ringed = true;
            pushed.push(format!("r:{g}"));
        }
    }
    let mut removed = held.len() as i64;
    let mut sets = Vec::new();
    for z in ["pending", "scheduled", "dead", "completed", "cancelled"] {
        let ids = zset_head_read(db, z, limit - removed)?;
        removed += ids.len() as i64;
        sets.push((z, ids));
    }
    let chunked = removed >= limit;
    let (mut cuts, mut finished) = (Vec::new(), false);
    if !chunked {
        let fields = db.gfields()?.into_iter().filter(|f| !gone.contains(f)).chain(pushed);
        let (planned, n, walked) = lanes_read(db, limit - removed, &common::lane_groups_of(fields))?;
        cuts = planned;
        removed += n;
        finished = walked;
    }

    db.kv_set("obliterating", 1)?;
    // it reads no row, so no waited mark: every waiter of the queue looks at its job again
    db.notify_all();
    for (id, g) in held.iter().zip(&leaving) {
        if let Some(g) = g.as_deref() {
            if let Some(s) = lanes.get(g) {
                lane_leave(db, g, s)?;
            }
        }
        db.del_row(id)?;
        db.zrem("active", id)?;
    }
    for (z, ids) in &sets {
        zset_purge(db, z, ids)?;
    }
    if chunked {
        return Ok(Step::Chunk {
            removed: removed as u64,
            finished: false,
        });
    }
    lanes_cut(db, &cuts)?;
    if finished {
        // id, ring, groups, wake, paused, completions, metrics and the mark; emq:queues
        db.delete_queue_keys()?;
        db.unregister()?;
    }
    Ok(Step::Chunk {
        removed: removed as u64,
        finished,
    })
}
