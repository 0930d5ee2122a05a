//! What only a Redis Cluster has, on clusters of each test's own (`tools/cluster.sh`: plain
//! `redis-server` processes with `--cluster-enabled yes`, on free loopback ports, stopped by their
//! PIDs): a master SIGKILLed under load and replaced by its replica, the queue's slot migrated to
//! another master under load and in the middle of a claim, a cancel sent while the slot's master
//! fails over, and writes that wait for a replica (`wait_replicas`).

use echomq::store::RetryRequest;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::store::redis::RedisStore;
use echomq::store::{ClaimRequest, SettleOptions, Store};
use echomq::{Consumer, ConsumerOptions, Error, JobContext, JobId, JobState, NewJob, QueueName, Verdict};
use redis::aio::MultiplexedConnection;

use crate::harness::conformance::probe_redis::node_of;
use crate::harness::redis_server;
use crate::harness::wait_until;

/// A cluster of the test's own: its seed URL and each node's `(pid, port)`; the tests of this file
/// run one at a time (each holds [`ONE_AT_A_TIME`]), so a failover's timing does not depend on
/// how many other clusters share the machine's two cores.
struct Cluster {
    url: String,
    nodes: Vec<(u32, u16)>,
    _one: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

impl Cluster {
    fn start(masters: u32, replicas: u32) -> Cluster {
        let one = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let (url, dir) = redis_server::start_cluster("redis-server", masters, replicas);
        let pids = std::fs::read_to_string(dir.join("servers")).expect("the cluster's server pids");
        let nodes = pids
            .lines()
            .map(|l| {
                let (pid, port) = l.split_once(' ').expect("PID PORT");
                (pid.parse().unwrap(), port.parse().unwrap())
            })
            .collect();
        Cluster { url, nodes, _one: one }
    }

    /// The port of the master that holds `q`.
    async fn master_of(&self, q: &QueueName) -> u16 {
        let node = node_of(&self.url, q).await;
        node.rsplit(':').next().unwrap().parse().unwrap()
    }

    fn pid(&self, port: u16) -> u32 {
        self.nodes.iter().find(|(_, p)| *p == port).expect("a node of ours").0
    }

    /// A plain connection to the node on `port`.
    async fn conn(port: u16) -> MultiplexedConnection {
        redis_server::connect(&format!("redis://127.0.0.1:{port}")).await
    }

