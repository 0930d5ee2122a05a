//! The twin of scripts/counts.lua: sizes per state and the counters of a queue. Pending is the flat
//! set plus every lane's jobs, both read in O(1) from the counts the schema's triggers keep (the
//! script keeps the lanes' count itself, and ZCARD is O(1) in Redis); one transaction, so no
//! cursor.

use super::db::Db;
use crate::error::Result;
use crate::store::Counts;

pub(crate) fn counts(db: &Db) -> Result<Counts> {
    let metric =
        |event: &str| -> Result<u64> { Ok(db.kv_get(&format!("metrics:{event}"))?.unwrap_or(0).max(0) as u64) };
    let size = |z: &str| -> Result<u64> { Ok(db.zcard(z)?.max(0) as u64) };
    Ok(Counts {
        pending: (db.kept_count("pending")? + db.kept_count("lanes")?).max(0) as u64,
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
    })
}
