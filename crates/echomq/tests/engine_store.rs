//! The engine store (every verb its own script, run by the embedded engine on a file) under a real
//! consumer: every job run once and settled, a parked consumer woken by the enqueue (well within
//! its beat), a cancel request reaching the running handler, and a second handle on the file
//! seeing the first one's work.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::store::embedded::engine::EngineStore;
use echomq::store::Store;
use echomq::{Consumer, ConsumerOptions, JobContext, JobState, NewJob, QueueName, Verdict};

async fn store(dir: &tempfile::TempDir) -> Arc<dyn Store> {
    let path = dir.path().join("engine.db");
    Arc::new(EngineStore::open(path.to_str().unwrap()).await.unwrap())
}

async fn wait_until(what: &str, mut f: impl AsyncFnMut() -> bool) {
    let end = Instant::now() + Duration::from_secs(20);
    while !f().await {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_runs_every_job_once_and_settles_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let q = QueueName::new("engine_once").unwrap();
    let jobs: Vec<NewJob> = (0..500).map(|i| NewJob::new(format!("job {i}"))).collect();
    for chunk in jobs.chunks(100) {
        store.enqueue(&q, chunk).await.unwrap();
    }
    let runs: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let seen = runs.clone();
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            *seen.lock().unwrap().entry(job.id().as_str().to_string()).or_default() += 1;
            async { Verdict::Done }
        },
        ConsumerOptions::default().with_concurrency(8),
    )
    .unwrap();
    wait_until("every job completed", async || {
        store.counts(&q).await.unwrap().completed == 500
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await.unwrap();
    {
        let runs = runs.lock().unwrap();
        assert_eq!(runs.len(), 500);
        assert!(runs.values().all(|&n| n == 1), "a job ran twice");
    }
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_wakes_a_parked_consumer_within_its_beat() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let q = QueueName::new("engine_wake").unwrap();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            let _ = tx.send(Instant::now());
            async { Verdict::Done }
        },
        ConsumerOptions::default().with_beat(Duration::from_secs(30)),
    )
    .unwrap();
    // the consumer's first beat has found the queue empty and parked
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..5 {
        let sent = Instant::now();
        store.enqueue(&q, &[NewJob::new("now")]).await.unwrap();
        let started = tokio::time::timeout(Duration::from_secs(5), rx.recv())
            .await
            .expect("a parked consumer is woken by the enqueue, not by its 30 s beat")
            .unwrap();
        assert!(started.duration_since(sent) < Duration::from_secs(2));
    }
    consumer.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_request_reaches_the_running_handler() {
    let dir = tempfile::tempdir().unwrap();
    let store = store(&dir).await;
    let q = QueueName::new("engine_cancel").unwrap();
    let id = store.enqueue(&q, &[NewJob::new("long")]).await.unwrap()[0].id().clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let token = job.cancel_token().clone();
            let tx = tx.clone();
            async move {
                let _ = tx.send(());
                token.cancelled().await;
                Verdict::Cancel("asked".into())
            }
        },
        ConsumerOptions::default().with_cancel(true),
    )
    .unwrap();
    rx.recv().await.unwrap();
    store
        .cancel(&q, &id, Some("stop it"), Default::default())
        .await
        .unwrap();
    wait_until("the job cancelled", async || {
        store
            .get(&q, &id)
            .await
            .unwrap()
            .is_some_and(|r| r.state == JobState::Cancelled)
            || store.counts(&q).await.unwrap().cancelled == 1
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_handle_on_the_file_sees_the_first_ones_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let first = store(&dir).await;
    let q = QueueName::new("engine_two").unwrap();
    first.enqueue(&q, &[NewJob::new("a"), NewJob::new("b")]).await.unwrap();
    let second = store(&dir).await;
    assert_eq!(second.counts(&q).await.unwrap().pending, 2);
    let claimed = second
        .claim(&q, 2, Duration::from_secs(30), 3, Default::default())
        .await
        .unwrap();
    assert_eq!(claimed.jobs.len(), 2);
    assert_eq!(first.counts(&q).await.unwrap().active, 2);
}
