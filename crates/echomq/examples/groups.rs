//! Groups on the embedded store: each group's jobs wait in a lane of their own, at most the group's
//! limit of them run at once, and the groups take turns (a big backlog in one group never starves
//! the others).
//!
//! ```text
//! cargo run -p echomq --example groups
//! ```
//!
//! Exits 0 when no group ever ran more jobs at once than its limit, the small groups were served
//! side by side with the big one, and every job completed; non-zero otherwise.
#![allow(clippy::print_stdout)] // an example tells what it does on stdout

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::store::embedded::EmbeddedStore;
use echomq::store::LimitTarget;
use echomq::{Consumer, ConsumerOptions, GroupName, JobContext, NewJob, QueueName, Store, Verdict};

/// Per group: jobs running now, the most ever at once, and when each of its jobs finished.
#[derive(Default)]
struct Seen {
    running: HashMap<String, usize>,
    most: HashMap<String, usize>,
    finished: HashMap<String, Vec<Duration>>,
    total_running: usize,
    total_most: usize,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("queue.db");
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path.to_string_lossy()).await?);
    let queue = QueueName::new("renders")?;

    // One tenant with a large backlog, allowed 3 at once; two small tenants at the default (1).
    let (big, small_a, small_b) = (
        GroupName::new("tenant-big")?,
        GroupName::new("tenant-a")?,
        GroupName::new("tenant-b")?,
    );
    store
        .set_group_limit(&queue, &LimitTarget::Group(big.clone()), 3)
        .await?;
    let jobs = |n: usize| (0..n).map(|i| NewJob::new(format!("{i}"))).collect::<Vec<_>>();
    store.genqueue(&queue, &big, &jobs(150)).await?;
    store.genqueue(&queue, &small_a, &jobs(10)).await?;
    store.genqueue(&queue, &small_b, &jobs(10)).await?;
    let limits: HashMap<String, usize> = [(big.as_str(), 3), (small_a.as_str(), 1), (small_b.as_str(), 1)]
        .into_iter()
        .map(|(g, l)| (g.to_string(), l))
        .collect();
    println!("enqueued 150 jobs for {big} (limit 3), 10 each for {small_a} and {small_b} (default limit 1)");

    let seen = Arc::new(Mutex::new(Seen::default()));
    let start = Instant::now();
    let handler = {
        let seen = seen.clone();
        move |job: JobContext| {
            let seen = seen.clone();
            async move {
                let group = job.group().as_ref().map(|g| g.to_string()).unwrap_or_default();
                if let Ok(mut s) = seen.lock() {
                    let now = {
                        let r = s.running.entry(group.clone()).or_default();
                        *r += 1;
                        *r
                    };
                    let most = s.most.entry(group.clone()).or_default();
                    *most = (*most).max(now);
                    s.total_running += 1;
                    s.total_most = s.total_most.max(s.total_running);
                }
                tokio::time::sleep(Duration::from_millis(3)).await;
                if let Ok(mut s) = seen.lock() {
                    *s.running.entry(group.clone()).or_default() -= 1;
                    s.total_running -= 1;
                    s.finished.entry(group).or_default().push(start.elapsed());
                }
                Verdict::Done
            }
        }
    };
    // 8 slots: more than the limits add up to, so only the limits hold jobs back.
    let consumer = Consumer::start(
        store.clone(),
        queue.clone(),
        handler,
        ConsumerOptions::default().with_concurrency(8),
    )?;
    let deadline = Instant::now() + Duration::from_secs(30);
    while store.counts(&queue).await?.completed < 170 {
        assert!(Instant::now() < deadline, "timed out");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let took = start.elapsed();
    consumer.stop(Duration::from_secs(5)).await?;

    let s = seen.lock().map_err(|_| "poisoned")?;
    println!(
        "all 170 jobs completed in {took:?}; at most {} ran at once",
        s.total_most
    );
    for (group, limit) in &limits {
        let most = s.most.get(group).copied().unwrap_or(0);
        let last = s
            .finished
            .get(group)
            .and_then(|f| f.iter().max())
            .copied()
            .unwrap_or_default();
        println!("  {group:<10} limit {limit}: at most {most} at once, its last job finished at {last:?}");
        assert!(
            most <= *limit,
            "{group} ran {most} jobs at once, over its limit {limit}"
        );
    }
    assert_eq!(s.most.get(big.as_str()), Some(&3), "the big group used its whole limit");
    assert!(s.total_most > 3, "groups ran side by side");
    // Fairness: the small groups took turns with the big backlog instead of waiting behind it, so
    // they were done long before it (10 turns each vs 150 jobs at 3 at once).
    let last = |g: &GroupName| {
        s.finished
            .get(g.as_str())
            .and_then(|f| f.iter().max())
            .copied()
            .unwrap_or_default()
    };
    for small in [&small_a, &small_b] {
        assert!(
            last(small) < last(&big) * 3 / 4,
            "{small} finished at {:?}, not well before {big} at {:?}",
            last(small),
            last(&big)
        );
    }
    println!("ok");
    Ok(())
}
