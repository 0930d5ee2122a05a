//! Recovery and the lease: reap (lapsed leases back to the front, each having used its claim's
//! attempt; with a redelivery budget, the attempt given back and the lapse counted), sweep_stalled (the
//! count-thresholded sweep: lane jobs, missing rows, the morgue's time) and extend_lock (the
//! deadline moves; a job not in `active` is never re-added). (The raw `EVAL` of the two
//! self-contained script files with the KEYS and ARGV their headers give is Redis-only:
//! `tests/redis_scripts.rs`.)

use echomq::store::RetryRequest;
use std::collections::HashMap;
use std::time::Duration;

use echomq::store::{
    ClaimRequest, Extended, LimitTarget, Recovery, RedeliveryPolicy, Retried, Settled, StalledPolicy, Swept,
};
use echomq::{JobId, JobState};

use crate::harness::{assert_slot_invariant, Ctx};
use crate::settle::{
    add, add_lane, claim, claim_id, counts, get, group, ids, lapse, plain, server_ms, zscore, BUDGET, LEASE, SHORT,
};

fn policy(max_stalled: u32, limit: u32) -> StalledPolicy {
    StalledPolicy::default().max_stalled(max_stalled).limit(limit)
}

async fn sweep(ctx: &Ctx, max_stalled: u32, limit: u32) -> Swept {
    ctx.store
        .sweep_stalled(&ctx.q, policy(max_stalled, limit))
        .await
        .unwrap()
}

fn swept(recovered: &[&JobId], dead: &[&JobId]) -> Swept {
    let mut want = Swept::default();
    want.recovered = recovered.iter().map(|&i| i.clone()).collect();
    want.dead = dead.iter().map(|&i| i.clone()).collect();
    want
}

/// Deletes a job's row under the store's feet, its id left wherever it was.
async fn delete_row(ctx: &Ctx, id: &JobId) {
    assert!(ctx.probe.del_row(id).await, "job {id} had a row to delete");
}

async fn row_exists(ctx: &Ctx, id: &JobId) -> bool {
    ctx.probe.row_exists(id).await
}

async fn active_len(ctx: &Ctx) -> u64 {
    ctx.probe.set_len("active").await
}

/// Enqueues `name`, claims it, reaps its lapsed lease and claims it again under `lease`: the job is
/// active past its first attempt. Returns its id and token.
async fn claimed_again(ctx: &Ctx, name: &str, lease: Duration) -> (JobId, u64) {
    let id = add(ctx, None, name).await;
    claim_id(ctx, &id, SHORT).await;
    lapse(ctx, &id).await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1);
    let held = claim_id(ctx, &id, lease).await;
    assert_eq!(held.attempts, 2);
    assert_slot_invariant(ctx).await;
    (id, held.token)
}

/// A job active past its first attempt leaves `active` and its group's slot by every way out: a
/// reap, a sweep that recovers it and one that buries it, retry, discard, complete_cancelled and a
/// forced remove (`assert_slot_invariant` checks after each).
pub async fn every_way_out_of_active_frees_a_job_claimed_again(ctx: &Ctx) {
    let (a, _) = claimed_again(ctx, "a", SHORT).await;
    lapse(ctx, &a).await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1);
    assert_slot_invariant(ctx).await;
    assert_eq!(claim_id(ctx, &a, SHORT).await.attempts, 3);
    lapse(ctx, &a).await;
    assert_eq!(sweep(ctx, 3, 100).await, swept(&[&a], &[]));
    assert_slot_invariant(ctx).await;
    assert_eq!(claim_id(ctx, &a, SHORT).await.attempts, 4);
    lapse(ctx, &a).await;
    assert_eq!(sweep(ctx, 1, 100).await, swept(&[], &[&a]));
    assert_slot_invariant(ctx).await;

    let (b, t) = claimed_again(ctx, "b", LEASE).await;
    let later = Duration::from_secs(60);
    ctx.store
        .retry(
            &ctx.q,
            &b,
            t,
            &RetryRequest::new("boom")
                .after(later)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(get(ctx, &b).await.state, JobState::Scheduled);
    assert_slot_invariant(ctx).await;
    let (c, t) = claimed_again(ctx, "c", LEASE).await;
    ctx.store
        .discard(
            &ctx.q,
            &c,
            t,
            &echomq::store::DiscardRequest::new("gave up").settle(plain()),
        )
        .await
        .unwrap();
    assert_slot_invariant(ctx).await;
    let (d, t) = claimed_again(ctx, "d", LEASE).await;
    assert_eq!(
        ctx.store
            .complete_cancelled(&ctx.q, &d, t, &echomq::store::CancelledRequest::new().settle(plain()))
            .await
            .unwrap(),
        Settled::Ok
    );
    assert_slot_invariant(ctx).await;
    let (e, _) = claimed_again(ctx, "e", LEASE).await;
    ctx.store.remove(&ctx.q, &e, true).await.unwrap();
    assert_slot_invariant(ctx).await;
    assert_eq!(counts(ctx).await.active, 0);
}

