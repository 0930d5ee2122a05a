//! `emq enqueue`: one job from the command line (or stdin), or one job per line of a file.

use std::ffi::OsString;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context;
use echomq::store::{Enqueued, BATCH_BYTES_MAX, BATCH_MAX};
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
    /// stripped; the other options apply to each job. The jobs go in batches of at most 1000
    /// jobs and 8 MiB, each enqueued whole or not at all. Shows a progress bar while it runs when
    /// stderr is a terminal, then prints how many and how fast on stderr. On a failure part-way
    /// the error says how many jobs the store acknowledged, through which line, and prints the
    /// command that resumes after them (`--skip N`; a URL's credentials left out).
    #[arg(long, value_name = "FILE")]
    pub file: Option<PathBuf>,
    /// With --file: skip the first N lines of the input (empty lines count) and enqueue the rest,
    /// as the command a failed run prints does to resume after the lines it enqueued.
    #[arg(long, value_name = "N", conflicts_with = "payload")]
    pub skip: Option<u64>,
    /// Put the job in this group's lane (groups run side by side, each under its limit).
    #[arg(long, value_name = "G")]
    pub group: Option<String>,
    /// Run no earlier than this long from now (`500ms`, `2s`, `1m`).
    #[arg(long, value_name = "D", value_parser = crate::duration)]
    pub delay: Option<Duration>,
    /// This job's attempt budget (default: the consumer's).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// How urgent the job is (with --file: every job): 0, the default, is the most urgent, 9 the
    /// least. A job of priority P still runs before priority-0 jobs that arrive more than
    /// P × the queue's priority aging after it (`emq priority-aging`; 60s unless set).
    #[arg(long, value_name = "P", value_parser = clap::value_parser!(u8).range(0..=9))]
    pub priority: Option<u8>,
    /// This job's own retry curve, instead of the worker's: `fixed:1s`, or
    /// `exp:BASE,xFACTOR,max=D,jitter=none|full|equal` (e.g. `exp:1s,x2,max=10m,jitter=full`).
    #[arg(long, value_name = "POLICY", value_parser = crate::retry_policy)]
    pub retry: Option<echomq::RetryPolicy>,
    /// The job's kind, for a worker that routes by kind (the payload is then its JSON).
    #[arg(long, value_name = "K")]
    pub kind: Option<String>,
    /// A caller-given id (must hold a non-digit): enqueueing it again while its job exists prints
    /// the existing id and `duplicate` on stderr, and writes nothing.
    #[arg(long, value_name = "ID", conflicts_with = "file")]
    pub id: Option<String>,
    /// A dedup key: enqueues of one key are one job while it holds (--dedup-mode). An enqueue the
    /// key answers prints the holding job's id, and on stderr what it did.
    #[arg(long, value_name = "KEY", conflicts_with = "file")]
    pub dedup: Option<String>,
    /// How the dedup key holds: `until_finished` (the default: while its job waits or runs),
    /// `for:TTL` (for TTL after the first, even once finished: throttling) or `debounce:TTL`
    /// (while its job waits: a new enqueue gives it its payload and starts it TTL from now).
    #[arg(long, value_name = "MODE", requires = "dedup", default_value = "until_finished")]
    pub dedup_mode: echomq::DedupMode,
    /// Redis: return only once N replicas of the queue's master confirm they have the jobs
    /// (`WAIT`), so a failover right after cannot lose them; exit 1 when they do not within
    /// --wait-timeout (the jobs stand on the master, unconfirmed). Same as `?wait=N` in the URL.
    #[arg(long, value_name = "N")]
    pub wait: Option<u32>,
    /// With --wait: how long the server waits for the replicas.
    #[arg(long, value_name = "D", value_parser = crate::duration, requires = "wait")]
    pub wait_timeout: Option<Duration>,
}

