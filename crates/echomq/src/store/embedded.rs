//! `EmbeddedStore`: the native twin of every script, on one SQLite file (bundled SQLite, WAL) — the
//! default store when no Redis URL is given. Each verb is one `BEGIN IMMEDIATE` transaction on the
//! store's own clock, never held across an `.await`: run on a thread of the store's own, or — a
//! producer's or an operator's verb of a few rows, when the connection is free and no other
//! process holds the write lock — on the caller's own thread, which spares it two thread wakes
//! (see `On`). Each gives the same typed replies as Redis for the same inputs: the schema mirrors
//! the Redis keyspace table by table (but for `active` and `pending`: a job's lease deadline and
//! its place in pending are columns of its row, so an enqueue is one insert per job, a claim one
//! update and a settle one delete) and each twin (`embedded/<verb>.rs`) follows its script step by
//! step.
//!
//! Limits, plainly:
//! * **one writer at a time**: transactions serialize (several processes may share the file;
//!   a writer waits up to the busy timeout for another);
//! * **wakes**: a consumer in the same process is woken at once by an enqueue (the store's thread
//!   notifies it as the commit lands, and hands it the wake token in memory) — and when it parked
//!   offering a claim (`park_with_handoff`, the consumer does with a batch of free slots), that
//!   enqueue's own transaction writes the jobs claimed for it and hands them over after the commit
//!   (`embedded/handoff.rs`): one durable transaction between the enqueue and the handler's start,
//!   not two; one in another process notices within one beat: its park ends, sees
//!   `PRAGMA data_version` moved, and the next round claims — never by busy polling;
//! * **local file systems only** (WAL needs shared memory between the processes);
//! * **upgrades**: the first build of a newer schema to open a file migrates it, and an older build
//!   refuses a newer file only when it opens it: stop every process of the older build before
//!   starting the newer one on the same file;
//! * **durability**: `kill -9` never loses an acknowledged write (WAL, `synchronous=NORMAL`); a power
//!   loss may lose the last transactions unless the store is opened with `synchronous=FULL`
//!   ([`EmbeddedStore::open_with`], or the URL `sqlite:PATH?synchronous=full`);
//! * **checkpoints off the verbs' path**: a checkpointer thread with its own connection copies the
//!   `-wal` file into the database file while commits come (`PASSIVE`, it never blocks anyone) and
//!   truncates the `-wal` file once the file has been idle for half a second, so it does not grow;
//!   the store's connection checkpoints itself only past 10,000 pages, should that thread fall
//!   behind (see `embedded/checkpoint.rs`).

mod checkpoint;
mod common;
mod db;
#[doc(hidden)]
pub mod engine;
mod handoff;
mod registry;
mod schema;
mod txn;

mod cancel;
mod claim;
mod complete;
mod complete_cancelled;
mod complete_many;
mod consumers;
mod counts;
mod discard;
mod drain;
mod enqueue;
mod extend_lock;
mod genqueue;
mod get;
mod groups;
mod history;
mod list;
mod list_schedules;
mod mark_waited;
mod obliterate;
mod pause;
mod pause_schedule;
mod priority_aging;
mod promote;
mod promote_job;
mod queues;
mod rate;
mod rate_limits;
mod reap;
mod redrive;
mod refill_schedule;
mod register_consumer;
mod release;
mod remove;
mod remove_schedule;
mod resume;
mod resume_schedule;
mod retention;
mod retry;
mod schedule_common;
mod set_group_limit;
mod set_priority_aging;
mod set_rate_limit;
mod set_retention;
mod sweep_stalled;
mod trigger_schedule;
mod unregister_consumer;
mod update_data;
mod upsert_schedule;

use std::collections::HashMap;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use rusqlite::config::DbConfig;
use rusqlite::Connection;
use tokio::sync::Notify;

use crate::error::{Error, Result};
use crate::job::{JobRow, JobState, NewJob};
use crate::keyspace::{GroupName, JobId, QueueName};
use crate::rate::{RateLimit, RateLimits, RateTarget};
use crate::registry::ConsumerEntry;
use crate::schedule::{Refill, RefillRequest, Schedule, ScheduleInfo, ScheduleName};
use crate::store::GroupsPage;
use crate::store::{
    check_claim, check_jobs, check_list_limit, check_outputs, check_payload, check_retention, millis, positive, After,
    CancelRequest, Cancelled, ClaimRequest, Claimed, CompletedThenClaimed, Completion, Counts, Discarded, Enqueued,
    Extended, Handoff, History, JobsPage, LimitTarget, Obliterated, Promoted, PromotedJob, Recovery, Redriven, Removed,
    Retention, Retried, Round, SettleOptions, Settled, StalledPolicy, Store, Swept, Waited, BATCH_MAX, CHUNK_DEFAULT,
    PAYLOAD_LIMIT_DEFAULT,
};
use db::Db;

pub use schema::SCHEMA_VERSION;

/// The file the embedded store opens when no URL is given: `./echomq.db`.
pub const DEFAULT_PATH: &str = "echomq.db";

/// How long a writer waits for another process's transaction before the verb fails.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The page cache of the store's connection, in KiB (SQLite's default is 2 MiB; a queue of 100,000
/// waiting jobs spans more).
pub const CACHE_KIB: i64 = 32 * 1024;

/// The most jobs an enqueue (or genqueue) call may hold to run on its caller's thread.
const RUN_HERE_JOBS: usize = 16;

/// Where a verb's transaction runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum On {
    /// On the store's thread: the consumer's verbs (there they overlap with the handlers' work on
    /// the runtime, where on the caller's thread they would hold a runtime thread for the whole
    /// transaction; see `docs/performance.md`) and the verbs whose work grows with the queue.
    Thread,
    /// On the caller's thread when the connection is free ([`EmbeddedStore::run_here`]), else on
    /// the store's thread: a producer's or an operator's verb of a few rows, whose caller waits for
    /// nothing else.
    CallerFirst,
}

impl On {
    /// An enqueue of `jobs` jobs: on the caller's thread first when they are few.
    fn enqueue(jobs: usize) -> On {
        if jobs <= RUN_HERE_JOBS {
            On::CallerFirst
        } else {
            On::Thread
        }
    }
}

/// How often a cancel-request stream looks for requests written by other processes.
pub const CANCEL_POLL: Duration = Duration::from_millis(200);

pub(crate) fn sql_error(verb: &'static str, e: rusqlite::Error) -> Error {
    Error::Store {
        verb,
        reason: e.to_string(),
    }
}

/// The store's error for a refusal met while opening `path`: [`Error::Misconfigured`] when no retry
/// mends it (the file cannot be opened or written, or it is not a database), else as
/// [`sql_error`] (a database locked by another process is transient).
pub(crate) fn open_error(path: &str, e: rusqlite::Error) -> Error {
    use rusqlite::ErrorCode;
    let code = e.sqlite_error_code();
    if matches!(
        code,
        Some(
            ErrorCode::CannotOpen
                | ErrorCode::NotADatabase
                | ErrorCode::ReadOnly
                | ErrorCode::PermissionDenied
                | ErrorCode::DatabaseCorrupt
        )
    ) {
        return Error::Misconfigured {
            addr: path.to_string(),
            reason: e.to_string(),
        };
    }
    sql_error("open", e)
}

