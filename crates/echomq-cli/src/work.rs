//! `emq work`: a worker for any language. Each job runs `sh -c CMD` in a process group of its own
//! with the payload on stdin; its exit status is the verdict. The command runs under `emq
//! supervise` (see `supervise.rs`), which starts it only once the whole payload arrived and kills
//! its group when the link to this worker closes, so a killed worker leaves no command behind.

use std::collections::HashSet;
use std::os::fd::OwnedFd;
use std::os::unix::process::ExitStatusExt;
use std::process::{ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::consumer::{CONCURRENCY_DEFAULT, MAX_ATTEMPTS_DEFAULT};
use echomq::store::{Recovery, RedeliveryPolicy, StalledPolicy};
use echomq::{Consumer, ConsumerOptions, JobContext, QueueName, Verdict};

use crate::supervise::Ended;
use anyhow::Context;
use rustix::process::{kill_process_group, Pid, Signal};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixStream;
use tokio::signal::unix::{signal, SignalKind};

/// The exit status that completes a job is 0; these are the other verdicts a command can choose.
pub const EXIT_DISCARD: i32 = 65;
/// Exit status: run again later (after the duration on stdout's last line, else `--retry`'s).
pub const EXIT_RETRY_AFTER: i32 = 75;
/// Exit status: not now — run again after the duration on stdout's last line (else `--retry`'s)
/// without using an attempt (a rate limit of the command's own, an HTTP 429).
pub const EXIT_SNOOZE: i32 = 76;
/// Exit status: the job ends cancelled.
pub const EXIT_CANCEL: i32 = 79;

/// How much of a command's stdout becomes the job's output.
pub const OUTPUT_MAX: usize = 64 * 1024;
/// How much of a command's stderr (its end) becomes the job's error.
pub const ERROR_TAIL_MAX: usize = 4 * 1024;
/// Between SIGTERM and SIGKILL when a command times out or its job is cancelled.
pub const KILL_GRACE: Duration = Duration::from_secs(5);
/// How long to keep reading a command's stdout and stderr after it exited: a background process
/// it left behind may hold the pipes open, and the job must not wait for that process.
const PIPE_GRACE: Duration = Duration::from_secs(1);

const EXIT_CODES_HELP: &str = "\
Each job runs `sh -c CMD` in a process group of its own, under a small supervisor (`emq`
itself) linked to this worker: when the worker ends for any reason, SIGKILL included, the
supervisor kills the command's whole group (pipelines and background subshells too): a
command does not outlive its worker. The payload is on the command's stdin
(never on its command line) and is delivered whole before the command starts: a worker that
dies mid-delivery leaves no command running on a truncated payload. EMQ_QUEUE, EMQ_JOB_ID, EMQ_ATTEMPTS (1 on the first attempt) and
EMQ_GROUP (unset for a job without a group) are in its environment.