/// `url` with `--wait N` (and `--wait-timeout`) added as its `wait` parameters; refused for the
/// embedded store, whose commit is its durability (there are no replicas to wait for).
fn with_wait(url: &str, wait: Option<u32>, timeout: Option<Duration>) -> anyhow::Result<String> {
    let Some(n) = wait else {
        return Ok(url.to_string());
    };
    let redis = ["redis://", "rediss://", "redis+cluster://", "rediss+cluster://"];
    if !redis.iter().any(|s| url.starts_with(s)) {
        anyhow::bail!("invalid option wait: --wait needs a Redis store (the embedded store has no replicas; its commit is durable)");
    }
    let mut url = format!("{url}{}wait={n}", if url.contains('?') { '&' } else { '?' });
    if let Some(t) = timeout {
        url.push_str(&format!("&wait_timeout={}", t.as_millis().max(1)));
    }
    Ok(url)
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
    let url = &with_wait(url, args.wait, args.wait_timeout)?;
    // names are checked before the store is opened: a bad name fails the same with no server
    let queue = QueueName::new(&args.queue)?;
    let group = args.group.as_deref().map(GroupName::new).transpose()?;
    let id = args.id.as_deref().map(JobId::new).transpose()?;
    let dedup = match &args.dedup {
        Some(key) => Some(echomq::Dedup::new(
            echomq::DedupKey::new(key.as_str())?,
            args.dedup_mode,
        )?),
        None => None,
    };
    let template = NewJob {
        payload: Vec::new(),
        id,
        delay: args.delay,
        max_attempts: args.max_attempts,
        kind: args.kind.clone(),
        wait_replicas: None,
        priority: args.priority,
        retry: args.retry.clone(),
        dedup,
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
            let skip = args.skip.unwrap_or(0);
            let resume = Resume {
                url: url_arg(url),
                queue: args.queue.clone(),
                file: file.display().to_string(),
                group: args.group.clone(),
                delay: args.delay,
                max_attempts: args.max_attempts,
                kind: args.kind.clone(),
                priority: args.priority,
                retry: args.retry.clone(),
            };
            if file.as_os_str() == "-" {
                lines(&target, &template, tokio::io::stdin(), "stdin", None, skip, &resume).await
            } else {
                let name = file.display().to_string();
                let f = tokio::fs::File::open(&file)
                    .await
                    .with_context(|| format!("cannot open {name}"))?;
                // a regular file's size is the bar's length; a pipe or device has none
                let size = f.metadata().await.ok().filter(|m| m.is_file()).map(|m| m.len());
                lines(&target, &template, f, &name, size, skip, &resume).await
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
        Some(Enqueued::Deduplicated(id)) => {
            out!("{id}");
            eprintln!(
                "deduplicated: job {id} holds the dedup key in queue {}; nothing enqueued",
                target.queue
            );
        }
        Some(Enqueued::Debounced(id)) => {
            out!("{id}");
            eprintln!(
                "debounced: job {id} of queue {} took this payload and starts later",
                target.queue
            );
        }
        None => anyhow::bail!("the store answered no id for the job in queue {}", target.queue),
        Some(other) => return Err(crate::unknown_reply(other)),
    }
    Ok(0)
}

/// Reads one payload per line (after the first `skip` lines) and enqueues them in batches of at
/// most [`BATCH_MAX`] jobs and [`BATCH_BYTES_MAX`] bytes (a line longer than that alone), each one
/// store call and so enqueued whole or not at all; under a progress bar when stderr is a terminal
/// (`size`: the input's length in bytes, when known); then reports how many and how fast on
/// stderr. On a failure the error names the jobs acknowledged, the line they reach, and the
/// command that resumes after that line ([`Resume`]).
#[allow(clippy::print_stderr)] // the count and rate are the command's report, on stderr by contract
async fn lines(
    target: &Target,
    template: &NewJob,
    input: impl AsyncRead + Unpin,
    name: &str,
    size: Option<u64>,
    skip: u64,
    resume: &Resume,
) -> anyhow::Result<i32> {
    let started = Instant::now();
    let progress = Progress::new(size, started);
    let mut tally = Tally { jobs: 0, through: skip };
    let result = read_lines(target, template, input, name, skip, &progress, &mut tally).await;
    // cleared before any line is printed, the error's too
    progress.bar.finish_and_clear();
    if let Err(cause) = result {
        return Err(failed_part_way(target, name, &tally, resume, cause));
    }
    let total = tally.jobs;
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

/// What a `--file` run has done: the jobs the store acknowledged, and the input's line (1-based,
/// the skipped lines counted) of the last of them — the `--skip` that resumes after them.
struct Tally {
    jobs: u64,
    through: u64,
}

/// The error of a `--file` run that failed part-way: the cause, the jobs enqueued and the line
/// they reach, and the command that enqueues the rest.
fn failed_part_way(target: &Target, name: &str, tally: &Tally, resume: &Resume, cause: anyhow::Error) -> anyhow::Error {
    let mut msg = format!(
        "enqueued {} to queue {} (through line {} of {name}), then failed: {cause:#}",
        crate::count(tally.jobs, "job"),
        target.queue,
        tally.through,
    );
    let unreachable = cause
        .downcast_ref::<echomq::Error>()
        .is_some_and(|e| matches!(e, echomq::Error::Unreachable { .. }));
    if unreachable {
        msg.push_str(
            "\nthe batch in flight when the store went away may have landed too: resuming would enqueue its jobs again",
        );
    }
    msg.push_str(&format!("\nresume after them with: {}", resume.command(tally.through)));
    if resume.url.as_ref().is_some_and(|u| u.redacted) {
        msg.push_str("\n(the URL's credentials are left out: give them in --url again, or set EMQ_URL)");
    }
    anyhow::anyhow!(msg)
}

async fn read_lines(
    target: &Target,
    template: &NewJob,
    input: impl AsyncRead + Unpin,
    name: &str,
    skip: u64,
    progress: &Progress,
    tally: &mut Tally,
) -> anyhow::Result<()> {
    let mut reader = BufReader::with_capacity(1 << 16, input);
    let mut batch = Batch::default();
    let mut read: u64 = 0;
    let mut at: u64 = 0;
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
        at += 1;
        if at <= skip {
            continue;
        }
        if line.last() == Some(&b'\n') {
            line.pop();
        }
        if line.last() == Some(&b'\r') {
            line.pop();
        }
        if line.is_empty() {
            continue;
        }
        // a batch is one store call: full in count, or in bytes with this line, it goes first
        if !batch.jobs.is_empty() && (batch.jobs.len() == BATCH_MAX || batch.bytes + line.len() > BATCH_BYTES_MAX) {
            batch.flush(target, tally).await?;
            progress.show(read, tally.jobs);
        }
        batch.bytes += line.len();
        batch.last = at;
        batch.jobs.push(NewJob {
            payload: line.clone(),
            ..template.clone()
        });
    }
    batch.flush(target, tally).await?;
    progress.show(read, tally.jobs);
    Ok(())
}

/// The jobs read and not yet sent: their payloads' bytes, and the input line of the last one.
#[derive(Default)]
struct Batch {
    jobs: Vec<NewJob>,
    bytes: usize,
    last: u64,
}

impl Batch {
    /// Enqueues the batch in one store call (it is within the store's batch bounds, so the store
    /// writes it whole or not at all) and counts it in `tally` once acknowledged.
    async fn flush(&mut self, target: &Target, tally: &mut Tally) -> anyhow::Result<()> {
        if self.jobs.is_empty() {
            return Ok(());
        }
        target.enqueue(&self.jobs).await?;
        tally.jobs += self.jobs.len() as u64;
        tally.through = self.last;
        self.jobs.clear();
        self.bytes = 0;
        Ok(())
    }
}

/// The `--url` of a resume command: none when the environment gives the same store again
/// (`EMQ_URL`, or the default); else the URL with its credentials left out.
struct UrlArg {
    shown: String,
    redacted: bool,
}

fn url_arg(url: &str) -> Option<UrlArg> {
    let from_env = std::env::var("EMQ_URL").is_ok_and(|e| e == url);
    if from_env || url == crate::DEFAULT_URL {
        return None;
    }
    let shown = echomq::store::redact_url(url);
    Some(UrlArg {
        redacted: shown != url,
        shown,
    })
}

/// The options of a `--file` run, to print the command that resumes it after a line.
struct Resume {
    url: Option<UrlArg>,
    queue: String,
    file: String,
    group: Option<String>,
    delay: Option<Duration>,
    max_attempts: Option<u32>,
    kind: Option<String>,
    priority: Option<u8>,
    retry: Option<echomq::RetryPolicy>,
}

impl Resume {
    /// `emq [--url U] enqueue QUEUE --file FILE [the options] --skip N`, each argument quoted for a
    /// POSIX shell where it needs it.
    fn command(&self, skip: u64) -> String {
        let mut words: Vec<String> = vec!["emq".into()];
        if let Some(u) = &self.url {
            words.extend(["--url".into(), quote(&u.shown)]);
        }
        words.extend(["enqueue".into(), quote(&self.queue), "--file".into(), quote(&self.file)]);
        if let Some(g) = &self.group {
            words.extend(["--group".into(), quote(g)]);
        }
        if let Some(d) = self.delay {
            // milliseconds: exactly the delay given, in one word
            words.extend(["--delay".into(), format!("{}ms", d.as_millis())]);
        }
        if let Some(m) = self.max_attempts {
            words.extend(["--max-attempts".into(), m.to_string()]);
        }
        if let Some(k) = &self.kind {
            words.extend(["--kind".into(), quote(k)]);
        }
        if let Some(p) = self.priority {
            words.extend(["--priority".into(), p.to_string()]);
        }
        if let Some(r) = &self.retry {
            words.extend(["--retry".into(), quote(&r.to_string())]);
        }
        words.extend(["--skip".into(), skip.to_string()]);
        words.join(" ")
    }
}

/// `s` as one word of a POSIX shell: as it is when it holds only characters no shell treats
/// specially, else in single quotes (a quote inside as `'\''`).
fn quote(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "_-./:@%+=,".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
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

#[cfg(test)]
mod tests {
    use super::{quote, Resume, UrlArg};
    use std::time::Duration;

    #[test]
    fn a_word_is_quoted_only_when_a_shell_would_read_it_otherwise() {
        assert_eq!(quote("jobs.txt"), "jobs.txt");
        assert_eq!(quote("my jobs.txt"), "'my jobs.txt'");
        assert_eq!(quote("it's"), "'it'\\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("$HOME"), "'$HOME'");
    }

    #[test]
    fn the_resume_command_repeats_every_option_and_skips_the_lines_done() {
        let resume = Resume {
            url: Some(UrlArg {
                shown: "redis://…@h:6379".into(),
                redacted: true,
            }),
            queue: "q".into(),
            file: "a b.txt".into(),
            group: Some("g".into()),
            delay: Some(Duration::from_millis(1500)),
            max_attempts: Some(3),
            kind: Some("k".into()),
            priority: Some(7),
            retry: Some("exp:1s,x2,max=10m,jitter=full".parse().unwrap()),
        };
        assert_eq!(
            resume.command(42),
            "emq --url 'redis://…@h:6379' enqueue q --file 'a b.txt' --group g --delay 1500ms \
             --max-attempts 3 --kind k --priority 7 --retry exp:1s,x2,max=10m,jitter=full --skip 42"
        );
    }
}
