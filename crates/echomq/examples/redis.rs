//! The same enqueue-and-consume on Redis/Valkey: point `EMQ_URL` at a server.
//!
//! ```text
//! EMQ_URL=redis://127.0.0.1:6379 cargo run -p echomq --example redis
//! ```
//!
//! Without `EMQ_URL` it says so and exits 0 (an example, not a test). With it, it works a queue of
//! its own (`example-redis-<pid>`), removes that queue at the end, and exits 0 when every job
//! completed.
#![allow(clippy::print_stdout)] // an example tells what it does on stdout

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::store::Obliterated;
use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, QueueName, Store, Verdict};

const JOBS: usize = 1_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(url) = std::env::var("EMQ_URL") else {
        println!("EMQ_URL is not set: nothing to do (try EMQ_URL=redis://127.0.0.1:6379)");
        return Ok(());
    };
    if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
        println!("EMQ_URL={url} is not a Redis URL: nothing to do (the other examples cover the embedded store)");
        return Ok(());
    }
    // `open` picks the store by the URL's scheme; the rest of the program does not care which.
    let store: Arc<dyn Store> = Arc::from(echomq::store::open(&url).await?);
    let queue = QueueName::new(format!("example-redis-{}", std::process::id()))?;
    println!("connected; working queue {queue}");

    let jobs: Vec<NewJob> = (0..JOBS).map(|i| NewJob::new(format!("job {i}"))).collect();
    store.enqueue(&queue, &jobs).await?;
    let ran = Arc::new(AtomicUsize::new(0));
    let handler = {
        let ran = ran.clone();
        move |_job: JobContext| {
            let ran = ran.clone();
            async move {
                ran.fetch_add(1, Ordering::Relaxed);
                Verdict::Done
            }
        }
    };
    let started = Instant::now();
    let consumer = Consumer::start(
        store.clone(),
        queue.clone(),
        handler,
        ConsumerOptions::default().with_concurrency(32),
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    let outcome = loop {
        let counts = store.counts(&queue).await?;
        if counts.completed as usize >= JOBS {
            break Ok(counts);
        }
        if Instant::now() >= deadline {
            break Err(format!("timed out: {counts:?}"));
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let took = started.elapsed();
    consumer.stop(Duration::from_secs(5)).await?;
    // leave nothing behind on the server, whatever the outcome
    let removed = store.obliterate(&queue, true).await?;
    let counts = outcome?;
    println!(
        "{JOBS} jobs completed in {took:?} ({:.0} jobs/s); queue removed ({})",
        JOBS as f64 / took.as_secs_f64(),
        match removed {
            Obliterated::Done { removed } => format!("{removed} rows"),
            Obliterated::Active { active } => format!("refused: {active} active"),
            other => format!("{other:?}"),
        }
    );
    assert_eq!(ran.load(Ordering::Relaxed), JOBS);
    assert_eq!((counts.pending, counts.active, counts.dead), (0, 0, 0));
    println!("ok");
    Ok(())
}
