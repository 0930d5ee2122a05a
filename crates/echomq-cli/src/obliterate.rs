//! `emq obliterate`: delete every key of a queue — its jobs in every state, counters, limits and
//! the pause flag — after a confirmation.

use std::io::{BufRead, IsTerminal, Write};

use anyhow::Context;
use echomq::store::Obliterated;
use echomq::QueueName;

/// Delete a queue and every job in it. On a terminal it shows the queue's sizes and asks you to
/// type the queue name; it refuses (exit 1) when stdin is not a terminal and --yes is absent.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// Also when jobs are running: their holders' settles will find the rows gone.
    #[arg(long)]
    pub force: bool,
    /// Do not ask: required when stdin is not a terminal (scripts, CI).
    #[arg(long)]
    pub yes: bool,
}

/// Runs `emq obliterate`.
#[allow(clippy::print_stderr)] // what was done, on stderr by contract
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let ask = !args.yes;
    // refused before the store is opened: a script without --yes fails the same with no server
    if ask && !std::io::stdin().is_terminal() {
        anyhow::bail!("refusing to obliterate queue {queue} without confirmation: stdin is not a terminal; pass --yes");
    }
    let store = crate::open(url).await?;
    if ask {
        let c = store.counts(&queue).await?;
        if c.active > 0 && !args.force {
            return Err(active(&queue, c.active));
        }
        let question = format!(
            "obliterate queue {queue}: its jobs ({} pending, {} scheduled, {} active, {} dead), counters, limits \
             and pause flag are deleted. Type the queue name to confirm: ",
            c.pending, c.scheduled, c.active, c.dead
        );
        let answer = tokio::task::spawn_blocking(move || prompt(&question))
            .await
            .context("the confirmation prompt failed")??;
        if answer != queue.as_str() {
            anyhow::bail!("obliterate of queue {queue} not confirmed: nothing done");
        }
    }
    match store.obliterate(&queue, args.force).await? {
        Obliterated::Done { removed } => {
            eprintln!("obliterated queue {queue}: {} deleted", crate::count(removed, "job"));
            Ok(0)
        }
        Obliterated::Active { active: n } => Err(active(&queue, n)),
        other => Err(crate::unknown_reply(&other)),
    }
}

fn active(queue: &QueueName, n: u64) -> anyhow::Error {
    anyhow::anyhow!("queue {queue} has {n} active jobs: nothing done; pass --force to obliterate it anyway")
}

/// Asks on stderr and reads one line from stdin, trimmed.
#[allow(clippy::print_stderr)] // the question is for the operator, not for a pipe
fn prompt(question: &str) -> anyhow::Result<String> {
    eprint!("{question}");
    std::io::stderr().flush()?;
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().to_string())
}
