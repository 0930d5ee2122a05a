//! Priorities: the claim order of ranks (the most urgent first, first in first out within one
//! priority, recovered jobs ahead of all), bounded waiting by the queue's priority aging (strict at
//! 0), lanes ordered by the same rule, every path that makes a job ready again keeping its
//! priority, and the aging's own verbs.

use echomq::store::RetryRequest;
use std::time::Duration;

use echomq::job::{PRIORITY_AGING_DEFAULT, PRIORITY_AGING_MAX};
use echomq::store::LimitTarget;
use echomq::{Error, NewJob, RetryPolicy};

use crate::harness::{wait_until, Ctx};
use crate::steps::{claim, group, payloads, MAX};

fn job(payload: &str, priority: u8) -> NewJob {
    NewJob::new(payload.as_bytes().to_vec()).with_priority(priority)
}

/// Every job the queue hands out, one claim after another (each completed).
async fn drain_order(ctx: &Ctx) -> Vec<String> {
    let mut order = Vec::new();
    loop {
        let got = claim(ctx, 1).await;
        let Some(j) = got.first() else { break };
        order.extend(payloads(&got));
        crate::steps::complete(ctx, j).await;
    }
    order
}

pub async fn claim_hands_out_the_most_urgent_priority_first_and_each_priority_in_order(ctx: &Ctx) {
    let jobs = [
        job("a9", 9),
        job("b0", 0),
        job("c5", 5),
        NewJob::new(b"d".to_vec()),
        job("e9", 9),
        job("f5", 5),
    ];
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    assert_eq!(drain_order(ctx).await, ["b0", "d", "c5", "f5", "a9", "e9"]);
}

pub async fn claim_in_one_batch_follows_the_same_order(ctx: &Ctx) {
    let jobs: Vec<NewJob> = (0..30u8).map(|i| job(&format!("{i}"), i % 10)).collect();
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    let got = payloads(&claim(ctx, 30).await);
    let want: Vec<String> = (0..10u8)
        .flat_map(|p| (0..3u8).map(move |k| (k * 10 + p).to_string()))
        .collect();
    assert_eq!(got, want, "priority first, then the order of arrival");
}

pub async fn claim_runs_a_lower_priority_before_urgent_jobs_that_came_more_than_its_aging_later(ctx: &Ctx) {
    ctx.store
        .set_priority_aging(&ctx.q, Duration::from_millis(20))
        .await
        .unwrap();
    ctx.store.enqueue(&ctx.q, &[job("old9", 9)]).await.unwrap();
    // 9 × 20 ms later, and some
    tokio::time::sleep(Duration::from_millis(300)).await;
    ctx.store
        .enqueue(&ctx.q, &[job("new0", 0), job("new1", 1)])
        .await
        .unwrap();
    assert_eq!(drain_order(ctx).await, ["old9", "new0", "new1"]);
}

pub async fn claim_under_strict_aging_never_runs_a_lower_priority_while_an_urgent_job_waits(ctx: &Ctx) {
    ctx.store.set_priority_aging(&ctx.q, Duration::ZERO).await.unwrap();
    ctx.store
        .enqueue(&ctx.q, &[job("old9", 9), job("old1", 1)])
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    ctx.store
        .enqueue(&ctx.q, &[job("new0", 0), job("new9", 9)])
        .await
        .unwrap();
    assert_eq!(drain_order(ctx).await, ["new0", "old1", "old9", "new9"]);
}

pub async fn genqueue_orders_a_lane_by_priority_then_arrival(ctx: &Ctx) {
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(group("g")), 10)
        .await
        .unwrap();
    let jobs = [job("a3", 3), job("b0", 0), job("c3", 3), job("d1", 1)];
    ctx.store.genqueue(&ctx.q, &group("g"), &jobs).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("g"), &[job("e0", 0)]).await.unwrap();
    assert_eq!(payloads(&claim(ctx, 10).await), ["b0", "e0", "d1", "a3", "c3"]);
}

pub async fn retry_with_no_delay_ranks_the_job_by_its_own_priority(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &[job("x5", 5)]).await.unwrap();
    let x = claim(ctx, 1).await.remove(0);
    ctx.store.enqueue(&ctx.q, &[job("y0", 0), job("z9", 9)]).await.unwrap();
    ctx.store
        .retry(
            &ctx.q,
            &x.id,
            x.token,
            &RetryRequest::new("again").after(Duration::ZERO).max_attempts(MAX),
        )
        .await
        .unwrap();
    assert_eq!(drain_order(ctx).await, ["y0", "x5", "z9"]);
}

pub async fn promote_ranks_a_due_job_by_its_priority(ctx: &Ctx) {
    let later = job("x3", 3).with_delay(Duration::from_millis(20));
    ctx.store.enqueue(&ctx.q, &[later]).await.unwrap();
    ctx.store.enqueue(&ctx.q, &[job("y0", 0), job("z7", 7)]).await.unwrap();
    let ctx_ref = ctx;
    wait_until(
        Duration::from_secs(5),
        "the delayed job is promoted",
        move || async move {
            ctx_ref
                .store
                .promote(&ctx_ref.q, 10, echomq::schedule::GRACE_MIN)
                .await
                .unwrap()
                .moved
                == 1
        },
    )
    .await;
    assert_eq!(drain_order(ctx).await, ["y0", "x3", "z7"]);
}

