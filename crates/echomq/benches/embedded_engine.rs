//! The embedded engine (the verbs' own Lua scripts over the keyspace on SQLite) beside the
//! embedded store's native verbs, on the consumer's hot path: enqueue, claim and complete_many.
//! Each side runs on a file of its own, on a thread of its own that the caller reaches over a
//! channel (as the store's verbs do), in rounds that alternate the two; one JSON line per figure
//! and side with the median of the rounds.
//!
//! * `enqueue`: N jobs, 1000 to a call;
//! * `process_B`: N waiting jobs settled and claimed B at a time — `complete_many` of the jobs in
//!   hand then `claim` of B in one transaction, as a consumer's fused round sends them (B 25: a
//!   consumer at concurrency 100 claims once a quarter of its slots are free; B 1: concurrency 1);
//!   with the queue's results kept (`--retention default`) or not (the default, as `emq bench
//!   process` runs);
//! * `latency`: an enqueue of one job, then its claim, each its own transaction, N times on an
//!   empty queue: p50 and p99 of enqueue → claimed; for the engine also `handoff`, the claim run
//!   inside the enqueue's transaction (a parked consumer's claim handed over by the enqueue).
//!
//!     cargo bench -p echomq --bench embedded_engine [-- --jobs 100000 --rounds 3 --retention default]
//!
//! Run by `cargo test --all-targets` (no `--bench`), it runs one small round, a smoke run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    clippy::panic,
    missing_docs
)]

use std::sync::mpsc;
use std::time::{Duration, Instant};

mod support {
    pub mod args;
}

use echomq::keyspace::QueueKeys;
use echomq::store::embedded::engine::{Call, LuaHost, Reply};
use echomq::store::embedded::EmbeddedStore;
use echomq::store::{ClaimRequest, Completion, SettleOptions};
use echomq::{JobId, NewJob, QueueName, Retention, Store};
use serde_json::json;

const LEASE_MS: u64 = 30_000;

type Job = Box<dyn FnOnce(&LuaHost) + Send>;

/// The engine on a thread of its own, reached over a channel.
struct EngineThread {
    tx: mpsc::Sender<Job>,
}

impl EngineThread {
    fn start(path: std::path::PathBuf) -> Self {
        let (tx, rx) = mpsc::channel::<Job>();
        std::thread::spawn(move || {
            let conn = rusqlite::Connection::open(&path).unwrap();
            conn.busy_timeout(Duration::from_secs(5)).unwrap();
            conn.pragma_update(None, "journal_mode", "WAL").unwrap();
            conn.pragma_update(None, "synchronous", "NORMAL").unwrap();
            conn.pragma_update(None, "cache_size", -32 * 1024).unwrap();
            conn.pragma_update(None, "temp_store", "MEMORY").unwrap();
            conn.set_db_config(rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
                .unwrap();
            conn.set_prepared_statement_cache_capacity(256);
            let mut engine = LuaHost::with_verbs(conn).unwrap();
            engine.register("empty", "return 1").unwrap();
            for job in rx {
                job(&engine);
            }
        });
        Self { tx }
    }

    /// The medians of `n` runs on the engine's thread, no hop: µs of a transaction running
    /// `return 1`, and of one enqueue, claim and complete_many of one job.
    async fn direct(&self, k: &QueueKeys, n: usize) -> [f64; 4] {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let k = k.clone();
        self.tx
            .send(Box::new(move |e: &LuaHost| {
                let mut t = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
                let empty = Call {
                    script: "empty",
                    keys: Vec::new(),
                    args: Vec::new(),
                };
                for i in 0..n {
                    let at = Instant::now();
                    e.run(std::slice::from_ref(&empty)).unwrap();
                    t[0].push(at.elapsed().as_secs_f64() * 1e6);
                    let at = Instant::now();
                    e.run(&[enqueue_call(&k, &payloads(i, 1))]).unwrap();
                    t[1].push(at.elapsed().as_secs_f64() * 1e6);
                    let at = Instant::now();
                    let r = e.run(&[claim_call(&k, 1)]).unwrap().0;
                    t[2].push(at.elapsed().as_secs_f64() * 1e6);
                    let at = Instant::now();
                    e.run(&[complete_call(&k, &claimed(&r[0]))]).unwrap();
                    t[3].push(at.elapsed().as_secs_f64() * 1e6);
                }
                let _ = tx.send(t.map(median));
            }))
            .unwrap();
        rx.await.unwrap()
    }

    async fn run(&self, calls: Vec<Call<'static>>) -> Vec<Reply> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.tx
            .send(Box::new(move |e: &LuaHost| {
                let _ = tx.send(e.run(&calls).unwrap().0);
            }))
            .unwrap();
        rx.await.unwrap()
    }
}

fn b(s: impl Into<String>) -> Vec<u8> {
    s.into().into_bytes()
}

fn enqueue_call(k: &QueueKeys, payloads: &[String]) -> Call<'static> {
    let mut args = vec![b(k.base()), b(payloads.len().to_string())];
    args.extend(payloads.iter().map(|p| b(p.clone())));
    Call {
        script: "enqueue",
        keys: vec![
            b(k.id()),
            b(k.pending()),
            b(k.scheduled()),
            b(k.ring()),
            b(k.groups()),
            b(k.wake()),
            b(k.obliterating()),
            b(k.registered()),
            b(k.order()),
        ],
        args,
    }
}

