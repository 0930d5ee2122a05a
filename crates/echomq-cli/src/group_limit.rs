//! `emq group-limit`: how many jobs of one group (or of every group without its own limit) may run
//! at once.

use echomq::store::LimitTarget;
use echomq::{GroupName, QueueName};

/// Set one group's limit (`QUEUE GROUP N`) or the queue's default for groups without their own
/// (`QUEUE --default N`; a group without either runs 1 at a time). N must be at least 1: 0 is
/// refused by the store (exit 1). A lowered limit never stops running jobs.
#[derive(clap::Args, Debug)]
#[command(
    group(clap::ArgGroup::new("target").required(true).args(["group", "default"])),
    override_usage = "emq group-limit QUEUE GROUP N\n       emq group-limit QUEUE --default N"
)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The group.
    #[arg(requires = "limit")]
    pub group: Option<String>,
    /// The group's limit.
    #[arg(value_name = "N")]
    pub limit: Option<u32>,
    /// Set the queue's default limit instead of one group's.
    #[arg(long, value_name = "N", conflicts_with_all = ["group", "limit"])]
    pub default: Option<u32>,
}

/// Runs `emq group-limit`.
#[allow(clippy::print_stderr)] // what was done, on stderr by contract
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let (target, limit) = match (args.group, args.limit, args.default) {
        (Some(g), Some(n), None) => (LimitTarget::Group(GroupName::new(g)?), n),
        (None, None, Some(n)) => (LimitTarget::Default, n),
        // clap refuses the other shapes before we get here
        _ => anyhow::bail!("give either GROUP N or --default N"),
    };
    let store = crate::open(url).await?;
    store.set_group_limit(&queue, &target, limit).await?;
    match target {
        LimitTarget::Group(g) => eprintln!("group {g} of queue {queue}: at most {limit} running at once"),
        LimitTarget::Default => {
            eprintln!("queue {queue}: groups without their own limit run at most {limit} at once")
        }
    }
    Ok(0)
}
