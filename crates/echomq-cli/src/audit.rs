//! `emq audit`: the crash audit. It enqueues N jobs on a store of its own, runs them through K
//! `emq work` processes while it injects faults — SIGKILL of random workers, SIGKILL and restart of
//! `redis-server` (AOF `always`), a worker paused with SIGSTOP past its lease and resumed (the
//! zombie) — and then proves what became of every acknowledged job from evidence that does not
//! trust the workers:
//!
//! * each run of a job appends `start|end ID ATTEMPT WORKER PID NANOS` to one log opened with
//!   `O_APPEND` by the command itself (runs, redeliveries, overlapping runs);
//! * the job's row, kept by the queue's retention (completed, dead, or lost);
//! * the store's counters, raised by each accepted settle inside the settling transaction: more
//!   completions or dead-letters counted than jobs completed or dead is a double settle;
//! * the workers' logs: settles refused as stale, leases lost, and the time spent degraded.

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context};
use echomq::store::Enqueued;
use echomq::{JobId, JobState, NewJob, QueueName, Retention, Store};
use rustix::process::{kill_process, kill_process_group, Pid, Signal};
use serde::Serialize;
use tokio::process::{Child, Command};

/// The queue the audit runs its jobs on (in a store of its own).
mod cluster;

const QUEUE: &str = "audit";
/// Jobs per enqueue call.
const ENQUEUE_BATCH: usize = 1000;
/// How long a restarted redis-server may take to answer again.
const RESTART_MAX: Duration = Duration::from_secs(60);
/// How long stopped workers may take to finish their running commands.
const STOP_MAX: Duration = Duration::from_secs(30);

/// Run N jobs through K workers while killing them (and the Redis server), then account for every
/// job: completed, dead or lost, double settles, redeliveries and overlapping runs.
#[derive(clap::Args, Debug)]
#[command(after_help = AUDIT_HELP)]
pub struct Args {
    /// The store audited: `embedded` (a fresh file), `redis` (a redis-server of the audit's own
    /// with AOF `appendfsync always`, so that it can kill and restart it) or `redis-cluster` (a
    /// Redis Cluster of its own: 3 masters with a replica each, AOF `always`, so that it can fail
    /// the queue's master over). A --url or EMQ_URL is refused: the audit kills its store's
    /// servers, so it makes its own.
    #[arg(long, value_enum, default_value_t = StoreArg::Embedded)]
    pub store: StoreArg,
    /// Jobs enqueued.
    #[arg(long, value_name = "N", default_value_t = 3000)]
    pub jobs: u64,
    /// Worker processes (`emq work`) running at once.
    #[arg(long, value_name = "K", default_value_t = 4)]
    pub workers: usize,
    /// Commands each worker runs at once.
    #[arg(long, value_name = "N", default_value_t = 8)]
    pub concurrency: usize,
    /// SIGKILLs of a random worker (each replaced by a fresh one), spread over the run.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub worker_kills: u32,
    /// SIGKILLs of redis-server (each restarted on its AOF after --redis-down); 1 by default with
    /// --store redis, refused with the embedded store.
    #[arg(long, value_name = "N")]
    pub redis_kills: Option<u32>,
    /// Failovers of the master that holds the queue (SIGKILLed; a replica takes over; the killed
    /// node is restarted and rejoins as a replica); 1 by default with --store redis-cluster,
    /// refused with the other stores.
    #[arg(long, value_name = "N")]
    pub failovers: Option<u32>,
    /// Every write of the producer and the workers waits for N replicas (`?wait=N`): with a
    /// failover, no acknowledged write may be lost. Only with --store redis-cluster.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub wait: u32,
    /// How long redis-server stays down after each kill.
    #[arg(long, value_name = "D", value_parser = crate::duration, default_value = "1s")]
    pub redis_down: Duration,
    /// Freeze one worker and its running commands with SIGSTOP for three leases, 40% of the way
    /// through, then resume them: the worker's jobs are redelivered meanwhile (so their runs
    /// overlap), and its late settles must be refused as stale.
    #[arg(long)]
    pub zombie: bool,
    /// The workers' lease (renewed while a command runs).
    #[arg(long, value_name = "D", value_parser = crate::duration, default_value = "3s")]
    pub lease: Duration,
    /// The workers' attempt budget per job: a job whose runs are killed this many times is dead.
    #[arg(long, value_name = "N", default_value_t = 5)]
    pub max_attempts: u32,
    /// How long each job's command runs (a sleep between its two log lines).
    #[arg(long, value_name = "D", value_parser = crate::duration, default_value = "10ms")]
    pub job_time: Duration,
    /// Give up waiting for the jobs to finish after this long (the unfinished count as lost).
    #[arg(long, value_name = "D", value_parser = crate::duration, default_value = "10m")]
    pub timeout: Duration,
    /// Seed of the choice of workers to kill (default: from the clock; printed).
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Keep the evidence (store, run log, worker and server logs) in this new directory; by
    /// default a temporary directory, removed after a clean audit and kept after a failed one.
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// The redis-server program run with --store redis.
    #[arg(long, value_name = "PATH", default_value = "redis-server")]
    pub redis_server: PathBuf,
}

