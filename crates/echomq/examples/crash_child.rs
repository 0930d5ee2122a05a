//! The child of the crash-safety test (`crates/echomq-cli/tests/embedded.rs`): enqueues and settles
//! on the embedded store at `DB` as fast as it can, printing a line on stdout for each write only
//! after the store acknowledged it, until it is killed:
//!
//! ```text
//! E <id>   the job was enqueued
//! C <id>   the job was claimed (its settle follows)
//! S <id>   the job was completed (its row deleted: no retention)
//! D <id>   the job was discarded (dead)
//! ```
//!
//! The test `kill -9`s it mid-flight, reopens the file and checks that every acknowledged write is
//! there. Not a tutorial; run it by hand with `cargo run -p echomq --example crash_child -- /tmp/c.db`.
#![allow(clippy::print_stdout, clippy::print_stderr)] // its stdout is the protocol with the test

use std::io::Write;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use echomq::store::embedded::EmbeddedStore;
use echomq::store::{Completion, Discarded, SettleOptions, Settled};
use echomq::{JobId, NewJob, QueueName, Store};

/// The queue the child writes.
const QUEUE: &str = "crash";

/// Jobs enqueued and not yet settled by this process: the producer waits while there are many, so
/// enqueues and settles interleave.
static OUTSTANDING: AtomicI64 = AtomicI64::new(0);

/// Prints lines in one write, after the store acknowledged what they report.
fn report(lines: &[(char, &JobId)]) {
    let mut out = String::new();
    for (tag, id) in lines {
        out.push(*tag);
        out.push(' ');
        out.push_str(id.as_str());
        out.push('\n');
    }
    let mut stdout = std::io::stdout().lock();
    // a closed pipe means the test is gone: stop
    if stdout.write_all(out.as_bytes()).and_then(|()| stdout.flush()).is_err() {
        std::process::exit(0);
    }
}

async fn produce(store: Arc<EmbeddedStore>, queue: QueueName) -> echomq::Result<()> {
    for round in 0u64.. {
        // mostly small batches, now and then a large one (a longer transaction to be killed in)
        let n = if round % 17 == 0 {
            400
        } else {
            1 + (round % 23) as usize
        };
        let jobs: Vec<NewJob> = (0..n).map(|i| NewJob::new(format!("{round}-{i}"))).collect();
        while OUTSTANDING.load(Ordering::Relaxed) > 1000 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let replies = store.enqueue(&queue, &jobs).await?;
        OUTSTANDING.fetch_add(replies.len() as i64, Ordering::Relaxed);
        let lines: Vec<_> = replies.iter().map(|r| ('E', r.id())).collect();
        report(&lines);
    }
    Ok(())
}

async fn settle(store: Arc<EmbeddedStore>, queue: QueueName) -> echomq::Result<()> {
    let none = SettleOptions::default();
    for round in 0u64.. {
        let claimed = store
            .claim(
                &queue,
                echomq::store::ClaimRequest::new(1 + (round % 40) as u32, Duration::from_secs(3600))
                    .max_attempts(3)
                    .settle(none),
            )
            .await?;
        OUTSTANDING.fetch_sub(claimed.len() as i64, Ordering::Relaxed);
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let lines: Vec<_> = claimed.iter().map(|j| ('C', &j.id)).collect();
        report(&lines);
        match round % 3 {
            // one by one
            0 => {
                for job in &claimed {
                    if store
                        .complete(
                            &queue,
                            &echomq::store::Completion::new(job.id.clone(), job.attempts),
                            none,
                        )
                        .await?
                        == Settled::Ok
                    {
                        report(&[('S', &job.id)]);
                    }
                }
            }
            // as a batch
            1 => {
                let batch: Vec<Completion> = claimed
                    .iter()
                    .map(|j| Completion::new(j.id.clone(), j.attempts).output(Some(b"out".to_vec())))
                    .collect();
                let replies = store.complete_many(&queue, &batch, none).await?;
                let lines: Vec<_> = claimed
                    .iter()
                    .zip(replies)
                    .filter(|(_, r)| *r == Settled::Ok)
                    .map(|(j, _)| ('S', &j.id))
                    .collect();
                report(&lines);
            }
            // dead-lettered
            _ => {
                for job in &claimed {
                    if store
                        .discard(
                            &queue,
                            &job.id,
                            job.attempts,
                            &echomq::store::DiscardRequest::new("discarded").settle(none),
                        )
                        .await?
                        == Discarded::Dead
                    {
                        report(&[('D', &job.id)]);
                    }
                }
            }
        }
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: crash_child DB");
        std::process::exit(2);
    };
    let store = Arc::new(EmbeddedStore::open(&path).await?);
    let queue = QueueName::new(QUEUE)?;
    let producer = tokio::spawn(produce(store.clone(), queue.clone()));
    let settler = tokio::spawn(settle(store, queue));
    let (p, s) = tokio::join!(producer, settler);
    p??;
    s??;
    Ok(())
}