type Work = Box<dyn FnOnce(&mut Worker) + Send>;

/// What the store's thread owns: its connection and what it tells the store handles.
struct Worker {
    conn: Connection,
    wakes: Wakes,
    /// `PRAGMA data_version` as of the thread's last transaction: it changes when another
    /// connection (another process, another handle) commits.
    data_version: Arc<AtomicI64>,
    /// The registry of live consumers' own file, opened by its first verb (`embedded/registry.rs`).
    registry: Option<Connection>,
}

/// The in-process wake of each queue.
type Wakes = Arc<Mutex<HashMap<String, Arc<Wake>>>>;

/// A queue's in-process wake: the signals its parked consumers and its cancel streams wait on, the
/// wake tokens this process pushed that no park has taken yet (the wake list's twin in memory,
/// capped as the list is, so a park of this process never needs a transaction to take one).
#[derive(Default)]
struct Wake {
    /// The finishes of waited jobs this process committed (the twin of `emq:{q}:finished`).
    finished: Finished,
    /// Parked consumers: a commit that made work claimable (or handed some over).
    signal: Notify,
    /// Cancel streams: a commit that published a cancel request. Apart from `signal`, so an
    /// enqueue does not send every cancel stream to read the requests table.
    cancels: Notify,
    tokens: AtomicI64,
    /// Parked consumers' claim requests, served by the next transaction that wakes the queue.
    offers: handoff::Offers,
    /// Jobs handed over to parked consumers so far.
    handed: std::sync::atomic::AtomicU64,
}

/// The notices of a queue's finished waited jobs: `Some(id)`, or `None` for every waited job.
struct Finished(tokio::sync::broadcast::Sender<Option<JobId>>);

impl Default for Finished {
    fn default() -> Self {
        Finished(tokio::sync::broadcast::channel(WAIT_NOTICES_BUFFERED).0)
    }
}

/// Notices a wait's stream may fall behind by before it is told to look again instead.
const WAIT_NOTICES_BUFFERED: usize = 1024;

/// How often a wait's stream looks for another process's commits (`PRAGMA data_version`): a job
/// finished by another process is noticed within this; one finished by this process at once.
pub const WAIT_BEAT: Duration = Duration::from_millis(500);

impl Wake {
    /// LPOP of one token: true when there was one.
    fn take(&self) -> bool {
        self.tokens
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| (t > 0).then(|| t - 1))
            .is_ok()
    }

    fn push(&self, n: i64) {
        let _ = self.tokens.fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
            Some((t + n).min(db::WAKES_MAX))
        });
    }
}

fn wake_of(wakes: &Wakes, queue: &str) -> Arc<Wake> {
    let mut wakes = wakes.lock().unwrap_or_else(|p| p.into_inner());
    match wakes.get(queue) {
        Some(w) => w.clone(),
        None => wakes.entry(queue.to_string()).or_default().clone(),
    }
}

/// The embedded store. Cheap to clone: clones share the connection's thread and the wake signals.
#[derive(Clone)]
pub struct EmbeddedStore {
    /// The connection and its state, for the store's thread and for a verb run on its caller's
    /// thread ([`Self::run_here`]). Declared before `worker`, so dropped first: the store's thread
    /// holds the last reference and closes the connection.
    shared: Arc<Mutex<Worker>>,
    worker: std::sync::mpsc::Sender<Work>,
    path: Arc<String>,
    wakes: Wakes,
    data_version: Arc<AtomicI64>,
    payload_limit: usize,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

/// How durable each commit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// `synchronous=NORMAL`: safe against a crashed process (`kill -9`); a power loss may lose the
    /// last commits. The default.
    #[default]
    Normal,
    /// `synchronous=FULL`: every commit reaches the disk before it is acknowledged.
    Full,
}

impl EmbeddedStore {
    /// Opens (creating when missing) the database file at `path`, migrating its schema.
    pub async fn open(path: &str) -> Result<Self> {
        Self::open_with(path, Durability::Normal).await
    }

    /// Opens from the path part of an embedded store URL: `PATH`, or `PATH?synchronous=full` for
    /// [`Durability::Full`] (`?synchronous=normal` is the default). Any other option is refused.
    pub async fn open_url(url: &str) -> Result<Self> {
        let (path, synchronous) = super::embedded_path(url)?;
        let durability = match synchronous {
            super::Synchronous::Normal => Durability::Normal,
            super::Synchronous::Full => Durability::Full,
        };
        Self::open_with(path, durability).await
    }

