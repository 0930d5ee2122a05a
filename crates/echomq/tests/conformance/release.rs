//! release: the holder gives its job back without using an attempt. Where the job goes (the front of
//! its set, or scheduled), what it keeps (its token, so the released holder is fenced off; its
//! attempts used, so its budget is untouched), and how the attempt a user sees — `attempts − free` —
//! reaches get, claim's guard, retry, redrive and the completion records.

use echomq::store::RetryRequest;
use std::time::Duration;

use echomq::store::{Discarded, Redriven, Retried, SettleOptions, Settled};
use echomq::{JobState, NewJob};

use crate::harness::{assert_slot_invariant, Ctx};
use crate::settle::{
    add, add_lane, claim, claim_id, counts, get, group, ids, lapse, plain, server_ms, zscore, BUDGET, LEASE, SHORT,
};

/// A released flat job is ready at once, ahead of the jobs that waited behind it, and its next claim
/// is still its first attempt under a new token; a wake is pushed for it.
pub async fn release_with_no_delay_puts_a_flat_job_at_the_front_of_pending(ctx: &Ctx) {
    let first = add(ctx, None, "p1").await;
    let second = add(ctx, None, "p2").await;
    let held = claim_id(ctx, &first, LEASE).await;
    assert_eq!((held.attempts, held.token), (1, 1));
    let wakes = ctx.probe.wakes().await;
    let r = ctx
        .store
        .release(&ctx.q, &first, held.token, Duration::ZERO)
        .await
        .unwrap();
    assert_eq!(r, Settled::Ok);
    assert_eq!(ctx.probe.wakes().await, wakes + 1, "a wake for the job made claimable");
    let row = get(ctx, &first).await;
    assert_eq!((row.state, row.attempts, row.free), (JobState::Pending, 0, 1));
    assert_eq!(zscore(ctx, "active", &first).await, None);
    let again = claim(ctx, 1, LEASE).await;
    assert_eq!(
        ids(&again),
        std::slice::from_ref(&first),
        "the released job comes out before {second}"
    );
    assert_eq!(
        (again[0].attempts, again[0].token),
        (1, 2),
        "its first attempt, a new token"
    );
    assert_eq!(get(ctx, &first).await.attempts, 1);
}

/// A released lane job goes back to its lane's head, its slot freed: the group is claimable again and
/// hands out that job first.
pub async fn release_of_a_lane_job_puts_it_at_its_lanes_head_and_frees_its_slot(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 3).await;
    let held = claim(ctx, 10, LEASE).await;
    assert_eq!(ids(&held), [lane[0].clone()], "limit 1: one job of the lane at a time");
    assert_eq!(
        ctx.store
            .release(&ctx.q, &lane[0], held[0].token, Duration::ZERO)
            .await
            .unwrap(),
        Settled::Ok
    );
    assert_slot_invariant(ctx).await;
    assert!(ctx.probe.slots().await.is_empty(), "the slot is free");
    assert_eq!(ctx.probe.ring().await, ["g"], "the group is back in the ring");
    let again = claim(ctx, 10, LEASE).await;
    assert_eq!(ids(&again), [lane[0].clone()], "the lane's head again");
    assert_eq!((again[0].attempts, again[0].token), (1, 2));
    assert_eq!(again[0].group.as_ref(), Some(&g));
    assert_slot_invariant(ctx).await;
}