// --- reap -----------------------------------------------------------------------------------------

pub async fn reap_returns_a_lapsed_lease_to_the_front_its_attempt_used(ctx: &Ctx) {
    let p1 = add(ctx, None, "p1").await;
    let p2 = add(ctx, None, "p2").await;
    let r = add(ctx, None, "r").await;
    let got = claim(ctx, 3, SHORT).await;
    assert_eq!(ids(&got), [p1.clone(), p2.clone(), r.clone()]);
    // p1 and p2 go back to pending behind everything (fresh sequences); r's lease lapses
    for p in [&p1, &p2] {
        let x = ctx
            .store
            .retry(
                &ctx.q,
                p,
                1,
                &RetryRequest::new("e")
                    .after(Duration::ZERO)
                    .max_attempts(BUDGET)
                    .settle(plain()),
            )
            .await
            .unwrap();
        assert_eq!(x, Retried::Retrying);
    }
    lapse(ctx, &r).await;
    ctx.probe.clear_wakes().await;
    let before = counts(ctx).await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1);
    let row = get(ctx, &r).await;
    assert_eq!(row.state, JobState::Pending);
    assert_eq!(row.attempts, 1, "the lapsed claim has used its attempt");
    assert_eq!(row.stalled, 0, "reap counts no stall");
    assert_eq!(row.last_error, None);
    assert_eq!(zscore(ctx, "active", &r).await, None);
    let after = counts(ctx).await;
    assert_eq!(after.reaped, before.reaped + 1, "metrics:reaped +1");
    assert_eq!(after.stalled, before.stalled, "reap is not a stall");
    assert_eq!(after.failed, before.failed);
    assert_eq!((after.active, after.pending), (0, 3));
    assert_eq!(ctx.probe.wakes().await, 1, "one wake per job made claimable");
    let got = claim(ctx, 3, LEASE).await;
    assert_eq!(ids(&got), [r, p1, p2], "the recovered job goes to the front");
    assert_eq!(got[0].attempts, 2);
}

/// Enqueues one flat job with its own attempt budget of `max_attempts`.
async fn add_budgeted(ctx: &Ctx, payload: &str, max_attempts: u32) -> JobId {
    let job = [echomq::NewJob::new(payload).with_max_attempts(max_attempts)];
    ctx.store.enqueue(&ctx.q, &job).await.unwrap()[0].id().clone()
}

/// Claims `id` under a short lease and waits the lease out: its worker died.
async fn crash(ctx: &Ctx, id: &JobId) -> echomq::ClaimedJob {
    let c = claim_id(ctx, id, SHORT).await;
    lapse(ctx, id).await;
    c
}

