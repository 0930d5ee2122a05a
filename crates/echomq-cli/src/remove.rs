//! `emq remove`: delete one job wherever it is.

use echomq::store::Removed;
use echomq::{JobId, QueueName};

/// Delete one job in any state; a running one only with --force.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The job.
    pub id: String,
    /// Also when the job is running: its holder's settle will find the row gone.
    #[arg(long)]
    pub force: bool,
}

/// Runs `emq remove`.
#[allow(clippy::print_stderr)] // what was done, on stderr by contract
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let id = JobId::parse(&args.id)?;
    let store = crate::open(url).await?;
    match store.remove(&queue, &id, args.force).await? {
        Removed::Removed => {
            eprintln!("removed job {id} from queue {queue}");
            Ok(0)
        }
        Removed::Active => {
            anyhow::bail!("job {id} in queue {queue} is active: nothing done; pass --force to remove it anyway")
        }
        Removed::Gone => Err(crate::job::not_found(&queue, &id)),
        other => Err(crate::unknown_reply(&other)),
    }
}
