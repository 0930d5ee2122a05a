//! Cancels: one sent from another handle reaches only its job, within a beat; a job cancelled while
//! no consumer listened never runs; a request meant for an earlier job spares a new job with the
//! same id; a stale settle of an earlier attempt leaves the next attempt tracked (renewed, and
//! reached by its cancel).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::store::{CancelOutcome, SettleOptions};
use echomq::{Consumer, ConsumerOptions, JobContext, JobId, JobState, NewJob, Retention, Verdict};
use tokio::sync::mpsc;

use crate::harness::{captured_log, counting, fast, stale_settle_reported, wait_until, Ctx};

async fn a_cancel_from_another_handle_reaches_only_its_job_within_a_beat(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let other = ctx.other_handle().await; // as another process would: its own connections
    let (started_tx, mut started) = mpsc::unbounded_channel::<Vec<u8>>();
    let (stopped_tx, mut stopped) = mpsc::unbounded_channel::<(Instant, Option<String>)>();
    let handler = move |job: JobContext| {
        let (started_tx, stopped_tx) = (started_tx.clone(), stopped_tx.clone());
        async move {
            let _ = started_tx.send(job.payload().to_vec());
            // "a" runs until cancelled; "b" ends on its own unless (wrongly) cancelled
            let runs_for = if job.payload() == b"a" {
                Duration::from_secs(30)
            } else {
                Duration::from_millis(800)
            };
            tokio::select! {
                c = job.cancel_token().cancelled() => {
                    let _ = stopped_tx.send((Instant::now(), c.reason.clone()));
                    Verdict::Cancel(c.reason.unwrap_or_default())
                }
                _ = tokio::time::sleep(runs_for) => Verdict::Done,
            }
        }
    };
    let beat = Duration::from_secs(1);
    let opts = ConsumerOptions::default()
        .with_beat(beat)
        .with_concurrency(2)
        .with_cancel(true);
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    let ids: Vec<JobId> = store
        .enqueue(q, &[NewJob::new("a"), NewJob::new("b")])
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id().clone())
        .collect();
    for _ in 0..2 {
        tokio::time::timeout(Duration::from_secs(5), started.recv())
            .await
            .expect("both running")
            .unwrap();
    }

    let asked = Instant::now();
    let reply = other
        .cancel(q, &ids[0], Some("operator"), SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(reply, CancelOutcome::Requested);
    let (at, reason) = tokio::time::timeout(Duration::from_secs(5), stopped.recv())
        .await
        .expect("the cancel reached the handler")
        .unwrap();
    let took = at.duration_since(asked);
    assert!(took < beat, "the cancel took {took:?}, more than a beat");
    assert_eq!(reason.as_deref(), Some("operator"));
    wait_until(Duration::from_secs(5), "both settled", || async {
        let c = store.counts(q).await.unwrap();
        c.completed + c.cancelled == 2
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert!(stopped.try_recv().is_err(), "only the one job saw a cancel");
    let counts = store.counts(q).await.unwrap();
    assert_eq!((counts.cancelled, counts.completed), (1, 1));
    let a = store.get(q, &ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.last_error.as_deref()),
        (JobState::Cancelled, Some("operator"))
    );
    assert_eq!(store.get(q, &ids[1]).await.unwrap().unwrap().state, JobState::Completed);
}

async fn a_job_cancelled_while_no_consumer_listened_never_runs(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let id = store.enqueue(q, &[NewJob::new("x")]).await.unwrap()[0].id().clone();
    // a holder that vanished: claimed under a short lease, then cancelled with nobody listening
    let held = store
        .claim(
            q,
            echomq::store::ClaimRequest::new(1, Duration::from_millis(30)).max_attempts(3),
        )
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        store
            .cancel(q, &id, Some("late"), SettleOptions::default())
            .await
            .unwrap(),
        CancelOutcome::Requested
    );
    ctx.wait_lease_lapsed(&id).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let c = Consumer::start(store.clone(), q.clone(), counting(&ran), fast().with_cancel(true)).unwrap();
    wait_until(Duration::from_secs(5), "the job cancelled", || async {
        store.counts(q).await.unwrap().cancelled == 1
    })
    .await;
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a cancelled job is never handed to a handler"
    );
    c.stop(Duration::from_secs(5)).await.unwrap();
}

/// How long the consumer remembers a cancel request for a job it does not hold
/// (`consumer::EARLY_CANCEL_TTL`, crate-private).
const EARLY_CANCEL_TTL: Duration = Duration::from_secs(5);

