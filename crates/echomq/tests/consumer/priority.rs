//! Priorities under a consumer: a backlog of low-priority jobs while urgent ones keep arriving at
//! twice the consumer's speed. With aging, every low job runs before every urgent job that came
//! more than 9 × aging after it, so none starves; strict (aging 0), no low job runs while an
//! urgent one waits.

use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use echomq::{Consumer, JobContext, NewJob, QueueName, Store, Verdict};

use crate::harness::{completed, fast, wait_until, Ctx};

/// One claimed job as the handler saw it, in claim order (concurrency 1: claim order is run
/// order): its priority, and for an urgent job the wall-clock time just before its enqueue.
#[derive(Clone, Copy, Debug)]
struct Run {
    urgent: bool,
    sent_before: Option<SystemTime>,
}

/// Runs the backlog of `low` priority-9 jobs under one consumer whose handler enqueues two
/// priority-0 jobs per job it runs, for as long as low jobs are left (`urgent_cap` at most);
/// returns the runs in order and the time the backlog's enqueue returned.
async fn run_backlog(ctx: &Ctx, low: usize, urgent_cap: usize) -> (Vec<Run>, SystemTime) {
    let (store, q) = (&ctx.store, &ctx.q);
    for chunk in (0..low).collect::<Vec<_>>().chunks(1000) {
        let jobs: Vec<NewJob> = chunk
            .iter()
            .map(|_| NewJob::new(b"low".to_vec()).with_priority(9))
            .collect();
        store.enqueue(q, &jobs).await.unwrap();
    }
    let backlog_done = SystemTime::now();
    let runs: Arc<Mutex<Vec<Run>>> = Arc::default();
    let sent: Arc<Mutex<Vec<SystemTime>>> = Arc::default();
    let handler = {
        let (runs, sent, store, q) = (runs.clone(), sent.clone(), store.clone(), q.clone());
        move |job: JobContext| {
            let (runs, sent, store, q) = (runs.clone(), sent.clone(), store.clone(), q.clone());
            async move {
                let urgent = job.payload().starts_with(b"u");
                let sent_before = urgent.then(|| {
                    let i: usize = std::str::from_utf8(&job.payload()[1..]).unwrap().parse().unwrap();
                    sent.lock().unwrap()[i]
                });
                let lows_left = {
                    let mut runs = runs.lock().unwrap();
                    runs.push(Run { urgent, sent_before });
                    low - runs.iter().filter(|r| !r.urgent).count()
                };
                if lows_left > 0 {
                    push_urgent(&store, &q, &sent, 2, urgent_cap).await;
                }
                Verdict::Done
            }
        }
    };
    let c = Consumer::start(store.clone(), q.clone(), handler, fast()).unwrap();
    let runs_ref = &runs;
    // the order up to the last low job is what is checked: the urgent jobs still waiting then
    // are left in the case's own queue. The bound is a hang's, not a pace: a debug build of the
    // embedded engine beside the rest of the suite on two cores took past 120 s
    wait_until(Duration::from_secs(360), "every low job ran", move || async move {
        runs_ref.lock().unwrap().iter().filter(|r| !r.urgent).count() == low
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert!(completed(store, q).await >= low as u64);
    let runs = runs.lock().unwrap().clone();
    (runs, backlog_done)
}

/// `n` more priority-0 jobs in one enqueue (at most `cap` in all), noting the time before it.
async fn push_urgent(store: &Arc<dyn Store>, q: &QueueName, sent: &Mutex<Vec<SystemTime>>, n: usize, cap: usize) {
    let jobs: Vec<NewJob> = {
        let mut sent = sent.lock().unwrap();
        let now = SystemTime::now();
        let from = sent.len();
        let to = (from + n).min(cap);
        sent.resize(to, now);
        (from..to)
            .map(|i| NewJob::new(format!("u{i}")).with_priority(0))
            .collect()
    };
    if !jobs.is_empty() {
        store.enqueue(q, &jobs).await.unwrap();
    }
}

async fn with_aging_every_low_job_runs_before_urgent_jobs_that_came_9_agings_later(ctx: &Ctx) {
    let low = 10_000;
    // the case needs the first urgent job sent within 9 × aging of the backlog's last chunk of
    // 1000 (so some urgent jobs outrank low ones): 20 ms, or on a store (a build, a busy machine)
    // slower to enqueue a chunk, 9 × aging = twice a chunk's time and 500 ms for the consumer to
    // start and run its first job (100 ms was passed once on a loaded CI machine) — no more, as
    // every urgent job of that window runs first
    let pace = QueueName::new(format!("{}_pace", ctx.q.as_str())).unwrap();
    let chunk: Vec<NewJob> = (0..1000)
        .map(|_| NewJob::new(b"low".to_vec()).with_priority(9))
        .collect();
    let began = std::time::Instant::now();
    ctx.store.enqueue(&pace, &chunk).await.unwrap();
    let window = began.elapsed().as_millis() as u64 * 2 + 500;
    let aging = Duration::from_millis(20.max(window.div_ceil(9)));
    ctx.store.obliterate(&pace, true).await.unwrap();
    ctx.store.set_priority_aging(&ctx.q, aging).await.unwrap();
    let (runs, backlog_done) = run_backlog(ctx, low, 3 * low).await;
    let last_low = runs.iter().rposition(|r| !r.urgent).unwrap();
    assert_eq!(runs.iter().filter(|r| !r.urgent).count(), low, "no low job starved");
    // every urgent job sent more than 9 × aging after the backlog ran after the last low job
    let bound = backlog_done + 9 * aging + Duration::from_millis(5);
    let early = runs[..last_low]
        .iter()
        .filter(|r| r.sent_before.is_some_and(|t| t > bound))
        .count();
    assert_eq!(early, 0, "urgent jobs that came past 9 × aging ran before a low one");
    let urgent_before = runs[..last_low].iter().filter(|r| r.urgent).count();
    assert!(urgent_before > 0, "urgent jobs of the first 9 × aging ran first");
}

async fn strict_aging_runs_no_low_job_while_an_urgent_one_waits(ctx: &Ctx) {
    ctx.store.set_priority_aging(&ctx.q, Duration::ZERO).await.unwrap();
    let (low, urgent) = (200, 1000);
    let (runs, _) = run_backlog(ctx, low, urgent).await;
    // the first run found nothing urgent; from then on each run left two urgent jobs waiting
    // until the last was made: every urgent job runs before the rest of the backlog
    let kinds: Vec<bool> = runs.iter().map(|r| r.urgent).collect();
    assert!(!kinds[0], "the first claim found only the backlog");
    assert!(
        kinds[1..=urgent].iter().all(|u| *u),
        "a low job ran while an urgent one waited"
    );
    assert!(kinds[urgent + 1..].iter().all(|u| !*u));
    assert_eq!(kinds.len(), low + urgent);
}

// one Redis and the embedded store: the ranks are the scripts' on every Redis flavour, and the
// conformance cases check their order on each; a backlog of 10,000 costs a minute per store here
crate::consumer_cases!(
    @server redis_store,
    "redis",
    with_aging_every_low_job_runs_before_urgent_jobs_that_came_9_agings_later,
    strict_aging_runs_no_low_job_while_an_urgent_one_waits
);
crate::embedded_cases!(
    with_aging_every_low_job_runs_before_urgent_jobs_that_came_9_agings_later,
    strict_aging_runs_no_low_job_while_an_urgent_one_waits,
);
