//! `emq resume`: a paused queue gives jobs again, and parked consumers are woken.

use echomq::QueueName;

/// Resume a paused queue.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
}

/// Runs `emq resume`.
#[allow(clippy::print_stderr)] // what was done, on stderr by contract
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let store = crate::open(url).await?;
    store.resume(&queue).await?;
    eprintln!("resumed queue {queue}");
    Ok(0)
}
