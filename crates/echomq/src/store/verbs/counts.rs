//! counts (`scripts/counts.lua`): the queue's sizes and metrics in one call; the lanes' jobs as the
//! groups hash counts them, or (a queue an earlier version wrote, until a job next joins a lane)
//! their lengths summed over calls that walk the groups hash by cursor.

use std::time::Duration;

use crate::store::reply::Reply;

use super::{reply, Engine};
use crate::error::{Error, Result};
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::Counts;

pub(crate) async fn counts(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<Counts> {
    let k = QueueKeys::new(queue);
    let verb = "counts";
    let keys = [k.pending(), k.scheduled(), k.active(), k.dead(), k.paused(), k.groups()];
    let mut cursor = b"0".to_vec();
    let mut lanes = std::collections::HashMap::new();
    loop {
        let v = store
            .run(
                &store.scripts().counts,
                &keys,
                vec![k.base().as_bytes().to_vec(), cursor],
            )
            .await?;
        let items = reply::array(verb, v)?;
        let [pending, scheduled, active, dead, paused, completed, cancelled, failed, retried, stalled, reaped, age, next, groups, kept, kinds] =
            <[Reply; 16]>::try_from(items).map_err(|_| Error::Protocol {
                verb,
                reply: "counts shape".into(),
            })?;
        let mut g = reply::array(verb, groups)?.into_iter();
        while let (Some(name), Some(len)) = (g.next(), g.next()) {
            lanes.insert(reply::bytes(verb, name)?, reply::int(verb, &len)?.max(0) as u64);
        }
        cursor = reply::bytes(verb, next)?;
        let kept = reply::int(verb, &kept)?;
        if cursor == b"0" || kept >= 0 {
            let n = |v: &Reply| reply::int(verb, v).map(|i| i.max(0) as u64);
            let laned = if kept >= 0 {
                kept as u64
            } else {
                lanes.values().sum::<u64>()
            };
            let mut ready_by_kind = Vec::new();
            let mut it = reply::array(verb, kinds)?.into_iter();
            while let (Some(kind), Some(count)) = (it.next(), it.next()) {
                let kind = reply::string(verb, kind)?;
                ready_by_kind.push(((!kind.is_empty()).then_some(kind), n(&count)?));
            }
            ready_by_kind.sort();
            return Ok(Counts {
                pending: n(&pending)? + laned,
                scheduled: n(&scheduled)?,
                active: n(&active)?,
                dead: n(&dead)?,
                completed: n(&completed)?,
                cancelled: n(&cancelled)?,
                failed: n(&failed)?,
                retried: n(&retried)?,
                stalled: n(&stalled)?,
                reaped: n(&reaped)?,
                paused: n(&paused)? == 1,
                oldest_pending_age: u64::try_from(reply::int(verb, &age)?).ok().map(Duration::from_millis),
                ready_by_kind,
            });
        }
    }
}
