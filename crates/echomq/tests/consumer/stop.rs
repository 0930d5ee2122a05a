//! The loop's end: stop waits for a running handler and settles it; past its timeout it drops the
//! handler and releases the job, its attempt unused; a stop racing the enqueue that wakes the consumer leaves no job held;
//! abort drops handlers unsettled; ttl ends the loop and a supervisor starts a fresh one; a consumer
//! or a supervisor started outside a runtime is refused.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::consumer::Supervisor;
use echomq::{Consumer, ConsumerOptions, JobContext, JobState, NewJob, Verdict};

use crate::harness::{completed, fast, wait_until, Ctx};

async fn stop_waits_for_a_long_handler_and_settles_it(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    store.enqueue(q, &[NewJob::new("slow")]).await.unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            let s = s.clone();
            async move {
                s.notify_one();
                tokio::time::sleep(Duration::from_millis(400)).await;
                Verdict::Done
            }
        },
        fast(),
    )
    .unwrap();
    started.notified().await;
    let t = Instant::now();
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(300),
        "stop returned before the handler ended"
    );
    assert!(c.is_finished());
    assert_eq!(completed(store, q).await, 1, "the job settled before stop returned");
}

async fn stop_past_its_timeout_releases_the_job_with_its_attempt_unused(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let id = store.enqueue(q, &[NewJob::new("slow")]).await.unwrap()[0].id().clone();
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            let s = s.clone();
            async move {
                s.notify_one();
                tokio::time::sleep(Duration::from_secs(600)).await;
                Verdict::Done
            }
        },
        fast(),
    )
    .unwrap();
    started.notified().await;
    c.stop(Duration::from_millis(100)).await.unwrap();
    assert!(c.is_finished(), "stop returns once the job is released");
    let row = store.get(q, &id).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Pending, "ready again at once");
    assert_eq!((row.attempts, row.free), (0, 1), "its attempt unused");
    assert_eq!(completed(store, q).await, 0);
}

async fn a_stop_racing_the_enqueue_that_wakes_it_leaves_no_job_held(ctx: &Ctx) {
    // a job claimed (on the embedded store: handed over by the enqueue's transaction) while the
    // consumer stops still runs and settles: after each stop nothing is left active (claimed and
    // stranded until its lease lapses)
    let (store, q) = (&ctx.store, &ctx.q);
    let handler = |_job: JobContext| async move { Verdict::Done };
    let opts = ConsumerOptions::default()
        .with_beat(Duration::from_secs(10))
        .with_concurrency(4);
    let mut sent = 0;
    for round in 0..20u64 {
        let c = Consumer::start(store.clone(), q.clone(), handler, opts.clone()).unwrap();
        // parked by now, offering 4 slots (a pause, not a synchronisation: any moment is a case)
        tokio::time::sleep(Duration::from_millis(50)).await;
        let (s, qq) = (store.clone(), q.clone());
        let enqueue = tokio::spawn(async move { s.enqueue(&qq, &[NewJob::new("x"), NewJob::new("y")]).await });
        if round % 2 == 0 {
            // the enqueue first (on the embedded store its transaction hands the jobs over), then
            // the stop
            while !enqueue.is_finished() {
                tokio::task::yield_now().await;
            }
        } else {
            // the stop racing the enqueue, at a varying moment
            for _ in 0..round * 5 {
                tokio::task::yield_now().await;
            }
        }
        c.stop(Duration::from_secs(5)).await.unwrap();
        enqueue.await.unwrap().unwrap();
        sent += 2;
        let counts = store.counts(q).await.unwrap();
        assert_eq!(counts.active, 0, "round {round}: no job left held after the stop");
        assert_eq!(
            counts.completed + counts.pending,
            sent,
            "round {round}: every job done or waiting"
        );
    }
    ctx.assert_handed_over("hand-offs happened (the even rounds)", |n| n > 0);
}

async fn abort_drops_running_handlers_without_settling(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let id = store.enqueue(q, &[NewJob::new("x")]).await.unwrap()[0].id().clone();
    // set when the handler's future is dropped (it never returns on its own)
    struct Dropped(Arc<AtomicUsize>);
    impl Drop for Dropped {
        fn drop(&mut self) {
            self.0.store(1, Ordering::SeqCst);
        }
    }
    let (started, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (s, d) = (started.clone(), dropped.clone());
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            let guard = Dropped(d.clone());
            s.store(1, Ordering::SeqCst);
            async move {
                let _guard = guard;
                std::future::pending::<()>().await;
                Verdict::Done
            }
        },
        fast(),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "the handler running", || async {
        started.load(Ordering::SeqCst) == 1
    })
    .await;
    c.abort();
    wait_until(Duration::from_secs(5), "the handler dropped", || async {
        dropped.load(Ordering::SeqCst) == 1
    })
    .await;
    wait_until(Duration::from_secs(5), "the loop ended", || async { c.is_finished() }).await;
    // not a synchronisation: the time a wrong settle, sent before the abort took, would need to land
    tokio::time::sleep(Duration::from_millis(300)).await;
    let job = store.get(q, &id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempts),
        (JobState::Active, 1),
        "not settled: its lease lapses"
    );
    let counts = store.counts(q).await.unwrap();
    assert_eq!((counts.completed, counts.failed, counts.active), (0, 0, 1));
}

