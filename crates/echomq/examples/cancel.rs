//! Cancelling jobs on the embedded store. A waiting job is cancelled at once; a running one gets a
//! request that reaches its handler's cancel token (consumer started `.with_cancel(true)`), and the
//! handler decides where it is safe to stop. The request here comes from a second store handle on
//! the same file, as it would from another process (`emq cancel`).
//!
//! ```text
//! cargo run -p echomq --example cancel
//! ```
//!
//! Exits 0 when the waiting job was cancelled, the running handler stopped on the request well
//! before its work was done, and both jobs ended cancelled; non-zero otherwise.
#![allow(clippy::print_stdout)] // an example tells what it does on stdout

use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::store::embedded::EmbeddedStore;
use echomq::store::{CancelOutcome, SettleOptions};
use echomq::{Consumer, ConsumerOptions, JobContext, JobState, NewJob, QueueName, Store, Verdict};
use tokio::sync::mpsc;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("queue.db").to_string_lossy().into_owned();
    let store: Arc<dyn Store> = Arc::new(EmbeddedStore::open(&path).await?);
    // another handle on the same file: the operator's side
    let operator = EmbeddedStore::open(&path).await?;
    let queue = QueueName::new("exports")?;
    // the queue keeps its finished rows by default, so the cancelled ones can be read back
    let keep = SettleOptions::default();

    // 1. A job still waiting (delayed an hour) is cancelled at once: it never runs.
    let waiting = store
        .enqueue(&queue, &[NewJob::new("tomorrow").with_delay(Duration::from_secs(3600))])
        .await?;
    let waiting = waiting[0].id().clone();
    let reply = operator.cancel(&queue, &waiting, Some("not needed"), keep).await?;
    println!("cancel of waiting job {waiting}: {reply:?}");
    assert_eq!(reply, CancelOutcome::Cancelled);

    // 2. A long export, running: its handler works in steps and looks at its token between them.
    let running = store.enqueue(&queue, &[NewJob::new("big export")]).await?;
    let running = running[0].id().clone();
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let (stopped_tx, mut stopped) = mpsc::unbounded_channel::<(Instant, String)>();
    let handler = move |job: JobContext| {
        let (started_tx, stopped_tx) = (started_tx.clone(), stopped_tx.clone());
        async move {
            let _ = started_tx.send(());
            // 600 steps of 50ms: half a minute of work, unless cancelled
            for step in 0..600 {
                tokio::select! {
                    c = job.cancel_token().cancelled() => {
                        let reason = c.reason.unwrap_or_else(|| "cancelled".into());
                        println!("  handler: cancelled at step {step} ({reason}); cleaning up");
                        let _ = stopped_tx.send((Instant::now(), reason.clone()));
                        return Verdict::Cancel(reason);
                    }
                    _ = tokio::time::sleep(Duration::from_millis(50)) => {}
                }
            }
            Verdict::Done
        }
    };
    let opts = ConsumerOptions::default()
        .with_beat(Duration::from_millis(500))
        .with_cancel(true);
    let consumer = Consumer::start(store.clone(), queue.clone(), handler, opts)?;
    tokio::time::timeout(Duration::from_secs(5), started.recv())
        .await?
        .ok_or("the handler never started")?;
    println!("job {running} is running");

    let asked = Instant::now();
    let reply = operator
        .cancel(&queue, &running, Some("user pressed stop"), keep)
        .await?;
    println!("cancel of running job {running}: {reply:?}");
    assert_eq!(reply, CancelOutcome::Requested);
    let (at, reason) = tokio::time::timeout(Duration::from_secs(5), stopped.recv())
        .await?
        .ok_or("the handler never stopped")?;
    let took = at.duration_since(asked);
    println!("the request reached the handler in {took:?}");
    assert_eq!(reason, "user pressed stop");
    assert!(
        took < Duration::from_secs(1),
        "the request took {took:?}, more than a beat or two"
    );
    consumer.stop(Duration::from_secs(5)).await?;

    for id in [&waiting, &running] {
        let row = store.get(&queue, id).await?.ok_or("the row is retained")?;
        println!("job {id}: {:?}", row.state);
        assert_eq!(row.state, JobState::Cancelled);
    }
    let counts = store.counts(&queue).await?;
    assert_eq!(
        (counts.cancelled, counts.completed, counts.active),
        (2, 0, 0),
        "{counts:?}"
    );

    // 3. A finished job cannot be cancelled.
    assert_eq!(
        operator.cancel(&queue, &running, None, keep).await?,
        CancelOutcome::Finished
    );
    println!("ok");
    Ok(())
}
