//! `emq bench`: the peer comparison's workloads against the store the URL names, one JSON
//! line per run on stdout with the peers' field names, `lib: "echomq"`. Queue `bench` only: it is
//! obliterated before each run and nothing else is touched. Redis figures come from `INFO` deltas
//! around the measured part (the measuring connection's own INFO calls excluded); a store without
//! them prints null.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, QueueName, Store, Verdict};
use serde_json::{json, Value};

mod dashboard;
mod pools;
mod rate;

/// The benchmark queue.
const QUEUE: &str = "bench";

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    workload: Workload,
}

#[derive(clap::Subcommand, Debug)]
enum Workload {
    /// a_enqueue_bulk: N jobs in batches of 1000.
    Enqueue {
        /// Jobs (N).
        #[arg(long, default_value_t = 100_000, value_parser = at_least_one::<usize>)]
        jobs: usize,
        /// Typed jobs (`Queue::push_many` of a small serde job, its kind on each row) instead of
        /// raw payloads.
        #[arg(long)]
        typed: bool,
    },
    /// b_process: N waiting no-op jobs, one consumer in this process at concurrency C.
    Process {
        /// Concurrency.
        concurrency: usize,
        /// Jobs (N).
        #[arg(long, default_value_t = 100_000, value_parser = at_least_one::<usize>)]
        jobs: usize,
        /// Through the typed front door: jobs pushed with `Queue::push_many` and run by a
        /// `Worker` handler that decodes each (a small serde job), instead of bytes and a raw
        /// `Consumer`.
        #[arg(long)]
        typed: bool,
        /// Priorities in use: job i has priority i mod 10 (all ten levels mixed), instead of none.
        #[arg(long, conflicts_with = "typed")]
        priorities: bool,
        /// A queue rate limit set for the run (MAX/PER; set it far above the rate to measure what
        /// enforcing one costs), its burst --burst.
        #[arg(long, value_name = "MAX/PER", value_parser = rate::limit)]
        rate_limit: Option<echomq::RateLimit>,
        /// The burst of --rate-limit.
        #[arg(long, default_value_t = 1, requires = "rate_limit")]
        burst: u32,
        /// Claimed jobs the consumer may hold beyond its free slots (0: none).
        #[arg(long, default_value_t = 0)]
        prefetch: usize,
        /// Finished jobs kept under the default retention (the newest 10,000), instead of none
        /// (the peers' harnesses remove completed jobs).
        #[arg(long)]
        keep_results: bool,
    },
    /// f_dashboard: the dashboard's pages with N waiting jobs in G groups, R requests each
    /// (median and 99th percentile), `/metrics` against the empty queue's.
    Dashboard(dashboard::DashboardArgs),
    /// e_rate_limit: consumer processes against a queue rate limit (or a group's among unlimited
    /// groups, with --groups), the starts on the store's clock.
    RateLimit(rate::RateArgs),
    /// g_pools: two worker pools by kind on one queue (pool B starts after its jobs were pushed),
    /// how long after its start pool B's jobs are done.
    Pools(pools::PoolsArgs),
    /// One consumer process of rate-limit (not for use by hand).
    #[command(hide = true)]
    RateLimitChild(rate::ChildArgs),
    /// c_latency: an idle consumer, 2000 enqueues at 200/s, enqueue → handler start (one clock).
    Latency {
        /// Concurrency.
        #[arg(default_value_t = 1)]
        concurrency: usize,
        /// Enqueues.
        #[arg(long, default_value_t = 2000, value_parser = at_least_one::<usize>)]
        count: usize,
        /// Enqueues per second.
        #[arg(long, default_value_t = 200, value_parser = at_least_one::<u64>)]
        rate: u64,
    },
    /// d_idle: an idle consumer (concurrency 10) for S seconds.
    Idle {
        /// Seconds.
        #[arg(default_value_t = 10, value_parser = at_least_one::<u64>)]
        secs: u64,
    },
}

