//! The embedded store's enqueue → start path beside what it is built from on this machine (the
//! latency from enqueue to a handler's start). Every part is paced as `emq bench latency` paces its
//! enqueues (200/s by default), so each runs as cold as it does there, and prints one JSON line:
//! p50, p90, p99 in ms.
//!
//! * `thread_wake`: a plain thread woken over a channel — the hop to the store's thread, which a
//!   small enqueue skips when the connection is free;
//! * `runtime_wake`: a tokio task woken from a plain thread — the hop back from it;
//! * `sqlite_txn`: a bare `BEGIN IMMEDIATE`, one-row insert, `COMMIT` on a WAL file of its own,
//!   `synchronous=NORMAL` — the least one durable enqueue costs;
//! * `enqueue_call`: `EmbeddedStore::enqueue` of one job, no consumer;
//! * `enqueue_to_start`: enqueue → handler start, a consumer parked (its claim handed over by the
//!   enqueue's transaction), one clock for both ends;
//! * `returned_to_start`: the part of it after the enqueue call returned (the handler starting on
//!   the consumer's side; 0 when it started first).
//!
//! The enqueues come from a task of the runtime, as an application's (and `emq bench latency`'s)
//! do.
//!
//!     cargo bench -p echomq --bench embedded_latency [-- --n 1000 --rate 200]
//!
//! Run by `cargo test --all-targets` (no `--bench`), it takes 50 samples of each, a smoke run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    missing_docs
)]

use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};

mod support {
    pub mod args;
}

use echomq::store::embedded::EmbeddedStore;
use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, QueueName, Store, Verdict};
use serde_json::json;

/// Prints a part's percentiles, in ms, from samples in µs.
fn report(part: &str, rate: u64, mut us: Vec<f64>) {
    us.sort_by(f64::total_cmp);
    // ms, to the µs
    let at = |p: f64| {
        us.get(((us.len() as f64 - 1.0) * p / 100.0).round() as usize)
            .map(|v| v.round() / 1000.0)
    };
    println!(
        "{}",
        json!({
            "test": "embedded_latency", "part": part, "n": us.len(), "rate": rate,
            "p50_ms": at(50.0), "p90_ms": at(90.0), "p99_ms": at(99.0),
        })
    );
}

/// The instants a paced part starts its samples at: `n` of them, `rate` per second from now.
fn pace(n: usize, rate: u64) -> impl Iterator<Item = Instant> {
    let period = Duration::from_micros(1_000_000 / rate.max(1));
    let start = Instant::now() + period;
    (0..n).map(move |i| start + period * i as u32)
}

fn thread_wake(n: usize, rate: u64) -> Vec<f64> {
    let (tx, rx) = mpsc::channel::<Instant>();
    let woken = std::thread::spawn(move || rx.iter().map(|sent| sent.elapsed().as_secs_f64() * 1e6).collect());
    for due in pace(n, rate) {
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        tx.send(Instant::now()).unwrap();
    }
    drop(tx);
    woken.join().unwrap()
}

async fn runtime_wake(n: usize, rate: u64) -> Vec<f64> {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Instant>();
    let sender = std::thread::spawn(move || {
        for due in pace(n, rate) {
            std::thread::sleep(due.saturating_duration_since(Instant::now()));
            tx.send(Instant::now()).unwrap();
        }
    });
    let mut us = Vec::with_capacity(n);
    while let Some(sent) = rx.recv().await {
        us.push(sent.elapsed().as_secs_f64() * 1e6);
    }
    sender.join().unwrap();
    us
}

fn sqlite_txn(path: &std::path::Path, n: usize, rate: u64) -> Vec<f64> {
    let mut conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;
         CREATE TABLE jobs (queue TEXT NOT NULL, id TEXT NOT NULL, data BLOB, state TEXT,
                            PRIMARY KEY (id, queue)) WITHOUT ROWID;",
    )
    .unwrap();
    let mut us = Vec::with_capacity(n);
    for (i, due) in pace(n, rate).enumerate() {
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        let t = Instant::now();
        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .unwrap();
        tx.prepare_cached("INSERT INTO jobs (queue, id, data, state) VALUES ('bench', ?1, ?2, 'pending')")
            .unwrap()
            .execute(rusqlite::params![(i + 1).to_string(), format!("{{\"n\":{i}}}")])
            .unwrap();
        tx.commit().unwrap();
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us
}

