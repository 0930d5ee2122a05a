//! The twin of scripts/counts.lua: sizes per state and the counters of a queue. Pending is the flat
//! set plus every lane's jobs, both in O(1): the store keeps both sizes as its writes move rows
//! (table `emq_counts`), as Redis's ZCARD is O(1) and the script keeps the lanes' count in the
//! groups hash; one transaction, so no cursor. The oldest pending job's age is the least score of
//! the pending tally's `pending_since`.

use std::time::Duration;

use super::db::Db;
use crate::error::Result;
use crate::store::Counts;

pub(crate) fn counts(db: &Db) -> Result<Counts> {
    let metric =
        |event: &str| -> Result<u64> { Ok(db.kv_get(&format!("metrics:{event}"))?.unwrap_or(0).max(0) as u64) };
    let size = |z: &str| -> Result<u64> { Ok(db.zcard(z)?.max(0) as u64) };
    Ok(Counts {
        pending: size("pending")? + db.lanes_len()?.max(0) as u64,
        scheduled: size("scheduled")?,
        active: size("active")?,
        dead: size("dead")?,
        completed: metric("completed")?,
        cancelled: metric("cancelled")?,
        failed: metric("failed")?,
        retried: metric("retried")?,
        stalled: metric("stalled")?,
        reaped: metric("reaped")?,
        paused: db.exists_flag("paused")?,
        oldest_pending_age: db
            .zfirst("pending_since")?
            .map(|(_, since)| Duration::from_millis((db.now() - since).max(0) as u64)),
    })
}
