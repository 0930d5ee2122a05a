//! promote and the wakes: delayed jobs wait in `scheduled` until promote moves them (flat to
//! pending, lane jobs to their lane), promote's next-due reply and limit, malformed scheduled rows;
//! and where wake tokens are pushed — one per job made claimable, at most 16, the list trimmed to 16
//! — and where they are not.

use std::time::Duration;

use echomq::store::{LimitTarget, Promoted};
use echomq::{JobId, JobState, NewJob};

use crate::harness::{assert_slot_invariant, wait_until, Ctx};
use crate::steps::{claim, complete, group, named, payloads};

/// A delay short enough to pass within a case.
const SOON: Duration = Duration::from_millis(20);
/// A delay that never passes within a case.
const LATER: Duration = Duration::from_secs(60);
const WITHIN: Duration = Duration::from_secs(5);

fn delayed(payload: &str, delay: Duration) -> NewJob {
    NewJob::new(payload.as_bytes()).with_delay(delay)
}

async fn promote(ctx: &Ctx, limit: u32) -> Promoted {
    ctx.store
        .promote(&ctx.q, limit, echomq::schedule::GRACE_MIN)
        .await
        .unwrap()
}

/// Waits until the store's clock has passed every due time of `ids`, without promoting them.
async fn wait_until_due(ctx: &Ctx, ids: &[JobId]) {
    let mut due = 0;
    for id in ids {
        let row = ctx.store.get(&ctx.q, id).await.unwrap().unwrap();
        assert_eq!(row.state, JobState::Scheduled);
        due = due.max(row.run_at.expect("a scheduled row carries run_at"));
    }
    wait_until(WITHIN, "the store's clock passes the due times", move || async move {
        ctx.probe.now_ms().await >= due
    })
    .await;
}

// ---- delayed jobs and promote ----

pub async fn promote_leaves_a_job_unclaimable_before_its_due_time(ctx: &Ctx) {
    let ids = ctx.store.enqueue(&ctx.q, &[delayed("x", LATER)]).await.unwrap();
    assert!(claim(ctx, 10).await.is_empty());
    let p = promote(ctx, 100).await;
    assert_eq!(p.moved, 0, "not due: nothing moves");
    assert!(claim(ctx, 10).await.is_empty());
    let row = ctx.store.get(&ctx.q, ids[0].id()).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Scheduled);
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.scheduled, counts.pending), (1, 0));
}

pub async fn promote_makes_a_due_job_claimable(ctx: &Ctx) {
    let ids = ctx.store.enqueue(&ctx.q, &[delayed("x", SOON)]).await.unwrap();
    wait_until_due(ctx, &[ids[0].id().clone()]).await;
    assert!(
        claim(ctx, 10).await.is_empty(),
        "a due job still waits in scheduled: only promote moves it"
    );
    let p = promote(ctx, 100).await;
    assert_eq!((p.moved, p.next_due_in, p.fired, p.refills.len()), (1, None, 0, 0));
    let row = ctx.store.get(&ctx.q, ids[0].id()).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Pending);
    assert_eq!(row.run_at, None, "a ready row drops run_at");
    let got = claim(ctx, 10).await;
    assert_eq!(payloads(&got), ["x"]);
    assert_eq!(got[0].attempts, 1);
}

pub async fn promote_puts_a_promoted_flat_job_behind_the_jobs_already_waiting(ctx: &Ctx) {
    let ids = ctx
        .store
        .enqueue(&ctx.q, &[delayed("late", SOON), NewJob::new("early")])
        .await
        .unwrap();
    wait_until_due(ctx, &[ids[0].id().clone()]).await;
    assert_eq!(promote(ctx, 100).await.moved, 1);
    ctx.store.enqueue(&ctx.q, &named(&["after"])).await.unwrap();
    assert_eq!(
        payloads(&claim(ctx, 10).await),
        ["early", "late", "after"],
        "promote gives a fresh sequence: FIFO by the time the job became ready"
    );
}

pub async fn promote_replies_the_time_until_the_next_due_job(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &[delayed("x", LATER)]).await.unwrap();
    let p = promote(ctx, 100).await;
    assert_eq!(p.moved, 0);
    let next = p.next_due_in.expect("a job waits: its due time is reported");
    assert!(
        next <= LATER && next > LATER - Duration::from_secs(5),
        "next due in {next:?}, expected about {LATER:?}"
    );
    let sooner = Duration::from_secs(30);
    ctx.store.enqueue(&ctx.q, &[delayed("y", sooner)]).await.unwrap();
    let next = promote(ctx, 100).await.next_due_in.unwrap();
    assert!(
        next <= sooner && next > sooner - Duration::from_secs(5),
        "the sooner job counts: next due in {next:?}"
    );
}

