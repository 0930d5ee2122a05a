//! The twin of `scripts/genqueue.lua`: new jobs of group g to its lane at a rank of their priority (or `scheduled`), then
//! the ring step and one wake per job the group's free slots let be claimed.

use super::db::Db;
use crate::error::Result;
use crate::job::NewJob;
use crate::store::Enqueued;

pub(crate) fn genqueue(db: &Db, group: &str, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    super::common::new_jobs(db, Some(group), jobs)
}
