//! `emq list`: the ids (or rows) of the jobs of one queue in one state.

use echomq::{JobState, QueueName};
use futures::{StreamExt, TryStreamExt};

/// The most ids one `list` call asks for; a larger `--limit` pages with the cursor.
const PAGE: u64 = 1000;

/// How many rows `--json` reads at once.
const GETS_IN_FLIGHT: usize = 32;

/// The states a job can be listed in.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
pub enum State {
    /// Ready to claim: the flat set in claim order, then each group's lane by group name.
    Pending,
    /// Waiting for their due time, soonest first.
    Scheduled,
    /// Leased, by lease deadline (soonest first).
    Active,
    /// Dead, newest first.
    Dead,
    /// Retained completed rows only, newest first.
    Completed,
    /// Retained cancelled rows only, newest first.
    Cancelled,
}

impl From<State> for JobState {
    fn from(s: State) -> Self {
        match s {
            State::Pending => JobState::Pending,
            State::Scheduled => JobState::Scheduled,
            State::Active => JobState::Active,
            State::Dead => JobState::Dead,
            State::Completed => JobState::Completed,
            State::Cancelled => JobState::Cancelled,
        }
    }
}

/// List the jobs of a queue in one state: ids one per line, or rows as NDJSON.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// Which jobs: pending (the flat set in claim order, then each group's lane), scheduled by due
    /// time, active by lease deadline, dead newest first; completed and cancelled list retained
    /// rows only, newest first.
    #[arg(long, value_enum)]
    pub state: State,
    /// At most this many (at least 1; larger than 1000 reads in pages).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: u64,
    /// One JSON object per job per line (NDJSON), with the fields of `emq job --json`.
    #[arg(long)]
    pub json: bool,
}

/// Runs `emq list`.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let state = JobState::from(args.state);
    if args.limit == 0 {
        anyhow::bail!("invalid option limit = 0: must be at least 1");
    }
    let store = crate::open(url).await?;
    let mut cursor: Option<String> = None;
    let mut remaining = args.limit;
    loop {
        let want = remaining.min(PAGE);
        let page = store.list(&queue, state, cursor.as_deref(), want as u32).await?;
        let ids = page.ids;
        let got = ids.len() as u64;
        if args.json {
            // a row gone between the two reads is skipped; a job that moved shows its state now
            let rows: Vec<_> = futures::stream::iter(ids.iter().map(|id| store.get(&queue, id)))
                .buffered(GETS_IN_FLIGHT)
                .try_collect()
                .await?;
            let lines: Vec<String> = rows
                .into_iter()
                .flatten()
                .map(|job| crate::job::json_line(&queue, &job))
                .collect();
            print(&lines);
        } else {
            print(&ids.iter().map(ToString::to_string).collect::<Vec<_>>());
        }
        remaining -= got.min(remaining);
        cursor = page.next;
        if cursor.is_none() || remaining == 0 {
            return Ok(0);
        }
    }
}

fn print(lines: &[String]) {
    for line in lines {
        out!("{line}");
    }
}
