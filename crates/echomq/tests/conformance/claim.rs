//! claim, pause and resume: the ring's exact orders, group limits (also under concurrent claimers),
//! the flat set's share, batches, the claim-time guards (max attempts, a carried cancel, malformed
//! and missing rows), attempts as the fencing token, and the wakes of resume.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::store::{LimitTarget, SettleOptions, Settled};
use echomq::{JobId, JobState, NewJob};

use crate::harness::{assert_slot_invariant, wait_until, Ctx};
use crate::steps::{claim, complete, group, named, payloads, LEASE, MAX};

/// A lease short enough to lapse within a case.
const SHORT: Duration = Duration::from_millis(20);
const WITHIN: Duration = Duration::from_secs(5);

/// f1 f2 f3 flat, then a1 a2, b1 b2, c1 c2 in groups a, b, c (the ring's example).
async fn enqueue_the_example(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &named(&["f1", "f2", "f3"])).await.unwrap();
    for g in ["a", "b", "c"] {
        let jobs = named(&[&format!("{g}1"), &format!("{g}2")]);
        ctx.store.genqueue(&ctx.q, &group(g), &jobs).await.unwrap();
    }
}

async fn ids_in(ctx: &Ctx, state: JobState) -> Vec<JobId> {
    ctx.store.list(&ctx.q, state, None, 10_000).await.unwrap().ids
}

/// Waits until `n` short leases have lapsed and reap has put their jobs back.
async fn reap_after_lapse(ctx: &Ctx, n: u64) {
    let reaped = &AtomicU64::new(0);
    wait_until(
        WITHIN,
        "the short lease lapses and reap recovers the job",
        move || async move {
            let got = ctx.store.reap(&ctx.q, 100, None).await.unwrap();
            reaped.fetch_add(got, Ordering::SeqCst) + got >= n
        },
    )
    .await;
}

// ---- the order of the ring ----

pub async fn claim_one_at_a_time_with_limit_2_gives_f1_a1_b1_c1_f2_a2_b2_c2_f3(ctx: &Ctx) {
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 2)
        .await
        .unwrap();
    enqueue_the_example(ctx).await;
    let mut order = Vec::new();
    loop {
        let got = claim(ctx, 1).await;
        assert!(got.len() <= 1, "claim(1) handed out {}", got.len());
        let Some(job) = got.into_iter().next() else { break };
        order.push(String::from_utf8(job.payload.clone()).unwrap());
        assert_slot_invariant(ctx).await;
        complete(ctx, &job).await;
        assert_slot_invariant(ctx).await;
    }
    assert_eq!(order, ["f1", "a1", "b1", "c1", "f2", "a2", "b2", "c2", "f3"]);
    assert!(ctx.probe.ring().await.is_empty(), "an empty queue leaves an empty ring");
}

pub async fn claim_in_batches_with_limit_1_gives_f1_a1_b1_c1_then_f2_f3(ctx: &Ctx) {
    enqueue_the_example(ctx).await;
    let first = claim(ctx, 4).await;
    assert_eq!(payloads(&first), ["f1", "a1", "b1", "c1"]);
    assert_slot_invariant(ctx).await;
    let second = claim(ctx, 10).await;
    assert_eq!(
        payloads(&second),
        ["f2", "f3"],
        "every group is at its limit of 1: only flat jobs are left to claim"
    );
    assert_slot_invariant(ctx).await;
    let slots = ctx.probe.slots().await;
    for g in ["a", "b", "c"] {
        assert_eq!(slots.get(g), Some(&1), "group {g} holds one slot");
    }
    assert!(claim(ctx, 10).await.is_empty());
}

pub async fn claim_gives_flat_jobs_one_claim_in_g_plus_1_with_g_groups_ready(ctx: &Ctx) {
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 100)
        .await
        .unwrap();
    let flat: Vec<String> = (0..40).map(|i| format!("f{i}")).collect();
    let flat: Vec<&str> = flat.iter().map(String::as_str).collect();
    ctx.store.enqueue(&ctx.q, &named(&flat)).await.unwrap();
    for g in ["a", "b", "c"] {
        let jobs: Vec<String> = (0..20).map(|i| format!("{g}{i}")).collect();
        let jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
        ctx.store.genqueue(&ctx.q, &group(g), &named(&jobs)).await.unwrap();
    }
    let got = claim(ctx, 40).await;
    assert_eq!(got.len(), 40);
    let flat_taken = got.iter().filter(|c| c.group.is_none()).count();
    assert_eq!(flat_taken, 10, "3 groups ready: the flat set gets 1/4 of the claims");
    for (i, job) in got.iter().enumerate() {
        assert_eq!(
            job.group.is_none(),
            i % 4 == 0,
            "round robin: every 4th claim is flat (claim {i} was {:?})",
            job.group
        );
    }
    assert_slot_invariant(ctx).await;
}

pub async fn claim_honours_a_group_s_own_limit_over_the_default(ctx: &Ctx) {
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 2)
        .await
        .unwrap();
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(group("big")), 3)
        .await
        .unwrap();
    for g in ["big", "small"] {
        let jobs: Vec<String> = (0..5).map(|i| format!("{g}{i}")).collect();
        let jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
        ctx.store.genqueue(&ctx.q, &group(g), &named(&jobs)).await.unwrap();
    }
    let got = claim(ctx, 100).await;
    let per: HashMap<String, usize> = got.iter().fold(HashMap::new(), |mut m, c| {
        *m.entry(c.group.as_ref().unwrap().to_string()).or_default() += 1;
        m
    });
    assert_eq!(per.get("big"), Some(&3));
    assert_eq!(per.get("small"), Some(&2));
    assert_slot_invariant(ctx).await;
}

