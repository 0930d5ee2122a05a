//! Processing: every job once under concurrency, lanes under their limits beside flat jobs, a free
//! slot below the claim threshold, a panicking handler, a typed handler, a completion the store
//! refuses, completion records, and the options a consumer refuses.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use echomq::store::LimitTarget;
use echomq::{Consumer, ConsumerOptions, GroupName, JobContext, JobState, NewJob, Verdict};

use crate::harness::{completed, fast, wait_until, Ctx};

async fn every_job_runs_once_at_concurrency_8(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let jobs: Vec<NewJob> = (0..1000).map(|i| NewJob::new(format!("{i}"))).collect();
    store.enqueue(q, &jobs).await.unwrap();
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
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8(job.payload().to_vec()).unwrap());
                running.fetch_sub(1, Ordering::SeqCst);
                Verdict::Done
            }
        }
    };
    let c = Consumer::start(store.clone(), q.clone(), handler, fast().with_concurrency(8)).unwrap();
    wait_until(Duration::from_secs(60), "1000 completed", || async {
        completed(store, q).await == 1000
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 1000, "1000 handler runs");
    assert_eq!(
        seen.iter().collect::<HashSet<_>>().len(),
        1000,
        "every job ran exactly once"
    );
    let most = most.load(Ordering::SeqCst);
    assert!((2..=8).contains(&most), "at most 8 at once, and more than one: {most}");
    let counts = store.counts(q).await.unwrap();
    assert_eq!((counts.pending, counts.active, counts.dead), (0, 0, 0));
}

async fn lanes_hold_each_group_to_its_limit_while_groups_and_flat_jobs_run_side_by_side(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let wide = GroupName::new("wide").unwrap();
    store
        .set_group_limit(q, &LimitTarget::Group(wide.clone()), 2)
        .await
        .unwrap();
    let mut limits = HashMap::from([("wide".to_string(), 2)]);
    let jobs = |n: usize| (0..n).map(|i| NewJob::new(format!("{i}"))).collect::<Vec<_>>();
    store.genqueue(q, &wide, &jobs(20)).await.unwrap();
    for g in ["a", "b", "c"] {
        store.genqueue(q, &GroupName::new(g).unwrap(), &jobs(10)).await.unwrap();
        limits.insert(g.to_string(), 1); // the default limit
    }
    store.enqueue(q, &jobs(20)).await.unwrap(); // flat: no limit but the concurrency

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
                let g = job.group().map(|g| g.to_string()).unwrap_or_else(|| "(flat)".into());
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
        completed(store, q).await == 70
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

async fn a_free_slot_below_the_claim_threshold_takes_new_work_at_once(ctx: &Ctx) {
    // concurrency 8 with 7 long jobs running: the one free slot is below a batch (8 / 4 = 2), but
    // the claim before parking still takes a new job for it
    let (store, q) = (&ctx.store, &ctx.q);
    store
        .enqueue(q, &(0..7).map(|_| NewJob::new("long")).collect::<Vec<_>>())
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
                if job.payload() == b"short" {
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
    store.enqueue(q, &[NewJob::new("short")]).await.unwrap();
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

async fn a_panicking_handler_is_retried_then_buried(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let id = store
        .enqueue(q, &[NewJob::new("boom").with_max_attempts(2)])
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
            .get(q, &id)
            .await
            .unwrap()
            .is_some_and(|j| j.state == JobState::Dead)
    })
    .await;
    let job = store.get(q, &id).await.unwrap().unwrap();
    assert_eq!(job.last_error.as_deref(), Some("panic: handler exploded"));
    assert_eq!(job.attempts, 2);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(!c.is_finished(), "a panicking handler never ends the loop");
    c.stop(Duration::from_secs(5)).await.unwrap();
}

async fn one_refused_completion_fails_only_its_own_job(ctx: &Ctx) {
    // one output over the store's limit must not sink the group commit (or the batch of
    // complete_many) it shares with others
    let store = ctx.opener().open_with_payload_limit(1000).await.unwrap();
    let q = &ctx.q;
    let jobs: Vec<NewJob> = (0..20)
        .map(|i| NewJob::new(if i == 0 { "big" } else { "small" }))
        .collect();
    store.enqueue(q, &jobs).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let consumer = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let r = r.clone();
            async move {
                r.fetch_add(1, Ordering::SeqCst);
                // all twenty finish together: their completions go in one batch
                tokio::time::sleep(Duration::from_millis(50)).await;
                match job.payload() {
                    b"big" => Verdict::DoneWith(vec![0; 5000]),
                    _ => Verdict::DoneWith(b"ok".to_vec()),
                }
            }
        },
        fast().with_concurrency(20).with_max_attempts(1),
    )
    .unwrap();
    wait_until(Duration::from_secs(10), "every job settled", || async {
        let c = store.counts(q).await.unwrap();
        c.completed + c.dead == 20
    })
    .await;
    consumer.stop(Duration::from_secs(5)).await.unwrap();
    let counts = store.counts(q).await.unwrap();
    assert_eq!((counts.completed, counts.dead), (19, 1));
    assert_eq!(runs.load(Ordering::SeqCst), 20, "no job ran twice");
    let dead = store.list(q, JobState::Dead, None, 10).await.unwrap().ids;
    let row = store.get(q, &dead[0]).await.unwrap().unwrap();
    assert_eq!(row.payload, b"big".to_vec(), "the job whose output was refused");
    let why = row.last_error.unwrap_or_default();
    assert!(why.contains("completion refused") && why.contains("5000"), "{why}");
}

