//! What the consumer tests on both stores share: quick options, bounded waits, counts.
#![allow(dead_code)] // each test binary uses a part of it

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::{ConsumerOptions, JobContext, QueueName, Store, Verdict};

/// Options for tests: a 200 ms beat and a 10 ms retry delay.
pub fn fast() -> ConsumerOptions {
    ConsumerOptions::default()
        .with_beat(Duration::from_millis(200))
        .with_retry(echomq::RetryPolicy::fixed(Duration::from_millis(10)))
}

/// Polls `f` every 5 ms until it is true; fails naming `what` after `within`.
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

/// A handler that counts its runs in `runs` and completes each job at once.
pub fn counting(runs: &Arc<AtomicUsize>) -> impl Fn(JobContext) -> std::future::Ready<Verdict> + Send + Sync + 'static {
    let runs = runs.clone();
    move |_job: JobContext| {
        runs.fetch_add(1, Ordering::SeqCst);
        std::future::ready(Verdict::Done)
    }
}

/// The queue's completed counter.
pub async fn completed(store: &Arc<dyn Store>, q: &QueueName) -> u64 {
    store.counts(q).await.unwrap().completed
}
