//! Recovery: recover and promote still run under a backlog longer than a beat; a checkpoint
//! survives a lease expiry and only the current holder's settle counts; the stalled sweep recovers
//! a vanished holder's job and buries it at `max_stalled`; the locks plane keeps a long handler's
//! lease alive and cancels a handler whose lease was lost; recovery off leaves a lapsed lease alone;
//! a redelivery budget keeps lapses from spending a job's attempts.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::consumer::Recovery;
use echomq::store::{Counts, StalledPolicy};
use echomq::{Consumer, ConsumerOptions, JobContext, JobState, NewJob, QueueName, Verdict};

use crate::harness::{captured_log, completed, fast, log_lines, stale_settle_reported, wait_until, Ctx};

async fn a_backlog_longer_than_a_beat_still_lets_recover_and_promote_run(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    // a job whose holder vanished: its lease lapses while the backlog is drained
    let lost = store.enqueue(q, &[NewJob::new("lost")]).await.unwrap()[0].id().clone();
    assert_eq!(
        store
            .claim(
                q,
                echomq::store::ClaimRequest::new(1, Duration::from_millis(30)).max_attempts(3)
            )
            .await
            .unwrap()
            .len(),
        1
    );
    let backlog: Vec<NewJob> = (0..3000).map(|_| NewJob::new("b")).collect();
    store.enqueue(q, &backlog).await.unwrap();
    let due = store
        .enqueue(q, &[NewJob::new("due").with_delay(Duration::from_millis(50))])
        .await
        .unwrap()[0]
        .id()
        .clone();
    let done = Arc::new(AtomicUsize::new(0));
    let lost_at = Arc::new(Mutex::new(None));
    let (d, la, lost_id) = (done.clone(), lost_at.clone(), lost.clone());
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let (d, la, lost_id) = (d.clone(), la.clone(), lost_id.clone());
            async move {
                tokio::time::sleep(Duration::from_millis(1)).await;
                let n = d.fetch_add(1, Ordering::SeqCst);
                if *job.id() == lost_id {
                    *la.lock().unwrap() = Some(n);
                }
                Verdict::Done
            }
        },
        ConsumerOptions::default().with_beat(Duration::from_millis(100)),
    )
    .unwrap();
    // promote ran: the delayed job left `scheduled` while most of the backlog still waits
    wait_until(Duration::from_secs(30), "the delayed job promoted", || async {
        store
            .get(q, &due)
            .await
            .unwrap()
            .is_some_and(|j| j.state != JobState::Scheduled)
    })
    .await;
    let left = store.counts(q).await.unwrap().pending;
    assert!(
        left > 1000,
        "promoted only when {left} jobs were left: promote did not run under the backlog"
    );
    // recover ran: the reaped job went to the front and ran long before the backlog's end
    wait_until(Duration::from_secs(30), "the reaped job ran", || async {
        lost_at.lock().unwrap().is_some()
    })
    .await;
    let at = lost_at.lock().unwrap().unwrap();
    assert!(
        at < 2000,
        "the reaped job ran only after {at} backlog jobs: reap did not run under the backlog"
    );
    c.abort();
}

