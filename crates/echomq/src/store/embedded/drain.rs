//! The twin of scripts/drain.lua: drops ready and scheduled jobs, rows and memberships, at most
//! `limit` per call (the store loops while the reply says more is left). Active and dead jobs stay.
//! Ring members of emptied lanes are dropped by the next claim that meets them.
//!
//! Also holds the twins of `emq_purge_zset` and `emq_purge_lanes` (obliterate uses them too).

use rusqlite::params;

use super::common;
use super::db::Db;
use crate::error::Result;

/// Rows deleted in one call, and whether nothing is left to drain.
pub(crate) fn drain(db: &Db, limit: i64) -> Result<(u64, bool)> {
    let mut removed = purge_zset(db, "pending", limit, None)?;
    removed += purge_zset(db, "scheduled", limit - removed, None)?;
    if removed >= limit {
        // the script answers "not finished" here; finishing when nothing is left spares a call
        let left = db.zcard("pending")? + db.zcard("scheduled")? + lanes_len(db)?;
        return Ok((removed as u64, left == 0));
    }
    let (lanes, finished) = purge_lanes(db, limit - removed)?;
    Ok(((removed + lanes) as u64, finished))
}

/// A step run per row before it goes (`leave` of `emq_purge_zset`).
pub(crate) type Leave<'a> = &'a dyn Fn(&str) -> Result<()>;

/// `emq_purge_zset`: up to `budget` job rows of sorted set `z` deleted with their memberships, in
/// score order. `leave(id)` runs per row before it goes (forced obliterate frees lane slots).
/// Returns how many members went.
pub(crate) fn purge_zset(db: &Db, z: &str, budget: i64, leave: Option<Leave<'_>>) -> Result<i64> {
    if budget <= 0 {
        return Ok(0);
    }
    let ids = db.zrange(z, 0, budget, false)?;
    for id in &ids {
        if let Some(leave) = leave {
            leave(id)?;
        }
        db.del_row(id)?;
        db.zrem(z, id)?;
    }
    Ok(ids.len() as i64)
}

/// `emq_purge_lanes`: up to `budget` lane jobs deleted (rows and lane entries), lane by lane over
/// the groups with a lane. Returns (removed, finished): finished when every lane was emptied.
pub(crate) fn purge_lanes(db: &Db, budget: i64) -> Result<(i64, bool)> {
    let mut removed = 0;
    for g in common::lane_groups(db)? {
        let lane = common::lane(&g);
        if budget - removed <= 0 {
            return Ok((removed, false));
        }
        let ids = db.lrange(&lane, 0, budget - removed)?;
        for id in &ids {
            db.del_row(id)?;
        }
        // LTRIM lane #ids -1: the head entries just read go
        db.sql()
            .prepare_cached(
                "DELETE FROM emq_lists WHERE queue = ?1 AND list = ?2 AND pos IN \
                 (SELECT pos FROM emq_lists WHERE queue = ?1 AND list = ?2 ORDER BY pos LIMIT ?3)",
            )
            .and_then(|mut s| s.execute(params![db.queue(), lane, ids.len() as i64]))
            .map_err(|e| db.err(e))?;
        removed += ids.len() as i64;
        if db.lnonempty(&lane)? {
            return Ok((removed, false));
        }
    }
    Ok((removed, true))
}

/// The jobs waiting in every lane.
pub(crate) fn lanes_len(db: &Db) -> Result<i64> {
    let mut n = 0;
    for g in common::lane_groups(db)? {
        n += db.llen(&common::lane(&g))?;
    }
    Ok(n)
}
