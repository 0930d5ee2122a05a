//! `emq demo`: the main job for a newcomer. On the store the URL names — by default the embedded
//! store on `./echomq.db`, no server needed — in its own queue `demo` (announced; no other queue is
//! touched): enqueue N jobs across flat and grouped lanes, some delayed, some that fail once and
//! retry, some that end dead; process them with a consumer under a live progress bar; then print a
//! summary and the `emq` commands to look further.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::store::LimitTarget;
use echomq::{Consumer, ConsumerOptions, GroupName, JobContext, NewJob, QueueName, Verdict};

/// The demo's queue.
const QUEUE: &str = "demo";
/// Groups of the grouped jobs, each limited to this many at once.
const GROUPS: usize = 8;
const GROUP_LIMIT: u32 = 2;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Jobs to enqueue.
    #[arg(long, default_value_t = 20_000)]
    jobs: usize,
    /// Handlers at once.
    #[arg(long, default_value_t = 32)]
    concurrency: usize,
    /// Write the log (the consumer's lines on failed jobs, retries, warnings) to FILE; without it
    /// the terminal shows only the progress bar and the summary.
    #[arg(long, value_name = "FILE")]
    pub log: Option<std::path::PathBuf>,
    /// Log to stderr, beside the progress bar.
    #[arg(short, long, conflicts_with = "log")]
    pub verbose: bool,
}

/// What each job does, by its number: mostly succeed; every 20th fails once, then succeeds; every
/// 100th always fails (dead after 2 attempts); every 25th waits 0.5–1.5 s before it may run.
fn kind(i: usize) -> &'static str {
    if i % 100 == 99 {
        "poison"
    } else if i % 20 == 19 {
        "flaky"
    } else {
        "ok"
    }
}

#[derive(Default)]
struct Seen {
    /// enqueue → first start, ms, per lane ("flat" or the group)
    waits: BTreeMap<String, Vec<f64>>,
}

