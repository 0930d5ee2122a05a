//! The handler of a consumer: what it gets ([`JobContext`]) and what it returns ([`Verdict`]). The
//! typed layer over it, with routing by kind, is [`crate::Worker`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use serde::de::DeserializeOwned;

use crate::cancel::CancelToken;
use crate::error::Result;
use crate::keyspace::{GroupName, JobId, QueueName};
use crate::store::{Extended, Settled, Store};

/// What a handler decides about its job.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Verdict {
    /// Completed, no output.
    Done,
    /// Completed with an output (kept on a retained row and in the completion record).
    DoneWith(Vec<u8>),
    /// Stopped on a cancel: the job ends cancelled.
    Cancel(String),
    /// Failed: retried after the delay of the job's retry policy (its own, else the consumer's)
    /// until its budget is spent, then dead.
    Error(String),
    /// Run again after this delay (counts as an attempt; dead at the budget).
    RetryAfter(Duration),
    /// Give up now: dead, with this reason.
    Discard(String),
    /// Give the job back without using an attempt: ready again after this delay (zero: at once,
    /// at the front of its set). A snooze; also what a worker does with a kind it has no handler
    /// for, and with the jobs still running when its stop times out.
    Release(Duration),
}

impl Verdict {
    /// `Error` from anything printable.
    pub fn error(e: impl std::fmt::Display) -> Self {
        Verdict::Error(e.to_string())
    }
}

impl<E: std::fmt::Display> From<std::result::Result<(), E>> for Verdict {
    fn from(r: std::result::Result<(), E>) -> Self {
        match r {
            Ok(()) => Verdict::Done,
            Err(e) => Verdict::Error(e.to_string()),
        }
    }
}

/// One claimed job as its handler sees it: who it is, which attempt this is, its cancel token, the
/// worker's shutdown, and the fenced calls a running job makes (checkpoint, lease extension).
#[derive(Clone)]
pub struct JobContext {
    pub(crate) id: JobId,
    pub(crate) payload: Vec<u8>,
    pub(crate) attempt: u64,
    pub(crate) max_attempts: u64,
    pub(crate) group: Option<GroupName>,
    pub(crate) kind: Option<String>,
    pub(crate) cancel: CancelToken,
    pub(crate) shutdown: tokio_util::sync::CancellationToken,
    pub(crate) state: Arc<State>,
    /// The lease's fencing token, which every fenced call of the handler passes.
    pub(crate) token: u64,
    pub(crate) queue: QueueName,
    pub(crate) store: Arc<dyn Store>,
}

/// Values a worker hands every handler ([`JobContext::state`]), one per type.
pub(crate) type State = std::collections::HashMap<std::any::TypeId, Arc<dyn std::any::Any + Send + Sync>>;

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("queue", &self.queue)
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("attempt", &self.attempt)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    /// The queue the job came from.
    pub fn queue(&self) -> &QueueName {
        &self.queue
    }

    /// The job's id.
    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// The payload bytes (the last checkpoint's, on a redelivery).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// This attempt's number: 1 on the first run. A run that used no attempt (the job was
    /// released: a snooze, a stop) does not count. A run whose lease lapsed
    /// (its worker died or stalled) counts under [`Recovery::Reap`](crate::store::Recovery::Reap)
    /// and `Stalled`, so the next run sees the next number; under
    /// [`Recovery::Redeliver`](crate::store::Recovery::Redeliver) it does not, so the next run sees
    /// this number again.
    pub fn attempt(&self) -> u64 {
        self.attempt
    }

    /// The job's attempt budget: its own, else the worker's default.
    pub fn max_attempts(&self) -> u64 {
        self.max_attempts
    }

    /// True when a failure of this attempt makes the job dead instead of retrying it.
    pub fn is_last_attempt(&self) -> bool {
        self.attempt >= self.max_attempts
    }

    /// The job's group, for a job pushed into one.
    pub fn group(&self) -> Option<&GroupName> {
        self.group.as_ref()
    }

    /// The job's kind ([`crate::Job::KIND`]); `None` for a raw job.
    pub fn kind(&self) -> Option<&str> {
        self.kind.as_deref()
    }

    /// The job's cancel token: fired by a cancel request (`Queue::cancel`, `emq cancel`), by a
    /// lost lease, or when the worker drops the handler at the end of its stop. A message, never a
    /// kill: check it where stopping is safe (`ctx.cancel_token().check()?`).
    pub fn cancel_token(&self) -> &CancelToken {
        &self.cancel
    }

    /// Resolves when the worker is stopping: no new jobs start, and this one should finish soon
    /// (past the stop's timeout it is dropped and the job released, its attempt unused).
    pub async fn shutdown(&self) {
        self.shutdown.cancelled().await
    }

    /// True once the worker is stopping (see [`shutdown`](Self::shutdown)).
    pub fn is_shutting_down(&self) -> bool {
        self.shutdown.is_cancelled()
    }

    /// The value of type `T` the worker was given with `.state(value)`, if any.
    pub fn state<T: Send + Sync + 'static>(&self) -> Option<&T> {
        self.state
            .get(&std::any::TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
    }

    /// Checkpoint: the row's payload becomes `payload`, so a redelivery resumes from it. Fenced:
    /// `Stale` once this consumer no longer holds the job.
    pub async fn checkpoint(&self, payload: impl AsRef<[u8]>) -> Result<Settled> {
        self.store
            .update_data(&self.queue, &self.id, self.token, payload.as_ref())
            .await
    }

    /// Moves the lease's end to `lease` from the store's now. Fenced like a settle.
    pub async fn extend_lock(&self, lease: Duration) -> Result<Extended> {
        self.store.extend_lock(&self.queue, &self.id, self.token, lease).await
    }

    /// Decodes the payload as JSON.
    pub fn json<T: DeserializeOwned>(&self) -> std::result::Result<T, serde_json::Error> {
        serde_json::from_slice(&self.payload)
    }
}

/// A job handler. Any `Fn(JobContext) -> impl Future<Output = Verdict>` is one.
#[async_trait]
pub trait Handler: Send + Sync + 'static {
    /// Runs one job and says what became of it.
    async fn handle(&self, job: JobContext) -> Verdict;
}

#[async_trait]
impl<F, Fut> Handler for F
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Verdict> + Send + 'static,
{
    async fn handle(&self, job: JobContext) -> Verdict {
        self(job).await
    }
}