async fn a_checkpoint_survives_a_lease_expiry(ctx: &Ctx) {
    // attempt 1 checkpoints, then outlives its lease; attempt 2 resumes from the checkpoint. Each
    // waits for the other (no sleeps to race): attempt 1 returns only once attempt 2 runs, and
    // attempt 2 only once attempt 1's settle has come back stale, so that stale settle meets a row
    // attempt 2 holds and the fence alone decides which completion counts
    captured_log();
    let (store, q) = (&ctx.store, &ctx.q);
    let id = store.enqueue(q, &[NewJob::new("step1")]).await.unwrap()[0].id().clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let second_running = Arc::new(tokio::sync::Notify::new());
    let first_returned = Arc::new(tokio::sync::Notify::new());
    let stale_seen = Arc::new(AtomicUsize::new(0));
    let (s, second, first, stale) = (
        seen.clone(),
        second_running.clone(),
        first_returned.clone(),
        stale_seen.clone(),
    );
    let (qq, jid) = (q.clone(), id.clone());
    // no lease renewal: the lease lapses under the first run (which waits for the second). A
    // second long enough that attempt 2, waiting for attempt 1's stale settle to be reported,
    // does not outlive its own lease on a loaded machine: a third attempt would wait for ever
    let opts = fast()
        .with_concurrency(2)
        .with_lease(Duration::from_secs(1))
        .with_locks(false);
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let (s, second, first, stale, qq, jid) = (
                s.clone(),
                second.clone(),
                first.clone(),
                stale.clone(),
                qq.clone(),
                jid.clone(),
            );
            async move {
                s.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(job.payload()).into_owned());
                if job.attempt() == 1 {
                    job.checkpoint("step2").await.unwrap();
                    // the reaper hands the job to attempt 2 once this lease lapses
                    second.notified().await;
                    first.notify_one();
                    return Verdict::DoneWith(b"attempt 1".to_vec());
                }
                second.notify_one();
                first.notified().await;
                // attempt 1's verdict is settled (stale) before this one is
                if stale_settle_reported(&qq, &jid, 1, Duration::from_secs(5)).await {
                    stale.store(1, Ordering::SeqCst);
                }
                Verdict::DoneWith(b"attempt 2".to_vec())
            }
        },
        opts,
    )
    .unwrap();
    wait_until(Duration::from_secs(15), "the job completed", || async {
        completed(store, q).await == 1
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["step1".to_string(), "step2".to_string()]);
    assert_eq!(
        stale_seen.load(Ordering::SeqCst),
        1,
        "attempt 1's settle came back refused as stale"
    );
    let job = store.get(q, &id).await.unwrap().expect("the row is retained");
    assert_eq!(
        (job.state, job.attempts, job.output.as_deref()),
        (JobState::Completed, 2, Some(&b"attempt 2"[..])),
        "only the current holder's settle counts"
    );
    assert_eq!(completed(store, q).await, 1);
}

async fn the_stalled_sweep_buries_a_job_whose_holder_vanished_twice(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let id = store
        .enqueue(q, &[NewJob::new("x").with_max_attempts(10)])
        .await
        .unwrap()[0]
        .id()
        .clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        // a holder that never comes back
        |_job: JobContext| async {
            std::future::pending::<()>().await;
            Verdict::Done
        },
        fast()
            .with_concurrency(4)
            .with_lease(Duration::from_millis(50))
            // no lease renewal: the holder vanishes as far as the store can tell
            .with_locks(false)
            .with_recovery(Recovery::Stalled(StalledPolicy::default().max_stalled(2).limit(100))),
    )
    .unwrap();
    wait_until(Duration::from_secs(10), "the job dead", || async {
        store
            .get(q, &id)
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Dead)
    })
    .await;
    let job = store.get(q, &id).await.unwrap().unwrap();
    assert_eq!(
        (job.last_error.as_deref(), job.stalled, job.attempts),
        (Some("stalled"), 2, 2)
    );
    c.abort();
}