Exit status of the command -> what becomes of the job:
  0          completed; the first 64 KiB of stdout is the job's output
  65         discard: dead now, no further attempts (EX_DATAERR: retrying cannot help);
             the last 4 KiB of stderr is the reason
  75         retry later (EX_TEMPFAIL): after the duration on the last line of stdout
             (`30s`, `500ms`; a bare number is seconds), else after --retry's delay;
             counts as an attempt
  76         snooze: not now (a 429, a limit of its own): run again after the duration on
             the last line of stdout (as for 75; its Retry-After, say), else after --retry's
             delay; uses no attempt
  79         cancel: the job ends cancelled, the last 4 KiB of stderr is the reason
  any other  error: the last 4 KiB of stderr is the job's last_error (`exit status N`
  or signal  or `killed by signal N` when stderr is empty); retried after --retry's delay
             (the job's own policy, if it has one) until its attempts reach --max-attempts (or
             the job's own), then dead

--timeout: SIGTERM to the command's process group, SIGKILL 5 s later; the job errs.
A cancel request (`emq cancel`) or a lost lease stops the command the same way.
A store that cannot be reached, at start-up too, is waited out: the worker logs
`store unreachable; waiting for it (backing off)` and starts once the store is up. A store
that refuses this worker for good (a password missing or refused, an ACL denial, a server
that does not speak Redis) ends it at once: exit 1, the cause on stderr.
SIGTERM or Ctrl-C: stop claiming, let running commands finish and settle, exit 0.
A second signal: SIGKILL every running command's group and exit 130 without settling
(the jobs return when their leases lapse).

A job whose worker dies mid-job (SIGKILL, OOM) returns to ready when its lease lapses, and
that claim has used one of its attempts: a job that kills its worker every time is dead after
--max-attempts lapses (\"lease expired on the last attempt\"), never looping for ever.
--max-redeliveries N gives lapses a budget of their own instead: the attempt is given back,
so only the command's failures spend --max-attempts, and the lapse after N redeliveries
leaves the job dead.";

/// Run a worker: each job runs `sh -c CMD` with its payload on stdin.
#[derive(clap::Args, Debug)]
#[command(after_help = EXIT_CODES_HELP)]
pub struct Args {
    /// The queues to work: one consumer per queue in this process, each with its own
    /// --concurrency (on a Redis Cluster, queues on different masters are served side by side).
    #[arg(required = true, value_name = "QUEUE")]
    pub queues: Vec<String>,
    /// The shell command run for each job (`sh -c CMD`).
    #[arg(long, value_name = "CMD")]
    pub exec: String,
    /// Commands running at once.
    #[arg(long, value_name = "N", default_value_t = CONCURRENCY_DEFAULT)]
    pub concurrency: usize,
    /// Claimed jobs each consumer may hold beyond its free slots (0: none), each leased, renewed
    /// and cancellable while held and started the moment a slot frees; given back on a stop. For
    /// many short jobs. Needs lease renewal (not with --no-locks).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub prefetch: usize,
    /// Lease of each claimed job; renewed while the command runs unless --no-locks (so at least
    /// 1s: a renewal runs every third of a lease and needs the rest to reach the store).
    #[arg(long, value_name = "D", value_parser = crate::duration, default_value = "30s")]
    pub lease: Duration,
    /// The beat: the longest idle wait, and how often recovery and promotion run (work never
    /// waits for it: a push, a retry or a delayed job due wakes the consumer).
    #[arg(long, value_name = "D", value_parser = crate::duration, default_value = "5s")]
    pub beat: Duration,
    /// What recovers jobs whose leases lapsed (a worker killed mid-job, by OOM or a deploy):
    /// `reap` returns them to ready, each lapse having used the attempt its claim took, so a job
    /// whose lease lapses on its last attempt is dead ("lease expired on the last attempt") and a
    /// job that kills its worker cannot loop for ever (with --max-attempts 3, three crashes leave
    /// it dead); `stalled` also counts stalls and dead-letters a job at --max-stalled; `off` runs
    /// no recovery.
    #[arg(long, value_enum, default_value_t = RecoveryArg::Reap)]
    pub recovery: RecoveryArg,
    /// With --recovery stalled: a job is dead on its N-th stall.
    #[arg(long, value_name = "N")]
    pub max_stalled: Option<u32>,
    /// With --recovery reap: lapsed leases get a budget of their own, so crashed workers do not
    /// spend a job's --max-attempts: each lapse gives back the attempt its claim took and is
    /// counted, and a job is dead at its lapse after the N-th redelivery ("lease lapsed N+1 times:
    /// its worker died or stalled each time"). At least 1.
    #[arg(long, value_name = "N")]
    pub max_redeliveries: Option<u32>,
    /// How long a failed job waits before it runs again (jobs with a policy of their own keep
    /// theirs): `fixed:D`, or `exp:BASE,xFACTOR,max=D,jitter=none|full|equal`, e.g.
    /// `exp:200ms,x2,max=10m,jitter=full` (BASE × FACTOR^(attempt−1), at most max; full jitter
    /// spreads each delay over 0..delay, equal over delay/2..delay).
    #[arg(long, value_name = "POLICY", value_parser = crate::retry_policy, default_value = "fixed:1s", overrides_with = "retry")]
    pub retry: echomq::RetryPolicy,
    /// Attempt budget of jobs that have none of their own.
    #[arg(long, value_name = "N", default_value_t = MAX_ATTEMPTS_DEFAULT)]
    pub max_attempts: u32,
    /// Kill a command running longer than this (SIGTERM, SIGKILL 5 s later); the job errs.
    #[arg(long, value_name = "D", value_parser = crate::duration)]
    pub timeout: Option<Duration>,
    /// Exit 0 at the first settle boundary after this long (for a supervisor to restart).
    #[arg(long, value_name = "D", value_parser = crate::duration)]
    pub ttl: Option<Duration>,
    /// Write a completion record for every settled job (stream `emq:{QUEUE}:completions`).
    #[arg(long)]
    pub record: bool,
    /// Do not renew leases while commands run: a command running past --lease is recovered and
    /// may run twice.
    #[arg(long)]
    pub no_locks: bool,
    /// Serve Prometheus metrics on this address (`GET /metrics`): each command's run time by
    /// queue and outcome (`emq_job_duration_seconds`), and the store's counts of the worker's
    /// queues (`emq_jobs`, `emq_events_total`, `emq_queue_paused`).
    #[arg(long, value_name = "ADDR:PORT")]
    pub metrics_bind: Option<std::net::SocketAddr>,
    /// Run only jobs of these kinds (repeat it, or list them: `--kind resize --kind email`,
    /// `--kind resize,email`); `--kind ''` stands for raw jobs (enqueued without --kind). Jobs of
    /// other kinds wait for a worker that runs them and never wake this one. Every kind when not
    /// given.
    #[arg(long = "kind", value_name = "KIND", value_delimiter = ',')]
    pub kinds: Vec<String>,
}

/// `--recovery`: the recovery leg of the consumer's beat.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecoveryArg {
    /// No recovery leg.
    Off,
    /// Lapsed leases back to ready, each having used its claim's attempt (unless
    /// --max-redeliveries).
    Reap,
    /// Lapsed leases counted; dead at --max-stalled.
    Stalled,
}

fn humantime(d: Duration) -> String {
    humantime::format_duration(d).to_string()
}

/// The process groups of the commands running now (each group's id is its leader's pid), so a
/// second signal can kill them all.
type Groups = Arc<Mutex<HashSet<u32>>>;

fn groups_lock(g: &Mutex<HashSet<u32>>) -> std::sync::MutexGuard<'_, HashSet<u32>> {
    g.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What each job runs, and how.
struct Exec {
    /// This program: each command runs under `emq supervise`.
    emq: std::path::PathBuf,
    cmd: String,
    queue: String,
    timeout: Option<Duration>,
    retry: echomq::RetryPolicy,
    groups: Groups,
}

/// Runs `emq work`.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let mut queues = Vec::with_capacity(args.queues.len());
    for q in &args.queues {
        let q = QueueName::new(q)?;
        if queues.contains(&q) {
            anyhow::bail!("queue {q} is named twice");
        }
        queues.push(q);
    }
    let conflict = |msg: &str| clap::Error::raw(clap::error::ErrorKind::ArgumentConflict, msg).exit();
    let recovery = match (args.recovery, args.max_stalled, args.max_redeliveries) {
        (RecoveryArg::Stalled, n, None) => {
            Recovery::Stalled(StalledPolicy::default().max_stalled(n.unwrap_or(StalledPolicy::default().max_stalled)))
        }
        (RecoveryArg::Reap, None, Some(n)) => Recovery::Redeliver(RedeliveryPolicy::default().max_redeliveries(n)),
        (_, Some(_), _) => conflict("--max-stalled needs --recovery stalled\n"),
        (_, _, Some(_)) => conflict("--max-redeliveries needs --recovery reap\n"),
        (RecoveryArg::Reap, None, None) => Recovery::Reap,
        (RecoveryArg::Off, None, None) => Recovery::Off,
    };
    let opts = ConsumerOptions::default()
        .with_concurrency(args.concurrency)
        .with_lease(args.lease)
        .with_beat(args.beat)
        .with_recovery(recovery)
        .with_retry(args.retry.clone())
        .with_max_attempts(args.max_attempts)
        .with_ttl(args.ttl)
        .with_record(args.record)
        .with_locks(!args.no_locks)
        .with_prefetch(args.prefetch)
        .with_cancel(true);
    let opts = if args.kinds.is_empty() {
        opts
    } else {
        let raw = args.kinds.iter().any(String::is_empty);
        let kinds = echomq::Kinds::only(args.kinds.iter().filter(|k| !k.is_empty()));
        opts.with_kinds(if raw { kinds.with_raw() } else { kinds })
    };
    // refused options fail before the store is opened, the same with or without a server
    opts.validate()?;
    if args.timeout.is_some_and(|t| t.is_zero()) {
        anyhow::bail!("invalid option timeout = 0s: must be greater than zero");
    }
    // listen before the first job can start, so no signal is lost to the default action
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    // a store that is down now is waited out by the consumer's back-off, as any outage is; a
    // refusal no retry mends (a missing password, a server that is not Redis) ends the worker at
    // its first round
    let store: Arc<dyn echomq::Store> = Arc::from(echomq::store::open_lazy(url).await?);
    // the recorder first: each consumer registers its histograms with it when it starts
    if let Some(bind) = args.metrics_bind {
        crate::prometheus::serve_worker(bind, store.clone(), queues.clone()).await?;
    }
    let groups: Groups = Arc::default();
    let emq = std::env::current_exe().context("cannot find this program to run each command under it")?;
    let mut consumers = Vec::with_capacity(queues.len());
    for queue in queues {
        let exec = Arc::new(Exec {
            emq: emq.clone(),
            cmd: args.exec.clone(),
            queue: queue.to_string(),
            timeout: args.timeout,
            retry: args.retry.clone(),
            groups: groups.clone(),
        });
        let handler = move |job: JobContext| {
            let exec = exec.clone();
            async move { exec.run_job(job).await }
        };
        let consumer = Consumer::start(store.clone(), queue, handler, opts.clone())?;
        tracing::info!(queue = %consumer.queue(), "emq work started");
        consumers.push(consumer);
    }

    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
        // a loop ended on its own: its ttl (exit 0), or the store's refusal (its error, exit 1);
        // the other queues' consumers stop with it
        (ended, _, _) = futures::future::select_all(consumers.iter().map(|c| Box::pin(c.wait_for(Duration::MAX)))) => {
            let stopped = stop_all(&consumers).await;
            ended?;
            stopped.into_iter().collect::<Result<Vec<_>, _>>()?;
            return Ok(0);
        }
    }
    note(&format!(
        "stopping: no new jobs; waiting for {} running command(s) to finish (a second signal kills them)",
        groups_lock(&groups).len()
    ));
    tokio::select! {
        r = stop_all(&consumers) => {
            r.into_iter().collect::<Result<Vec<_>, _>>()?;
            return Ok(0);
        }
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
    // the handlers and the settlers go first: a command dying of the SIGKILL below must not get
    // its job settled (as an error) in the moment before the process exits
    for consumer in &consumers {
        consumer.abort();
    }
    Ok(kill_all(&groups))
}