pub async fn claim_under_16_concurrent_claimers_never_exceeds_a_group_limit(ctx: &Ctx) {
    const GROUPS: usize = 10;
    const PER_GROUP: usize = 20;
    const LIMIT: u32 = 2;
    const TOTAL: usize = GROUPS * PER_GROUP;
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, LIMIT)
        .await
        .unwrap();
    for g in 0..GROUPS {
        let jobs: Vec<NewJob> = (0..PER_GROUP).map(|j| NewJob::new(format!("g{g}-{j}"))).collect();
        ctx.store
            .genqueue(&ctx.q, &group(&format!("g{g}")), &jobs)
            .await
            .unwrap();
    }

    // Incremented after a claim hands a job out, decremented before its complete is sent: never
    // above what the store counts, so a count above the limit here is one the store allowed.
    let running: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
    let done: Arc<Mutex<HashSet<String>>> = Arc::default();
    let finished = Arc::new(AtomicUsize::new(0));

    let checker = {
        let finished = finished.clone();
        let probe = ctx.probe.clone();
        tokio::spawn(async move {
            let mut polls = 0u64;
            while finished.load(Ordering::SeqCst) < TOTAL {
                for (g, a) in probe.slots().await {
                    assert!(a <= u64::from(LIMIT), "the store counts {a} active jobs in group {g}");
                }
                polls += 1;
                tokio::task::yield_now().await;
            }
            polls
        })
    };

    let mut claimers = Vec::new();
    for t in 0..16u32 {
        let store = ctx.store.clone();
        let q = ctx.q.clone();
        let running = running.clone();
        let done = done.clone();
        let finished = finished.clone();
        claimers.push(tokio::spawn(async move {
            let n = 1 + t % 3;
            while finished.load(Ordering::SeqCst) < TOTAL {
                let got = store
                    .claim(&q, echomq::store::ClaimRequest::new(n, LEASE).max_attempts(MAX))
                    .await
                    .unwrap();
                if got.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                for job in &got {
                    let g = job.group.as_ref().unwrap().to_string();
                    {
                        let mut r = running.lock().unwrap();
                        let a = r.entry(g.clone()).or_default();
                        *a += 1;
                        assert!(*a <= LIMIT, "group {g} has {a} jobs running at once");
                    }
                    tokio::task::yield_now().await;
                    *running.lock().unwrap().get_mut(&g).unwrap() -= 1;
                    let r = store
                        .complete(
                            &q,
                            &echomq::store::Completion::new(job.id.clone(), job.token),
                            SettleOptions::default(),
                        )
                        .await
                        .unwrap();
                    assert_eq!(r, Settled::Ok, "complete of {}", job.id);
                    let payload = String::from_utf8(job.payload.clone()).unwrap();
                    assert!(
                        done.lock().unwrap().insert(payload.clone()),
                        "{payload} was handed out twice"
                    );
                    finished.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    tokio::time::timeout(Duration::from_secs(60), async {
        for c in claimers {
            c.await.unwrap();
        }
    })
    .await
    .expect("16 claimers finish 200 jobs within 60 s");
    let polls = checker.await.unwrap();
    assert!(polls > 0, "the checker looked at least once");

    assert_eq!(done.lock().unwrap().len(), TOTAL, "every job done exactly once");
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!(counts.completed, TOTAL as u64);
    assert_eq!((counts.pending, counts.active), (0, 0));
    assert_slot_invariant(ctx).await;
    assert!(ctx.probe.slots().await.is_empty());
}

pub async fn claim_drops_a_member_that_gives_nothing_and_clears_its_flag(ctx: &Ctx) {
    let g = group("a");
    let ids = ctx.store.genqueue(&ctx.q, &g, &named(&["a1"])).await.unwrap();
    // A waiting lane job cancelled by an operator leaves its group on the ring with an empty lane.
    ctx.store
        .cancel(&ctx.q, ids[0].id(), None, SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(ctx.probe.ring().await, ["a"]);
    assert!(claim(ctx, 10).await.is_empty());
    assert!(ctx.probe.ring().await.is_empty(), "the stale member is dropped");
    // Its flag went with it: the next genqueue puts the group back on the ring.
    ctx.store.genqueue(&ctx.q, &g, &named(&["a2"])).await.unwrap();
    assert_eq!(ctx.probe.ring().await, ["a"]);
    assert_eq!(payloads(&claim(ctx, 10).await), ["a2"]);
    assert_slot_invariant(ctx).await;
}

// ---- batches, leases, attempts ----

pub async fn claim_hands_out_at_most_n_jobs_per_call(ctx: &Ctx) {
    let jobs: Vec<NewJob> = (0..10).map(|i| NewJob::new(format!("{i}"))).collect();
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    assert_eq!(claim(ctx, 4).await.len(), 4);
    assert_eq!(claim(ctx, 4).await.len(), 4);
    assert_eq!(claim(ctx, 4).await.len(), 2);
    assert!(claim(ctx, 4).await.is_empty());
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (0, 10));
}

pub async fn claim_of_more_than_1000_jobs_hands_out_all_in_fifo_order(ctx: &Ctx) {
    let jobs: Vec<NewJob> = (0..1200).map(|i| NewJob::new(format!("{i}"))).collect();
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    let got = claim(ctx, 1500).await;
    let order: Vec<u64> = got.iter().map(|c| c.id.as_str().parse().unwrap()).collect();
    assert_eq!(order, (1..=1200).collect::<Vec<u64>>());
}

pub async fn claim_on_an_empty_queue_gives_nothing(ctx: &Ctx) {
    assert!(claim(ctx, 10).await.is_empty());
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.pending, counts.active, counts.dead), (0, 0, 0));
}

pub async fn claim_leases_the_job_until_now_plus_the_lease_on_the_store_clock(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &named(&["x"])).await.unwrap();
    let before = ctx.probe.now_ms().await;
    let got = claim(ctx, 1).await;
    let after = ctx.probe.now_ms().await;
    let job = ctx.store.get(&ctx.q, &got[0].id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Active);
    let lease = LEASE.as_millis() as u64;
    let deadline = job.score.expect("an active job's score is its lease deadline");
    assert!(
        (before + lease..=after + lease).contains(&deadline),
        "deadline {deadline} not within [{}, {}]",
        before + lease,
        after + lease
    );
    assert_eq!(ids_in(ctx, JobState::Active).await, [got[0].id.clone()]);
}

pub async fn claim_tells_how_long_each_job_waited_ready(ctx: &Ctx) {
    // one job of each priority the aging moves, under the default aging and under strict aging
    let waited = |jobs: &[echomq::ClaimedJob]| -> Vec<Option<Duration>> { jobs.iter().map(|j| j.wait).collect() };
    for strict in [false, true] {
        if strict {
            ctx.store.set_priority_aging(&ctx.q, Duration::ZERO).await.unwrap();
        }
        let batch = [NewJob::new("urgent"), NewJob::new("later").with_priority(5)];
        ctx.store.enqueue(&ctx.q, &batch).await.unwrap();
        ctx.store
            .genqueue(&ctx.q, &group("g"), &[NewJob::new("laned").with_priority(9)])
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_millis(300)).await;
        let jobs = claim(ctx, 3).await;
        assert_eq!(jobs.len(), 3);
        for (job, wait) in jobs.iter().zip(waited(&jobs)) {
            let wait = wait.unwrap_or_else(|| panic!("no wait for {}", job.id));
            // the store's clock against the case's: a few ms either way, never a priority's
            // aging (5 × 60 s) or a strict step
            assert!(
                wait >= Duration::from_millis(250) && wait < Duration::from_secs(30),
                "job {} (strict {strict}) waited {wait:?}",
                job.id
            );
        }
        for job in &jobs {
            complete(ctx, job).await;
        }
    }
    // a job recovered from a lapsed lease goes first, whatever its age: its wait is unknown
    ctx.store.enqueue(&ctx.q, &[NewJob::new("lapsed")]).await.unwrap();
    let held = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(MAX))
        .await
        .unwrap()
        .jobs;
    assert!(held[0].wait.is_some());
    reap_after_lapse(ctx, 1).await;
    let again = claim(ctx, 1).await;
    assert_eq!(again[0].id, held[0].id);
    assert_eq!(again[0].wait, None);
}