#[allow(clippy::print_stderr)] // the demo talks to its user
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    anyhow::ensure!(args.jobs > 0, "--jobs must be at least 1");
    let store = crate::open(url).await?;
    let q = QueueName::new(QUEUE)?;
    let at = echomq::store::redact_url(url);
    eprintln!("emq demo: queue '{QUEUE}' on {at} — emptied first; no other queue is touched");
    store.obliterate(&q, true).await?;
    store.set_group_limit(&q, &LimitTarget::Default, GROUP_LIMIT).await?;

    let clock = Instant::now();
    let stamp = |i: usize| {
        format!(
            r#"{{"n":{i},"kind":"{}","t":{}}}"#,
            kind(i),
            clock.elapsed().as_micros()
        )
    };
    let (mut flat, mut grouped): (Vec<NewJob>, Vec<Vec<NewJob>>) = (Vec::new(), vec![Vec::new(); GROUPS]);
    let t0 = Instant::now();
    for i in 0..args.jobs {
        let mut job = NewJob::new(stamp(i));
        if kind(i) == "poison" {
            job = job.with_max_attempts(2);
        }
        if i % 25 == 24 {
            job = job.with_delay(Duration::from_millis(500 + (i as u64 * 37) % 1000));
        }
        if i % 10 < 3 {
            let n = grouped.iter().map(Vec::len).sum::<usize>();
            grouped[n % GROUPS].push(job);
        } else {
            flat.push(job);
        }
    }
    store.enqueue(&q, &flat).await?;
    for (g, jobs) in grouped.iter().enumerate() {
        store
            .genqueue(&q, &GroupName::new(format!("tenant-{g}"))?, jobs)
            .await?;
    }
    let enqueue_s = t0.elapsed().as_secs_f64();
    eprintln!(
        "enqueued {} jobs in {enqueue_s:.2} s ({:.0} jobs/s): {} flat, {} across {GROUPS} groups (limit {GROUP_LIMIT} each)",
        args.jobs,
        args.jobs as f64 / enqueue_s,
        flat.len(),
        args.jobs - flat.len()
    );

    let seen = Arc::new(Mutex::new(Seen::default()));
    let s = seen.clone();
    let handler = move |job: JobContext| {
        let started = clock.elapsed().as_micros() as f64;
        let payload: serde_json::Value = job.json().unwrap_or_default();
        let kind = payload["kind"].as_str().unwrap_or("ok").to_string();
        if job.attempt() == 1 {
            if let Some(t) = payload["t"].as_f64() {
                let lane = job.group().as_ref().map_or("flat".to_string(), |g| g.to_string());
                if let Ok(mut s) = s.lock() {
                    s.waits.entry(lane).or_default().push((started - t) / 1000.0);
                }
            }
        }
        async move {
            match (kind.as_str(), job.attempt()) {
                ("poison", _) => Verdict::Error("poison: this job always fails".into()),
                ("flaky", 1) => Verdict::Error("flaky: the first attempt fails".into()),
                _ => Verdict::Done,
            }
        }
    };
    let opts = ConsumerOptions::default()
        .with_concurrency(args.concurrency)
        .with_retry(echomq::RetryPolicy::fixed(Duration::from_millis(200)))
        .with_beat(Duration::from_millis(250));
    let t1 = Instant::now();
    let consumer = Consumer::start(store.clone(), q.clone(), handler, opts)?;
    let bar = indicatif::ProgressBar::with_draw_target(Some(args.jobs as u64), indicatif::ProgressDrawTarget::stderr());
    bar.set_style(
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} settled  {per_sec}  eta {eta}  {msg}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    let counts = loop {
        let c = store.counts(&q).await?;
        let settled = c.completed + c.dead;
        bar.set_position(settled);
        bar.set_message(format!("retried {} dead {}", c.retried, c.dead));
        if settled >= args.jobs as u64 {
            break c;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let secs = t1.elapsed().as_secs_f64();
    bar.finish_and_clear();
    consumer.stop(Duration::from_secs(10)).await?;

    let seen = seen.lock().map_err(|_| anyhow::anyhow!("a handler panicked"))?;
    let mut all: Vec<f64> = seen.waits.values().flatten().copied().collect();
    all.sort_by(f64::total_cmp);
    let pct = |v: &[f64], p: f64| {
        v.get(((p / 100.0) * v.len() as f64) as usize)
            .or(v.last())
            .copied()
            .unwrap_or(0.0)
    };
    out!(
        "processed {} jobs in {secs:.2} s: {:.0} jobs/s",
        args.jobs,
        args.jobs as f64 / secs
    );
    out!(
        "enqueue → start (first attempt, includes delayed jobs' wait and the backlog): p50 {:.1} ms, p99 {:.1} ms",
        pct(&all, 50.0),
        pct(&all, 99.0)
    );
    out!(
        "completed {}, dead {} (poison jobs, 2 attempts each); {} failed attempts in all, {} of them retried",
        counts.completed,
        counts.dead,
        counts.retried + counts.dead,
        counts.retried
    );
    out!("per-lane fairness (jobs started, median wait):");
    for (lane, waits) in seen.waits.iter() {
        let mut w = waits.clone();
        w.sort_by(f64::total_cmp);
        out!("  {lane:<10} {:>6} jobs  p50 wait {:>8.1} ms", w.len(), pct(&w, 50.0));
    }
    out!();
    out!("look further:");
    out!("  emq stats {QUEUE}                      sizes and counters");
    out!("  emq list {QUEUE} --state dead          the jobs that ended dead");
    out!("  emq job {QUEUE} <id> --json            one job, every field");
    out!("  emq retry {QUEUE} --all-dead           run the dead ones again");
    out!("  emq work {QUEUE} --exec 'cat'          a worker in any language: the payload on stdin");
    out!("  emq dashboard                      all of it in a browser: http://127.0.0.1:7070/");
    Ok(0)
}