const AUDIT_HELP: &str = "\
Prints one table (stderr) and one JSON line (stdout):
  enqueued        jobs the store acknowledged
  completed/dead  acknowledged jobs whose rows end completed or dead
  lost            acknowledged jobs neither completed nor dead at the end (must be 0)
  double_settles  accepted settles beyond one per job, from the store's counters (must be 0)
  redeliveries    runs beyond the first of a job (a killed or paused worker's jobs run again)
  overlapping     jobs two of whose runs overlapped in time (the zombie's, at least once delivery)
  stale_refused   settles the store refused as stale or gone (a late settle, or one sent
                  again after a store error whose first try had landed)
  degraded_ms     time the workers spent backing off their store, summed
  completed_unseen, bad_log_lines
                  missing or unreadable evidence (must be 0)
Exit status: 0 when nothing was lost or settled twice and the evidence is whole, 1 otherwise.";

/// The store an audit runs on.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreArg {
    /// The embedded store, on a file in the audit's directory.
    Embedded,
    /// A redis-server started (and killed) by the audit.
    Redis,
    /// A Redis Cluster started (and failed over) by the audit.
    RedisCluster,
}

/// The figures an audit proves; the JSON line.
#[derive(Debug, Default, Serialize, PartialEq, Eq)]
pub struct Figures {
    /// The store audited.
    pub store: &'static str,
    /// Jobs acknowledged by the store.
    pub enqueued: u64,
    /// Acknowledged jobs that completed.
    pub completed: u64,
    /// Acknowledged jobs that ended dead.
    pub dead: u64,
    /// Acknowledged jobs neither completed nor dead.
    pub lost: u64,
    /// Of those, the jobs whose row is gone (the others were still waiting or running).
    pub missing: u64,
    /// Completed jobs with no run in the run log that reached its end: evidence missing.
    pub completed_unseen: u64,
    /// Lines of the run log that are not a run's start or end: evidence unreadable.
    pub bad_log_lines: u64,
    /// Accepted settles beyond one per finished job.
    pub double_settles: u64,
    /// Runs beyond the first of a job.
    pub redeliveries: u64,
    /// Jobs two of whose runs overlapped in time.
    pub overlapping: u64,
    /// Settles refused as stale (the worker no longer held the job).
    pub stale_refused: u64,
    /// Of those, the paused worker's.
    pub zombie_stale_refused: u64,
    /// `lease lost` warnings of the workers.
    pub leases_lost: u64,
    /// Workers killed.
    pub worker_kills: u32,
    /// Redis servers killed.
    pub redis_kills: u32,
    /// Failovers of the queue's master (Redis Cluster).
    pub failovers: u32,
    /// Replicas every write waited for (0: none).
    pub wait: u32,
    /// Time the queue's slot had no master, summed over the failovers.
    pub masterless_ms: u64,
    /// Whether a worker was paused past its lease.
    pub zombie: bool,
    /// Time the workers spent degraded (backing off an unreachable store), summed.
    pub degraded_ms: u64,
    /// Wall time of the run, from the first worker to the last job finished.
    pub run_ms: u64,
}

impl Figures {
    /// Nothing lost, nothing settled twice, and the evidence whole.
    pub fn clean(&self) -> bool {
        self.lost == 0 && self.double_settles == 0 && self.completed_unseen == 0 && self.bad_log_lines == 0
    }
}

/// Runs `emq audit`. `url` is the global `--url`: refused unless left at its default, since the
/// audit kills and restarts its store and so makes one of its own.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    if url != crate::DEFAULT_URL {
        bail!(
            "emq audit runs on a store of its own (it kills and restarts it): choose it with --store, \
             and leave --url and EMQ_URL unset (got {})",
            echomq::store::redact_url(url)
        );
    }
    let redis_kills = match (args.store, args.redis_kills) {
        (StoreArg::Embedded, Some(n)) if n > 0 => {
            bail!("--redis-kills needs --store redis (the embedded store has no server to kill)")
        }
        (StoreArg::Embedded, _) => 0,
        (StoreArg::Redis, n) => n.unwrap_or(1),
        (StoreArg::RedisCluster, Some(n)) if n > 0 => {
            bail!("--redis-kills needs --store redis (a cluster's fault is --failovers)")
        }
        (StoreArg::RedisCluster, _) => 0,
    };
    let failovers = match (args.store, args.failovers) {
        (StoreArg::RedisCluster, n) => n.unwrap_or(1),
        (_, Some(n)) if n > 0 => bail!("--failovers needs --store redis-cluster"),
        _ => 0,
    };
    if args.wait > 0 && args.store != StoreArg::RedisCluster {
        bail!("--wait needs --store redis-cluster (the other stores have no replicas)");
    }
    if args.workers == 0 || args.jobs == 0 {
        bail!("--workers and --jobs must be at least 1");
    }
    // the workers' options, refused here as `emq work` would refuse them: a worker that exits at
    // start would leave every job unfinished, which must not read as a loss
    echomq::ConsumerOptions::default()
        .with_concurrency(args.concurrency)
        .with_lease(args.lease)
        .with_max_attempts(args.max_attempts)
        .validate()?;
    if args.zombie && args.workers < 2 {
        bail!("--zombie needs at least 2 workers: another must redeliver the paused one's jobs");
    }
    let (dir, keep) = match &args.dir {
        Some(d) => {
            std::fs::create_dir(d).with_context(|| format!("cannot create {} (it must not exist)", d.display()))?;
            (d.clone(), true)
        }
        None => {
            let d = std::env::temp_dir().join(format!("emq-audit-{}-{}", std::process::id(), now_ns()));
            std::fs::create_dir(&d).with_context(|| format!("cannot create {}", d.display()))?;
            (d, false)
        }
    };
    let result = audit(&args, redis_kills, failovers, &dir).await;
    let clean = matches!(&result, Ok(f) if f.clean());
    if keep || !clean {
        note(&format!("evidence kept in {}", dir.display()));
    } else if let Err(e) = std::fs::remove_dir_all(&dir) {
        note(&format!("cannot remove {}: {e}", dir.display()));
    }
    let figures = result?;
    out!("{}", serde_json::to_string(&figures)?);
    if clean {
        Ok(0)
    } else {
        note(&format!(
            "FAILED: {} lost ({} rows missing), {} double settles; evidence: {} completed jobs with no ended run, {} unreadable log lines",
            figures.lost, figures.missing, figures.double_settles, figures.completed_unseen, figures.bad_log_lines
        ));
        Ok(1)
    }
}

