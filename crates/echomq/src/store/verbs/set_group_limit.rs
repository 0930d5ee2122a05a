//! set_group_limit (`scripts/set_group_limit.lua`): one group's concurrency limit, or the default
//! (an empty group argument).

use super::args::num;
use super::Engine;
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::{positive, LimitTarget};

pub(crate) async fn set_group_limit(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    target: &LimitTarget,
    limit: u32,
) -> Result<()> {
    positive("limit", limit as u64)?;
    let k = QueueKeys::new(queue);
    let group = match target {
        LimitTarget::Group(g) => g.as_str().as_bytes().to_vec(),
        LimitTarget::Default => Vec::new(),
    };
    store
        .run(
            &store.scripts().set_group_limit,
            &[k.groups()],
            vec![k.base().as_bytes().to_vec(), group, num(limit)],
        )
        .await?;
    Ok(())
}
