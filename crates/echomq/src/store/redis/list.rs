//! list (`scripts/list.lua`): a page of the ids in one state.

use super::args::num;
use super::{reply, RedisStore};
use crate::error::Result;
use crate::job::JobState;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::check_list_limit;

pub(super) async fn list(
    store: &RedisStore,
    queue: &QueueName,
    state: JobState,
    offset: u64,
    limit: u32,
) -> Result<Vec<JobId>> {
    check_list_limit(limit)?;
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts.list,
            &[
                k.pending(),
                k.scheduled(),
                k.active(),
                k.dead(),
                k.completed(),
                k.ring(),
                k.throttled(),
            ],
            vec![
                k.base().as_bytes().to_vec(),
                state.as_str().as_bytes().to_vec(),
                num(offset),
                num(limit),
            ],
        )
        .await?;
    reply::array("list", v)?
        .into_iter()
        .map(|i| reply::string("list", i).map(JobId::from_store))
        .collect()
}
