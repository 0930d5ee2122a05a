//! redrive (`scripts/redrive.lua`): one dead job back to ready (`one`), or every dead job in
//! chunks (`all`, redrive_all), each with `extra` more attempts.

use super::args::num;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{positive, Redriven, CHUNK_DEFAULT};

pub(crate) async fn redrive(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    id: &JobId,
    extra: u32,
) -> Result<Redriven> {
    positive("extra", extra as u64)?;
    let k = QueueKeys::new(queue);
    let v = store
        .run(
            &store.scripts().redrive,
            &[k.dead(), k.pending()],
            vec![
                k.base().as_bytes().to_vec(),
                b"one".to_vec(),
                id.as_str().as_bytes().to_vec(),
                num(extra),
            ],
        )
        .await?;
    match reply::int("redrive", &v)? {
        1 => Ok(Redriven::Redriven),
        0 => Ok(Redriven::NotDead),
        -1 => Ok(Redriven::Gone),
        _ => Err(reply::protocol("redrive", &v)),
    }
}

pub(crate) async fn redrive_all(store: &(impl Engine + ?Sized), queue: &QueueName, extra: u32) -> Result<u64> {
    positive("extra", extra as u64)?;
    let k = QueueKeys::new(queue);
    let mut total = 0;
    loop {
        let v = store
            .run(
                &store.scripts().redrive,
                &[k.dead(), k.pending()],
                vec![
                    k.base().as_bytes().to_vec(),
                    b"all".to_vec(),
                    num(CHUNK_DEFAULT),
                    num(extra),
                ],
            )
            .await?;
        let [done, seen] = reply::tuple("redrive", v)?;
        total += reply::int("redrive", &done)?.max(0) as u64;
        if reply::int("redrive", &seen)? == 0 {
            return Ok(total);
        }
    }
}
