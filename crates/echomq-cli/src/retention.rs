//! `emq retention`: what a queue keeps of its finished jobs — a setting in the store that every
//! worker and producer of the queue sees.

use std::time::Duration;

use echomq::{QueueName, Retention};

/// Show the queue's retention (`QUEUE`), or change it: the options given change, the others stay.
/// A queue that never set one keeps 10,000 completed and 10,000 cancelled rows for 24 hours,
/// outputs up to 64 KiB.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The newest rows kept of each finished state (completed, cancelled); 0 keeps none.
    #[arg(long, value_name = "N")]
    pub keep: Option<u32>,
    /// How long a finished row is kept (`90s`, `24h`; at least 1 ms).
    #[arg(long, value_name = "DURATION", value_parser = crate::duration)]
    pub max_age: Option<Duration>,
    /// The longest output kept, in bytes (a longer one is dropped, its size kept).
    #[arg(long, value_name = "BYTES")]
    pub max_output: Option<u32>,
    /// Keep no finished row (as `--keep 0`).
    #[arg(long, conflicts_with = "keep")]
    pub off: bool,
}

/// Runs `emq retention`.
#[allow(clippy::print_stdout, clippy::print_stderr)] // the setting on stdout; a change on stderr
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let store = crate::open(url).await?;
    let mut r = store.retention(&queue).await?;
    let change = args.off || args.keep.is_some() || args.max_age.is_some() || args.max_output.is_some();
    if change {
        r = Retention::default()
            .keep(if args.off { 0 } else { args.keep.unwrap_or(r.keep) })
            .max_age(args.max_age.unwrap_or(r.max_age))
            .max_output(args.max_output.unwrap_or(r.max_output));
        store.set_retention(&queue, &r).await?;
        eprintln!("queue {queue}: retention set");
    }
    println!(
        "keep={} max_age={} max_output={}",
        r.keep,
        humantime::format_duration(r.max_age).to_string().replace(' ', ""),
        r.max_output
    );
    Ok(0)
}
