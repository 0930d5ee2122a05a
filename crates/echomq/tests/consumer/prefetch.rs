//! Prefetch: a consumer holding claimed jobs beyond its free slots runs each job once, never more
//! at once than its concurrency; a stop gives the held jobs back with their attempts unused; a
//! cancel of a held job settles it cancelled without running it; prefetch without lease renewal is
//! refused.

use std::collections::HashSet;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::store::SettleOptions;
use echomq::{Consumer, ConsumerOptions, Error, JobContext, JobId, JobState, NewJob, Verdict};

use crate::harness::{completed, fast, wait_until, Ctx};

async fn prefetch_runs_every_job_once_and_never_more_at_once_than_the_concurrency(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    const JOBS: usize = 300;
    let jobs: Vec<NewJob> = (0..JOBS).map(|i| NewJob::new(format!("{i}"))).collect();
    for chunk in jobs.chunks(100) {
        store.enqueue(q, chunk).await.unwrap();
    }
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (s, r, m) = (seen.clone(), running.clone(), most.clone());
    let handler = move |job: JobContext| {
        let (s, r, m) = (s.clone(), r.clone(), m.clone());
        async move {
            let now = r.fetch_add(1, Ordering::SeqCst) + 1;
            m.fetch_max(now, Ordering::SeqCst);
            s.lock().unwrap().push(job.payload().to_vec());
            tokio::task::yield_now().await;
            r.fetch_sub(1, Ordering::SeqCst);
            Verdict::Done
        }
    };
    let opts = fast().with_concurrency(2).with_prefetch(50);
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    wait_until(Duration::from_secs(30), "every job completed", || async {
        completed(store, q).await == JOBS as u64
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), JOBS, "each job ran once");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), JOBS, "no job ran twice");
    assert!(
        most.load(Ordering::SeqCst) <= 2,
        "at most 2 at once: {}",
        most.load(Ordering::SeqCst)
    );
    let counts = store.counts(q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (0, 0));
}

/// The jobs of `ids` as the store keeps them.
async fn rows(ctx: &Ctx, ids: &[JobId]) -> Vec<echomq::JobRow> {
    let mut out = Vec::new();
    for id in ids {
        out.push(ctx.store.get(&ctx.q, id).await.unwrap().expect("the row"));
    }
    out
}

async fn a_stop_gives_the_held_jobs_back_with_their_attempts_unused(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let release = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let (r, s) = (release.clone(), started.clone());
    let handler = move |_job: JobContext| {
        let (r, s) = (r.clone(), s.clone());
        async move {
            s.fetch_add(1, Ordering::SeqCst);
            r.notified().await;
            Verdict::Done
        }
    };
    let opts = fast().with_concurrency(1).with_prefetch(4);
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    let ids: Vec<JobId> = store
        .enqueue(q, &(0..5).map(|i| NewJob::new(format!("{i}"))).collect::<Vec<_>>())
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id().clone())
        .collect();
    wait_until(Duration::from_secs(5), "one running, four held", || async {
        started.load(Ordering::SeqCst) == 1 && store.counts(q).await.unwrap().active == 5
    })
    .await;
    // the running job ends once the stop has begun
    let r = release.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        r.notify_waiters();
    });
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(started.load(Ordering::SeqCst), 1, "no held job started after the stop");
    let counts = store.counts(q).await.unwrap();
    assert_eq!((counts.completed, counts.pending, counts.active), (1, 4, 0));
    let back: Vec<_> = rows(ctx, &ids)
        .await
        .into_iter()
        .filter(|r| r.state == JobState::Pending)
        .collect();
    assert_eq!(back.len(), 4);
    for row in back {
        assert_eq!(
            (row.attempts, row.free),
            (0, 1),
            "a held job given back has used no attempt: {row:?}"
        );
    }
}

async fn a_cancel_of_a_held_job_settles_it_cancelled_without_running_it(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let release = Arc::new(tokio::sync::Notify::new());
    let ran = Arc::new(Mutex::new(Vec::new()));
    let (r, s) = (release.clone(), ran.clone());
    let handler = move |job: JobContext| {
        let (r, s) = (r.clone(), s.clone());
        async move {
            s.lock().unwrap().push(job.payload().to_vec());
            if job.payload() == b"a" {
                r.notified().await;
            }
            Verdict::Done
        }
    };
    let opts = fast().with_concurrency(1).with_prefetch(2);
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    let ids: Vec<JobId> = store
        .enqueue(q, &[NewJob::new("a"), NewJob::new("b")])
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id().clone())
        .collect();
    wait_until(Duration::from_secs(5), "a running, b held", || async {
        ran.lock().unwrap().len() == 1 && store.counts(q).await.unwrap().active == 2
    })
    .await;
    store
        .cancel(q, &ids[1], Some("operator"), SettleOptions::default())
        .await
        .unwrap();
    // settled at once, while a still runs: a held job never waits for its turn to be cancelled
    wait_until(Duration::from_secs(5), "b settled cancelled while a runs", || async {
        store
            .get(q, &ids[1])
            .await
            .unwrap()
            .is_some_and(|r| r.state == JobState::Cancelled)
    })
    .await;
    assert_eq!(ran.lock().unwrap().len(), 1, "a still runs");
    release.notify_waiters();
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(*ran.lock().unwrap(), [b"a".to_vec()], "b never ran");
    assert_eq!(completed(store, q).await, 1);
}

async fn prefetch_without_lease_renewal_is_refused(ctx: &Ctx) {
    let opts = ConsumerOptions::default().with_locks(false).with_prefetch(8);
    let r = Consumer::start(
        ctx.store.clone(),
        ctx.q.clone(),
        |_j: JobContext| async { Verdict::Done },
        opts,
    );
    match r {
        Err(Error::InvalidOption { field, .. }) => assert_eq!(field, "prefetch"),
        Err(e) => panic!("refused for another reason: {e}"),
        Ok(_) => panic!("prefetch without lease renewal was accepted"),
    }
}

crate::consumer_cases!(
    prefetch_runs_every_job_once_and_never_more_at_once_than_the_concurrency,
    a_stop_gives_the_held_jobs_back_with_their_attempts_unused,
    a_cancel_of_a_held_job_settles_it_cancelled_without_running_it,
    prefetch_without_lease_renewal_is_refused,
);
