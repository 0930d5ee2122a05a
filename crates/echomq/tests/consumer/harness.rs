//! The consumer suite's harness: one world per case — the store under test, a fresh queue of the
//! case's own, the conformance probe of the store's internals (completion records, lease deadlines,
//! the store's clock), and a way to open more handles on the same data, as another process would.
//!
//! For the Redis store the world is a real `redis-server` (the one `EMQ_TEST_REDIS_URL` names, else
//! one started here on a free loopback port; with neither, the case fails saying how to get one);
//! for the embedded store a fresh database file per case. Every case is an `async fn(&Ctx)`;
//! `consumer_cases!` runs each against every store, one factory line per store.

use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use echomq::store::embedded::EmbeddedStore;
use echomq::store::redis::RedisStore;
use echomq::store::Store;
use echomq::{JobId, QueueName};

// The conformance harness: its Redis per process, its queue names and its probes (this suite uses
// part of it).
#[allow(dead_code, unused_imports)]
#[path = "../conformance/harness.rs"]
pub mod conformance;
pub use conformance::{Probe, RedisProbe};

// Loaded a second time on purpose: the conformance harness keeps its copies of these private.
#[allow(clippy::duplicate_mod)]
#[path = "../support/consumer_kit.rs"]
mod consumer_kit;
pub use consumer_kit::{completed, counting, fast, wait_until};

#[allow(clippy::duplicate_mod)]
#[path = "../support/redis_server.rs"]
pub mod redis_server;

/// One case's world.
pub struct Ctx {
    /// The store the case's consumers run on.
    pub store: Arc<dyn Store>,
    /// The case's own queue.
    pub q: QueueName,
    /// Reads under the contract (records, lease deadlines, the store's clock).
    pub probe: Probe,
    place: Place,
}

/// Where a case's data lives.
enum Place {
    Redis {
        url: String,
    },
    Embedded {
        path: String,
        /// The handle `store` is (its hand-off counter is per handle).
        handle: EmbeddedStore,
        /// Held, never read: dropping it deletes the database file.
        _dir: tempfile::TempDir,
    },
}

/// Opens more handles on a case's data: each has its own connections (on the embedded store, its
/// own connection and thread, and no in-process wake shared with the others), as another process's
/// would. Cheap to clone, `'static`: a supervisor's factory holds one.
#[derive(Clone)]
pub enum Opener {
    Redis(String),
    Embedded(String),
}

impl Opener {
    /// A new handle.
    pub async fn open(&self) -> echomq::Result<Arc<dyn Store>> {
        self.open_with_payload_limit(echomq::store::PAYLOAD_LIMIT_DEFAULT).await
    }

    /// A new handle accepting payloads and outputs of at most `limit` bytes.
    pub async fn open_with_payload_limit(&self, limit: usize) -> echomq::Result<Arc<dyn Store>> {
        Ok(match self {
            Opener::Redis(url) => Arc::new(RedisStore::open(url).await?.with_payload_limit(limit)),
            Opener::Embedded(path) => Arc::new(EmbeddedStore::open(path).await?.with_payload_limit(limit)),
        })
    }
}

impl Ctx {
    /// Another fresh queue of this case's own (for a case that runs two).
    pub fn queue(&self, name: &str) -> QueueName {
        conformance::queue_name(name)
    }

    /// What opens more handles on this case's data.
    pub fn opener(&self) -> Opener {
        match &self.place {
            Place::Redis { url } => Opener::Redis(url.clone()),
            Place::Embedded { path, .. } => Opener::Embedded(path.clone()),
        }
    }

    /// Another handle on this case's data (see [`Opener`]).
    pub async fn other_handle(&self) -> Arc<dyn Store> {
        self.opener().open().await.expect("open another handle")
    }

    /// How many jobs of `queue` the case's `store` handed straight to a parked consumer (claimed
    /// inside the enqueue that woke it, `Store::park_with_handoff`); `None` on a store that counts
    /// none, because it serves no hand-offs.
    pub fn handed_over(&self, queue: &QueueName) -> Option<u64> {
        match &self.place {
            Place::Redis { .. } => None,
            Place::Embedded { handle, .. } => Some(handle.handed_over(queue)),
        }
    }

    /// Checks the hand-offs of `self.q` with `expect` on a store that serves them; on one that
    /// serves none, that it says so (`serves_handoffs`), as the consumer then parks plainly.
    pub fn assert_handed_over(&self, what: &str, expect: impl Fn(u64) -> bool) {
        match self.handed_over(&self.q) {
            Some(n) => assert!(expect(n), "{what}: {n} jobs handed over"),
            None => assert!(
                !self.store.serves_handoffs(),
                "a store that counts no hand-offs must serve none"
            ),
        }
    }