pub async fn claim_raises_attempts_by_one_each_time(ctx: &Ctx) {
    ctx.store
        .enqueue(&ctx.q, &[NewJob::new("x").with_max_attempts(5)])
        .await
        .unwrap();
    for expected in 1..=3u64 {
        let got = ctx
            .store
            .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(MAX))
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "claim {expected}");
        assert_eq!(got[0].attempts, expected, "the token is the attempts after this claim");
        let row = ctx.store.get(&ctx.q, &got[0].id).await.unwrap().unwrap();
        assert_eq!(row.attempts, expected);
        reap_after_lapse(ctx, 1).await;
        let row = ctx.store.get(&ctx.q, &got[0].id).await.unwrap().unwrap();
        assert_eq!(row.attempts, expected, "reap leaves attempts alone");
        assert_eq!(row.state, JobState::Pending);
    }
}

/// Each job of one claim carries its own attempts and group, whatever jobs the batch held before
/// it: fresh flat jobs alone, a grouped job after a fresh flat one, a retried job beside a fresh one.
pub async fn claim_gives_each_job_of_a_batch_its_own_attempts_and_group(ctx: &Ctx) {
    let of = |got: &[echomq::ClaimedJob]| -> Vec<(String, u64, Option<String>)> {
        got.iter()
            .map(|j| {
                let name = String::from_utf8(j.payload.clone()).unwrap();
                (name, j.attempts, j.group.as_ref().map(|g| g.as_str().to_string()))
            })
            .collect()
    };
    ctx.store.enqueue(&ctx.q, &named(&["p1", "p2"])).await.unwrap();
    let got = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(2, LEASE).max_attempts(MAX))
        .await
        .unwrap();
    assert_eq!(of(&got), [("p1".into(), 1, None), ("p2".into(), 1, None)]);
    for j in &got {
        complete(ctx, j).await;
    }
    // f1 a1 b1 c1 (the ring's example): a fresh flat job, then one of each group
    enqueue_the_example(ctx).await;
    let got = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(4, LEASE).max_attempts(MAX))
        .await
        .unwrap();
    let want: Vec<(String, u64, Option<String>)> =
        [("f1", None), ("a1", Some("a")), ("b1", Some("b")), ("c1", Some("c"))]
            .into_iter()
            .map(|(n, g)| (n.to_string(), 1, g.map(str::to_string)))
            .collect();
    assert_eq!(of(&got), want);
    assert_slot_invariant(ctx).await;
    // all settled, the rest claimed and settled; then r claimed once and recovered, claimed again
    // beside a fresh job
    let mut held = got.jobs;
    while !held.is_empty() {
        for j in &held {
            complete(ctx, j).await;
        }
        held = claim(ctx, 100).await;
    }
    ctx.store.enqueue(&ctx.q, &named(&["r"])).await.unwrap();
    let first = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(MAX))
        .await
        .unwrap();
    assert_eq!(of(&first), [("r".into(), 1, None)]);
    reap_after_lapse(ctx, 1).await;
    ctx.store.enqueue(&ctx.q, &named(&["n"])).await.unwrap();
    let mut got = of(&ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(2, LEASE).max_attempts(MAX))
        .await
        .unwrap());
    got.sort();
    assert_eq!(got, [("n".into(), 1, None), ("r".into(), 2, None)]);
    assert_slot_invariant(ctx).await;
}

