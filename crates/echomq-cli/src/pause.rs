//! `emq pause`: claims give nothing until `emq resume`; running jobs finish as usual.

use echomq::QueueName;

/// Pause a queue: consumers claim nothing from it until it is resumed.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
}

/// Runs `emq pause`.
#[allow(clippy::print_stderr)] // what was done, on stderr by contract
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let store = crate::open(url).await?;
    store.pause(&queue).await?;
    eprintln!("paused queue {queue}: consumers claim nothing from it until `emq resume {queue}`");
    Ok(0)
}