fn claim_call(k: &QueueKeys, n: usize) -> Call<'static> {
    Call {
        script: "claim",
        keys: vec![
            b(k.ring()),
            b(k.groups()),
            b(k.pending()),
            b(k.active()),
            b(k.paused()),
            b(k.obliterating()),
            b(k.throttled()),
            b(k.tats()),
            b(k.tat()),
        ],
        args: vec![
            b(k.base()),
            b(n.to_string()),
            b(LEASE_MS.to_string()),
            b("3"),
            b("0"),
            b((8u64 << 20).to_string()),
        ],
    }
}

fn complete_call(k: &QueueKeys, jobs: &[(Vec<u8>, Vec<u8>)]) -> Call<'static> {
    let mut args = vec![b(k.base()), b(jobs.len().to_string()), b("0")];
    for (id, token) in jobs {
        args.extend([id.clone(), token.clone(), Vec::new()]);
    }
    Call {
        script: "complete_many",
        keys: vec![b(k.active())],
        args,
    }
}

/// The (id, token) of each job of a claim reply (nine elements a job, then two).
fn claimed(r: &Reply) -> Vec<(Vec<u8>, Vec<u8>)> {
    let Reply::Array(items) = r else {
        panic!("claim replied {r:?}")
    };
    items[..items.len() - 2]
        .chunks(9)
        .map(|j| match (&j[0], &j[2]) {
            (Reply::Bulk(id), Reply::Int(t)) => (id.clone(), t.to_string().into_bytes()),
            other => panic!("a claimed job: {other:?}"),
        })
        .collect()
}