// ---- the claim-time guards ----

pub async fn claim_buries_a_job_at_its_own_max_attempts_as_lease_expired(ctx: &Ctx) {
    let ids = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("last").with_max_attempts(1), NewJob::new("next")])
        .await
        .unwrap();
    let got = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(MAX))
        .await
        .unwrap();
    assert_eq!(payloads(&got), ["last"]);
    reap_after_lapse(ctx, 1).await;
    ctx.probe.clear_wakes().await;
    // The reaped job is at the front; the guard buries it and the batch still fills from the rest.
    let got = claim(ctx, 1).await;
    assert_eq!(payloads(&got), ["next"], "the guard does not fail or shorten the batch");
    let row = ctx.store.get(&ctx.q, ids[0].id()).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Dead);
    assert_eq!(row.last_error.as_deref(), Some("lease expired on the last attempt"));
    assert_eq!(row.attempts, 1, "a job not handed out keeps its attempts");
    assert_eq!(ids_in(ctx, JobState::Dead).await, [ids[0].id().clone()]);
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.failed, counts.dead, counts.active), (1, 1, 1));
    assert_eq!(ctx.probe.wakes().await, 0, "claim pushes no wake");
}

pub async fn claim_buries_a_lane_job_at_the_default_max_attempts_without_taking_a_slot(ctx: &Ctx) {
    let g = group("a");
    let ids = ctx.store.genqueue(&ctx.q, &g, &named(&["a1", "a2"])).await.unwrap();
    let got = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(1))
        .await
        .unwrap();
    assert_eq!(payloads(&got), ["a1"]);
    reap_after_lapse(ctx, 1).await;
    assert_slot_invariant(ctx).await;
    // max_attempts 1 from the caller: a1 has used its one attempt; a2 has not.
    let got = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(10, LEASE).max_attempts(1))
        .await
        .unwrap();
    assert_eq!(payloads(&got), ["a2"]);
    let row = ctx.store.get(&ctx.q, ids[0].id()).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Dead);
    assert_eq!(row.last_error.as_deref(), Some("lease expired on the last attempt"));
    assert_eq!(ctx.probe.slots().await.get("a"), Some(&1), "only a2 holds a slot");
    assert_slot_invariant(ctx).await;
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().failed, 1);
}

pub async fn claim_prefers_a_job_s_own_max_attempts_over_the_default(ctx: &Ctx) {
    ctx.store
        .enqueue(&ctx.q, &[NewJob::new("x").with_max_attempts(3)])
        .await
        .unwrap();
    for expected in 1..=3u64 {
        let got = ctx
            .store
            .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(1))
            .await
            .unwrap();
        assert_eq!(got.len(), 1, "its own budget of 3 wins over the default of 1");
        assert_eq!(got[0].attempts, expected);
        reap_after_lapse(ctx, 1).await;
    }
    assert!(claim(ctx, 1).await.is_empty(), "the fourth claim meets the guard");
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().dead, 1);
}

pub async fn claim_writes_a_completion_record_for_a_job_it_buries_when_asked(ctx: &Ctx) {
    let ids = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("x").with_max_attempts(1)])
        .await
        .unwrap();
    ctx.store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(MAX))
        .await
        .unwrap();
    reap_after_lapse(ctx, 1).await;
    let record = SettleOptions::default().record(true);
    assert!(ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, LEASE)
                .max_attempts(MAX)
                .settle(record)
        )
        .await
        .unwrap()
        .is_empty());
    let records = ctx.probe.records().await;
    assert_eq!(records.len(), 1, "one record, written by claim itself");
    let record = &records[0];
    assert_eq!(record.id, ids[0].id().as_str());
    assert_eq!(record.status, "dead");
    assert_eq!(record.error.as_deref(), Some("lease expired on the last attempt"));
}

pub async fn claim_cancels_a_row_carrying_a_cancel_instead_of_handing_it_out(ctx: &Ctx) {
    let ids = ctx.store.enqueue(&ctx.q, &named(&["x", "y"])).await.unwrap();
    let got = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(MAX))
        .await
        .unwrap();
    assert_eq!(payloads(&got), ["x"]);
    let r = ctx
        .store
        .cancel(&ctx.q, ids[0].id(), Some("stop"), SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(r, echomq::store::CancelOutcome::Requested);
    reap_after_lapse(ctx, 1).await;
    let got = claim(ctx, 10).await;
    assert_eq!(
        payloads(&got),
        ["y"],
        "the cancelled row is not handed out; the batch fills"
    );
    assert_eq!(
        ctx.store.get(&ctx.q, ids[0].id()).await.unwrap(),
        None,
        "not retained: gone"
    );
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.cancelled, counts.failed, counts.dead), (1, 0, 0));
}

pub async fn claim_cancels_a_lane_row_carrying_a_cancel_and_retains_it_when_asked(ctx: &Ctx) {
    ctx.keep(10).await;
    let g = group("a");
    let ids = ctx.store.genqueue(&ctx.q, &g, &named(&["a1", "a2"])).await.unwrap();
    let got = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(1, SHORT).max_attempts(MAX))
        .await
        .unwrap();
    assert_eq!(payloads(&got), ["a1"]);
    ctx.store
        .cancel(&ctx.q, ids[0].id(), Some("stop"), SettleOptions::default())
        .await
        .unwrap();
    reap_after_lapse(ctx, 1).await;
    let retain = SettleOptions::new();
    let got = ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(10, LEASE)
                .max_attempts(MAX)
                .settle(retain),
        )
        .await
        .unwrap();
    assert_eq!(payloads(&got), ["a2"]);
    let row = ctx.store.get(&ctx.q, ids[0].id()).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Cancelled);
    assert_eq!(ids_in(ctx, JobState::Cancelled).await, [ids[0].id().clone()]);
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().cancelled, 1);
    assert_slot_invariant(ctx).await;
}