/// The servers of an audit on Redis.
enum Servers {
    Single(RedisServer),
    Cluster(cluster::ClusterServers),
}

async fn audit(args: &Args, redis_kills: u32, failovers: u32, dir: &Path) -> anyhow::Result<Figures> {
    let mut servers = match args.store {
        StoreArg::Redis => Some(Servers::Single(RedisServer::start(&args.redis_server, dir).await?)),
        StoreArg::RedisCluster => Some(Servers::Cluster(
            cluster::ClusterServers::start(&args.redis_server, dir).await?,
        )),
        StoreArg::Embedded => None,
    };
    let url = match &servers {
        Some(Servers::Single(s)) => format!("redis://127.0.0.1:{}", s.port),
        Some(Servers::Cluster(c)) if args.wait > 0 => format!("{}?wait={}", c.url(), args.wait),
        Some(Servers::Cluster(c)) => c.url(),
        None => format!("sqlite:{}", dir.join("audit.db").display()),
    };
    let faults = Faults { redis_kills, failovers };
    let result = faults_and_evidence(args, faults, dir, &url, &mut servers).await;
    match servers.as_mut() {
        Some(Servers::Single(s)) => s.stop().await,
        Some(Servers::Cluster(c)) => c.stop().await,
        None => {}
    }
    result
}

/// The server faults an audit fires.
#[derive(Clone, Copy)]
struct Faults {
    redis_kills: u32,
    failovers: u32,
}