/// A count of at least 1: a workload of none measures nothing.
fn at_least_one<T: std::str::FromStr + PartialOrd + From<u8>>(s: &str) -> Result<T, String> {
    match s.parse::<T>() {
        Ok(n) if n >= T::from(1) => Ok(n),
        _ => Err(format!("{s:?} is not a whole number of at least 1")),
    }
}

/// A Redis INFO reader for the deltas; absent on stores that are not Redis.
struct Meter {
    conn: Option<redis::aio::MultiplexedConnection>,
}

#[derive(Clone, Default)]
struct Snap {
    cmds: HashMap<String, u64>,
    cpu: f64,
    mem: i64,
    net_in: i64,
    at: Option<Instant>,
}

impl Meter {
    /// A reader of the server that holds `q` (on a cluster, the master of its slot).
    async fn new(url: &str, q: &QueueName) -> Meter {
        let Some((scheme, rest)) = url.split_once("://") else {
            return Meter { conn: None };
        };
        let scheme = match scheme {
            "redis" | "redis+cluster" => "redis",
            "rediss" | "rediss+cluster" => "rediss",
            _ => return Meter { conn: None },
        };
        let creds = rest.rsplit_once('@').map(|(c, _)| format!("{c}@")).unwrap_or_default();
        let server = match echomq::store::redis::RedisStore::open(url).await {
            Ok(store) => store.server_of(q).await.ok(),
            Err(_) => None,
        };
        let conn = match server.map(|hp| redis::Client::open(format!("{scheme}://{creds}{hp}"))) {
            Some(Ok(c)) => c.get_multiplexed_async_connection().await.ok(),
            _ => None,
        };
        Meter { conn }
    }

    async fn snap(&self) -> Option<Snap> {
        let mut conn = self.conn.clone()?;
        let text: String = redis::cmd("INFO").arg("everything").query_async(&mut conn).await.ok()?;
        let mut s = Snap {
            at: Some(Instant::now()),
            ..Snap::default()
        };
        let mut cpu = 0.0;
        for line in text.lines() {
            let Some((k, v)) = line.split_once(':') else { continue };
            if let Some(cmd) = k.strip_prefix("cmdstat_") {
                let calls = v
                    .split(',')
                    .next()
                    .and_then(|c| c.strip_prefix("calls="))
                    .and_then(|c| c.parse().ok());
                s.cmds.insert(cmd.to_string(), calls.unwrap_or(0));
            }
            match k {
                "used_cpu_user" | "used_cpu_sys" => cpu += v.trim().parse::<f64>().unwrap_or(0.0),
                "used_memory" => s.mem = v.trim().parse().unwrap_or(0),
                "total_net_input_bytes" => s.net_in = v.trim().parse().unwrap_or(0),
                _ => {}
            }
        }
        s.cpu = cpu;
        Some(s)
    }
}

/// The deltas between two snapshots, the measuring connection's INFO excluded.
struct Delta {
    cmds: HashMap<String, u64>,
    cpu_s: f64,
    mem: i64,
    net_in: i64,
    secs: f64,
}

fn delta(a: &Option<Snap>, b: &Option<Snap>) -> Option<Delta> {
    let (a, b) = (a.as_ref()?, b.as_ref()?);
    let mut cmds = HashMap::new();
    for (k, v) in &b.cmds {
        if k == "info" || k.starts_with("config") {
            continue;
        }
        let d = v.saturating_sub(*a.cmds.get(k).unwrap_or(&0));
        if d > 0 {
            cmds.insert(k.clone(), d);
        }
    }
    Some(Delta {
        cmds,
        cpu_s: b.cpu - a.cpu,
        mem: b.mem - a.mem,
        net_in: b.net_in - a.net_in,
        secs: b.at?.duration_since(a.at?).as_secs_f64(),
    })
}

impl Delta {
    fn total(&self) -> u64 {
        self.cmds.values().sum()
    }
}

