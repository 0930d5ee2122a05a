//! The consumer: a beat of recover, promote, drain and park, with batched claims,
//! group-committed settles, cooperative cancellation and the locks plane (lease renewal).
//!
//! ```text
//! loop: check stop → ttl → recover + promote + claim (one round trip) → drain leg → park
//!       a wire error on any leg → sleep min(max(30 s, beat), beat × 2^(streak-1)) → loop
//!       a refusal no retry mends (Error::Misconfigured) → the loop ends; stop/wait_for return it
//! ```
//!
//! An unreachable store is an outage from the first round on: a consumer on a store opened with
//! [`crate::open_lazy`] while the server is down backs off until it is up.
//!
//! Each claimed job runs on a task of its own (a panic becomes `Verdict::Error("panic: …")`); its
//! verdict, and the slot it ran on, go to the settler, which sends a lone settle at once and
//! everything that finished meanwhile together in the next `complete_many`, with the claim for
//! those slots in the same round trip behind it: a slot is free for a claim only once its settle
//! is ahead of that claim, so the next job is the one the store's order gives. The loop, the
//! settler, the parks (on a connection of their own) and the lease renewals never wait behind one
//! another.

mod handler;
mod locks;
mod options;
mod panics;
mod run;
mod settle;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::task::{AbortHandle, JoinHandle};
use tokio_util::sync::CancellationToken;

pub(crate) use handler::State;
pub use handler::{Handler, JobContext, Verdict};
pub use options::*;

use crate::cancel::CancelToken;
use crate::error::{Error, Result};
use crate::keyspace::{JobId, QueueName};
use crate::store::Store;

/// A job in flight: claimed, not yet settled. The locks plane renews its lease; cancel requests
/// reach it through `cancel`.
#[derive(Debug, Clone)]
pub(crate) struct Tracked {
    pub(crate) token: u64,
    pub(crate) cancel: CancelToken,
    /// The handler has returned: its verdict is on its way to the store. A renewal answered stale
    /// or gone now is the job's own settle landing first, not a lost lease.
    pub(crate) settling: bool,
}

/// What the loop, the settler, the forwarder and the locks plane share.
pub(crate) struct Shared {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) queue: QueueName,
    pub(crate) handler: Arc<dyn Handler>,
    pub(crate) opts: ConsumerOptions,
    /// Fired by `stop`: no new claims; in-flight jobs finish and settle.
    pub(crate) stop: CancellationToken,
    /// Fired by `abort`: every handler is dropped where it stands, unsettled.
    pub(crate) aborted: CancellationToken,
    /// Fired when a stop outlasts its timeout: every handler still running is dropped and its job
    /// released (ready again at once, its attempt unused).
    pub(crate) dropping: CancellationToken,
    /// What the worker hands every handler ([`JobContext::state`]).
    pub(crate) state: Arc<handler::State>,
    /// The runtime the consumer started on: its tasks are spawned there from any thread (a store
    /// may start handed-over jobs on a thread of its own).
    pub(crate) runtime: tokio::runtime::Handle,
    /// Fired when the loop has ended (every job it took settled): the forwarder and the locks
    /// plane end with it.
    pub(crate) ended: CancellationToken,
    /// Raised by the loop's first healthy round after an outage: the forwarder subscribes again
    /// (a subscription that lived through the outage may never hear another message) and reads
    /// the in-flight jobs' rows for the requests published meanwhile.
    pub(crate) back: tokio::sync::Notify,
    pub(crate) inflight: Mutex<HashMap<JobId, Tracked>>,
    /// Cancel requests that arrived for a job not (yet) tracked here, newest last, bounded and
    /// kept for [`EARLY_CANCEL_TTL`]: a job tracked right after its request arrived is still
    /// cancelled; a later job that reuses the id is not.
    pub(crate) early_cancels: Mutex<Vec<(JobId, Option<String>, std::time::Instant)>>,
    /// When the consumer started (its ttl runs from here).
    pub(crate) started: std::time::Instant,
    /// Fired when the loop leaves its beat: the settler claims no more.
    pub(crate) closing: CancellationToken,
    /// The refusal no retry mends that ended the loop ([`Error::Misconfigured`]): `stop` and
    /// `wait_for` return it, so the consumer's owner learns why it ended.
    pub(crate) refused: Mutex<Option<Error>>,
    /// Each handler's run time, by outcome ([`crate::telemetry`]).
    pub(crate) timings: crate::telemetry::JobTimings,
    /// The earliest due time of a job this consumer's settles scheduled (a retry, a delayed
    /// release) since its last park began: the park ends by then, as the promote that bounded it
    /// ran before these jobs were scheduled.
    pub(crate) due: Mutex<Option<std::time::Instant>>,
    /// Raised when a cancel request reached a job tracked here: the launcher settles the held jobs
    /// it cancelled at once, without waiting for their turn to run.
    pub(crate) held_cancel: Arc<tokio::sync::Notify>,
}

