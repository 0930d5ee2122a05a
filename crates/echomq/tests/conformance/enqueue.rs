//! enqueue and genqueue: ids, sequences, duplicates, delays, the ring step and wakes.

use std::time::Duration;

use echomq::store::{Enqueued, SettleOptions};
use echomq::{GroupName, JobId, JobState, NewJob};

use crate::harness::Ctx;

const LEASE: Duration = Duration::from_secs(30);

fn jobs(n: usize) -> Vec<NewJob> {
    (0..n).map(|i| NewJob::new(format!("{{\"n\":{i}}}"))).collect()
}

pub async fn enqueue_generates_ids_from_one_in_order(ctx: &Ctx) {
    let replies = ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap();
    let ids: Vec<&str> = replies.iter().map(|r| r.id().as_str()).collect();
    assert_eq!(ids, ["1", "2", "3"]);
    assert!(replies.iter().all(|r| matches!(r, Enqueued::New(_))));
    let job = ctx
        .store
        .get(&ctx.q, &JobId::parse("2").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.payload, b"{\"n\":1}");
    assert_eq!(job.attempts, 0);
}

pub async fn enqueue_keeps_fifo_within_one_batch(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1000)).await.unwrap();
    let claimed = ctx
        .store
        .claim(&ctx.q, 1000, LEASE, 3, SettleOptions::default())
        .await
        .unwrap();
    let order: Vec<&str> = claimed.iter().map(|c| c.id.as_str()).collect();
    let want: Vec<String> = (1..=1000).map(|i: u64| i.to_string()).collect();
    assert_eq!(order, want);
}

pub async fn generated_ids_are_the_decimal_text_of_their_sequence_across_carries(ctx: &Ctx) {
    // 1..=8 plain; then a batch with options (a budget, a caller id, a delay) across 9 → 10 and on
    ctx.store.enqueue(&ctx.q, &jobs(8)).await.unwrap();
    let mut batch: Vec<NewJob> = jobs(4).into_iter().map(|j| j.with_max_attempts(2)).collect();
    batch.insert(1, NewJob::new("own").with_id(JobId::new("mine").unwrap()));
    batch.push(NewJob::new("later").with_delay(Duration::from_secs(60)));
    let replies = ctx.store.enqueue(&ctx.q, &batch).await.unwrap();
    let ids: Vec<&str> = replies.iter().map(|r| r.id().as_str()).collect();
    assert_eq!(ids, ["9", "mine", "11", "12", "13", "14"]);
    // then plain again, across 99 → 100
    let replies = ctx.store.enqueue(&ctx.q, &jobs(90)).await.unwrap();
    assert_eq!(replies[0].id().as_str(), "15");
    assert_eq!(replies[84].id().as_str(), "99");
    assert_eq!(replies[85].id().as_str(), "100");
    assert_eq!(replies[89].id().as_str(), "104");
    for (id, state) in [
        ("9", JobState::Pending),
        ("14", JobState::Scheduled),
        ("100", JobState::Pending),
    ] {
        let job = ctx.store.get(&ctx.q, &JobId::parse(id).unwrap()).await.unwrap();
        assert_eq!(job.map(|j| j.state), Some(state), "job {id}");
    }
    // the caller id "mine" took sequence 10: no job has the id "10"
    assert_eq!(ctx.store.get(&ctx.q, &JobId::parse("10").unwrap()).await.unwrap(), None);
}

pub async fn enqueue_caller_id_twice_is_a_duplicate(ctx: &Ctx) {
    let id = JobId::new("order-7").unwrap();
    let batch = [
        NewJob::new("a").with_id(id.clone()),
        NewJob::new("b").with_id(id.clone()),
    ];
    let replies = ctx.store.enqueue(&ctx.q, &batch).await.unwrap();
    assert_eq!(replies, [Enqueued::New(id.clone()), Enqueued::Duplicate(id.clone())]);
    let again = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("c").with_id(id.clone())])
        .await
        .unwrap();
    assert_eq!(again, [Enqueued::Duplicate(id.clone())]);
    assert_eq!(ctx.store.get(&ctx.q, &id).await.unwrap().unwrap().payload, b"a");
}

pub async fn enqueue_pushes_one_wake_per_ready_job_at_most_16(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 3);
    ctx.store.enqueue(&ctx.q, &jobs(40)).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 16);
    ctx.probe.clear_wakes().await;
    ctx.store
        .enqueue(&ctx.q, &[NewJob::new("x").with_delay(Duration::from_secs(60))])
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 0, "a delayed job is not claimable: no wake");
}

pub async fn genqueue_puts_jobs_in_their_lane(ctx: &Ctx) {
    let g = GroupName::new("tenant-a").unwrap();
    ctx.store.genqueue(&ctx.q, &g, &jobs(2)).await.unwrap();
    let claimed = ctx
        .store
        .claim(&ctx.q, 10, LEASE, 3, SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "limit 1 by default: one job of the group at a time");
    assert_eq!(claimed[0].group.as_ref(), Some(&g));
    crate::harness::assert_slot_invariant(ctx).await;
}

crate::conformance!(
    enqueue_generates_ids_from_one_in_order,
    enqueue_keeps_fifo_within_one_batch,
    generated_ids_are_the_decimal_text_of_their_sequence_across_carries,
    enqueue_caller_id_twice_is_a_duplicate,
    enqueue_pushes_one_wake_per_ready_job_at_most_16,
    genqueue_puts_jobs_in_their_lane,
);
