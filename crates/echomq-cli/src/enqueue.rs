//! `emq enqueue`: one job from the command line (or stdin), or one job per line of a file.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use echomq::store::{Enqueued, BATCH_MAX};
use echomq::{GroupName, JobId, NewJob, QueueName, Store};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};

/// Enqueue one job and print its id, or enqueue one job per line of a file.
#[derive(clap::Args, Debug)]
#[command(
    group(clap::ArgGroup::new("input").required(true).args(["payload", "file"])),
    override_usage = "emq enqueue [OPTIONS] <QUEUE> <PAYLOAD | --file FILE>"
)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The payload; `-` reads one payload from stdin (all of it, byte for byte).
    pub payload: Option<OsString>,
    /// Enqueue one job per line of FILE (`-` = stdin): empty lines are skipped, a trailing `\r` is
    /// stripped; the other options apply to each job. Shows a progress bar while it runs when
    /// stderr is a terminal, then prints how many and how fast on stderr.
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// Put the job in this group's lane (groups run side by side, each under its limit).
    #[arg(long, value_name = "G")]
    pub group: Option<String>,
    /// Run no earlier than this long from now (`500ms`, `2s`, `1m`).
    #[arg(long, value_name = "D", value_parser = crate::duration)]
    pub delay: Option<Duration>,
    /// This job's attempt budget (default: the consumer's).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// The job's kind, for a worker that routes by kind (the payload is then its JSON).
    #[arg(long, value_name = "K")]
    pub kind: Option<String>,
    /// A caller-given id (must hold a non-digit): enqueueing it again while its job exists prints
    /// the existing id and `duplicate` on stderr, and writes nothing.
    #[arg(long, value_name = "ID", conflicts_with = "file")]
    pub id: Option<String>,
}

/// Where the jobs go: the queue, and the group's lane when there is one.
struct Target {
    store: Arc<dyn Store>,
    queue: QueueName,
    group: Option<GroupName>,
}

impl Target {
    async fn enqueue(&self, jobs: &[NewJob]) -> anyhow::Result<Vec<Enqueued>> {
        let replies = match &self.group {
            Some(g) => self.store.genqueue(&self.queue, g, jobs).await,
            None => self.store.enqueue(&self.queue, jobs).await,
        };
        Ok(replies?)
    }
}

/// Runs `emq enqueue`.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    // names are checked before the store is opened: a bad name fails the same with no server
    let queue = QueueName::new(&args.queue)?;
    let group = args.group.as_deref().map(GroupName::new).transpose()?;
    let id = args.id.as_deref().map(JobId::new).transpose()?;
    let template = NewJob {
        payload: Vec::new(),
        id,
        delay: args.delay,
        max_attempts: args.max_attempts,
        kind: args.kind.clone(),
    };
    match (args.payload, args.file) {
        (Some(payload), None) => {
            let payload = if payload == "-" {
                let mut buf = Vec::new();
                tokio::io::stdin()
                    .read_to_end(&mut buf)
                    .await
                    .context("cannot read the payload from stdin")?;
                buf
            } else {
                payload.into_vec()
            };
            let target = Target {
                store: crate::open(url).await?,
                queue,
                group,
            };
            one(&target, NewJob { payload, ..template }).await
        }
        (None, Some(file)) => {
            let target = Target {
                store: crate::open(url).await?,
                queue,
                group,
            };
            if file.as_os_str() == "-" {
                lines(&target, &template, tokio::io::stdin(), "stdin", None).await
            } else {
                let name = file.display().to_string();
                let f = tokio::fs::File::open(&file)
                    .await
                    .with_context(|| format!("cannot open {name}"))?;
                // a regular file's size is the bar's length; a pipe or device has none
                let size = f.metadata().await.ok().filter(|m| m.is_file()).map(|m| m.len());
                lines(&target, &template, f, &name, size).await
            }
        }
        // clap refuses both and neither before we get here
        _ => Err(anyhow::anyhow!("give either PAYLOAD or --file")),
    }
}

#[allow(clippy::print_stderr)] // the id is the command's result; `duplicate` its note
async fn one(target: &Target, job: NewJob) -> anyhow::Result<i32> {
    let replies = target.enqueue(std::slice::from_ref(&job)).await?;
    match replies.first() {
        Some(Enqueued::New(id)) => out!("{id}"),
        Some(Enqueued::Duplicate(id)) => {
            out!("{id}");
            eprintln!(
                "duplicate: job {id} already exists in queue {}; nothing enqueued",
                target.queue
            );
        }
        None => anyhow::bail!("the store answered no id for the job in queue {}", target.queue),
    }
    Ok(0)
}