#[allow(clippy::print_stderr)] // an operator's notice on stderr, shown whatever EMQ_LOG says
fn note(msg: &str) {
    eprintln!("emq work: {msg}");
}

/// The second signal: SIGKILL every running command's group; the jobs stay unsettled.
fn kill_all(groups: &Groups) -> i32 {
    let pgids: Vec<u32> = groups_lock(groups).iter().copied().collect();
    note(&format!(
        "second signal: killing {} running command(s); exiting unsettled",
        pgids.len()
    ));
    for pgid in pgids {
        kill_group(pgid, Signal::KILL);
    }
    130
}

/// Sends `sig` to the process group `pgid`.
fn kill_group(pgid: u32, sig: Signal) {
    let Some(pid) = i32::try_from(pgid).ok().and_then(Pid::from_raw) else {
        return;
    };
    if let Err(e) = kill_process_group(pid, sig) {
        tracing::warn!(pgid, signal = ?sig, error = %e, "cannot send the signal to the command's group");
    }
}

/// How a command's run ended.
enum End {
    Exited(ExitStatus),
    TimedOut,
    Cancelled(Option<String>),
}

impl Exec {
    async fn run_job(&self, job: JobContext) -> Verdict {
        // the link: the supervisor's stdin, one end of a socket pair; the kernel closes this end
        // however this process dies, and the supervisor then kills the command's group
        let (link, far) = match std::os::unix::net::UnixStream::pair() {
            Ok(pair) => pair,
            Err(e) => return Verdict::Error(format!("cannot make the link to the command: {e}")),
        };
        let link = match link.set_nonblocking(true).and_then(|()| UnixStream::from_std(link)) {
            Ok(l) => l,
            Err(e) => return Verdict::Error(format!("cannot make the link to the command: {e}")),
        };
        let mut cmd = tokio::process::Command::new(&self.emq);
        cmd.arg(crate::supervise::SUBCOMMAND)
            .arg("--exec")
            .arg(&self.cmd)
            .env("EMQ_QUEUE", &self.queue)
            .env("EMQ_JOB_ID", job.id().as_str())
            .env("EMQ_ATTEMPTS", job.attempt().to_string())
            .stdin(Stdio::from(OwnedFd::from(far)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            // a group of its own, led by the supervisor: a terminal's Ctrl-C reaches emq only, and
            // a kill reaches the command's children too
            .process_group(0);
        match &job.group() {
            Some(g) => cmd.env("EMQ_GROUP", g.as_str()),
            None => cmd.env_remove("EMQ_GROUP"),
        };
        let spawned = cmd.spawn();
        // this process's copy of the supervisor's end: only the supervisor may hold it
        drop(cmd);
        let mut child = match spawned {
            Ok(c) => c,
            Err(e) => {
                return Verdict::Error(format!(
                    "cannot run the command's supervisor ({}): {e}",
                    self.emq.display()
                ))
            }
        };
        let Some(pgid) = child.id() else {
            return Verdict::Error("the command's process vanished at start".into());
        };
        groups_lock(&self.groups).insert(pgid);
        tracing::info!(queue = %self.queue, id = %job.id(), attempt = job.attempt(), pgid, "job started");

        let (mut from_supervisor, mut to_supervisor) = link.into_split();
        let payload = job.payload().to_vec();
        // the payload as one frame: the supervisor runs the command only once all of it arrived
        let writer = tokio::spawn(async move {
            to_supervisor
                .write_all(&crate::supervise::frame_header(&payload))
                .await?;
            to_supervisor.write_all(&payload).await?;
            // kept open until the job ends: its closing tells the supervisor the worker is gone
            Ok::<_, std::io::Error>(to_supervisor)
        });
        let out = Arc::new(Mutex::new(Vec::new()));
        let err = Arc::new(Mutex::new(Vec::new()));
        let readers = [
            child.stdout.take().map(|r| tokio::spawn(read_head(r, out.clone()))),
            child.stderr.take().map(|r| tokio::spawn(read_tail(r, err.clone()))),
        ];

        let timeout = async {
            match self.timeout {
                Some(t) => tokio::time::sleep(t).await,
                None => std::future::pending().await,
            }
        };
        // the child is reaped only by the branch that wins, so its pid (the group id) cannot be
        // reused while we signal the group below
        let end = tokio::select! {
            s = child.wait() => match s {
                Ok(s) => End::Exited(s),
                Err(e) => {
                    groups_lock(&self.groups).remove(&pgid);
                    return Verdict::Error(format!("cannot wait for the command: {e}"));
                }
            },
            _ = timeout => End::TimedOut,
            c = job.cancel_token().cancelled() => End::Cancelled(c.reason),
        };
        if !matches!(end, End::Exited(_)) {
            kill_group(pgid, Signal::TERM);
            if tokio::time::timeout(KILL_GRACE, child.wait()).await.is_err() {
                kill_group(pgid, Signal::KILL);
                let _ = child.wait().await;
            }
        }
        groups_lock(&self.groups).remove(&pgid);

        let _ = tokio::time::timeout(PIPE_GRACE, async {
            for r in readers.iter().flatten() {
                while !r.is_finished() {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
        })
        .await;
        for r in readers.iter().flatten() {
            r.abort();
        }
        // how the command ended, as the supervisor reported it (written before it exited)
        let mut report = String::new();
        let _ = tokio::time::timeout(PIPE_GRACE, from_supervisor.read_to_string(&mut report)).await;
        let delivered = writer.await.map_err(std::io::Error::other).and_then(|w| w);
        // a supervisor that ended without a report (killed on its own, say) may have left its
        // command running in the group: it must not run on beside the job's next attempt
        let ended = Ended::parse(&report);
        if matches!(end, End::Exited(_)) && ended.is_none() {
            kill_group(pgid, Signal::KILL);
        }
        let stdout = std::mem::take(&mut *lock(&out));
        let stderr = tail_text(&lock(&err));

        let reason = |fallback: String| if stderr.is_empty() { fallback } else { stderr.clone() };
        let verdict = match end {
            End::TimedOut => {
                let t = humantime(self.timeout.unwrap_or_default());
                if stderr.is_empty() {
                    Verdict::Error(format!("timed out after {t}"))
                } else {
                    Verdict::Error(format!("timed out after {t}\n{stderr}"))
                }
            }
            End::Cancelled(why) => Verdict::Cancel(why.unwrap_or_else(|| "cancelled".into())),
            End::Exited(status) => match (ended, delivered) {
                (Some(Ended::Exit(0)), _) if stdout.is_empty() => Verdict::Done,
                (Some(Ended::Exit(0)), _) => Verdict::DoneWith(stdout),
                (Some(Ended::Exit(EXIT_DISCARD)), _) => Verdict::Discard(reason(format!("exit status {EXIT_DISCARD}"))),
                (Some(Ended::Exit(EXIT_RETRY_AFTER)), _) => Verdict::RetryAfter(
                    retry_delay(&stdout).unwrap_or_else(|| self.retry.delay(job.attempt(), "retry requested")),
                ),
                (Some(Ended::Exit(EXIT_SNOOZE)), _) => {
                    Verdict::Release(retry_delay(&stdout).unwrap_or_else(|| self.retry.delay(job.attempt(), "snoozed")))
                }
                (Some(Ended::Exit(EXIT_CANCEL)), _) => Verdict::Cancel(reason(format!("exit status {EXIT_CANCEL}"))),
                (Some(Ended::Exit(code)), _) => Verdict::Error(reason(format!("exit status {code}"))),
                (Some(Ended::Signal(sig)), _) => Verdict::Error(reason(format!("killed by signal {sig}"))),
                // no report: the command never ran on a payload cut short, or the supervisor died
                (None, Err(e)) => Verdict::Error(format!(
                    "the payload was not delivered to the command (it did not run): {e}"
                )),
                (None, Ok(_)) => Verdict::Error(reason(format!(
                    "the command's supervisor ended without a report ({})",
                    describe(status)
                ))),
            },
        };
        tracing::info!(queue = %self.queue, id = %job.id(), attempt = job.attempt(), verdict = ?short(&verdict), "job finished");
        verdict
    }
}

/// `exit status N` or `killed by signal N`.
fn describe(status: ExitStatus) -> String {
    match status.code() {
        Some(code) => format!("exit status {code}"),
        None => format!("killed by signal {}", status.signal().unwrap_or_default()),
    }
}

fn lock(m: &Mutex<Vec<u8>>) -> std::sync::MutexGuard<'_, Vec<u8>> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The verdict's kind, for the log line (not the payload-sized output).
fn short(v: &Verdict) -> &'static str {
    match v {
        Verdict::Done | Verdict::DoneWith(_) => "completed",
        Verdict::Cancel(_) => "cancel",
        Verdict::Error(_) => "error",
        Verdict::RetryAfter(_) => "retry-after",
        Verdict::Discard(_) => "discard",
        _ => "other",
    }
}

/// Keeps the first [`OUTPUT_MAX`] bytes and reads (and drops) the rest, so a chatty command never
/// blocks on a full pipe.
async fn read_head(mut r: impl AsyncRead + Unpin, into: Arc<Mutex<Vec<u8>>>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut head = lock(&into);
                let room = OUTPUT_MAX.saturating_sub(head.len());
                head.extend_from_slice(&buf[..n.min(room)]);
            }
        }
    }
}