    /// Opens with a chosen durability.
    pub async fn open_with(path: &str, durability: Durability) -> Result<Self> {
        let (tx, rx) = std::sync::mpsc::channel::<Work>();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let owned = path.to_string();
        let wakes: Wakes = Arc::default();
        let data_version = Arc::new(AtomicI64::new(0));
        let (thread_wakes, thread_version) = (wakes.clone(), data_version.clone());
        std::thread::Builder::new()
            .name("emq-sqlite".into())
            .spawn(move || {
                let conn = match Self::connect(&owned, durability) {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                // the checkpointer ends when this thread does (its sender dropped with `_stop`)
                let _stop = checkpoint::spawn(&owned, &conn);
                let worker = Arc::new(Mutex::new(Worker {
                    conn,
                    wakes: thread_wakes,
                    data_version: thread_version,
                    registry: None,
                }));
                let _ = ready_tx.send(Ok(worker.clone()));
                // the thread ends when every store handle is gone
                while let Ok(work) = rx.recv() {
                    let mut w = worker.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
                    // a verb that panics (a defect) fails alone: its transaction rolls back as it
                    // unwinds, its caller gets an error, and the thread serves the next verb
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| work(&mut w))).is_err() {
                        tracing::error!("an embedded store verb panicked; its caller gets an error");
                    }
                }
            })
            .map_err(|e| Error::Store {
                verb: "open",
                reason: format!("cannot start the store thread: {e}"),
            })?;
        let shared = ready_rx.await.map_err(|_| Error::Store {
            verb: "open",
            reason: "the store thread ended while opening".into(),
        })??;
        Ok(EmbeddedStore {
            shared,
            worker: tx,
            path: Arc::new(path.to_string()),
            wakes,
            data_version,
            payload_limit: PAYLOAD_LIMIT_DEFAULT,
        })
    }

    /// Opens and configures the connection; every refusal names the file, and one no retry mends
    /// (a file that cannot be opened or written, or is not a database) is
    /// [`Error::Misconfigured`].
    fn connect(path: &str, durability: Durability) -> Result<Connection> {
        // the usual cause of SQLite's bare "unable to open" and "readonly database"
        let hinted = |reason: String| {
            if reason.contains("unable to open") || reason.contains("readonly database") {
                format!(
                    "{reason} (the store needs to create and write the file, its -wal and -shm beside it: \
                     does the directory exist, and may this user write there?)"
                )
            } else {
                reason
            }
        };
        Self::configure(path, durability).map_err(|e| match e {
            Error::Store { verb, reason } => {
                let at = if reason.contains(path) {
                    String::new()
                } else {
                    format!("{path}: ")
                };
                Error::Store {
                    verb,
                    reason: format!("{at}{}", hinted(reason)),
                }
            }
            Error::Misconfigured { addr, reason } => Error::Misconfigured {
                addr,
                reason: hinted(reason),
            },
            other => other,
        })
    }

    fn configure(path: &str, durability: Durability) -> Result<Connection> {
        let mut conn = Connection::open(path).map_err(|e| open_error(path, e))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(|e| open_error(path, e))?;
        // a new file's switch to WAL takes an exclusive lock, and of two connections switching at
        // once SQLite answers one busy at once, without its busy handler (they would deadlock):
        // wait that out as the busy timeout would
        until_not_busy(|| conn.pragma_update(None, "journal_mode", "WAL")).map_err(|e| open_error(path, e))?;
        let sync = match durability {
            Durability::Normal => "NORMAL",
            Durability::Full => "FULL",
        };
        conn.pragma_update(None, "synchronous", sync)
            .map_err(|e| open_error(path, e))?;
        conn.pragma_update(None, "cache_size", -CACHE_KIB)
            .map_err(|e| open_error(path, e))?;
        // statement journals (an upsert's, a multi-row statement's) in small heap chunks: by
        // default each opens with one 64 KiB chunk, and its free at the statement's end shrinks
        // the heap only for the next statement to grow it again, two system calls and fresh pages
        // in every such verb
        conn.pragma_update(None, "temp_store", "MEMORY")
            .map_err(|e| open_error(path, e))?;
        // the bundled SQLite plans with STAT4, which re-prepares a cached statement whenever a
        // parameter its plan looked at is bound again (every ORDER BY … LIMIT and min/max here,
        // at every call); the stable planner never looks at bound values
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
            .map_err(|e| open_error(path, e))?;
        conn.set_prepared_statement_cache_capacity(256);
        schema::migrate(&mut conn, path)?;
        Ok(conn)
    }

    /// Sets the largest payload (and output) accepted, in bytes (default 16 MiB).
    pub fn with_payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = limit;
        self
    }

    /// The database file.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// The durability the store's connection commits with, read back from SQLite
    /// (`PRAGMA synchronous`), not from what was asked.
    pub async fn durability(&self) -> Result<Durability> {
        self.on_thread("durability", |w: &mut Worker| {
            let level: i64 = w
                .conn
                .query_row("PRAGMA synchronous", [], |r| r.get(0))
                .map_err(|e| sql_error("durability", e))?;
            match level {
                1 => Ok(Durability::Normal),
                2 => Ok(Durability::Full),
                other => Err(Error::Store {
                    verb: "durability",
                    reason: format!("synchronous is {other}, neither NORMAL (1) nor FULL (2)"),
                }),
            }
        })
        .await
    }

    /// park, with an optional offer: armed before the look for a token, the offer registered only
    /// when no token waits, and withdrawn when the park ends unless a transaction took it. A park
    /// whose offer was served leaves the wake tokens to the other parks of this process (the
    /// serving transaction pushed none for the jobs it handed over).
    async fn park_offering(
        &self,
        queue: &QueueName,
        timeout: Duration,
        offer: Option<(ClaimRequest, Handoff)>,
    ) -> Result<bool> {
        let wake = self.wake(queue.as_str());
        // registered before the look, so a wake between the look and the wait is not missed
        let notified = wake.signal.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if wake.take() {
            return Ok(true);
        }
        let served = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let _offer = offer.map(|(claim, handoff)| {
            let served = served.clone();
            let handoff: Handoff = Box::new(move |jobs| {
                served.store(true, Ordering::Release);
                handoff(jobs);
            });
            handoff::register(wake.clone(), claim, handoff)
        });
        let seen = self.data_version.load(Ordering::Acquire);
        let deadline = tokio::time::Instant::now() + timeout.min(crate::store::PARK_TIMEOUT_MAX);
        loop {
            tokio::select! {
                // woken in this process: go at once when the wake handed this park its jobs or
                // left a token for it (taken, as BLPOP takes one); a wake whose work went to
                // other parks leaves this one parked, as BLPOP wakes one consumer per token
                _ = &mut notified => {
                    if served.load(Ordering::Acquire) || wake.take() {
                        return Ok(true);
                    }
                    notified.set(wake.signal.notified());
                    notified.as_mut().enable();
                    // a token pushed between the look and the re-arm
                    if wake.take() {
                        return Ok(true);
                    }
                }
                _ = tokio::time::sleep_until(deadline) => {
                    // another process's (or handle's) commit since the store's last transaction:
                    // it may have pushed a wake this process cannot see, so report a wake
                    let now = self
                        .on_thread("park", |w: &mut Worker| {
                            let v = data_version(&w.conn).map_err(|e| sql_error("park", e))?;
                            w.data_version.store(v, Ordering::Release);
                            Ok(v)
                        })
                        .await?;
                    return Ok(now != seen || served.load(Ordering::Acquire));
                }
            }
        }
    }

    /// Runs `f` on the store's thread with the registry's connection (opened on first use).
    async fn on_registry<T, F>(&self, verb: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Connection) -> Result<T> + Send + 'static,
    {
        let path = self.path.clone();
        self.on_thread(verb, move |w: &mut Worker| {
            let conn = match w.registry.take() {
                Some(c) => c,
                None => registry::open(&path)?,
            };
            let out = f(&conn);
            w.registry = Some(conn);
            out
        })
        .await
    }

    /// `PRAGMA data_version` of the store's connection: it moves when another connection (another
    /// process, or another handle on the file) commits.
    async fn foreign_commits(&self) -> Result<i64> {
        self.on_thread("finished_waits", |w: &mut Worker| {
            data_version(&w.conn).map_err(|e| sql_error("finished_waits", e))
        })
        .await
    }

    /// How many jobs of `queue` this handle has handed to parked consumers of this process since
    /// it opened (claimed inside the transaction that woke them; see `park_with_handoff`).
    pub fn handed_over(&self, queue: &QueueName) -> u64 {
        self.wake(queue.as_str()).handed.load(Ordering::Relaxed)
    }

    fn wake(&self, queue: &str) -> Arc<Wake> {
        wake_of(&self.wakes, queue)
    }

    /// Runs `f` as one `BEGIN IMMEDIATE` transaction: with [`On::CallerFirst`] on the caller's
    /// thread when the connection is free and no other writer holds the file ([`Self::run_here`]),
    /// else on the store's thread. A twin that errs rolls back: nothing of it is written. A commit
    /// that pushed wake tokens notifies this process's parked consumers at once; one that
    /// published a cancel request, its cancel streams.
    async fn run<T, F>(&self, queue: &str, verb: &'static str, on: On, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&Db) -> Result<T> + Send + 'static,
    {
        let f = match on {
            On::CallerFirst => match self.run_here(queue, verb, f) {
                Ok(out) => return out,
                Err(f) => f,
            },
            On::Thread => f,
        };
        let q = queue.to_string();
        self.on_thread(verb, move |w: &mut Worker| {
            let Worker {
                conn,
                wakes,
                data_version,
                ..
            } = w;
            let t = txn::Txn::begin(conn).map_err(|e| sql_error(verb, e))?;
            transact(t, wakes, data_version, &q, verb, f)
        })
        .await
    }

    /// Runs `f` on the caller's thread, when the store's thread is not using the connection and
    /// `BEGIN IMMEDIATE` gets the write lock at once (no waiting on another process: a wait would
    /// hold up the caller's runtime); else hands `f` back untouched. A small verb run here costs
    /// neither the hop to the store's thread nor, when it wakes a consumer of this runtime, the
    /// hop back: the woken task runs next on this very thread.
    fn run_here<T, F>(&self, queue: &str, verb: &'static str, f: F) -> std::result::Result<Result<T>, F>
    where
        F: FnOnce(&Db) -> Result<T>,
    {
        let mut guard = match self.shared.try_lock() {
            Ok(guard) => guard,
            // a verb that panicked here unwound through the lock: its transaction rolled back
            Err(std::sync::TryLockError::Poisoned(p)) => {
                self.shared.clear_poison();
                p.into_inner()
            }
            Err(std::sync::TryLockError::WouldBlock) => return Err(f),
        };
        let Worker {
            conn,
            wakes,
            data_version,
            ..
        } = &mut *guard;
        if conn.busy_timeout(Duration::ZERO).is_err() {
            return Err(f);
        }
        if let Ok(t) = txn::Txn::begin(conn) {
            // the twin's statements never wait: this connection holds the write lock now
            return Ok(match t.busy_timeout(BUSY_TIMEOUT) {
                Ok(()) => {
                    let run = std::panic::AssertUnwindSafe(|| transact(t, wakes, data_version, queue, verb, f));
                    std::panic::catch_unwind(run).unwrap_or_else(|_| {
                        tracing::error!(verb, "an embedded store verb panicked; its caller gets an error");
                        Err(Error::Store {
                            verb,
                            reason: "the verb panicked (a defect); nothing of it was written".into(),
                        })
                    })
                }
                Err(e) => Err(sql_error(verb, e)),
            });
        }
        let _ = conn.busy_timeout(BUSY_TIMEOUT);
        Err(f)
    }

    /// Runs `f` with the connection on the store's thread, outside any transaction of its own.
    async fn on_thread<T, F>(&self, verb: &'static str, f: F) -> Result<T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Worker) -> Result<T> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let work: Work = Box::new(move |w: &mut Worker| {
            let _ = tx.send(f(w));
        });
        self.worker.send(work).map_err(|_| Error::Store {
            verb,
            reason: "the store thread is gone".into(),
        })?;
        rx.await.map_err(|_| Error::Store {
            verb,
            reason: "the store thread dropped the request".into(),
        })?
    }
}