/// Reads one payload per line and enqueues them in batches of [`BATCH_MAX`], under a progress bar
/// when stderr is a terminal (`size`: the input's length in bytes, when known); then reports how
/// many and how fast on stderr.
#[allow(clippy::print_stderr)] // the count and rate are the command's report, on stderr by contract
async fn lines(
    target: &Target,
    template: &NewJob,
    input: impl AsyncRead + Unpin,
    name: &str,
    size: Option<u64>,
) -> anyhow::Result<i32> {
    let started = Instant::now();
    let progress = Progress::new(size, started);
    let result = read_lines(target, template, input, name, &progress).await;
    // cleared before any line is printed, the error's too
    progress.bar.finish_and_clear();
    let total = result?;
    let took = started.elapsed();
    let rate = total as f64 / took.as_secs_f64().max(1e-9);
    eprintln!(
        "enqueued {} to queue {} in {:.3} s ({rate:.0} jobs/s)",
        crate::count(total, "job"),
        target.queue,
        took.as_secs_f64()
    );
    Ok(0)
}

async fn read_lines(
    target: &Target,
    template: &NewJob,
    input: impl AsyncRead + Unpin,
    name: &str,
    progress: &Progress,
) -> anyhow::Result<u64> {
    let mut reader = BufReader::with_capacity(1 << 16, input);
    let mut batch: Vec<NewJob> = Vec::with_capacity(BATCH_MAX);
    let mut total: u64 = 0;
    let mut read: u64 = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .await
            .with_context(|| format!("cannot read {name}"))?;
        if n == 0 {
            break;
        }
        read += n as u64;
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        batch.push(NewJob {
            payload: line.clone(),
            ..template.clone()
        });
        if batch.len() == BATCH_MAX {
            total += flush(target, &mut batch, total).await?;
            progress.show(read, total);
        }
    }
    total += flush(target, &mut batch, total).await?;
    progress.show(read, total);
    Ok(total)
}

/// The progress of `--file` on stderr, drawn only when stderr is a terminal: a bar over the
/// input's bytes when its size is known (a file), else a spinner with the count (stdin).
struct Progress {
    bar: ProgressBar,
    known_size: bool,
    started: Instant,
}

impl Progress {
    fn new(size: Option<u64>, started: Instant) -> Progress {
        let bar = if std::io::stderr().is_terminal() {
            Self::drawn(size)
        } else {
            ProgressBar::hidden()
        };
        Progress {
            bar,
            known_size: size.is_some(),
            started,
        }
    }

    fn drawn(size: Option<u64>) -> ProgressBar {
        let template = match size {
            Some(_) => "enqueueing {bar:40} {percent:>3}%  {msg}  eta {eta}",
            None => "enqueueing {spinner} {msg}",
        };
        let bar = ProgressBar::with_draw_target(size, ProgressDrawTarget::stderr())
            .with_style(ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()))
            .with_message("0 jobs");
        if size.is_none() {
            // it turns while a slow pipe keeps us waiting
            bar.enable_steady_tick(Duration::from_millis(100));
        }
        bar.tick();
        bar
    }

    /// `read` bytes of the input consumed, `jobs` enqueued so far.
    fn show(&self, read: u64, jobs: u64) {
        if self.bar.is_hidden() {
            return;
        }
        if self.known_size {
            self.bar.set_position(read);
            self.bar.set_message(format!("{jobs} jobs"));
        } else {
            let rate = jobs as f64 / self.started.elapsed().as_secs_f64().max(1e-9);
            self.bar.set_message(format!("{jobs} jobs ({rate:.0} jobs/s)"));
        }
    }
}

async fn flush(target: &Target, batch: &mut Vec<NewJob>, done: u64) -> anyhow::Result<u64> {
    if batch.is_empty() {
        return Ok(0);
    }
    let n = batch.len() as u64;
    target.enqueue(batch).await.with_context(|| {
        format!(
            "enqueued {} to queue {}, then failed",
            crate::count(done, "job"),
            target.queue
        )
    })?;
    batch.clear();
    Ok(n)
}
