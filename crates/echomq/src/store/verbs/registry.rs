//! The registry of live consumers (`scripts/register_consumer.lua`, `unregister_consumer.lua`,
//! `consumers.lua`).

use super::{reply, Engine};
use crate::error::{Error, Result};
use crate::keyspace::{QueueKeys, QueueName};
use crate::registry::{self, ConsumerEntry};

pub(crate) async fn register(store: &(impl Engine + ?Sized), queue: &QueueName, entry: &ConsumerEntry) -> Result<i64> {
    registry::check(entry)?;
    let k = QueueKeys::new(queue);
    let deadline = store
        .run(
            &store.scripts().register_consumer,
            &[k.consumers(), k.consumer_entries()],
            vec![
                entry.id.as_bytes().to_vec(),
                registry::encode(entry).into_bytes(),
                registry::ttl_ms(entry.ttl).to_string().into_bytes(),
                if entry.beat_ms == 0 {
                    b"1".to_vec()
                } else {
                    b"0".to_vec()
                },
            ],
        )
        .await?;
    Ok(reply::int("register_consumer", &deadline)? - registry::ttl_ms(entry.ttl))
}

pub(crate) async fn unregister(store: &(impl Engine + ?Sized), queue: &QueueName, id: &str) -> Result<bool> {
    registry::check_id(id)?;
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().unregister_consumer,
            &[k.consumers(), k.consumer_entries()],
            vec![id.as_bytes().to_vec()],
        )
        .await?;
    Ok(reply::int("unregister_consumer", &v)? == 1)
}

pub(crate) async fn consumers(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<Vec<ConsumerEntry>> {
    let verb = "consumers";
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().consumers,
            &[k.consumers(), k.consumer_entries()],
            vec![],
        )
        .await?;
    let items = reply::array(verb, v)?;
    if items.len() % 3 != 0 {
        return Err(Error::Protocol {
            verb,
            reply: format!("{} items, not triples", items.len()),
        });
    }
    let mut out = Vec::with_capacity(items.len() / 3);
    let mut it = items.into_iter();
    while let (Some(id), Some(deadline), Some(text)) = (it.next(), it.next(), it.next()) {
        let id = reply::string(verb, id)?;
        let deadline = reply::int(verb, &deadline)?;
        if let Some(e) = registry::decode(id, deadline, &reply::string(verb, text)?) {
            out.push(e);
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(out)
}
