//! The consumer, unchanged, on the embedded store (through `park` and `cancel_requests`):
//! processing with concurrency, lanes under their limits, a parked consumer woken at once by an
//! enqueue in the same process (and handed its jobs by that enqueue's transaction), a cancel from
//! another handle on the same file, completion records, the locks plane, and the stalled sweep.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::consumer::Recovery;
use echomq::store::embedded::EmbeddedStore;
use echomq::store::{Cancelled, ClaimRequest, Handoff, LimitTarget, SettleOptions, StalledPolicy};
use echomq::{Consumer, ConsumerOptions, GroupName, JobContext, JobState, NewJob, QueueName, Store, Verdict};
use tokio::sync::mpsc;
#[path = "support/consumer_kit.rs"]
mod consumer_kit;
use consumer_kit::{completed, counting, fast, wait_until};

/// A database file of the test's own, removed with the directory.
struct Db {
    dir: tempfile::TempDir,
}

impl Db {
    fn new() -> Db {
        Db {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    fn path(&self) -> PathBuf {
        self.dir.path().join("q.db")
    }

    /// A new handle (its own connection and thread) on the file.
    async fn open(&self) -> EmbeddedStore {
        EmbeddedStore::open(self.path().to_str().unwrap()).await.unwrap()
    }

    async fn store(&self) -> Arc<dyn Store> {
        Arc::new(self.open().await)
    }
}

fn q() -> QueueName {
    QueueName::new("q").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_job_is_processed_once_at_concurrency_8() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let jobs: Vec<NewJob> = (0..1000).map(|i| NewJob::new(format!("{i}"))).collect();
    store.enqueue(&q, &jobs).await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let handler = {
        let (seen, running, most) = (seen.clone(), running.clone(), most.clone());
        move |job: JobContext| {
            let (seen, running, most) = (seen.clone(), running.clone(), most.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(1)).await;
                seen.lock().unwrap().push(String::from_utf8(job.payload).unwrap());
                running.fetch_sub(1, Ordering::SeqCst);
                Verdict::Done
            }
        }
    };
    let c = Consumer::start(store.clone(), q.clone(), handler, fast().with_concurrency(8)).unwrap();
    wait_until(Duration::from_secs(60), "1000 completed", || async {
        completed(&store, &q).await == 1000
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1000, "each job ran once");
    assert_eq!(seen.iter().collect::<HashSet<_>>().len(), 1000, "no job ran twice");
    let most = most.load(Ordering::SeqCst);
    assert!((2..=8).contains(&most), "at most 8 at once, and more than one: {most}");
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active, counts.dead), (0, 0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lanes_hold_each_group_to_its_limit_while_groups_and_flat_jobs_run_side_by_side() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let wide = GroupName::new("wide").unwrap();
    store
        .set_group_limit(&q, &LimitTarget::Group(wide.clone()), 2)
        .await
        .unwrap();
    let mut limits = HashMap::from([("wide".to_string(), 2)]);
    let jobs = |n: usize| (0..n).map(|i| NewJob::new(format!("{i}"))).collect::<Vec<_>>();
    store.genqueue(&q, &wide, &jobs(20)).await.unwrap();
    for g in ["a", "b", "c"] {
        store
            .genqueue(&q, &GroupName::new(g).unwrap(), &jobs(10))
            .await
            .unwrap();
        limits.insert(g.to_string(), 1); // the default limit
    }
    store.enqueue(&q, &jobs(20)).await.unwrap(); // flat: no limit but the concurrency

    #[derive(Default)]
    struct Seen {
        running: HashMap<String, usize>,
        most: HashMap<String, usize>,
        total: usize,
        total_most: usize,
    }
    let seen = Arc::new(Mutex::new(Seen::default()));
    let handler = {
        let seen = seen.clone();
        move |job: JobContext| {
            let seen = seen.clone();
            async move {
                let g = job.group.map(|g| g.to_string()).unwrap_or_else(|| "(flat)".into());
                {
                    let mut s = seen.lock().unwrap();
                    let now = *s.running.entry(g.clone()).and_modify(|n| *n += 1).or_insert(1);
                    let most = s.most.entry(g.clone()).or_default();
                    *most = (*most).max(now);
                    s.total += 1;
                    s.total_most = s.total_most.max(s.total);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
                let mut s = seen.lock().unwrap();
                *s.running.get_mut(&g).unwrap() -= 1;
                s.total -= 1;
                Verdict::Done
            }
        }
    };
    let c = Consumer::start(store.clone(), q.clone(), handler, fast().with_concurrency(8)).unwrap();
    wait_until(Duration::from_secs(30), "70 completed", || async {
        completed(&store, &q).await == 70
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    let s = seen.lock().unwrap();
    for (g, limit) in &limits {
        let most = s.most.get(g).copied().unwrap_or(0);
        assert!(most <= *limit, "group {g} ran {most} at once, over its limit {limit}");
    }
    assert_eq!(s.most.get("wide"), Some(&2), "the wide group used its limit");
    assert!(
        s.most.get("(flat)").copied().unwrap_or(0) >= 2,
        "flat jobs ran side by side"
    );
    assert!(
        s.total_most >= 5,
        "groups ran side by side: at most {} at once",
        s.total_most
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_consumer_is_woken_at_once_by_an_enqueue_in_the_same_process() {
    let db = Db::new();
    let embedded = db.open().await;
    let (store, q): (Arc<dyn Store>, _) = (Arc::new(embedded.clone()), q());
    let (tx, mut started) = mpsc::unbounded_channel::<Instant>();
    let handler = move |_job: JobContext| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            Verdict::Done
        }
    };
    // a beat of 10 s: only a wake can start the job soon
    let opts = ConsumerOptions::default().with_beat(Duration::from_secs(10));
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    let mut latencies = Vec::new();
    for i in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await; // parked by now
        let at = Instant::now();
        store.enqueue(&q, &[NewJob::new(format!("{i}"))]).await.unwrap();
        let began = tokio::time::timeout(Duration::from_secs(5), started.recv())
            .await
            .expect("the enqueue woke the consumer")
            .unwrap();
        latencies.push(began.duration_since(at));
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
    // a behaviour, not a speed: the beat is 10 s, so only the wake can start a job within 2 s
    let worst = latencies.iter().max().copied().unwrap();
    assert!(
        worst < Duration::from_secs(2),
        "enqueue → handler start, beat 10 s: {latencies:?}"
    );
    assert_eq!(completed(&store, &q).await, 5);
    // each job went straight to the consumer's offer, made again after each job ended (a served
    // park is not woken by the commit: its jobs are running)
    assert_eq!(embedded.handed_over(&q), 5);
}

fn offer(n: u32) -> ClaimRequest {
    ClaimRequest {
        n,
        lease: Duration::from_secs(30),
        max_attempts: 3,
        settle: SettleOptions::default(),
    }
}

/// A handoff that forwards the jobs it is handed.
fn forward() -> (Handoff, mpsc::UnboundedReceiver<Vec<echomq::ClaimedJob>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handoff: Handoff = Box::new(move |jobs| {
        let _ = tx.send(jobs);
    });
    (handoff, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_offer_is_served_by_the_enqueue_that_wakes_it_and_a_withdrawn_one_is_not() {
    let db = Db::new();
    let embedded = db.open().await;
    let (store, q): (Arc<dyn Store>, _) = (Arc::new(embedded.clone()), q());

    // parked with an offer of 2: the enqueue of 3 claims 2 of them in its own transaction and
    // hands them over before its reply; the third waits, and the park reports a wake
    let (handoff, mut handed) = forward();
    let park = store.park_with_handoff(&q, Duration::from_secs(10), offer(2), handoff);
    tokio::pin!(park);
    assert!(
        futures::poll!(park.as_mut()).is_pending(),
        "parked (its offer registered)"
    );
    let jobs: Vec<NewJob> = (0..3).map(|i| NewJob::new(format!("{i}"))).collect();
    store.enqueue(&q, &jobs).await.unwrap();
    let got = handed.try_recv().expect("handed over by the time the enqueue replied");
    let ids: Vec<String> = got.iter().map(|j| j.id.to_string()).collect();
    assert_eq!(ids, ["1", "2"], "in claim order, as a claim right after the enqueue");
    assert!(got.iter().all(|j| j.attempts == 1));
    let woke = tokio::time::timeout(Duration::from_secs(5), park)
        .await
        .unwrap()
        .unwrap();
    assert!(woke, "the park ends woken");
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (1, 2));
    assert!(handed.try_recv().is_err(), "handed once");
    assert_eq!(embedded.handed_over(&q), 2);
    // the served park left the third job's wake token to other parks: one plain park takes it
    assert!(store.park(&q, Duration::from_millis(10)).await.unwrap());
    assert!(
        !store.park(&q, Duration::from_millis(10)).await.unwrap(),
        "one token, for job 3"
    );

    // an offer withdrawn (its park dropped) is not served: the next enqueue claims nothing
    let (handoff, mut handed) = forward();
    {
        let park = store.park_with_handoff(&q, Duration::from_secs(10), offer(5), handoff);
        tokio::pin!(park);
        assert!(futures::poll!(park.as_mut()).is_pending());
    }
    store.enqueue(&q, &[NewJob::new("late")]).await.unwrap();
    assert!(
        handed.recv().await.is_none(),
        "the withdrawn offer's handoff was dropped, never called"
    );
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (2, 2));
    assert_eq!(embedded.handed_over(&q), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_served_park_that_left_nothing_claimable_is_not_woken_and_ends_at_its_timeout() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let (handoff, mut handed) = forward();
    let park = store.park_with_handoff(&q, Duration::from_millis(400), offer(2), handoff);
    tokio::pin!(park);
    assert!(futures::poll!(park.as_mut()).is_pending(), "parked");
    store.enqueue(&q, &[NewJob::new("only")]).await.unwrap();
    assert_eq!(ids(&handed.try_recv().expect("handed over")), ["1"]);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        futures::poll!(park.as_mut()).is_pending(),
        "nothing else claimable: the commit woke no park"
    );
    let began = Instant::now();
    assert!(park.await.unwrap(), "a served park reports a wake at its timeout");
    assert!(began.elapsed() >= Duration::from_millis(200));
    // and with work left over, the serving commit wakes it at once
    let (handoff, mut handed) = forward();
    let park = store.park_with_handoff(&q, Duration::from_secs(10), offer(1), handoff);
    tokio::pin!(park);
    assert!(futures::poll!(park.as_mut()).is_pending(), "parked");
    store.enqueue(&q, &[NewJob::new("a"), NewJob::new("b")]).await.unwrap();
    assert_eq!(handed.try_recv().expect("handed over").len(), 1);
    let woke = tokio::time::timeout(Duration::from_secs(5), park)
        .await
        .unwrap()
        .unwrap();
    assert!(woke);
}

/// Takes the wake tokens left waiting, parks offering a claim of `n` (registered once the first
/// poll is pending), runs `enqueue`, and returns what its transaction handed over (empty: nothing).
async fn handed_by<F: std::future::Future<Output = ()>>(
    store: &Arc<dyn Store>,
    q: &QueueName,
    n: u32,
    enqueue: F,
) -> Vec<echomq::ClaimedJob> {
    while store.park(q, Duration::from_millis(1)).await.unwrap() {}
    let (handoff, mut handed) = forward();
    let park = store.park_with_handoff(q, Duration::from_millis(300), offer(n), handoff);
    tokio::pin!(park);
    assert!(
        futures::poll!(park.as_mut()).is_pending(),
        "parked, its offer registered"
    );
    enqueue.await;
    let _ = park.await.unwrap();
    handed.recv().await.unwrap_or_default()
}

fn ids(jobs: &[echomq::ClaimedJob]) -> Vec<String> {
    jobs.iter().map(|j| j.id.to_string()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_hands_its_jobs_over_as_a_claim_after_it_would() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let enqueue = |payloads: &'static [&'static str]| {
        let (store, q) = (store.clone(), q.clone());
        async move {
            let jobs: Vec<NewJob> = payloads.iter().map(|p| NewJob::new(*p)).collect();
            store.enqueue(&q, &jobs).await.unwrap();
        }
    };
    let lease = Duration::from_secs(30);
    let claim_all = || store.claim(&q, 10, lease, 3, SettleOptions::default());

    // nothing else claimable: the new jobs go straight to the offer; the one left over is
    // pending and on the ring, and the handed ones settle with their token as claimed jobs do
    let handed = handed_by(&store, &q, 2, enqueue(&["a", "b", "c"])).await;
    assert_eq!(ids(&handed), ["1", "2"]);
    assert!(handed.iter().all(|j| j.attempts == 1 && j.group.is_none()));
    assert_eq!(
        handed.iter().map(|j| j.payload.as_slice()).collect::<Vec<_>>(),
        [b"a", b"b"]
    );
    let rest = claim_all().await.unwrap();
    assert_eq!((ids(&rest), rest[0].attempts), (vec!["3".to_string()], 1));
    assert!(claim_all().await.unwrap().is_empty(), "nothing left on the ring");
    for job in &handed {
        let settled = store
            .complete(&q, &job.id, 1, None, SettleOptions::default())
            .await
            .unwrap();
        assert_eq!(settled, echomq::store::Settled::Ok);
    }
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (0, 1));

    // an older job waiting: the offer gets it first, in claim order, and the new one waits
    store.enqueue(&q, &[NewJob::new("old")]).await.unwrap();
    assert_eq!(ids(&handed_by(&store, &q, 1, enqueue(&["new"])).await), ["4"]);
    assert_eq!(ids(&claim_all().await.unwrap()), ["5"]);

    // a paused queue hands nothing over: its jobs wait for the resume
    store.pause(&q).await.unwrap();
    assert!(handed_by(&store, &q, 4, enqueue(&["paused"])).await.is_empty());
    assert!(claim_all().await.unwrap().is_empty());
    store.resume(&q).await.unwrap();
    assert_eq!(ids(&claim_all().await.unwrap()), ["6"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_racing_the_enqueue_that_hands_off_leaves_no_job_held() {
    // a job handed over while the consumer stops still runs and settles: after each stop nothing
    // is left active (claimed and stranded until its lease lapses)
    let db = Db::new();
    let embedded = db.open().await;
    let (store, q): (Arc<dyn Store>, _) = (Arc::new(embedded.clone()), q());
    let handler = |_job: JobContext| async move { Verdict::Done };
    let opts = ConsumerOptions::default()
        .with_beat(Duration::from_secs(10))
        .with_concurrency(4);
    let mut sent = 0;
    for round in 0..20u64 {
        let c = Consumer::start(store.clone(), q.clone(), handler, opts.clone()).unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await; // parked by now, offering 4 slots
        let (s, qq) = (store.clone(), q.clone());
        let enqueue = tokio::spawn(async move { s.enqueue(&qq, &[NewJob::new("x"), NewJob::new("y")]).await });
        if round % 2 == 0 {
            // the enqueue first: its transaction hands the jobs over, then the stop
            while !enqueue.is_finished() {
                tokio::task::yield_now().await;
            }
        } else {
            // the stop racing the enqueue's transaction, at a varying moment
            for _ in 0..round * 5 {
                tokio::task::yield_now().await;
            }
        }
        c.stop(Duration::from_secs(5)).await.unwrap();
        enqueue.await.unwrap().unwrap();
        sent += 2;
        let counts = store.counts(&q).await.unwrap();
        assert_eq!(counts.active, 0, "round {round}: no job left held after the stop");
        assert_eq!(
            counts.completed + counts.pending,
            sent,
            "round {round}: every job done or waiting"
        );
    }
    assert!(embedded.handed_over(&q) > 0, "hand-offs happened (the even rounds)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_from_another_handle_on_the_same_file_starts_within_a_beat() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let other = db.open().await; // as another process would: no shared in-process wake
    let (tx, mut started) = mpsc::unbounded_channel::<Instant>();
    let handler = move |_job: JobContext| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            Verdict::Done
        }
    };
    let beat = Duration::from_millis(500);
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        handler,
        ConsumerOptions::default().with_beat(beat),
    )
    .unwrap();
    let mut latencies = Vec::new();
    for i in 0..3 {
        tokio::time::sleep(Duration::from_millis(150 * i + 100)).await; // somewhere in a park
        let at = Instant::now();
        other.enqueue(&q, &[NewJob::new(format!("{i}"))]).await.unwrap();
        let began = tokio::time::timeout(Duration::from_secs(5), started.recv())
            .await
            .unwrap()
            .unwrap();
        latencies.push(began.duration_since(at));
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
    // the park ends at the beat at the latest, and the next round claims
    let worst = latencies.iter().max().copied().unwrap();
    assert!(
        worst < beat + Duration::from_millis(200),
        "enqueue → handler start: {latencies:?}"
    );
    assert_eq!(completed(&store, &q).await, 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_from_another_handle_on_the_same_file_reaches_the_handler_within_a_beat() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let other = db.open().await; // as another process would: its own connection, no shared wake
    let (started_tx, mut started) = mpsc::unbounded_channel::<()>();
    let (stopped_tx, mut stopped) = mpsc::unbounded_channel::<(Instant, Option<String>)>();
    let handler = move |job: JobContext| {
        let (started_tx, stopped_tx) = (started_tx.clone(), stopped_tx.clone());
        async move {
            let _ = started_tx.send(());
            tokio::select! {
                c = job.cancel.cancelled() => {
                    let _ = stopped_tx.send((Instant::now(), c.reason.clone()));
                    Verdict::Cancel(c.reason.unwrap_or_default())
                }
                _ = tokio::time::sleep(Duration::from_secs(30)) => Verdict::Done,
            }
        }
    };
    let beat = Duration::from_secs(1);
    let opts = ConsumerOptions::default()
        .with_beat(beat)
        .with_cancel(true)
        .with_retain(10);
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    let id = store.enqueue(&q, &[NewJob::new("long")]).await.unwrap()[0].id().clone();
    tokio::time::timeout(Duration::from_secs(5), started.recv())
        .await
        .unwrap()
        .unwrap();

    let asked = Instant::now();
    let reply = other
        .cancel(&q, &id, Some("operator"), SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(reply, Cancelled::Requested);
    let (at, reason) = tokio::time::timeout(Duration::from_secs(5), stopped.recv())
        .await
        .expect("the cancel reached the handler")
        .unwrap();
    let took = at.duration_since(asked);
    assert!(took < beat, "the cancel took {took:?}, more than a beat");
    assert_eq!(reason.as_deref(), Some("operator"));
    c.stop(Duration::from_secs(5)).await.unwrap();
    let job = store.get(&q, &id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert_eq!(store.counts(&q).await.unwrap().cancelled, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_written_by_the_settles_when_asked() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    store
        .enqueue(&q, &[NewJob::new("ok"), NewJob::new("out")])
        .await
        .unwrap();
    store
        .enqueue(&q, &[NewJob::new("bad").with_max_attempts(1)])
        .await
        .unwrap();
    let handler = |job: JobContext| async move {
        match job.payload.as_slice() {
            b"ok" => Verdict::Done,
            b"out" => Verdict::DoneWith(b"the output".to_vec()),
            _ => Verdict::Error("broken".into()),
        }
    };
    let c = Consumer::start(store.clone(), q.clone(), handler, fast().with_record(true)).unwrap();
    wait_until(Duration::from_secs(10), "2 completed, 1 dead", || async {
        let c = store.counts(&q).await.unwrap();
        c.completed == 2 && c.dead == 1
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();

    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let mut stmt = conn
        .prepare("SELECT id, status, attempts, field, value FROM emq_records WHERE queue = 'q' ORDER BY id")
        .unwrap();
    type Record = (String, String, String, Option<String>, Option<Vec<u8>>);
    let records: Vec<Record> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(
        records,
        [
            ("1".into(), "completed".into(), "1".into(), None, None),
            (
                "2".into(),
                "completed".into(),
                "1".into(),
                Some("output".into()),
                Some(b"the output".to_vec())
            ),
            (
                "3".into(),
                "dead".into(),
                "1".into(),
                Some("error".into()),
                Some(b"broken".to_vec())
            ),
        ]
    );
}

/// Runs one job whose handler takes three leases, with a second consumer (another handle, a fast
/// reap) ready to take the job the moment its lease lapses. Returns the attempts the handlers saw.
async fn three_lease_job(locks: bool) -> Vec<u64> {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    // renewed a third of a lease before it lapses: 1 s leaves a renewal 660 ms of slack on a
    // loaded machine (with 300 ms, a clean-clone CI run once saw the job reaped under renewal)
    let lease = Duration::from_secs(1);
    let runs = Arc::new(Mutex::new(Vec::new()));
    let handler = {
        let runs = runs.clone();
        move |job: JobContext| {
            let runs = runs.clone();
            async move {
                runs.lock().unwrap().push(job.attempts);
                tokio::select! {
                    _ = tokio::time::sleep(lease * 3) => Verdict::Done,
                    c = job.cancel.cancelled() => Verdict::Error(format!("cancelled: {c}")),
                }
            }
        }
    };
    let opts = ConsumerOptions::default()
        .with_beat(Duration::from_millis(50))
        .with_lease(lease)
        .with_locks(locks)
        .with_recovery(Recovery::Reap);
    let a = Consumer::start(store.clone(), q.clone(), handler.clone(), opts.clone()).unwrap();
    store.enqueue(&q, &[NewJob::new("slow")]).await.unwrap();
    wait_until(Duration::from_secs(5), "the first run", || async {
        !runs.lock().unwrap().is_empty()
    })
    .await;
    let b = Consumer::start(db.store().await, q.clone(), handler, opts).unwrap();
    wait_until(Duration::from_secs(10), "completed, or run twice", || async {
        completed(&store, &q).await > 0 || runs.lock().unwrap().len() > 1
    })
    .await;
    // time for a double run to show
    tokio::time::sleep(lease * 2).await;
    a.stop(Duration::from_secs(5)).await.unwrap();
    b.stop(Duration::from_secs(5)).await.unwrap();
    let runs = runs.lock().unwrap().clone();
    runs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_locks_plane_keeps_a_handler_of_three_leases_alive() {
    assert_eq!(three_lease_job(true).await, [1], "one run, never reaped");
    // the control: without renewals the lease lapses and the other consumer runs it again
    let without = three_lease_job(false).await;
    assert!(
        without.len() >= 2 && without[..2] == [1, 2],
        "without locks: {without:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_stalled_sweep_recovers_a_vanished_consumers_job_then_dead_letters_it_at_max_stalled() {
    let db = Db::new();
    let store = db.store().await;
    let (again, dead) = (QueueName::new("again").unwrap(), QueueName::new("dead").unwrap());
    for q in [&again, &dead] {
        store.enqueue(q, &[NewJob::new("job")]).await.unwrap();
        // a consumer that claims and vanishes: its lease lapses, unsettled
        let claimed = store
            .claim(q, 1, Duration::from_millis(100), 3, SettleOptions::default())
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
                runs.lock().unwrap().push((job.queue().to_string(), job.attempts));
                Verdict::Done
            }
        }
    };
    let stalled = |max_stalled| {
        fast().with_retain(10).with_recovery(Recovery::Stalled(StalledPolicy {
            max_stalled,
            limit: 100,
        }))
    };
    // on its 1st stall a job of `again` is recovered (dead only on its 2nd); one of `dead` dies
    let a = Consumer::start(store.clone(), again.clone(), handler.clone(), stalled(2)).unwrap();
    let d = Consumer::start(store.clone(), dead.clone(), handler, stalled(1)).unwrap();
    wait_until(Duration::from_secs(5), "recovered and completed", || async {
        completed(&store, &again).await == 1
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
        [("again".to_string(), 2)],
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

#[tokio::test]
async fn a_round_leg_that_fails_midway_leaves_nothing_of_itself_behind() {
    // the claim leg fails after it has popped the ring and taken a flat job (a write of the
    // file refused, as a full disk would refuse it): it must be undone whole, as a script that
    // errs before its first write leaves Redis, while the other legs commit
    let db = Db::new();
    let (store, q) = (db.open().await, q());
    let g = GroupName::new("g").unwrap();
    store.enqueue(&q, &[NewJob::new("f1")]).await.unwrap();
    store
        .genqueue(&q, &g, &[NewJob::new("g1"), NewJob::new("g2")])
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER refuse AFTER UPDATE OF state ON emq_jobs \
         WHEN new.state = 'active' AND new.data = CAST('g1' AS BLOB) \
         BEGIN SELECT RAISE(ABORT, 'disk refused the write'); END",
    )
    .unwrap();
    let claim = ClaimRequest {
        n: 5,
        lease: Duration::from_secs(30),
        max_attempts: 3,
        settle: SettleOptions::default(),
    };
    let round = store
        .recover_promote_claim(&q, Recovery::Reap, 10, claim)
        .await
        .unwrap();
    assert!(round.claimed.is_err(), "the claim leg failed: {:?}", round.claimed);
    assert!(round.recovered.is_ok() && round.promoted.is_ok());
    let counts = store.counts(&q).await.unwrap();
    assert_eq!(
        (counts.pending, counts.active),
        (3, 0),
        "nothing of the failed claim stayed"
    );
    conn.execute_batch("DROP TRIGGER refuse").unwrap();
    // the ring and the group's flag are as they were: every job is claimable again
    let round = store
        .recover_promote_claim(&q, Recovery::Reap, 10, claim)
        .await
        .unwrap();
    let mut got: Vec<Vec<u8>> = round.claimed.unwrap().into_iter().map(|j| j.payload).collect();
    got.sort();
    assert_eq!(
        got,
        vec![b"f1".to_vec(), b"g1".to_vec()],
        "the flat job and the lane's head"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_settle_of_an_earlier_attempt_leaves_the_next_attempt_tracked() {
    // attempt 1 outlives its lease and this consumer claims attempt 2; attempt 1's settle (stale)
    // must not untrack attempt 2, which would then get no lease renewal and no cancel
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let id = echomq::JobId::new("job-x").unwrap();
    store
        .enqueue(&q, &[NewJob::new("x").with_id(id.clone())])
        .await
        .unwrap();
    let (second, cancelled) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let first_returned = Arc::new(AtomicUsize::new(0));
    let (s, c, f) = (second.clone(), cancelled.clone(), first_returned.clone());
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let (s, c, f) = (s.clone(), c.clone(), f.clone());
            async move {
                if job.attempts == 1 {
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
                    _ = job.cancel.cancelled() => {
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
            .with_cancel(true),
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
    // its settle, sent as it returned, comes back stale within this
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(consumer.in_flight(), 1, "attempt 2 is still tracked");
    assert_eq!(
        store
            .cancel(&q, &id, Some("op"), SettleOptions::default())
            .await
            .unwrap(),
        Cancelled::Requested
    );
    wait_until(Duration::from_secs(5), "attempt 2 sees the cancel", || async {
        cancelled.load(Ordering::SeqCst) == 1
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(store.counts(&q).await.unwrap().cancelled, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_refused_completion_fails_only_its_own_job() {
    // one output over the store's limit must not sink the group commit it shares with others
    let db = Db::new();
    let store: Arc<dyn Store> = Arc::new(db.open().await.with_payload_limit(1000));
    let q = q();
    let jobs: Vec<NewJob> = (0..20)
        .map(|i| NewJob::new(if i == 0 { "big" } else { "small" }))
        .collect();
    store.enqueue(&q, &jobs).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                // all twenty finish together: their completions go in one group commit
                tokio::time::sleep(Duration::from_millis(50)).await;
                match job.payload.as_slice() {
                    b"big" => Verdict::DoneWith(vec![0; 5000]),
                    _ => Verdict::DoneWith(b"ok".to_vec()),
                }
            }
        },
        fast().with_concurrency(20).with_max_attempts(1),
    )
    .unwrap();
    wait_until(Duration::from_secs(10), "every job settled", || async {
        let c = store.counts(&q).await.unwrap();
        c.completed + c.dead == 20
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await.unwrap();
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.completed, counts.dead), (19, 1));
    assert_eq!(runs.load(Ordering::SeqCst), 20, "no job ran twice");
    let dead = store.list(&q, JobState::Dead, 0, 10).await.unwrap();
    let row = store.get(&q, &dead[0]).await.unwrap().unwrap();
    let why = row.last_error.unwrap_or_default();
    assert!(why.contains("completion refused") && why.contains("5000"), "{why}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cancel_for_an_earlier_job_spares_a_new_job_with_the_same_id() {
    // a cancel request for a job this consumer does not hold is remembered briefly (it may be
    // about to track it); a later job that reuses the id is not the one it was meant for
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let id = echomq::JobId::new("job-a").unwrap();
    store
        .enqueue(&q, &[NewJob::new("old").with_id(id.clone())])
        .await
        .unwrap();
    let held = store
        .claim(&q, 1, Duration::from_secs(30), 3, SettleOptions::default())
        .await
        .unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let s = s.clone();
            async move {
                // long enough for a wrongly remembered request to arrive
                tokio::time::sleep(Duration::from_millis(300)).await;
                s.lock().unwrap().push((job.payload.clone(), job.cancel.is_cancelled()));
                Verdict::Done
            }
        },
        fast().with_cancel(true),
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    store
        .cancel(&q, &id, Some("stop the old one"), SettleOptions::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    store
        .complete(&q, &id, held[0].token, None, SettleOptions::default())
        .await
        .unwrap();
    store
        .enqueue(&q, &[NewJob::new("new").with_id(id.clone())])
        .await
        .unwrap();
    wait_until(Duration::from_secs(5), "the new job ran", || async {
        !seen.lock().unwrap().is_empty()
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(*seen.lock().unwrap(), vec![(b"new".to_vec(), false)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_free_slot_below_the_claim_threshold_takes_new_work_at_once() {
    // concurrency 8 with 7 long jobs running: the one free slot is below a batch (8 / 4 = 2), but
    // the claim before parking still takes a new job for it
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    store
        .enqueue(&q, &(0..7).map(|_| NewJob::new("long")).collect::<Vec<_>>())
        .await
        .unwrap();
    let (running, short) = (Arc::new(AtomicUsize::new(0)), Arc::new(Mutex::new(None)));
    let (r, s) = (running.clone(), short.clone());
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let (r, s) = (r.clone(), s.clone());
            async move {
                if job.payload == b"short" {
                    *s.lock().unwrap() = Some(Instant::now());
                    return Verdict::Done;
                }
                r.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(3)).await;
                Verdict::Done
            }
        },
        fast().with_concurrency(8),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "seven long jobs running", || async {
        running.load(Ordering::SeqCst) == 7
    })
    .await;
    let enqueued = Instant::now();
    store.enqueue(&q, &[NewJob::new("short")]).await.unwrap();
    wait_until(Duration::from_secs(10), "the short job ran", || async {
        short.lock().unwrap().is_some()
    })
    .await;
    let waited = short.lock().unwrap().unwrap() - enqueued;
    consumer.stop(Duration::from_secs(10)).await.unwrap();
    assert!(
        waited < Duration::from_secs(2),
        "the short job waited {waited:?}, for a long job to end, not for the free slot"
    );
}

#[tokio::test]
async fn a_field_of_an_unexpected_storage_class_is_read_as_text_and_judged_as_redis_would() {
    // SQLite lets a hand store a number or a blob where the store writes text (or text where it
    // writes a blob); Redis holds every field as bytes. Such a row must neither fail the claim for
    // the jobs around it nor block `get`: it reads as its bytes, and a malformed one goes dead
    let db = Db::new();
    let (store, q) = (db.open().await, q());
    store
        .enqueue(&q, &[NewJob::new("a"), NewJob::new("b"), NewJob::new("c")])
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    conn.execute_batch(
        "UPDATE emq_jobs SET data = 'text payload' WHERE id = '1'; \
         UPDATE emq_jobs SET state = x'7070' WHERE id = '2';",
    )
    .unwrap();
    let row = store
        .get(&q, &echomq::JobId::parse("1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.payload, b"text payload".to_vec());
    // a state no job can be in: `get` names the field and the job, as it does on Redis
    let err = store.get(&q, &echomq::JobId::parse("2").unwrap()).await.unwrap_err();
    assert!(
        err.to_string().contains("state") && err.to_string().contains("job 2"),
        "{err}"
    );
    let claimed = store
        .claim(&q, 3, Duration::from_secs(30), 3, SettleOptions::default())
        .await
        .unwrap();
    let got: Vec<(String, Vec<u8>)> = claimed.into_iter().map(|j| (j.id.to_string(), j.payload)).collect();
    assert_eq!(
        got,
        vec![("1".into(), b"text payload".to_vec()), ("3".into(), b"c".to_vec())]
    );
    let dead = store
        .get(&q, &echomq::JobId::parse("2").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dead.state, JobState::Dead);
    assert!(
        dead.last_error.as_deref().unwrap_or_default().contains("state pp"),
        "{:?}",
        dead.last_error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_wake_token_wakes_one_parked_consumer_of_the_process() {
    // as BLPOP hands a token to one client: two parks, one single-job enqueue, one park ends;
    // the other stays parked (no round trip for nothing) until a second enqueue
    let db = Db::new();
    let (store, q) = (Arc::new(db.open().await), q());
    let ended = Arc::new(AtomicUsize::new(0));
    let parks: Vec<_> = (0..2)
        .map(|_| {
            let (store, q, ended) = (store.clone(), q.clone(), ended.clone());
            tokio::spawn(async move {
                let woken = store.park(&q, Duration::from_secs(20)).await.unwrap();
                ended.fetch_add(1, Ordering::SeqCst);
                woken
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.enqueue(&q, &[NewJob::new("a")]).await.unwrap();
    wait_until(Duration::from_secs(5), "one park woken", || async {
        ended.load(Ordering::SeqCst) == 1
    })
    .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ended.load(Ordering::SeqCst), 1, "the other park stays parked");
    store.enqueue(&q, &[NewJob::new("b")]).await.unwrap();
    for p in parks {
        assert!(p.await.unwrap(), "each park was woken by a token");
    }
}

#[tokio::test]
async fn a_queue_keeps_its_newest_1000_cancel_requests() {
    // the requests table is how cancels cross processes; streams read it within a poll, so only
    // the newest requests need keeping: it must not grow with every cancel ever made
    let db = Db::new();
    let (store, q) = (db.open().await, q());
    let jobs: Vec<NewJob> = (0..1005).map(|i| NewJob::new(format!("{i}"))).collect();
    store.enqueue(&q, &jobs).await.unwrap();
    let mut held = Vec::new();
    while held.len() < jobs.len() {
        let c = store
            .claim(&q, 1000, Duration::from_secs(60), 3, SettleOptions::default())
            .await
            .unwrap();
        assert!(
            !c.is_empty(),
            "a claim with {} jobs left took none",
            jobs.len() - held.len()
        );
        held.extend(c);
    }
    for j in &held {
        let r = store.cancel(&q, &j.id, None, SettleOptions::default()).await.unwrap();
        assert_eq!(r, Cancelled::Requested);
    }
    let conn = rusqlite::Connection::open(db.path()).unwrap();
    let (n, newest): (i64, String) = conn
        .query_row(
            "SELECT count(*), (SELECT id FROM emq_cancels ORDER BY seq DESC LIMIT 1) FROM emq_cancels",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(n, 1000);
    assert_eq!(newest, held.last().unwrap().id.to_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_drops_running_handlers_without_settling() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let id = store.enqueue(&q, &[NewJob::new("x")]).await.unwrap()[0].id().clone();
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
    // a while for any settle that would (wrongly) follow
    tokio::time::sleep(Duration::from_millis(300)).await;
    let job = store.get(&q, &id).await.unwrap().unwrap();
    assert_eq!(
        (job.state, job.attempts),
        (JobState::Active, 1),
        "not settled: its lease lapses"
    );
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.completed, counts.failed, counts.active), (0, 0, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_off_leaves_a_lapsed_lease_alone() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    store.enqueue(&q, &[NewJob::new("orphan")]).await.unwrap();
    // a holder that vanished: claimed on a short lease that then lapses
    let held = store
        .claim(&q, 1, Duration::from_millis(20), 3, SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(held.len(), 1);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let runs = Arc::new(AtomicUsize::new(0));
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        counting(&runs),
        fast().with_beat(Duration::from_millis(50)).with_recovery(Recovery::Off),
    )
    .unwrap();
    // ten beats: a reaping consumer would have taken the job back and run it
    tokio::time::sleep(Duration::from_millis(500)).await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.active, counts.pending, counts.reaped), (1, 0, 0));
    // the same with the default recovery runs it
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        counting(&runs),
        fast().with_beat(Duration::from_millis(50)),
    )
    .unwrap();
    wait_until(Duration::from_secs(5), "reaped and run", || async {
        runs.load(Ordering::SeqCst) == 1
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[test]
fn a_consumer_started_outside_a_runtime_is_refused_with_an_error() {
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let db = Db::new();
    let store = runtime.block_on(db.store());
    // no runtime entered here: the start must fail cleanly, not panic
    let err = Consumer::start(store, q(), |_job: JobContext| async { Verdict::Done }, fast()).unwrap_err();
    assert!(
        matches!(err, echomq::Error::InvalidOption { field: "runtime", .. }),
        "{err:?}"
    );
}

#[test]
fn a_supervisor_started_outside_a_runtime_is_refused_with_an_error() {
    let Err(err) = echomq::consumer::Supervisor::start(
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_hands_over_no_more_payload_bytes_than_a_claim_would_take() {
    let db = Db::new();
    let (store, q) = (db.store().await, q());
    let mib = vec![b'x'; 1024 * 1024];
    let jobs: Vec<NewJob> = (0..20).map(|_| NewJob::new(mib.clone())).collect();
    let enqueue = {
        let (store, q) = (store.clone(), q.clone());
        async move {
            store.enqueue(&q, &jobs).await.unwrap();
        }
    };
    // an offer of 20: a claim takes no job once its payloads reach BATCH_BYTES_MAX, and the
    // enqueue serving the offer stops there too; the rest wait, claimable
    let per_claim = echomq::store::BATCH_BYTES_MAX / mib.len();
    let handed = handed_by(&store, &q, 20, enqueue).await;
    assert_eq!(handed.len(), per_claim);
    let counts = store.counts(&q).await.unwrap();
    assert_eq!(
        (counts.active, counts.pending),
        (per_claim as u64, 20 - per_claim as u64)
    );
    let next = store
        .claim(&q, 20, Duration::from_secs(30), 3, SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(next.len(), per_claim, "a claim after it takes as many");
}
