//! A graceful stop on the embedded store: `stop` claims nothing more, waits for the handlers in
//! flight to finish and settle, and returns; the jobs not yet claimed stay pending for the next
//! consumer.
//!
//! ```text
//! cargo run -p echomq --example graceful_stop
//! ```
//!
//! Exits 0 when every job running at the stop finished and completed, nothing was left active, and
//! the rest stayed pending; non-zero otherwise.
#![allow(clippy::print_stdout)] // an example tells what it does on stdout

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::store::embedded::EmbeddedStore;
use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, QueueName, Store, Verdict};

const WORK: Duration = Duration::from_millis(500);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("queue.db");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path.to_string_lossy()).await?);
    let queue = QueueName::new("thumbnails")?;
    let jobs: Vec<NewJob> = (0..20).map(|i| NewJob::new(format!("image-{i}"))).collect();
    store.enqueue(&queue, &jobs).await?;

    let (started, finished) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (started, finished) = (started.clone(), finished.clone());
        move |_job: JobContext| {
            let (started, finished) = (started.clone(), finished.clone());
            async move {
                started.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(WORK).await; // slow work that must not be cut off
                finished.fetch_add(1, Ordering::SeqCst);
                Verdict::Done
            }
        }
    };
    let consumer = Consumer::start(
        store.clone(),
        queue.clone(),
        handler,
        ConsumerOptions::default().with_concurrency(4),
    )?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while started.load(Ordering::SeqCst) < 4 {
        assert!(Instant::now() < deadline, "the handlers never started");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    println!("4 jobs running, 16 waiting; stopping");

    let asked = Instant::now();
    consumer.stop(Duration::from_secs(10)).await?;
    let took = asked.elapsed();
    let counts = store.counts(&queue).await?;
    println!(
        "stop returned after {took:?}: {} handlers started, {} finished; completed {}, active {}, pending {}",
        started.load(Ordering::SeqCst),
        finished.load(Ordering::SeqCst),
        counts.completed,
        counts.active,
        counts.pending
    );
    assert_eq!(started.load(Ordering::SeqCst), 4, "no job was claimed after the stop");
    assert_eq!(
        finished.load(Ordering::SeqCst),
        4,
        "stop waited for the running handlers"
    );
    assert!(took >= WORK / 2, "stop returned before the handlers could finish");
    assert_eq!((counts.completed, counts.active, counts.pending), (4, 0, 16));
    assert!(consumer.is_finished());

    // The next consumer takes over the rest.
    let next = Consumer::start(
        store.clone(),
        queue.clone(),
        |_job: JobContext| async { Verdict::Done },
        ConsumerOptions::default().with_concurrency(4),
    )?;
    let deadline = Instant::now() + Duration::from_secs(5);
    while store.counts(&queue).await?.completed < 20 {
        assert!(Instant::now() < deadline, "the next consumer did not finish the rest");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    next.stop(Duration::from_secs(5)).await?;
    println!("a fresh consumer completed the other 16: ok");
    Ok(())
}
