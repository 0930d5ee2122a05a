//! pause (`scripts/pause.lua`): claims give nothing until resume.

use super::Engine;
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};

pub(crate) async fn pause(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<()> {
    let k = QueueKeys::new(queue);
    store.run(&store.scripts().pause, &[k.paused()], Vec::new()).await?;
    Ok(())
}
