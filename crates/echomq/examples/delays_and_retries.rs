//! Delays and retries on the embedded store: a delayed job runs no earlier than its delay; a job
//! that fails is retried after the consumer's retry delay until it succeeds or its attempt budget
//! is spent (then it is dead, with its last error kept); a handler can ask for a retry later.
//!
//! ```text
//! cargo run -p echomq --example delays_and_retries
//! ```
//!
//! Exits 0 when each job ended as described; non-zero otherwise.
#![allow(clippy::print_stdout)] // an example tells what it does on stdout

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::store::embedded::EmbeddedStore;
use echomq::{Consumer, ConsumerOptions, JobContext, JobState, NewJob, QueueName, Store, Verdict};

/// Each attempt a handler saw: (payload, attempt number, when since the start).
type Attempts = Arc<Mutex<Vec<(String, u64, Duration)>>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("queue.db");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path.to_string_lossy()).await?);
    let queue = QueueName::new("payments")?;
    let start = Instant::now();

    let delay = Duration::from_millis(400);
    let delayed = store
        .enqueue(&queue, &[NewJob::new("delayed").with_delay(delay)])
        .await?;
    let flaky = store.enqueue(&queue, &[NewJob::new("flaky")]).await?;
    let doomed = store
        .enqueue(&queue, &[NewJob::new("doomed").with_max_attempts(2)])
        .await?;
    let later = store.enqueue(&queue, &[NewJob::new("later")]).await?;
    let ids: HashMap<&str, _> = [
        ("delayed", &delayed),
        ("flaky", &flaky),
        ("doomed", &doomed),
        ("later", &later),
    ]
    .into_iter()
    .map(|(name, replies)| (name, replies[0].id().clone()))
    .collect();
    println!("enqueued: delayed (runs after {delay:?}), flaky (fails twice), doomed (always fails, 2 attempts), later (asks for a retry in 200ms)");

    let attempts: Attempts = Arc::default();
    let handler = {
        let attempts = attempts.clone();
        move |job: JobContext| {
            let attempts = attempts.clone();
            async move {
                let what = String::from_utf8_lossy(job.payload()).into_owned();
                println!("  {:>6.0?}  {what} attempt {}", start.elapsed(), job.attempt());
                if let Ok(mut a) = attempts.lock() {
                    a.push((what.clone(), job.attempt(), start.elapsed()));
                }
                match (what.as_str(), job.attempt()) {
                    ("flaky", 1 | 2) => Verdict::Error("the payment provider timed out".into()),
                    ("doomed", _) => Verdict::Error("card declined".into()),
                    ("later", 1) => Verdict::RetryAfter(Duration::from_millis(200)),
                    _ => Verdict::Done,
                }
            }
        }
    };
    // Failed jobs wait 50ms before their next attempt; a job without its own budget gets 3 attempts.
    // The queue keeps its finished rows (its default retention), so their final state can be read
    // below.
    let opts = ConsumerOptions::default()
        .with_concurrency(4)
        .with_beat(Duration::from_millis(100))
        .with_retry(echomq::RetryPolicy::fixed(Duration::from_millis(50)))
        .with_max_attempts(3);
    let consumer = Consumer::start(store.clone(), queue.clone(), handler, opts)?;
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let c = store.counts(&queue).await?;
        if c.completed == 3 && c.dead == 1 {
            break;
        }
        assert!(Instant::now() < deadline, "timed out: {c:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    consumer.stop(Duration::from_secs(5)).await?;

    let attempts = attempts.lock().map_err(|_| "poisoned")?.clone();
    let of = |name: &str| attempts.iter().filter(|a| a.0 == name).cloned().collect::<Vec<_>>();
    let row = |name: &str| {
        let (store, queue, id) = (store.clone(), queue.clone(), ids[name].clone());
        async move { store.get(&queue, &id).await }
    };

    let d = of("delayed");
    assert_eq!(d.len(), 1, "the delayed job ran once");
    // the store's clock counts whole milliseconds: allow for one
    assert!(
        d[0].2 + Duration::from_millis(1) >= delay,
        "the delayed job ran at {:?}, before its delay",
        d[0].2
    );
    println!("delayed: ran once, at {:?} (delay {delay:?})", d[0].2);

    let f = of("flaky");
    assert_eq!(
        f.iter().map(|a| a.1).collect::<Vec<_>>(),
        [1, 2, 3],
        "flaky ran three times"
    );
    let flaky_row = row("flaky").await?.ok_or("the flaky row is retained")?;
    assert_eq!((flaky_row.state, flaky_row.attempts), (JobState::Completed, 3));
    println!("flaky: failed twice, completed on attempt 3");

    let g = of("doomed");
    assert_eq!(g.len(), 2, "doomed ran its budget of 2 attempts");
    let dead = row("doomed").await?.ok_or("the dead row is kept")?;
    assert_eq!(dead.state, JobState::Dead);
    assert_eq!(dead.last_error.as_deref(), Some("card declined"));
    println!(
        "doomed: dead after {} attempts, last error {:?}",
        dead.attempts,
        dead.last_error.unwrap_or_default()
    );

    let l = of("later");
    assert_eq!(l.len(), 2, "later ran twice");
    let gap = l[1].2 - l[0].2;
    assert!(
        gap + Duration::from_millis(1) >= Duration::from_millis(200),
        "the retry came {gap:?} later, before the 200ms asked"
    );
    println!("later: asked for a retry in 200ms, ran again {gap:?} later and completed");
    println!("ok");
    Ok(())
}