/// Enqueues `x` and `y`, corrupts `x` with `corrupt`, claims 2: only `y` comes out, `x` is dead
/// with a last_error containing `defect`, counted as failed.
async fn claim_meets_a_malformed_row<F, Fut>(ctx: &Ctx, group_of: Option<&str>, defect: &str, corrupt: F)
where
    F: FnOnce(JobId) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let ids = match group_of {
        None => ctx.store.enqueue(&ctx.q, &named(&["x", "y"])).await.unwrap(),
        Some(g) => {
            ctx.store
                .set_group_limit(&ctx.q, &LimitTarget::Group(group(g)), 2)
                .await
                .unwrap();
            ctx.store
                .genqueue(&ctx.q, &group(g), &named(&["x", "y"]))
                .await
                .unwrap()
        }
    };
    let bad = ids[0].id().clone();
    corrupt(bad.clone()).await;
    let got = claim(ctx, 2).await;
    assert_eq!(payloads(&got), ["y"], "a malformed row never fails the batch");
    assert_eq!(ids_in(ctx, JobState::Dead).await, std::slice::from_ref(&bad));
    let err = ctx.probe.row_field(&bad, "last_error").await.unwrap_or_default();
    assert!(err.contains(defect), "last_error {err:?} names the defect {defect:?}");
    assert_eq!(ctx.probe.row_field(&bad, "state").await.as_deref(), Some("dead"));
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!(
        (counts.failed, counts.dead, counts.active, counts.pending),
        (1, 1, 1, 0)
    );
    assert_slot_invariant(ctx).await;
}

pub async fn claim_buries_a_row_with_malformed_attempts(ctx: &Ctx) {
    claim_meets_a_malformed_row(ctx, None, "attempts", |id| async move {
        ctx.probe.set_row_field(&id, "attempts", "xx").await
    })
    .await;
}

pub async fn claim_buries_a_row_with_malformed_max_attempts(ctx: &Ctx) {
    claim_meets_a_malformed_row(ctx, None, "max_attempts", |id| async move {
        ctx.probe.set_row_field(&id, "max_attempts", "lots").await
    })
    .await;
}

pub async fn claim_buries_a_row_with_attempts_that_are_no_count(ctx: &Ctx) {
    // numbers, but no attempt count: below zero, a fraction, the infinities, past 2^53
    for bad in ["-3", "1.5", "inf", "-inf", "nan", "1e300"] {
        let ids = ctx.store.enqueue(&ctx.q, &named(&[bad])).await.unwrap();
        let id = ids[0].id().clone();
        ctx.probe.set_row_field(&id, "attempts", bad).await;
        assert!(claim(ctx, 1).await.is_empty(), "attempts {bad}: not handed out");
        // (get refuses the row: its attempts field is no count)
        let state = ctx.probe.row_field(&id, "state").await;
        assert_eq!(state.as_deref(), Some("dead"), "attempts {bad}");
        let err = ctx.probe.row_field(&id, "last_error").await.unwrap_or_default();
        assert!(err.contains("malformed row: attempts"), "attempts {bad}: {err:?}");
    }
    for bad in ["0", "-1", "2.5"] {
        let ids = ctx.store.enqueue(&ctx.q, &named(&["m"])).await.unwrap();
        let id = ids[0].id().clone();
        ctx.probe.set_row_field(&id, "max_attempts", bad).await;
        assert!(claim(ctx, 1).await.is_empty(), "max_attempts {bad}: not handed out");
        let err = ctx.probe.row_field(&id, "last_error").await.unwrap_or_default();
        assert!(
            err.contains("malformed row: max_attempts"),
            "max_attempts {bad}: {err:?}"
        );
    }
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().dead, 9);
}

pub async fn claim_stops_once_the_payloads_reach_the_byte_bound(ctx: &Ctx) {
    // three 5 MiB payloads against the 8 MiB bound: the first two (the second passes the bound,
    // the first never stops a claim), then the third; flat jobs and a lane alike
    let big = |tag: u8| NewJob::new(vec![tag; 5 << 20]);
    ctx.store
        .enqueue(&ctx.q, &[big(b'a'), big(b'b'), big(b'c')])
        .await
        .unwrap();
    let g = group("g");
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 3)
        .await
        .unwrap();
    let firsts = |claimed: &[echomq::ClaimedJob]| -> Vec<u8> { claimed.iter().map(|c| c.payload[0]).collect() };
    assert_eq!(firsts(&claim(ctx, 3).await), b"ab");
    assert_eq!(firsts(&claim(ctx, 3).await), b"c");
    ctx.store
        .genqueue(&ctx.q, &g, &[big(b'x'), big(b'y'), big(b'z')])
        .await
        .unwrap();
    assert_eq!(firsts(&claim(ctx, 3).await), b"xy");
    assert_eq!(firsts(&claim(ctx, 3).await), b"z");
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().active, 6);
    assert_slot_invariant(ctx).await;
}

pub async fn claim_buries_a_row_without_data(ctx: &Ctx) {
    claim_meets_a_malformed_row(ctx, None, "data", |id| async move {
        ctx.probe.del_row_field(&id, "data").await
    })
    .await;
}

