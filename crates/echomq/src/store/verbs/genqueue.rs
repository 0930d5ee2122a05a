//! genqueue (`scripts/genqueue.lua`): enqueue's KEYS and ARGV ([`super::enqueue::new_jobs`]) with
//! the group's lane in place of `pending` and the group after the key base.

use super::enqueue::new_jobs;
use super::Engine;
use crate::error::Result;
use crate::job::NewJob;
use crate::keyspace::{GroupName, QueueKeys, QueueName};
use crate::store::Enqueued;

pub(crate) async fn genqueue(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    group: &GroupName,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>> {
    let lane = QueueKeys::new(queue).lane(group);
    new_jobs(store, &store.scripts().genqueue, queue, lane, Some(group), jobs).await
}
