//! set_retention and retention (`scripts/set_retention.lua`, `scripts/retention.lua`): what a
//! queue keeps of its finished jobs, in its hash `emq:{q}:retention`.

use std::time::Duration;

use super::args::num;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::reply::Reply;
use crate::store::{check_retention, Retention};

pub(crate) async fn set_retention(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    retention: &Retention,
) -> Result<()> {
    let age = check_retention(retention)?;
    let k = QueueKeys::new(queue);
    store
        .run(
            &store.scripts().set_retention,
            &[k.retention()],
            vec![num(retention.keep), num(age), num(retention.max_output)],
        )
        .await?;
    Ok(())
}

pub(crate) async fn retention(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<Retention> {
    let verb = "retention";
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().retention,
            &[k.retention()],
            vec![k.base().as_bytes().to_vec()],
        )
        .await?;
    let [keep, age, cap] = reply::tuple::<3>(verb, v)?;
    let int = |v: &Reply| reply::int(verb, v).and_then(|n| u64::try_from(n).map_err(|_| reply::protocol(verb, v)));
    let field = |v: &Reply| int(v).and_then(|n| u32::try_from(n).map_err(|_| reply::protocol(verb, v)));
    Ok(Retention {
        keep: field(&keep)?,
        max_age: Duration::from_millis(int(&age)?),
        max_output: field(&cap)?,
    })
}