/// The body of every verb's transaction `t`: the twin `f`, the hand-off of its claimable jobs to
/// this process's parked offers, the commit, then the wakes. A twin that errs rolls back.
fn transact<T>(
    t: txn::Txn<'_>,
    wakes: &Wakes,
    version: &AtomicI64,
    q: &str,
    verb: &'static str,
    f: impl FnOnce(&Db) -> Result<T>,
) -> Result<T> {
    let (out, woken, tokens, handed, cancels, finished) = {
        let db = Db::new(&t, q, verb).offering(handoff::Direct::of(wakes, q));
        let out = f(&db)?;
        // a parked consumer of this process that offered a claim gets it in this very
        // transaction (handed over after the commit; a rollback drops it)
        let woken = db.woke.get().then(|| wake_of(wakes, q));
        let handed = match &woken {
            Some(wake) => handoff::serve(&db, wake)?,
            None => handoff::Handed::default(),
        };
        db.flush_counts()?;
        let finished = db.finished.take();
        (out, woken, db.tokens.get(), handed, db.cancels.get(), finished)
    };
    let now = data_version(&t).map_err(|e| sql_error(verb, e))?;
    t.commit().map_err(|e| sql_error(verb, e))?;
    version.store(now, Ordering::Release);
    if let Some(wake) = woken {
        // the jobs handed over need no wake token of their own
        wake.push((tokens - handed.tokens()).max(0));
        wake.handed.fetch_add(handed.jobs() as u64, Ordering::Relaxed);
        // every job made claimable went to an offer: no park needs waking (a served one's caller
        // has its jobs, and a wake would put its task beside them on this thread, pushing them to
        // another worker)
        let all_handed = handed.jobs() > 0 && tokens <= handed.tokens();
        handed.deliver();
        if !all_handed {
            wake.signal.notify_waiters();
        }
    }
    if cancels {
        wake_of(wakes, q).cancels.notify_waiters();
    }
    if !finished.is_empty() {
        let wake = wake_of(wakes, q);
        for id in finished {
            // an id the store wrote is valid; none: every waited job
            let _ = wake.finished.0.send(id.map(JobId::from_store));
        }
    }
    Ok(out)
}

/// Runs `f` again while it answers busy, for up to [`BUSY_TIMEOUT`], with short sleeps: for the
/// statements SQLite answers busy without calling its busy handler. Blocks the calling thread (the
/// store's own).
fn until_not_busy<T>(mut f: impl FnMut() -> rusqlite::Result<T>) -> rusqlite::Result<T> {
    let began = std::time::Instant::now();
    let mut pause = Duration::from_millis(1);
    loop {
        match f() {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy && began.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            other => return other,
        }
    }
}

/// `PRAGMA data_version`: changes when another connection commits.
fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
}

/// The records `MAXLEN` of a settling verb (what it keeps of a finished job is the queue's
/// retention, which the twins read).
fn settle_arg(settle: SettleOptions) -> i64 {
    crate::store::records_maxlen(settle) as i64
}

#[async_trait]
impl Store for EmbeddedStore {
    async fn enqueue(&self, queue: &QueueName, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        check_jobs(jobs, self.payload_limit)?;
        let mut out = Vec::with_capacity(jobs.len());
        for batch in crate::store::bounded(jobs, |j| j.payload.len()) {
            let batch = batch.to_vec();
            let q = queue.clone();
            out.extend(
                self.run(queue.as_str(), "enqueue", On::enqueue(batch.len()), move |db| {
                    enqueue::enqueue(db, &batch)
                })
                .await
                .map_err(|e| obliterating(e, &q))?,
            );
        }
        Ok(out)
    }

    async fn genqueue(&self, queue: &QueueName, group: &GroupName, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        check_jobs(jobs, self.payload_limit)?;
        let mut out = Vec::with_capacity(jobs.len());
        for batch in crate::store::bounded(jobs, |j| j.payload.len()) {
            let batch = batch.to_vec();
            let (q, g) = (queue.clone(), group.to_string());
            out.extend(
                self.run(queue.as_str(), "genqueue", On::enqueue(batch.len()), move |db| {
                    genqueue::genqueue(db, &g, &batch)
                })
                .await
                .map_err(|e| obliterating(e, &q))?,
            );
        }
        Ok(out)
    }

    async fn claim(
        &self,
        queue: &QueueName,
        n: u32,
        lease: Duration,
        max_attempts: u32,
        settle: SettleOptions,
    ) -> Result<Claimed> {
        positive("n", n as u64)?;
        check_claim(lease, max_attempts)?;
        let recmax = settle_arg(settle);
        let lease = lease.as_millis() as i64;
        let mut out = Claimed::default();
        let mut left = n as usize;
        while left > 0 {
            let take = left.min(BATCH_MAX) as i64;
            let got = self
                .run(queue.as_str(), "claim", On::Thread, move |db| {
                    claim::claim(db, take, lease, max_attempts as i64, recmax)
                })
                .await?;
            let k = got.len();
            out.jobs.extend(got.jobs);
            (out.wait, out.queue_limited) = (got.wait, got.queue_limited);
            if (k as i64) < take {
                break;
            }
            left -= take as usize;
        }
        Ok(out)
    }