async fn faults_and_evidence(
    args: &Args,
    faults: Faults,
    dir: &Path,
    url: &str,
    servers: &mut Option<Servers>,
) -> anyhow::Result<Figures> {
    let store = crate::open(url).await?;
    let queue = QueueName::new(QUEUE)?;
    // every finished row is kept for the evidence
    let keep = u32::try_from(args.jobs).unwrap_or(u32::MAX);
    store
        .set_retention(
            &queue,
            &Retention::default().keep(keep).max_age(Duration::from_secs(7 * 86_400)),
        )
        .await?;
    let ids = enqueue(&*store, &queue, args.jobs).await?;
    note(&format!(
        "{} jobs enqueued on {}",
        ids.len(),
        echomq::store::redact_url(url)
    ));

    let seed = args.seed.unwrap_or_else(|| now_ns() ^ u64::from(std::process::id()));
    note(&format!("seed {seed} (--seed {seed} repeats the choice of workers)"));
    let mut rng = XorShift(seed.max(1));
    let mut pool = Workers::new(args, dir, url)?;
    for _ in 0..args.workers {
        pool.spawn()?;
    }
    let started = Instant::now();
    let mut plan = plan(args.worker_kills, faults.redis_kills, faults.failovers, args.zombie);
    let total = ids.len() as u64;
    let mut zombie: Option<tokio::task::JoinHandle<()>> = None;
    let mut fired = Fired::default();
    loop {
        pool.check_alive()?;
        let counts = tokio::time::timeout(Duration::from_secs(2), store.counts(&queue)).await;
        let (finished, idle) = match counts {
            Ok(Ok(c)) => (c.completed + c.failed, c.pending + c.scheduled + c.active == 0),
            _ => (0, false),
        };
        let progress = finished as f64 / total as f64;
        while plan.first().is_some_and(|(at, _)| *at <= progress) {
            let (_, fault) = plan.remove(0);
            match fault {
                Fault::KillWorker => {
                    if pool.kill_random(&mut rng).await? {
                        fired.worker_kills += 1;
                    }
                }
                Fault::KillRedis => {
                    if let Some(Servers::Single(s)) = servers.as_mut() {
                        s.kill_and_restart(args.redis_down).await?;
                        fired.redis_kills += 1;
                    }
                }
                Fault::Failover => {
                    if let Some(Servers::Cluster(c)) = servers.as_mut() {
                        let down = c.fail_over(&queue).await?;
                        note(&format!(
                            "failover: the queue's slot had no master for {} ms",
                            down.as_millis()
                        ));
                        fired.failovers += 1;
                        fired.masterless_ms += millis(down);
                    }
                }
                Fault::Pause => {
                    let frozen = pool.pause_random(&mut rng)?;
                    let pause = args.lease * 3;
                    zombie = Some(tokio::spawn(async move {
                        tokio::time::sleep(pause).await;
                        frozen.thaw();
                    }));
                    fired.zombie = true;
                }
            }
        }
        if idle && plan.is_empty() && zombie.as_ref().is_none_or(|z| z.is_finished()) {
            break;
        }
        if started.elapsed() > args.timeout {
            note(&format!(
                "timed out after {}; the unfinished jobs count as lost",
                humantime::format_duration(args.timeout)
            ));
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let run_ms = millis(started.elapsed());
    if let Some(z) = zombie {
        let _ = z.await;
    }
    pool.stop_all().await;

    let mut figures = Figures {
        store: match args.store {
            StoreArg::Embedded => "embedded",
            StoreArg::Redis => "redis",
            StoreArg::RedisCluster => "redis-cluster",
        },
        enqueued: total,
        worker_kills: fired.worker_kills,
        redis_kills: fired.redis_kills,
        failovers: fired.failovers,
        wait: args.wait,
        masterless_ms: fired.masterless_ms,
        zombie: fired.zombie,
        run_ms,
        ..Figures::default()
    };
    let log = std::fs::read_to_string(dir.join("runs.log")).context("cannot read the run log")?;
    let runs = analyse_runs(&log, &pool.killed, now_ns());
    for id in &ids {
        match store.get(&queue, id).await? {
            Some(row) if row.state == JobState::Completed => {
                figures.completed += 1;
                figures.completed_unseen += u64::from(!runs.ended.contains(id.as_str()));
            }
            Some(row) if row.state == JobState::Dead => figures.dead += 1,
            Some(_) => figures.lost += 1,
            None => {
                figures.lost += 1;
                figures.missing += 1;
            }
        }
    }
    let counts = store.counts(&queue).await?;
    figures.double_settles =
        counts.completed.saturating_sub(figures.completed) + counts.failed.saturating_sub(figures.dead);

    figures.redeliveries = runs.redeliveries;
    figures.bad_log_lines = runs.bad_lines;
    figures.overlapping = runs.overlapping;
    for w in &pool.all {
        let text = std::fs::read_to_string(&w.log).unwrap_or_default();
        let logs = analyse_worker_log(&text);
        figures.stale_refused += logs.stale_refused;
        figures.leases_lost += logs.leases_lost;
        figures.degraded_ms += logs.degraded_ms;
        if Some(w.id) == pool.paused {
            figures.zombie_stale_refused += logs.stale_refused;
        }
    }
    eprint_table(&figures);
    Ok(figures)
}

/// Enqueues `n` jobs (payload: their index) and returns the ids acknowledged.
async fn enqueue(store: &dyn Store, queue: &QueueName, n: u64) -> anyhow::Result<Vec<JobId>> {
    let mut ids = Vec::with_capacity(usize::try_from(n).unwrap_or(0));
    let mut next = 0u64;
    while next < n {
        let batch: Vec<NewJob> = (next..n.min(next + ENQUEUE_BATCH as u64))
            .map(|i| NewJob::new(i.to_string()))
            .collect();
        next += batch.len() as u64;
        for e in store.enqueue(queue, &batch).await? {
            if let Enqueued::New(id) = e {
                ids.push(id);
            }
        }
    }
    Ok(ids)
}

/// One injected fault, at a fraction of the jobs finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    KillWorker,
    KillRedis,
    Failover,
    Pause,
}

/// The faults fired so far.
#[derive(Default)]
struct Fired {
    worker_kills: u32,
    redis_kills: u32,
    failovers: u32,
    masterless_ms: u64,
    zombie: bool,
}

/// The faults spread evenly over the first 90% of the run (sorted by when they fire): the last
/// jobs finish undisturbed, so the audit ends once every recovery has run.
fn plan(worker_kills: u32, redis_kills: u32, failovers: u32, zombie: bool) -> Vec<(f64, Fault)> {
    let spread = |n: u32, offset: f64| (0..n).map(move |i| (0.9 * (f64::from(i) + offset) / f64::from(n.max(1)), ()));
    let mut plan: Vec<(f64, Fault)> = spread(worker_kills, 0.5)
        .map(|(at, ())| (at, Fault::KillWorker))
        .chain(spread(redis_kills, 0.7).map(|(at, ())| (at, Fault::KillRedis)))
        .chain(spread(failovers, 0.6).map(|(at, ())| (at, Fault::Failover)))
        .collect();
    if zombie {
        plan.push((0.4, Fault::Pause));
    }
    plan.sort_by(|a, b| a.0.total_cmp(&b.0));
    plan
}

/// One run of a job in the run log: its id, attempt and command's pid.
type RunKey<'a> = (&'a str, &'a str, &'a str);
/// Its worker, start and end (ns since the epoch; no end: the command was killed).
type Run = (u32, u64, Option<u64>);

