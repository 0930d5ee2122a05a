//! The conformance harness: for the Redis store a real `redis-server` (started here on a free
//! loopback port, or the one `EMQ_TEST_REDIS_URL` names) and a fresh queue per case; for the
//! embedded store a fresh database file per case; and for both a probe that reads a store's internals
//! (wake tokens, group slots, the ring, rows, scores, records) so invariants can be checked from
//! outside the contract.
//!
//! Every case is an `async fn(&Ctx)` that calls only `ctx.store` (the contract) and `ctx.probe`
//! (named reads and writes under it); `conformance!` runs each against every store.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};

use echomq::store::embedded::EmbeddedStore;
use echomq::store::redis::RedisStore;
use echomq::store::Store;
use echomq::{JobId, JobState, QueueName, Retention};

#[path = "probe_redis.rs"]
pub mod probe_redis;

pub use probe_redis::RedisProbe;

/// One case's world: the store under test, its own queue, and a probe of the store's internals.
pub struct Ctx {
    pub store: Arc<dyn Store>,
    pub q: QueueName,
    pub probe: Probe,
    /// The directory of the case's database file (embedded store), deleted when the case ends.
    #[allow(dead_code)] // held, never read: dropping it deletes the file
    pub dir: Option<tempfile::TempDir>,
}

/// Reads (and, for cases that corrupt a store on purpose, writes) what the Store contract does not
/// show, named by intent so a case reads the same against every store. One variant per store; cheap
/// to clone (a case may hand one to a spawned task).
///
/// The vocabulary is the Redis keyspace's (docs/keyspace.md), which the embedded engine keeps too
/// (the probe reads it through the engine's raw commands): a *row* is `job:<id>` with its fields (`data`, `state`, `attempts`, `group`, …);
/// a *set* is one of the sorted sets `pending`, `active`, `scheduled`, `dead`, `completed`.
#[derive(Clone)]
pub enum Probe {
    /// The keyspace, through a Redis connection or the embedded engine's raw commands.
    Redis(RedisProbe),
}

/// One completion record (`emq:{q}:completions`), in the order written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub id: String,
    /// `completed`, `cancelled` or `dead`.
    pub status: String,
    /// The attempts of the settled job, as the store wrote them.
    pub attempts: String,
    /// The job's output, when it completed with one.
    pub output: Option<String>,
    /// The error or cancel reason, when it died or was cancelled with one.
    pub error: Option<String>,
    /// The store's time of the settle, ms.
    pub at: u64,
}

/// All of a queue's state, for "nothing was written" checks: compare two with `==`. Each entry is
/// (what, its serialized value); the content is a store's own and means nothing across stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot(pub Vec<(String, Vec<u8>)>);

/// Dispatches `$call` to the probe of the case's store.
macro_rules! each_store {
    ($self:ident, $p:ident => $call:expr) => {
        match $self {
            Probe::Redis($p) => $call,
        }
    };
}

impl Probe {
    /// Wake tokens waiting on the queue's wake list.
    pub async fn wakes(&self) -> u64 {
        each_store!(self, p => p.wakes().await)
    }

    /// Empties the wake list (to count the wakes of one step).
    pub async fn clear_wakes(&self) {
        each_store!(self, p => p.clear_wakes().await)
    }

    /// Shortens the wake list to its first `n` tokens, as consumers taking the others leave it.
    pub async fn keep_wakes(&self, n: u64) {
        each_store!(self, p => p.keep_wakes(n).await)
    }

    /// The group slot counters a:<g>, by group.
    pub async fn slots(&self) -> HashMap<String, u64> {
        each_store!(self, p => p.slots().await)
    }

    /// The ring's members in order.
    pub async fn ring(&self) -> Vec<String> {
        each_store!(self, p => p.ring().await)
    }

    /// The dedup keys held (the fields of the `dedup` hash), sorted.
    pub async fn dedup_keys(&self) -> Vec<String> {
        each_store!(self, p => p.dedup_keys().await)
    }

    /// A sorted set's members with their scores, by member.
    pub async fn members(&self, set: &str) -> Vec<(String, u64)> {
        each_store!(self, p => p.members(set).await)
    }

    /// Sets one member's score in a sorted set raw (a sweep's look made due without waiting).
    pub async fn set_member_score(&self, set: &str, member: &str, score: u64) {
        each_store!(self, p => p.set_member_score(set, member, score).await)
    }