pub async fn promote_replies_no_next_due_when_nothing_is_scheduled(ctx: &Ctx) {
    let p = promote(ctx, 100).await;
    assert_eq!((p.moved, p.next_due_in, p.fired, p.refills.len()), (0, None, 0, 0));
    ctx.store.enqueue(&ctx.q, &named(&["ready"])).await.unwrap();
    assert_eq!(
        promote(ctx, 100).await.next_due_in,
        None,
        "a ready job is not scheduled"
    );
}

pub async fn promote_replies_the_next_due_time_left_behind_a_promoted_job(ctx: &Ctx) {
    let ids = ctx
        .store
        .enqueue(&ctx.q, &[delayed("now", SOON), delayed("later", LATER)])
        .await
        .unwrap();
    wait_until_due(ctx, &[ids[0].id().clone()]).await;
    let p = promote(ctx, 100).await;
    assert_eq!(p.moved, 1);
    let next = p.next_due_in.expect("the later job still waits");
    assert!(next > LATER - Duration::from_secs(5) && next <= LATER, "{next:?}");
    assert_eq!(payloads(&claim(ctx, 10).await), ["now"]);
}

pub async fn promote_moves_at_most_limit_jobs_per_call(ctx: &Ctx) {
    let jobs: Vec<NewJob> = (1..=5).map(|i| delayed(&format!("{i}"), SOON)).collect();
    let ids: Vec<JobId> = ctx
        .store
        .enqueue(&ctx.q, &jobs)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().clone())
        .collect();
    wait_until_due(ctx, &ids).await;
    let p = promote(ctx, 2).await;
    assert_eq!(p.moved, 2);
    assert_eq!(
        p.next_due_in,
        Some(Duration::ZERO),
        "due jobs left behind: the next is due now"
    );
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().scheduled, 3);
    assert_eq!(promote(ctx, 2).await.moved, 2);
    let p = promote(ctx, 2).await;
    assert_eq!((p.moved, p.next_due_in, p.fired, p.refills.len()), (1, None, 0, 0));
    assert_eq!(
        payloads(&claim(ctx, 10).await),
        ["1", "2", "3", "4", "5"],
        "equal due times promote in id order"
    );
}

pub async fn promote_puts_a_delayed_lane_job_in_its_lane(ctx: &Ctx) {
    let g = group("a");
    let ids = ctx.store.genqueue(&ctx.q, &g, &[delayed("a1", SOON)]).await.unwrap();
    let row = ctx.store.get(&ctx.q, ids[0].id()).await.unwrap().unwrap();
    assert_eq!((row.state, row.group.as_ref()), (JobState::Scheduled, Some(&g)));
    assert!(
        ctx.probe.ring().await.is_empty(),
        "a delayed lane job is not on the ring"
    );
    wait_until_due(ctx, &[ids[0].id().clone()]).await;
    assert_eq!(promote(ctx, 100).await.moved, 1);
    assert_eq!(ctx.probe.ring().await, ["a"], "promote's ring step");
    let got = claim(ctx, 10).await;
    assert_eq!(payloads(&got), ["a1"]);
    assert_eq!(got[0].group.as_ref(), Some(&g));
    assert_slot_invariant(ctx).await;
}

pub async fn promote_puts_a_lane_job_behind_its_lane_and_keeps_the_group_limit(ctx: &Ctx) {
    let g = group("a");
    let ids = ctx
        .store
        .genqueue(&ctx.q, &g, &[delayed("a0", SOON), NewJob::new("a1")])
        .await
        .unwrap();
    wait_until_due(ctx, &[ids[0].id().clone()]).await;
    ctx.probe.clear_wakes().await;
    assert_eq!(promote(ctx, 100).await.moved, 1);
    assert_eq!(
        ctx.probe.wakes().await,
        0,
        "a1 already waits for a's one slot: a0 behind it is not claimable"
    );
    assert_eq!(ctx.probe.ring().await, ["a"], "the group is on the ring once");
    let first = claim(ctx, 10).await;
    assert_eq!(payloads(&first), ["a1"], "limit 1: one at a time, the lane's order");
    assert_slot_invariant(ctx).await;
    complete(ctx, &first[0]).await;
    assert_eq!(payloads(&claim(ctx, 10).await), ["a0"]);
    assert_slot_invariant(ctx).await;
}