pub async fn reap_without_a_budget_leaves_a_job_dead_once_its_lapses_use_every_attempt(ctx: &Ctx) {
    // the safe default: every claim uses an attempt, so a job that kills its worker each time ends
    let id = add_budgeted(ctx, "kills its worker", 3).await;
    for n in 1..=3 {
        assert_eq!(crash(ctx, &id).await.attempts, n);
        assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1);
        let row = get(ctx, &id).await;
        assert_eq!((row.state, row.attempts, row.stalled), (JobState::Pending, n, 0));
    }
    assert!(
        claim(ctx, 1, LEASE).await.is_empty(),
        "no attempt left: nothing handed out"
    );
    let row = get(ctx, &id).await;
    assert_eq!(row.state, JobState::Dead);
    assert_eq!(row.attempts, 3);
    assert_eq!(row.last_error.as_deref(), Some("lease expired on the last attempt"));
}

pub async fn reap_with_a_redelivery_budget_gives_each_lapse_its_attempt_back(ctx: &Ctx) {
    let id = add_budgeted(ctx, "its worker is OOM-killed", 3).await;
    let before = counts(ctx).await;
    // as many lapses as max_attempts, and one more: without the budget it would be dead by now
    for n in 1..=4u64 {
        let c = crash(ctx, &id).await;
        assert_eq!(c.attempts, 1, "lapse {n}: the handler sees its first attempt again");
        assert_eq!(c.max_attempts, 3);
        if n == 4 {
            // the round's leg: the same reap, pipelined with promote and claim
            let round = ctx
                .store
                .recover_promote_claim(
                    &ctx.q,
                    &echomq::store::RoundRequest::new(
                        Recovery::Redeliver(RedeliveryPolicy::default().max_redeliveries(5).limit(100)),
                        ClaimRequest::new(0, LEASE).max_attempts(BUDGET).settle(plain()),
                    )
                    .pump(10)
                    .grace(echomq::schedule::GRACE_MIN),
                )
                .await
                .unwrap();
            round.recovered.unwrap();
        } else {
            assert_eq!(ctx.store.reap(&ctx.q, 100, Some(5)).await.unwrap(), 1);
        }
        let row = get(ctx, &id).await;
        assert_eq!(row.state, JobState::Pending);
        assert_eq!(
            (row.attempts, row.stalled),
            (0, n),
            "lapse {n}: no attempt used, the lapse counted"
        );
        assert_eq!(row.last_error, None);
    }
    let after = counts(ctx).await;
    assert_eq!(after.reaped, before.reaped + 4);
    assert_eq!(after.failed, before.failed);
    // its attempt budget is intact: handler failures alone spend it
    for n in 1..=3u64 {
        let c = claim_id(ctx, &id, LEASE).await;
        assert_eq!(c.attempts, n);
        let r = ctx
            .store
            .retry(
                &ctx.q,
                &id,
                c.token,
                &RetryRequest::new("boom")
                    .after(Duration::ZERO)
                    .max_attempts(BUDGET)
                    .settle(plain()),
            )
            .await
            .unwrap();
        assert_eq!(r, if n < 3 { Retried::Retrying } else { Retried::Dead });
    }
    let row = get(ctx, &id).await;
    assert_eq!(row.state, JobState::Dead);
    assert_eq!((row.attempts, row.stalled), (3, 4));
    assert_eq!(row.last_error.as_deref(), Some("boom"));
}

pub async fn reap_with_a_redelivery_budget_buries_the_lapse_past_it(ctx: &Ctx) {
    let id = add_budgeted(ctx, "kills its worker", 10).await;
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    let before = counts(ctx).await;
    // both claimed at once (which member of the ring comes first is not under test), then lapsed
    let crash_both = || async {
        let mut got = ids(&claim(ctx, 2, SHORT).await);
        got.sort();
        let mut want = vec![id.clone(), lane[0].clone()];
        want.sort();
        assert_eq!(got, want);
        lapse(ctx, &id).await;
        lapse(ctx, &lane[0]).await;
    };
    for n in 1..=2u64 {
        crash_both().await;
        assert_eq!(
            ctx.store.reap(&ctx.q, 100, Some(2)).await.unwrap(),
            2,
            "lapse {n}: redelivered"
        );
        assert_slot_invariant(ctx).await;
    }
    crash_both().await;
    ctx.probe.clear_wakes().await;
    assert_eq!(
        ctx.store.reap(&ctx.q, 100, Some(2)).await.unwrap(),
        0,
        "the third lapse is past the budget"
    );
    for dead in [&id, &lane[0]] {
        let row = get(ctx, dead).await;
        assert_eq!(row.state, JobState::Dead);
        assert_eq!(
            (row.attempts, row.stalled),
            (0, 3),
            "no attempt used, every lapse counted"
        );
        assert_eq!(
            row.last_error.as_deref(),
            Some("lease lapsed 3 times: its worker died or stalled each time")
        );
        assert!(zscore(ctx, "dead", dead).await.is_some());
        assert_eq!(zscore(ctx, "active", dead).await, None);
    }
    let after = counts(ctx).await;
    assert_eq!(after.failed, before.failed + 2);
    assert_eq!(after.reaped, before.reaped + 4);
    assert_eq!(after.active, 0);
    assert_slot_invariant(ctx).await;
    // the dead lane job's slot is free: the lane's next job is claimable, and a wake says so
    assert_eq!(ctx.probe.wakes().await, 1);
    claim_id(ctx, &lane[1], LEASE).await;
}

