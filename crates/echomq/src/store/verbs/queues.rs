//! queues (`scripts/queues.lua`): the registered queue names, sorted.

use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{QueueName, QUEUES_KEY};

pub(crate) async fn queues(store: &(impl Engine + ?Sized)) -> Result<Vec<QueueName>> {
    let v = store
        .run(&store.scripts().queues, &[QUEUES_KEY.to_string()], Vec::new())
        .await?;
    let mut names = Vec::new();
    for item in reply::array("queues", v)? {
        // A foreign member someone added by hand is skipped, not fatal to listing.
        if let Some(q) = reply::string("queues", item).ok().and_then(|n| QueueName::new(n).ok()) {
            names.push(q);
        }
    }
    names.sort();
    Ok(names)
}
