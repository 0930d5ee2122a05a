//! retry (`scripts/retry.lua`): the holder's failure, run again after `delay` or dead once the
//! attempts are spent.

use super::args::{ms, num, settle_arg};
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{millis, positive, Retried, RetryRequest};

pub(crate) async fn retry(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    token: u64,
    retry: &RetryRequest,
) -> Result<Retried> {
    let RetryRequest {
        delay,
        max_attempts,
        ref error,
        settle,
    } = *retry;
    positive("max_attempts", max_attempts as u64)?;
    millis("delay", delay)?;
    let k = QueueKeys::new(queue);
    let recmax = settle_arg(settle);
    let v = store
        .run(
            &store.scripts().retry,
            &[k.active(), k.job(id), k.scheduled(), k.dead()],
            vec![
                k.base().as_bytes().to_vec(),
                id.as_str().as_bytes().to_vec(),
                num(token),
                ms(delay),
                num(max_attempts),
                error.as_bytes().to_vec(),
                recmax,
            ],
        )
        .await?;
    match reply::int("retry", &v)? {
        1 => Ok(Retried::Retrying),
        2 => Ok(Retried::Dead),
        0 => Ok(Retried::Stale),
        -1 => Ok(Retried::Gone),
        _ => Err(reply::protocol("retry", &v)),
    }
}