fn payloads(from: usize, n: usize) -> Vec<String> {
    (from..from + n).map(|i| format!("{{\"n\":{i}}}")).collect()
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

struct Figures {
    enqueue: f64,
    process_25: f64,
    process_1: f64,
    latency_p50: f64,
    latency_p99: f64,
    handoff_p50: Option<f64>,
    /// On the engine's thread, no hop: µs of a transaction running `return 1`, and of one
    /// enqueue, claim and complete_many of one job.
    direct_us: Option<[f64; 4]>,
}

async fn engine_round(dir: &std::path::Path, jobs: usize, lat: usize, keep: bool) -> Figures {
    let q = QueueName::new("bench").unwrap();
    let k = QueueKeys::new(&q);
    let e = EngineThread::start(dir.join("engine.db"));
    if !keep {
        let off = Retention::off();
        e.run(vec![Call {
            script: "set_retention",
            keys: vec![b(k.retention())],
            args: vec![
                b(off.keep.to_string()),
                b(off.max_age.as_millis().to_string()),
                b(off.max_output.to_string()),
            ],
        }])
        .await;
    }
    let (e, k) = (&e, &k);
    let fill = |n: usize| async move {
        let t = Instant::now();
        for start in (0..n).step_by(1000) {
            e.run(vec![enqueue_call(k, &payloads(start, 1000.min(n - start)))])
                .await;
        }
        t.elapsed()
    };
    let took = fill(jobs).await;
    let enqueue = jobs as f64 / took.as_secs_f64();
    let mut process = Vec::new();
    for batch in [25, 1] {
        if batch == 1 {
            fill(jobs / 10).await;
        }
        let n = if batch == 1 { jobs / 10 } else { jobs };
        let t = Instant::now();
        let mut done = 0;
        let mut hand: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
        loop {
            let mut calls = Vec::new();
            if !hand.is_empty() {
                calls.push(complete_call(k, &hand));
            }
            calls.push(claim_call(k, batch));
            let replies = e.run(calls).await;
            done += hand.len();
            hand = claimed(replies.last().unwrap());
            if hand.is_empty() {
                break;
            }
        }
        assert_eq!(done, n);
        process.push(n as f64 / t.elapsed().as_secs_f64());
    }
    let mut lats = Vec::new();
    let mut handoffs = Vec::new();
    for i in 0..lat {
        let t = Instant::now();
        if i % 2 == 0 {
            e.run(vec![enqueue_call(k, &payloads(i, 1))]).await;
            let r = e.run(vec![claim_call(k, 1)]).await;
            lats.push(t.elapsed().as_secs_f64() * 1000.0);
            e.run(vec![complete_call(k, &claimed(&r[0]))]).await;
        } else {
            let r = e.run(vec![enqueue_call(k, &payloads(i, 1)), claim_call(k, 1)]).await;
            handoffs.push(t.elapsed().as_secs_f64() * 1000.0);
            e.run(vec![complete_call(k, &claimed(&r[1]))]).await;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    lats.sort_by(f64::total_cmp);
    handoffs.sort_by(f64::total_cmp);
    let direct = e.direct(k, lat.min(500)).await;
    Figures {
        enqueue,
        process_25: process[0],
        process_1: process[1],
        latency_p50: percentile(&lats, 0.5),
        latency_p99: percentile(&lats, 0.99),
        handoff_p50: Some(percentile(&handoffs, 0.5)),
        direct_us: Some(direct),
    }
}

async fn port_round(dir: &std::path::Path, jobs: usize, lat: usize, keep: bool) -> Figures {
    let q = QueueName::new("bench").unwrap();
    let store = EmbeddedStore::open(dir.join("ports.db").to_str().unwrap())
        .await
        .unwrap();
    if !keep {
        store.set_retention(&q, &Retention::off()).await.unwrap();
    }
    let new = |from, n| payloads(from, n).into_iter().map(NewJob::new).collect::<Vec<_>>();
    let fill = |n: usize| {
        let (store, q) = (store.clone(), q.clone());
        async move {
            let t = Instant::now();
            for start in (0..n).step_by(1000) {
                store.enqueue(&q, &new(start, 1000.min(n - start))).await.unwrap();
            }
            t.elapsed()
        }
    };
    let took = fill(jobs).await;
    let enqueue = jobs as f64 / took.as_secs_f64();
    let request = |n| ClaimRequest {
        n,
        lease: Duration::from_millis(LEASE_MS),
        max_attempts: 3,
        settle: SettleOptions::default(),
    };
    let mut process = Vec::new();
    for batch in [25u32, 1] {
        if batch == 1 {
            fill(jobs / 10).await;
        }
        let n = if batch == 1 { jobs / 10 } else { jobs };
        let t = Instant::now();
        let mut done = 0;
        let mut hand: Vec<Completion> = Vec::new();
        loop {
            let got = store
                .complete_then_claim(&q, &hand, SettleOptions::default(), request(batch))
                .await
                .unwrap();
            done += hand.len();
            hand = got
                .claimed
                .unwrap()
                .jobs
                .iter()
                .map(|j| Completion {
                    id: j.id.clone(),
                    token: j.token,
                    output: None,
                })
                .collect();
            if hand.is_empty() {
                break;
            }
        }
        assert_eq!(done, n);
        process.push(n as f64 / t.elapsed().as_secs_f64());
    }
    let mut lats = Vec::new();
    for i in 0..lat {
        let t = Instant::now();
        store.enqueue(&q, &new(i, 1)).await.unwrap();
        let got = store
            .claim(&q, 1, Duration::from_millis(LEASE_MS), 3, SettleOptions::default())
            .await
            .unwrap();
        lats.push(t.elapsed().as_secs_f64() * 1000.0);
        let j = &got.jobs[0];
        let id: &JobId = &j.id;
        store
            .complete(&q, id, j.token, None, SettleOptions::default())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    lats.sort_by(f64::total_cmp);
    Figures {
        enqueue,
        process_25: process[0],
        process_1: process[1],
        latency_p50: percentile(&lats, 0.5),
        latency_p99: percentile(&lats, 0.99),
        handoff_p50: None,
        direct_us: None,
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args = support::args::Args::read();
    let jobs: usize = args.flag("--jobs", if args.smoke { 2000 } else { 100_000 });
    let rounds: usize = args.flag("--rounds", if args.smoke { 1 } else { 3 });
    let lat: usize = args.flag("--latency", if args.smoke { 50 } else { 2000 });
    let keep = args.text("--retention") == Some("default");
    let mut sides: [(&str, Vec<Figures>); 2] = [("native", Vec::new()), ("engine", Vec::new())];
    for _ in 0..rounds {
        for (side, figures) in sides.iter_mut() {
            let dir = tempfile::tempdir().unwrap();
            let f = if *side == "engine" {
                engine_round(dir.path(), jobs, lat, keep).await
            } else {
                port_round(dir.path(), jobs, lat, keep).await
            };
            figures.push(f);
        }
    }
    for (side, figures) in &sides {
        let m = |f: fn(&Figures) -> f64| (median(figures.iter().map(f).collect()) * 1000.0).round() / 1000.0;
        let handoff = figures.iter().filter_map(|f| f.handoff_p50).collect::<Vec<_>>();
        println!(
            "{}",
            json!({
                "test": "embedded_engine", "side": side, "jobs": jobs, "rounds": rounds,
                "results_kept": keep,
                "enqueue_jobs_per_s": m(|f| f.enqueue).round(),
                "process_25_jobs_per_s": m(|f| f.process_25).round(),
                "process_1_jobs_per_s": m(|f| f.process_1).round(),
                "latency_p50_ms": m(|f| f.latency_p50),
                "latency_p99_ms": m(|f| f.latency_p99),
                "handoff_p50_ms": (!handoff.is_empty()).then(|| (median(handoff) * 1000.0).round() / 1000.0),
                "direct_us": figures.iter().filter_map(|f| f.direct_us).map(|d| d.map(|x| x.round())).next_back(),
            })
        );
    }
}