pub async fn claim_buries_a_row_in_a_state_other_than_pending(ctx: &Ctx) {
    claim_meets_a_malformed_row(ctx, None, "state", |id| async move {
        ctx.probe.set_row_field(&id, "state", "completed").await
    })
    .await;
}

/// A fresh row is told by its values: a payload that reads `pending` is a payload; a row given one
/// field more (its value `pending`) or a state changed by hand is read whole, as any other row.
pub async fn claim_tells_a_fresh_row_by_its_values_and_reads_any_other_whole(ctx: &Ctx) {
    let ids = ctx
        .store
        .enqueue(&ctx.q, &named(&["pending", "b", "pending", "d"]))
        .await
        .unwrap();
    let id = |i: usize| ids[i].id().clone();
    ctx.probe.set_row_field(&id(1), "last_error", "pending").await;
    ctx.probe.set_row_field(&id(2), "state", "active").await;
    let got = claim(ctx, 4).await;
    assert_eq!(
        payloads(&got),
        ["pending", "b", "d"],
        "the row in state active is not handed out"
    );
    assert!(
        got.iter().all(|c| c.attempts == 1),
        "every job handed out is on its first attempt"
    );
    assert_eq!(ids_in(ctx, JobState::Dead).await, [id(2)]);
    let err = ctx.probe.row_field(&id(2), "last_error").await.unwrap_or_default();
    assert!(err.contains("malformed row: state active"), "{err:?}");
    for i in [0, 1, 3] {
        assert_eq!(ctx.probe.row_field(&id(i), "state").await.as_deref(), Some("active"));
        assert_eq!(ctx.probe.row_field(&id(i), "attempts").await.as_deref(), Some("1"));
    }
}

/// Lane rows (genqueue's three fields: data, state, group) are read whole: a row whose group was
/// deleted by hand keeps its attempts even when their value is the lane's name (group `1`, attempts
/// 1: three values again, the third the lane's name), and one in state active is not handed out.
pub async fn claim_reads_every_lane_row_whole(ctx: &Ctx) {
    let g = group("1");
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 10)
        .await
        .unwrap();
    let ids = ctx
        .store
        .genqueue(&ctx.q, &g, &named(&["1", "b", "c", "d"]))
        .await
        .unwrap();
    let id = |i: usize| ids[i].id().clone();
    ctx.probe.del_row_field(&id(1), "group").await;
    ctx.probe.set_row_field(&id(1), "attempts", "1").await;
    ctx.probe.set_row_field(&id(2), "state", "active").await;
    let got = claim(ctx, 10).await;
    assert_eq!(
        payloads(&got),
        ["1", "b", "d"],
        "the row in state active is not handed out"
    );
    let attempts: Vec<u64> = got.iter().map(|c| c.attempts).collect();
    assert_eq!(attempts, [1, 2, 1], "b was read whole: its attempts go on from 1");
    assert!(
        got.iter().all(|c| c.group.as_ref() == Some(&g)),
        "each is handed out as its lane's job"
    );
    assert_eq!(ids_in(ctx, JobState::Dead).await, [id(2)]);
}

pub async fn claim_buries_a_malformed_lane_row_without_taking_a_slot(ctx: &Ctx) {
    claim_meets_a_malformed_row(ctx, Some("a"), "attempts", |id| async move {
        ctx.probe.set_row_field(&id, "attempts", "-").await
    })
    .await;
    assert_eq!(ctx.probe.slots().await.get("a"), Some(&1), "only y holds a slot");
}

pub async fn claim_drops_a_missing_row(ctx: &Ctx) {
    let ids = ctx.store.enqueue(&ctx.q, &named(&["x", "y"])).await.unwrap();
    ctx.probe.del_row(ids[0].id()).await;
    let got = claim(ctx, 2).await;
    assert_eq!(payloads(&got), ["y"]);
    assert!(ids_in(ctx, JobState::Pending).await.is_empty(), "the id left pending");
    assert!(
        ids_in(ctx, JobState::Dead).await.is_empty(),
        "a missing row is dropped, not buried"
    );
    assert_eq!(ctx.store.get(&ctx.q, ids[0].id()).await.unwrap(), None);
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.failed, counts.dead, counts.active), (0, 0, 1));
}

pub async fn claim_drops_a_missing_lane_row_without_taking_a_slot(ctx: &Ctx) {
    let g = group("a");
    let ids = ctx.store.genqueue(&ctx.q, &g, &named(&["a1", "a2"])).await.unwrap();
    ctx.probe.del_row(ids[0].id()).await;
    let got = claim(ctx, 10).await;
    assert_eq!(payloads(&got), ["a2"], "limit 1: the dropped row does not use the slot");
    assert!(ids_in(ctx, JobState::Dead).await.is_empty());
    assert_slot_invariant(ctx).await;
}

// ---- pause and resume ----

pub async fn pause_makes_claim_give_nothing_until_resume(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &named(&["f1"])).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("a"), &named(&["a1"])).await.unwrap();
    ctx.store.pause(&ctx.q).await.unwrap();
    assert!(ctx.store.counts(&ctx.q).await.unwrap().paused);
    assert!(claim(ctx, 10).await.is_empty(), "a paused queue claims nothing");
    // Jobs keep arriving while paused, and wait.
    ctx.store.enqueue(&ctx.q, &named(&["f2"])).await.unwrap();
    assert!(claim(ctx, 10).await.is_empty());
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (3, 0));
    ctx.store.resume(&ctx.q).await.unwrap();
    assert!(!ctx.store.counts(&ctx.q).await.unwrap().paused);
    assert_eq!(payloads(&claim(ctx, 10).await), ["f1", "a1", "f2"]);
    assert_slot_invariant(ctx).await;
}