async fn the_stalled_sweep_recovers_a_vanished_consumers_job_then_dead_letters_it_at_max_stalled(ctx: &Ctx) {
    let store = &ctx.store;
    let (again, dead) = (ctx.q.clone(), ctx.queue("dead"));
    for q in [&again, &dead] {
        store.enqueue(q, &[NewJob::new("job")]).await.unwrap();
        // a consumer that claims and vanishes: its lease lapses, unsettled
        let claimed = store
            .claim(
                q,
                echomq::store::ClaimRequest::new(1, Duration::from_millis(100)).max_attempts(3),
            )
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
    }
    let runs = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let runs = runs.clone();
        move |job: JobContext| {
            let runs = runs.clone();
            async move {
                runs.lock().unwrap().push((job.queue().to_string(), job.attempt()));
                Verdict::Done
            }
        }
    };
    let stalled = |max_stalled| {
        fast().with_recovery(Recovery::Stalled(
            StalledPolicy::default().max_stalled(max_stalled).limit(100),
        ))
    };
    // on its 1st stall a job of `again` is recovered (dead only on its 2nd); one of `dead` dies
    let a = Consumer::start(store.clone(), again.clone(), handler.clone(), stalled(2)).unwrap();
    let d = Consumer::start(store.clone(), dead.clone(), handler, stalled(1)).unwrap();
    wait_until(Duration::from_secs(5), "recovered and completed", || async {
        completed(store, &again).await == 1
    })
    .await;
    wait_until(Duration::from_secs(5), "dead-lettered", || async {
        store.counts(&dead).await.unwrap().dead == 1
    })
    .await;
    a.stop(Duration::from_secs(5)).await.unwrap();
    d.stop(Duration::from_secs(5)).await.unwrap();

    assert_eq!(
        *runs.lock().unwrap(),
        [(again.to_string(), 2)],
        "only the recovered job ran, on attempt 2"
    );
    let id = echomq::JobId::parse("1").unwrap();
    let recovered = store.get(&again, &id).await.unwrap().unwrap();
    assert_eq!((recovered.state, recovered.stalled), (JobState::Completed, 1));
    let gone = store.get(&dead, &id).await.unwrap().unwrap();
    assert_eq!(gone.state, JobState::Dead);
    assert_eq!(gone.last_error.as_deref(), Some("stalled"));
    // a stall that dead-letters counts as failed (as the script counts it), not as stalled
    let counts = store.counts(&dead).await.unwrap();
    assert_eq!(
        (counts.failed, counts.stalled, counts.completed, counts.active),
        (1, 0, 0, 0),
        "{counts:?}"
    );
    assert_eq!(store.counts(&again).await.unwrap().stalled, 1);
}

/// What one job whose handler takes three leases left behind.
struct ThreeLeases {
    /// The attempts the handlers saw, in order.
    runs: Vec<u64>,
    counts: Counts,
    /// The job's state as its row says (the queue keeps finished rows by default).
    row: Option<JobState>,
}

/// Runs one job whose handler takes three leases on `q`, with a second consumer (another handle, a
/// fast reap) ready to take the job the moment its lease lapses.
async fn three_lease_job(ctx: &Ctx, q: &QueueName, locks: bool) -> ThreeLeases {
    let store = &ctx.store;
    // renewed a third of a lease before it lapses: 1 s leaves a renewal 660 ms of slack on a
    // loaded machine (with 300 ms, a clean-clone CI run once saw the job reaped under renewal)
    let lease = Duration::from_secs(1);
    let runs = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let runs = runs.clone();
        move |job: JobContext| {
            let runs = runs.clone();
            async move {
                runs.lock().unwrap().push(job.attempt());
                tokio::select! {
                    _ = tokio::time::sleep(lease * 3) => Verdict::Done,
                    c = job.cancel_token().cancelled() => Verdict::Error(format!("cancelled: {c}")),
                }
            }
        }
    };
    let opts = ConsumerOptions::default()
        .with_beat(Duration::from_millis(50))
        .with_lease(lease)
        .with_concurrency(2)
        .with_locks(locks)
        .with_recovery(Recovery::Reap);
    let a = Consumer::start(store.clone(), q.clone(), handler.clone(), opts.clone()).unwrap();
    let id = store.enqueue(q, &[NewJob::new("slow")]).await.unwrap()[0].id().clone();
    wait_until(Duration::from_secs(5), "the first run", || async {
        !runs.lock().unwrap().is_empty()
    })
    .await;
    let b = Consumer::start(ctx.other_handle().await, q.clone(), handler, opts).unwrap();
    // a reaped job runs again before it can complete: its first settle is then stale
    wait_until(Duration::from_secs(10), "completed, or run twice", || async {
        completed(store, q).await > 0 || runs.lock().unwrap().len() > 1
    })
    .await;
    a.stop(Duration::from_secs(5)).await.unwrap();
    b.stop(Duration::from_secs(5)).await.unwrap();
    let runs = runs.lock().unwrap().clone();
    ThreeLeases {
        runs,
        counts: store.counts(q).await.unwrap(),
        row: store.get(q, &id).await.unwrap().map(|r| r.state),
    }
}

