//! The twin of `scripts/mark_waited.lua`: a caller starts waiting on a job. A job still to finish
//! gets the waited mark on its row (the verb that finishes it announces it: [`Db::notify`]); a
//! finished one is answered with its row, as get answers; a job with no row with the queue's id
//! sequence.

use super::db::{Db, Field};
use super::get;
use crate::error::Result;
use crate::job::JobState;
use crate::keyspace::JobId;
use crate::store::Waited;

pub(crate) fn mark_waited(db: &Db, id: &JobId) -> Result<Waited> {
    let Some(row) = get::get(db, id)? else {
        let sequence = db.kv_get("id")?.unwrap_or(0).max(0) as u64;
        return Ok(Waited::Gone { sequence });
    };
    if matches!(row.state, JobState::Completed | JobState::Cancelled | JobState::Dead) {
        return Ok(Waited::Finished(Box::new(row)));
    }
    db.hset(id.as_str(), &[Field::Waited])?;
    Ok(Waited::Waiting)
}