pub async fn pause_twice_and_resume_once_resumes(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &named(&["f1"])).await.unwrap();
    ctx.store.pause(&ctx.q).await.unwrap();
    ctx.store.pause(&ctx.q).await.unwrap();
    ctx.store.resume(&ctx.q).await.unwrap();
    assert_eq!(payloads(&claim(ctx, 10).await), ["f1"]);
}

pub async fn pause_pushes_no_wake(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &named(&["f1"])).await.unwrap();
    ctx.probe.clear_wakes().await;
    ctx.store.pause(&ctx.q).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 0);
}

pub async fn a_paused_queue_gets_no_wake_until_resume(ctx: &Ctx) {
    // two running jobs on a short lease and a delayed job, then the pause: while paused, nothing
    // is claimable, so no path pushes a wake (a parked consumer would wake to claim nothing)
    ctx.store.enqueue(&ctx.q, &named(&["r1", "r2"])).await.unwrap();
    let short = Duration::from_millis(20);
    let held = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(2, short).max_attempts(MAX))
        .await
        .unwrap();
    assert_eq!(held.len(), 2);
    let soon = NewJob::new("d").with_delay(short);
    ctx.store.enqueue(&ctx.q, &[soon]).await.unwrap();
    ctx.store.pause(&ctx.q).await.unwrap();
    ctx.probe.clear_wakes().await;
    // past the leases and the due time
    tokio::time::sleep(Duration::from_millis(150)).await;
    ctx.store.enqueue(&ctx.q, &named(&["f1", "f2"])).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("a"), &named(&["a1"])).await.unwrap();
    assert_eq!(
        ctx.store
            .promote(&ctx.q, 100, echomq::schedule::GRACE_MIN)
            .await
            .unwrap()
            .moved,
        1
    );
    assert_eq!(ctx.store.reap(&ctx.q, 1, None).await.unwrap(), 1);
    let policy = echomq::store::StalledPolicy::default().max_stalled(5).limit(100);
    let swept = ctx.store.sweep_stalled(&ctx.q, policy).await.unwrap();
    assert_eq!(swept.recovered.len(), 1);
    assert_eq!(ctx.probe.wakes().await, 0, "no wake while paused");
    ctx.store.resume(&ctx.q).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 6, "resume wakes for the six claimable jobs");
    assert_eq!(claim(ctx, 10).await.len(), 6);
    assert_slot_invariant(ctx).await;
}

pub async fn park_waits_for_a_wake_and_returns_false_on_timeout(ctx: &Ctx) {
    // a verb first: the embedded store reports a commit of another connection it has not seen
    // yet (the harness's setup) as a possible wake from another process
    ctx.store.counts(&ctx.q).await.unwrap();
    let parked = ctx
        .store
        .park(&ctx.q, &echomq::Kinds::all(), Duration::from_millis(50))
        .await
        .unwrap();
    assert!(!parked, "no wake: the park times out");
    // the longest timeout there is waits for the wake (and must not overflow a deadline)
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    let parked = tokio::spawn(async move { store.park(&q, &echomq::Kinds::all(), Duration::MAX).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!parked.is_finished(), "parked until a wake");
    ctx.store.enqueue(&ctx.q, &named(&["f1"])).await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("woken by the enqueue")
        .unwrap();
    assert!(woken.unwrap());
}

pub async fn resume_pushes_one_wake_per_claimable_job(ctx: &Ctx) {
    // 3 flat jobs, group a (limit 1) with 2 waiting, group b (limit 3) with 4 waiting and c with one
    // waiting behind one running (limit 1): 3 + 1 + 3 + 0 = 7 jobs claimable on resume.
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(group("b")), 3)
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("c"), &named(&["c1", "c2"]))
        .await
        .unwrap();
    assert_eq!(payloads(&claim(ctx, 1).await), ["c1"]);
    ctx.store.enqueue(&ctx.q, &named(&["f1", "f2", "f3"])).await.unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("a"), &named(&["a1", "a2"]))
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("b"), &named(&["b1", "b2", "b3", "b4"]))
        .await
        .unwrap();
    ctx.store.pause(&ctx.q).await.unwrap();
    ctx.probe.clear_wakes().await;
    ctx.store.resume(&ctx.q).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 7);
    assert_eq!(claim(ctx, 100).await.len(), 7, "as many jobs as wakes");
    assert_slot_invariant(ctx).await;
}

pub async fn resume_pushes_at_most_16_wakes(ctx: &Ctx) {
    let jobs: Vec<NewJob> = (0..40).map(|i| NewJob::new(format!("{i}"))).collect();
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    ctx.store.pause(&ctx.q).await.unwrap();
    ctx.probe.clear_wakes().await;
    ctx.store.resume(&ctx.q).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 16);
}

pub async fn resume_of_an_empty_or_running_queue_pushes_no_wake(ctx: &Ctx) {
    ctx.store.pause(&ctx.q).await.unwrap();
    ctx.store.resume(&ctx.q).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 0, "nothing waits: nothing made claimable");
    ctx.store.enqueue(&ctx.q, &named(&["f1"])).await.unwrap();
    ctx.probe.clear_wakes().await;
    ctx.store.resume(&ctx.q).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 0, "not paused: resume makes nothing claimable");
}

// ---- jobs claimed to be held (prefetch) ----

/// A claim of `n` jobs of which the caller holds `held` beyond its free slots.
async fn claim_holding(ctx: &Ctx, n: u32, held: u32) -> Vec<String> {
    let got = ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(n, LEASE).max_attempts(MAX).held(held),
        )
        .await
        .unwrap();
    payloads(&got.jobs)
}