    /// The embedded handle `store` is, and the path of its database file; `None` on Redis.
    pub fn embedded(&self) -> Option<(&EmbeddedStore, &str)> {
        match &self.place {
            Place::Redis { .. } => None,
            Place::Embedded { handle, path, .. } => Some((handle, path)),
        }
    }

    /// Waits until the lease of the active job `id` has lapsed on the store's clock.
    pub async fn wait_lease_lapsed(&self, id: &JobId) {
        let deadline = self
            .probe
            .score("active", id)
            .await
            .unwrap_or_else(|| panic!("job {id} is not active on a lease"));
        wait_until(Duration::from_secs(5), "the lease lapsed", || async {
            self.probe.now_ms().await > deadline
        })
        .await;
    }
}

/// The world of one case on the Redis (or Valkey, or cluster) at `url`.
pub async fn redis_ctx_at(url: String, case: &str) -> Ctx {
    let store = RedisStore::open(&url).await.expect("open the Redis store");
    let q = conformance::queue_name(case);
    let probe = RedisProbe::open(&url, &q).await;
    Ctx {
        store: Arc::new(store),
        q,
        probe: Probe::Redis(probe),
        place: Place::Redis { url },
    }
}

/// The embedded world of one case: a fresh database file in a temporary directory of its own.
pub async fn embedded_ctx(case: &str) -> Ctx {
    let dir = tempfile::Builder::new()
        .prefix(&format!("emq-{case}-"))
        .tempdir()
        .expect("a temporary directory");
    let path = dir.path().join("echomq.db");
    let path = path.to_str().expect("a UTF-8 temporary path").to_string();
    let handle = EmbeddedStore::open(&path).await.expect("open the embedded store");
    let q = conformance::queue_name(case);
    let probe = RedisProbe::on_engine(handle.clone(), &q);
    Ctx {
        store: Arc::new(handle.clone()),
        q,
        probe: Probe::Redis(probe),
        place: Place::Embedded {
            path,
            handle,
            _dir: dir,
        },
    }
}

/// What the library logged (debug and above) since the first call, as text: the subscriber is
/// process-wide, so cases running beside each other pick out their own lines by queue name.
pub fn captured_log() -> &'static Arc<Mutex<Vec<u8>>> {
    static LOG: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOG.get_or_init(|| {
        #[derive(Clone)]
        struct Sink(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Sink {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let log = Arc::new(Mutex::new(Vec::new()));
        let sink = Sink(log.clone());
        tracing_subscriber::fmt()
            .with_max_level(tracing::Level::DEBUG)
            .with_ansi(false)
            .with_writer(move || sink.clone())
            .init();
        log
    })
}

/// The captured lines that contain every one of `parts`.
pub fn log_lines(parts: &[&str]) -> Vec<String> {
    String::from_utf8_lossy(&captured_log().lock().unwrap())
        .lines()
        .filter(|l| parts.iter().all(|p| l.contains(p)))
        .map(str::to_string)
        .collect()
}

/// Waits (up to `within`) until the consumer has reported the settle of `id` under the fencing
/// token `token` on `q` refused as no longer its own (a stale settle: another claim holds the
/// job). False when no such report came in time. [`captured_log`] must have been called before
/// that settle.
pub async fn stale_settle_reported(q: &QueueName, id: &JobId, token: u64, within: Duration) -> bool {
    let (queue, id, token) = (format!("queue={q} "), format!("id={id} "), format!("token={token} "));
    let deadline = std::time::Instant::now() + within;
    loop {
        if !log_lines(&["settle refused", &queue, &id, &token]).is_empty() {
            return true;
        }
        if std::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Runs each named case against every store — Redis standalone and Cluster, Valkey standalone and
/// Cluster, embedded — as `#[tokio::test]`s in a module per store.
#[macro_export]
macro_rules! consumer_cases {
    (@server $module:ident, $server:literal, $($case:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let url = $crate::harness::conformance::server_url($server);
                    let ctx = $crate::harness::redis_ctx_at(url, stringify!($case)).await;
                    super::$case(&ctx).await;
                }
            )*
        }
    };
    ($($case:ident),* $(,)?) => {
        $crate::consumer_cases!(@server redis_store, "redis", $($case),*);
        $crate::consumer_cases!(@server redis_cluster_store, "redis_cluster", $($case),*);
        $crate::consumer_cases!(@server valkey_store, "valkey", $($case),*);
        $crate::consumer_cases!(@server valkey_cluster_store, "valkey_cluster", $($case),*);
        mod embedded_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let ctx = $crate::harness::embedded_ctx(stringify!($case)).await;
                    super::$case(&ctx).await;
                }
            )*
        }
    };
}

/// Runs each named case against the embedded store only (a behaviour of that store alone).
#[macro_export]
macro_rules! embedded_cases {
    ($($case:ident),* $(,)?) => {
        mod embedded_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() {
                    let ctx = $crate::harness::embedded_ctx(stringify!($case)).await;
                    super::$case(&ctx).await;
                }
            )*
        }
    };
}