async fn records_are_written_by_the_settles_when_asked(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    store
        .enqueue(q, &[NewJob::new("ok"), NewJob::new("out")])
        .await
        .unwrap();
    store
        .enqueue(q, &[NewJob::new("bad").with_max_attempts(1)])
        .await
        .unwrap();
    let handler = |job: JobContext| async move {
        match job.payload() {
            b"ok" => Verdict::Done,
            b"out" => Verdict::DoneWith(b"the output".to_vec()),
            _ => Verdict::Error("broken".into()),
        }
    };
    let c = Consumer::start(store.clone(), q.clone(), handler, fast().with_record(true)).unwrap();
    wait_until(Duration::from_secs(10), "2 completed, 1 dead", || async {
        let c = store.counts(q).await.unwrap();
        c.completed == 2 && c.dead == 1
    })
    .await;
    c.stop(Duration::from_secs(5)).await.unwrap();

    // (id, status, attempts, output, error), by id
    type Record = (String, String, String, Option<String>, Option<String>);
    let mut records: Vec<Record> = ctx
        .probe
        .records()
        .await
        .into_iter()
        .map(|r| (r.id, r.status, r.attempts, r.output, r.error))
        .collect();
    records.sort();
    assert_eq!(
        records,
        [
            ("1".into(), "completed".into(), "1".into(), None, None),
            (
                "2".into(),
                "completed".into(),
                "1".into(),
                Some("the output".into()),
                None
            ),
            ("3".into(), "dead".into(), "1".into(), None, Some("broken".into())),
        ]
    );
}

async fn zero_lease_beat_or_concurrency_is_refused(ctx: &Ctx) {
    for (opts, named) in [
        (ConsumerOptions::default().with_lease(Duration::ZERO), "lease"),
        (ConsumerOptions::default().with_beat(Duration::ZERO), "beat"),
        (ConsumerOptions::default().with_concurrency(0), "concurrency"),
    ] {
        let err = Consumer::start(
            ctx.store.clone(),
            ctx.q.clone(),
            |_j: JobContext| async { Verdict::Done },
            opts,
        )
        .unwrap_err();
        assert!(
            matches!(err, echomq::Error::InvalidOption { field, .. } if field == named),
            "{err}"
        );
    }
}

crate::consumer_cases!(
    every_job_runs_once_at_concurrency_8,
    lanes_hold_each_group_to_its_limit_while_groups_and_flat_jobs_run_side_by_side,
    a_free_slot_below_the_claim_threshold_takes_new_work_at_once,
    a_panicking_handler_is_retried_then_buried,
    one_refused_completion_fails_only_its_own_job,
    records_are_written_by_the_settles_when_asked,
    zero_lease_beat_or_concurrency_is_refused,
);