    /// Waits until a master other than the one on `old` serves `q`'s slot, as the surviving nodes
    /// see it.
    async fn failed_over(&self, q: &QueueName, old: u16) -> u16 {
        let seed = self.nodes.iter().map(|(_, p)| *p).find(|p| *p != old).unwrap();
        let url = format!("redis+cluster://127.0.0.1:{seed}");
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let now = node_of(&url, q).await;
            let port: u16 = now.rsplit(':').next().unwrap().parse().unwrap();
            if port != old {
                return port;
            }
            assert!(Instant::now() < deadline, "no replica took over {q}'s slot within 30 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

fn kill9(pid: u32) {
    let ok = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -9 {pid}");
}

/// Runs of each job id, shared by the handlers of several consumers.
type Runs = Arc<Mutex<HashMap<String, u32>>>;

fn recording(runs: &Runs) -> impl Fn(JobContext) -> std::future::Ready<Verdict> + Send + Sync + 'static {
    let runs = runs.clone();
    move |job: JobContext| {
        *runs.lock().unwrap().entry(job.id().to_string()).or_default() += 1;
        std::future::ready(Verdict::Done)
    }
}

fn opts() -> ConsumerOptions {
    ConsumerOptions::default()
        .with_concurrency(8)
        .with_lease(Duration::from_secs(2))
        .with_beat(Duration::from_millis(200))
}

async fn enqueue_all(store: &RedisStore, q: &QueueName, n: usize) -> Vec<JobId> {
    let mut ids = Vec::with_capacity(n);
    for chunk in (0..n).collect::<Vec<_>>().chunks(1000) {
        let jobs: Vec<NewJob> = chunk.iter().map(|i| NewJob::new(format!("{i}").into_bytes())).collect();
        for e in store.enqueue(q, &jobs).await.expect("enqueue") {
            ids.push(e.id().clone());
        }
    }
    ids
}

/// 20,000 jobs, 3 consumers; the producer's enqueues wait for one replica (`wait=1`), 1,000 jobs
/// a batch with ids of its own (so a batch resent after an outage is a duplicate, not a second
/// copy). The queue's master is SIGKILLed a third of the way through; its replica takes over, and
/// the consumers resume by themselves. Every acknowledged job completes: none is lost with the
/// master. (After the failover the new master has no replica left, so the enqueues it takes are
/// unconfirmed — `NotReplicated` — and still run.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failover_under_load_loses_no_acknowledged_job_and_the_consumers_resume_by_themselves() {
    const BATCHES: usize = 20;
    const PER: usize = 1_000;
    let cluster = Cluster::start(3, 1);
    let q = QueueName::new("failover").unwrap();
    let producer = RedisStore::open(&format!("{}?wait=1&wait_timeout=1000", cluster.url))
        .await
        .unwrap();
    let acknowledged: Arc<Mutex<Vec<String>>> = Arc::default();
    let unconfirmed = Arc::new(AtomicUsize::new(0));
    let batch = |b: usize| -> Vec<NewJob> {
        (0..PER)
            .map(|i| NewJob::new(b"x".to_vec()).with_id(JobId::new(format!("j{b}-{i}")).unwrap()))
            .collect()
    };
    let produce = {
        let (q, acknowledged, unconfirmed) = (q.clone(), acknowledged.clone(), unconfirmed.clone());
        move |b: usize| {
            let (producer, q, acknowledged, unconfirmed) =
                (producer.clone(), q.clone(), acknowledged.clone(), unconfirmed.clone());
            let jobs = batch(b);
            async move {
                let deadline = Instant::now() + Duration::from_secs(60);
                loop {
                    match producer.enqueue(&q, &jobs).await {
                        Ok(_) => {
                            let mut acked = acknowledged.lock().unwrap();
                            acked.extend(jobs.iter().map(|j| j.id.as_ref().unwrap().to_string()));
                            return;
                        }
                        Err(Error::NotReplicated { .. }) => {
                            unconfirmed.fetch_add(jobs.len(), Ordering::SeqCst);
                            return;
                        }
                        Err(e) if e.is_unreachable() && Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                        Err(e) => panic!("enqueue of batch {b}: {e}"),
                    }
                }
            }
        }
    };
    for b in 0..BATCHES / 3 {
        produce(b).await;
    }
    let master = cluster.master_of(&q).await;

    let runs: Runs = Arc::default();
    let mut consumers = Vec::new();
    for _ in 0..3 {
        let store: Arc<dyn Store> = Arc::new(RedisStore::open_lazy(&cluster.url).unwrap());
        consumers.push(Consumer::start(store, q.clone(), recording(&runs), opts()).unwrap());
    }
    let rest = tokio::spawn(async move {
        for b in BATCHES / 3..BATCHES {
            produce(b).await;
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    wait_until(Duration::from_secs(60), "a third of the jobs ran", || async {
        runs.lock().unwrap().len() >= BATCHES * PER / 3
    })
    .await;
    kill9(cluster.pid(master));
    let promoted = cluster.failed_over(&q, master).await;
    assert_ne!(promoted, master);
    rest.await.unwrap();
    let acknowledged = acknowledged.lock().unwrap().clone();
    let unconfirmed = unconfirmed.load(Ordering::SeqCst);
    assert!(acknowledged.len() >= BATCHES * PER / 3, "{}", acknowledged.len());
    let store = RedisStore::open(&cluster.url).await.unwrap();
    wait_until(
        Duration::from_secs(120),
        "every job settled after the failover",
        || async {
            let c = store.counts(&q).await.unwrap();
            c.pending + c.active + c.scheduled == 0
        },
    )
    .await;
    for c in &consumers {
        c.stop(Duration::from_secs(10)).await.unwrap();
    }
    let counts = store.counts(&q).await.unwrap();
    assert_eq!(counts.dead, 0, "{counts:?}");
    let runs = runs.lock().unwrap();
    let lost: Vec<&String> = acknowledged
        .iter()
        .filter(|id| !runs.contains_key(id.as_str()))
        .collect();
    assert!(
        lost.is_empty(),
        "acknowledged jobs lost in the failover: {} (first {:?}); {} acknowledged, {unconfirmed} unconfirmed",
        lost.len(),
        lost.first(),
        acknowledged.len()
    );
}

/// The keys of `q` on the node at `port`, each with its value dumped.
async fn dump(port: u16, q: &QueueName) -> Vec<(String, Vec<u8>)> {
    let mut conn = Cluster::conn(port).await;
    let mut keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("emq:{{{}}}:*", q.as_str()))
        .query_async(&mut conn)
        .await
        .unwrap();
    keys.sort();
    let mut out = Vec::new();
    for k in keys {
        // ASKING: the importing node answers for the keys it holds of the slot
        let (v,): (Option<Vec<u8>>,) = redis::pipe()
            .cmd("ASKING")
            .ignore()
            .cmd("DUMP")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        out.push((k, v.unwrap_or_default()));
    }
    out
}

/// The node id of the master on `port`.
async fn node_id(port: u16) -> String {
    let mut c = Cluster::conn(port).await;
    redis::cmd("CLUSTER").arg("MYID").query_async(&mut c).await.unwrap()
}

/// Starts moving `slot` from the master on `from` to the one on `to` as `redis-cli --cluster
/// reshard` does: the importing and migrating marks; then [`move_keys`] and [`finish_migration`].
async fn begin_migration(slot: u16, from: u16, to: u16) {
    let (from_id, to_id) = (node_id(from).await, node_id(to).await);
    for (port, how, node) in [(to, "IMPORTING", from_id), (from, "MIGRATING", to_id)] {
        let mut c = Cluster::conn(port).await;
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg(how)
            .arg(&node)
            .query_async::<()>(&mut c)
            .await
            .unwrap_or_else(|e| panic!("SETSLOT {how}: {e}"));
    }
}

/// `MIGRATE`s the keys of `slot` from `from` to `to`, `per` at a time: `batches` batches when
/// given (the slot left split between the two nodes), else until none is left on `from`.
async fn move_keys(slot: u16, from: u16, to: u16, per: usize, batches: Option<usize>) {
    let mut src = Cluster::conn(from).await;
    let mut done = 0;
    while batches.is_none_or(|b| done < b) {
        let keys: Vec<String> = redis::cmd("CLUSTER")
            .arg("GETKEYSINSLOT")
            .arg(slot)
            .arg(per)
            .query_async(&mut src)
            .await
            .unwrap();
        if keys.is_empty() {
            return;
        }
        let mut m = redis::cmd("MIGRATE");
        m.arg("127.0.0.1")
            .arg(to)
            .arg("")
            .arg(0)
            .arg(5000)
            .arg("KEYS")
            .arg(&keys);
        m.query_async::<()>(&mut src).await.unwrap();
        done += 1;
    }
}

/// Names the master on `to` (id `to_id`) the owner of `slot` on every master.
async fn finish_migration(slot: u16, to: u16, to_id: &str, masters: &[u16]) {
    for port in std::iter::once(to).chain(masters.iter().copied().filter(|p| *p != to)) {
        let mut c = Cluster::conn(port).await;
        redis::cmd("CLUSTER")
            .arg("SETSLOT")
            .arg(slot)
            .arg("NODE")
            .arg(to_id)
            .query_async::<()>(&mut c)
            .await
            .unwrap();
    }
}

async fn slot_of(port: u16, q: &QueueName) -> u16 {
    let mut c = Cluster::conn(port).await;
    redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(format!("emq:{{{}}}:id", q.as_str()))
        .query_async(&mut c)
        .await
        .unwrap()
}

/// The first slot of the range of the master on `port` that holds `slot` (`CLUSTER NODES`).
async fn range_start(port: u16, slot: u16) -> u16 {
    let mut c = Cluster::conn(port).await;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query_async(&mut c).await.unwrap();
    for line in nodes.lines() {
        for r in line.split_whitespace().skip(8) {
            let (a, b) = r.split_once('-').unwrap_or((r, r));
            if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                if (a..=b).contains(&slot) {
                    return a;
                }
            }
        }
    }
    panic!("no master holds slot {slot}");
}

/// A queue whose slot is among the first 50 of its master's range, so that a reshard of that
/// many slots moves it last and quickly.
async fn queue_near_a_range_start(port: u16, prefix: &str) -> (QueueName, u16) {
    for i in 0.. {
        let q = QueueName::new(format!("{prefix}-{i}")).unwrap();
        let slot = slot_of(port, &q).await;
        let start = range_start(port, slot).await;
        if slot - start < 50 {
            return (q, slot - start + 1);
        }
    }
    unreachable!()
}

/// `redis-cli --cluster reshard` of the first `slots` slots of the master on `from` to the master
/// on `to`, keys moved ten at a time as its default pipeline does.
async fn reshard(from: u16, to: u16, slots: u16) {
    let id = |port: u16| async move {
        let mut c = Cluster::conn(port).await;
        redis::cmd("CLUSTER")
            .arg("MYID")
            .query_async::<String>(&mut c)
            .await
            .unwrap()
    };
    let (from_id, to_id) = (id(from).await, id(to).await);
    let out = tokio::process::Command::new("redis-cli")
        .args(["--cluster", "reshard", &format!("127.0.0.1:{from}")])
        .args(["--cluster-from", &from_id, "--cluster-to", &to_id])
        .args(["--cluster-slots", &slots.to_string(), "--cluster-yes"])
        .output()
        .await
        .expect("run redis-cli --cluster reshard");
    assert!(
        out.status.success(),
        "redis-cli --cluster reshard: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// 5,000 jobs, 2 consumers; `redis-cli --cluster reshard` moves the first slots of the queue's
/// master, the queue's the last of them, to another master while they run: every job completes
/// exactly once by the store's counters and by the handlers' count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_reshard_under_load_completes_every_job_exactly_once() {
    const N: usize = 5_000;
    let cluster = Cluster::start(3, 0);
    let masters: Vec<u16> = cluster.nodes.iter().map(|(_, p)| *p).collect();
    let (q, slots) = queue_near_a_range_start(masters[0], "reshard").await;
    let producer = RedisStore::open(&cluster.url).await.unwrap();
    let ids = enqueue_all(&producer, &q, N).await;
    let from = cluster.master_of(&q).await;
    let to = *masters.iter().find(|p| **p != from).unwrap();

    let runs: Runs = Arc::default();
    let slow = {
        let runs = runs.clone();
        move |job: JobContext| {
            let runs = runs.clone();
            async move {
                *runs.lock().unwrap().entry(job.id().to_string()).or_default() += 1;
                tokio::time::sleep(Duration::from_millis(2)).await;
                Verdict::Done
            }
        }
    };
    let mut consumers = Vec::new();
    for _ in 0..2 {
        let store: Arc<dyn Store> = Arc::new(RedisStore::open(&cluster.url).await.unwrap());
        consumers.push(Consumer::start(store, q.clone(), slow.clone(), opts()).unwrap());
    }
    wait_until(Duration::from_secs(60), "a fifth of the jobs ran", || async {
        runs.lock().unwrap().len() >= N / 5
    })
    .await;
    reshard(from, to, slots).await;
    assert_eq!(cluster.master_of(&q).await, to, "the slot moved");
    let done = producer.counts(&q).await.unwrap().completed;
    assert!(
        done < N as u64,
        "the slot moved while jobs ran ({done} of {N} done by then)"
    );
    wait_until(Duration::from_secs(120), "every job settled", || async {
        let c = producer.counts(&q).await.unwrap();
        c.completed == N as u64
    })
    .await;
    for c in &consumers {
        c.stop(Duration::from_secs(10)).await.unwrap();
    }
    let counts = producer.counts(&q).await.unwrap();
    assert_eq!(
        (counts.completed, counts.pending, counts.active, counts.dead),
        (N as u64, 0, 0, 0),
        "{counts:?}"
    );
    let runs = runs.lock().unwrap();
    let twice: Vec<(&String, &u32)> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs run twice: {twice:?}");
    assert_eq!(runs.len(), ids.len());
}

/// The slot is left split between two nodes (some keys moved, the rest not): a claim is refused
/// before it writes anything on either node, waits, and runs once the migration ends — its jobs
/// leased once, on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_while_the_slot_is_split_between_two_nodes_writes_nothing_until_the_move_ends() {
    let cluster = Cluster::start(3, 0);
    let masters: Vec<u16> = cluster.nodes.iter().map(|(_, p)| *p).collect();
    let q = QueueName::new("split").unwrap();
    let store = RedisStore::open(&cluster.url).await.unwrap();
    enqueue_all(&store, &q, 200).await;
    let from = cluster.master_of(&q).await;
    let to = *masters.iter().find(|p| **p != from).unwrap();
    let slot = slot_of(from, &q).await;
    // three batches of ten keys moved: rows on both sides, the queue's sets maybe on either
    begin_migration(slot, from, to).await;
    move_keys(slot, from, to, 10, Some(3)).await;
    let before = (dump(from, &q).await, dump(to, &q).await);
    assert!(!before.0.is_empty() && !before.1.is_empty(), "the slot is split");

    let claiming = {
        let store = store.clone();
        let q = q.clone();
        tokio::spawn(async move {
            let req = ClaimRequest::new(50, Duration::from_secs(30)).max_attempts(3);
            store.claim(&q, req).await
        })
    };
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(!claiming.is_finished(), "the claim waits while the slot is split");
    assert_eq!(
        (dump(from, &q).await, dump(to, &q).await),
        before,
        "nothing was written on either node"
    );

    // the rest of the keys move, and the slot is the new master's
    move_keys(slot, from, to, 100, None).await;
    finish_migration(slot, to, &node_id(to).await, &masters).await;
    let claimed = claiming.await.unwrap().expect("the claim runs after the move");
    assert_eq!(claimed.len(), 50);
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.active, counts.pending), (50, 150), "{counts:?}");
    assert!(
        dump(from, &q).await.is_empty(),
        "nothing of the queue is left on the old master"
    );
}

/// A job runs until cancelled; its master is SIGKILLed and the cancel is sent while the replica
/// takes over: the consumer, subscribed again on the new master, reads the request and stops the
/// job.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_sent_while_the_slots_master_fails_over_still_stops_its_job() {
    let cluster = Cluster::start(3, 1);
    let q = QueueName::new("cancel-failover").unwrap();
    let store = RedisStore::open(&cluster.url).await.unwrap();
    let id = store.enqueue(&q, &[NewJob::new(b"x".to_vec())]).await.unwrap()[0]
        .id()
        .clone();
    let started = Arc::new(AtomicBool::new(false));
    let stopped = Arc::new(AtomicUsize::new(0));
    let handler = {
        let (started, stopped) = (started.clone(), stopped.clone());
        move |job: JobContext| {
            let (started, stopped) = (started.clone(), stopped.clone());
            async move {
                started.store(true, Ordering::SeqCst);
                job.cancel_token().cancelled().await;
                stopped.fetch_add(1, Ordering::SeqCst);
                Verdict::Done
            }
        }
    };
    let consumer_store: Arc<dyn Store> = Arc::new(RedisStore::open_lazy(&cluster.url).unwrap());
    let consumer = Consumer::start(consumer_store, q.clone(), handler, opts().with_cancel(true)).unwrap();
    wait_until(Duration::from_secs(10), "the job started", || async {
        started.load(Ordering::SeqCst)
    })
    .await;
    let master = cluster.master_of(&q).await;
    kill9(cluster.pid(master));
    // the cancel, retried by the caller through the outage until the new master takes it
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match store.cancel(&q, &id, Some("operator"), SettleOptions::default()).await {
            Ok(_) => break,
            Err(e) if e.is_unreachable() => {
                assert!(Instant::now() < deadline, "the cancel never landed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("cancel: {e}"),
        }
    }
    wait_until(Duration::from_secs(30), "the job was stopped by its cancel", || async {
        stopped.load(Ordering::SeqCst) == 1
    })
    .await;
    consumer.stop(Duration::from_secs(10)).await.unwrap();
    let row = store.get(&q, &id).await.unwrap();
    assert!(
        row.as_ref().is_none_or(|r| r.state != JobState::Active),
        "the cancelled job is not left active: {row:?}"
    );
}

/// With `wait=1` (the store's, or one job's own `wait_replicas`) an enqueue returns once the
/// replica has it; with the queue's replica gone it fails typed ([`Error::NotReplicated`]) after
/// the wait, and its job stands on the master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_waiting_for_a_replica_returns_once_it_has_it_and_fails_typed_without_one() {
    let cluster = Cluster::start(3, 1);
    let q = QueueName::new("wait").unwrap();
    let store = RedisStore::open(&format!("{}?wait=1&wait_timeout=300", cluster.url))
        .await
        .unwrap();
    store
        .enqueue(&q, &[NewJob::new(b"a".to_vec())])
        .await
        .expect("confirmed by the replica");
    // the same asked of one job, on a store that does not wait by itself
    let plain = RedisStore::open(&cluster.url).await.unwrap();
    let waited = |p: &[u8]| NewJob::new(p.to_vec()).with_wait_replicas(1, Duration::from_millis(300));
    plain
        .enqueue(&q, &[waited(b"c")])
        .await
        .expect("the job's own wait, confirmed");
    // the queue's master's replica: the node whose INFO replication names the master's port
    let master = cluster.master_of(&q).await;
    let mut replica = None;
    for (pid, port) in &cluster.nodes {
        let mut c = Cluster::conn(*port).await;
        let info: String = redis::cmd("INFO").arg("replication").query_async(&mut c).await.unwrap();
        if info.contains(&format!("master_port:{master}")) {
            replica = Some(*pid);
        }
    }
    kill9(replica.expect("the master has a replica"));
    let started = Instant::now();
    let err = store.enqueue(&q, &[NewJob::new(b"b".to_vec())]).await.unwrap_err();
    assert!(
        matches!(
            err,
            Error::NotReplicated {
                acked: 0,
                wanted: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(started.elapsed() >= Duration::from_millis(250), "the server waited");
    let err = plain.enqueue(&q, &[waited(b"d")]).await.unwrap_err();
    assert!(matches!(err, Error::NotReplicated { .. }), "the job's own wait: {err}");
    // a job that asks nothing is acknowledged as ever
    plain.enqueue(&q, &[NewJob::new(b"e".to_vec())]).await.unwrap();
    assert_eq!(
        plain.counts(&q).await.unwrap().pending,
        5,
        "the unconfirmed jobs stand on the master"
    );
}

/// Every verb called once on the shared test cluster while `MONITOR` watches each master: every
/// `EVALSHA` any client sends names keys of one hash slot only (a cluster refuses anything else,
/// and a script's own commands may only touch its slot), and the scripts run cover every verb
/// that has one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_script_call_names_keys_of_one_slot_only() {
    use futures::StreamExt;
    let url = crate::harness::conformance::redis_cluster_url();
    let seeds: Vec<u16> = url
        .trim_start_matches("redis+cluster://")
        .split(',')
        .map(|hp| hp.rsplit(':').next().unwrap().parse().unwrap())
        .collect();
    // each master's EVALSHAs and the commands their scripts ran (` lua]`), in the master's order:
    // a script runs whole, so its commands follow its EVALSHA before anything else
    let seen: Arc<Mutex<Vec<(u16, String)>>> = Arc::default();
    let mut watchers = Vec::new();
    for port in &seeds {
        let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).unwrap();
        let monitor = client.get_async_monitor().await.unwrap();
        let (seen, port) = (seen.clone(), *port);
        watchers.push(tokio::spawn(async move {
            let mut lines = monitor.into_on_message::<String>();
            while let Some(line) = lines.next().await {
                let evalsha = line.contains("\"EVALSHA\"") || line.contains("\"evalsha\"");
                if evalsha || line.contains(" lua]") {
                    seen.lock().unwrap().push((port, line));
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(200)).await;

    let store = RedisStore::open(&url).await.unwrap();
    let q = QueueName::new(format!("slots-{}", std::process::id())).unwrap();
    let group = echomq::GroupName::new("g").unwrap();
    let settle = SettleOptions::default();
    let lease = Duration::from_secs(30);
    let ids: Vec<JobId> = store
        .enqueue(&q, &(0..8).map(|i| NewJob::new(vec![i])).collect::<Vec<_>>())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id().clone())
        .collect();
    store.genqueue(&q, &group, &[NewJob::new(b"g".to_vec())]).await.unwrap();
    store
        .set_group_limit(&q, &echomq::store::LimitTarget::Default, 2)
        .await
        .unwrap();
    store.set_retention(&q, &echomq::Retention::default()).await.unwrap();
    store.retention(&q).await.unwrap();
    store.set_priority_aging(&q, Duration::from_secs(30)).await.unwrap();
    store.priority_aging(&q).await.unwrap();
    // far above the rate, a claim's whole batch at once
    let far = "1000000/1s"
        .parse::<echomq::RateLimit>()
        .unwrap()
        .with_burst(1000)
        .unwrap();
    store
        .set_rate_limit(&q, &echomq::RateTarget::Queue, Some(far))
        .await
        .unwrap();
    store
        .set_rate_limit(&q, &echomq::RateTarget::Group(group.clone()), Some(far))
        .await
        .unwrap();
    store
        .set_rate_limit(&q, &echomq::RateTarget::GroupDefault, None)
        .await
        .unwrap();
    store.rate_limits(&q).await.unwrap();
    let claimed = store
        .claim(
            &q,
            echomq::store::ClaimRequest::new(6, lease)
                .max_attempts(1)
                .settle(settle),
        )
        .await
        .unwrap();
    assert_eq!(claimed.len(), 6);
    let [a, b, c, d, e, f] = &claimed[..] else {
        panic!("six claimed")
    };
    store.extend_lock(&q, &a.id, a.token, lease).await.unwrap();
    store.update_data(&q, &a.id, a.token, b"new").await.unwrap();
    store.mark_waited(&q, &a.id).await.unwrap();
    store
        .complete(&q, &echomq::store::Completion::new(a.id.clone(), a.token), settle)
        .await
        .unwrap();
    let many = echomq::store::Completion::new(b.id.clone(), b.token);
    store
        .complete_many(&q, std::slice::from_ref(&many), settle)
        .await
        .unwrap();
    // b settled again (stale), a claim of one job behind it in the same script call
    let fused = store
        .complete_then_claim(
            &q,
            &[many],
            settle,
            echomq::store::ClaimRequest::new(1, lease)
                .max_attempts(1)
                .settle(settle),
        )
        .await
        .unwrap();
    assert_eq!(fused.completed.unwrap(), [echomq::store::Settled::Stale]);
    fused.claimed.unwrap();
    store
        .complete_cancelled(
            &q,
            &c.id,
            c.token,
            &echomq::store::CancelledRequest::new().settle(settle),
        )
        .await
        .unwrap();
    store
        .retry(
            &q,
            &d.id,
            d.token,
            &RetryRequest::new("again")
                .after(Duration::from_secs(60))
                .max_attempts(3)
                .settle(settle),
        )
        .await
        .unwrap();
    store
        .discard(
            &q,
            &e.id,
            e.token,
            &echomq::store::DiscardRequest::new("dead").settle(settle),
        )
        .await
        .unwrap();
    store.release(&q, &f.id, f.token, Duration::ZERO).await.unwrap();
    store.reap(&q, 10, None).await.unwrap();
    store
        .sweep_stalled(&q, echomq::store::StalledPolicy::default())
        .await
        .unwrap();
    let sched = echomq::schedule::ScheduleName::new("s").unwrap();
    let every = echomq::schedule::Timing::every(Duration::from_secs(1)).unwrap();
    let template = echomq::schedule::JobTemplate::default();
    let schedule = echomq::schedule::Schedule::new(sched.clone(), every, template);
    store.upsert_schedule(&q, &schedule).await.unwrap();
    store.list_schedules(&q).await.unwrap();
    store.pause_schedule(&q, &sched).await.unwrap();
    store.resume_schedule(&q, &sched).await.unwrap();
    store.trigger_schedule(&q, &sched).await.unwrap();
    // a resumed schedule asks its slots again
    let promoted = store.promote(&q, 10, echomq::schedule::GRACE_MIN).await.unwrap();
    let request = promoted.refills.first().expect("the resumed schedule asks a refill");
    let slots = echomq::schedule::refill(request).unwrap();
    store.refill_schedule(&q, request, &slots).await.unwrap();
    store.remove_schedule(&q, &sched).await.unwrap();
    store.promote_job(&q, &d.id).await.unwrap();
    store.redrive(&q, &e.id, 1).await.unwrap();
    store.cancel(&q, &ids[7], None, settle).await.unwrap();
    store.get(&q, &ids[6]).await.unwrap();
    store.remove(&q, &ids[6], true).await.unwrap();
    let entry = echomq::registry::ConsumerEntry::for_this_process(1, Duration::from_secs(5));
    store.register_consumer(&q, &entry).await.unwrap();
    store.consumers(&q).await.unwrap();
    store.unregister_consumer(&q, &entry.id).await.unwrap();
    store.list(&q, JobState::Pending, None, 10).await.unwrap();
    store.counts(&q).await.unwrap();
    store.history(&q, 60).await.unwrap();
    store.groups(&q, None).await.unwrap();
    store.queues().await.unwrap();
    store.pause(&q).await.unwrap();
    store.resume(&q).await.unwrap();
    store.drain(&q).await.unwrap();
    store.obliterate(&q, true).await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    for w in watchers {
        w.abort();
    }

    // `<time> [<db> <client>] "EVALSHA" "<sha>" "<numkeys>" "<key>"… "<arg>"…`, and a script's
    // own `<time> [<db> lua] "<command>" "<arg>"…`: every key it names (`emq:…`) has its
    // EVALSHA's tag
    let tag = |k: &str| -> String {
        k.find('{')
            .and_then(|o| k[o + 1..].find('}').map(|c| k[o + 1..o + 1 + c].to_string()))
            .unwrap_or_else(|| k.to_string())
    };
    let seen = seen.lock().unwrap();
    let mut shas = std::collections::BTreeSet::new();
    let mut inner = 0;
    for port in &seeds {
        let mut current: Option<String> = None;
        for (_, line) in seen.iter().filter(|(p, _)| p == port) {
            let quoted = monitor_args(line);
            if let Some(at) = quoted.iter().position(|w| w.eq_ignore_ascii_case("evalsha")) {
                let n: usize = quoted[at + 2].parse().unwrap();
                let tags: std::collections::BTreeSet<String> =
                    quoted[at + 3..at + 3 + n].iter().map(|k| tag(k)).collect();
                assert_eq!(tags.len(), 1, "one script call names keys of several slots: {line}");
                shas.insert(quoted[at + 1].clone());
                current = tags.into_iter().next();
            } else if let Some(script_tag) = &current {
                for key in quoted.iter().filter(|a| a.starts_with("emq:")) {
                    inner += 1;
                    assert_eq!(&tag(key), script_tag, "a script touched a key of another slot: {line}");
                }
            }
        }
    }
    assert!(inner > 100, "the scripts' own commands were watched: {inner} keys");
    assert!(
        shas.len() >= echomq::store::redis::VERBS.len(),
        "{} scripts seen, {} verbs",
        shas.len(),
        echomq::store::redis::VERBS.len()
    );
}

/// The quoted arguments of a `MONITOR` line (an escaped quote inside one does not end it; the
/// escapes are kept).
fn monitor_args(line: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c != '"' {
            continue;
        }
        let mut arg = String::new();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(e) = chars.next() {
                        arg.push('\\');
                        arg.push(e);
                    }
                }
                '"' => break,
                c => arg.push(c),
            }
        }
        out.push(arg);
    }
    out
}