pub async fn reap_puts_a_recovered_job_ahead_of_every_priority(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &[job("x9", 9)]).await.unwrap();
    let got = ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, Duration::from_millis(20)).max_attempts(MAX),
        )
        .await
        .unwrap();
    assert_eq!(payloads(&got), ["x9"]);
    ctx.store.enqueue(&ctx.q, &[job("y0", 0)]).await.unwrap();
    let ctx_ref = ctx;
    wait_until(
        Duration::from_secs(5),
        "the lease lapses and reap recovers x9",
        move || async move { ctx_ref.store.reap(&ctx_ref.q, 10, None).await.unwrap() == 1 },
    )
    .await;
    assert_eq!(drain_order(ctx).await, ["x9", "y0"]);
}

pub async fn enqueue_writes_priority_and_retry_on_the_row_only_when_set(ctx: &Ctx) {
    let policy: RetryPolicy = "exp:1s,x2,max=10m,jitter=full".parse().unwrap();
    let ids: Vec<_> = ctx
        .store
        .enqueue(
            &ctx.q,
            &[
                NewJob::new(b"plain".to_vec()),
                job("zero", 0),
                job("p4", 4).with_retry(policy.clone()),
            ],
        )
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.id().clone())
        .collect();
    for id in &ids[..2] {
        assert_eq!(
            ctx.probe.row_field(id, "priority").await,
            None,
            "priority 0 writes no field"
        );
        assert_eq!(ctx.probe.row_field(id, "retry").await, None);
    }
    assert_eq!(ctx.probe.row_field(&ids[2], "priority").await.as_deref(), Some("4"));
    let row = ctx.store.get(&ctx.q, &ids[2]).await.unwrap().unwrap();
    assert_eq!(
        (row.priority, row.retry.as_deref()),
        (4, Some("exp:1s,x2,max=10m,jitter=full"))
    );
    let plain = ctx.store.get(&ctx.q, &ids[0]).await.unwrap().unwrap();
    assert_eq!((plain.priority, plain.retry), (0, None));
    // a claim hands the job's own policy to its consumer
    let claimed = claim(ctx, 3).await;
    let retries: Vec<Option<String>> = claimed
        .iter()
        .map(|j| j.retry.as_ref().map(|r| r.to_string()))
        .collect();
    assert_eq!(retries, [None, None, Some(policy.to_string())]);
}

pub async fn enqueue_refuses_a_priority_above_9_and_writes_nothing(ctx: &Ctx) {
    let before = ctx.probe.snapshot().await;
    let err = ctx
        .store
        .enqueue(&ctx.q, &[job("ok", 1), job("bad", 10)])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { field: "priority", .. }), "{err:?}");
    let err = ctx
        .store
        .enqueue(
            &ctx.q,
            &[NewJob::new(b"f".to_vec()).with_retry(RetryPolicy::function(|_, _| Duration::ZERO))],
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidOption { field: "retry", .. }), "{err:?}");
    assert_eq!(ctx.probe.snapshot().await, before);
}

pub async fn priority_aging_is_60_s_until_set(ctx: &Ctx) {
    assert_eq!(ctx.store.priority_aging(&ctx.q).await.unwrap(), PRIORITY_AGING_DEFAULT);
    assert_eq!(PRIORITY_AGING_DEFAULT, Duration::from_secs(60));
}

pub async fn set_priority_aging_is_read_back_and_refuses_more_than_a_year(ctx: &Ctx) {
    for aging in [Duration::ZERO, Duration::from_millis(250), PRIORITY_AGING_MAX] {
        ctx.store.set_priority_aging(&ctx.q, aging).await.unwrap();
        assert_eq!(ctx.store.priority_aging(&ctx.q).await.unwrap(), aging);
    }
    for bad in [
        PRIORITY_AGING_MAX + Duration::from_millis(1),
        Duration::from_micros(1500),
    ] {
        let err = ctx.store.set_priority_aging(&ctx.q, bad).await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::InvalidOption {
                    field: "priority_aging",
                    ..
                }
            ),
            "{err:?}"
        );
    }
    assert_eq!(ctx.store.priority_aging(&ctx.q).await.unwrap(), PRIORITY_AGING_MAX);
}

crate::conformance!(
    claim_hands_out_the_most_urgent_priority_first_and_each_priority_in_order,
    claim_in_one_batch_follows_the_same_order,
    claim_runs_a_lower_priority_before_urgent_jobs_that_came_more_than_its_aging_later,
    claim_under_strict_aging_never_runs_a_lower_priority_while_an_urgent_job_waits,
    genqueue_orders_a_lane_by_priority_then_arrival,
    retry_with_no_delay_ranks_the_job_by_its_own_priority,
    promote_ranks_a_due_job_by_its_priority,
    reap_puts_a_recovered_job_ahead_of_every_priority,
    enqueue_writes_priority_and_retry_on_the_row_only_when_set,
    enqueue_refuses_a_priority_above_9_and_writes_nothing,
    priority_aging_is_60_s_until_set,
    set_priority_aging_is_read_back_and_refuses_more_than_a_year,
);