/// How long a cancel request for a job not tracked here is remembered: the race it covers (a
/// request published between a claim and the tracking of its job) lasts milliseconds.
pub(crate) const EARLY_CANCEL_TTL: Duration = Duration::from_secs(5);

impl Shared {
    /// Whether new jobs may be claimed: no stop, the loop still beating, the ttl not reached.
    pub(crate) fn claiming(&self) -> bool {
        !self.stop.is_cancelled()
            && !self.closing.is_cancelled()
            && self.opts.ttl.is_none_or(|ttl| self.started.elapsed() < ttl)
    }

    /// A job this consumer's settle scheduled is due `after` from now: the next park ends by then.
    pub(crate) fn due_in(&self, after: Duration) {
        let at = std::time::Instant::now() + after;
        let mut due = lock(&self.due);
        if due.is_none_or(|d| at < d) {
            *due = Some(at);
        }
    }

    /// A claim of `n` jobs under the consumer's options.
    pub(crate) fn claim_request(&self, n: usize) -> crate::store::ClaimRequest {
        crate::store::ClaimRequest {
            n: n as u32,
            lease: self.opts.lease,
            max_attempts: self.opts.max_attempts,
            settle: self.opts.settle_options(),
            kinds: self.opts.kinds.clone(),
            held: 0,
        }
    }

    pub(crate) fn track(&self, id: &JobId, token: u64) -> CancelToken {
        let cancel = CancelToken::new();
        let early = {
            let mut early = lock(&self.early_cancels);
            early.retain(|(_, _, at)| at.elapsed() < EARLY_CANCEL_TTL);
            early.iter().position(|(e, _, _)| e == id).map(|i| early.remove(i).1)
        };
        if let Some(reason) = early {
            // the request may be older than this job (its id reused once an earlier job ended):
            // the row's durable cancel field says whether it stands for the job running now
            let (store, queue, id, token) = (self.store.clone(), self.queue.clone(), id.clone(), cancel.clone());
            let held_cancel = self.held_cancel.clone();
            self.runtime.spawn(async move {
                match store.get(&queue, &id).await {
                    Ok(Some(job)) if job.cancel.is_some() => {
                        token.cancel(reason);
                        held_cancel.notify_one();
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(%queue, %id, error = %e, "checking an early cancel request failed"),
                }
            });
        }
        lock(&self.inflight).insert(
            id.clone(),
            Tracked {
                token,
                cancel: cancel.clone(),
                settling: false,
            },
        );
        cancel
    }

    /// Ends the consumer on a refusal no retry mends: the first one is kept for `stop` and
    /// `wait_for`, and the loop claims no more.
    pub(crate) fn refuse(&self, e: Error) {
        lock(&self.refused).get_or_insert(e);
        self.stop.cancel();
    }

    /// Marks attempt `token` of job `id` as settling: its handler has returned.
    pub(crate) fn settling(&self, id: &JobId, token: u64) {
        if let Some(t) = lock(&self.inflight).get_mut(id).filter(|t| t.token == token) {
            t.settling = true;
        }
    }

    /// Forgets attempt `token` of job `id`, unless a later attempt of the same job (claimed again
    /// by this consumer after the lease lapsed) is the one tracked now.
    pub(crate) fn untrack(&self, id: &JobId, token: u64) {
        let mut inflight = lock(&self.inflight);
        if inflight.get(id).is_some_and(|t| t.token == token) {
            inflight.remove(id);
        }
    }
}

/// The runtime this is called in; outside one, an error saying `reason` (tokio would panic at the
/// first spawn).
fn current_runtime(reason: &'static str) -> Result<tokio::runtime::Handle> {
    tokio::runtime::Handle::try_current().map_err(|_| Error::InvalidOption {
        field: "runtime",
        value: "none".into(),
        reason,
    })
}

/// Locks a mutex, recovering the data of one poisoned by a panic elsewhere (the maps it guards stay
/// consistent: every change is a single insert or remove).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A running consumer. Dropping it stops it as [`stop`](Self::stop) does, without waiting for the
/// end: no new claims, and the jobs in flight finish and settle in the background. To wait for
/// that end, call `stop`; to end at once, [`abort`](Self::abort).
pub struct Consumer {
    shared: Arc<Shared>,
    /// True once the loop has ended. A watch (not the join handle) so that a wait dropped halfway,
    /// in a `select!`, leaves the next wait intact.
    done: tokio::sync::watch::Receiver<bool>,
    aborts: Vec<AbortHandle>,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("queue", &self.shared.queue)
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// Validates the options and starts the loop on the current tokio runtime.
    pub fn start(
        store: Arc<dyn Store>,
        queue: QueueName,
        handler: impl Handler,
        opts: ConsumerOptions,
    ) -> Result<Consumer> {
        Self::start_with(store, queue, Arc::new(handler), opts, Arc::default())
    }