/// Keeps the last [`ERROR_TAIL_MAX`] bytes.
async fn read_tail(mut r: impl AsyncRead + Unpin, into: Arc<Mutex<Vec<u8>>>) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match r.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => {
                let mut tail = lock(&into);
                tail.extend_from_slice(&buf[..n]);
                if tail.len() > 2 * ERROR_TAIL_MAX {
                    let cut = tail.len() - ERROR_TAIL_MAX;
                    tail.drain(..cut);
                }
            }
        }
    }
}

/// The last [`ERROR_TAIL_MAX`] bytes as text: starting on a character boundary, trailing
/// whitespace trimmed.
fn tail_text(bytes: &[u8]) -> String {
    let mut tail = &bytes[bytes.len().saturating_sub(ERROR_TAIL_MAX)..];
    // a cut inside a UTF-8 sequence: skip its continuation bytes
    let skip = tail.iter().take(3).take_while(|b| (**b & 0xC0) == 0x80).count();
    tail = &tail[skip..];
    String::from_utf8_lossy(tail).trim_end().to_string()
}

/// The delay a command asked for with exit 75 or 76: the last non-empty line of its stdout, a humantime
/// duration or a number of seconds.
fn retry_delay(stdout: &[u8]) -> Option<Duration> {
    let text = String::from_utf8_lossy(stdout);
    let last = text.lines().map(str::trim).rfind(|l| !l.is_empty())?;
    if let Ok(secs) = last.parse::<f64>() {
        return Duration::try_from_secs_f64(secs).ok();
    }
    humantime::parse_duration(last).ok()
}

