//! `emq`: the EchoMQ command-line tool — enqueue, inspect, run workers for any language, benchmark.
//!
//! Machine-readable output goes to stdout only; progress, rates and logs go to stderr. Exit status:
//! 0 success, 2 a usage error found while parsing, 1 every other error (one `error: …` line).

/// `println!` for the tool's output: a reader that went away (`emq list q | head -1`) ends the
/// program quietly, as a closed pipe ends any Unix tool, instead of a panic.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout().lock(), $($arg)*) {
            $crate::output_failed(e)
        }
    }};
}

#[cfg(feature = "audit")]
mod audit;
mod bench;
mod cancel;
mod dashboard;
mod demo;
mod drain;
mod enqueue;
mod group_limit;
mod job;
mod list;
mod obliterate;
mod pause;
mod priority_aging;
mod prometheus;
mod promote;
mod rate_limit;
mod remove;
mod resume;
mod retention;
mod retry;
mod schedule;
mod stats;
mod supervise;
mod work;

use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use echomq::Store;

/// The store used when neither `--url` nor `EMQ_URL` is given: the embedded store on
/// `./echomq.db` in the current directory (no server needed).
pub const DEFAULT_URL: &str = "sqlite:echomq.db";

#[derive(Parser, Debug)]
#[command(name = "emq", version, about = "EchoMQ: enqueue, inspect, run workers, benchmark")]
struct Cli {
    /// The store: redis://[user:pass@]host:port[/db], rediss://…, a Redis Cluster's seed nodes
    /// redis+cluster://[user:pass@]host:port[,host:port…] (rediss+cluster:// with TLS; a plain
    /// redis:// URL to any node of a cluster works too), sqlite:PATH, sqlite://PATH or a plain path
    /// (the embedded store); default ./echomq.db
    #[arg(long, env = "EMQ_URL", global = true, default_value = DEFAULT_URL)]
    url: String,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Enqueue one job (prints its id) or one per line of a file.
    Enqueue(enqueue::Args),
    /// Sizes and counters per queue.
    Stats(stats::Args),
    /// Run a worker: each job runs `sh -c CMD` with the payload on stdin.
    Work(work::Args),
    /// Benchmarks with the peers' workloads and JSON fields.
    Bench(bench::Args),
    /// The tour: 20,000 jobs through flat and grouped lanes, delays, retries and dead jobs, on the
    /// embedded store by default (no server needed), with a summary at the end.
    Demo(demo::Args),
    /// Show one job's row.
    Job(job::Args),
    /// List the jobs of a queue in one state.
    List(list::Args),
    /// Pause a queue: consumers claim nothing until it is resumed.
    Pause(pause::Args),
    /// Resume a paused queue.
    Resume(resume::Args),
    /// Drop every ready and scheduled job of a queue.
    Drain(drain::Args),
    /// Delete a queue and every job in it (asks first).
    Obliterate(obliterate::Args),
    /// Re-drive a dead job (or every dead job) back to ready.
    Retry(retry::Args),
    /// Delete one job.
    Remove(remove::Args),
    /// Make a scheduled job ready now.
    Promote(promote::Args),
    /// Cancel a waiting job, or ask the consumer running it to stop.
    Cancel(cancel::Args),
    /// Set a group's concurrency limit, or the queue's default.
    GroupLimit(group_limit::Args),
    /// Show or set what a queue keeps of its finished jobs.
    Retention(retention::Args),
    /// Show or set how long a queue's lower priorities wait behind higher ones (0 = strict).
    PriorityAging(priority_aging::Args),
    /// Show or set a queue's rate limits: at most MAX starts per PER, for the queue, a group or
    /// every group without its own.
    ///
    /// `QUEUE` shows them; `QUEUE MAX/PER` sets the queue's (every start of the queue), `--group G
    /// MAX/PER` one group's, `--group-default MAX/PER` the default of groups without their own
    /// (each group its own budget). At most MAX starts in any window of PER, one per PER/MAX.
    /// `--burst N` lets N starts through at once (default 1), and so up to MAX + N - 1 in a window;
    /// `--exact` holds every window to MAX whatever the burst (MAX at most 10000); `--off` removes
    /// the limit. Every claim enforces them on the store's clock, and every claim counts (a retry,
    /// a release, a redelivery). A group held
    /// back leaves the ring until it may start again; other groups and flat jobs are not slowed.
    /// Setting a limit starts it afresh (its budget full).
    RateLimit(rate_limit::Args),
    /// Cron and interval schedules: `add` (again = change in place), `list`, `remove`, `pause`,
    /// `resume`, `trigger`. The consumers of the queue fire them, each slot once.
    Schedule(schedule::Args),
    /// Serve the web dashboard: every queue's counts (live), a queue's jobs by state, one job's
    /// fields, the schedules, and the operator's actions. Binds 127.0.0.1:7070 by default; a
    /// bind other machines can reach needs --auth-token or --auth-user/--auth-password.
    Dashboard(dashboard::Args),
    /// The crash audit: N jobs through K workers while it kills workers (and redis-server) and
    /// pauses one past its lease, then accounts for every job (lost and double settles must be 0).
    #[cfg(feature = "audit")]
    Audit(audit::Args),
    /// Between `emq work` and each command it runs (not for use by hand).
    #[command(hide = true)]
    Supervise(supervise::Args),
}

