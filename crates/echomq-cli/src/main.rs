//! `emq`: the EchoMQ command-line tool — enqueue, inspect, run workers for any language, benchmark.
//!
//! Machine-readable output goes to stdout only; progress, rates and logs go to stderr. Exit status:
//! 0 success, 2 a usage error found while parsing, 1 every other error (one `error: …` line).

mod bench;
mod enqueue;
mod stats;
mod work;

use std::sync::Arc;
use std::time::Duration;

use clap::{Parser, Subcommand};
use echomq::Store;

/// The Redis URL used when neither `--url` nor `EMQ_URL` is given (until the embedded store
/// becomes the default).
pub const DEFAULT_URL: &str = "redis://127.0.0.1:6379";

#[derive(Parser, Debug)]
#[command(name = "emq", version, about = "EchoMQ: enqueue, inspect, run workers, benchmark")]
struct Cli {
    /// The store: redis://[user:pass@]host:port[/db] or rediss://…
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
}

/// Parses a humantime duration (`500ms`, `2s`, `1m`).
pub fn duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| e.to_string())
}

/// Opens the store named by the URL, failing within 5 s when it cannot be reached.
pub async fn open(url: &str) -> anyhow::Result<Arc<dyn Store>> {
    let store = tokio::time::timeout(Duration::from_secs(5), echomq::store::open(url))
        .await
        .map_err(|_| anyhow::anyhow!("store unreachable at {url}: no answer within 5 s"))??;
    Ok(Arc::from(store))
}

fn main() {
    let cli = Cli::parse();
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_env("EMQ_LOG").unwrap_or_else(|_| "warn".into()))
        .init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => fail(anyhow::anyhow!("cannot start the runtime: {e}")),
    };
    let result = runtime.block_on(async move {
        match cli.command {
            Command::Enqueue(a) => enqueue::run(&cli.url, a).await,
            Command::Stats(a) => stats::run(&cli.url, a).await,
            Command::Work(a) => work::run(&cli.url, a).await,
            Command::Bench(a) => bench::run(&cli.url, a).await,
        }
    });
    match result {
        Ok(code) => std::process::exit(code),
        Err(e) => fail(e),
    }
}

#[allow(clippy::print_stderr)] // the one place errors reach the user
fn fail(e: anyhow::Error) -> ! {
    eprintln!("error: {e:#}");
    std::process::exit(1)
}
