//! `emq cancel`: cancel a waiting job now, or ask the consumer running it to stop.

use echomq::store::{CancelOutcome, SettleOptions};
use echomq::{JobId, QueueName};

/// Cancel one job. Prints `cancelled` (it was waiting: cancelled now) or `requested` (it is
/// running: its consumer is asked to stop it; a request also reaches a later claim).
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The job.
    pub id: String,
    /// Why, recorded with the cancellation.
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
}

/// Runs `emq cancel`.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let id = JobId::parse(&args.id)?;
    let store = crate::open(url).await?;
    // a waiting job's row is deleted on cancel, as a consumer's settle does by default
    let settle = SettleOptions::default();
    match store.cancel(&queue, &id, args.reason.as_deref(), settle).await? {
        CancelOutcome::Cancelled => print("cancelled"),
        CancelOutcome::Requested => print("requested"),
        CancelOutcome::Finished => {
            let state = crate::job::state_now(store.as_ref(), &queue, &id).await;
            anyhow::bail!("job {id} in queue {queue} already finished (it is {state}): nothing to cancel")
        }
        CancelOutcome::Gone => return Err(crate::job::not_found(&queue, &id)),
        other => return Err(crate::unknown_reply(&other)),
    }
    Ok(0)
}

fn print(outcome: &str) {
    out!("{outcome}");
}
