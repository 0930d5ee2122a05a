//! The twin of scripts/promote_job.lua: an operator makes one scheduled job ready now (flat:
//! pending at a fresh sequence; lane: its tail and the ring step). One wake when the job is
//! claimable now.

use super::common;
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
    if !db.zrem("scheduled", id)? {
        return Ok(PromotedJob::NotScheduled);
    }
    let g = row.group.as_deref();
    common::ready(db, id, g)?;
    db.hdel(id, &[Col::RunAt])?;
    match g {
        Some(g) => {
            db.wake(common::claimable(db, g, 1)?)?;
            common::ring_step(db, g)?;
        }
        None => {
            common::ring_step_flat(db)?;
            db.wake(1)?;
        }
    }
    Ok(PromotedJob::Promoted)
}