pub async fn promote_drops_a_missing_row(ctx: &Ctx) {
    let ids = ctx
        .store
        .enqueue(&ctx.q, &[delayed("gone", SOON), delayed("x", SOON)])
        .await
        .unwrap();
    let ids: Vec<JobId> = ids.iter().map(|r| r.id().clone()).collect();
    wait_until_due(ctx, &ids).await;
    ctx.probe.del_row(&ids[0]).await;
    let p = promote(ctx, 100).await;
    assert_eq!(p.moved, 1, "the missing row is dropped, the rest promoted");
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!(
        (counts.scheduled, counts.pending, counts.dead, counts.failed),
        (0, 1, 0, 0)
    );
    assert_eq!(payloads(&claim(ctx, 10).await), ["x"]);
}

pub async fn promote_buries_a_malformed_scheduled_row_naming_the_defect(ctx: &Ctx) {
    let ids = ctx
        .store
        .enqueue(
            &ctx.q,
            &[delayed("bad-state", SOON), delayed("no-data", SOON), delayed("x", SOON)],
        )
        .await
        .unwrap();
    let ids: Vec<JobId> = ids.iter().map(|r| r.id().clone()).collect();
    wait_until_due(ctx, &ids).await;
    ctx.probe.set_row_field(&ids[0], "state", "active").await;
    ctx.probe.del_row_field(&ids[1], "data").await;
    let p = promote(ctx, 100).await;
    assert_eq!(p.moved, 1, "malformed rows never fail the beat");
    let mut dead = ctx.store.list(&ctx.q, JobState::Dead, None, 100).await.unwrap().ids;
    dead.sort_by(|a, b| a.as_str().cmp(b.as_str()));
    assert_eq!(dead, [ids[0].clone(), ids[1].clone()]);
    let bad_state = ctx.store.get(&ctx.q, &ids[0]).await.unwrap().unwrap();
    assert_eq!(bad_state.state, JobState::Dead);
    let err = bad_state.last_error.unwrap_or_default();
    assert!(err.contains("state active"), "last_error {err:?} names the defect");
    let no_data = ctx.store.get(&ctx.q, &ids[1]).await.unwrap().unwrap();
    let err = no_data.last_error.unwrap_or_default();
    assert!(err.contains("no data"), "last_error {err:?} names the defect");
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.scheduled, counts.dead, counts.failed), (0, 2, 2));
    assert_eq!(payloads(&claim(ctx, 10).await), ["x"]);
}

// ---- wakes: one per job made claimable, at most 16, the list trimmed to 16 ----

pub async fn promote_pushes_one_wake_per_job_made_claimable(ctx: &Ctx) {
    let jobs: Vec<NewJob> = (0..3).map(|i| delayed(&format!("{i}"), SOON)).collect();
    let ids: Vec<JobId> = ctx
        .store
        .enqueue(&ctx.q, &jobs)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().clone())
        .collect();
    assert_eq!(
        ctx.probe.wakes().await,
        1,
        "delayed jobs are not claimable: one wake for the new head of scheduled only"
    );
    ctx.probe.clear_wakes().await;
    wait_until_due(ctx, &ids).await;
    assert_eq!(promote(ctx, 100).await.moved, 3);
    assert_eq!(ctx.probe.wakes().await, 3);
    ctx.probe.clear_wakes().await;
    assert_eq!(promote(ctx, 100).await.moved, 0);
    assert_eq!(ctx.probe.wakes().await, 0, "a promote that moves nothing wakes nobody");
}

pub async fn promote_pushes_at_most_16_wakes_and_trims_the_list_to_16(ctx: &Ctx) {
    let jobs: Vec<NewJob> = (0..20).map(|i| delayed(&format!("{i}"), SOON)).collect();
    let ids: Vec<JobId> = ctx
        .store
        .enqueue(&ctx.q, &jobs)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().clone())
        .collect();
    wait_until_due(ctx, &ids[..10]).await;
    wait_until_due(ctx, &ids[10..]).await;
    assert_eq!(promote(ctx, 100).await.moved, 20);
    assert_eq!(ctx.probe.wakes().await, 16, "at most 16 per call");
    // four tokens taken by consumers, then ten more ready jobs: 12 + 10, trimmed to 16
    ctx.probe.keep_wakes(12).await;
    assert_eq!(ctx.probe.wakes().await, 12);
    let more: Vec<NewJob> = (0..10).map(|i| delayed(&format!("m{i}"), SOON)).collect();
    let more: Vec<JobId> = ctx
        .store
        .enqueue(&ctx.q, &more)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().clone())
        .collect();
    wait_until_due(ctx, &more).await;
    assert_eq!(promote(ctx, 100).await.moved, 10);
    assert_eq!(ctx.probe.wakes().await, 16, "pushed ten, trimmed to 16");
}

