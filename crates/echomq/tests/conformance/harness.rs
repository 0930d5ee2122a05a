//! The conformance harness: a real `redis-server` (started here on a free loopback port, or the one
//! `EMQ_TEST_REDIS_URL` names), a fresh queue per case, and a probe that reads a store's internals
//! (wake tokens, group slots, the ring) so invariants can be checked from outside the contract.
//!
//! Every case is an `async fn(&Ctx)`; `conformance!` runs each against every store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use echomq::store::redis::RedisStore;
use echomq::store::Store;
use echomq::{JobState, QueueName};
use redis::AsyncCommands;

/// One case's world: the store under test, its own queue, and a probe of the store's internals.
pub struct Ctx {
    pub store: Arc<dyn Store>,
    pub q: QueueName,
    pub probe: Probe,
}

/// Reads what the Store contract does not show. One variant per store.
pub enum Probe {
    Redis {
        conn: redis::aio::MultiplexedConnection,
        base: String,
        url: String,
    },
}

impl Probe {
    /// Wake tokens waiting on the queue's wake list.
    pub async fn wakes(&self) -> u64 {
        match self {
            Probe::Redis { conn, base, .. } => conn.clone().llen(format!("{base}wake")).await.expect("LLEN wake"),
        }
    }

    /// Empties the wake list (to count the wakes of one step).
    pub async fn clear_wakes(&self) {
        match self {
            Probe::Redis { conn, base, .. } => {
                let _: () = conn.clone().del(format!("{base}wake")).await.expect("DEL wake");
            }
        }
    }

    /// The group slot counters a:<g>.
    pub async fn slots(&self) -> HashMap<String, u64> {
        match self {
            Probe::Redis { conn, base, .. } => {
                let all: HashMap<String, String> =
                    conn.clone().hgetall(format!("{base}groups")).await.expect("HGETALL");
                all.into_iter()
                    .filter_map(|(k, v)| {
                        k.strip_prefix("a:")
                            .map(|g| (g.to_string(), v.parse().expect("a: is an integer")))
                    })
                    .collect()
            }
        }
    }

    /// The ring's members in order.
    pub async fn ring(&self) -> Vec<String> {
        match self {
            Probe::Redis { conn, base, .. } => conn
                .clone()
                .lrange(format!("{base}ring"), 0, -1)
                .await
                .expect("LRANGE ring"),
        }
    }

    /// A raw connection, for cases that must reach under the contract (corrupt a row, EVAL a file).
    pub fn redis(&self) -> (redis::aio::MultiplexedConnection, &str, &str) {
        match self {
            Probe::Redis { conn, base, url } => (conn.clone(), base.as_str(), url.as_str()),
        }
    }
}

static REDIS_URL: OnceLock<String> = OnceLock::new();
static QUEUE_SEQ: AtomicU32 = AtomicU32::new(0);

#[path = "../support/redis_server.rs"]
mod redis_server;

/// The URL of the Redis the suite runs against: `EMQ_TEST_REDIS_URL`, else a `redis-server` this
/// process starts on a free loopback port (stopped by its PID when this process is gone).
pub fn redis_url() -> String {
    REDIS_URL
        .get_or_init(|| redis_server::url_from_env_or_start("EMQ_TEST_REDIS_URL"))
        .clone()
}

/// A fresh, unique queue name for one case.
pub fn queue_name(case: &str) -> QueueName {
    let n = QUEUE_SEQ.fetch_add(1, Ordering::Relaxed);
    QueueName::new(format!("t-{case}-{}-{n}", std::process::id())).expect("valid queue name")
}

/// The Redis world of one case.
pub async fn redis_ctx(case: &str) -> Ctx {
    let url = redis_url();
    let store = RedisStore::open(&url).await.expect("open the Redis store");
    let client = redis::Client::open(url.as_str()).expect("client");
    let conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("probe connection");
    let q = queue_name(case);
    let base = format!("emq:{{{}}}:", q.as_str());
    Ctx {
        store: Arc::new(store),
        q,
        probe: Probe::Redis { conn, base, url },
    }
}

/// Waits until `f` is true, checking every 5 ms, for at most `within`.
pub async fn wait_until<F, Fut>(within: Duration, what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !f().await {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The slot invariant (DESIGN §3): for every group, a:<g> equals the number of its jobs in active.
pub async fn assert_slot_invariant(ctx: &Ctx) {
    let active = ctx
        .store
        .list(&ctx.q, JobState::Active, 0, 10_000)
        .await
        .expect("list active");
    let mut expected: HashMap<String, u64> = HashMap::new();
    for id in active {
        if let Some(job) = ctx.store.get(&ctx.q, &id).await.expect("get") {
            if let Some(g) = job.group {
                *expected.entry(g.to_string()).or_default() += 1;
            }
        }
    }
    let slots = ctx.probe.slots().await;
    assert_eq!(
        slots, expected,
        "slot invariant: a:<g> must equal each group's active jobs"
    );
    let ring = ctx.probe.ring().await;
    let mut seen = std::collections::HashSet::new();
    for m in &ring {
        assert!(seen.insert(m), "ring holds {m} twice: {ring:?}");
    }
}

/// Runs each named case against every store, as `#[tokio::test]`s in a module per store, and lists
/// the case names in `CASES` (a test checks every verb has a case).
#[macro_export]
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {
        pub const CASES: &[&str] = &[$(stringify!($case)),*];
        mod redis_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let ctx = $crate::harness::redis_ctx(stringify!($case)).await;
                    super::$case(&ctx).await;
                }
            )*
        }
    };
}
