//! resume (`scripts/resume.lua`): claims give jobs again, and parked consumers are woken.

use super::RedisStore;
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};

pub(super) async fn resume(store: &RedisStore, queue: &QueueName) -> Result<()> {
    let k = QueueKeys::new(queue);
    store
        .run(
            &store.scripts.resume,
            &[k.paused(), k.pending(), k.ring()],
            vec![k.base().as_bytes().to_vec()],
        )
        .await?;
    Ok(())
}