/// This process's CPU time (user + system), seconds.
fn own_cpu_s() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
        return 0.0;
    };
    let f: Vec<&str> = rest.split(' ').collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((p / 100.0) * sorted.len() as f64)
        .floor()
        .min(sorted.len() as f64 - 1.0) as usize]
}

fn emit(test: &str, mut fields: Value) {
    fields["lib"] = json!("echomq");
    fields["version"] = json!(env!("CARGO_PKG_VERSION"));
    fields["test"] = json!(test);
    out!("{fields}");
}

fn payloads(n: usize) -> Vec<NewJob> {
    (0..n).map(|i| NewJob::new(format!("{{\"n\":{i}}}"))).collect()
}

/// The typed workloads' job: the same JSON as [`payloads`], with a kind.
#[derive(serde::Serialize, serde::Deserialize)]
struct BenchJob {
    n: usize,
}

impl echomq::Job for BenchJob {
    const KIND: &'static str = "bench";
}

/// `n` jobs onto the queue: raw payloads, or typed ones through a `Queue`, 1000 to a call.
async fn push(store: &Arc<dyn Store>, q: &QueueName, n: usize, typed: bool) -> anyhow::Result<()> {
    if typed {
        let queue = echomq::Queue::new(store.clone(), q.as_str())?;
        for start in (0..n).step_by(1000) {
            queue
                .push_many((start..n.min(start + 1000)).map(|n| BenchJob { n }))
                .await?;
        }
    } else {
        for chunk in payloads(n).chunks(1000) {
            store.enqueue(q, chunk).await?;
        }
    }
    Ok(())
}

async fn reset(store: &Arc<dyn Store>, q: &QueueName) -> anyhow::Result<()> {
    store.obliterate(q, true).await?;
    Ok(())
}

pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let store: Arc<dyn Store> = crate::open(url).await?;
    let q = QueueName::new(QUEUE)?;
    // a consumer of another run's queue: nothing reset
    if let Workload::RateLimitChild(a) = args.workload {
        rate::child(store, &q, a).await?;
        return Ok(0);
    }
    let meter = Meter::new(url, &q).await;
    // scripts loaded and the queue's keys created once before any window opens
    store.enqueue(&q, &payloads(1)).await?;
    reset(&store, &q).await?;
    // finished rows are not kept, as the peers' harnesses remove completed jobs (the
    // process workload's JSON says so: results_kept)
    store.set_retention(&q, &echomq::Retention::off()).await?;
    match args.workload {
        Workload::Enqueue { jobs, typed } => enqueue(&store, &q, &meter, jobs, typed).await?,
        Workload::Process {
            concurrency,
            jobs,
            typed,
            priorities,
            rate_limit,
            burst,
            prefetch,
            keep_results,
        } => {
            if keep_results {
                store.set_retention(&q, &echomq::Retention::default()).await?;
            }
            if let Some(l) = rate_limit {
                let l = l.with_burst(burst)?;
                store.set_rate_limit(&q, &echomq::RateTarget::Queue, Some(l)).await?;
            }
            let opts = ConsumerOptions::default()
                .with_concurrency(concurrency)
                .with_prefetch(prefetch);
            process(&store, &q, &meter, jobs, opts, typed, priorities).await?
        }
        Workload::RateLimit(a) => rate::run(&store, url, &q, a).await?,
        Workload::Dashboard(a) => dashboard::run(&store, &q, a).await?,
        Workload::Pools(a) => pools::run(&store, &q, a).await?,
        Workload::RateLimitChild(_) => {}
        Workload::Latency {
            concurrency,
            count,
            rate,
        } => latency(&store, &q, concurrency, count, rate).await?,
        Workload::Idle { secs } => idle(&store, &q, &meter, secs).await?,
    }
    reset(&store, &q).await?;
    Ok(0)
}