pub async fn promote_of_a_lane_job_at_its_group_limit_pushes_no_wake(ctx: &Ctx) {
    let g = group("a");
    ctx.store.genqueue(&ctx.q, &g, &named(&["a1"])).await.unwrap();
    let running = claim(ctx, 10).await;
    assert_eq!(payloads(&running), ["a1"]);
    let ids = ctx.store.genqueue(&ctx.q, &g, &[delayed("a2", SOON)]).await.unwrap();
    wait_until_due(ctx, &[ids[0].id().clone()]).await;
    ctx.probe.clear_wakes().await;
    assert_eq!(promote(ctx, 100).await.moved, 1);
    assert_eq!(
        ctx.probe.wakes().await,
        0,
        "the group is at its limit: a2 is not claimable yet"
    );
    assert!(claim(ctx, 10).await.is_empty());
    complete(ctx, &running[0]).await;
    assert_eq!(ctx.probe.wakes().await, 1, "the settle that frees the slot wakes once");
    assert_eq!(payloads(&claim(ctx, 10).await), ["a2"]);
    assert_slot_invariant(ctx).await;
}

pub async fn promote_of_lane_jobs_pushes_wakes_bounded_by_free_slots(ctx: &Ctx) {
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(group("a")), 2)
        .await
        .unwrap();
    let jobs: Vec<NewJob> = (0..5).map(|i| delayed(&format!("a{i}"), SOON)).collect();
    let ids: Vec<JobId> = ctx
        .store
        .genqueue(&ctx.q, &group("a"), &jobs)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().clone())
        .collect();
    wait_until_due(ctx, &ids).await;
    ctx.probe.clear_wakes().await;
    assert_eq!(promote(ctx, 100).await.moved, 5);
    assert_eq!(ctx.probe.wakes().await, 2, "limit 2: two of the five are claimable");
    assert_eq!(claim(ctx, 10).await.len(), 2);
    assert_slot_invariant(ctx).await;
}

pub async fn genqueue_pushes_wakes_bounded_by_free_slots(ctx: &Ctx) {
    // Group a, the default limit 1: five new jobs, one claimable.
    ctx.store
        .genqueue(&ctx.q, &group("a"), &named(&["a1", "a2", "a3", "a4", "a5"]))
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 1);
    ctx.probe.clear_wakes().await;
    // More jobs behind a full slot make nothing more claimable.
    ctx.store.genqueue(&ctx.q, &group("a"), &named(&["a6"])).await.unwrap();
    assert_eq!(
        ctx.probe.wakes().await,
        0,
        "a's one slot already has a job waiting for it"
    );

    // Group b, limit 3: two jobs, then two more (only one more slot).
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(group("b")), 3)
        .await
        .unwrap();
    ctx.probe.clear_wakes().await;
    ctx.store
        .genqueue(&ctx.q, &group("b"), &named(&["b1", "b2"]))
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 2);
    ctx.probe.clear_wakes().await;
    ctx.store
        .genqueue(&ctx.q, &group("b"), &named(&["b3", "b4"]))
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 1, "one free slot left for b");

    // Group c, limit 1, its slot taken by a running job: nothing claimable.
    ctx.store.genqueue(&ctx.q, &group("c"), &named(&["c1"])).await.unwrap();
    let mut running = None;
    for job in claim(ctx, 100).await {
        if job.group == Some(group("c")) {
            running = Some(job);
        }
    }
    assert!(running.is_some(), "c1 is running");
    ctx.probe.clear_wakes().await;
    ctx.store.genqueue(&ctx.q, &group("c"), &named(&["c2"])).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 0, "c is at its limit");
    assert_slot_invariant(ctx).await;
}

/// Delayed lane jobs make nothing claimable: their group stays off the ring; only the first, the
/// new head of scheduled, wakes a parked consumer (to see its due time).
pub async fn genqueue_of_delayed_jobs_wakes_only_for_a_new_head(ctx: &Ctx) {
    ctx.store
        .genqueue(&ctx.q, &group("a"), &[delayed("a1", LATER)])
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 1);
    ctx.store
        .genqueue(&ctx.q, &group("a"), &[delayed("a2", LATER * 2)])
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 1, "due after the head: no wake");
    assert!(ctx.probe.ring().await.is_empty());
}

