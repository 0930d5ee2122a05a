//! pause (`scripts/pause.lua`): claims give nothing until resume.

use super::RedisStore;
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};

pub(super) async fn pause(store: &RedisStore, queue: &QueueName) -> Result<()> {
    let k = QueueKeys::new(queue);
    store.run(&store.scripts.pause, &[k.paused()], Vec::new()).await?;
    Ok(())
}