/// What the run log proves.
#[derive(Debug, Default, PartialEq, Eq)]
struct Runs {
    redeliveries: u64,
    overlapping: u64,
    /// Lines of the log that are not a run's `start` or `end`: the evidence is unreadable.
    bad_lines: u64,
    /// The jobs with a run that reached its `end` line.
    ended: HashSet<String>,
}

/// Reads the run log: runs beyond the first of each job, and jobs with two runs overlapping in
/// time. A run without its `end` line ended when its worker was killed (its command died with it),
/// or, if that worker was never killed, is taken to have run until `now` (an overlap is never
/// missed for want of a line).
fn analyse_runs(log: &str, killed: &HashMap<u32, u64>, now: u64) -> Runs {
    let mut runs: HashMap<RunKey, Run> = HashMap::new();
    let mut bad_lines = 0;
    for line in log.lines() {
        let f: Vec<&str> = line.split(' ').collect();
        let parsed = match f[..] {
            [what @ ("start" | "end"), id, attempt, worker, pid, at] => {
                match (worker.parse::<u32>(), at.parse::<u64>()) {
                    (Ok(worker), Ok(at)) => Some((what, id, attempt, worker, pid, at)),
                    _ => None,
                }
            }
            _ => None,
        };
        let Some((what, id, attempt, worker, pid, at)) = parsed else {
            bad_lines += 1;
            continue;
        };
        let run = runs.entry((id, attempt, pid)).or_insert((worker, at, None));
        if what == "start" {
            run.1 = at;
        } else {
            run.2 = Some(at);
        }
    }
    let mut by_job: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    let mut out = Runs {
        bad_lines,
        ..Runs::default()
    };
    for ((id, _, _), (worker, start, end)) in runs {
        if end.is_some() {
            out.ended.insert(id.to_string());
        }
        let end = end.or_else(|| killed.get(&worker).copied()).unwrap_or(now);
        by_job.entry(id).or_default().push((start, end));
    }
    for spans in by_job.values_mut() {
        out.redeliveries += spans.len() as u64 - 1;
        spans.sort_unstable();
        let mut reach = 0;
        let mut overlaps = false;
        for (i, &(start, end)) in spans.iter().enumerate() {
            if i > 0 && start < reach {
                overlaps = true;
            }
            reach = reach.max(end);
        }
        out.overlapping += u64::from(overlaps);
    }
    out
}

/// What one worker's log says.
#[derive(Debug, Default, PartialEq, Eq)]
struct WorkerLog {
    stale_refused: u64,
    leases_lost: u64,
    degraded_ms: u64,
}

fn analyse_worker_log(text: &str) -> WorkerLog {
    let mut out = WorkerLog::default();
    for line in text.lines() {
        if line.contains("settle refused") {
            out.stale_refused += 1;
        } else if line.contains("lease lost") {
            out.leases_lost += 1;
        } else if let Some(rest) = line.split("degraded_ms=").nth(1) {
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            out.degraded_ms += digits.parse::<u64>().unwrap_or(0);
        }
    }
    out
}