pub async fn reap_returns_the_count_and_honours_its_limit(ctx: &Ctx) {
    let jobs: Vec<echomq::NewJob> = (0..20).map(|i| echomq::NewJob::new(format!("{i}"))).collect();
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    let got = claim(ctx, 20, SHORT).await;
    assert_eq!(got.len(), 20);
    let alive = add(ctx, None, "alive").await;
    claim_id(ctx, &alive, LEASE).await;
    for c in &got {
        lapse(ctx, &c.id).await;
    }
    ctx.probe.clear_wakes().await;
    assert_eq!(
        ctx.store.reap(&ctx.q, 2, None).await.unwrap(),
        2,
        "at most limit leases"
    );
    assert_eq!(ctx.probe.wakes().await, 2);
    assert_eq!(counts(ctx).await.active, 19);
    ctx.probe.clear_wakes().await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 18);
    assert_eq!(ctx.probe.wakes().await, 16, "one wake per job, at most 16");
    assert_eq!(
        ctx.store.reap(&ctx.q, 100, None).await.unwrap(),
        0,
        "an unexpired lease stays"
    );
    let n = counts(ctx).await;
    assert_eq!((n.reaped, n.stalled, n.active, n.pending), (20, 0, 1, 20));
    assert_eq!(get(ctx, &alive).await.state, JobState::Active);
}

pub async fn reap_puts_lane_jobs_back_at_their_lanes_front_in_order(ctx: &Ctx) {
    let g = group("g");
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 2)
        .await
        .unwrap();
    let lane = add_lane(ctx, &g, 3).await;
    let got = claim(ctx, 10, SHORT).await;
    assert_eq!(ids(&got), lane[..2]);
    assert_eq!(ctx.probe.slots().await, HashMap::from([("g".to_string(), 2)]));
    assert_slot_invariant(ctx).await;
    lapse(ctx, &lane[1]).await;
    ctx.probe.clear_wakes().await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 2);
    assert_eq!(ctx.probe.slots().await, HashMap::new(), "both slots freed");
    assert_eq!(ctx.probe.ring().await, ["g"]);
    assert_eq!(ctx.probe.wakes().await, 2, "one wake per recovered job");
    assert_slot_invariant(ctx).await;
    let again = claim(ctx, 10, LEASE).await;
    assert_eq!(
        ids(&again),
        lane[..2],
        "recovered in their order, ahead of the lane's rest"
    );
    assert!(again.iter().all(|c| c.attempts == 2));
    assert_slot_invariant(ctx).await;
}

pub async fn reap_drops_a_missing_row_from_active(ctx: &Ctx) {
    let gone = add(ctx, None, "gone").await;
    let kept = add(ctx, None, "kept").await;
    claim(ctx, 2, SHORT).await;
    delete_row(ctx, &gone).await;
    lapse(ctx, &kept).await;
    assert_eq!(
        ctx.store.reap(&ctx.q, 100, None).await.unwrap(),
        1,
        "only the job with a row comes back"
    );
    assert_eq!(active_len(ctx).await, 0, "the missing row's id left active");
    assert!(!row_exists(ctx, &gone).await, "no row is made up for it");
    let n = counts(ctx).await;
    assert_eq!((n.pending, n.dead, n.failed, n.reaped), (1, 0, 0, 1));
    claim_id(ctx, &kept, LEASE).await;
}

