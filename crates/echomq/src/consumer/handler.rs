//! The handler: what it gets ([`JobContext`]), what it returns ([`Verdict`]), and the typed layer
//! over byte payloads ([`typed`]).

use std::future::Future;
use std::marker::PhantomData;
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
    /// Failed: retried after the consumer's `retry_delay` until its budget is spent, then dead.
    Error(String),
    /// Run again after this delay (counts as an attempt; dead at the budget).
    RetryAfter(Duration),
    /// Give up now: dead, with this reason.
    Discard(String),
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

/// One claimed job as its handler sees it.
#[derive(Clone)]
pub struct JobContext {
    /// The job's id.
    pub id: JobId,
    /// The payload (the last checkpoint's, on a redelivery).
    pub payload: Vec<u8>,
    /// This attempt's number: 1 on the first; a claim that used no attempt (the job was released)
    /// does not count.
    pub attempts: u64,
    /// The job's group, for a lane job.
    pub group: Option<GroupName>,
    /// The job's cancel token (never fires unless cancel routing or the locks plane is on).
    pub cancel: CancelToken,
    /// The lease's fencing token, which every fenced call of the handler passes.
    pub(crate) token: u64,
    pub(crate) queue: QueueName,
    pub(crate) store: Arc<dyn Store>,
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("queue", &self.queue)
            .field("id", &self.id)
            .field("attempts", &self.attempts)
            .field("group", &self.group)
            .finish_non_exhaustive()
    }
}

impl JobContext {
    /// The queue the job came from.
    pub fn queue(&self) -> &QueueName {
        &self.queue
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

/// The typed layer: a handler of `T` decoded from the JSON payload. A payload that does not decode
/// is discarded (dead, the decode error as the reason): retrying cannot fix it.
pub fn typed<T, F, Fut>(f: F) -> Typed<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Verdict> + Send + 'static,
{
    Typed { f, _t: PhantomData }
}

/// A handler of typed payloads; see [`typed`].
pub struct Typed<T, F> {
    f: F,
    _t: PhantomData<fn() -> T>,
}

#[async_trait]
impl<T, F, Fut> Handler for Typed<T, F>
where
    T: DeserializeOwned + Send + 'static,
    F: Fn(T, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Verdict> + Send + 'static,
{
    async fn handle(&self, job: JobContext) -> Verdict {
        match job.json::<T>() {
            Ok(value) => (self.f)(value, job).await,
            Err(e) => Verdict::Discard(format!(
                "payload does not decode as {}: {e}",
                std::any::type_name::<T>()
            )),
        }
    }
}