    async fn complete(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        output: Option<&[u8]>,
        settle: SettleOptions,
    ) -> Result<Settled> {
        if let Some(o) = output {
            check_payload(o.len(), self.payload_limit)?;
        }
        let recmax = settle_arg(settle);
        let (id, output) = (id.to_string(), output.map(<[u8]>::to_vec));
        self.run(queue.as_str(), "complete", On::Thread, move |db| {
            complete::complete(db, &id, token, output.as_deref(), recmax)
        })
        .await
    }

    async fn complete_many(
        &self,
        queue: &QueueName,
        jobs: &[Completion],
        settle: SettleOptions,
    ) -> Result<Vec<Settled>> {
        check_outputs(jobs, self.payload_limit)?;
        let recmax = settle_arg(settle);
        let mut out = Vec::with_capacity(jobs.len());
        for batch in crate::store::bounded(jobs, |c| c.output.as_ref().map_or(0, Vec::len)) {
            let batch = batch.to_vec();
            out.extend(
                self.run(queue.as_str(), "complete_many", On::Thread, move |db| {
                    complete_many::complete_many(db, &batch, recmax)
                })
                .await?,
            );
        }
        Ok(out)
    }

    async fn complete_cancelled(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        reason: Option<&str>,
        settle: SettleOptions,
    ) -> Result<Settled> {
        let recmax = settle_arg(settle);
        let (id, reason) = (id.to_string(), reason.map(str::to_string));
        self.run(queue.as_str(), "complete_cancelled", On::Thread, move |db| {
            complete_cancelled::complete_cancelled(db, &id, token, reason.as_deref(), recmax)
        })
        .await
    }

    async fn release(&self, queue: &QueueName, id: &JobId, token: u64, delay: Duration) -> Result<Settled> {
        let delay = millis("delay", delay)? as i64;
        let id = id.to_string();
        self.run(queue.as_str(), "release", On::Thread, move |db| {
            release::release(db, &id, token, delay)
        })
        .await
    }

    async fn retry(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        delay: Duration,
        max_attempts: u32,
        error: &str,
        settle: SettleOptions,
    ) -> Result<Retried> {
        positive("max_attempts", max_attempts as u64)?;
        millis("delay", delay)?;
        let recmax = settle_arg(settle);
        let (id, error) = (id.to_string(), error.to_string());
        let delay = delay.as_millis() as i64;
        self.run(queue.as_str(), "retry", On::Thread, move |db| {
            retry::retry(db, &id, token, delay, max_attempts as i64, &error, recmax)
        })
        .await
    }

    async fn discard(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        error: &str,
        settle: SettleOptions,
    ) -> Result<Discarded> {
        let recmax = settle_arg(settle);
        let (id, error) = (id.to_string(), error.to_string());
        self.run(queue.as_str(), "discard", On::Thread, move |db| {
            discard::discard(db, &id, token, &error, recmax)
        })
        .await
    }

    async fn reap(&self, queue: &QueueName, limit: u32, max_redeliveries: Option<u32>) -> Result<u64> {
        positive("limit", limit as u64)?;
        if let Some(m) = max_redeliveries {
            positive("max_redeliveries", m as u64)?;
        }
        self.run(queue.as_str(), "reap", On::Thread, move |db| {
            reap::reap(db, limit as i64, max_redeliveries.map(i64::from))
        })
        .await
    }

    async fn sweep_stalled(&self, queue: &QueueName, policy: StalledPolicy) -> Result<Swept> {
        positive("max_stalled", policy.max_stalled as u64)?;
        positive("limit", policy.limit as u64)?;
        self.run(queue.as_str(), "sweep_stalled", On::Thread, move |db| {
            sweep_stalled::sweep_stalled(db, policy.max_stalled as i64, policy.limit as i64)
        })
        .await
    }

    async fn promote(&self, queue: &QueueName, limit: u32, grace: Duration) -> Result<Promoted> {
        positive("limit", limit as u64)?;
        let grace = millis("grace", grace)? as i64;
        self.run(queue.as_str(), "promote", On::Thread, move |db| {
            promote::promote(db, limit as i64, grace)
        })
        .await
    }

    async fn upsert_schedule(&self, queue: &QueueName, schedule: &Schedule) -> Result<u64> {
        schedule.check()?;
        let name = schedule.name.as_str().to_string();
        let def = schedule.fields();
        let slots = crate::schedule::first_slots(&schedule.timing, crate::schedule::wall_ms());
        self.run(queue.as_str(), "upsert_schedule", On::CallerFirst, move |db| {
            upsert_schedule::upsert_schedule(db, &name, &def, &slots)
        })
        .await
    }

    async fn remove_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool> {
        let name = name.as_str().to_string();
        self.run(queue.as_str(), "remove_schedule", On::CallerFirst, move |db| {
            remove_schedule::remove_schedule(db, &name)
        })
        .await
    }

    async fn pause_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool> {
        let name = name.as_str().to_string();
        self.run(queue.as_str(), "pause_schedule", On::CallerFirst, move |db| {
            pause_schedule::pause_schedule(db, &name)
        })
        .await
    }

    async fn resume_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool> {
        let name = name.as_str().to_string();
        self.run(queue.as_str(), "resume_schedule", On::CallerFirst, move |db| {
            resume_schedule::resume_schedule(db, &name)
        })
        .await
    }

    async fn list_schedules(&self, queue: &QueueName) -> Result<Vec<ScheduleInfo>> {
        self.run(
            queue.as_str(),
            "list_schedules",
            On::Thread,
            list_schedules::list_schedules,
        )
        .await
    }

    async fn trigger_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<Option<JobId>> {
        let name = name.as_str().to_string();
        let id = self
            .run(queue.as_str(), "trigger_schedule", On::CallerFirst, move |db| {
                trigger_schedule::trigger_schedule(db, &name)
            })
            .await?;
        Ok(id.map(JobId::from_store))
    }

    async fn refill_schedule(&self, queue: &QueueName, request: &RefillRequest, refill: &Refill) -> Result<bool> {
        let (request, refill) = (request.clone(), refill.clone());
        self.run(queue.as_str(), "refill_schedule", On::CallerFirst, move |db| {
            refill_schedule::refill_schedule(db, &request, refill.omitted, &refill.slots)
        })
        .await
    }

    async fn extend_lock(&self, queue: &QueueName, id: &JobId, token: u64, lease: Duration) -> Result<Extended> {
        positive("lease", millis("lease", lease)?)?;
        let id = id.to_string();
        let lease = lease.as_millis() as i64;
        self.run(queue.as_str(), "extend_lock", On::Thread, move |db| {
            extend_lock::extend_lock(db, &id, token, lease)
        })
        .await
    }

    async fn update_data(&self, queue: &QueueName, id: &JobId, token: u64, payload: &[u8]) -> Result<Settled> {
        check_payload(payload.len(), self.payload_limit)?;
        let (id, payload) = (id.to_string(), payload.to_vec());
        self.run(queue.as_str(), "update_data", On::Thread, move |db| {
            update_data::update_data(db, &id, token, &payload)
        })
        .await
    }

