//! enqueue (`scripts/enqueue.lua`), and the building and reading shared with genqueue: jobs
//! validated, split in script calls of ≤ 1000 jobs and ≤ 8 MiB, all sent in one pipeline; then,
//! only when a call that landed replied the queue's registration owed, the `SADD emq:queues` and
//! the mark that it is paid.

use crate::store::reply::Reply;

use super::args::{num, words};
use super::Call;
use super::{reply, Engine};
use crate::error::{Error, Result};
use crate::job::NewJob;
use crate::keyspace::{GroupName, JobId, QueueKeys, QueueName, QUEUES_KEY};
use crate::store::scripts::Script;
use crate::store::{check_jobs, Enqueued};

/// A job's arguments in the enqueue's (and genqueue's) full layout, in order: the script names the
/// same positions (`emq_new_jobs` in `scripts/lib/new_jobs.lua`; a test holds the two equal).
pub(crate) const ENQUEUE_JOB_FIELDS: [&str; 8] = [
    "id",
    "delay_ms",
    "max_attempts",
    "kind",
    "priority",
    "retry",
    "dedup",
    "payload",
];

pub(crate) async fn enqueue(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>> {
    let ready = QueueKeys::new(queue).pending();
    new_jobs(store, &store.scripts().enqueue, queue, ready, None, jobs).await
}

/// enqueue and genqueue: `ready` is the list a job due now joins (KEYS[2]: `pending`, or
/// genqueue's lane), `group` genqueue's group (its ARGV carry it after the key base).
pub(crate) async fn new_jobs(
    store: &(impl Engine + ?Sized),
    script: &Script,
    queue: &QueueName,
    ready: String,
    group: Option<&GroupName>,
    jobs: &[NewJob],
) -> Result<Vec<Enqueued>> {
    check_jobs(jobs, store.payload_limit())?;
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
        k.registered(),
        k.order(),
    ];
    let mut calls = Vec::new();
    let mut batches = Vec::new();
    for batch in crate::store::bounded(jobs, |j| j.payload.len()) {
        let mut args = Vec::with_capacity(3 + ENQUEUE_JOB_FIELDS.len() * batch.len());
        args.push(k.base().as_bytes().to_vec());
        if let Some(g) = group {
            args.push(g.as_str().as_bytes().to_vec());
        }
        args.push(num(batch.len()));
        // the plain layout (payloads alone) when no job has an option: an eighth of the arguments
        let plain = batch.iter().all(|j| {
            j.id.is_none()
                && j.max_attempts.is_none()
                && j.kind.is_none()
                && j.priority.is_none_or(|p| p == 0)
                && j.retry.is_none()
                && j.dedup.is_none()
                && j.delay.is_none_or(|d| d.as_millis() == 0)
        });
        for job in batch {
            if plain {
                args.push(job.payload.clone());
            } else {
                args.extend(ENQUEUE_JOB_FIELDS.map(|field| job_field(job, field)));
            }
        }
        calls.push(Call {
            script,
            keys: keys.clone(),
            args,
        });
        batches.push(batch);
    }
    // the most any job asks of the replicas (the store's own setting is added in the send)
    let wait = jobs
        .iter()
        .filter_map(|j| j.wait_replicas)
        .reduce(|(n, t), (m, u)| (n.max(m), t.max(u)));
    let replies = store.run_calls_waiting(calls, wait).await?;
    let verb = script.name;
    let mut out = Vec::with_capacity(jobs.len());
    let mut owed: Vec<String> = Vec::new();
    let mut failed = None;
    for (sent, batch) in replies.into_iter().zip(batches) {
        let v = match sent {
            Ok(v) => v,
            // the calls after a refused one are refused alike (the mark) or land on their own;
            // either way the first error is the caller's, and what landed still registers
            Err(e) => {
                failed.get_or_insert(e);
                continue;
            }
        };
        match read_batch(verb, v, batch, &mut out) {
            Ok(Some(token)) if !owed.contains(&token) => owed.push(token),
            Ok(_) => {}
            Err(e) => {
                failed.get_or_insert(e);
            }
        }
    }
    if !owed.is_empty() {
        register(store, queue, &owed).await;
    }
    match failed {
        Some(Error::Obliterating { .. }) => Err(Error::Obliterating {
            queue: queue.to_string(),
        }),
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// A job's argument `field` (one of [`ENQUEUE_JOB_FIELDS`]) in the full layout: '' for none.
fn job_field(job: &NewJob, field: &str) -> Vec<u8> {
    match field {
        "id" => job
            .id
            .as_ref()
            .map(|i| i.as_str().as_bytes().to_vec())
            .unwrap_or_default(),
        "delay_ms" => num(job.delay.map(|d| d.as_millis()).unwrap_or(0)),
        "max_attempts" => job.max_attempts.map(num).unwrap_or_default(),
        "kind" => job.kind.as_deref().unwrap_or_default().as_bytes().to_vec(),
        "priority" => job.priority.filter(|p| *p > 0).map(num).unwrap_or_default(),
        "retry" => job
            .retry
            .as_ref()
            .map(|r| r.to_string().into_bytes())
            .unwrap_or_default(),
        "dedup" => job.dedup.as_ref().map(|d| d.arg().into_bytes()).unwrap_or_default(),
        "payload" => job.payload.clone(),
        _ => Vec::new(),
    }
}

/// One call's reply, `{first sequence, registration owed (nil when none), then per job another
/// answered: its index and that job's id…}` (a caller id's duplicate: '', its own id; a debounce:
/// the index negated), read into `out` (new jobs take sequences in batch order); the token of the
/// registration owed, if any.
fn read_batch(verb: &'static str, v: Reply, batch: &[NewJob], out: &mut Vec<Enqueued>) -> Result<Option<String>> {
    let items = reply::array(verb, v)?;
    let mut items = items.into_iter();
    let mut seq = reply::int(
        verb,
        &items.next().ok_or_else(|| Error::Protocol {
            verb,
            reply: "empty".into(),
        })?,
    )?;
    let owed = match items.next() {
        None | Some(Reply::Nil) => None,
        Some(token) => Some(reply::string(verb, token)?),
    };
    let mut answered = std::collections::HashMap::new();
    while let Some(index) = items.next() {
        let index = reply::int(verb, &index)?;
        let holder = reply::string(verb, items.next().unwrap_or(Reply::Nil))?;
        answered.insert(index.unsigned_abs(), (index < 0, holder));
    }
    for (i, job) in batch.iter().enumerate() {
        match answered.remove(&(i as u64 + 1)) {
            Some((_, holder)) if holder.is_empty() => {
                let id = job.id.clone().ok_or_else(|| Error::Protocol {
                    verb,
                    reply: "a generated id reported duplicate".into(),
                })?;
                out.push(Enqueued::Duplicate(id));
            }
            Some((true, holder)) => out.push(Enqueued::Debounced(JobId::from_store(holder))),
            Some((false, holder)) => out.push(Enqueued::Deduplicated(JobId::from_store(holder))),
            None => {
                out.push(Enqueued::New(
                    job.id.clone().unwrap_or_else(|| JobId::from_store(seq.to_string())),
                ));
                seq += 1;
            }
        }
    }
    Ok(owed)
}

/// Pays the queue's registration: its name `SADD`ed to `emq:queues`, then each owed token (of the
/// life the enqueue landed in) marked paid with `ZADD XX`, so the enqueues after it send nothing
/// more. The mark follows the `SADD`'s success: a failed `SADD` leaves the registration owed, and
/// the queue's next enqueue pays it. The `XX` marks nothing when the token's life has ended (an
/// obliterate came between: the next life owes its own). The jobs landed whatever happens here,
/// so a failure is logged, not returned: an error would have the caller enqueue them again.
pub(crate) async fn register(store: &(impl Engine + ?Sized), queue: &QueueName, owed: &[String]) {
    let add = words(["SADD", QUEUES_KEY, queue.as_str()]);
    let added = store
        .commands("enqueue", QUEUES_KEY, vec![add])
        .await
        .and_then(|mut r| r.pop().unwrap_or(Ok(Reply::Nil)));
    if let Err(e) = added {
        tracing::warn!(queue = %queue, error = %e, "registering the queue failed; its next enqueue registers it");
        return;
    }
    // the mark lives in the queue's slot (emq:queues, on a cluster, in a slot of its own)
    let key = QueueKeys::new(queue).registered();
    let marks = owed
        .iter()
        .map(|token| words(["ZADD", &key, "XX", "1", token]))
        .collect();
    let marked = store.commands("enqueue", &key, marks).await;
    if let Some(e) = marked.map_or_else(Some, |r| r.into_iter().find_map(Result::err)) {
        tracing::warn!(queue = %queue, error = %e, "marking the queue's registration paid failed; its next enqueue registers it again");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_names_the_job_fields_as_the_verb_sends_them() {
        let lua = include_str!("../../../scripts/lib/new_jobs.lua");
        let named = crate::store::scripts::lua_positions(lua, "ENQUEUE_JOB_FIELDS");
        assert_eq!(named, ENQUEUE_JOB_FIELDS, "emq_new_jobs's positions");
        // every field is sent: a job with every option set sends no field empty
        let key = crate::keyspace::DedupKey::new("key").unwrap();
        let job = NewJob::new(b"p".to_vec())
            .with_id(JobId::new("j").unwrap())
            .with_delay(std::time::Duration::from_millis(5))
            .with_max_attempts(3)
            .with_kind("k")
            .with_priority(2)
            .with_retry(crate::RetryPolicy::default())
            .with_dedup(crate::dedup::Dedup::new(key, crate::dedup::DedupMode::UntilFinished).unwrap());
        for field in ENQUEUE_JOB_FIELDS {
            assert!(!job_field(&job, field).is_empty(), "{field} is not sent");
        }
    }
}