pub async fn reap_dead_letters_a_malformed_lane_row_and_frees_its_slot(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    claim_id(ctx, &lane[0], SHORT).await;
    ctx.probe.set_row_field(&lane[0], "state", "scheduled").await;
    lapse(ctx, &lane[0]).await;
    ctx.probe.clear_wakes().await;
    assert_eq!(
        ctx.store.reap(&ctx.q, 100, None).await.unwrap(),
        0,
        "nothing went back to ready"
    );
    let row = get(ctx, &lane[0]).await;
    assert_eq!(row.state, JobState::Dead);
    assert!(
        row.last_error.as_deref().unwrap_or("").contains("scheduled"),
        "the last error names the defect: {:?}",
        row.last_error
    );
    assert_eq!(ctx.probe.slots().await, HashMap::new(), "the slot is freed");
    assert_eq!(ctx.probe.ring().await, ["g"], "the group is back on the ring");
    assert_eq!(ctx.probe.wakes().await, 1, "its next job became claimable");
    assert_slot_invariant(ctx).await;
    claim_id(ctx, &lane[1], LEASE).await;
    assert_slot_invariant(ctx).await;
}

// --- sweep_stalled --------------------------------------------------------------------------------

pub async fn sweep_stalled_with_max_stalled_1_dead_letters_on_the_first_stall(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    claim_id(ctx, &id, SHORT).await;
    lapse(ctx, &id).await;
    ctx.probe.clear_wakes().await;
    let t0 = server_ms(ctx).await;
    assert_eq!(sweep(ctx, 1, 100).await, swept(&[], &[&id]));
    let t1 = server_ms(ctx).await;
    let row = get(ctx, &id).await;
    assert_eq!(row.state, JobState::Dead);
    assert_eq!(row.last_error.as_deref(), Some("stalled"));
    assert_eq!((row.stalled, row.attempts), (1, 1));
    let died = zscore(ctx, "dead", &id).await.unwrap();
    assert!(
        (t0..=t1).contains(&died),
        "the morgue is scored with the server's time of death ({died} not in {t0}..={t1})"
    );
    let n = counts(ctx).await;
    assert_eq!(
        (n.failed, n.stalled, n.reaped),
        (1, 0, 0),
        "metrics:failed +1 per dead job"
    );
    assert_eq!((n.dead, n.active, n.pending), (1, 0, 0));
    assert_eq!(ctx.probe.wakes().await, 0, "nothing became claimable");
    assert_eq!(sweep(ctx, 1, 100).await, Swept::default(), "nothing left to sweep");
}

