//! The [`Worker`]: handlers registered by job kind, one consumer loop per queue it serves, and the
//! handle that stops them ([`WorkerHandle`]).
//!
//! ```no_run
//! # async fn run() -> echomq::Result<()> {
//! use std::time::Duration;
//! use echomq::{Job, JobContext, JobError, Worker};
//!
//! #[derive(serde::Serialize, serde::Deserialize)]
//! struct SendEmail { to: String }
//! impl Job for SendEmail { const KIND: &'static str = "send_email"; }
//!
//! let store = echomq::open("").await?;
//! let worker = Worker::new(store, "emails")?
//!     .on(|job: SendEmail, _ctx: JobContext| async move {
//!         Ok::<_, JobError>(format!("sent to {}", job.to))
//!     })
//!     .concurrency(8)
//!     .start()?;
//! worker.stop(Duration::from_secs(5)).await?;
//! # Ok(())
//! # }
//! ```

mod error;
mod route;

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

pub use error::JobError;
pub use route::{JobHandler, RawOutput};

use crate::consumer::{Consumer, ConsumerOptions};
use crate::error::{Error, Result};
use crate::job::Job;
use crate::keyspace::QueueName;
use crate::store::Store;
use route::{Raw, Route, Router, Typed};

/// A worker being built: its queues, a handler per job kind, its options. [`start`](Self::start)
/// runs it.
///
/// The defaults are the safe ones: one job at a time, leases renewed while a handler runs (a job
/// is never run twice at once because it outlived its lease), cancel requests routed to the
/// running jobs, and a stop that gives back the jobs still running when its timeout passes.
pub struct Worker {
    store: Arc<dyn Store>,
    queues: Vec<QueueName>,
    routes: HashMap<&'static str, Arc<dyn Route>>,
    raw: Option<Arc<dyn Route>>,
    opts: ConsumerOptions,
    state: crate::consumer::State,
    /// The first mistake made while building (a bad queue name, a kind registered twice),
    /// reported by `start`.
    refused: Option<Error>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut kinds: Vec<&str> = self.routes.keys().copied().collect();
        kinds.sort_unstable();
        f.debug_struct("Worker")
            .field("queues", &self.queues)
            .field("kinds", &kinds)
            .field("raw", &self.raw.is_some())
            .field("options", &self.opts)
            .finish_non_exhaustive()
    }
}

impl Worker {
    /// A worker for `queue` on `store`, with no handler yet. Refuses an invalid queue name.
    pub fn new(store: Arc<dyn Store>, queue: &str) -> Result<Worker> {
        Ok(Worker {
            store,
            queues: vec![QueueName::new(queue)?],
            routes: HashMap::new(),
            raw: None,
            opts: ConsumerOptions::default(),
            state: HashMap::new(),
            refused: None,
        })
    }

    /// Serves another queue too: its own consumer loop, the same handlers and options.
    pub fn queue(mut self, queue: &str) -> Self {
        match QueueName::new(queue) {
            Ok(q) if !self.queues.contains(&q) => self.queues.push(q),
            Ok(_) => {}
            Err(e) => self.refuse(e),
        }
        self
    }

    /// Runs jobs of kind `J::KIND` (and of its aliases) with `handler`: any
    /// `async` closure `|job: J, ctx: JobContext| … -> Result<O, JobError>` with `O: Serialize`,
    /// or a [`JobHandler`]. The payload is decoded as `J` (one that does not decode goes dead,
    /// naming serde's error); the output is kept as JSON.
    pub fn on<J: Job, H: JobHandler<J>>(mut self, handler: H) -> Self {
        let route: Arc<dyn Route> = Arc::new(Typed::<J, H> {
            handler: Arc::new(handler),
            _job: PhantomData,
        });
        for kind in std::iter::once(J::KIND).chain(J::KIND_ALIASES.iter().copied()) {
            if let Err(e) = crate::store::check_kind(kind) {
                self.refuse(e);
            } else if self.routes.insert(kind, route.clone()).is_some() {
                self.refuse(Error::InvalidOption {
                    field: "kind",
                    value: kind.to_string(),
                    reason: "registered twice on one worker",
                });
            }
        }
        self
    }

    /// Runs the raw jobs (pushed with `push_raw`, or by `emq enqueue` without `--kind`) with
    /// `handler`, which reads the bytes with `ctx.payload()` and returns its output as bytes (a
    /// `Vec<u8>`, a `String`, or `()` for none).
    pub fn on_raw<F, Fut, O>(mut self, handler: F) -> Self
    where
        F: Fn(crate::JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<O, JobError>> + Send + 'static,
        O: RawOutput + 'static,
    {
        if self.raw.is_some() {
            self.refuse(Error::InvalidOption {
                field: "on_raw",
                value: "a second raw handler".into(),
                reason: "registered twice on one worker",
            });
        }
        self.raw = Some(Arc::new(Raw { f: Arc::new(handler) }));
        self
    }

    /// A value every handler reads with `ctx.state::<T>()` (a database pool, a client): one per
    /// type; a second of the same type replaces the first.
    pub fn state<T: Send + Sync + 'static>(mut self, value: T) -> Self {
        self.state.insert(std::any::TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// Jobs at once, per queue (1 by default).
    pub fn concurrency(mut self, n: usize) -> Self {
        self.opts.concurrency = n;
        self
    }

    /// How many claimed jobs each queue's consumer may hold beyond its free slots (0 by default):
    /// many short jobs then run one after another without a round trip to the store between
    /// them, while each keeps its lease, fencing and cancel
    /// ([`ConsumerOptions::prefetch`](crate::ConsumerOptions::prefetch)).
    pub fn prefetch(mut self, n: usize) -> Self {
        self.opts.prefetch = n;
        self
    }

    /// The lease of each job (30 s by default): how long a consumer that went silent keeps it.
    /// Renewed while the handler runs, so at least
    /// [`LEASE_RENEWED_MIN`](crate::consumer::LEASE_RENEWED_MIN) (1 s; `start` refuses less).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.opts.lease = lease;
        self
    }

    /// The longest one run of a handler may take (none by default): past it the handler is
    /// dropped and the attempt fails.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.opts.timeout = Some(timeout);
        self
    }