    /// The fields of the groups hash (`a:<g>`, `l:<g>`, `r:<g>`, `l:~`, `r:~`), sorted.
    pub async fn group_fields(&self) -> Vec<String> {
        each_store!(self, p => p.group_fields().await)
    }

    /// One field of a job's row, read raw (`get` refuses a malformed row with a typed error, so a
    /// case that corrupts one reads the defect's name this way). `None`: no such field or row.
    pub async fn row_field(&self, id: &JobId, field: &str) -> Option<String> {
        each_store!(self, p => p.row_field(id, field).await)
    }

    /// Writes one field of an existing row raw (to corrupt it).
    pub async fn set_row_field(&self, id: &JobId, field: &str, value: &str) {
        each_store!(self, p => p.set_row_field(id, field, value).await)
    }

    /// Deletes one field of a row raw (to corrupt it).
    pub async fn del_row_field(&self, id: &JobId, field: &str) {
        each_store!(self, p => p.del_row_field(id, field).await)
    }

    /// Deletes a job's row under the store's feet, its id left wherever it was. True when there was
    /// a row to delete.
    pub async fn del_row(&self, id: &JobId) -> bool {
        each_store!(self, p => p.del_row(id).await)
    }

    /// Whether the job has a row.
    pub async fn row_exists(&self, id: &JobId) -> bool {
        each_store!(self, p => p.row_exists(id).await)
    }

    /// The score of `id` in the sorted set `set` (`pending`, `active`, `scheduled`, `dead`,
    /// `completed`), `None` when it is not a member.
    pub async fn score(&self, set: &str, id: &JobId) -> Option<u64> {
        each_store!(self, p => p.score(set, id).await)
    }

    /// Forgets the flat sets of `kinds` and the mark that they are whole, as a queue an earlier
    /// version wrote keeps neither.
    pub async fn forget_kinds(&self, kinds: &[&str]) {
        each_store!(self, p => p.forget_kinds(kinds).await)
    }

    /// The length of the list `list` (a wake list: `wake`, `wake:<kind>`, `wake_any`).
    pub async fn list_len(&self, list: &str) -> u64 {
        each_store!(self, p => p.list_len(list).await)
    }

    /// The number of members of the sorted set `set`.
    pub async fn set_len(&self, set: &str) -> u64 {
        each_store!(self, p => p.set_len(set).await)
    }

    /// Takes `id` out of the sorted set `set` raw, its row left as it is. True when it was a member.
    pub async fn remove_from_set(&self, set: &str, id: &JobId) -> bool {
        each_store!(self, p => p.remove_from_set(set, id).await)
    }

    /// Sets a schedule's stored slots raw (Unix ms, ascending) and its due entry to the first:
    /// slots in the past stand for an outage without waiting one out.
    pub async fn set_schedule_slots(&self, name: &str, slots: &[u64]) {
        each_store!(self, p => p.set_schedule_slots(name, slots).await)
    }

    /// The store's clock, ms (Redis: `TIME`; the embedded store: this machine's clock).
    pub async fn now_ms(&self) -> u64 {
        each_store!(self, p => p.now_ms().await)
    }

    /// The queue's completion records, oldest first.
    pub async fn records(&self) -> Vec<Record> {
        each_store!(self, p => p.records().await)
    }

    /// The queue's keys, each as its suffix after `emq:{q}:` (`id`, `job:<id>`, `pending`,
    /// `lane:<g>`, `metrics:<event>`, …), sorted; a key is there while it holds something. The
    /// embedded store names its rows the same way.
    pub async fn keys(&self) -> Vec<String> {
        each_store!(self, p => p.keys().await)
    }

    /// All of the queue's state, to compare before and after a step that must write nothing.
    pub async fn snapshot(&self) -> Snapshot {
        each_store!(self, p => p.snapshot().await)
    }

    /// Sets the mark an obliterate in progress leaves (enqueues and claims are refused under it).
    pub async fn set_obliterating_mark(&self) {
        each_store!(self, p => p.set_obliterating_mark().await)
    }

    /// Replaces the queue's key `suffix` with a string raw (to corrupt it: a hash or a set made a
    /// string fails every command of its type on it).
    pub async fn set_key_string(&self, suffix: &str, value: &str) {
        each_store!(self, p => p.set_key_string(suffix, value).await)
    }

    /// Deletes the queue's key `suffix` raw.
    pub async fn del_key(&self, suffix: &str) {
        each_store!(self, p => p.del_key(suffix).await)
    }

    /// Takes the obliterating mark away again.
    pub async fn clear_obliterating_mark(&self) {
        each_store!(self, p => p.clear_obliterating_mark().await)
    }

