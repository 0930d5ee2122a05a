//! The age of the oldest pending job (`Counts::oldest_pending_age`), read from the pending tally:
//! it follows jobs joining the ready sets (enqueue, genqueue, retry, redrive, promotion) and
//! leaving them (claim, cancel, remove, drain), counts a lower priority's wait rather than its
//! rank, and leaves out jobs put back at the front (recovered, released).

use echomq::store::RetryRequest;
use std::time::Duration;

use echomq::store::{CancelOutcome, Removed, SettleOptions, Settled};
use echomq::{JobId, NewJob};

use crate::admin::{after, store_now};
use crate::harness::Ctx;
use crate::steps::{claim, group, named, payloads};

const PLAIN: SettleOptions = SettleOptions::new();

async fn age(ctx: &Ctx) -> Option<Duration> {
    ctx.store.counts(&ctx.q).await.unwrap().oldest_pending_age
}

/// The age counts reads now is that of the oldest pending job, made ready between `from` and `to`
/// (ms on the store's clock), to within the second of rank its tally field spans: at least the
/// time since `to`, less than a second past the time since `from`.
async fn assert_age_of_a_job_made_ready_between(ctx: &Ctx, from: u64, to: u64, what: &str) {
    let read_from = store_now(ctx).await;
    let age = age(ctx).await.unwrap_or_else(|| panic!("{what}: no age")).as_millis() as u64;
    let read_to = store_now(ctx).await;
    let (least, most) = (read_from.saturating_sub(to), read_to - from + 999);
    assert!(
        (least..=most).contains(&age),
        "{what}: age {age} ms outside [{least}, {most}]"
    );
}

/// Enqueues `jobs` (to g's lane when given); the store's clock just before and just after.
async fn push(ctx: &Ctx, g: Option<&str>, jobs: &[NewJob]) -> (u64, u64) {
    let from = store_now(ctx).await;
    match g {
        Some(g) => ctx.store.genqueue(&ctx.q, &group(g), jobs).await.unwrap(),
        None => ctx.store.enqueue(&ctx.q, jobs).await.unwrap(),
    };
    (from, store_now(ctx).await)
}

pub async fn counts_tell_the_age_of_the_oldest_pending_job_flat_or_in_a_lane(ctx: &Ctx) {
    assert_eq!(age(ctx).await, None, "an empty queue");
    let (a0, a1) = push(ctx, None, &named(&["a"])).await;
    assert_age_of_a_job_made_ready_between(ctx, a0, a1, "one flat job").await;
    // a second later: b is ranked in a later second than a
    after(ctx, a1 + 1_100).await;
    let (b0, b1) = push(ctx, Some("g"), &named(&["b"])).await;
    assert_age_of_a_job_made_ready_between(ctx, a0, a1, "a, older than b").await;
    let age_a = age(ctx).await.unwrap();
    assert!(
        age_a >= Duration::from_millis(1_100),
        "a has waited over a second: {age_a:?}"
    );
    assert_eq!(payloads(&claim(ctx, 1).await), ["a"]);
    assert_age_of_a_job_made_ready_between(ctx, b0, b1, "b in its lane, once a is claimed").await;
    assert_eq!(payloads(&claim(ctx, 1).await), ["b"]);
    assert_eq!(age(ctx).await, None, "every job claimed");
}

pub async fn counts_age_of_a_lower_priority_job_is_its_wait_not_its_rank(ctx: &Ctx) {
    // priority 9 under the default aging ranks a job 9 minutes later than priority 0: its age
    // still counts from when it was enqueued
    let (a0, a1) = push(ctx, None, &[NewJob::new("low").with_priority(9)]).await;
    assert_age_of_a_job_made_ready_between(ctx, a0, a1, "priority 9, default aging").await;
    ctx.store.set_priority_aging(&ctx.q, Duration::ZERO).await.unwrap();
    after(ctx, a1 + 1_100).await;
    let (b0, b1) = push(ctx, Some("g"), &[NewJob::new("strict").with_priority(5)]).await;
    assert_age_of_a_job_made_ready_between(ctx, a0, a1, "the older of two").await;
    // the aging changed since the first was ranked: it still leaves the tally it joined
    assert_eq!(payloads(&claim(ctx, 1).await), ["low"]);
    assert_age_of_a_job_made_ready_between(ctx, b0, b1, "priority 5, strict aging").await;
    assert_eq!(payloads(&claim(ctx, 1).await), ["strict"]);
    assert_eq!(age(ctx).await, None);
}

