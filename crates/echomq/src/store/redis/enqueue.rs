//! enqueue (`scripts/enqueue.lua`), and the building and reading shared with genqueue: jobs
//! validated, split in script calls of ≤ 1000 jobs and ≤ 8 MiB, all sent in one pipeline with the
//! `SADD emq:queues` registration.

use super::args::num;
use super::scripts::Script;
use super::{reply, RedisStore};
use crate::error::{Error, Result};
use crate::job::NewJob;
use crate::keyspace::{GroupName, JobId, QueueKeys, QueueName, QUEUES_KEY};
use crate::store::{check_jobs, Enqueued};

pub(super) async fn enqueue(store: &RedisStore, queue: &QueueName, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
    let ready = QueueKeys::new(queue).pending();
    new_jobs(store, &store.scripts.enqueue, queue, ready, None, jobs).await
}

/// enqueue and genqueue: `ready` is the list a job due now joins (KEYS[2]: `pending`, or
/// genqueue's lane), `group` genqueue's group (its ARGV carry it after the key base).
pub(super) async fn new_jobs(
    store: &RedisStore,
    script: &Script,
    queue: &QueueName,
    ready: String,
    group: Option<&GroupName>,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>> {
    check_jobs(jobs, store.payload_limit)?;
    if jobs.is_empty() {
        return Ok(Vec::new());
    }
    let k = QueueKeys::new(queue);
    let keys = vec![
        k.id(),
        ready,
        k.scheduled(),
        k.ring(),
        k.groups(),
        k.wake(),
        k.obliterating(),
    ];
    let mut calls = Vec::new();
    let mut batches = Vec::new();
    for batch in crate::store::bounded(jobs, |j| j.payload.len()) {
        let mut args = Vec::with_capacity(3 + 5 * batch.len());
        args.push(k.base().as_bytes().to_vec());
        if let Some(g) = group {
            args.push(g.as_str().as_bytes().to_vec());
        }
        args.push(num(batch.len()));
        // the plain layout (payloads alone) when no job has an option: a fifth of the arguments
        let plain = batch.iter().all(|j| {
            j.id.is_none() && j.max_attempts.is_none() && j.kind.is_none() && j.delay.is_none_or(|d| d.as_millis() == 0)
        });
        for job in batch {
            if !plain {
                args.push(
                    job.id
                        .as_ref()
                        .map(|i| i.as_str().as_bytes().to_vec())
                        .unwrap_or_default(),
                );
                args.push(num(job.delay.map(|d| d.as_millis()).unwrap_or(0)));
                args.push(job.max_attempts.map(num).unwrap_or_default());
                args.push(job.kind.as_deref().unwrap_or_default().as_bytes().to_vec());
            }
            args.push(job.payload.clone());
        }
        calls.push((keys.clone(), args));
        batches.push(batch);
    }
    let mut register = redis::cmd("SADD");
    register.arg(QUEUES_KEY).arg(queue.as_str());
    let replies = store
        .run_pipelined(script, calls, vec![register])
        .await
        .map_err(|e| match e {
            Error::Obliterating { .. } => Error::Obliterating {
                queue: queue.to_string(),
            },
            other => other,
        })?;
    let verb = script.name;
    let mut out = Vec::with_capacity(jobs.len());
    for (v, batch) in replies.into_iter().zip(batches) {
        // {first sequence, index of each duplicate…}: new jobs take sequences in batch order
        let items = reply::array(verb, v)?;
        let mut items = items.iter();
        let mut seq = reply::int(
            verb,
            items.next().ok_or_else(|| Error::Protocol {
                verb,
                reply: "empty".into(),
            })?,
        )?;
        let dups = items
            .map(|i| reply::int(verb, i))
            .collect::<Result<std::collections::HashSet<i64>>>()?;
        for (i, job) in batch.iter().enumerate() {
            if dups.contains(&(i as i64 + 1)) {
                let id = job.id.clone().ok_or_else(|| Error::Protocol {
                    verb,
                    reply: "a generated id reported duplicate".into(),
                })?;
                out.push(Enqueued::Duplicate(id));
            } else {
                out.push(Enqueued::New(
                    job.id.clone().unwrap_or_else(|| JobId::from_store(seq.to_string())),
                ));
                seq += 1;
            }
        }
    }
    Ok(out)
}