    async fn pause(&self, queue: &QueueName) -> Result<()> {
        self.run(queue.as_str(), "pause", On::Thread, pause::pause).await
    }

    async fn resume(&self, queue: &QueueName) -> Result<()> {
        self.run(queue.as_str(), "resume", On::Thread, resume::resume).await
    }

    async fn drain(&self, queue: &QueueName) -> Result<u64> {
        let mut total = 0;
        loop {
            let (removed, finished) = self
                .run(queue.as_str(), "drain", On::Thread, move |db| {
                    drain::drain(db, CHUNK_DEFAULT as i64)
                })
                .await?;
            total += removed;
            if finished {
                return Ok(total);
            }
        }
    }

    async fn obliterate(&self, queue: &QueueName, force: bool) -> Result<Obliterated> {
        let mut total = 0;
        loop {
            let step = self
                .run(queue.as_str(), "obliterate", On::Thread, move |db| {
                    obliterate::obliterate(db, force, CHUNK_DEFAULT as i64)
                })
                .await?;
            match step {
                obliterate::Step::Refused(active) => return Ok(Obliterated::Active { active }),
                obliterate::Step::Chunk { removed, finished } => {
                    total += removed;
                    if finished {
                        return Ok(Obliterated::Done { removed: total });
                    }
                }
            }
        }
    }

    async fn get(&self, queue: &QueueName, id: &JobId) -> Result<Option<JobRow>> {
        let id = id.clone();
        self.run(queue.as_str(), "get", On::CallerFirst, move |db| get::get(db, &id))
            .await
    }

    async fn remove(&self, queue: &QueueName, id: &JobId, force: bool) -> Result<Removed> {
        let id = id.to_string();
        self.run(queue.as_str(), "remove", On::CallerFirst, move |db| {
            remove::remove(db, &id, force)
        })
        .await
    }

    async fn redrive(&self, queue: &QueueName, id: &JobId, extra: u32) -> Result<Redriven> {
        positive("extra", extra as u64)?;
        let id = id.to_string();
        self.run(queue.as_str(), "redrive", On::CallerFirst, move |db| {
            redrive::redrive(db, &id, extra as i64)
        })
        .await
    }

    async fn redrive_all(&self, queue: &QueueName, extra: u32) -> Result<u64> {
        positive("extra", extra as u64)?;
        let mut total = 0;
        loop {
            let (done, seen) = self
                .run(queue.as_str(), "redrive", On::Thread, move |db| {
                    redrive::redrive_all(db, extra as i64, CHUNK_DEFAULT as i64)
                })
                .await?;
            total += done;
            if seen == 0 {
                return Ok(total);
            }
        }
    }

    async fn promote_job(&self, queue: &QueueName, id: &JobId) -> Result<PromotedJob> {
        let id = id.to_string();
        self.run(queue.as_str(), "promote_job", On::CallerFirst, move |db| {
            promote_job::promote_job(db, &id)
        })
        .await
    }

    async fn cancel(
        &self,
        queue: &QueueName,
        id: &JobId,
        reason: Option<&str>,
        settle: SettleOptions,
    ) -> Result<Cancelled> {
        let recmax = settle_arg(settle);
        let (id, reason) = (id.to_string(), reason.map(str::to_string));
        self.run(queue.as_str(), "cancel", On::CallerFirst, move |db| {
            cancel::cancel(db, &id, reason.as_deref(), recmax)
        })
        .await
    }

    async fn set_group_limit(&self, queue: &QueueName, target: &LimitTarget, limit: u32) -> Result<()> {
        positive("limit", limit as u64)?;
        let group = match target {
            LimitTarget::Group(g) => Some(g.to_string()),
            LimitTarget::Default => None,
        };
        self.run(queue.as_str(), "set_group_limit", On::Thread, move |db| {
            set_group_limit::set_group_limit(db, group.as_deref(), limit as i64)
        })
        .await
    }

    async fn counts(&self, queue: &QueueName) -> Result<Counts> {
        self.run(queue.as_str(), "counts", On::Thread, counts::counts).await
    }

    async fn groups(&self, queue: &QueueName, cursor: Option<&str>) -> Result<GroupsPage> {
        let after = cursor.map(str::to_string);
        self.run(queue.as_str(), "groups", On::Thread, move |db| {
            groups::groups(db, after.as_deref())
        })
        .await
    }

    async fn register_consumer(&self, queue: &QueueName, entry: &ConsumerEntry) -> Result<i64> {
        crate::registry::check(entry)?;
        let (q, id, text) = (
            queue.as_str().to_string(),
            entry.id.clone(),
            crate::registry::encode(entry),
        );
        let (ttl, first) = (crate::registry::ttl_ms(entry.ttl), entry.beat_ms == 0);
        self.on_registry("register_consumer", move |c| {
            register_consumer::register_consumer(c, &q, &id, &text, ttl, first)
        })
        .await
    }

    async fn unregister_consumer(&self, queue: &QueueName, id: &str) -> Result<bool> {
        crate::registry::check_id(id)?;
        let (q, id) = (queue.as_str().to_string(), id.to_string());
        self.on_registry("unregister_consumer", move |c| {
            unregister_consumer::unregister_consumer(c, &q, &id)
        })
        .await
    }

    async fn consumers(&self, queue: &QueueName) -> Result<Vec<ConsumerEntry>> {
        let q = queue.as_str().to_string();
        self.on_registry("consumers", move |c| consumers::consumers(c, &q))
            .await
    }

    async fn history(&self, queue: &QueueName, minutes: u32) -> Result<History> {
        crate::store::check_history_minutes(minutes)?;
        self.run(queue.as_str(), "history", On::Thread, move |db| {
            history::history(db, minutes)
        })
        .await
    }

    async fn list(&self, queue: &QueueName, state: JobState, cursor: Option<&str>, limit: u32) -> Result<JobsPage> {
        check_list_limit(limit)?;
        let after = After::parse(state, cursor)?;
        self.run(queue.as_str(), "list", On::Thread, move |db| {
            list::list(db, state, after, limit as i64)
        })
        .await
    }

    async fn queues(&self) -> Result<Vec<QueueName>> {
        self.run("", "queues", On::Thread, queues::queues).await
    }

    async fn recover_promote_claim(
        &self,
        queue: &QueueName,
        recovery: Recovery,
        pump: u32,
        grace: Duration,
        claim: ClaimRequest,
    ) -> Result<Round> {
        positive("pump", pump as u64)?;
        let grace = millis("grace", grace)? as i64;
        if claim.n > 0 {
            check_claim(claim.lease, claim.max_attempts)?;
        }
        let recmax = settle_arg(claim.settle);
        let lease = claim.lease.as_millis() as i64;
        let n = (claim.n as usize).min(BATCH_MAX) as i64;
        let max_attempts = claim.max_attempts as i64;
        // the round trip's twin: one transaction, each leg's reply its own; a leg that errs
        // leaves nothing of itself behind (as the scripts of the Redis round are each atomic)
        self.run(queue.as_str(), "recover_promote_claim", On::Thread, move |db| {
            let recovered = db.leg(|| match recovery {
                Recovery::Off => Ok(()),
                Recovery::Reap => reap::reap(db, crate::store::REAP_LIMIT as i64, None).map(drop),
                Recovery::Redeliver(p) => reap::reap(db, p.limit as i64, Some(p.max_redeliveries as i64)).map(drop),
                Recovery::Stalled(p) => {
                    sweep_stalled::sweep_stalled(db, p.max_stalled as i64, p.limit as i64).map(drop)
                }
            })?;
            let promoted = db.leg(|| promote::promote(db, pump as i64, grace))?;
            let claimed = if n > 0 {
                db.leg(|| claim::claim(db, n, lease, max_attempts, recmax))?
            } else {
                Ok(Claimed::default())
            };
            Ok(Round {
                recovered,
                promoted,
                claimed,
            })
        })
        .await
    }