async fn enqueue_call(store: &EmbeddedStore, q: &QueueName, n: usize, rate: u64) -> Vec<f64> {
    let mut us = Vec::with_capacity(n);
    for (i, due) in pace(n, rate).enumerate() {
        tokio::time::sleep_until(due.into()).await;
        let t = Instant::now();
        store
            .enqueue(q, &[NewJob::new(format!("{{\"n\":{i}}}"))])
            .await
            .unwrap();
        us.push(t.elapsed().as_secs_f64() * 1e6);
    }
    us
}

/// Enqueue → handler start, and the part of it after the enqueue call returned (its transaction
/// committed and the jobs handed over): the hop to the handler.
async fn enqueue_to_start(store: EmbeddedStore, q: &QueueName, n: usize, rate: u64) -> (Vec<f64>, Vec<f64>) {
    let clock = Instant::now();
    // (sent, instant): when each enqueue call returned, and when each handler started
    let returned = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let starts = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let started = Arc::new(Mutex::new(Vec::with_capacity(n)));
    let handler = {
        let (started, starts) = (started.clone(), starts.clone());
        move |job: JobContext| {
            let now = clock.elapsed().as_secs_f64() * 1e6;
            let sent: f64 = std::str::from_utf8(job.payload()).unwrap().parse().unwrap();
            started.lock().unwrap().push(now - sent);
            starts.lock().unwrap().push((sent, now));
            async { Verdict::Done }
        }
    };
    let store: Arc<dyn Store> = Arc::new(store);
    let consumer = Consumer::start(store.clone(), q.clone(), handler, ConsumerOptions::default()).unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    for due in pace(n, rate) {
        tokio::time::sleep_until(due.into()).await;
        let sent = clock.elapsed().as_secs_f64() * 1e6;
        store.enqueue(q, &[NewJob::new(sent.to_string())]).await.unwrap();
        returned
            .lock()
            .unwrap()
            .push((sent, clock.elapsed().as_secs_f64() * 1e6));
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while started.lock().unwrap().len() < n && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    consumer.stop(Duration::from_secs(10)).await.unwrap();
    let us = started.lock().unwrap().clone();
    let returned: std::collections::HashMap<u64, f64> = returned
        .lock()
        .unwrap()
        .iter()
        .map(|(sent, r)| (sent.to_bits(), *r))
        .collect();
    let hops = starts
        .lock()
        .unwrap()
        .iter()
        .filter_map(|(sent, start)| returned.get(&sent.to_bits()).map(|r| start - r))
        .collect();
    (us, hops)
}

#[tokio::main]
async fn main() {
    let args = support::args::Args::read();
    let (n, rate) = (
        args.flag("--n", if args.smoke { 50 } else { 1000 }),
        args.flag("--rate", 200),
    );
    let dir = tempfile::tempdir().unwrap();
    let q = QueueName::new("bench").unwrap();

    report("thread_wake", rate, thread_wake(n, rate));
    report("runtime_wake", rate, runtime_wake(n, rate).await);
    let bare = dir.path().join("bare.db");
    report(
        "sqlite_txn",
        rate,
        tokio::task::spawn_blocking(move || sqlite_txn(&bare, n, rate))
            .await
            .unwrap(),
    );
    let path = dir.path().join("calls.db");
    let store = EmbeddedStore::open(path.to_str().unwrap()).await.unwrap();
    let calls = {
        let (store, q) = (store.clone(), q.clone());
        tokio::spawn(async move { enqueue_call(&store, &q, n, rate).await })
    };
    report("enqueue_call", rate, calls.await.unwrap());
    drop(store);
    let path = dir.path().join("start.db");
    let store = EmbeddedStore::open(path.to_str().unwrap()).await.unwrap();
    let starts = tokio::spawn(async move { enqueue_to_start(store, &q, n, rate).await });
    let (starts, hops) = starts.await.unwrap();
    report("enqueue_to_start", rate, starts);
    // a handler that started before the call returned counts as 0
    report(
        "returned_to_start",
        rate,
        hops.into_iter().map(|h| h.max(0.0)).collect(),
    );
}