pub async fn sweep_stalled_with_max_stalled_3_recovers_twice_then_dead_letters(ctx: &Ctx) {
    let p = add(ctx, None, "p").await;
    let id = add(ctx, None, "j").await;
    let got = claim(ctx, 2, SHORT).await;
    assert_eq!(ids(&got), [p.clone(), id.clone()]);
    let x = ctx
        .store
        .retry(
            &ctx.q,
            &p,
            1,
            &RetryRequest::new("e")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(x, Retried::Retrying, "p waits at a fresh sequence, behind j's recovery");
    for stall in 1..=3u64 {
        if stall > 1 {
            let c = claim_id(ctx, &id, SHORT).await;
            assert_eq!(c.attempts, stall);
        }
        lapse(ctx, &id).await;
        ctx.probe.clear_wakes().await;
        let out = sweep(ctx, 3, 100).await;
        let row = get(ctx, &id).await;
        assert_eq!(row.stalled, stall);
        assert_eq!(row.attempts, stall, "the sweep keeps attempts");
        if stall < 3 {
            assert_eq!(out, swept(&[&id], &[]), "stall {stall} of 3: recovered");
            assert_eq!(row.state, JobState::Pending);
            assert_eq!(ctx.probe.wakes().await, 1, "one wake per recovered job");
            assert_eq!(counts(ctx).await.stalled, stall, "metrics:stalled +1 per recovery");
        } else {
            assert_eq!(out, swept(&[], &[&id]), "stall 3 of 3: dead");
            assert_eq!(row.state, JobState::Dead);
            assert_eq!(row.last_error.as_deref(), Some("stalled"));
            assert_eq!(ctx.probe.wakes().await, 0);
        }
    }
    let n = counts(ctx).await;
    assert_eq!((n.stalled, n.failed, n.dead, n.reaped), (2, 1, 1, 0));
    claim_id(ctx, &p, LEASE).await;
}

pub async fn sweep_stalled_recovers_to_the_front(ctx: &Ctx) {
    let p = add(ctx, None, "p").await;
    let id = add(ctx, None, "j").await;
    claim(ctx, 2, SHORT).await;
    let x = ctx
        .store
        .retry(
            &ctx.q,
            &p,
            1,
            &RetryRequest::new("e")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(x, Retried::Retrying);
    lapse(ctx, &id).await;
    assert_eq!(sweep(ctx, 2, 100).await, swept(&[&id], &[]));
    let got = claim(ctx, 2, LEASE).await;
    assert_eq!(
        ids(&got),
        [id, p],
        "the recovered job is claimed before the older pending one"
    );
}

pub async fn sweep_stalled_handles_at_most_limit_leases_per_sweep(ctx: &Ctx) {
    let a = add(ctx, None, "a").await;
    let b = add(ctx, None, "b").await;
    let c = add(ctx, None, "c").await;
    claim(ctx, 3, SHORT).await;
    let alive = add(ctx, None, "alive").await;
    claim_id(ctx, &alive, LEASE).await;
    for id in [&a, &b, &c] {
        lapse(ctx, id).await;
    }
    let first = sweep(ctx, 1, 2).await;
    assert_eq!(first.dead.len(), 2, "at most limit per sweep: {first:?}");
    assert!(first.recovered.is_empty());
    assert_eq!(counts(ctx).await.active, 2);
    let second = sweep(ctx, 1, 2).await;
    assert_eq!(second.dead.len(), 1, "the rest on the next sweep: {second:?}");
    let mut all: Vec<JobId> = first.dead.into_iter().chain(second.dead).collect();
    all.sort();
    assert_eq!(all, [a, b, c]);
    assert_eq!(sweep(ctx, 1, 2).await, Swept::default(), "an unexpired lease stays");
    assert_eq!(get(ctx, &alive).await.state, JobState::Active);
    let n = counts(ctx).await;
    assert_eq!((n.failed, n.dead, n.active), (3, 3, 1));
}

pub async fn sweep_stalled_recovers_lane_jobs_to_their_lanes_front_and_frees_slots(ctx: &Ctx) {
    let g = group("g");
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 2)
        .await
        .unwrap();
    let lane = add_lane(ctx, &g, 3).await;
    let got = claim(ctx, 10, SHORT).await;
    assert_eq!(ids(&got), lane[..2]);
    assert_slot_invariant(ctx).await;
    lapse(ctx, &lane[1]).await;
    ctx.probe.clear_wakes().await;
    assert_eq!(sweep(ctx, 3, 100).await, swept(&[&lane[0], &lane[1]], &[]));
    assert_eq!(ctx.probe.slots().await, HashMap::new(), "both slots freed");
    assert_eq!(ctx.probe.ring().await, ["g"]);
    assert_eq!(ctx.probe.wakes().await, 2, "one wake per recovered job");
    assert_slot_invariant(ctx).await;
    let n = counts(ctx).await;
    assert_eq!((n.stalled, n.pending, n.active), (2, 3, 0));
    let again = claim(ctx, 10, LEASE).await;
    assert_eq!(
        ids(&again),
        lane[..2],
        "recovered in their order, ahead of the lane's rest"
    );
    assert!(again.iter().all(|c| c.attempts == 2 && c.group.as_ref() == Some(&g)));
    assert_slot_invariant(ctx).await;
}

pub async fn sweep_stalled_dead_letters_a_lane_job_and_frees_its_slot(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    claim_id(ctx, &lane[0], SHORT).await;
    assert!(claim(ctx, 10, LEASE).await.is_empty(), "limit 1");
    lapse(ctx, &lane[0]).await;
    ctx.probe.clear_wakes().await;
    assert_eq!(sweep(ctx, 1, 100).await, swept(&[], &[&lane[0]]));
    assert_eq!(get(ctx, &lane[0]).await.state, JobState::Dead);
    assert_eq!(ctx.probe.slots().await, HashMap::new(), "the slot is freed");
    assert_eq!(ctx.probe.ring().await, ["g"], "the group is back on the ring");
    assert_eq!(ctx.probe.wakes().await, 1, "its next job became claimable: one wake");
    assert_slot_invariant(ctx).await;
    claim_id(ctx, &lane[1], LEASE).await;
    assert_slot_invariant(ctx).await;
}

pub async fn sweep_stalled_drops_a_missing_row_and_reports_it_neither_way(ctx: &Ctx) {
    let gone = add(ctx, None, "gone").await;
    let kept = add(ctx, None, "kept").await;
    claim(ctx, 2, SHORT).await;
    delete_row(ctx, &gone).await;
    lapse(ctx, &gone).await;
    lapse(ctx, &kept).await;
    assert_eq!(sweep(ctx, 1, 100).await, swept(&[], &[&kept]));
    assert_eq!(active_len(ctx).await, 0, "the missing row's id left active");
    assert!(
        !row_exists(ctx, &gone).await,
        "no row is made up for it (no stall counted on it)"
    );
    assert_eq!(zscore(ctx, "dead", &gone).await, None);
    assert_eq!(zscore(ctx, "pending", &gone).await, None);
    let n = counts(ctx).await;
    assert_eq!((n.failed, n.stalled, n.dead, n.pending), (1, 0, 1, 0));
}

// --- extend_lock ----------------------------------------------------------------------------------

pub async fn extend_lock_moves_the_deadline_to_now_plus_the_lease(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, Duration::from_secs(1)).await;
    let before = zscore(ctx, "active", &id).await.unwrap();
    let t0 = server_ms(ctx).await;
    let e = ctx
        .store
        .extend_lock(&ctx.q, &id, c.token, Duration::from_secs(60))
        .await
        .unwrap();
    let t1 = server_ms(ctx).await;
    assert_eq!(e, Extended::Ok);
    let after = zscore(ctx, "active", &id).await.unwrap();
    assert!(after > before, "the deadline moved ahead");
    assert!(
        (t0 + 60_000..=t1 + 60_000).contains(&after),
        "the deadline is the store's now + the lease"
    );
    // a shorter lease moves it back: the lease is now + lease, whatever it was
    let e = ctx
        .store
        .extend_lock(&ctx.q, &id, c.token, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(e, Extended::Ok);
    assert!(zscore(ctx, "active", &id).await.unwrap() < after);
    assert_eq!(get(ctx, &id).await.state, JobState::Active);
}

pub async fn extend_lock_keeps_an_extended_lease_from_being_reaped(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, SHORT).await;
    let e = ctx.store.extend_lock(&ctx.q, &id, c.token, LEASE).await.unwrap();
    assert_eq!(e, Extended::Ok);
    // nothing to poll: the claim's lease would have lapsed by now
    tokio::time::sleep(SHORT * 3).await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 0);
    assert_eq!(sweep(ctx, 1, 100).await, Swept::default());
    assert_eq!(get(ctx, &id).await.state, JobState::Active);
    let s = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(id.clone(), c.token), plain())
        .await
        .unwrap();
    assert_eq!(s, Settled::Ok, "the holder still holds it");
}

