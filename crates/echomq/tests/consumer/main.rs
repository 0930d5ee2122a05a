//! The consumer loop against a real Redis: processing, wakes, back-off through an outage, the drain
//! leg's beat bound, panics, stop and abort, cancel, checkpoints, the stalled sweep, the locks plane,
//! ttl and the supervisor.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "../support/consumer_kit.rs"]
mod consumer_kit;
#[path = "../support/redis_server.rs"]
mod redis_server;
use consumer_kit::{completed, counting, fast, wait_until};

use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use echomq::consumer::{typed, Recovery};
use echomq::store::redis::RedisStore;
use echomq::store::{SettleOptions, StalledPolicy, Store};
use echomq::{Consumer, ConsumerOptions, JobContext, JobId, JobState, NewJob, QueueName, Verdict};

static URL: OnceLock<String> = OnceLock::new();
static SEQ: AtomicU32 = AtomicU32::new(0);

fn url() -> String {
    URL.get_or_init(|| redis_server::url_from_env_or_start("EMQ_TEST_REDIS_URL"))
        .clone()
}

async fn store() -> Arc<dyn Store> {
    Arc::new(RedisStore::open(&url()).await.unwrap())
}

fn queue(name: &str) -> QueueName {
    QueueName::new(format!(
        "c-{name}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    ))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_processes_every_job_once_at_concurrency_8() {
    let (store, q) = (store().await, queue("all"));
    let jobs: Vec<NewJob> = (0..300).map(|i| NewJob::new(format!("{i}"))).collect();
    store.enqueue(&q, &jobs).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push(job.id.clone());
                Verdict::Done
            }
        },
        fast().with_concurrency(8),
    )
    .unwrap();
    wait_until(Duration::from_secs(20), "300 completions", || async {
        completed(&store, &q).await == 300
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    let mut ids = seen.lock().unwrap().clone();
    assert_eq!(ids.len(), 300, "300 handler runs");
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 300, "every job ran exactly once");
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_parked_is_woken_by_an_enqueue_well_inside_one_beat() {
    let (store, q) = (store().await, queue("wake"));
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            let tx = tx.clone();
            async move {
                let _ = tx.send(Instant::now());
                Verdict::Done
            }
        },
        ConsumerOptions::default().with_beat(Duration::from_secs(5)),
    )
    .unwrap();
    // let it finish its first round and park
    tokio::time::sleep(Duration::from_millis(300)).await;
    for _ in 0..3 {
        let sent = Instant::now();
        store.enqueue(&q, &[NewJob::new("x")]).await.unwrap();
        let started = tokio::time::timeout(Duration::from_secs(4), rx.recv())
            .await
            .unwrap()
            .unwrap();
        let latency = started - sent;
        assert!(
            latency < Duration::from_millis(500),
            "woken after {latency:?}, beat is 5 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_retries_a_panicking_handler_then_buries_it() {
    let (store, q) = (store().await, queue("panic"));
    let id = store
        .enqueue(&q, &[NewJob::new("boom").with_max_attempts(2)])
        .await
        .unwrap()[0]
        .id()
        .clone();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            r.fetch_add(1, Ordering::SeqCst);
            async move {
                panic!("handler exploded");
            }
        },
        fast(),
    )
    .unwrap();
    wait_until(Duration::from_secs(10), "the job dead", || async {
        store
            .get(&q, &id)
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Dead)
    })
    .await;
    let job = store.get(&q, &id).await.unwrap().unwrap();
    assert_eq!(job.last_error.as_deref(), Some("panic: handler exploded"));
    assert_eq!(job.attempts, 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(!c.is_finished(), "a panicking handler never ends the loop");
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_stop_waits_for_a_long_handler_and_settles_it() {
    let (store, q) = (store().await, queue("stop"));
    store.enqueue(&q, &[NewJob::new("slow")]).await.unwrap();
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
    assert_eq!(completed(&store, &q).await, 1, "the job settled before stop returned");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_stop_past_its_timeout_errs_and_the_job_still_settles() {
    let (store, q) = (store().await, queue("stoptimeout"));
    store.enqueue(&q, &[NewJob::new("slow")]).await.unwrap();
    let started = Arc::new(tokio::sync::Notify::new());
    let s = started.clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            let s = s.clone();
            async move {
                s.notify_one();
                tokio::time::sleep(Duration::from_millis(600)).await;
                Verdict::Done
            }
        },
        fast(),
    )
    .unwrap();
    started.notified().await;
    let err = c.stop(Duration::from_millis(100)).await.unwrap_err();
    assert!(matches!(err, echomq::Error::Timeout { .. }), "{err}");
    wait_until(Duration::from_secs(5), "the job settled after the timeout", || async {
        completed(&store, &q).await == 1
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_backlog_longer_than_a_beat_still_lets_recover_and_promote_run() {
    let (store, q) = (store().await, queue("backlog"));
    // a job whose holder vanished: its lease lapses while the backlog is drained
    let lost = store.enqueue(&q, &[NewJob::new("lost")]).await.unwrap()[0].id().clone();
    assert_eq!(
        store
            .claim(&q, 1, Duration::from_millis(30), 3, SettleOptions::default())
            .await
            .unwrap()
            .len(),
        1
    );
    let backlog: Vec<NewJob> = (0..3000).map(|_| NewJob::new("b")).collect();
    store.enqueue(&q, &backlog).await.unwrap();
    let due = store
        .enqueue(&q, &[NewJob::new("due").with_delay(Duration::from_millis(50))])
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
                if job.id == lost_id {
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
            .get(&q, &due)
            .await
            .unwrap()
            .is_some_and(|j| j.state != JobState::Scheduled)
    })
    .await;
    let left = store.counts(&q).await.unwrap().pending;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_remote_cancel_reaches_only_its_job() {
    let (store, q) = (store().await, queue("cancel"));
    let ids: Vec<JobId> = store
        .enqueue(&q, &[NewJob::new("a"), NewJob::new("b")])
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id().clone())
        .collect();
    let running = Arc::new(AtomicUsize::new(0));
    let r = running.clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                tokio::select! {
                    c = job.cancel.cancelled() => Verdict::Cancel(c.reason.unwrap_or_default()),
                    _ = tokio::time::sleep(Duration::from_millis(800)) => Verdict::Done,
                }
            }
        },
        fast().with_concurrency(2).with_cancel(true).with_retain(10),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "both running", || async {
        running.load(Ordering::SeqCst) == 2
    })
    .await;
    store
        .cancel(&q, &ids[0], Some("operator"), SettleOptions::default())
        .await
        .unwrap();
    wait_until(Duration::from_secs(5), "both settled", || async {
        let c = store.counts(&q).await.unwrap();
        c.completed + c.cancelled == 2
    })
    .await;
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.cancelled, counts.completed), (1, 1));
    let a = store.get(&q, &ids[0]).await.unwrap().unwrap();
    assert_eq!(
        (a.state, a.last_error.as_deref()),
        (JobState::Cancelled, Some("operator"))
    );
    assert_eq!(
        store.get(&q, &ids[1]).await.unwrap().unwrap().state,
        JobState::Completed
    );
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_never_runs_a_job_cancelled_while_no_consumer_listened() {
    let (store, q) = (store().await, queue("cancelrow"));
    let id = store.enqueue(&q, &[NewJob::new("x")]).await.unwrap()[0].id().clone();
    // a holder that vanished: claimed under a short lease, then cancelled with nobody listening
    let held = store
        .claim(&q, 1, Duration::from_millis(30), 3, SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    assert_eq!(
        store
            .cancel(&q, &id, Some("late"), SettleOptions::default())
            .await
            .unwrap(),
        echomq::store::Cancelled::Requested
    );
    tokio::time::sleep(Duration::from_millis(50)).await;
    let ran = Arc::new(AtomicUsize::new(0));
    let c = Consumer::start(store.clone(), q.clone(), counting(&ran), fast().with_cancel(true)).unwrap();
    wait_until(Duration::from_secs(5), "the job cancelled", || async {
        store.counts(&q).await.unwrap().cancelled == 1
    })
    .await;
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "a cancelled job is never handed to a handler"
    );
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_checkpoint_survives_a_lease_expiry() {
    // attempt 1 checkpoints, then outlives its lease; attempt 2 resumes from the checkpoint. Each
    // waits for the other (no sleeps to race): attempt 1 returns only once attempt 2 runs, and
    // attempt 2 only once attempt 1's settle is over, so that stale settle meets a row attempt 2
    // holds and the fence alone decides which completion counts
    let (store, q) = (store().await, queue("checkpoint"));
    let id = store.enqueue(&q, &[NewJob::new("step1")]).await.unwrap()[0]
        .id()
        .clone();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let second_running = Arc::new(tokio::sync::Notify::new());
    let first_returned = Arc::new(tokio::sync::Notify::new());
    let (s, second, first) = (seen.clone(), second_running.clone(), first_returned.clone());
    let mut opts = fast().with_concurrency(2).with_lease(Duration::from_millis(100));
    opts.retain = 10;
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let (s, second, first) = (s.clone(), second.clone(), first.clone());
            async move {
                s.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&job.payload).into_owned());
                if job.attempts == 1 {
                    job.checkpoint("step2").await.unwrap();
                    // the reaper hands the job to attempt 2 once this lease lapses
                    second.notified().await;
                    first.notify_one();
                    return Verdict::DoneWith(b"attempt 1".to_vec());
                }
                second.notify_one();
                first.notified().await;
                // attempt 1's verdict is settled (stale) by the time this one is
                tokio::time::sleep(Duration::from_millis(100)).await;
                Verdict::DoneWith(b"attempt 2".to_vec())
            }
        },
        opts,
    )
    .unwrap();
    wait_until(Duration::from_secs(10), "the job completed", || async {
        completed(&store, &q).await == 1
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), ["step1".to_string(), "step2".to_string()]);
    let job = store.get(&q, &id).await.unwrap().expect("the row is retained");
    assert_eq!(
        (job.state, job.attempts, job.output.as_deref()),
        (JobState::Completed, 2, Some(&b"attempt 2"[..])),
        "only the current holder's settle counts"
    );
    assert_eq!(completed(&store, &q).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_stalled_sweep_buries_a_job_whose_holder_vanished_twice() {
    let (store, q) = (store().await, queue("stalled"));
    let id = store
        .enqueue(&q, &[NewJob::new("x").with_max_attempts(10)])
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
            .with_recovery(Recovery::Stalled(StalledPolicy {
                max_stalled: 2,
                limit: 100,
            })),
    )
    .unwrap();
    wait_until(Duration::from_secs(10), "the job dead", || async {
        store
            .get(&q, &id)
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Dead)
    })
    .await;
    let job = store.get(&q, &id).await.unwrap().unwrap();
    assert_eq!(
        (job.last_error.as_deref(), job.stalled, job.attempts),
        (Some("stalled"), 2, 2)
    );
    c.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_locks_plane_keeps_a_handler_of_three_leases_alive() {
    let (store, q) = (store().await, queue("locks"));
    let id = store.enqueue(&q, &[NewJob::new("long")]).await.unwrap()[0].id().clone();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_job: JobContext| {
            r.fetch_add(1, Ordering::SeqCst);
            async {
                // three leases: renewed (at a third of the lease) it is never reaped; a lease of
                // 1 s leaves a loaded machine room for each renewal
                tokio::time::sleep(Duration::from_secs(3)).await;
                Verdict::Done
            }
        },
        fast()
            .with_concurrency(2)
            .with_lease(Duration::from_secs(1))
            .with_locks(true),
    )
    .unwrap();
    wait_until(Duration::from_secs(10), "completed", || async {
        completed(&store, &q).await == 1
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "never reaped, never run twice");
    assert_eq!(store.counts(&q).await.unwrap().reaped, 0);
    assert!(store.get(&q, &id).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_locks_plane_cancels_a_handler_whose_lease_was_lost() {
    let (store, q) = (store().await, queue("lost"));
    let id = store.enqueue(&q, &[NewJob::new("x")]).await.unwrap()[0].id().clone();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let tx = tx.clone();
            async move {
                let why = job.cancel.cancelled().await;
                let _ = tx.send(why.reason);
                Verdict::Done
            }
        },
        fast().with_lease(Duration::from_millis(300)).with_locks(true),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "claimed", || async {
        store
            .get(&q, &id)
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Active)
    })
    .await;
    // an operator takes the job away: the next renewal is answered gone
    store.remove(&q, &id, true).await.unwrap();
    let reason = tokio::time::timeout(Duration::from_secs(5), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reason.as_deref(), Some(echomq::cancel::LEASE_LOST));
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_ttl_ends_the_loop_and_a_supervisor_starts_a_fresh_one() {
    let (store, q) = (store().await, queue("ttl"));
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        |_job: JobContext| async { Verdict::Done },
        fast().with_ttl(Some(Duration::from_millis(150))),
    )
    .unwrap();
    c.wait_for(Duration::from_secs(5)).await.unwrap();
    assert!(c.is_finished());

    let starts = Arc::new(AtomicUsize::new(0));
    let (s, url, q2) = (starts.clone(), url(), q.clone());
    let sup = echomq::consumer::Supervisor::start(
        move || {
            let (s, url, q2) = (s.clone(), url.clone(), q2.clone());
            async move {
                s.fetch_add(1, Ordering::SeqCst);
                let store: Arc<dyn Store> = Arc::new(RedisStore::open(&url).await?);
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
    store.enqueue(&q, &[NewJob::new("x")]).await.unwrap();
    wait_until(
        Duration::from_secs(5),
        "the job done by a restarted consumer",
        || async { completed(&store, &q).await == 1 },
    )
    .await;
    sup.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn consumer_typed_handler_decodes_json_and_discards_what_does_not_decode() {
    #[derive(serde::Deserialize)]
    struct Email {
        to: String,
    }
    let (store, q) = (store().await, queue("typed"));
    let ids = store
        .enqueue(&q, &[NewJob::new(r#"{"to":"a@b"}"#), NewJob::new("not json")])
        .await
        .unwrap();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = got.clone();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        typed(move |email: Email, _job: JobContext| {
            let g = g.clone();
            async move {
                g.lock().unwrap().push(email.to);
                Verdict::Done
            }
        }),
        fast(),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "both settled", || async {
        let c = store.counts(&q).await.unwrap();
        c.completed == 1 && c.dead == 1
    })
    .await;
    assert_eq!(*got.lock().unwrap(), ["a@b".to_string()]);
    let bad = store.get(&q, ids[1].id()).await.unwrap().unwrap();
    assert!(bad.last_error.unwrap().starts_with("payload does not decode"));
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn consumer_refuses_zero_lease_beat_or_concurrency() {
    let (store, q) = (store().await, queue("opts"));
    for opts in [
        ConsumerOptions::default().with_lease(Duration::ZERO),
        ConsumerOptions::default().with_beat(Duration::ZERO),
        ConsumerOptions::default().with_concurrency(0),
    ] {
        let err =
            Consumer::start(store.clone(), q.clone(), |_j: JobContext| async { Verdict::Done }, opts).unwrap_err();
        assert!(matches!(err, echomq::Error::InvalidOption { .. }), "{err}");
    }
}
