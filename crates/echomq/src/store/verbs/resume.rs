//! resume (`scripts/resume.lua`): claims give jobs again, and parked consumers are woken.

use super::Engine;
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};

pub(crate) async fn resume(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<()> {
    let k = QueueKeys::new(queue);
    store
        .run(
            &store.scripts().resume,
            &[k.paused(), k.pending(), k.ring()],
            vec![k.base().as_bytes().to_vec()],
        )
        .await?;
    Ok(())
}