async fn a_cancel_for_an_earlier_job_spares_a_new_job_with_the_same_id(ctx: &Ctx) {
    // a cancel request for a job this consumer does not hold is remembered briefly (it may be
    // about to track it); a later job that reuses the id is not the one it was meant for
    let (store, q) = (&ctx.store, &ctx.q);
    // the old job's row is not kept once it finishes, so its id can be pushed again
    store.set_retention(q, &Retention::off()).await.unwrap();
    let id = JobId::new("job-a").unwrap();
    store
        .enqueue(q, &[NewJob::new("old").with_id(id.clone())])
        .await
        .unwrap();
    let held = store
        .claim(
            q,
            echomq::store::ClaimRequest::new(1, Duration::from_secs(30)).max_attempts(3),
        )
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (marker_tx, mut marker_cancelled) = mpsc::unbounded_channel::<Vec<u8>>();
    let (s, m) = (seen.clone(), marker_tx);
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let (s, m) = (s.clone(), m.clone());
            async move {
                if job.payload().starts_with(b"marker") {
                    // runs until its cancel reaches it: proof the requests before it arrived too
                    let why = job.cancel_token().cancelled().await;
                    let _ = m.send(job.payload().to_vec());
                    return Verdict::Cancel(why.reason.unwrap_or_default());
                }
                // not a synchronisation: the time in which a wrongly remembered request, checked
                // against the row once the job is tracked, would cancel it
                tokio::time::sleep(Duration::from_millis(300)).await;
                s.lock()
                    .unwrap()
                    .push((job.payload().to_vec(), job.cancel_token().is_cancelled()));
                Verdict::Done
            }
        },
        fast().with_cancel(true),
    )
    .unwrap();
    // a marker job running, cancelled, and its cancel arriving: requests sent from here on reach
    // the consumer, in the order sent
    let marker = |name: &'static str| {
        let (store, q) = (store.clone(), q.clone());
        async move {
            let id = store.enqueue(&q, &[NewJob::new(name)]).await.unwrap()[0].id().clone();
            wait_until(Duration::from_secs(5), "the marker running", || async {
                store
                    .get(&q, &id)
                    .await
                    .unwrap()
                    .is_some_and(|j| j.state == JobState::Active)
            })
            .await;
            store
                .cancel(&q, &id, Some("marker"), SettleOptions::default())
                .await
                .unwrap();
            id
        }
    };
    marker("marker-1").await;
    let got = tokio::time::timeout(Duration::from_secs(5), marker_cancelled.recv()).await;
    assert_eq!(got.expect("the consumer hears cancels"), Some(b"marker-1".to_vec()));

    // the request for the old job, which the test holds: remembered, as the consumer may be
    // about to track it; a second marker's cancel arriving after it says it has arrived too
    let asked = Instant::now();
    store
        .cancel(q, &id, Some("stop the old one"), SettleOptions::default())
        .await
        .unwrap();
    marker("marker-2").await;
    let got = tokio::time::timeout(Duration::from_secs(5), marker_cancelled.recv()).await;
    assert_eq!(got.expect("the second marker cancelled"), Some(b"marker-2".to_vec()));
    store
        .complete(
            q,
            &echomq::store::Completion::new(id.clone(), held[0].token),
            SettleOptions::default(),
        )
        .await
        .unwrap();
    store
        .enqueue(q, &[NewJob::new("new").with_id(id.clone())])
        .await
        .unwrap();
    wait_until(Duration::from_secs(5), "the new job ran", || async {
        !seen.lock().unwrap().is_empty()
    })
    .await;
    // the new job was tracked while the request was still remembered: else this proves nothing
    assert!(
        asked.elapsed() < EARLY_CANCEL_TTL,
        "the new job ran {:?} after the request, past the time it is remembered",
        asked.elapsed()
    );
    consumer.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![(b"new".to_vec(), false)]);
    let counts = store.counts(q).await.unwrap();
    assert_eq!(
        (counts.cancelled, counts.completed),
        (2, 2),
        "the two markers cancelled; the old job (by its holder) and the new one completed"
    );
}

async fn a_stale_settle_of_an_earlier_attempt_leaves_the_next_attempt_tracked(ctx: &Ctx) {
    // attempt 1 outlives its lease and this consumer claims attempt 2; attempt 1's settle (stale)
    // must not untrack attempt 2, which would then get no lease renewal and no cancel
    captured_log();
    let (store, q) = (&ctx.store, &ctx.q);
    let id = JobId::new("job-x").unwrap();
    store.enqueue(q, &[NewJob::new("x").with_id(id.clone())]).await.unwrap();
    let (second, cancelled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let first_returned = Arc::new(AtomicUsize::new(0));
    let (s, c, f) = (second.clone(), cancelled.clone(), first_returned.clone());
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let (s, c, f) = (s.clone(), c.clone(), f.clone());
            async move {
                if job.attempt() == 1 {
                    // outlives its lease: returns once attempt 2 runs
                    while s.load(Ordering::SeqCst) == 0 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                    f.store(1, Ordering::SeqCst);
                    return Verdict::Done;
                }
                job.extend_lock(Duration::from_secs(30)).await.unwrap();
                s.store(1, Ordering::SeqCst);
                tokio::select! {
                    _ = job.cancel_token().cancelled() => {
                        c.store(1, Ordering::SeqCst);
                        Verdict::Cancel("cancelled".into())
                    }
                    _ = tokio::time::sleep(Duration::from_secs(10)) => Verdict::Done,
                }
            }
        },
        fast()
            .with_beat(Duration::from_millis(50))
            .with_lease(Duration::from_millis(100))
            .with_concurrency(2)
            .with_cancel(true)
            // the lease must lapse under the first attempt
            .with_locks(false),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "attempt 2 running", || async {
        second.load(Ordering::SeqCst) == 1
    })
    .await;
    wait_until(Duration::from_secs(5), "attempt 1 returned", || async {
        first_returned.load(Ordering::SeqCst) == 1
    })
    .await;
    assert!(
        stale_settle_reported(q, &id, 1, Duration::from_secs(5)).await,
        "attempt 1's settle came back refused as stale"
    );
    assert_eq!(consumer.in_flight(), 1, "attempt 2 is still tracked");
    assert_eq!(
        store
            .cancel(q, &id, Some("op"), SettleOptions::default())
            .await
            .unwrap(),
        CancelOutcome::Requested
    );
    wait_until(Duration::from_secs(5), "attempt 2 sees the cancel", || async {
        cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(store.counts(q).await.unwrap().cancelled, 1);
}

crate::consumer_cases!(
    a_cancel_from_another_handle_reaches_only_its_job_within_a_beat,
    a_job_cancelled_while_no_consumer_listened_never_runs,
    a_cancel_for_an_earlier_job_spares_a_new_job_with_the_same_id,
    a_stale_settle_of_an_earlier_attempt_leaves_the_next_attempt_tracked,
);