    async fn complete_then_claim(
        &self,
        queue: &QueueName,
        jobs: &[Completion],
        settle: SettleOptions,
        claim: ClaimRequest,
    ) -> Result<CompletedThenClaimed> {
        // refused whole before anything runs, as the Redis pipeline is
        check_outputs(jobs, self.payload_limit)?;
        if claim.n > 0 {
            check_claim(claim.lease, claim.max_attempts)?;
        }
        let recmax = settle_arg(settle);
        let claim_recmax = settle_arg(claim.settle);
        let lease = claim.lease.as_millis() as i64;
        let n = (claim.n as usize).min(BATCH_MAX) as i64;
        let max_attempts = claim.max_attempts as i64;
        let jobs = jobs.to_vec();
        // the pipeline's twin: one transaction, the completions' leg ahead of the claim's (so the
        // slots they free are free for it), each leg's reply its own
        self.run(queue.as_str(), "complete_then_claim", On::Thread, move |db| {
            let completed = db.leg(|| complete_many::complete_many(db, &jobs, recmax))?;
            let claimed = if n > 0 {
                db.leg(|| claim::claim(db, n, lease, max_attempts, claim_recmax))?
            } else {
                Ok(Claimed::default())
            };
            Ok(CompletedThenClaimed { completed, claimed })
        })
        .await
    }

    async fn park(&self, queue: &QueueName, timeout: Duration) -> Result<bool> {
        self.park_offering(queue, timeout, None).await
    }

    async fn park_with_handoff(
        &self,
        queue: &QueueName,
        timeout: Duration,
        claim: ClaimRequest,
        handoff: Handoff,
    ) -> Result<bool> {
        if claim.n == 0 {
            return self.park(queue, timeout).await;
        }
        check_claim(claim.lease, claim.max_attempts)?;
        self.park_offering(queue, timeout, Some((claim, handoff))).await
    }

    fn serves_handoffs(&self) -> bool {
        true
    }

    async fn set_retention(&self, queue: &QueueName, retention: &Retention) -> Result<()> {
        let age = check_retention(retention)? as i64;
        let (keep, cap) = (retention.keep as i64, retention.max_output as i64);
        self.run(queue.as_str(), "set_retention", On::CallerFirst, move |db| {
            set_retention::set_retention(db, keep, age, cap)
        })
        .await
    }

    async fn retention(&self, queue: &QueueName) -> Result<Retention> {
        self.run(queue.as_str(), "retention", On::CallerFirst, retention::retention)
            .await
    }

    async fn set_priority_aging(&self, queue: &QueueName, aging: Duration) -> Result<()> {
        let ms = crate::store::check_priority_aging(aging)? as i64;
        self.run(queue.as_str(), "set_priority_aging", On::CallerFirst, move |db| {
            set_priority_aging::set_priority_aging(db, ms)
        })
        .await
    }

    async fn priority_aging(&self, queue: &QueueName) -> Result<Duration> {
        self.run(
            queue.as_str(),
            "priority_aging",
            On::CallerFirst,
            priority_aging::priority_aging,
        )
        .await
    }

    async fn set_rate_limit(&self, queue: &QueueName, target: &RateTarget, limit: Option<RateLimit>) -> Result<()> {
        let (target, group) = crate::rate::target_parts(target);
        let (group, spec) = (group.to_string(), limit.map(|l| l.spec()).unwrap_or_default());
        self.run(queue.as_str(), "set_rate_limit", On::CallerFirst, move |db| {
            set_rate_limit::set_rate_limit(db, target, &group, &spec)
        })
        .await
    }

    async fn rate_limits(&self, queue: &QueueName) -> Result<RateLimits> {
        self.run(queue.as_str(), "rate_limits", On::CallerFirst, rate_limits::rate_limits)
            .await
    }

    async fn mark_waited(&self, queue: &QueueName, id: &JobId) -> Result<Waited> {
        let id = id.clone();
        self.run(queue.as_str(), "mark_waited", On::CallerFirst, move |db| {
            mark_waited::mark_waited(db, &id)
        })
        .await
    }

    async fn finished_waits(&self, queue: &QueueName) -> Result<BoxStream<'static, Option<JobId>>> {
        let rx = self.wake(queue.as_str()).finished.0.subscribe();
        let seen = self.foreign_commits().await?;
        let store = self.clone();
        let stream = futures::stream::unfold((store, rx, seen), |(store, mut rx, mut seen)| async move {
            use tokio::sync::broadcast::error::RecvError;
            loop {
                tokio::select! {
                    notice = rx.recv() => match notice {
                        Ok(n) => return Some((n, (store, rx, seen))),
                        // notices this stream missed: look at every waited job again
                        Err(RecvError::Lagged(_)) => return Some((None, (store, rx, seen))),
                        Err(RecvError::Closed) => return None,
                    },
                    _ = tokio::time::sleep(WAIT_BEAT) => {
                        // another process's commit may have finished a waited job
                        if let Ok(now) = store.foreign_commits().await {
                            if now != seen {
                                seen = now;
                                return Some((None, (store, rx, seen)));
                            }
                        }
                    }
                }
            }
        });
        Ok(stream.boxed())
    }

    async fn cancel_requests(&self, queue: &QueueName) -> Result<BoxStream<'static, CancelRequest>> {
        let q = queue.to_string();
        let last = self
            .run(queue.as_str(), "cancel_requests", On::Thread, cancel::last_request)
            .await?;
        let store = self.clone();
        let signal = self.wake(queue.as_str());
        let stream = futures::stream::unfold(
            (store, q, last, signal, Vec::new()),
            |(store, q, mut last, signal, mut buf)| async move {
                loop {
                    if let Some(req) = buf.pop() {
                        return Some((req, (store, q, last, signal, buf)));
                    }
                    let notified = signal.cancels.notified();
                    tokio::pin!(notified);
                    notified.as_mut().enable();
                    let after = last;
                    match store
                        .run(&q, "cancel_requests", On::Thread, move |db| {
                            cancel::requests_after(db, after)
                        })
                        .await
                    {
                        Ok(found) => {
                            for (seq, req) in found.into_iter().rev() {
                                last = last.max(seq);
                                buf.push(req);
                            }
                            if !buf.is_empty() {
                                continue;
                            }
                        }
                        Err(e) => tracing::debug!(error = %e, "reading cancel requests failed; retrying"),
                    }
                    tokio::select! {
                        _ = &mut notified => {}
                        _ = tokio::time::sleep(CANCEL_POLL) => {}
                    }
                }
            },
        );
        Ok(stream.boxed())
    }
}

