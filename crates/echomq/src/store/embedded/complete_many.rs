//! The twin of `scripts/complete_many.lua`: complete for a batch in one step; each entry fenced on
//! its own; a repeated entry is stale after its first settle.

use super::common::{settle_finished, Finishing};
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::{Completion, Settled};

pub(crate) fn complete_many(db: &Db, jobs: &[Completion], recmax: i64) -> Result<Vec<Settled>> {
    let entries: Vec<Finishing<'_>> = jobs
        .iter()
        .map(|c| Finishing {
            id: c.id.as_str(),
            token: c.token,
            value: c.output.as_deref().map(Field::Output),
        })
        .collect();
    settle_finished(db, &entries, "completed", recmax)
}
