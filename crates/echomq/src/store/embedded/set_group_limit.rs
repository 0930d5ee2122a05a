//! The twin of scripts/set_group_limit.lua: a group's own limit (`l:<g>`) or the queue default
//! (`l:~`, for groups without their own; absent = 1). For one group, the ring step runs at once (a
//! raise can make it eligible) with a wake per job the new slots let be claimed (also when the group
//! was already on the ring with a slot free); a raised default reaches a group at its next settle.
//! A lowered limit never preempts: claims stop until the group's active count is below it. Reads
//! first, as the script: the group's fields and lane, then the writes.

use super::common::{lane_read, lane_ring, paused_read, wake, Count};
use super::db::Db;
use crate::error::Result;

pub(crate) fn set_group_limit(db: &Db, group: Option<&str>, limit: i64) -> Result<()> {
    let Some(g) = group else {
        return db.gset("l:~", &limit.to_string());
    };
    let mut s = lane_read(db, g, Count::Whole)?;
    let paused = paused_read(db)?;
    // the jobs of g claimable under a limit: its ready jobs, bounded by the free slots
    let (active, ready, old) = (s.a, s.len, s.limit);
    let claimable = |l: i64| ready.min((l - active).max(0));
    db.gset(&format!("l:{g}"), &limit.to_string())?;
    s.limit = limit;
    lane_ring(db, g, &mut s)?;
    // one wake per job the raise made claimable, whether or not g was already on the ring
    wake(db, claimable(limit) - claimable(old), paused)
}