/// Stops every consumer (waiting for their running commands), each stop's outcome its own.
async fn stop_all(consumers: &[Consumer]) -> Vec<echomq::Result<()>> {
    futures::future::join_all(consumers.iter().map(|c| c.stop(Duration::MAX))).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_duration_defaults_are_the_library_defaults() {
        use clap::Parser;
        #[derive(Parser)]
        struct W {
            #[command(flatten)]
            args: Args,
        }
        let w = W::try_parse_from(["work", "q", "--exec", "true"]).unwrap();
        assert_eq!(w.args.lease, echomq::consumer::LEASE_DEFAULT);
        assert_eq!(w.args.beat, echomq::consumer::BEAT_DEFAULT);
        assert_eq!(w.args.retry, echomq::RetryPolicy::default());
    }

    #[test]
    fn the_retry_delay_is_read_from_the_last_line_of_stdout() {
        assert_eq!(retry_delay(b"working\n30s\n"), Some(Duration::from_secs(30)));
        assert_eq!(retry_delay(b"1.5\n\n"), Some(Duration::from_millis(1500)));
        assert_eq!(retry_delay(b"250ms"), Some(Duration::from_millis(250)));
        assert_eq!(retry_delay(b"soon"), None);
        assert_eq!(retry_delay(b""), None);
        assert_eq!(retry_delay(b"-3"), None);
    }

    #[test]
    fn the_error_tail_keeps_the_end_on_a_character_boundary() {
        let mut long = "é".repeat(ERROR_TAIL_MAX);
        long.push_str("boom\n");
        let t = tail_text(long.as_bytes());
        assert!(t.ends_with("boom"));
        assert!(t.len() <= ERROR_TAIL_MAX);
        assert!(!t.contains('\u{FFFD}'));
        assert_eq!(tail_text(b"oops \n"), "oops");
    }
}
