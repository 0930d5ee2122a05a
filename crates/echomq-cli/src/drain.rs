//! `emq drain`: the admin verb — drop every ready and scheduled job of a queue. (Not the consumer's
//! drain leg, which claims until empty.)

use echomq::QueueName;

/// Drop every ready and scheduled job of a queue; active jobs finish, dead ones stay.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
}

/// Runs `emq drain`.
#[allow(clippy::print_stderr)] // what was done, on stderr by contract
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let store = crate::open(url).await?;
    let dropped = store.drain(&queue).await?;
    eprintln!("drained {} from {queue}", crate::count(dropped, "job"));
    Ok(0)
}