/// With a delay, the released job is scheduled `delay` from the store's now, its lane slot freed at
/// once; promote makes it ready when due, still on its first attempt.
pub async fn release_with_a_delay_schedules_the_job(ctx: &Ctx) {
    for g in [None, Some(group("later"))] {
        let id = add(ctx, g.as_ref(), "p").await;
        let held = claim_id(ctx, &id, LEASE).await;
        let before = server_ms(ctx).await;
        assert_eq!(
            ctx.store.release(&ctx.q, &id, held.token, SHORT).await.unwrap(),
            Settled::Ok
        );
        let row = get(ctx, &id).await;
        assert_eq!((row.state, row.attempts, row.free), (JobState::Scheduled, 0, 1));
        let due = zscore(ctx, "scheduled", &id).await.expect("in scheduled");
        assert!(
            due >= before + SHORT.as_millis() as u64,
            "due {due}, released at {before}"
        );
        assert!(ctx.probe.slots().await.is_empty(), "no slot held while it waits");
        assert_slot_invariant(ctx).await;
        crate::harness::wait_until(Duration::from_secs(2), "the release delay to pass", || async {
            server_ms(ctx).await > due
        })
        .await;
        assert_eq!(
            ctx.store
                .promote(&ctx.q, 100, echomq::schedule::GRACE_MIN)
                .await
                .unwrap()
                .moved,
            1
        );
        let again = claim_id(ctx, &id, LEASE).await;
        assert_eq!((again.attempts, again.token), (1, 2));
        assert_eq!(
            ctx.store
                .complete(
                    &ctx.q,
                    &echomq::store::Completion::new(id.clone(), again.token),
                    plain()
                )
                .await
                .unwrap(),
            Settled::Ok
        );
    }
}

/// The released holder is fenced off: its late settle, checkpoint, lease extension or second release
/// is refused as stale, and the job's next holder settles it.
pub async fn release_then_the_released_holders_late_settle_is_stale(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let old = claim_id(ctx, &id, LEASE).await;
    ctx.store.release(&ctx.q, &id, old.token, Duration::ZERO).await.unwrap();
    assert_eq!(
        ctx.store.release(&ctx.q, &id, old.token, Duration::ZERO).await.unwrap(),
        Settled::Stale,
        "released once: not held"
    );
    let new = claim_id(ctx, &id, LEASE).await;
    let q = &ctx.q;
    assert_eq!(
        ctx.store
            .complete(q, &echomq::store::Completion::new(id.clone(), old.token), plain())
            .await
            .unwrap(),
        Settled::Stale
    );
    assert_eq!(
        ctx.store.update_data(q, &id, old.token, b"x").await.unwrap(),
        Settled::Stale
    );
    assert_eq!(
        ctx.store
            .retry(
                q,
                &id,
                old.token,
                &RetryRequest::new("e")
                    .after(Duration::ZERO)
                    .max_attempts(BUDGET)
                    .settle(plain())
            )
            .await
            .unwrap(),
        Retried::Stale
    );
    assert_eq!(
        ctx.store.release(q, &id, old.token, Duration::ZERO).await.unwrap(),
        Settled::Stale
    );
    assert_eq!(get(ctx, &id).await.payload, b"p", "the stale checkpoint wrote nothing");
    assert_eq!(
        ctx.store
            .complete(q, &echomq::store::Completion::new(id.clone(), new.token), plain())
            .await
            .unwrap(),
        Settled::Ok
    );
    assert_eq!(counts(ctx).await.completed, 1);
}

/// A release uses none of the job's budget: a job of one attempt released twice is still handed out
/// (claim's guard counts attempts − free), and its one real attempt then goes dead on retry.
pub async fn release_uses_no_attempt_of_the_budget(ctx: &Ctx) {
    let id = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("once").with_max_attempts(1)])
        .await
        .unwrap()[0]
        .id()
        .clone();
    for round in 1..=2u64 {
        let held = claim(ctx, 1, LEASE).await;
        assert_eq!(
            ids(&held),
            std::slice::from_ref(&id),
            "round {round}: within its budget"
        );
        assert_eq!((held[0].attempts, held[0].token), (1, round));
        ctx.store
            .release(&ctx.q, &id, held[0].token, Duration::ZERO)
            .await
            .unwrap();
    }
    let held = claim(ctx, 1, LEASE).await;
    assert_eq!((held[0].attempts, held[0].token), (1, 3));
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            held[0].token,
            &RetryRequest::new("boom")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(
        r,
        Retried::Dead,
        "its own budget of one is spent by the one attempt it used"
    );
    let row = get(ctx, &id).await;
    assert_eq!((row.state, row.attempts, row.free), (JobState::Dead, 1, 2));
}