async fn the_locks_plane_keeps_a_handler_of_three_leases_alive(ctx: &Ctx) {
    let kept = three_lease_job(ctx, &ctx.q, true).await;
    assert_eq!(kept.runs, [1], "one run, never reaped, never run twice");
    assert_eq!((kept.counts.reaped, kept.counts.completed), (0, 1));
    assert_eq!(kept.row, Some(JobState::Completed), "completed, its row kept");
    // the control: without renewals the lease lapses and the other consumer runs it again
    let without = three_lease_job(ctx, &ctx.queue("control"), false).await;
    assert!(
        without.runs.len() >= 2 && without.runs[..2] == [1, 2],
        "without locks: {:?}",
        without.runs
    );
    assert!(without.counts.reaped >= 1, "without locks: {:?}", without.counts);
}

async fn the_locks_plane_cancels_a_handler_whose_lease_was_lost(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let id = store.enqueue(q, &[NewJob::new("x")]).await.unwrap()[0].id().clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let tx = tx.clone();
            async move {
                let why = job.cancel_token().cancelled().await;
                let _ = tx.send(why.reason);
                Verdict::Done
            }
        },
        // the shortest lease renewal keeps: the first renewal comes within a third of it
        fast().with_lease(echomq::consumer::LEASE_RENEWED_MIN).with_locks(true),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "claimed", || async {
        store
            .get(q, &id)
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Active)
    })
    .await;
    // an operator takes the job away: the next renewal is answered gone
    store.remove(q, &id, true).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason.as_deref(), Some(echomq::cancel::LEASE_LOST));
    c.stop(Duration::from_secs(5)).await.unwrap();
}

