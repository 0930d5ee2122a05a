//! The twin of scripts/drain.lua: drops ready and scheduled jobs, rows and memberships, at most
//! `limit` per call (the store loops while the reply says more is left). Active and dead jobs stay.
//! Ring members of emptied lanes are dropped by the next claim that meets them. Reads first, as the
//! script: the heads of pending and scheduled, then (budget left) the lanes' heads, and the rank
//! and priority of each ready job (they leave the pending tally), then the writes.
//!
//! Also holds the twins of the purge helpers of `_lib.lua` (obliterate uses them too).

use super::common;
use super::db::Db;
use crate::error::Result;

/// Rows deleted in one call, and whether nothing is left to drain.
pub(crate) fn drain(db: &Db, limit: i64) -> Result<(u64, bool)> {
    let pending = ranked_head_read(db, "pending", limit)?;
    let scheduled = zset_head_read(db, "scheduled", limit - pending.len() as i64)?;
    let removed = (pending.len() + scheduled.len()) as i64;
    let (mut cuts, mut lanes, mut finished) = (Vec::new(), 0, false);
    let mut left = 0;
    if removed < limit {
        (cuts, lanes, finished) = lanes_read(db, limit - removed, &common::lane_groups(db)?)?;
    } else {
        // the script answers "not finished" here; finishing when nothing is left spares a call
        left = db.zcard("pending")? + db.zcard("scheduled")? - removed + db.lanes_len()?;
    }
    let mut tally = common::Tally::default();
    tally_leaving_read(db, &mut tally, &pending)?;
    for cut in &cuts {
        tally_leaving_read(db, &mut tally, &cut.ids)?;
    }
    let pending: Vec<String> = pending.into_iter().map(|(id, _)| id).collect();
    if removed + lanes > 0 {
        // it reads no row, so no waited mark: every waiter of the queue looks at its job again
        db.notify_all();
    }
    zset_purge(db, "pending", &pending)?;
    zset_purge(db, "scheduled", &scheduled)?;
    tally.write(db)?;
    if removed >= limit {
        return Ok((removed as u64, left == 0));
    }
    lanes_cut(db, &cuts)?;
    Ok(((removed + lanes) as u64, finished))
}

/// `emq_zset_head_read`: the first `budget` members of sorted set `z`, in score order; none once
/// the budget is spent.
pub(crate) fn zset_head_read(db: &Db, z: &str, budget: i64) -> Result<Vec<String>> {
    if budget <= 0 {
        return Ok(Vec::new());
    }
    db.zrange(z, 0, budget, false)
}

/// `emq_zset_head_read` with its ranks: the first `budget` members of ready set `z` and their
/// scores, in score order; none once the budget is spent.
fn ranked_head_read(db: &Db, z: &str, budget: i64) -> Result<Vec<(String, i64)>> {
    if budget <= 0 {
        return Ok(Vec::new());
    }
    db.zrange_scored(z, 0, budget)
}

/// `emq_tally_leaving_read`: ready jobs deleted with their rows, at their ranks (as the heads were
/// read), tallied in `t` as leaving, their priorities read.
fn tally_leaving_read(db: &Db, t: &mut common::Tally, ranked: &[(String, i64)]) -> Result<()> {
    for (id, rank) in ranked {
        let p = common::priority_of(db.priority(id)?.as_deref());
        t.add(*rank, p, -1, None);
    }
    Ok(())
}

/// `emq_zset_purge`: these members of sorted set `z` deleted with their rows.
pub(crate) fn zset_purge(db: &Db, z: &str, ids: &[String]) -> Result<()> {
    for id in ids {
        db.del_row(id)?;
        db.zrem(z, id)?;
    }
    Ok(())
}

/// One lane's head jobs to delete (`emq_lanes_read`'s cuts): the lane, and the ids with their
/// ranks.
pub(crate) struct Cut {
    lane: String,
    ids: Vec<(String, i64)>,
}

impl Cut {
    /// The ids cut.
    pub(crate) fn ids(&self) -> impl Iterator<Item = &str> {
        self.ids.iter().map(|(id, _)| id.as_str())
    }
}

/// `emq_lanes_read`: the lanes walk from reads alone: up to `budget` lane jobs, lane by lane over
/// `groups` (the groups with a lane). Returns the cuts, the jobs they hold, and whether they empty
/// every lane (else the walk stopped where the budget was spent or a lane kept jobs).
pub(crate) fn lanes_read(db: &Db, budget: i64, groups: &[String]) -> Result<(Vec<Cut>, i64, bool)> {
    let (mut cuts, mut removed) = (Vec::new(), 0);
    for g in groups {
        let lane = common::lane(g);
        if budget - removed <= 0 {
            return Ok((cuts, removed, false));
        }
        // one past the budget: whether the lane keeps jobs once its head goes
        let mut ids = db.zrange_scored(&lane, 0, budget - removed + 1)?;
        let keeps = ids.len() as i64 > budget - removed;
        ids.truncate((budget - removed) as usize);
        removed += ids.len() as i64;
        cuts.push(Cut { lane, ids });
        if keeps {
            return Ok((cuts, removed, false));
        }
    }
    Ok((cuts, removed, true))
}

/// `emq_lanes_cut`: the cuts [`lanes_read`] planned: each lane's head jobs deleted, rows and entries.
pub(crate) fn lanes_cut(db: &Db, cuts: &[Cut]) -> Result<()> {
    for cut in cuts {
        for id in cut.ids() {
            db.del_row(id)?;
        }
        // ZREMRANGEBYRANK lane 0 #ids-1: the head entries go
        db.zrem_head(&cut.lane, cut.ids.len() as i64)?;
    }
    Ok(())
}