#[allow(clippy::print_stderr)] // the table is for the reader; the JSON line is the output
fn eprint_table(f: &Figures) {
    let mut t = String::new();
    let rows: [(&str, String); 15] = [
        ("store", f.store.to_string()),
        ("enqueued (acknowledged)", f.enqueued.to_string()),
        ("completed", f.completed.to_string()),
        ("dead", f.dead.to_string()),
        ("lost", f.lost.to_string()),
        ("double settles", f.double_settles.to_string()),
        ("redeliveries", f.redeliveries.to_string()),
        ("overlapping runs (jobs)", f.overlapping.to_string()),
        ("settles refused as stale", f.stale_refused.to_string()),
        ("  of them the paused worker's", f.zombie_stale_refused.to_string()),
        ("leases lost", f.leases_lost.to_string()),
        (
            "faults",
            format!(
                "{} worker kills, {} redis kills, {} failovers, zombie {}",
                f.worker_kills,
                f.redis_kills,
                f.failovers,
                if f.zombie { "yes" } else { "no" }
            ),
        ),
        (
            "replicas each write waited for",
            format!("{} (slot masterless {} ms in all)", f.wait, f.masterless_ms),
        ),
        ("time degraded (workers, summed)", format!("{} ms", f.degraded_ms)),
        ("run time", format!("{} ms", f.run_ms)),
    ];
    for (k, v) in rows {
        let _ = writeln!(t, "  {k:<32} {v}");
    }
    eprintln!("emq audit:\n{t}");
}

/// The `emq work` processes of an audit.
struct Workers {
    exe: PathBuf,
    url: String,
    dir: PathBuf,
    concurrency: usize,
    lease: Duration,
    max_attempts: u32,
    command: String,
    live: Vec<(u32, Child)>,
    /// Every worker started: its id and log.
    all: Vec<WorkerInfo>,
    /// Worker id -> when it was killed (ns since the epoch).
    killed: HashMap<u32, u64>,
    /// The paused worker's id.
    paused: Option<u32>,
    /// The process groups of its commands, frozen with it.
    frozen_groups: Vec<Pid>,
}

struct WorkerInfo {
    id: u32,
    log: PathBuf,
}

impl Workers {
    fn new(args: &Args, dir: &Path, url: &str) -> anyhow::Result<Self> {
        let exe = std::env::current_exe().context("cannot find this program to run the workers")?;
        Ok(Self {
            exe,
            url: url.to_string(),
            dir: dir.to_path_buf(),
            concurrency: args.concurrency,
            lease: args.lease,
            max_attempts: args.max_attempts,
            command: job_command(args.job_time),
            live: Vec::new(),
            all: Vec::new(),
            killed: HashMap::new(),
            paused: None,
            frozen_groups: Vec::new(),
        })
    }