async fn recovery_off_leaves_a_lapsed_lease_alone(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let orphan = store.enqueue(q, &[NewJob::new("orphan")]).await.unwrap()[0]
        .id()
        .clone();
    // a holder that vanished: claimed on a short lease that then lapses
    let held = store
        .claim(
            q,
            echomq::store::ClaimRequest::new(1, Duration::from_millis(20)).max_attempts(3),
        )
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    ctx.wait_lease_lapsed(&orphan).await;
    let (orphan_runs, ticks) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (orphan_runs, ticks) = (orphan_runs.clone(), ticks.clone());
        move |job: JobContext| {
            let counter = if job.payload() == b"orphan" {
                &orphan_runs
            } else {
                &ticks
            };
            counter.fetch_add(1, Ordering::SeqCst);
            std::future::ready(Verdict::Done)
        }
    };
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        handler.clone(),
        fast().with_beat(Duration::from_millis(50)).with_recovery(Recovery::Off),
    )
    .unwrap();
    // each tick wakes the consumer into a round (recovery, promote and the claim that takes the
    // tick): a reaping consumer would have taken the job back in the first of them and run it
    for n in 1..=5 {
        store.enqueue(q, &[NewJob::new("tick")]).await.unwrap();
        wait_until(Duration::from_secs(5), "the tick ran", || async {
            ticks.load(Ordering::SeqCst) == n
        })
        .await;
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(orphan_runs.load(Ordering::SeqCst), 0);
    let counts = store.counts(q).await.unwrap();
    assert_eq!((counts.active, counts.pending, counts.reaped), (1, 0, 0));
    // the same with the default recovery runs it
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        handler,
        fast().with_beat(Duration::from_millis(50)),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "reaped and run", || async {
        orphan_runs.load(Ordering::SeqCst) == 1
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    let counts = store.counts(q).await.unwrap();
    assert_eq!((counts.active, counts.reaped), (0, 1));
}

/// Renewal rounds run while jobs finish all the time: a renewal sent after a job's own settle
/// landed is answered stale or gone before the settle's reply untracks the job. That job's
/// handler has returned; nothing may cancel it, nor report its lease lost.
async fn a_renewal_racing_the_jobs_own_settle_cancels_nothing(ctx: &Ctx) {
    const JOBS: usize = 4000;
    let (store, q) = (&ctx.store, &ctx.q);
    captured_log();
    let jobs: Vec<NewJob> = (0..JOBS).map(|i| NewJob::new(i.to_string())).collect();
    store.enqueue(q, &jobs).await.unwrap();
    let tokens = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let tokens = tokens.clone();
        move |job: JobContext| {
            let tokens = tokens.clone();
            async move {
                tokens.lock().unwrap().push(job.cancel_token().clone());
                // 10–39 ms: the run spans several renewal rounds of many jobs each
                let ms = 10 + job.payload().iter().map(|b| u64::from(*b)).sum::<u64>() % 30;
                tokio::time::sleep(Duration::from_millis(ms)).await;
                Verdict::Done
            }
        }
    };
    let opts = fast()
        .with_concurrency(50)
        .with_lease(echomq::consumer::LEASE_RENEWED_MIN)
        .with_locks(true);
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    wait_until(Duration::from_secs(60), "every job completed", || async {
        completed(store, q).await == JOBS as u64
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    let fired = tokens.lock().unwrap().iter().filter(|t| t.is_cancelled()).count();
    let lost = log_lines(&["lease lost", &format!("queue={q} ")]);
    assert_eq!(
        (fired, lost.len()),
        (0, 0),
        "cancelled handlers, and lease-lost lines: {lost:?}"
    );
}

/// A job whose first `crashes` runs outlive their lease (as if their worker died: no renewal, the
/// lease lapses and the consumer's own recovery redelivers it), then completes; its budget is
/// `max_attempts` 2. Returns the attempt number each run saw, and the job's row at the end.
async fn runs_through_lapses(
    ctx: &Ctx,
    q: &QueueName,
    recovery: Recovery,
    crashes: usize,
) -> (Vec<u64>, echomq::JobRow) {
    let store = &ctx.store;
    let runs = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let runs = runs.clone();
        move |job: JobContext| {
            let runs = runs.clone();
            async move {
                let n = {
                    let mut runs = runs.lock().unwrap();
                    runs.push(job.attempt());
                    runs.len()
                };
                if n <= crashes {
                    // far past the lease: the job is redelivered meanwhile, and this settle is stale
                    tokio::time::sleep(Duration::from_secs(2)).await;
                }
                Verdict::Done
            }
        }
    };
    let id = store
        .enqueue(q, &[NewJob::new("crashes").with_max_attempts(2)])
        .await
        .unwrap()[0]
        .id()
        .clone();
    let opts = fast()
        .with_beat(Duration::from_millis(50))
        .with_lease(Duration::from_millis(100))
        .with_locks(false)
        .with_concurrency(8)
        .with_recovery(recovery);
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    wait_until(Duration::from_secs(10), "completed or dead", || async {
        let state = store.get(q, &id).await.unwrap().map(|r| r.state);
        matches!(state, Some(JobState::Completed | JobState::Dead))
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    let runs = runs.lock().unwrap().clone();
    (runs, store.get(q, &id).await.unwrap().unwrap())
}

async fn a_redelivery_budget_keeps_crashes_from_spending_the_attempts(ctx: &Ctx) {
    let budget = Recovery::Redeliver(
        echomq::store::RedeliveryPolicy::default()
            .max_redeliveries(5)
            .limit(100),
    );
    // three lapses at max_attempts 2: each run is the first attempt again, and the fourth completes
    let (runs, row) = runs_through_lapses(ctx, &ctx.q, budget, 3).await;
    assert_eq!(runs, [1, 1, 1, 1]);
    assert_eq!((row.state, row.attempts, row.stalled), (JobState::Completed, 1, 3));
    // the control, the default: each lapse used its attempt, so the second leaves the job dead
    let (runs, row) = runs_through_lapses(ctx, &ctx.queue("control"), Recovery::Reap, 3).await;
    assert_eq!(runs, [1, 2]);
    assert_eq!(row.state, JobState::Dead);
    assert_eq!(row.last_error.as_deref(), Some("lease expired on the last attempt"));
}

crate::consumer_cases!(
    a_redelivery_budget_keeps_crashes_from_spending_the_attempts,
    a_renewal_racing_the_jobs_own_settle_cancels_nothing,
    a_backlog_longer_than_a_beat_still_lets_recover_and_promote_run,
    a_checkpoint_survives_a_lease_expiry,
    the_stalled_sweep_buries_a_job_whose_holder_vanished_twice,
    the_stalled_sweep_recovers_a_vanished_consumers_job_then_dead_letters_it_at_max_stalled,
    the_locks_plane_keeps_a_handler_of_three_leases_alive,
    the_locks_plane_cancels_a_handler_whose_lease_was_lost,
    recovery_off_leaves_a_lapsed_lease_alone,
);