pub async fn claim_pushes_no_wake(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &named(&["f1", "f2"])).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("a"), &named(&["a1"])).await.unwrap();
    ctx.probe.clear_wakes().await;
    assert_eq!(claim(ctx, 10).await.len(), 3);
    assert_eq!(ctx.probe.wakes().await, 0);
}

pub async fn complete_of_a_flat_job_pushes_no_wake(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &named(&["f1", "f2"])).await.unwrap();
    let got = claim(ctx, 1).await;
    ctx.probe.clear_wakes().await;
    complete(ctx, &got[0]).await;
    assert_eq!(ctx.probe.wakes().await, 0, "a flat settle pushes none");
}

pub async fn complete_of_a_lane_job_that_puts_its_group_back_on_the_ring_pushes_one_wake(ctx: &Ctx) {
    ctx.store
        .genqueue(&ctx.q, &group("a"), &named(&["a1", "a2", "a3"]))
        .await
        .unwrap();
    let got = claim(ctx, 10).await;
    assert_eq!(payloads(&got), ["a1"]);
    assert!(
        ctx.probe.ring().await.is_empty(),
        "at its limit, the group left the ring"
    );
    ctx.probe.clear_wakes().await;
    complete(ctx, &got[0]).await;
    assert_eq!(ctx.probe.wakes().await, 1, "exactly one: one slot freed");
    assert_eq!(ctx.probe.ring().await, ["a"]);
    assert_slot_invariant(ctx).await;
}

pub async fn complete_of_a_lane_job_with_its_group_still_on_the_ring_pushes_no_wake(ctx: &Ctx) {
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(group("a")), 2)
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("a"), &named(&["a1", "a2", "a3"]))
        .await
        .unwrap();
    let got = claim(ctx, 1).await;
    assert_eq!(
        ctx.probe.ring().await,
        ["a"],
        "one slot still free: a stays on the ring"
    );
    ctx.probe.clear_wakes().await;
    complete(ctx, &got[0]).await;
    assert_eq!(
        ctx.probe.wakes().await,
        0,
        "a2 was claimable already; nothing new became claimable"
    );
    assert_slot_invariant(ctx).await;
}

pub async fn complete_of_the_last_lane_job_pushes_no_wake(ctx: &Ctx) {
    ctx.store.genqueue(&ctx.q, &group("a"), &named(&["a1"])).await.unwrap();
    let got = claim(ctx, 10).await;
    ctx.probe.clear_wakes().await;
    complete(ctx, &got[0]).await;
    assert_eq!(ctx.probe.wakes().await, 0, "an empty lane: nothing made claimable");
    assert!(ctx.probe.ring().await.is_empty());
    assert_slot_invariant(ctx).await;
}

crate::conformance!(
    promote_leaves_a_job_unclaimable_before_its_due_time,
    promote_makes_a_due_job_claimable,
    promote_puts_a_promoted_flat_job_behind_the_jobs_already_waiting,
    promote_replies_the_time_until_the_next_due_job,
    promote_replies_no_next_due_when_nothing_is_scheduled,
    promote_replies_the_next_due_time_left_behind_a_promoted_job,
    promote_moves_at_most_limit_jobs_per_call,
    promote_puts_a_delayed_lane_job_in_its_lane,
    promote_puts_a_lane_job_behind_its_lane_and_keeps_the_group_limit,
    promote_drops_a_missing_row,
    promote_buries_a_malformed_scheduled_row_naming_the_defect,
    promote_pushes_one_wake_per_job_made_claimable,
    promote_pushes_at_most_16_wakes_and_trims_the_list_to_16,
    promote_of_a_lane_job_at_its_group_limit_pushes_no_wake,
    promote_of_lane_jobs_pushes_wakes_bounded_by_free_slots,
    genqueue_pushes_wakes_bounded_by_free_slots,
    genqueue_of_delayed_jobs_wakes_only_for_a_new_head,
    claim_pushes_no_wake,
    complete_of_a_flat_job_pushes_no_wake,
    complete_of_a_lane_job_that_puts_its_group_back_on_the_ring_pushes_one_wake,
    complete_of_a_lane_job_with_its_group_still_on_the_ring_pushes_no_wake,
    complete_of_the_last_lane_job_pushes_no_wake,
);
