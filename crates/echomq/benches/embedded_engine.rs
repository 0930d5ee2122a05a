//! The embedded engine's store (every verb its own Lua script over the keyspace on SQLite) beside
//! the embedded store's native verbs, on the consumer's hot path: enqueue, claim and complete_many,
//! both through the `Store` contract. Each side runs on a file of its own, in rounds that alternate
//! the two; one JSON line per side with the median of the rounds.
//!
//! * `enqueue`: N jobs, 1000 to a call;
//! * `process_B`: N waiting jobs settled and claimed B at a time — `complete_many` of the jobs in
//!   hand then `claim` of B in one transaction, as a consumer's fused round sends them (B 25: a
//!   consumer at concurrency 100 claims once a quarter of its slots are free; B 1: concurrency 1);
//!   with the queue's results kept (`--retention default`) or not (the default, as `emq bench
//!   process` runs);
//! * `latency`: an enqueue of one job, then its claim, each its own transaction, N times on an
//!   empty queue: p50 and p99 of enqueue → claimed.
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

use std::sync::Arc;
use std::time::{Duration, Instant};

mod support {
    pub mod args;
}

use echomq::store::embedded::engine::EngineStore;
use echomq::store::embedded::EmbeddedStore;
use echomq::store::{ClaimRequest, Completion, SettleOptions};
use echomq::{NewJob, QueueName, Retention, Store};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(30);

fn payloads(from: usize, n: usize) -> Vec<NewJob> {
    (from..from + n)
        .map(|i| NewJob::new(format!("{{\"n\":{i}}}")))
        .collect()
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
}

fn request(n: u32) -> ClaimRequest {
    ClaimRequest {
        n,
        lease: LEASE,
        max_attempts: 3,
        settle: SettleOptions::default(),
    }
}

/// `n` jobs onto the queue, 1,000 a call; how long it took.
async fn fill(store: &dyn Store, q: &QueueName, n: usize) -> Duration {
    let t = Instant::now();
    for start in (0..n).step_by(1000) {
        store.enqueue(q, &payloads(start, 1000.min(n - start))).await.unwrap();
    }
    t.elapsed()
}

/// Every waiting job settled and claimed `batch` at a time, as a consumer's fused round sends
/// them; jobs/s.
async fn process(store: &dyn Store, q: &QueueName, n: usize, batch: u32) -> f64 {
    let t = Instant::now();
    let mut done = 0;
    let mut hand: Vec<Completion> = Vec::new();
    loop {
        let got = store
            .complete_then_claim(q, &hand, SettleOptions::default(), request(batch))
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
    n as f64 / t.elapsed().as_secs_f64()
}

async fn round(store: Arc<dyn Store>, jobs: usize, lat: usize, keep: bool) -> Figures {
    let q = QueueName::new("bench").unwrap();
    let store = store.as_ref();
    if !keep {
        store.set_retention(&q, &Retention::off()).await.unwrap();
    }
    let enqueue = jobs as f64 / fill(store, &q, jobs).await.as_secs_f64();
    let process_25 = process(store, &q, jobs, 25).await;
    fill(store, &q, jobs / 10).await;
    let process_1 = process(store, &q, jobs / 10, 1).await;
    let mut lats = Vec::new();
    for i in 0..lat {
        let t = Instant::now();
        store.enqueue(&q, &payloads(i, 1)).await.unwrap();
        let got = store.claim(&q, 1, LEASE, 3, SettleOptions::default()).await.unwrap();
        lats.push(t.elapsed().as_secs_f64() * 1000.0);
        let j = &got.jobs[0];
        store
            .complete(&q, &j.id, j.token, None, SettleOptions::default())
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    lats.sort_by(f64::total_cmp);
    Figures {
        enqueue,
        process_25,
        process_1,
        latency_p50: percentile(&lats, 0.5),
        latency_p99: percentile(&lats, 0.99),
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
            let path = dir.path().join("bench.db");
            let path = path.to_str().unwrap();
            let store: Arc<dyn Store> = if *side == "engine" {
                Arc::new(EngineStore::open(path).await.unwrap())
            } else {
                Arc::new(EmbeddedStore::open(path).await.unwrap())
            };
            figures.push(round(store, jobs, lat, keep).await);
        }
    }
    for (side, figures) in &sides {
        let m = |f: fn(&Figures) -> f64| (median(figures.iter().map(f).collect()) * 1000.0).round() / 1000.0;
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
            })
        );
    }
}