async fn ttl_ends_the_loop_and_a_supervisor_starts_a_fresh_one(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        |_job: JobContext| async { Verdict::Done },
        fast().with_ttl(Some(Duration::from_millis(150))),
    )
    .unwrap();
    c.wait_for(Duration::from_secs(5)).await.unwrap();
    assert!(c.is_finished());

    // each consumer on a store of its own, opened by the supervisor's factory
    let starts = Arc::new(AtomicUsize::new(0));
    let (s, opener, q2) = (starts.clone(), ctx.opener(), q.clone());
    let sup = Supervisor::start(
        move || {
            let (s, opener, q2) = (s.clone(), opener.clone(), q2.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                let store = opener.open().await?;
                Consumer::start(
                    store,
                    q2,
                    |_job: JobContext| async { Verdict::Done },
                    fast().with_ttl(Some(Duration::from_millis(100))),
                )
            }
        },
        Duration::from_millis(50),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "three consumers in turn", || async {
        starts.load(Ordering::SeqCst) >= 3
    })
    .await;
    store.enqueue(q, &[NewJob::new("x")]).await.unwrap();
    wait_until(
        Duration::from_secs(5),
        "the job done by a restarted consumer",
        || async { completed(store, q).await == 1 },
    )
    .await;
    sup.stop().await;
}

async fn a_consumer_started_outside_a_runtime_is_refused_with_an_error(ctx: &Ctx) {
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    // a thread of its own enters no runtime: the start must fail cleanly, not panic
    let err =
        std::thread::spawn(move || Consumer::start(store, q, |_job: JobContext| async { Verdict::Done }, fast()).err())
            .join()
            .expect("the start did not panic")
            .expect("a consumer started outside a runtime");
    assert!(
        matches!(err, echomq::Error::InvalidOption { field: "runtime", .. }),
        "{err:?}"
    );
}

/// Needs no store (the factory is never called), so it runs once rather than once per store.
#[test]
fn a_supervisor_started_outside_a_runtime_is_refused_with_an_error() {
    let Err(err) = Supervisor::start(
        || async {
            Err::<Consumer, _>(echomq::Error::Timeout {
                what: "never called",
                after: Duration::ZERO,
            })
        },
        Duration::from_millis(10),
    ) else {
        panic!("a supervisor started outside a runtime");
    };
    assert!(
        matches!(err, echomq::Error::InvalidOption { field: "runtime", .. }),
        "{err:?}"
    );
}

async fn a_running_consumer_is_in_the_registry_until_it_stops(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let release = Arc::new(tokio::sync::Notify::new());
    let started = Arc::new(AtomicUsize::new(0));
    let (r, s) = (release.clone(), started.clone());
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            let (r, s) = (r.clone(), s.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                r.notified().await;
                Verdict::Done
            }
        },
        fast().with_concurrency(3),
    )
    .unwrap();
    let listed = || async { store.consumers(q).await.unwrap() };
    wait_until(Duration::from_secs(5), "the consumer registered", || async {
        listed().await.len() == 1
    })
    .await;
    let entry = &listed().await[0];
    assert_eq!(
        (entry.concurrency, entry.in_hand, entry.pid),
        (3, 0, std::process::id())
    );
    assert_eq!(entry.ttl, Duration::from_millis(200) * 12, "twelve beats");
    // its jobs in hand at a later beat
    store.enqueue(q, &[NewJob::new("a"), NewJob::new("b")]).await.unwrap();
    wait_until(Duration::from_secs(5), "two jobs in hand", || async {
        started.load(Ordering::SeqCst) == 2 && listed().await.first().is_some_and(|e| e.in_hand == 2)
    })
    .await;
    // an unchanged entry is written again every six beats (1.2 s here)
    let beat = listed().await[0].beat_ms;
    wait_until(Duration::from_secs(5), "it beats on", || async {
        listed().await[0].beat_ms > beat
    })
    .await;
    release.notify_waiters();
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert!(listed().await.is_empty(), "a stopped consumer leaves the registry");
}

crate::consumer_cases!(
    a_running_consumer_is_in_the_registry_until_it_stops,
    stop_waits_for_a_long_handler_and_settles_it,
    stop_past_its_timeout_releases_the_job_with_its_attempt_unused,
    a_stop_racing_the_enqueue_that_wakes_it_leaves_no_job_held,
    abort_drops_running_handlers_without_settling,
    ttl_ends_the_loop_and_a_supervisor_starts_a_fresh_one,
    a_consumer_started_outside_a_runtime_is_refused_with_an_error,
);