    /// [`start`](Self::start) with a shared handler and the state its jobs see.
    pub(crate) fn start_with(
        store: Arc<dyn Store>,
        queue: QueueName,
        handler: Arc<dyn Handler>,
        opts: ConsumerOptions,
        state: Arc<handler::State>,
    ) -> Result<Consumer> {
        opts.validate()?;
        let runtime = current_runtime("a consumer starts inside a tokio runtime (call it from a task)")?;
        let timings = crate::telemetry::JobTimings::new(&queue);
        let shared = Arc::new(Shared {
            store,
            queue,
            handler,
            opts,
            stop: CancellationToken::new(),
            aborted: CancellationToken::new(),
            dropping: CancellationToken::new(),
            state,
            runtime,
            ended: CancellationToken::new(),
            back: tokio::sync::Notify::new(),
            inflight: Mutex::new(HashMap::new()),
            early_cancels: Mutex::new(Vec::new()),
            started: std::time::Instant::now(),
            closing: CancellationToken::new(),
            refused: Mutex::new(None),
            timings,
            due: Mutex::new(None),
            held_cancel: Arc::new(tokio::sync::Notify::new()),
        });
        let mut aborts = Vec::new();
        if shared.opts.cancel {
            aborts.push(tokio::spawn(run::forward_cancels(shared.clone())).abort_handle());
        }
        if shared.opts.locks {
            aborts.push(tokio::spawn(locks::renew(shared.clone())).abort_handle());
        }
        let (settle_tx, settle_rx) = tokio::sync::mpsc::unbounded_channel();
        let launcher = run::Launcher::new(shared.clone(), &settle_tx);
        let settler = settle::Settler::spawn(shared.clone(), settle_rx, launcher.clone());
        aborts.push(settler.abort_handle());
        let (done_tx, done) = tokio::sync::watch::channel(false);
        let task = tokio::spawn({
            let shared = shared.clone();
            async move {
                run::run(shared, launcher, settle_tx, settler).await;
                let _ = done_tx.send(true);
            }
        });
        aborts.push(task.abort_handle());
        Ok(Consumer { shared, done, aborts })
    }

    /// The queue this consumer serves.
    pub fn queue(&self) -> &QueueName {
        &self.shared.queue
    }

    /// Jobs claimed and not yet settled.
    pub fn in_flight(&self) -> usize {
        lock(&self.shared.inflight).len()
    }

    /// True once the loop has ended (stopped, aborted, its ttl elapsed, or the store refused it:
    /// see [`error`](Self::error)).
    pub fn is_finished(&self) -> bool {
        // an aborted loop never sends: its sender is dropped, which ends the channel
        *self.done.borrow() || self.done.has_changed().is_err()
    }

    /// The refusal no retry mends that ended the loop ([`Error::Misconfigured`]: a password
    /// missing or refused, an ACL denial, a server that does not speak the store's protocol), once
    /// it has ended so; `None` while it runs and after any other end.
    pub fn error(&self) -> Option<Error> {
        lock(&self.shared.refused).clone()
    }

