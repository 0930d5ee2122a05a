//! The twin of `scripts/enqueue.lua`: new flat jobs to `pending` at their sequence (FIFO), or to
//! `scheduled` when delayed; a caller id is a duplicate while its row exists (first in a batch wins).

use super::db::Db;
use crate::error::Result;
use crate::job::NewJob;
use crate::store::Enqueued;

pub(crate) fn enqueue(db: &Db, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    super::common::new_jobs(db, None, jobs)
}