/// A job to be held that the claim would put on its last attempt stays where it is, and the claim
/// stops before it (a consumer killed while holding it would end it unrun); in a slot, it is taken.
pub async fn claim_to_hold_stops_before_a_job_on_its_last_attempt(ctx: &Ctx) {
    let jobs = vec![
        NewJob::new("j1"),
        NewJob::new("last").with_max_attempts(1),
        NewJob::new("j3"),
    ];
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    assert_eq!(
        claim_holding(ctx, 3, 2).await,
        ["j1"],
        "j1 in the slot; the walk stops at 'last'"
    );
    let pending = ids_in(ctx, JobState::Pending).await;
    assert_eq!(pending.len(), 2, "'last' and j3 wait as they were");
    assert_eq!(
        claim_holding(ctx, 2, 1).await,
        ["last", "j3"],
        "'last' in the slot, j3 held"
    );
    // a job with attempts to spare is held (its first attempt of the default three)
    ctx.store.enqueue(&ctx.q, &named(&["a", "b"])).await.unwrap();
    assert_eq!(claim_holding(ctx, 2, 2).await, ["a", "b"]);
}

/// Under a rate limit nothing is claimed to be held: the claim asks only for the jobs it starts
/// (the queue's limit, or a group's own, whose lane gives no job past the slots).
pub async fn claim_to_hold_under_a_rate_limit_claims_only_for_the_slots(ctx: &Ctx) {
    let fast = "1000/1s".parse::<echomq::RateLimit>().unwrap().with_burst(100).unwrap();
    ctx.store
        .set_rate_limit(&ctx.q, &echomq::RateTarget::Queue, Some(fast))
        .await
        .unwrap();
    ctx.store
        .enqueue(&ctx.q, &named(&["f1", "f2", "f3", "f4", "f5"]))
        .await
        .unwrap();
    assert_eq!(claim_holding(ctx, 5, 3).await, ["f1", "f2"]);
    ctx.store
        .set_rate_limit(&ctx.q, &echomq::RateTarget::Queue, None)
        .await
        .unwrap();
    assert_eq!(claim_holding(ctx, 3, 3).await, ["f3", "f4", "f5"], "no limit: all held");
    // a group under its own limit starts on a slot only; a group with none gives its jobs to hold
    ctx.store
        .set_rate_limit(&ctx.q, &echomq::RateTarget::Group(group("a")), Some(fast))
        .await
        .unwrap();
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 10)
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("a"), &named(&["a1", "a2", "a3"]))
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("b"), &named(&["b1", "b2", "b3"]))
        .await
        .unwrap();
    assert_eq!(claim_holding(ctx, 6, 5).await, ["a1", "b1", "b2", "b3"]);
    assert_eq!(
        ctx.probe.ring().await,
        ["a"],
        "a waits on the ring for a claim with slots"
    );
    assert_eq!(claim_holding(ctx, 2, 0).await, ["a2", "a3"]);
    assert_slot_invariant(ctx).await;
}

crate::conformance!(
    claim_to_hold_stops_before_a_job_on_its_last_attempt,
    claim_to_hold_under_a_rate_limit_claims_only_for_the_slots,
    claim_one_at_a_time_with_limit_2_gives_f1_a1_b1_c1_f2_a2_b2_c2_f3,
    claim_in_batches_with_limit_1_gives_f1_a1_b1_c1_then_f2_f3,
    claim_gives_flat_jobs_one_claim_in_g_plus_1_with_g_groups_ready,
    claim_honours_a_group_s_own_limit_over_the_default,
    claim_under_16_concurrent_claimers_never_exceeds_a_group_limit,
    claim_drops_a_member_that_gives_nothing_and_clears_its_flag,
    claim_hands_out_at_most_n_jobs_per_call,
    claim_of_more_than_1000_jobs_hands_out_all_in_fifo_order,
    claim_on_an_empty_queue_gives_nothing,
    claim_leases_the_job_until_now_plus_the_lease_on_the_store_clock,
    claim_tells_how_long_each_job_waited_ready,
    claim_raises_attempts_by_one_each_time,
    claim_gives_each_job_of_a_batch_its_own_attempts_and_group,
    claim_buries_a_job_at_its_own_max_attempts_as_lease_expired,
    claim_buries_a_lane_job_at_the_default_max_attempts_without_taking_a_slot,
    claim_prefers_a_job_s_own_max_attempts_over_the_default,
    claim_writes_a_completion_record_for_a_job_it_buries_when_asked,
    claim_cancels_a_row_carrying_a_cancel_instead_of_handing_it_out,
    claim_cancels_a_lane_row_carrying_a_cancel_and_retains_it_when_asked,
    claim_buries_a_row_with_malformed_attempts,
    claim_buries_a_row_with_malformed_max_attempts,
    claim_buries_a_row_with_attempts_that_are_no_count,
    claim_stops_once_the_payloads_reach_the_byte_bound,
    claim_buries_a_row_without_data,
    claim_buries_a_row_in_a_state_other_than_pending,
    claim_tells_a_fresh_row_by_its_values_and_reads_any_other_whole,
    claim_reads_every_lane_row_whole,
    claim_buries_a_malformed_lane_row_without_taking_a_slot,
    claim_drops_a_missing_row,
    claim_drops_a_missing_lane_row_without_taking_a_slot,
    pause_makes_claim_give_nothing_until_resume,
    pause_twice_and_resume_once_resumes,
    pause_pushes_no_wake,
    a_paused_queue_gets_no_wake_until_resume,
    park_waits_for_a_wake_and_returns_false_on_timeout,
    resume_pushes_one_wake_per_claimable_job,
    resume_pushes_at_most_16_wakes,
    resume_of_an_empty_or_running_queue_pushes_no_wake,
);
