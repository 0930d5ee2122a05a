//! Enqueue a batch of jobs and consume them, on the embedded store: no server, one SQLite file.
//!
//! ```text
//! cargo run -p echomq --example enqueue_and_consume
//! ```
//!
//! Exits 0 when every job ran exactly once and the queue ends empty; non-zero otherwise.
#![allow(clippy::print_stdout)] // an example tells what it does on stdout

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::store::embedded::EmbeddedStore;
use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, QueueName, Store, Verdict};

const JOBS: usize = 2_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A scratch directory removed at the end; a real program would open `echomq.db` (the default).
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("queue.db");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path.to_string_lossy()).await?);
    let queue = QueueName::new("emails")?;
    println!("embedded store at {}", path.display());

    // One call enqueues the whole batch (split into transactions of at most 1,000 jobs).
    let started = Instant::now();
    let jobs: Vec<NewJob> = (0..JOBS)
        .map(|i| NewJob::new(format!(r#"{{"to":"user{i}@example.com"}}"#)))
        .collect();
    let replies = store.enqueue(&queue, &jobs).await?;
    println!("enqueued {} jobs in {:?}", replies.len(), started.elapsed());

    // The handler: any async fn of a JobContext returning a Verdict.
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let handler = {
        let seen = seen.clone();
        move |job: JobContext| {
            let seen = seen.clone();
            async move {
                #[derive(serde::Deserialize)]
                struct Email {
                    to: String,
                }
                let email: Email = match job.json() {
                    Ok(e) => e,
                    Err(e) => return Verdict::Discard(format!("bad payload: {e}")),
                };
                let fresh = seen.lock().map(|mut s| s.insert(job.id().clone())).unwrap_or(false);
                if !fresh {
                    return Verdict::Error(format!("job {} ran twice", job.id()));
                }
                if email.to.is_empty() {
                    return Verdict::Discard("no recipient".into());
                }
                Verdict::Done
            }
        }
    };
    let started = Instant::now();
    let consumer = Consumer::start(
        store.clone(),
        queue.clone(),
        handler,
        ConsumerOptions::default().with_concurrency(16),
    )?;

    // Wait until every job is completed (the counters are kept by the store).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let counts = store.counts(&queue).await?;
        if counts.completed as usize >= JOBS {
            break;
        }
        assert!(Instant::now() < deadline, "timed out: {counts:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = started.elapsed();
    consumer.stop(Duration::from_secs(5)).await?;

    let counts = store.counts(&queue).await?;
    let ran = seen.lock().map(|s| s.len()).unwrap_or(0);
    println!(
        "consumed {JOBS} jobs in {took:?} ({:.0} jobs/s): completed {}, pending {}, active {}, dead {}",
        JOBS as f64 / took.as_secs_f64(),
        counts.completed,
        counts.pending,
        counts.active,
        counts.dead
    );
    assert_eq!(ran, JOBS, "every job ran exactly once");
    assert_eq!(counts.completed as usize, JOBS);
    assert_eq!((counts.pending, counts.active, counts.dead), (0, 0, 0));
    println!("ok");
    Ok(())
}