    /// The attempt budget of jobs pushed without their own (3 by default).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.opts.max_attempts = n;
        self
    }

    /// How long a failed job waits before it runs again, for jobs without a policy of their own
    /// (a fixed 1 s by default): [`RetryPolicy::fixed`](crate::RetryPolicy::fixed),
    /// [`exponential`](crate::RetryPolicy::exponential) or a [`function`](crate::RetryPolicy::function)
    /// of the attempt and the error.
    pub fn retry(mut self, policy: crate::RetryPolicy) -> Self {
        self.opts.retry = policy;
        self
    }

    /// Every consumer option at once (the beat, recovery, retention, …), replacing those set so
    /// far. The kinds are the worker's own: those of its handlers (`on`, aliases included, and raw
    /// jobs with `on_raw`), whatever `opts` says.
    pub fn options(mut self, opts: ConsumerOptions) -> Self {
        self.opts = opts;
        self
    }

    fn refuse(&mut self, e: Error) {
        self.refused.get_or_insert(e);
    }

    /// Starts one consumer loop per queue on the current tokio runtime. Refuses a worker with no
    /// handler, the first mistake made while building it, and invalid options.
    pub fn start(self) -> Result<WorkerHandle> {
        if let Some(e) = self.refused {
            return Err(e);
        }
        if self.routes.is_empty() && self.raw.is_none() {
            return Err(Error::InvalidOption {
                field: "handlers",
                value: "none".into(),
                reason: "register at least one with on or on_raw",
            });
        }
        let router = Router {
            routes: self.routes,
            raw: self.raw,
        };
        // the consumers claim the kinds routed here alone: a job of another kind waits for a
        // worker that runs it, and never wakes these
        let opts = self.opts.with_kinds(router.kinds());
        let router: Arc<dyn crate::consumer::Handler> = Arc::new(router);
        let state = Arc::new(self.state);
        let mut consumers = Vec::with_capacity(self.queues.len());
        for queue in self.queues {
            let consumer = Consumer::start_with(self.store.clone(), queue, router.clone(), opts.clone(), state.clone());
            match consumer {
                Ok(c) => consumers.push(c),
                Err(e) => {
                    for c in &consumers {
                        c.abort();
                    }
                    return Err(e);
                }
            }
        }
        Ok(WorkerHandle { consumers })
    }
}

/// A running worker. Dropping it stops it as [`stop`](Self::stop) begins to (no new jobs; those
/// running finish in the background); call `stop` to wait for the end.
#[derive(Debug)]
pub struct WorkerHandle {
    consumers: Vec<Consumer>,
}

impl WorkerHandle {
    /// Stops every queue's loop at once: no new jobs; each handler's `ctx.shutdown()` fires and
    /// those running get `timeout` to finish and settle. Past it they are dropped and their jobs
    /// released — ready again at once for another worker, their attempts unused. Errs only when
    /// even those releases could not be sent (the store unreachable): those jobs come back when
    /// their leases lapse, or when a loop had ended on a refusal no retry mends (that error).
    pub async fn stop(&self, timeout: Duration) -> Result<()> {
        let stops = self.consumers.iter().map(|c| c.stop(timeout));
        futures::future::join_all(stops).await.into_iter().collect()
    }

    /// Waits until every queue's loop has ended on its own (its ttl), or one has ended on a refusal
    /// no retry mends ([`Error::Misconfigured`]: a password missing or refused, an ACL denial, a
    /// server that does not speak the store's protocol), which it returns at once; the other loops
    /// run on until [`stop`](Self::stop) or the handle's drop. Cancel-safe.
    pub async fn wait(&self) -> Result<()> {
        let ends = self.consumers.iter().map(|c| c.wait_for(Duration::MAX));
        futures::future::try_join_all(ends).await.map(drop)
    }

    /// The first refusal no retry mends that ended one of the worker's loops, if any (see
    /// [`wait`](Self::wait)).
    pub fn error(&self) -> Option<Error> {
        self.consumers.iter().find_map(Consumer::error)
    }

    /// Drops every handler where it stands, unsettled: their jobs come back when their leases
    /// lapse (prefer [`stop`](Self::stop), which gives them back at once).
    pub fn abort(&self) {
        for c in &self.consumers {
            c.abort();
        }
    }

    /// Jobs running now, across the worker's queues.
    pub fn in_flight(&self) -> usize {
        self.consumers.iter().map(Consumer::in_flight).sum()
    }

    /// True once every queue's loop has ended.
    pub fn is_finished(&self) -> bool {
        self.consumers.iter().all(Consumer::is_finished)
    }
}