    fn spawn(&mut self) -> anyhow::Result<()> {
        let id = u32::try_from(self.all.len()).unwrap_or(u32::MAX);
        let log = self.dir.join(format!("worker-{id}.log"));
        let stderr = std::fs::File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let child = Command::new(&self.exe)
            .args(["work", QUEUE, "--url", &self.url, "--exec", &self.command])
            .args(["--concurrency", &self.concurrency.to_string()])
            .args(["--lease", &humantime::format_duration(self.lease).to_string()])
            .args(["--max-attempts", &self.max_attempts.to_string()])
            .env("EMQ_AUDIT_WORKER", id.to_string())
            .env("EMQ_AUDIT_LOG", self.dir.join("runs.log"))
            .env("EMQ_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .kill_on_drop(true)
            .spawn()
            .context("cannot start a worker")?;
        self.live.push((id, child));
        self.all.push(WorkerInfo { id, log });
        Ok(())
    }

    /// Fails naming the first worker that exited on its own (not killed by the audit): its jobs
    /// would wait for nothing, and its log says why it ended.
    fn check_alive(&mut self) -> anyhow::Result<()> {
        for (id, child) in &mut self.live {
            if let Ok(Some(status)) = child.try_wait() {
                let log = self.dir.join(format!("worker-{id}.log"));
                bail!("worker {id} exited on its own ({status}); see {}", log.display());
            }
        }
        Ok(())
    }

    /// SIGKILLs a random worker that is not paused, waits for it and starts a fresh one; false
    /// when every worker is paused (none killed).
    async fn kill_random(&mut self, rng: &mut XorShift) -> anyhow::Result<bool> {
        let candidates: Vec<usize> = (0..self.live.len())
            .filter(|&i| Some(self.live[i].0) != self.paused)
            .collect();
        let Some(&i) = candidates.get(rng.below(candidates.len())) else {
            return Ok(false);
        };
        let (id, mut child) = self.live.remove(i);
        let _ = child.start_kill();
        let _ = child.wait().await;
        self.killed.insert(id, now_ns());
        self.spawn()?;
        Ok(true)
    }

    /// Freezes a random worker with its running commands, as a paused VM or container would: the
    /// worker first (it starts no command meanwhile), then each command's process group (its
    /// supervisor leads it). The caller resumes them with [`Frozen::thaw`].
    fn pause_random(&mut self, rng: &mut XorShift) -> anyhow::Result<Frozen> {
        let (id, child) = self
            .live
            .get(rng.below(self.live.len()))
            .context("no worker to pause")?;
        let pid = child
            .id()
            .and_then(|p| Pid::from_raw(p as i32))
            .context("the worker to pause has exited")?;
        kill_process(pid, Signal::STOP).context("cannot pause a worker")?;
        let groups: Vec<Pid> = children(pid);
        for &g in &groups {
            let _ = kill_process_group(g, Signal::STOP);
        }
        note(&format!("froze worker {id} and {} running command(s)", groups.len()));
        self.paused = Some(*id);
        self.frozen_groups.clone_from(&groups);
        Ok(Frozen { worker: pid, groups })
    }

    /// SIGTERMs every worker (they finish their running commands and exit), then waits for them;
    /// one still running after STOP_MAX is killed.
    async fn stop_all(&mut self) {
        // a frozen worker's commands too, had the audit ended before its thaw
        for &g in &self.frozen_groups {
            let _ = kill_process_group(g, Signal::CONT);
        }
        for (_, child) in &self.live {
            if let Some(pid) = child.id().and_then(|p| Pid::from_raw(p as i32)) {
                let _ = kill_process(pid, Signal::CONT);
                let _ = kill_process(pid, Signal::TERM);
            }
        }
        for (_, child) in &mut self.live {
            if tokio::time::timeout(STOP_MAX, child.wait()).await.is_err() {
                let _ = child.start_kill();
                let _ = child.wait().await;
            }
        }
    }
}

/// A paused worker and its commands' process groups.
struct Frozen {
    worker: Pid,
    groups: Vec<Pid>,
}

impl Frozen {
    /// Resumes the commands first, then the worker that reads their verdicts.
    fn thaw(self) {
        for g in self.groups {
            let _ = kill_process_group(g, Signal::CONT);
        }
        let _ = kill_process(self.worker, Signal::CONT);
    }
}

/// The children of a process, from Linux's `/proc/PID/task/TID/children` (none elsewhere).
fn children(pid: Pid) -> Vec<Pid> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{}/task", pid.as_raw_nonzero())) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for task in tasks.flatten() {
        let text = std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
        out.extend(
            text.split_whitespace()
                .filter_map(|p| p.parse::<i32>().ok())
                .filter_map(Pid::from_raw),
        );
    }
    out
}

/// The shell command of every job: a `start` line, the job's work, an `end` line, each appended
/// to the run log (`>>` opens it with `O_APPEND`: one short line is one atomic write).
fn job_command(job_time: Duration) -> String {
    let line = |what: &str| {
        format!(
            "printf '{what} %s %s %s %s %s\\n' \"$EMQ_JOB_ID\" \"$EMQ_ATTEMPTS\" \"$EMQ_AUDIT_WORKER\" \"$$\" \"$(date +%s%N)\" >>\"$EMQ_AUDIT_LOG\""
        )
    };
    let work = if job_time.is_zero() {
        String::new()
    } else {
        format!(" && sleep {:.3}", job_time.as_secs_f64())
    };
    format!("{}{work} && {}", line("start"), line("end"))
}

/// A redis-server of the audit's own: AOF with `appendfsync always`, on a free loopback port.
struct RedisServer {
    program: PathBuf,
    dir: PathBuf,
    port: u16,
    child: Option<Child>,
    starts: u32,
}

impl RedisServer {
    async fn start(program: &Path, dir: &Path) -> anyhow::Result<Self> {
        let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
        let mut s = Self {
            program: program.to_path_buf(),
            dir: dir.to_path_buf(),
            port,
            child: None,
            starts: 0,
        };
        s.spawn().await?;
        Ok(s)
    }

    async fn spawn(&mut self) -> anyhow::Result<()> {
        let log = self.dir.join(format!("redis-{}.log", self.starts));
        self.starts += 1;
        let out = std::fs::File::create(&log)?;
        let child = Command::new(&self.program)
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "cannot run {} (Debian: apt-get install redis-server)",
                    self.program.display()
                )
            })?;
        let child = self.child.insert(child);
        until_own_server(child, self.port, &log, RESTART_MAX, "redis-server").await
    }

    async fn kill_and_restart(&mut self, down: Duration) -> anyhow::Result<()> {
        self.stop().await;
        tokio::time::sleep(down).await;
        self.spawn().await
    }

    async fn stop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
    }
}

