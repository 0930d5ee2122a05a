//! `EmbeddedStore`: the default store when no Redis URL is given, on one SQLite file (bundled
//! SQLite, WAL). Every verb runs the very script Redis runs (`scripts/*.lua`, through the verb layer
//! both stores share) on the embedded engine (`embedded/engine.rs`): Lua 5.1 as Redis embeds it,
//! its `redis.call` served by a Redis keyspace kept in SQLite tables (`embedded/engine/`). Each
//! script call — or each fused group of them, a consumer's round — is one `BEGIN IMMEDIATE`
//! transaction on a thread of the store's own, never held across an `.await`.
//!
//! Limits, plainly:
//! * **one writer at a time**: transactions serialize (several processes may share the file;
//!   a writer waits up to the busy timeout for another);
//! * **wakes**: a consumer in the same process is woken at once by an enqueue (the wake tokens its
//!   script pushed are kept in memory, at most 16 a wake list as the list keeps them; a consumer of
//!   some kinds takes only the tokens of its kinds' lists and of `wake_any`) — and when
//!   it parked offering a claim (`park_with_handoff`, the consumer does with a batch of free
//!   slots), that enqueue's own transaction runs the claim for it and hands the jobs over after the
//!   commit: one durable transaction between the enqueue and the handler's start, not two. One in
//!   another process notices within [`PARK_POLL`]: its park looks at `PRAGMA data_version` that
//!   often (a read of the file's shared memory), ends when it moved, and the next round claims;
//! * **notices across processes**: a cancel request is also written to a durable log in the file
//!   (its newest 1,000), which every cancel stream reads within [`CANCEL_POLL`]; a waited job
//!   finished by another process is looked at again within [`WAIT_BEAT`];
//! * **the registry of live consumers** lives in a file of its own beside the store's
//!   (`PATH-consumers`): its beats must not move the store file's `data_version`, which would end
//!   every other process's park every beat;
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

pub(crate) mod checkpoint;
pub mod engine;
mod registry;
mod schema;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use rusqlite::config::DbConfig;
use rusqlite::Connection;
use tokio::sync::{broadcast, Notify};

use crate::error::{Error, Result};
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::engine::{Call, Engine};
use crate::store::reply::Reply;
use crate::store::scripts::{Script, Scripts};
use crate::store::verbs::reply::checked;
use crate::store::{CancelRequest, ClaimRequest, Claimed, Handoff, BATCH_MAX, PAYLOAD_LIMIT_DEFAULT};
use engine::{Call as HostCall, LuaHost, Notice};

pub use schema::SCHEMA_VERSION;

/// The default database file.
pub const DEFAULT_PATH: &str = "echomq.db";

/// How long a verb waits for another writer (another process) before it fails.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The page cache of the store's connection, in KiB (SQLite's default is 2 MiB; a queue of 100,000
/// waiting jobs spans more).
pub const CACHE_KIB: i64 = 32 * 1024;

/// How often a cancel-request stream reads the durable log for requests written by other
/// processes (one of this process is delivered at once).
pub const CANCEL_POLL: Duration = Duration::from_millis(200);

/// How often a park looks for another process's commits (`PRAGMA data_version`, a read of the
/// file's shared memory): a job another process makes claimable ends a park within this, whatever
/// the beat; one of this process at once.
pub const PARK_POLL: Duration = Duration::from_millis(500);

/// How often a wait's stream looks for another process's commits (`PRAGMA data_version`): a job
/// finished by another process is noticed within this; one finished by this process at once.
pub const WAIT_BEAT: Duration = Duration::from_millis(500);

/// The most wake tokens a queue keeps (as its wake list keeps its newest 16).
const WAKE_TOKENS_MAX: u32 = 16;

/// How many notices a slow subscriber may fall behind before it is told it missed some.
const NOTICES_BUFFERED: usize = 4096;

/// The most cancel requests one read of the durable log takes.
const CANCELS_READ_MAX: i64 = 1000;

/// The scripts that run on the registry's own file.
const REGISTRY_SCRIPTS: [&str; 3] = ["register_consumer", "unregister_consumer", "consumers"];

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

/// How durable each commit is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Durability {
    /// `synchronous=NORMAL`: safe against a crashed process (`kill -9`); a power loss may lose the
    /// last commits. The default.
    #[default]
    Normal,
    /// `synchronous=FULL`: every commit reaches the disk before it is acknowledged.
    Full,
}

