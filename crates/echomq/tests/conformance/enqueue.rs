//! enqueue and genqueue: ids, sequences, duplicates, delays, the ring step and wakes.

use echomq::store::RetryRequest;
use std::time::Duration;

use echomq::store::Enqueued;
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
        .claim(&ctx.q, echomq::store::ClaimRequest::new(1000, LEASE).max_attempts(3))
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

/// A batch larger than one multi-row statement of the embedded store, mixing generated and caller
/// ids, a duplicate, delays and max_attempts: every job where its own enqueue would put it.
pub async fn enqueue_mixed_batch_lands_each_job_in_its_place(ctx: &Ctx) {
    let batch: Vec<NewJob> = (0..130)
        .map(|i| {
            let mut job = NewJob::new(format!("p{i}"));
            if i % 5 == 0 {
                job = job.with_id(JobId::new(format!("c{i}")).unwrap());
            }
            if i == 128 {
                job = job.with_id(JobId::new("c10").unwrap()); // a duplicate of job 10
            }
            if i % 7 == 0 {
                job = job.with_delay(Duration::from_secs(3600));
            }
            if i % 3 == 0 {
                job = job.with_max_attempts(5);
            }
            job
        })
        .collect();
    let replies = ctx.store.enqueue(&ctx.q, &batch).await.unwrap();
    let mut seq = 0;
    let mut expected = Vec::new();
    for i in 0..130 {
        if i == 128 {
            expected.push(Enqueued::Duplicate(JobId::new("c10").unwrap()));
            continue;
        }
        seq += 1;
        let id = if i % 5 == 0 { format!("c{i}") } else { seq.to_string() };
        expected.push(Enqueued::New(JobId::parse(id).unwrap()));
    }
    assert_eq!(replies, expected);
    let ready: Vec<String> = (0..130)
        .filter(|i| *i != 128 && i % 7 != 0)
        .map(|i| expected[i].id().to_string())
        .collect();
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!(counts.pending, ready.len() as u64);
    assert_eq!(counts.scheduled, 130 - 1 - ready.len() as u64);
    let delayed = ctx.store.get(&ctx.q, expected[21].id()).await.unwrap().unwrap();
    assert_eq!(delayed.state, JobState::Scheduled);
    assert_eq!(delayed.payload, b"p21");
    assert_eq!(delayed.max_attempts, Some(5));
    assert!(delayed.run_at.is_some());
    let claimed = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(200, LEASE).max_attempts(3))
        .await
        .unwrap();
    let order: Vec<String> = claimed.iter().map(|c| c.id.to_string()).collect();
    assert_eq!(order, ready, "FIFO over the batch's ready jobs");
    let payloads: Vec<Vec<u8>> = claimed.iter().map(|c| c.payload.clone()).collect();
    let want: Vec<Vec<u8>> = (0..130)
        .filter(|i| *i != 128 && i % 7 != 0)
        .map(|i| format!("p{i}").into_bytes())
        .collect();
    assert_eq!(payloads, want);
    let first = ctx.store.get(&ctx.q, expected[3].id()).await.unwrap().unwrap();
    assert_eq!(first.max_attempts, Some(5));
    assert_eq!(first.state, JobState::Active);
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
    // a delayed job is not claimable; one due before anything else scheduled wakes one parked
    // consumer of each sort (its park ends at the earliest due time its last promote saw)
    let later = |s: u64| [NewJob::new("x").with_delay(Duration::from_secs(s))];
    ctx.store.enqueue(&ctx.q, &later(60)).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 1, "the new head of scheduled: one wake");
    ctx.probe.clear_wakes().await;
    ctx.store.enqueue(&ctx.q, &later(120)).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 0, "due after the head: no wake");
    ctx.store.enqueue(&ctx.q, &later(30)).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 1, "due before the head: one wake");
}

pub async fn genqueue_puts_jobs_in_their_lane(ctx: &Ctx) {
    let g = GroupName::new("tenant-a").unwrap();
    ctx.store.genqueue(&ctx.q, &g, &jobs(2)).await.unwrap();
    let claimed = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(10, LEASE).max_attempts(3))
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1, "limit 1 by default: one job of the group at a time");
    assert_eq!(claimed[0].group.as_ref(), Some(&g));
    crate::harness::assert_slot_invariant(ctx).await;
}

/// A job's kind goes on its row and comes back with every claim of it — flat or in a lane, with or
/// without other options, after a delay, a retry and a release — and on `get`; a raw job has none.
/// The claim also gives each job's budget: its own, else the claim's default.
pub async fn enqueue_writes_the_kind_and_every_claim_returns_it(ctx: &Ctx) {
    let g = GroupName::new("tenant-1").unwrap();
    let flat = [
        NewJob::new("raw"),
        NewJob::new("{}").with_kind("send_email"),
        NewJob::new("{}").with_kind("resize").with_max_attempts(7),
        NewJob::new("{}")
            .with_kind("later")
            .with_delay(Duration::from_millis(1)),
    ];
    let ids: Vec<JobId> = ctx
        .store
        .enqueue(&ctx.q, &flat)
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().clone())
        .collect();
    ctx.store
        .genqueue(&ctx.q, &g, &[NewJob::new("{}").with_kind("lane_kind")])
        .await
        .unwrap();
    for (id, want) in ids
        .iter()
        .zip([None, Some("send_email"), Some("resize"), Some("later")])
    {
        let row = ctx.store.get(&ctx.q, id).await.unwrap().unwrap();
        assert_eq!(row.kind.as_deref(), want, "job {id}");
    }
    tokio::time::sleep(Duration::from_millis(5)).await;
    ctx.store
        .promote(&ctx.q, 10, echomq::schedule::GRACE_MIN)
        .await
        .unwrap();
    let claimed = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(10, LEASE).max_attempts(3))
        .await
        .unwrap();
    let mut got: Vec<(Option<&str>, u64)> = claimed.iter().map(|c| (c.kind.as_deref(), c.max_attempts)).collect();
    got.sort();
    assert_eq!(
        got,
        [
            (None, 3),
            (Some("lane_kind"), 3),
            (Some("later"), 3),
            (Some("resize"), 7),
            (Some("send_email"), 3)
        ]
    );
    // a retry and a release keep it: the next claims return it again
    let email = claimed
        .iter()
        .find(|c| c.kind.as_deref() == Some("send_email"))
        .unwrap();
    let resize = claimed.iter().find(|c| c.kind.as_deref() == Some("resize")).unwrap();
    ctx.store
        .retry(
            &ctx.q,
            &email.id,
            email.token,
            &RetryRequest::new("boom").after(Duration::ZERO).max_attempts(3),
        )
        .await
        .unwrap();
    ctx.store
        .release(&ctx.q, &resize.id, resize.token, Duration::ZERO)
        .await
        .unwrap();
    let again = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(10, LEASE).max_attempts(3))
        .await
        .unwrap();
    let mut kinds: Vec<Option<&str>> = again.iter().map(|c| c.kind.as_deref()).collect();
    kinds.sort();
    assert_eq!(kinds, [Some("resize"), Some("send_email")]);
}

crate::conformance!(
    enqueue_writes_the_kind_and_every_claim_returns_it,
    enqueue_generates_ids_from_one_in_order,
    enqueue_keeps_fifo_within_one_batch,
    generated_ids_are_the_decimal_text_of_their_sequence_across_carries,
    enqueue_mixed_batch_lands_each_job_in_its_place,
    enqueue_caller_id_twice_is_a_duplicate,
    enqueue_pushes_one_wake_per_ready_job_at_most_16,
    genqueue_puts_jobs_in_their_lane,
);