async fn enqueue(store: &Arc<dyn Store>, q: &QueueName, meter: &Meter, n: usize, typed: bool) -> anyhow::Result<()> {
    let jobs = payloads(n);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let a = meter.snap().await;
    let t = Instant::now();
    if typed {
        push(store, q, n, true).await?;
    } else {
        for chunk in jobs.chunks(1000) {
            store.enqueue(q, chunk).await?;
        }
    }
    let secs = t.elapsed().as_secs_f64();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let b = meter.snap().await;
    let d = delta(&a, &b);
    emit(
        "a_enqueue_bulk",
        json!({
            "n": n, "chunk": 1000, "typed": typed, "secs": secs, "jobs_per_s": n as f64 / secs,
            "waiting": store.counts(q).await?.pending,
            "mem_bytes_per_waiting_job": d.as_ref().map(|d| d.mem as f64 / n as f64),
            "redis_cmds_per_job": d.as_ref().map(|d| d.total() as f64 / n as f64),
            "redis_cpu_s": d.as_ref().map(|d| d.cpu_s),
            "cmd_breakdown": d.as_ref().map(|d| json!(d.cmds)),
        }),
    );
    Ok(())
}

async fn process(
    store: &Arc<dyn Store>,
    q: &QueueName,
    meter: &Meter,
    n: usize,
    opts: ConsumerOptions,
    typed: bool,
    priorities: bool,
) -> anyhow::Result<()> {
    let (concurrency, prefetch) = (opts.concurrency, opts.prefetch);
    if priorities {
        let mut jobs = payloads(n);
        for (i, j) in jobs.iter_mut().enumerate() {
            j.priority = Some((i % 10) as u8);
        }
        for chunk in jobs.chunks(1000) {
            store.enqueue(q, chunk).await?;
        }
    } else {
        push(store, q, n, typed).await?;
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let a = meter.snap().await;
    let cpu0 = own_cpu_s();
    let t = Instant::now();
    let running = if typed {
        let worker = echomq::Worker::new(store.clone(), q.as_str())?
            .on(move |_job: BenchJob, _ctx: JobContext| {
                s.fetch_add(1, Ordering::Relaxed);
                async { Ok::<_, echomq::JobError>(()) }
            })
            .options(opts)
            .start()?;
        Running::Worker(worker)
    } else {
        let consumer = Consumer::start(
            store.clone(),
            q.clone(),
            move |_job: JobContext| {
                s.fetch_add(1, Ordering::Relaxed);
                async { Verdict::Done }
            },
            opts,
        )?;
        Running::Consumer(consumer)
    };
    // every handler ran; then the settles of the last ones
    while started.load(Ordering::Relaxed) < n {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    while store.counts(q).await?.completed < n as u64 {
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let secs = t.elapsed().as_secs_f64();
    let cpu = own_cpu_s() - cpu0;
    let b = meter.snap().await;
    match running {
        Running::Worker(w) => w.stop(Duration::from_secs(10)).await?,
        Running::Consumer(c) => c.stop(Duration::from_secs(10)).await?,
    }
    let d = delta(&a, &b);
    emit(
        "b_process",
        json!({
            "concurrency": concurrency, "prefetch": prefetch, "n": n, "typed": typed, "priorities": priorities, "results_kept": store.retention(q).await?.keep > 0,
            "secs": secs, "jobs_per_s": n as f64 / secs,
            "worker_cpu_s": cpu, "worker_cpu_pct": 100.0 * cpu / secs, "worker_cpu_us_per_job": 1e6 * cpu / n as f64,
            "redis_cpu_s": d.as_ref().map(|d| d.cpu_s),
            "redis_cpu_pct": d.as_ref().map(|d| 100.0 * d.cpu_s / d.secs),
            "redis_cpu_us_per_job": d.as_ref().map(|d| 1e6 * d.cpu_s / n as f64),
            "redis_cmds_per_job": d.as_ref().map(|d| d.total() as f64 / n as f64),
            "evalsha_per_job": d.as_ref().map(|d| *d.cmds.get("evalsha").unwrap_or(&0) as f64 / n as f64),
            "net_in_bytes_per_job": d.as_ref().map(|d| d.net_in as f64 / n as f64),
            "cmd_breakdown": d.as_ref().map(|d| json!(d.cmds)),
        }),
    );
    Ok(())
}

/// What runs the process workload: a raw consumer, or a typed worker.
enum Running {
    Consumer(Consumer),
    Worker(echomq::WorkerHandle),
}

async fn latency(
    store: &Arc<dyn Store>,
    q: &QueueName,
    concurrency: usize,
    count: usize,
    rate: u64,
) -> anyhow::Result<()> {
    let clock = Instant::now();
    let lat = Arc::new(Mutex::new(Vec::with_capacity(count)));
    let l = lat.clone();
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            // one clock for both ends: the enqueue's instant rides in the payload
            let now = clock.elapsed().as_micros() as f64;
            if let Some(sent) = std::str::from_utf8(job.payload())
                .ok()
                .and_then(|s| s.parse::<f64>().ok())
            {
                if let Ok(mut l) = l.lock() {
                    l.push((now - sent) / 1000.0);
                }
            }
            async { Verdict::Done }
        },
        ConsumerOptions::default().with_concurrency(concurrency),
    )?;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let period = Duration::from_micros(1_000_000 / rate.max(1));
    let start = Instant::now();
    // the producer is a task of the runtime, as an application's are (a request handler's, say)
    let producer = {
        let (store, q) = (store.clone(), q.clone());
        tokio::spawn(async move {
            let mut add_ms = Vec::with_capacity(count);
            for i in 0..count {
                let due = start + period * i as u32;
                tokio::time::sleep_until(due.into()).await;
                let t = Instant::now();
                let sent = clock.elapsed().as_micros();
                store.enqueue(&q, &[NewJob::new(sent.to_string())]).await?;
                add_ms.push(t.elapsed().as_secs_f64() * 1000.0);
            }
            anyhow::Ok(add_ms)
        })
    };
    let mut add_ms = producer.await??;
    let send_s = start.elapsed().as_secs_f64();
    let deadline = Instant::now() + Duration::from_secs(30);
    while lat.lock().map(|l| l.len()).unwrap_or(0) < count && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    consumer.stop(Duration::from_secs(10)).await?;
    let mut v = lat.lock().map(|l| l.clone()).unwrap_or_default();
    v.sort_by(f64::total_cmp);
    add_ms.sort_by(f64::total_cmp);
    emit(
        "c_latency",
        json!({
            "concurrency": concurrency, "n": count, "target_rate": rate, "actual_rate": count as f64 / send_s,
            "received": v.len(), "p50_ms": percentile(&v, 50.0), "p90_ms": percentile(&v, 90.0),
            "p99_ms": percentile(&v, 99.0), "max_ms": v.last(), "min_ms": v.first(),
            "add_call_p50_ms": percentile(&add_ms, 50.0), "add_call_p99_ms": percentile(&add_ms, 99.0),
        }),
    );
    Ok(())
}

async fn idle(store: &Arc<dyn Store>, q: &QueueName, meter: &Meter, secs: u64) -> anyhow::Result<()> {
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        |_job: JobContext| async { Verdict::Done },
        ConsumerOptions::default().with_concurrency(10),
    )?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let a = meter.snap().await;
    let cpu0 = own_cpu_s();
    let t = Instant::now();
    tokio::time::sleep(Duration::from_secs(secs)).await;
    let el = t.elapsed().as_secs_f64();
    let cpu = own_cpu_s() - cpu0;
    let b = meter.snap().await;
    consumer.stop(Duration::from_secs(10)).await?;
    let d = delta(&a, &b);
    emit(
        "d_idle",
        json!({
            "secs": el, "worker_concurrency": 10,
            "redis_cmds_per_s": d.as_ref().map(|d| d.total() as f64 / d.secs),
            "cmd_breakdown": d.as_ref().map(|d| json!(d.cmds)),
            "worker_cpu_pct": 100.0 * cpu / el,
            "redis_cpu_pct": d.as_ref().map(|d| 100.0 * d.cpu_s / d.secs),
        }),
    );
    Ok(())
}