/// What the store's thread owns: the engine of the store's file, and the registry's, opened by
/// its first verb.
struct Hosts {
    main: LuaHost,
    registry: Option<LuaHost>,
    path: String,
}

impl Hosts {
    /// The engine a call of `script` runs on.
    fn of(&mut self, script: &str) -> Result<&LuaHost> {
        if !REGISTRY_SCRIPTS.contains(&script) {
            return Ok(&self.main);
        }
        if self.registry.is_none() {
            let conn = registry::open(&self.path)?;
            let host = LuaHost::with_verbs(conn).map_err(|e| Error::Store {
                verb: "register_consumer",
                reason: e.to_string(),
            })?;
            self.registry = Some(host);
        }
        match &self.registry {
            Some(h) => Ok(h),
            None => Ok(&self.main),
        }
    }
}

type Job = Box<dyn FnOnce(&mut Hosts) + Send>;

/// A parked consumer's claim, offered to the next transaction of this process that pushes a token
/// onto one of the wake lists it parks on.
struct Offer {
    id: u64,
    /// The wake lists its consumer parks on (their keys).
    listens: Vec<Vec<u8>>,
    call: HostCall<'static>,
    handoff: Handoff,
    served: Arc<AtomicBool>,
    /// Set, under the offers' lock, when its park ends: an offer a transaction took and could not
    /// serve goes back only while its park waits.
    ended: Arc<AtomicBool>,
}

/// A queue's in-process wake: the tokens its scripts pushed onto each of its wake lists and not
/// yet taken, its parked consumers (woken together, each looking at its own lists) and their
/// offers.
#[derive(Default)]
struct Wake {
    tokens: Mutex<HashMap<Vec<u8>, u32>>,
    notify: Notify,
    offers: Mutex<Vec<Offer>>,
    /// Jobs handed over to parked consumers so far.
    handed: AtomicU64,
}

impl Wake {
    /// Takes one token of the first of `lists` that holds one (as `BLPOP` pops one of the first
    /// non-empty list it names): true when there was one.
    fn take(&self, lists: &[Vec<u8>]) -> bool {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        for list in lists {
            if let Some(n) = tokens.get_mut(list).filter(|n| **n > 0) {
                *n -= 1;
                return true;
            }
        }
        false
    }

    fn push(&self, list: &[u8], n: u32) {
        let mut tokens = self.tokens.lock().unwrap_or_else(PoisonError::into_inner);
        let held = tokens.entry(list.to_vec()).or_default();
        *held = (*held + n).min(WAKE_TOKENS_MAX);
    }
}

/// What the store handles and the store's thread share.
#[derive(Default)]
struct Shared {
    /// Each queue's wake, by its queue base `emq:{q}:`.
    wakes: Mutex<HashMap<Vec<u8>, Arc<Wake>>>,
    /// `PRAGMA data_version` of the store's connection as of its last transaction: it moves when
    /// another connection (another process, another handle) commits.
    data_version: AtomicI64,
    next_offer: AtomicU64,
}

impl Shared {
    /// The wake of the queue whose base is `base`.
    fn wake_of(&self, base: &[u8]) -> Arc<Wake> {
        self.wakes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(base.to_vec())
            .or_default()
            .clone()
    }

    /// The wake of the queue of a wake list's key, and the list; `None` for any other key.
    fn wake_of_list<'k>(&self, list: &'k [u8]) -> Option<(Arc<Wake>, &'k [u8])> {
        let base = crate::keyspace::wake_list_base(list)?;
        Some((self.wake_of(&list[..base]), list))
    }
}

/// The embedded store. Cheap to clone: clones share the store's thread and the wakes.
#[derive(Clone)]
pub struct EmbeddedStore {
    inner: Arc<Inner>,
    /// The largest payload (and output) accepted, in bytes.
    payload_limit: usize,
}

struct Inner {
    tx: Mutex<mpsc::Sender<Job>>,
    scripts: Scripts,
    shared: Arc<Shared>,
    /// What the scripts published, after each commit.
    notices: broadcast::Sender<Arc<Notice>>,
    path: String,
}

impl std::fmt::Debug for EmbeddedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStore")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