pub async fn counts_age_leaves_out_jobs_put_back_at_the_front(ctx: &Ctx) {
    push(ctx, None, &named(&["lapses", "released"])).await;
    let short = ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, Duration::from_millis(1))
                .max_attempts(3)
                .settle(PLAIN),
        )
        .await
        .unwrap()
        .jobs;
    let held = claim(ctx, 1).await;
    assert_eq!(age(ctx).await, None, "both claimed");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(ctx.store.reap(&ctx.q, 10, None).await.unwrap(), 1);
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().pending, 1);
    assert_eq!(age(ctx).await, None, "a reaped job goes back at the front, uncounted");
    let released = ctx
        .store
        .release(&ctx.q, &held[0].id, held[0].token, Duration::ZERO)
        .await;
    assert_eq!(released.unwrap(), Settled::Ok);
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().pending, 2);
    assert_eq!(age(ctx).await, None, "a released job goes back at the front, uncounted");
    let (c0, c1) = push(ctx, None, &named(&["counted"])).await;
    assert_age_of_a_job_made_ready_between(ctx, c0, c1, "a new job beside them").await;
    let mut order = payloads(&claim(ctx, 3).await);
    order.sort();
    assert_eq!(order, ["counted", "lapses", "released"]);
    assert_eq!(short.len(), 1);
    assert_eq!(age(ctx).await, None);
}

pub async fn counts_age_follows_cancel_remove_retry_and_drain(ctx: &Ctx) {
    push(ctx, None, &named(&["cancelled"])).await;
    let (l0, l1) = push(ctx, Some("g"), &named(&["removed"])).await;
    let cancelled = ctx.store.cancel(&ctx.q, &JobId::parse("1").unwrap(), None, PLAIN).await;
    assert_eq!(cancelled.unwrap(), CancelOutcome::Cancelled);
    assert_age_of_a_job_made_ready_between(ctx, l0, l1, "the lane job left").await;
    let removed = ctx.store.remove(&ctx.q, &JobId::parse("2").unwrap(), false).await;
    assert_eq!(removed.unwrap(), Removed::Removed);
    assert_eq!(age(ctx).await, None, "cancelled and removed");

    // a retry at once makes the job ready again: counted from the retry
    push(ctx, None, &named(&["retried"])).await;
    let held = claim(ctx, 1).await;
    let r0 = store_now(ctx).await;
    ctx.store
        .retry(
            &ctx.q,
            &held[0].id,
            held[0].token,
            &RetryRequest::new("e")
                .after(Duration::ZERO)
                .max_attempts(3)
                .settle(PLAIN),
        )
        .await
        .unwrap();
    let r1 = store_now(ctx).await;
    assert_age_of_a_job_made_ready_between(ctx, r0, r1, "a retried job").await;

    // drain takes flat and lane jobs out of the tally; the next job is counted afresh
    push(ctx, Some("g"), &[NewJob::new("x"), NewJob::new("y").with_priority(4)]).await;
    let later = NewJob::new("later").with_delay(Duration::from_secs(60));
    push(ctx, None, &[later, NewJob::new("low").with_priority(7)]).await;
    after(ctx, r1 + 1_100).await;
    assert_eq!(ctx.store.drain(&ctx.q).await.unwrap(), 5);
    assert_eq!(age(ctx).await, None, "drained");
    let (n0, n1) = push(ctx, None, &named(&["next"])).await;
    assert_age_of_a_job_made_ready_between(ctx, n0, n1, "a job after the drain").await;
}

crate::conformance!(
    counts_tell_the_age_of_the_oldest_pending_job_flat_or_in_a_lane,
    counts_age_of_a_lower_priority_job_is_its_wait_not_its_rank,
    counts_age_leaves_out_jobs_put_back_at_the_front,
    counts_age_follows_cancel_remove_retry_and_drain,
);
