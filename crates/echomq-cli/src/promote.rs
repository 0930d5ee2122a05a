//! `emq promote`: a scheduled job (delayed, or waiting for a retry) ready now.

use echomq::store::PromotedJob;
use echomq::{JobId, QueueName};

/// Make one scheduled job ready now.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The scheduled job.
    pub id: String,
}

/// Runs `emq promote`.
#[allow(clippy::print_stderr)] // what was done, on stderr by contract
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let id = JobId::parse(&args.id)?;
    let store = crate::open(url).await?;
    match store.promote_job(&queue, &id).await? {
        PromotedJob::Promoted => {
            eprintln!("promoted job {id} of queue {queue}: ready now");
            Ok(0)
        }
        PromotedJob::NotScheduled => {
            let state = crate::job::state_now(store.as_ref(), &queue, &id).await;
            anyhow::bail!("job {id} in queue {queue} is not scheduled (it is {state}): nothing done")
        }
        PromotedJob::Gone => Err(crate::job::not_found(&queue, &id)),
        other => Err(crate::unknown_reply(&other)),
    }
}
