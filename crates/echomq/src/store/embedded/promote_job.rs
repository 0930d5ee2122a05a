//! The twin of scripts/promote_job.lua: an operator makes one scheduled job ready now (flat:
//! pending or its lane at a fresh rank of its priority; the ring step). One wake when the job is
//! claimable now. Reads first, as the script: the row, its group or the flat set, then the writes.

use super::common::{self, flat_read, flat_step, lane_read, lane_step, paused_read, wake, Count};
use super::db::{Col, Db};
use crate::error::Result;
use crate::store::PromotedJob;

pub(crate) fn promote_job(db: &Db, id: &str) -> Result<PromotedJob> {
    let Some(row) = db.row(id)? else {
        return Ok(PromotedJob::Gone);
    };
    match row.state.as_deref() {
        None => return Ok(PromotedJob::Gone),
        Some("scheduled") => {}
        Some(_) => return Ok(PromotedJob::NotScheduled),
    }
    let g = row.group.as_deref();
    let (mut lane, mut flat) = (None, None);
    match g {
        Some(g) => lane = Some(lane_read(db, g, Count::Whole)?),
        None => flat = Some(flat_read(db)?),
    }
    let paused = paused_read(db)?;
    let mut order = common::Order::read(db)?;
    let priority = row.priority.as_deref();
    if !db.zrem("scheduled", id)? {
        return Ok(PromotedJob::NotScheduled);
    }
    match (g, lane.as_mut(), flat.as_mut()) {
        (Some(g), Some(s), _) => {
            common::ready(db, id, Some(g), &mut s.len, &mut order, priority)?;
            db.hdel(id, &[Col::RunAt])?;
            let claimable = lane_step(db, g, s, 1)?;
            wake(db, claimable, paused)?;
        }
        (None, _, Some(s)) => {
            common::ready(db, id, None, &mut s.len, &mut order, priority)?;
            db.hdel(id, &[Col::RunAt])?;
            flat_step(db, s)?;
            wake(db, 1, paused)?;
        }
        _ => {}
    }
    order.write(db)?;
    Ok(PromotedJob::Promoted)
}
