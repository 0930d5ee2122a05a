//! `emq bench pools`: two worker pools by kind on one queue. Worker A runs only `send_email`
//! (concurrency 4), with `--backlog` of its jobs waiting; `--jobs` `resize` jobs are pushed; worker
//! B, which runs only `resize`, starts `--start-after-ms` later. The figure is how long after B's
//! start its jobs are all done: a queue that keeps pools apart finishes them at once (worker A
//! never claims a `resize` job, however many of its own wait). Then, B parked and A still busy,
//! `--singles` more `resize` jobs are pushed one at a time: how long each took from its push to its
//! handler's start (a parked pool is woken by its own kind's jobs).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::{Job, JobContext, JobError, Outcome, Queue, QueueName, Store, Worker};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::emit;

/// The options of the workload (`emq bench pools`).
#[derive(clap::Args, Debug)]
pub struct PoolsArgs {
    /// Jobs of pool B's kind.
    #[arg(long, default_value_t = 8)]
    pub jobs: usize,
    /// Jobs of pool A's kind waiting before the run (pool A drains them meanwhile).
    #[arg(long, default_value_t = 0)]
    pub backlog: usize,
    /// How long after pool B's jobs are pushed pool B starts.
    #[arg(long, default_value_t = 300)]
    pub start_after_ms: u64,
    /// How long a job of pool A's kind takes.
    #[arg(long, default_value_t = 5)]
    pub a_job_ms: u64,
    /// The longest the run waits for pool B's jobs.
    #[arg(long, default_value_t = 180)]
    pub timeout_secs: u64,
    /// `resize` jobs pushed one at a time (100 ms apart) once pool B is idle.
    #[arg(long, default_value_t = 10)]
    pub singles: usize,
}

#[derive(Serialize, Deserialize)]
struct SendEmail {
    n: usize,
}

impl Job for SendEmail {
    const KIND: &'static str = "send_email";
}

#[derive(Serialize, Deserialize)]
struct Resize {
    n: usize,
}

impl Job for Resize {
    const KIND: &'static str = "resize";
}

pub async fn run(store: &Arc<dyn Store>, q: &QueueName, args: PoolsArgs) -> anyhow::Result<()> {
    anyhow::ensure!(args.jobs > 0, "--jobs must be at least 1");
    store.set_retention(q, &echomq::Retention::default()).await?;
    let queue = Queue::new(store.clone(), q.as_str())?;
    for start in (0..args.backlog).step_by(1000) {
        queue
            .push_many((start..args.backlog.min(start + 1000)).map(|n| SendEmail { n }))
            .await?;
    }
    let a_ms = args.a_job_ms;
    let a_done = Arc::new(AtomicU64::new(0));
    let done = a_done.clone();
    let a = Worker::new(store.clone(), q.as_str())?
        .on(move |_job: SendEmail, _ctx: JobContext| {
            let done = done.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(a_ms)).await;
                done.fetch_add(1, Ordering::Relaxed);
                Ok::<_, JobError>(())
            }
        })
        .concurrency(4)
        .start()?;
    let mut handles = Vec::with_capacity(args.jobs);
    for n in 0..args.jobs {
        handles.push(queue.push(Resize { n }).await?);
    }
    tokio::time::sleep(Duration::from_millis(args.start_after_ms)).await;
    let b_started = Instant::now();
    // each start of a job of pool B, by its n
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel::<(usize, Instant)>();
    let b = Worker::new(store.clone(), q.as_str())?
        .on(move |job: Resize, _ctx: JobContext| {
            let _ = started_tx.send((job.n, Instant::now()));
            async move { Ok::<_, JobError>(()) }
        })
        .concurrency(4)
        .start()?;
    let timeout = Duration::from_secs(args.timeout_secs);
    let mut each = Vec::with_capacity(handles.len());
    let mut failed = 0;
    for h in &handles {
        let left = timeout.saturating_sub(b_started.elapsed());
        match h.wait(left).await {
            Ok(Outcome::Completed(_)) => each.push(b_started.elapsed().as_secs_f64()),
            Ok(_) => failed += 1,
            Err(echomq::Error::Timeout { .. }) => break,
            Err(e) => return Err(e.into()),
        }
    }
    let all_done = (each.len() == handles.len()).then(|| b_started.elapsed().as_secs_f64());
    // pool B parked, pool A busy: each single's push to its start
    while started_rx.try_recv().is_ok() {}
    let mut singles_ms = Vec::with_capacity(args.singles);
    for i in 0..args.singles {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let pushed = Instant::now();
        queue.push(Resize { n: args.jobs + i }).await?;
        let started = tokio::time::timeout(Duration::from_secs(10), started_rx.recv()).await;
        if let Ok(Some((_, at))) = started {
            singles_ms.push(at.saturating_duration_since(pushed).as_secs_f64() * 1000.0);
        }
    }
    let mut sorted = singles_ms.clone();
    sorted.sort_by(f64::total_cmp);
    let median = sorted.get(sorted.len() / 2).copied();
    let max = sorted.last().copied();
    b.stop(Duration::from_secs(5)).await?;
    a.stop(Duration::from_secs(5)).await?;
    emit(
        "g_pools",
        json!({
            "jobs": args.jobs, "backlog": args.backlog, "start_after_ms": args.start_after_ms,
            "a_job_ms": args.a_job_ms,
            "b_jobs_done": each.len(), "b_jobs_not_completed": failed,
            "all_done_after_b_start_s": all_done,
            "first_done_after_b_start_s": each.iter().copied().reduce(f64::min),
            "a_jobs_done_meanwhile": a_done.load(Ordering::Relaxed),
            "singles": args.singles, "singles_started": singles_ms.len(),
            "single_push_to_start_ms_median": median, "single_push_to_start_ms_max": max,
        }),
    );
    anyhow::ensure!(all_done.is_some(), "pool B's jobs were not all done within {timeout:?}");
    Ok(())
}
