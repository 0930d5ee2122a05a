//! mark_waited (`scripts/mark_waited.lua`): a job's wait registered, or its finish told at once.

use super::{get, reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::Waited;

pub(crate) async fn mark_waited(store: &(impl Engine + ?Sized), queue: &QueueName, id: &JobId) -> Result<Waited> {
    let k = QueueKeys::new(queue);
    let verb = "mark_waited";
    let v = store
        .run(
            &store.scripts().mark_waited,
            &[k.job(id), k.dead(), k.completed(), k.id(), k.cancelled()],
            vec![id.as_str().as_bytes().to_vec()],
        )
        .await?;
    let mut items = reply::array(verb, v)?.into_iter();
    let tag = match items.next() {
        Some(t) => reply::string(verb, t)?,
        None => return Err(reply::protocol_text(verb, "an empty reply")),
    };
    match tag.as_str() {
        "waiting" => Ok(Waited::Waiting),
        "gone" => {
            let seq = items.next().map(|s| reply::string(verb, s)).transpose()?;
            let sequence = seq
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| reply::protocol_text(verb, "a gone reply without its sequence"))?;
            Ok(Waited::Gone { sequence })
        }
        "finished" => match get::row(verb, id, items.collect())? {
            Some(row) => Ok(Waited::Finished(row)),
            None => Err(reply::protocol_text(verb, "a finished reply without its row")),
        },
        other => Err(reply::protocol_text(verb, &format!("the tag {other:?}"))),
    }
}