pub async fn extend_lock_of_a_lane_job_keeps_its_slot(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    let c = claim_id(ctx, &lane[0], SHORT).await;
    let e = ctx.store.extend_lock(&ctx.q, &lane[0], c.token, LEASE).await.unwrap();
    assert_eq!(e, Extended::Ok);
    assert_eq!(ctx.probe.slots().await, HashMap::from([("g".to_string(), 1)]));
    assert!(
        claim(ctx, 10, LEASE).await.is_empty(),
        "the holder keeps the group's only slot"
    );
    assert_slot_invariant(ctx).await;
}

pub async fn extend_lock_refuses_an_id_not_in_active_and_never_re_adds_it(ctx: &Ctx) {
    ctx.keep(5).await;
    // the row says active with this token, but its id left `active` (a plain ZADD would re-add it)
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    assert!(ctx.probe.remove_from_set("active", &id).await);
    let e = ctx.store.extend_lock(&ctx.q, &id, c.token, LEASE).await.unwrap();
    assert_eq!(e, Extended::Stale);
    assert_eq!(zscore(ctx, "active", &id).await, None, "not re-added to active");
    // a waiting job that was never claimed
    let waiting = add(ctx, None, "w").await;
    let e = ctx.store.extend_lock(&ctx.q, &waiting, 0, LEASE).await.unwrap();
    assert_eq!(e, Extended::Stale);
    assert_eq!(zscore(ctx, "active", &waiting).await, None);
    // a retained completed job, with the token it was completed under
    let done = claim_id(ctx, &waiting, LEASE).await;
    let s = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(waiting.clone(), done.token),
            echomq::store::SettleOptions::new(),
        )
        .await
        .unwrap();
    assert_eq!(s, Settled::Ok);
    let e = ctx
        .store
        .extend_lock(&ctx.q, &waiting, done.token, LEASE)
        .await
        .unwrap();
    assert_eq!(e, Extended::Stale);
    assert_eq!(zscore(ctx, "active", &waiting).await, None);
    assert_eq!(get(ctx, &waiting).await.state, JobState::Completed);
    // no row, its id still in active: gone, and active as it was
    let orphan = add(ctx, None, "o").await;
    let c = claim_id(ctx, &orphan, LEASE).await;
    let deadline = zscore(ctx, "active", &orphan).await;
    delete_row(ctx, &orphan).await;
    let e = ctx
        .store
        .extend_lock(&ctx.q, &orphan, c.token, Duration::from_secs(600))
        .await
        .unwrap();
    assert_eq!(e, Extended::Gone);
    assert_eq!(zscore(ctx, "active", &orphan).await, deadline, "nothing written");
    assert!(!row_exists(ctx, &orphan).await);
}