    /// Makes every enqueue and genqueue of the queue fail inside the store, with an error of the
    /// store's own (not a typed refusal), once it has read the queue's state. Redis: the id counter
    /// made a non-integer, so the script's first write (its INCRBY) fails; embedded: a trigger
    /// refusing the queue's new job rows, so the transaction fails after its registration and
    /// rolls back. For a queue that has taken no job yet.
    pub async fn refuse_new_jobs(&self) {
        each_store!(self, p => p.refuse_new_jobs().await)
    }

    /// Undoes [`Probe::refuse_new_jobs`]: the queue takes jobs again, its ids from 1.
    pub async fn allow_new_jobs(&self) {
        each_store!(self, p => p.allow_new_jobs().await)
    }

    /// The keyspace probe (for tests/redis_scripts.rs, which runs scripts raw).
    #[allow(dead_code)] // the conformance cases never reach for a store's own probe
    pub fn as_redis(&self) -> Option<&RedisProbe> {
        match self {
            Probe::Redis(p) => Some(p),
        }
    }

    /// A second store of the case's kind on the same data, accepting payloads (and outputs) of at
    /// most `limit` bytes.
    pub async fn store_with_payload_limit(&self, limit: usize) -> Arc<dyn Store> {
        each_store!(self, p => p.store_with_payload_limit(limit).await)
    }
}

static REDIS_URL: OnceLock<String> = OnceLock::new();
static REDIS_CLUSTER_URL: OnceLock<String> = OnceLock::new();
static VALKEY_URL: OnceLock<String> = OnceLock::new();
static VALKEY_CLUSTER_URL: OnceLock<String> = OnceLock::new();
static QUEUE_SEQ: AtomicU32 = AtomicU32::new(0);

#[path = "../support/redis_server.rs"]
pub mod redis_server;

/// The URL of the Redis the suite runs against: `EMQ_TEST_REDIS_URL`, else a `redis-server` this
/// process starts on a free loopback port (stopped by its PID when this process is gone).
pub fn redis_url() -> String {
    REDIS_URL
        .get_or_init(|| redis_server::url_from_env_or_start("EMQ_TEST_REDIS_URL"))
        .clone()
}

/// The URL of the Redis Cluster (3 masters) the suite runs against: `EMQ_TEST_REDIS_CLUSTER_URL`,
/// else one this process starts from `redis-server` (`tools/cluster.sh`).
pub fn redis_cluster_url() -> String {
    REDIS_CLUSTER_URL
        .get_or_init(|| redis_server::cluster_url_from_env_or_start("EMQ_TEST_REDIS_CLUSTER_URL", "redis-server", 3, 0))
        .clone()
}

/// The URL of the standalone Valkey the suite runs against: `EMQ_TEST_VALKEY_URL`, else one this
/// process starts from the Valkey binary ([`redis_server::valkey_server`]).
pub fn valkey_url() -> String {
    VALKEY_URL
        .get_or_init(|| {
            if let Ok(url) = std::env::var("EMQ_TEST_VALKEY_URL") {
                return url;
            }
            redis_server::server_url_from_env_or_start("EMQ_TEST_VALKEY_URL", &redis_server::valkey_server())
        })
        .clone()
}

/// The URL of the Valkey Cluster (3 masters) the suite runs against:
/// `EMQ_TEST_VALKEY_CLUSTER_URL`, else one this process starts from the Valkey binary.
pub fn valkey_cluster_url() -> String {
    VALKEY_CLUSTER_URL
        .get_or_init(|| {
            if let Ok(url) = std::env::var("EMQ_TEST_VALKEY_CLUSTER_URL") {
                return url;
            }
            redis_server::cluster_url_from_env_or_start(
                "EMQ_TEST_VALKEY_CLUSTER_URL",
                &redis_server::valkey_server(),
                3,
                0,
            )
        })
        .clone()
}

/// The URL of the server a case module runs against, by the module's name.
pub fn server_url(server: &str) -> String {
    match server {
        "redis" => redis_url(),
        "redis_cluster" => redis_cluster_url(),
        "valkey" => valkey_url(),
        "valkey_cluster" => valkey_cluster_url(),
        other => panic!("no server {other}"),
    }
}

/// A fresh, unique queue name for one case.
pub fn queue_name(case: &str) -> QueueName {
    let n = QUEUE_SEQ.fetch_add(1, Ordering::Relaxed);
    QueueName::new(format!("t-{case}-{}-{n}", std::process::id())).expect("valid queue name")
}