fn obliterating(e: Error, queue: &QueueName) -> Error {
    match e {
        Error::Obliterating { .. } => Error::Obliterating {
            queue: queue.to_string(),
        },
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn a_new_file_gets_the_schema_and_a_newer_one_is_refused_untouched() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let path = path.to_str().unwrap();
        let store = EmbeddedStore::open(path).await.unwrap();
        let q = QueueName::new("q").unwrap();
        let ids = store.enqueue(&q, &[NewJob::new("a"), NewJob::new("b")]).await.unwrap();
        assert_eq!(ids.iter().map(|e| e.id().to_string()).collect::<Vec<_>>(), ["1", "2"]);
        let jobs = store
            .claim(&q, 5, Duration::from_secs(5), 3, SettleOptions::default())
            .await
            .unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].payload, b"a");
        let r = store
            .complete(&q, &jobs[0].id, jobs[0].token, None, SettleOptions::default())
            .await
            .unwrap();
        assert_eq!(r, Settled::Ok);
        drop(store);

        let conn = Connection::open(path).unwrap();
        conn.pragma_update(None, "user_version", SCHEMA_VERSION + 1).unwrap();
        drop(conn);
        let err = EmbeddedStore::open(path).await.unwrap_err();
        assert!(err.to_string().contains("newer than this build"), "{err}");
        let conn = Connection::open(path).unwrap();
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION + 1, "the newer file was not touched");
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_new_file_opened_by_several_at_once_opens_for_each() {
        // several processes may create one file at once: switching a new file to WAL takes an
        // exclusive lock, and SQLite answers busy at once (no busy handler) to one of two
        // connections that would otherwise deadlock; the open waits that out like any other lock
        for round in 0..20 {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("new.db").to_str().unwrap().to_string();
            let opens: Vec<_> = (0..6)
                .map(|_| {
                    let path = path.clone();
                    tokio::spawn(async move { EmbeddedStore::open(&path).await })
                })
                .collect();
            for open in opens {
                if let Err(e) = open.await.unwrap() {
                    panic!("round {round}: {e}");
                }
            }
        }
    }

    #[tokio::test]
    async fn a_current_file_opens_while_another_process_holds_the_write_lock() {
        // three `emq work` processes on one file: one opening while the others write must not
        // queue for the write lock (a steady stream of verbs can starve it past the busy timeout)
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let path = path.to_str().unwrap();
        drop(EmbeddedStore::open(path).await.unwrap());
        let mut writer = Connection::open(path).unwrap();
        let held = writer
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        let started = std::time::Instant::now();
        let store = EmbeddedStore::open(path).await.unwrap();
        assert!(
            started.elapsed() < BUSY_TIMEOUT / 2,
            "opened in {:?}, not after waiting for the lock",
            started.elapsed()
        );
        held.rollback().unwrap();
        let q = QueueName::new("q").unwrap();
        assert_eq!(store.counts(&q).await.unwrap().pending, 0);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn an_enqueue_waiting_for_another_writer_waits_off_the_callers_runtime() {
        // a small enqueue runs on its caller's thread only when it gets the write lock at once:
        // waiting there for another process would stop every task of a one-thread runtime
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let path = path.to_str().unwrap().to_string();
        let store = EmbeddedStore::open(&path).await.unwrap();
        let q = QueueName::new("q").unwrap();
        let (held_tx, held_rx) = std::sync::mpsc::channel();
        let writer = std::thread::spawn(move || {
            let mut conn = Connection::open(&path).unwrap();
            let held = conn
                .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                .unwrap();
            held_tx.send(()).unwrap();
            std::thread::sleep(Duration::from_millis(300));
            held.commit().unwrap();
        });
        held_rx.recv().unwrap();
        let ticks = Arc::new(AtomicI64::new(0));
        let ticker = {
            let ticks = ticks.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    ticks.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let enqueued = store.enqueue(&q, &[NewJob::new("a")]).await.unwrap();
        ticker.abort();
        writer.join().unwrap();
        assert_eq!(enqueued.len(), 1);
        assert!(
            ticks.load(Ordering::Relaxed) >= 5,
            "the runtime ran other tasks while the enqueue waited ({} ticks in 300 ms)",
            ticks.load(Ordering::Relaxed)
        );
        assert_eq!(
            store.counts(&q).await.unwrap().pending,
            1,
            "enqueued once the lock was free"
        );
    }

    #[tokio::test]
    async fn a_published_cancel_request_wakes_the_cancel_streams_and_an_enqueue_does_not() {
        // an enqueue must not send every cancel stream of its queue to read the requests table;
        // a cancel request must reach them at once, not at their next poll
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = EmbeddedStore::open(path.to_str().unwrap()).await.unwrap();
        let q = QueueName::new("q").unwrap();
        store.enqueue(&q, &[NewJob::new("a")]).await.unwrap();
        let claimed = store
            .claim(&q, 1, Duration::from_secs(30), 3, SettleOptions::default())
            .await
            .unwrap();
        let wake = store.wake(q.as_str());
        let notified = wake.cancels.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        store.enqueue(&q, &[NewJob::new("b")]).await.unwrap();
        assert!(
            (&mut notified).now_or_never().is_none(),
            "an enqueue woke the cancel streams"
        );
        store
            .cancel(&q, &claimed[0].id, Some("operator"), SettleOptions::default())
            .await
            .unwrap();
        assert!(
            (&mut notified).now_or_never().is_some(),
            "a cancel request of an active job did not wake the cancel streams"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_verb_that_panics_fails_alone_and_the_store_serves_the_next() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = EmbeddedStore::open(path.to_str().unwrap()).await.unwrap();
        let q = QueueName::new("q").unwrap();
        // on the store's thread, and on the caller's
        for on in [On::Thread, On::CallerFirst] {
            let err = store
                .run("q", "test", on, |db| -> Result<()> {
                    db.kv_set("id", 41)?;
                    panic!("a defect")
                })
                .await
                .unwrap_err();
            assert!(matches!(err, Error::Store { .. }), "{err:?}");
        }
        assert!(!store.shared.is_poisoned(), "the caller's path is open again");
        // nothing of either was written, and both paths serve the next verbs
        let ids = store.enqueue(&q, &[NewJob::new("a")]).await.unwrap();
        assert_eq!(ids[0].id().as_str(), "1");
        assert_eq!(store.counts(&q).await.unwrap().pending, 1);
    }

    #[tokio::test]
    async fn a_file_that_cannot_be_opened_is_refused_saying_where_to_look() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-dir").join("q.db");
        let err = EmbeddedStore::open(path.to_str().unwrap()).await.unwrap_err();
        let text = err.to_string();
        assert!(err.is_misconfigured(), "no retry mends it: {err:?}");
        assert!(text.contains(path.to_str().unwrap()), "names the file: {text}");
        assert!(text.contains("does the directory exist"), "says where to look: {text}");
    }

    #[tokio::test]
    async fn a_directory_or_a_file_that_is_not_a_database_is_a_misconfiguration_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let notes = dir.path().join("notes.txt");
        std::fs::write(&notes, "not a database, and long enough to be read as one's header\n").unwrap();
        for path in [dir.path().to_path_buf(), notes] {
            let path = path.to_str().unwrap();
            let err = EmbeddedStore::open(path).await.unwrap_err();
            assert!(err.is_misconfigured(), "{path}: no retry mends it: {err:?}");
            assert!(err.to_string().contains(path), "names the file: {err}");
        }
    }
}
