//! The twin of `scripts/resume.lua`: claims give jobs again; one wake per job made claimable (at most
//! 16), counted from the ring's first 16 members only (never a scan). Resuming a queue that is not
//! paused makes nothing claimable: no wake.

use super::common::{claimable, lane};
use super::db::Db;
use crate::error::Result;

pub(crate) fn resume(db: &Db) -> Result<()> {
    if !db.exists_flag("paused")? {
        return Ok(());
    }
    let mut count = 0;
    for m in db.lrange("ring", 0, 16)? {
        if count >= 16 {
            break;
        }
        if m == "~" {
            count += db.zcard("pending")?;
        } else {
            let len = db.llen(&lane(&m))?;
            count += claimable(db, &m, len)?;
        }
    }
    // reads done: now the writes
    db.kv_del("paused")?;
    db.wake(count)
}
