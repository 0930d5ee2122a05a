//! history (`scripts/history.lua`): jobs completed and dead-lettered per minute.

use super::{reply, Engine};
use crate::error::{Error, Result};
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::History;

pub(crate) async fn history(store: &(impl Engine + ?Sized), queue: &QueueName, minutes: u32) -> Result<History> {
    let k = QueueKeys::new(queue);
    let verb = "history";
    let keys = [k.metrics("completed"), k.metrics("failed")];
    let v = store
        .run(&store.scripts().history, &keys, vec![minutes.to_string().into_bytes()])
        .await?;
    let items = reply::array(verb, v)?;
    let n = minutes as usize;
    if items.len() != 1 + 2 * n {
        return Err(Error::Protocol {
            verb,
            reply: format!("{} items for {n} minutes", items.len()),
        });
    }
    let counts = items
        .iter()
        .map(|i| reply::int(verb, i).map(|v| v.max(0) as u64))
        .collect::<Result<Vec<u64>>>()?;
    Ok(History {
        first_minute: counts[0],
        completed: counts[1..=n].to_vec(),
        failed: counts[n + 1..].to_vec(),
    })
}
