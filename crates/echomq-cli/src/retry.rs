//! `emq retry`: re-drive dead jobs — back to ready with their attempts kept and a raised budget.

use echomq::store::{Redriven, REDRIVE_EXTRA_DEFAULT};
use echomq::{JobId, QueueName};

/// Re-drive one dead job, or every dead job of the queue, back to ready.
#[derive(clap::Args, Debug)]
#[command(
    group(clap::ArgGroup::new("which").required(true).args(["id", "all_dead"])),
    override_usage = "emq retry QUEUE ID [--extra N]\n       emq retry QUEUE --all-dead [--extra N]"
)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The dead job.
    pub id: Option<String>,
    /// Every dead job of the queue.
    #[arg(long)]
    pub all_dead: bool,
    /// Extra attempts granted: the job's max_attempts becomes its attempts so far + N (0 is refused).
    #[arg(long, value_name = "N", default_value_t = REDRIVE_EXTRA_DEFAULT)]
    pub extra: u32,
}

/// Runs `emq retry`.
#[allow(clippy::print_stderr)] // what was done, on stderr by contract
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let id = args.id.map(JobId::parse).transpose()?;
    let store = crate::open(url).await?;
    let Some(id) = id else {
        let n = store.redrive_all(&queue, args.extra).await?;
        eprintln!(
            "re-drove {} of queue {queue} back to ready ({} more attempts each)",
            crate::count(n, "dead job"),
            args.extra
        );
        return Ok(0);
    };
    match store.redrive(&queue, &id, args.extra).await? {
        Redriven::Redriven => {
            eprintln!(
                "re-drove job {id} of queue {queue} back to ready ({} more attempts)",
                args.extra
            );
            Ok(0)
        }
        Redriven::NotDead => {
            let state = crate::job::state_now(store.as_ref(), &queue, &id).await;
            anyhow::bail!("job {id} in queue {queue} is not dead (it is {state}): nothing done")
        }
        Redriven::Gone => Err(crate::job::not_found(&queue, &id)),
        other => Err(crate::unknown_reply(&other)),
    }
}