/// Parses a humantime duration (`500ms`, `2s`, `1m`).
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Parses a retry policy (`fixed:1s`, `exp:200ms,x2,max=10m,jitter=full`).
pub fn retry_policy(s: &str) -> Result<echomq::RetryPolicy, String> {
    s.parse().map_err(|e: echomq::Error| e.to_string())
}

/// A reply of a kind this build does not know (the store's reply types are `#[non_exhaustive]`: a
/// newer library may add one): an error naming it, never a guess.
pub fn unknown_reply(reply: &impl std::fmt::Debug) -> anyhow::Error {
    anyhow::anyhow!("the store answered {reply:?}, which this build of emq does not know")
}

/// `n` with its noun: "1 job", "3 jobs" (`what` is the singular; "dead job" gives "dead jobs").
pub fn count(n: impl Into<u64>, what: &str) -> String {
    match n.into() {
        1 => format!("1 {what}"),
        n => format!("{n} {what}s"),
    }
}

/// Opens the store named by the URL, failing within 5 s when it cannot be reached.
pub async fn open(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    let store = tokio::time::timeout(Duration::from_secs(5), echomq::store::open(url))
        .await
        .map_err(|_| {
            let addr = echomq::store::redact_url(url);
            anyhow::anyhow!("store unreachable at {addr}: no answer within 5 s")
        })??;
    Ok(Arc::from(store))
}

fn main() {
    let cli = Cli::parse();
    // a supervisor's stderr is its command's: the job's error, which no log line may enter
    let filter = || tracing_subscriber::EnvFilter::try_from_env("EMQ_LOG").unwrap_or_else(|_| "warn".into());
    match &cli.command {
        Command::Supervise(_) => {}
        // the demo's terminal is its progress bar and summary: its log goes to --log FILE, or to
        // stderr with -v, else nowhere
        Command::Demo(a) if a.log.is_some() => {
            let path = a.log.clone().unwrap_or_default();
            match std::fs::File::create(&path) {
                Ok(file) => tracing_subscriber::fmt()
                    .with_writer(std::sync::Mutex::new(file))
                    .with_ansi(false)
                    .with_env_filter(filter())
                    .init(),
                Err(e) => fail(anyhow::anyhow!("cannot write the log {}: {e}", path.display())),
            }
        }
        Command::Demo(a) if !a.verbose => {}
        _ => tracing_subscriber::fmt()
            .with_writer(std::io::stderr)
            // colours for a terminal only: a log file or a pipe gets plain text
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .with_env_filter(filter())
            .init(),
    }
    // a supervisor runs once per job of `emq work`, beside its command: one thread starts sooner
    // than a pool of them
    let mut builder = match cli.command {
        Command::Supervise(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    let runtime = match builder.enable_all().build() {
        Ok(r) => r,
        Err(e) => fail(anyhow::anyhow!("cannot start the runtime: {e}")),
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Enqueue(a) => enqueue::run(&cli.url, a).await,
            Command::Stats(a) => stats::run(&cli.url, a).await,
            Command::Work(a) => work::run(&cli.url, a).await,
            Command::Bench(a) => bench::run(&cli.url, a).await,
            Command::Demo(a) => demo::run(&cli.url, a).await,
            Command::Job(a) => job::run(&cli.url, a).await,
            Command::List(a) => list::run(&cli.url, a).await,
            Command::Pause(a) => pause::run(&cli.url, a).await,
            Command::Resume(a) => resume::run(&cli.url, a).await,
            Command::Drain(a) => drain::run(&cli.url, a).await,
            Command::Obliterate(a) => obliterate::run(&cli.url, a).await,
            Command::Retry(a) => retry::run(&cli.url, a).await,
            Command::Remove(a) => remove::run(&cli.url, a).await,
            Command::Promote(a) => promote::run(&cli.url, a).await,
            Command::Cancel(a) => cancel::run(&cli.url, a).await,
            Command::GroupLimit(a) => group_limit::run(&cli.url, a).await,
            Command::Retention(a) => retention::run(&cli.url, a).await,
            Command::PriorityAging(a) => priority_aging::run(&cli.url, a).await,
            Command::RateLimit(a) => rate_limit::run(&cli.url, a).await,
            Command::Schedule(a) => schedule::run(&cli.url, a).await,
            Command::Dashboard(a) => dashboard::run(&cli.url, a).await,
            #[cfg(feature = "audit")]
            Command::Audit(a) => audit::run(&cli.url, a).await,
            Command::Supervise(a) => supervise::run(a).await,
        }
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => fail(e),
    }
}

/// Ends the program after stdout failed: quietly when its reader closed the pipe.
fn output_failed(e: std::io::Error) -> ! {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0)
    }
    fail(anyhow::anyhow!("cannot write the output: {e}"))
}

#[allow(clippy::print_stderr)] // the one place errors reach the user
fn fail(e: anyhow::Error) -> ! {
    eprintln!("error: {e:#}");
    std::process::exit(1)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_count_of_one_is_singular_and_any_other_plural() {
        assert_eq!(super::count(0u64, "job"), "0 jobs");
        assert_eq!(super::count(1u64, "dead job"), "1 dead job");
        assert_eq!(super::count(2u64, "job"), "2 jobs");
    }
}
