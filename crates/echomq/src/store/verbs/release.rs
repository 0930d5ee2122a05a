//! release (`scripts/release.lua`): the holder gives the job back without using an attempt.

use std::time::Duration;

use super::args::{ms, num};
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{millis, Settled};

pub(crate) async fn release(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    token: u64,
    delay: Duration,
) -> Result<Settled> {
    millis("delay", delay)?;
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().release,
            &[k.active(), k.job(id), k.scheduled()],
            vec![
                k.base().as_bytes().to_vec(),
                id.as_str().as_bytes().to_vec(),
                num(token),
                ms(delay),
            ],
        )
        .await?;
    reply::settled("release", &v)
}
