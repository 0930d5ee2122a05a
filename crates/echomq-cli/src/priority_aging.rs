//! `emq priority-aging`: how long a queue's lower priorities wait behind higher ones — a setting in
//! the store that every producer and worker of the queue sees.

use std::time::Duration;

use echomq::QueueName;

/// Show the queue's priority aging (`QUEUE`), or set it (`QUEUE D`): a job of priority P runs
/// before every priority-0 job that arrives more than P × D after it, so no priority starves. `0`
/// is strict: no job runs while a more urgent one waits. Jobs already waiting keep their place;
/// the new aging ranks the jobs made ready from then on. A queue that never set one ages by 60s.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The aging (`30s`, `5m`; `0` = strict; at most 365 days).
    #[arg(value_name = "D", value_parser = aging)]
    pub aging: Option<Duration>,
}

/// A duration, or `0` for strict.
fn aging(s: &str) -> Result<Duration, String> {
    if s == "0" {
        return Ok(Duration::ZERO);
    }
    crate::duration(s)
}

/// The aging as `emq stats` and this command print it: `strict`, or a duration.
pub fn shown(aging: Duration) -> String {
    if aging.is_zero() {
        return "strict".into();
    }
    humantime::format_duration(aging).to_string().replace(' ', "")
}

/// Runs `emq priority-aging`.
#[allow(clippy::print_stdout, clippy::print_stderr)] // the setting on stdout; a change on stderr
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let store = crate::open(url).await?;
    if let Some(aging) = args.aging {
        store.set_priority_aging(&queue, aging).await?;
        eprintln!("queue {queue}: priority aging set");
    }
    let aging = store.priority_aging(&queue).await?;
    println!("priority_aging={}", shown(aging));
    Ok(0)
}