fn gone(verb: &'static str) -> Error {
    Error::Store {
        verb,
        reason: "the store's thread is gone (or the verb panicked, a defect: nothing of it was written)".into(),
    }
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
        let (tx, rx) = mpsc::channel::<Job>();
        let (opened_tx, opened) = tokio::sync::oneshot::channel();
        let file = path.to_string();
        std::thread::Builder::new()
            .name("emq-sqlite".into())
            .spawn(move || {
                let mut stop_checkpoints = None;
                let host = Self::connect(&file, durability).and_then(|conn| {
                    // the commits' pages copied into the file off the verbs' path (the copier
                    // ends with this thread)
                    stop_checkpoints = checkpoint::spawn(&file, &conn);
                    LuaHost::with_verbs(conn).map_err(|e| Error::Store {
                        verb: "open",
                        reason: format!("{file}: {e}"),
                    })
                });
                let mut hosts = match host {
                    Ok(main) => {
                        let _ = opened_tx.send(Ok(()));
                        Hosts {
                            main,
                            registry: None,
                            path: file,
                        }
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                // the thread ends when every store handle is gone
                for job in rx {
                    // a verb that panics (a defect) fails alone: its transaction is rolled back,
                    // its caller gets an error (its reply sender dropped), and the thread serves
                    // the next verb
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&mut hosts))).is_err() {
                        tracing::error!("an embedded store verb panicked; its caller gets an error");
                        hosts.main.abandon();
                        if let Some(r) = &hosts.registry {
                            r.abandon();
                        }
                    }
                }
                drop(stop_checkpoints);
            })
            .map_err(|e| Error::Store {
                verb: "open",
                reason: format!("cannot start the store thread: {e}"),
            })?;
        opened.await.map_err(|_| gone("open"))??;
        let (notices, _) = broadcast::channel(NOTICES_BUFFERED);
        let store = Self {
            inner: Arc::new(Inner {
                tx: Mutex::new(tx),
                scripts: Scripts::load(),
                shared: Arc::default(),
                notices,
                path: path.to_string(),
            }),
            payload_limit: PAYLOAD_LIMIT_DEFAULT,
        };
        // the parks' reference point: a commit of another connection moves it
        store.foreign_commits("open").await?;
        Ok(store)
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
        conn.busy_handler(Some(busy_wait)).map_err(|e| open_error(path, e))?;
        // a file of a newer schema is refused before anything here writes to it (the switch to
        // WAL below rewrites the file's header)
        schema::version(&conn, path)?;
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
        // statement journals (a savepoint's, a multi-row statement's) in small heap chunks: by
        // default each opens with one 64 KiB chunk, and its free at the statement's end shrinks
        // the heap only for the next statement to grow it again
        conn.pragma_update(None, "temp_store", "MEMORY")
            .map_err(|e| open_error(path, e))?;
        // the bundled SQLite plans with STAT4, which re-prepares a cached statement whenever a
        // parameter its plan looked at is bound again; the stable planner never looks at bound
        // values
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
        &self.inner.path
    }

    /// The durability the store's connection commits with, read back from SQLite
    /// (`PRAGMA synchronous`), not from what was asked.
    pub async fn durability(&self) -> Result<Durability> {
        let level = self
            .with_conn("durability", |c| {
                c.query_row("PRAGMA synchronous", [], |r| r.get::<_, i64>(0))
            })
            .await?;
        match level {
            1 => Ok(Durability::Normal),
            2 => Ok(Durability::Full),
            other => Err(Error::Store {
                verb: "durability",
                reason: format!("synchronous is {other}, neither NORMAL (1) nor FULL (2)"),
            }),
        }
    }

    /// How many jobs of `queue` this handle has handed to parked consumers of this process since
    /// it opened (claimed inside the transaction that woke them; see `park_with_handoff`).
    pub fn handed_over(&self, queue: &QueueName) -> u64 {
        self.wake(queue).handed.load(Ordering::Relaxed)
    }

    fn wake(&self, queue: &QueueName) -> Arc<Wake> {
        self.inner.shared.wake_of(QueueKeys::new(queue).base().as_bytes())
    }

    /// Runs `f` on the store's thread.
    async fn on_thread<T: Send + 'static>(
        &self,
        verb: &'static str,
        f: impl FnOnce(&mut Hosts) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(Box::new(move |h| {
                let _ = tx.send(f(h));
            }))
            .map_err(|_| gone(verb))?;
        rx.await.map_err(|_| gone(verb))?
    }

    /// Runs `f` with the store's connection on its thread, outside any transaction.
    async fn with_conn<T: Send + 'static>(
        &self,
        verb: &'static str,
        f: impl FnOnce(&Connection) -> rusqlite::Result<T> + Send + 'static,
    ) -> Result<T> {
        self.on_thread(verb, move |h| {
            h.main
                .with_conn(f)
                .map_err(|e| Error::Store {
                    verb,
                    reason: e.to_string(),
                })?
                .map_err(|e| sql_error(verb, e))
        })
        .await
    }

    /// Runs `calls` in one transaction on the store's thread (the registry's calls on the
    /// registry's file); in the same transaction, the offers of the parked consumers of each queue
    /// the calls woke. After the commit, hands out what the scripts published.
    async fn run_host(&self, verb: &'static str, calls: Vec<HostCall<'static>>) -> Result<Vec<Reply>> {
        let shared = self.inner.shared.clone();
        let notices = self.inner.notices.clone();
        self.on_thread(verb, move |hosts| {
            let script = calls.first().map_or("", |c| c.script);
            if REGISTRY_SCRIPTS.contains(&script) {
                let host = hosts.of(script)?;
                let (replies, _) = host.run(&calls).map_err(|e| Error::Store {
                    verb,
                    reason: e.to_string(),
                })?;
                return Ok(replies);
            }
            let mut taken: Vec<(Arc<Wake>, Offer)> = Vec::new();
            let ran = hosts.main.run_then(&calls, |published| {
                // the offers parked on a list the calls pushed tokens onto
                for (channel, _) in published {
                    if let Some((wake, list)) = shared.wake_of_list(channel) {
                        let mut offers = wake.offers.lock().unwrap_or_else(PoisonError::into_inner);
                        let (hit, kept): (Vec<Offer>, Vec<Offer>) = std::mem::take(&mut *offers)
                            .into_iter()
                            .partition(|o| o.listens.iter().any(|l| l == list));
                        *offers = kept;
                        drop(offers);
                        taken.extend(hit.into_iter().map(|o| (wake.clone(), o)));
                    }
                }
                taken.iter().map(|(_, o)| o.call.clone()).collect()
            });
            if let Ok(Ok(v)) = hosts.main.with_conn(data_version) {
                shared.data_version.store(v, Ordering::Release);
            }
            let (mut replies, published) = match ran {
                Ok(r) => r,
                Err(e) => {
                    for (wake, offer) in taken {
                        offer_back(&wake, offer);
                    }
                    return Err(Error::Store {
                        verb,
                        reason: e.to_string(),
                    });
                }
            };
            let served = replies.split_off(calls.len().min(replies.len()));
            hand_out(&shared, &notices, published, taken, served);
            Ok(replies)
        })
        .await
    }

    /// Runs one plain command (its words, name first) in a transaction of its own: a raw entry
    /// into the keyspace for tools and tests. A refused command answers [`Reply::Error`].
    #[doc(hidden)]
    pub async fn raw(&self, words: Vec<Vec<u8>>) -> Result<Reply> {
        let mut replies = self.commands_here("raw", vec![words]).await?;
        replies.pop().ok_or_else(|| Error::Protocol {
            verb: "raw",
            reply: "no reply".into(),
        })
    }

    /// Runs a script's text (compiled once a connection, by its text) with `keys` and `args`, in
    /// a transaction of its own: the embedded `EVAL`, a raw entry for tools and tests. Its error
    /// comes back as [`Reply::Error`].
    #[doc(hidden)]
    pub async fn eval(&self, body: Vec<u8>, keys: Vec<Vec<u8>>, args: Vec<Vec<u8>>) -> Result<Reply> {
        let shared = self.inner.shared.clone();
        let notices = self.inner.notices.clone();
        self.on_thread("eval", move |hosts| {
            use std::hash::{Hash, Hasher};
            let mut h = std::collections::hash_map::DefaultHasher::new();
            body.hash(&mut h);
            let name = format!("eval:{:016x}", h.finish());
            let store_error = |e: engine::EngineError| Error::Store {
                verb: "eval",
                reason: e.to_string(),
            };
            let text = String::from_utf8_lossy(&body);
            hosts.main.register(&name, &text).map_err(store_error)?;
            let call = HostCall {
                script: &name,
                keys,
                args,
            };
            let (mut replies, published) = hosts.main.run(&[call]).map_err(store_error)?;
            hand_out(&shared, &notices, published, Vec::new(), Vec::new());
            replies.pop().ok_or_else(|| Error::Protocol {
                verb: "eval",
                reply: "no reply".into(),
            })
        })
        .await
    }

    async fn commands_here(&self, verb: &'static str, cmds: Vec<Vec<Vec<u8>>>) -> Result<Vec<Reply>> {
        let shared = self.inner.shared.clone();
        let notices = self.inner.notices.clone();
        self.on_thread(verb, move |hosts| {
            let (replies, published) = hosts.main.commands(&cmds).map_err(|e| Error::Store {
                verb,
                reason: e.to_string(),
            })?;
            hand_out(&shared, &notices, published, Vec::new(), Vec::new());
            Ok(replies)
        })
        .await
    }

    /// `PRAGMA data_version` of the store's connection, read now (and kept as the last seen).
    async fn foreign_commits(&self, verb: &'static str) -> Result<i64> {
        let now = self.with_conn(verb, data_version).await?;
        self.inner.shared.data_version.store(now, Ordering::Release);
        Ok(now)
    }

    /// The park, with an optional offer: registered before the look for a token, withdrawn when the
    /// park ends unless a transaction took it. At its timeout a park reports a wake when another
    /// connection committed meanwhile (it may have made work claimable this process cannot see).
    async fn park_offering(
        &self,
        queue: &QueueName,
        kinds: &crate::store::Kinds,
        timeout: Duration,
        offer: Option<(ClaimRequest, Handoff)>,
    ) -> Result<bool> {
        let wake = self.wake(queue);
        let k = QueueKeys::new(queue);
        let lists: Vec<Vec<u8>> = k.wakes_of(kinds).into_iter().map(String::into_bytes).collect();
        let seen = self.inner.shared.data_version.load(Ordering::Acquire);
        // registered before the look, so a wake between the look and the wait is not missed
        let notified = wake.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if wake.take(&lists) {
            return Ok(true);
        }
        let served = Arc::new(AtomicBool::new(false));
        let ended = Arc::new(AtomicBool::new(false));
        let _offer = match offer {
            Some((claim, handoff)) => {
                let n = (claim.n as usize).min(BATCH_MAX);
                let call = crate::store::verbs::claim::claim_call(self, &k, n, n, &claim);
                let id = self.inner.shared.next_offer.fetch_add(1, Ordering::Relaxed);
                wake.offers.lock().unwrap_or_else(PoisonError::into_inner).push(Offer {
                    id,
                    listens: lists.clone(),
                    call: host_call(&call),
                    handoff,
                    served: served.clone(),
                    ended: ended.clone(),
                });
                Some(Withdraw {
                    wake: wake.clone(),
                    id,
                    ended: ended.clone(),
                })
            }
            None => None,
        };
        let deadline = tokio::time::Instant::now() + timeout.min(crate::store::PARK_TIMEOUT_MAX);
        loop {
            tokio::select! {
                // woken in this process: go at once when the wake handed this park its jobs or
                // left a token for it (taken, as BLPOP takes one); a wake whose work went to
                // other parks leaves this one parked, as BLPOP wakes one consumer per token
                _ = &mut notified => {
                    if served.load(Ordering::Acquire) || wake.take(&lists) {
                        return Ok(true);
                    }
                    notified.set(wake.notify.notified());
                    notified.as_mut().enable();
                    // a token pushed between the look and the re-arm
                    if wake.take(&lists) {
                        return Ok(true);
                    }
                }
                _ = tokio::time::sleep_until(deadline.min(tokio::time::Instant::now() + PARK_POLL)) => {
                    let now = self.foreign_commits("park").await?;
                    if now != seen || served.load(Ordering::Acquire) {
                        return Ok(true);
                    }
                    if tokio::time::Instant::now() >= deadline {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// The messages published on `channel` in this process from now on (`None`: some were missed).
    fn subscribe(&self, channel: String) -> BoxStream<'static, Option<Vec<u8>>> {
        let rx = self.inner.notices.subscribe();
        futures::stream::unfold((rx, channel), |(mut rx, channel)| async move {
            loop {
                match rx.recv().await {
                    Ok(n) if n.0 == channel.as_bytes() => return Some((Some(n.1.clone()), (rx, channel))),
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return Some((None, (rx, channel))),
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed()
    }

    /// The cancel requests of the durable log on `channel` after `seq`, oldest first, with their
    /// sequences.
    async fn cancels_after(&self, channel: Vec<u8>, seq: i64) -> Result<Vec<(i64, Vec<u8>)>> {
        self.with_conn("cancel_requests", move |c| {
            let mut stmt = c.prepare_cached(
                "SELECT seq, message FROM kv_cancels WHERE seq > ?1 AND channel = ?2 ORDER BY seq LIMIT ?3",
            )?;
            let rows = stmt.query_map(rusqlite::params![seq, channel, CANCELS_READ_MAX], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })?;
            rows.collect()
        })
        .await
    }
}

/// Takes a parked consumer's offer off its queue's wake when its park ends, unless a transaction
/// took it first.
struct Withdraw {
    wake: Arc<Wake>,
    id: u64,
    ended: Arc<AtomicBool>,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        let mut offers = self.wake.offers.lock().unwrap_or_else(PoisonError::into_inner);
        self.ended.store(true, Ordering::Release);
        offers.retain(|o| o.id != self.id);
    }
}

/// Puts back an offer a transaction took and could not serve, unless its park has ended since:
/// a claim for a park that is gone would lease jobs nobody runs until their leases lapse.
fn offer_back(wake: &Wake, offer: Offer) {
    let mut offers = wake.offers.lock().unwrap_or_else(PoisonError::into_inner);
    if !offer.ended.load(Ordering::Acquire) {
        offers.push(offer);
    }
}

/// After a commit: the jobs claimed for the offers `taken` (their replies `served`) handed over;
/// the tokens pushed onto each wake list kept for the queue's parks, less those of the jobs handed
/// over (each job made claimable pushed one onto the queue's `wake` and one onto its kind's list,
/// or `wake_any` for a lane's), and its parks woken, unless every job made claimable went to an
/// offer; each message sent to its channel's subscribers.
fn hand_out(
    shared: &Shared,
    notices: &broadcast::Sender<Arc<Notice>>,
    published: Vec<Notice>,
    taken: Vec<(Arc<Wake>, Offer)>,
    served: Vec<Reply>,
) {
    // the jobs handed over to the offers parked on each list
    let mut handed: HashMap<Vec<u8>, u32> = HashMap::new();
    let mut replies = served.into_iter();
    for (wake, offer) in taken {
        let mut claimed = Claimed::default();
        let ok = match replies.next() {
            Some(r @ Reply::Array(_)) => crate::store::verbs::claim::parse_claimed(r, &mut claimed).is_ok(),
            _ => false,
        };
        if !ok || claimed.jobs.is_empty() {
            offer_back(&wake, offer);
            continue;
        }
        let n = claimed.jobs.len();
        if let Some(base) = offer
            .listens
            .first()
            .and_then(|l| Some(&l[..crate::keyspace::wake_list_base(l)?]))
        {
            for job in &claimed.jobs {
                let mut own = base.to_vec();
                if job.group.is_some() {
                    own.extend_from_slice(b"wake_any");
                } else {
                    own.extend_from_slice(b"wake:");
                    own.extend_from_slice(job.kind.as_deref().unwrap_or("").as_bytes());
                }
                let mut all = base.to_vec();
                all.extend_from_slice(b"wake");
                *handed.entry(own).or_default() += 1;
                *handed.entry(all).or_default() += 1;
            }
        }
        wake.handed.fetch_add(n as u64, Ordering::Relaxed);
        offer.served.store(true, Ordering::Release);
        (offer.handoff)(claimed.jobs);
    }
    for notice in published {
        if let Some((wake, list)) = shared.wake_of_list(&notice.0) {
            let pushed: u32 = String::from_utf8_lossy(&notice.1).parse().unwrap_or(1);
            let jobs = handed.remove(list).unwrap_or(0);
            wake.push(list, pushed.saturating_sub(jobs));
            // a served park's caller has its jobs: a wake would put its task beside them
            if jobs == 0 || pushed > jobs {
                wake.notify.notify_waiters();
            }
        } else {
            let _ = notices.send(Arc::new(notice));
        }
    }
}

/// `PRAGMA data_version`: changes when another connection commits.
fn data_version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.prepare_cached("PRAGMA data_version")
        .and_then(|mut s| s.query_row([], |r| r.get(0)))
}

/// SQLite's busy handler of the store's connection: waits for another connection's write lock in
/// sleeps of at most a millisecond, for up to [`BUSY_TIMEOUT`]. SQLite's own backs off to 100 ms
/// sleeps: with several processes' transactions of a millisecond or more on one file, a writer
/// slept on while the lock was free, and three consumers on one file started a few jobs a second.
fn busy_wait(attempts: i32) -> bool {
    let step = Duration::from_micros(200 * u64::from(attempts.clamp(0, 4) as u32 + 1));
    // the first five sleeps are shorter (0.2 to 0.8 ms): the rest are a millisecond each
    let slept = Duration::from_millis(attempts.max(0) as u64);
    if slept >= BUSY_TIMEOUT {
        return false;
    }
    std::thread::sleep(step);
    true
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

fn host_call(call: &Call<'_>) -> HostCall<'static> {
    HostCall {
        script: call.script.name,
        keys: call.keys.iter().map(|k| k.clone().into_bytes()).collect(),
        args: call.args.clone(),
    }
}

#[async_trait::async_trait]
impl Engine for EmbeddedStore {
    fn scripts(&self) -> &Scripts {
        &self.inner.scripts
    }

    fn payload_limit(&self) -> usize {
        self.payload_limit
    }

    fn kind(&self) -> &'static str {
        "embedded"
    }

    async fn run(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply> {
        checked(script.name, self.run_raw(script, keys, args).await?)
    }

    async fn run_raw(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply> {
        let call = host_call(&Call {
            script,
            keys: keys.to_vec(),
            args,
        });
        let mut replies = self.run_host(script.name, vec![call]).await?;
        replies.pop().ok_or_else(|| Error::Protocol {
            verb: script.name,
            reply: "no reply".into(),
        })
    }

    async fn run_calls_waiting(
        &self,
        calls: Vec<Call<'_>>,
        _wait: Option<(u32, Duration)>,
    ) -> Result<Vec<Result<Reply>>> {
        let names: Vec<&'static str> = calls.iter().map(|c| c.script.name).collect();
        let calls: Vec<HostCall<'static>> = calls.iter().map(host_call).collect();
        let verb = names.first().copied().unwrap_or("run");
        let replies = self.run_host(verb, calls).await?;
        Ok(replies
            .into_iter()
            .zip(names)
            .map(|(r, name)| checked(name, r))
            .collect())
    }

    async fn commands(
        &self,
        verb: &'static str,
        _route_key: &str,
        cmds: Vec<Vec<Vec<u8>>>,
    ) -> Result<Vec<Result<Reply>>> {
        let replies = self.commands_here(verb, cmds).await?;
        Ok(replies.into_iter().map(|r| checked(verb, r)).collect())
    }
}

crate::store::verbs::script_store!(EmbeddedStore, {
    async fn park(&self, queue: &QueueName, kinds: &crate::store::Kinds, timeout: Duration) -> Result<bool> {
        self.park_offering(queue, kinds, timeout, None).await
    }

    async fn park_with_handoff(
        &self,
        queue: &QueueName,
        timeout: Duration,
        claim: ClaimRequest,
        handoff: crate::store::Handoff,
    ) -> Result<bool> {
        if claim.n == 0 {
            return self.park_offering(queue, &claim.kinds, timeout, None).await;
        }
        crate::store::check_claim(claim.lease, claim.max_attempts)?;
        claim.kinds.check()?;
        let kinds = claim.kinds.clone();
        self.park_offering(queue, &kinds, timeout, Some((claim, handoff))).await
    }

    fn serves_handoffs(&self) -> bool {
        true
    }

    async fn cancel_requests(&self, queue: &QueueName) -> Result<BoxStream<'static, CancelRequest>> {
        let channel = QueueKeys::new(queue).cancel().into_bytes();
        let last = self
            .with_conn("cancel_requests", |c| {
                c.query_row("SELECT coalesce(max(seq), 0) FROM kv_cancels", [], |r| {
                    r.get::<_, i64>(0)
                })
            })
            .await?;
        // a request of this process is read at once; another's at the next poll
        let here = self.subscribe(String::from_utf8_lossy(&channel).into_owned());
        let store = self.clone();
        let stream = futures::stream::unfold(
            (store, channel, last, here, Vec::new()),
            |(store, channel, mut last, mut here, mut buf)| async move {
                loop {
                    if let Some(req) = buf.pop() {
                        return Some((req, (store, channel, last, here, buf)));
                    }
                    match store.cancels_after(channel.clone(), last).await {
                        Ok(found) => {
                            for (seq, message) in found.into_iter().rev() {
                                last = last.max(seq);
                                if let Some(req) = cancel_request(&message) {
                                    buf.push(req);
                                }
                            }
                            if !buf.is_empty() {
                                continue;
                            }
                        }
                        Err(e) => tracing::debug!(error = %e, "reading cancel requests failed; retrying"),
                    }
                    tokio::select! {
                        _ = here.next() => {}
                        _ = tokio::time::sleep(CANCEL_POLL) => {}
                    }
                }
            },
        );
        Ok(stream.boxed())
    }

    async fn finished_waits(&self, queue: &QueueName) -> Result<BoxStream<'static, Option<JobId>>> {
        let here = self.subscribe(QueueKeys::new(queue).finished());
        let seen = self.foreign_commits("finished_waits").await?;
        let store = self.clone();
        let stream = futures::stream::unfold((store, here, seen), |(store, mut here, mut seen)| async move {
            loop {
                tokio::select! {
                    notice = here.next() => match notice {
                        // an id the store wrote is valid; `*` or a missed notice: every waited job
                        Some(Some(id)) => {
                            let id = JobId::parse(String::from_utf8_lossy(&id).into_owned()).ok();
                            return Some((id, (store, here, seen)));
                        }
                        Some(None) => return Some((None, (store, here, seen))),
                        None => return None,
                    },
                    _ = tokio::time::sleep(WAIT_BEAT) => {
                        if let Ok(now) = store.foreign_commits("finished_waits").await {
                            if now != seen {
                                seen = now;
                                return Some((None, (store, here, seen)));
                            }
                        }
                    }
                }
            }
        });
        Ok(stream.boxed())
    }
});

/// A cancel request as the channel carries it: `<id>\n<reason>` (an empty reason is none). A
/// message whose id is not a valid job id (written by hand) is skipped.
fn cancel_request(message: &[u8]) -> Option<CancelRequest> {
    let text = String::from_utf8_lossy(message);
    let (id, reason) = text.split_once('\n').unwrap_or((&text, ""));
    Some(CancelRequest {
        id: JobId::parse(id).ok()?,
        reason: (!reason.is_empty()).then(|| reason.to_string()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::NewJob;
    use crate::store::{SettleOptions, Settled, Store};

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
            .claim(
                &q,
                crate::store::ClaimRequest::new(5, Duration::from_secs(5)).max_attempts(3),
            )
            .await
            .unwrap();
        assert_eq!(jobs.len(), 2);
        assert_eq!(jobs[0].payload, b"a");
        let r = store
            .complete(
                &q,
                &crate::store::Completion::new(jobs[0].id.clone(), jobs[0].token),
                SettleOptions::default(),
            )
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
    async fn a_cancel_request_reaches_the_cancel_streams_of_this_process_at_once_and_another_s_by_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let path = path.to_str().unwrap();
        let store = EmbeddedStore::open(path).await.unwrap();
        let other = EmbeddedStore::open(path).await.unwrap();
        let q = QueueName::new("q").unwrap();
        store.enqueue(&q, &[NewJob::new("a")]).await.unwrap();
        let claimed = store
            .claim(
                &q,
                crate::store::ClaimRequest::new(1, Duration::from_secs(30)).max_attempts(3),
            )
            .await
            .unwrap();
        let mut here = store.cancel_requests(&q).await.unwrap();
        let mut there = other.cancel_requests(&q).await.unwrap();
        store.enqueue(&q, &[NewJob::new("b")]).await.unwrap();
        assert!(
            tokio::time::timeout(Duration::from_millis(50), here.next())
                .await
                .is_err(),
            "an enqueue is no cancel request"
        );
        store
            .cancel(&q, &claimed[0].id, Some("operator"), SettleOptions::default())
            .await
            .unwrap();
        let want = CancelRequest {
            id: claimed[0].id.clone(),
            reason: Some("operator".into()),
        };
        // well within the poll: the request of this process is read at once
        let got = tokio::time::timeout(CANCEL_POLL / 2, here.next())
            .await
            .expect("at once");
        assert_eq!(got, Some(want.clone()));
        // another handle (as another process) reads it from the durable log within its poll
        let got = tokio::time::timeout(CANCEL_POLL * 5, there.next())
            .await
            .expect("within a poll");
        assert_eq!(got, Some(want));
    }

    #[tokio::test]
    async fn the_cancel_log_keeps_its_newest_thousand() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = EmbeddedStore::open(path.to_str().unwrap()).await.unwrap();
        let q = QueueName::new("q").unwrap();
        let ids = store.enqueue(&q, &vec![NewJob::new("a"); 1005]).await.unwrap();
        store
            .claim(
                &q,
                crate::store::ClaimRequest::new(1005, Duration::from_secs(30)).max_attempts(3),
            )
            .await
            .unwrap();
        for e in &ids {
            store.cancel(&q, e.id(), None, SettleOptions::default()).await.unwrap();
        }
        let (n, min): (i64, i64) = store
            .with_conn("test", |c| {
                c.query_row("SELECT count(*), min(seq) FROM kv_cancels", [], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
            })
            .await
            .unwrap();
        assert_eq!((n, min), (1000, 6));
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