/// A lapsed lease of a job claimed after a release goes dead at the budget by the attempts used, not
/// by the token: a job of two attempts, released once and reaped once, is still handed out.
pub async fn release_then_a_reap_counts_only_the_attempts_used(ctx: &Ctx) {
    let id = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("twice").with_max_attempts(2)])
        .await
        .unwrap()[0]
        .id()
        .clone();
    let held = claim_id(ctx, &id, LEASE).await;
    ctx.store
        .release(&ctx.q, &id, held.token, Duration::ZERO)
        .await
        .unwrap();
    claim_id(ctx, &id, SHORT).await;
    lapse(ctx, &id).await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1);
    let last = claim(ctx, 1, LEASE).await;
    assert_eq!(
        ids(&last),
        std::slice::from_ref(&id),
        "one attempt used of two: handed out"
    );
    assert_eq!((last[0].attempts, last[0].token), (2, 3));
}

/// Redrive raises the budget over the attempts used (`attempts − free`), and the completion record
/// and get show the attempts used.
pub async fn release_then_redrive_and_records_count_the_attempts_used(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let held = claim_id(ctx, &id, LEASE).await;
    ctx.store
        .release(&ctx.q, &id, held.token, Duration::ZERO)
        .await
        .unwrap();
    let held = claim_id(ctx, &id, LEASE).await;
    assert_eq!(
        ctx.store
            .discard(
                &ctx.q,
                &id,
                held.token,
                &echomq::store::DiscardRequest::new("poison").settle(plain())
            )
            .await
            .unwrap(),
        Discarded::Dead
    );
    assert_eq!(ctx.store.redrive(&ctx.q, &id, 2).await.unwrap(), Redriven::Redriven);
    let row = get(ctx, &id).await;
    assert_eq!((row.attempts, row.max_attempts), (1, Some(3)), "1 used + 2 more");
    let held = claim_id(ctx, &id, LEASE).await;
    assert_eq!((held.attempts, held.token), (2, 3));
    let record = SettleOptions::default().record(true);
    assert_eq!(
        ctx.store
            .complete(&ctx.q, &echomq::store::Completion::new(id.clone(), held.token), record)
            .await
            .unwrap(),
        Settled::Ok
    );
    let records = ctx.probe.records().await;
    assert_eq!(records.len(), 1);
    assert_eq!(records[0].attempts, "2", "the record shows the attempts used");
}

/// A row whose `free` is no count, or more than its attempts, is buried by claim with the defect
/// named, and never fails the batch.
pub async fn release_count_malformed_on_a_row_buries_it_at_claim(ctx: &Ctx) {
    for bad in ["x", "-1", "1.5", "2"] {
        let id = add(ctx, None, bad).await;
        // attempts 1 after one claim and release; free set by hand
        let held = claim_id(ctx, &id, LEASE).await;
        ctx.store
            .release(&ctx.q, &id, held.token, Duration::ZERO)
            .await
            .unwrap();
        ctx.probe.set_row_field(&id, "free", bad).await;
        let ok = add(ctx, None, "fine").await;
        let got = claim(ctx, 10, LEASE).await;
        assert_eq!(
            ids(&got),
            std::slice::from_ref(&ok),
            "free {bad}: only the sound row is handed out"
        );
        assert_eq!(ctx.probe.row_field(&id, "state").await.as_deref(), Some("dead"));
        let err = ctx.probe.row_field(&id, "last_error").await.unwrap_or_default();
        assert!(err.contains("malformed row: free"), "free {bad}: {err:?}");
        ctx.store
            .complete(
                &ctx.q,
                &echomq::store::Completion::new(ok.clone(), got[0].token),
                plain(),
            )
            .await
            .unwrap();
    }
    assert_eq!(counts(ctx).await.dead, 4);
}

crate::conformance!(
    release_with_no_delay_puts_a_flat_job_at_the_front_of_pending,
    release_of_a_lane_job_puts_it_at_its_lanes_head_and_frees_its_slot,
    release_with_a_delay_schedules_the_job,
    release_then_the_released_holders_late_settle_is_stale,
    release_uses_no_attempt_of_the_budget,
    release_then_a_reap_counts_only_the_attempts_used,
    release_then_redrive_and_records_count_the_attempts_used,
    release_count_malformed_on_a_row_buries_it_at_claim,
);