crate::conformance!(
    every_way_out_of_active_frees_a_job_claimed_again,
    reap_returns_a_lapsed_lease_to_the_front_its_attempt_used,
    reap_returns_the_count_and_honours_its_limit,
    reap_without_a_budget_leaves_a_job_dead_once_its_lapses_use_every_attempt,
    reap_with_a_redelivery_budget_gives_each_lapse_its_attempt_back,
    reap_with_a_redelivery_budget_buries_the_lapse_past_it,
    reap_puts_lane_jobs_back_at_their_lanes_front_in_order,
    reap_drops_a_missing_row_from_active,
    reap_dead_letters_a_malformed_lane_row_and_frees_its_slot,
    sweep_stalled_with_max_stalled_1_dead_letters_on_the_first_stall,
    sweep_stalled_with_max_stalled_3_recovers_twice_then_dead_letters,
    sweep_stalled_recovers_to_the_front,
    sweep_stalled_handles_at_most_limit_leases_per_sweep,
    sweep_stalled_recovers_lane_jobs_to_their_lanes_front_and_frees_slots,
    sweep_stalled_dead_letters_a_lane_job_and_frees_its_slot,
    sweep_stalled_drops_a_missing_row_and_reports_it_neither_way,
    extend_lock_moves_the_deadline_to_now_plus_the_lease,
    extend_lock_keeps_an_extended_lease_from_being_reaped,
    extend_lock_of_a_lane_job_keeps_its_slot,
    extend_lock_refuses_an_id_not_in_active_and_never_re_adds_it,
);
