//! set_priority_aging and priority_aging (`scripts/set_priority_aging.lua`,
//! `scripts/priority_aging.lua`): how long a lower priority waits behind a higher one, the field
//! `aging` of the queue's hash `emq:{q}:order`.

use std::time::Duration;

use super::args::num;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::check_priority_aging;

pub(crate) async fn set_priority_aging(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    aging: Duration,
) -> Result<()> {
    let ms = check_priority_aging(aging)?;
    let k = QueueKeys::new(queue);
    store
        .run(&store.scripts().set_priority_aging, &[k.order()], vec![num(ms)])
        .await?;
    Ok(())
}

pub(crate) async fn priority_aging(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<Duration> {
    let verb = "priority_aging";
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().priority_aging,
            &[k.order()],
            vec![k.base().as_bytes().to_vec()],
        )
        .await?;
    let ms = reply::int(verb, &v)?;
    u64::try_from(ms)
        .map(Duration::from_millis)
        .map_err(|_| reply::protocol(verb, &v))
}