/// Waits (`within` at most) until the server `child` started answers on `port` as itself (`INFO
/// server` names its `process_id`): fails when it exited (its log, `log`, says why), did not
/// answer in time, or another process answers there (one that took the port first). `what` names
/// the server in the errors.
async fn until_own_server(
    child: &mut Child,
    port: u16,
    log: &Path,
    within: Duration,
    what: &str,
) -> anyhow::Result<()> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}"))?;
    let deadline = Instant::now() + within;
    let own = child.id();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            bail!("{what} exited at start ({status}); see {}", log.display());
        }
        let conn = tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection()).await;
        if let Ok(Ok(mut c)) = conn {
            if let Ok(info) = redis::cmd("INFO").arg("server").query_async::<String>(&mut c).await {
                let pid = info
                    .lines()
                    .find_map(|l| l.strip_prefix("process_id:"))
                    .and_then(|p| p.trim().parse::<u32>().ok());
                if pid.is_some() && pid == own {
                    return Ok(());
                }
                bail!("port {port} is served by another process (pid {pid:?}), not the audit's {what}; run again");
            }
        }
        if Instant::now() > deadline {
            bail!(
                "{what} did not answer within {}s; see {}",
                within.as_secs(),
                log.display()
            );
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A small deterministic generator for the choice of workers (a seed repeats it).
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        if n == 0 {
            0
        } else {
            (self.0 % n as u64) as usize
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

#[allow(clippy::print_stderr)] // an operator's notice on stderr
fn note(msg: &str) {
    eprintln!("emq audit: {msg}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_count_redeliveries_and_overlaps_with_a_killed_worker_s_run_ending_at_its_kill() {
        let log = "\
start 1 1 0 100 10
end 1 1 0 100 20
start 2 1 0 101 10
start 2 2 1 200 50
end 2 2 1 200 60
start 3 1 2 300 10
start 3 2 1 201 15
end 3 2 1 201 25
end 3 1 2 300 30
";
        // job 2's first run has no end: its worker 0 was killed at 40, before the rerun at 50
        let killed = HashMap::from([(0, 40)]);
        let runs = analyse_runs(log, &killed, 1000);
        assert_eq!((runs.redeliveries, runs.overlapping, runs.bad_lines), (2, 1, 0));
        let ended: HashSet<String> = ["1", "2", "3"].map(String::from).into();
        assert_eq!(runs.ended, ended);
        // had worker 0 not been killed, its unended run reaches `now` and overlaps the rerun
        let runs = analyse_runs(log, &HashMap::new(), 1000);
        assert_eq!((runs.redeliveries, runs.overlapping), (2, 2));
    }

    #[test]
    fn unreadable_lines_of_the_run_log_are_counted_not_skipped() {
        // a `date` without nanoseconds, a torn line, a stranger's line
        let log = "start 1 1 0 100 %N\nend 1 1\nhello\nstart 2 1 0 101 10\n";
        let runs = analyse_runs(log, &HashMap::new(), 1000);
        assert_eq!(runs.bad_lines, 3);
        assert!(runs.ended.is_empty());
    }

    #[test]
    fn a_worker_log_yields_its_refused_settles_lost_leases_and_degraded_time() {
        let text = "\
2026-12-03T10:00:00Z  WARN echomq::consumer::settle: settle refused: this consumer no longer holds the job queue=audit id=7
2026-12-03T10:00:00Z  WARN echomq::consumer::locks: lease lost; cancelling the handler queue=audit id=8
2026-12-03T10:00:01Z  WARN echomq::consumer::run: store reachable again; consuming queue=audit degraded_ms=1500
2026-12-03T10:00:09Z  WARN echomq::consumer::run: store reachable again; consuming queue=audit degraded_ms=250
";
        assert_eq!(
            analyse_worker_log(text),
            WorkerLog {
                stale_refused: 1,
                leases_lost: 1,
                degraded_ms: 1750
            }
        );
    }

    #[test]
    fn the_plan_spreads_the_faults_over_the_first_nine_tenths_in_order() {
        let plan = plan(2, 1, 1, true);
        let faults: Vec<Fault> = plan.iter().map(|p| p.1).collect();
        assert_eq!(
            faults,
            [
                Fault::KillWorker,
                Fault::Pause,
                Fault::Failover,
                Fault::KillRedis,
                Fault::KillWorker
            ]
        );
        assert!(plan.iter().all(|p| p.0 > 0.0 && p.0 < 0.9));
        assert!(plan.windows(2).all(|w| w[0].0 <= w[1].0));
    }

    #[test]
    fn the_job_command_appends_a_start_and_an_end_line() {
        let c = job_command(Duration::from_millis(10));
        assert!(c.starts_with("printf 'start %s %s %s %s %s\\n'"), "{c}");
        assert!(c.contains("&& sleep 0.010 && printf 'end "), "{c}");
        assert_eq!(c.matches(">>\"$EMQ_AUDIT_LOG\"").count(), 2, "{c}");
        assert!(!job_command(Duration::ZERO).contains("sleep"));
    }
}