    /// Stops: no new claims, and every handler's [`JobContext::shutdown`] fires; in-flight
    /// handlers finish and settle; returns when the loop is down. Past `timeout` the handlers still
    /// running are dropped and their jobs released — ready again at once for any consumer, their
    /// attempts unused — and `stop` returns once those releases are sent. Only when even they do
    /// not finish within [`RELEASE_WAIT`] (the store unreachable) does it return
    /// [`Error::Timeout`]; those jobs come back when their leases lapse. A loop the store refused
    /// returns that refusal ([`error`](Self::error)).
    pub async fn stop(&self, timeout: Duration) -> Result<()> {
        self.shared.stop.cancel();
        if self.ended_within(timeout).await {
            return self.outcome();
        }
        let running: Vec<String> = lock(&self.shared.inflight).keys().map(|id| id.to_string()).collect();
        tracing::warn!(
            queue = %self.shared.queue, ?timeout, ids = ?running,
            "stop timed out; dropping the handlers still running and releasing their jobs"
        );
        self.shared.dropping.cancel();
        if !self.ended_within(RELEASE_WAIT).await {
            return Err(Error::Timeout {
                what: "consumer stop (releasing the jobs still running)",
                after: timeout.saturating_add(RELEASE_WAIT),
            });
        }
        self.outcome()
    }

    /// Waits up to `timeout` for the loop to end on its own (its ttl, or a refusal no retry mends,
    /// which it returns), without asking it to stop. Cancel-safe: dropping the wait halfway
    /// changes nothing.
    pub async fn wait_for(&self, timeout: Duration) -> Result<()> {
        if !self.ended_within(timeout).await {
            return Err(Error::Timeout {
                what: "consumer stop",
                after: timeout,
            });
        }
        self.outcome()
    }

    /// Whether the loop ended within `timeout`. Cancel-safe.
    async fn ended_within(&self, timeout: Duration) -> bool {
        let mut done = self.done.clone();
        // an Err inside (the loop task gone without a word: aborted) has ended all the same
        tokio::time::timeout(timeout, async move { done.wait_for(|d| *d).await.is_ok() })
            .await
            .is_ok()
    }

    /// The ended loop's result: the store's refusal that ended it, else `Ok`.
    fn outcome(&self) -> Result<()> {
        self.error().map_or(Ok(()), Err)
    }

    /// Drops every handler without settling (their leases lapse and recovery returns the jobs).
    pub fn abort(&self) {
        self.shared.aborted.cancel();
        self.shared.stop.cancel();
        for a in &self.aborts {
            a.abort();
        }
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // The forwarder and the locks plane live only as long as the handle; the loop is stopped.
        self.shared.stop.cancel();
    }
}

/// How long a stop past its timeout waits for the releases of the jobs it dropped.
pub const RELEASE_WAIT: Duration = Duration::from_secs(5);

/// Starts a fresh consumer — its own store and connections — whenever the last one ended (its ttl,
/// or a stop of the consumer alone), until the supervisor itself is stopped.
pub struct Supervisor {
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Supervisor {
    /// `make` builds each consumer (open a store, start a consumer on it); it is called again when
    /// the previous consumer's loop has ended. A `make` that fails is retried after `backoff`. A
    /// refusal no retry mends ([`Error::Misconfigured`], from `make` or ending a consumer) ends
    /// the supervisor, logged at error: a fresh consumer would meet it again.
    /// Outside a tokio runtime it returns [`Error::InvalidOption`] (field `runtime`).
    pub fn start<F, Fut>(make: F, backoff: Duration) -> Result<Supervisor>
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: std::future::Future<Output = Result<Consumer>> + Send,
    {
        let runtime = current_runtime("a supervisor starts inside a tokio runtime (call it from a task)")?;
        let stop = CancellationToken::new();
        let stopping = stop.clone();
        let task = runtime.spawn(async move {
            while !stopping.is_cancelled() {
                let consumer = match make().await {
                    Ok(c) => c,
                    Err(e) if e.is_misconfigured() => {
                        tracing::error!(error = %e, "supervisor could not start a consumer; it ends");
                        break;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "supervisor could not start a consumer; retrying");
                        tokio::select! {
                            _ = tokio::time::sleep(backoff) => continue,
                            _ = stopping.cancelled() => break,
                        }
                    }
                };
                tokio::select! {
                    ended = consumer.wait_for(Duration::MAX) => match ended {
                        Err(e) if e.is_misconfigured() => {
                            tracing::error!(queue = %consumer.queue(), error = %e, "the store refused the consumer; the supervisor ends");
                            break;
                        }
                        _ => tracing::info!(queue = %consumer.queue(), "consumer ended; the supervisor starts a fresh one"),
                    },
                    _ = stopping.cancelled() => {
                        let _ = consumer.stop(STOP_TIMEOUT_DEFAULT).await;
                        break;
                    }
                }
            }
        });
        Ok(Supervisor { stop, task })
    }

    /// Stops the current consumer and starts no other.
    pub async fn stop(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}