/// The Redis world of one case, on the Redis the suite shares.
#[allow(dead_code)] // the suites run their cases through `redis_ctx_at`; tests/redis_scripts.rs this
pub async fn redis_ctx(case: &str) -> Ctx {
    redis_ctx_at(&redis_url(), case).await
}

/// The Redis world of one case on the server at `url`: a case that changes the whole server's
/// state (`SCRIPT FLUSH`, `CONFIG SET`, a flush of the data, a kill or a pause) runs on a server of
/// its own ([`redis_server::OwnedServer`]), never on the shared one, where every other case would
/// meet the change.
pub async fn redis_ctx_at(url: &str, case: &str) -> Ctx {
    let store = RedisStore::open(url).await.expect("open the Redis store");
    let q = queue_name(case);
    let probe = RedisProbe::open(url, &q).await;
    Ctx {
        store: Arc::new(store),
        q,
        probe: Probe::Redis(probe),
        dir: None,
    }
    .keeping_nothing()
    .await
}

/// The embedded world of one case: a fresh database file in a temporary directory of its own.
pub async fn embedded_ctx(case: &str) -> Ctx {
    let dir = tempfile::Builder::new()
        .prefix(&format!("emq-{case}-"))
        .tempdir()
        .expect("a temporary directory");
    let path = dir.path().join("echomq.db");
    let path = path.to_str().expect("a UTF-8 temporary path");
    let store = EmbeddedStore::open(path).await.expect("open the embedded store");
    let q = queue_name(case);
    let probe = RedisProbe::on_engine(store.clone(), &q);
    Ctx {
        store: Arc::new(store),
        q,
        probe: Probe::Redis(probe),
        dir: Some(dir),
    }
    .keeping_nothing()
    .await
}

impl Ctx {
    /// Every case starts on a queue that keeps no finished row (`Retention::off`), so a case
    /// about the moves sees a finished job's row go; a case about retention sets its own
    /// ([`Ctx::keep`]), and the default's cases use a queue of their own.
    async fn keeping_nothing(self) -> Self {
        self.store
            .set_retention(&self.q, &Retention::off())
            .await
            .expect("set the case's retention");
        self
    }

    /// The case's queue keeps its newest `keep` finished rows (the default's age and cap).
    pub async fn keep(&self, keep: u32) {
        let retention = Retention::default().keep(keep);
        self.store
            .set_retention(&self.q, &retention)
            .await
            .expect("set the case's retention");
    }
}

#[path = "../support/consumer_kit.rs"]
mod consumer_kit;
pub use consumer_kit::wait_until;

/// The slot invariant: for every group, a:<g> equals the number of its jobs in active; and the
/// waiting jobs `counts` reports (kept by the writes, not counted at the read) are those listed.
pub async fn assert_slot_invariant(ctx: &Ctx) {
    let listed = ctx
        .store
        .list(&ctx.q, JobState::Pending, None, 10_000)
        .await
        .expect("list pending")
        .ids
        .len() as u64;
    let counted = ctx.store.counts(&ctx.q).await.expect("counts").pending;
    assert_eq!(counted, listed, "counts' pending must equal the waiting jobs listed");
    let active = ctx
        .store
        .list(&ctx.q, JobState::Active, None, 10_000)
        .await
        .expect("list active")
        .ids;
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

/// Runs each named case against every store — Redis standalone and Cluster, Valkey standalone and
/// Cluster, embedded — as `#[tokio::test]`s in a module per store, and lists the case names in
/// `CASES` (a test checks every verb has a case).
#[macro_export]
macro_rules! conformance {
    (@server $module:ident, $server:literal, $($case:ident),*) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let url = $crate::harness::server_url($server);
                    let ctx = $crate::harness::redis_ctx_at(&url, stringify!($case)).await;
                    super::$case(&ctx).await;
                }
            )*
        }
    };
    ($($case:ident),* $(,)?) => {
        pub const CASES: &[&str] = &[$(stringify!($case)),*];
        $crate::conformance!(@server redis_store, "redis", $($case),*);
        $crate::conformance!(@server redis_cluster_store, "redis_cluster", $($case),*);
        $crate::conformance!(@server valkey_store, "valkey", $($case),*);
        $crate::conformance!(@server valkey_cluster_store, "valkey_cluster", $($case),*);
        mod embedded_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    let ctx = $crate::harness::embedded_ctx(stringify!($case)).await;
                    super::$case(&ctx).await;
                }
            )*
        }
    };
}
