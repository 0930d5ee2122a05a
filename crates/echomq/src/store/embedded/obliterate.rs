//! The twin of scripts/obliterate.lua: deletes every key of the queue, at most `limit` job rows per
//! call (the store loops while the reply says more is left), then unregisters the queue in the same
//! transaction as the last chunk. The first call marks the queue (`obliterating`) so enqueues are
//! refused meanwhile. Active jobs refuse it unless forced (then their lane slots are freed as they
//! go, keeping the slot invariant).

use super::common;
use super::db::Db;
use super::drain::{purge_lanes, purge_zset};
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
    db.kv_set("obliterating", 1)?;
    // a forced lane job leaves active: its slot freed, then the ring step (no wake), because the
    // lanes are found by their a:/r: fields: a group whose last slot this frees while jobs wait in
    // its lane would otherwise keep no field, and its lane and rows would outlive the queue
    let leave = |id: &str| -> Result<()> {
        if let Some(g) = db.row(id)?.and_then(|r| r.group) {
            common::free_slot(db, &g)?;
            common::ring_step(db, &g)?;
        }
        Ok(())
    };
    let mut removed = purge_zset(db, "active", limit, Some(&leave))?;
    for z in ["pending", "scheduled", "dead", "completed"] {
        removed += purge_zset(db, z, limit - removed, None)?;
    }
    if removed >= limit {
        return Ok(Step::Chunk {
            removed: removed as u64,
            finished: false,
        });
    }
    let (lanes, finished) = purge_lanes(db, limit - removed)?;
    removed += lanes;
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
