//! A whole service on the embedded store: two kinds of job on one queue, each with its handler; a
//! job that fails once and is retried; one that panics (a failed attempt, never a crashed worker);
//! one cancelled while it runs; a delayed one; a group whose jobs run one at a time; shared state;
//! waiting for each result (no polling: `JobHandle::wait`); and a graceful stop on Ctrl-C (or once the demo's jobs are done).
//!
//! `cargo run -p echomq --example service` — it writes `service.db` in a temporary directory.
#![allow(clippy::print_stdout)] // an example tells what it does on stdout
#![allow(clippy::panic)] // one handler panics on purpose: a failed attempt, not a crashed worker

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use echomq::{ConsumerOptions, Job, JobContext, JobError, JobHandle, JobState, Outcome, Queue, Worker};
use serde::{Deserialize, Serialize};

/// Sends an email; the address `flaky@…` fails its first attempt, `panic@…` panics.
#[derive(Serialize, Deserialize)]
struct SendEmail {
    to: String,
}

impl Job for SendEmail {
    const KIND: &'static str = "send_email";
}

/// Makes a thumbnail; a long job that watches its cancel token.
#[derive(Serialize, Deserialize)]
struct Thumbnail {
    image: String,
    steps: u32,
}

impl Job for Thumbnail {
    const KIND: &'static str = "thumbnail";
}

/// What every handler shares: here, a counter of emails sent.
#[derive(Default)]
struct Mailer {
    sent: AtomicU32,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // the library logs through `tracing`: a failed attempt at warn, a death and a handler's panic
    // at error, each inside its job's span (queue, kind, id, attempt)
    tracing_subscriber::fmt().with_max_level(tracing::Level::WARN).init();
    let dir = tempfile::tempdir()?;
    let url = format!("sqlite:{}", dir.path().join("service.db").display());
    let store = echomq::open(&url).await?;
    let queue = Queue::new(store.clone(), "media")?;

    let worker = Worker::new(store.clone(), "media")?
        .on(|job: SendEmail, ctx: JobContext| async move {
            if job.to.starts_with("flaky@") && ctx.attempt() == 1 {
                // any error converts with `?`: this attempt fails, the next one runs after the
                // retry delay
                Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "smtp timed out"))?;
            }
            if job.to.starts_with("panic@") {
                panic!("the template for {} is missing", job.to);
            }
            let mailer = ctx.state::<Mailer>().ok_or_else(|| JobError::msg("no mailer"))?;
            mailer.sent.fetch_add(1, Ordering::Relaxed);
            Ok::<_, JobError>(format!("sent to {} on attempt {}", job.to, ctx.attempt()))
        })
        .on(|job: Thumbnail, ctx: JobContext| async move {
            for _ in 0..job.steps {
                // a cancel (`queue.cancel(id)`, `emq cancel`) stops the job here
                ctx.cancel_token().check()?;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Ok::<_, JobError>(format!("{}.thumb.png", job.image))
        })
        .state(Mailer::default())
        // retry after 50 ms (the queue keeps finished results by default, for `wait` and `get`)
        .options(ConsumerOptions::default().with_retry(echomq::RetryPolicy::fixed(Duration::from_millis(50))))
        .concurrency(4)
        .start()?;

    let plain = queue
        .push(SendEmail {
            to: "a@example.com".into(),
        })
        .await?;
    let flaky = queue
        .push(SendEmail {
            to: "flaky@example.com".into(),
        })
        .await?;
    let broken = queue
        .push(SendEmail {
            to: "panic@example.com".into(),
        })
        .max_attempts(1)
        .await?;
    let later = queue
        .push(SendEmail {
            to: "later@example.com".into(),
        })
        .delay(Duration::from_millis(300))
        .await?;
    let mut tenant = Vec::new();
    for n in 0..3 {
        let job = Thumbnail {
            image: format!("tenant-1/{n}"),
            steps: 2,
        };
        tenant.push(queue.push(job).group("tenant-1").await?);
    }
    let long = queue
        .push(Thumbnail {
            image: "huge".into(),
            steps: 10_000,
        })
        .await?;
    wait_for(&long, JobState::Active).await?;
    queue.cancel_with_reason(long.id(), "the user closed the page").await?;

    let all: Vec<&JobHandle> = [&plain, &flaky, &broken, &later, &long]
        .into_iter()
        .chain(&tenant)
        .collect();
    let finished = async {
        for job in &all {
            let said = match job.wait(Duration::from_secs(30)).await? {
                Outcome::Completed(out) => format!("completed: {}", out.json::<String>()?),
                Outcome::Dead { error, attempts } => format!("dead after {attempts} attempt(s): {error}"),
                Outcome::Cancelled { reason } => format!("cancelled: {}", reason.unwrap_or_default()),
                other => format!("{other:?}"),
            };
            println!("job {:>2} {said}", job.id());
        }
        Ok::<_, echomq::Error>(())
    };
    tokio::select! {
        r = finished => r?,
        _ = tokio::signal::ctrl_c() => println!("Ctrl-C: stopping"),
    }
    // no new jobs; those still running get 5 s, then go back to the queue with their attempt unused
    worker.stop(Duration::from_secs(5)).await?;
    Ok(())
}

/// Waits until the job is in `state` (polling its row: a demo's shortcut to cancel it while it
/// runs; `wait` is for its end).
async fn wait_for(job: &JobHandle, state: JobState) -> echomq::Result<()> {
    while job.get().await?.map(|r| r.state) != Some(state) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
