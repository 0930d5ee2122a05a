//! The twin of `scripts/resume.lua`: claims give jobs again; one wake per job made claimable (at most
//! 16), counted from the ring's first 16 members only (never a scan). Resuming a queue that is not
//! paused makes nothing claimable: no wake. Reads first, as the script: the ring's head, the flat
//! set and its groups, then the writes.

use super::common::{wake, Count, Lanes};
use super::db::Db;
use crate::error::Result;

pub(crate) fn resume(db: &Db) -> Result<()> {
    if !db.exists_flag("paused")? {
        return Ok(());
    }
    let (mut count, mut lanes) = (0, Lanes::default());
    for m in db.lrange("ring", 0, 16)? {
        if count >= 16 {
            break;
        }
        if m == "~" {
            count += db.zcard("pending")?;
        } else {
            // its ready jobs, bounded by its free slots
            let s = lanes.read(db, &m, Count::Whole)?;
            count += s.len.min((s.limit - s.a).max(0));
        }
    }
    db.kv_del("paused")?;
    wake(db, count, false)
}
