//! The operator verbs: drain, obliterate, get, remove, redrive (one and all), promote_job, cancel,
//! set_group_limit, counts, list and queues — every reply, the chunked verbs over more than one
//! chunk, and the slot invariant after every case that touches a lane job.

use echomq::store::RetryRequest;
use std::time::{Duration, Instant};

use echomq::store::{
    CancelOutcome, CancelRequest, Counts, Discarded, LimitTarget, Obliterated, PromotedJob, Redriven, Removed, Retried,
    SettleOptions, Settled, StalledPolicy,
};
use echomq::{ClaimedJob, Error, GroupName, JobId, JobState, NewJob};
use futures::StreamExt;

use crate::harness::{assert_slot_invariant, Ctx};

const LEASE: Duration = Duration::from_secs(30);
const MAX: u32 = 3;
const PLAIN: SettleOptions = SettleOptions::new();

pub(crate) fn jobs(n: usize) -> Vec<NewJob> {
    (0..n).map(|i| NewJob::new(format!("{{\"n\":{i}}}"))).collect()
}

pub(crate) fn id(s: &str) -> JobId {
    JobId::parse(s).unwrap()
}

pub(crate) fn group(s: &str) -> GroupName {
    GroupName::new(s).unwrap()
}

fn ids(claimed: &[ClaimedJob]) -> Vec<&str> {
    claimed.iter().map(|c| c.id.as_str()).collect()
}

fn strs(ids: &[JobId]) -> Vec<&str> {
    ids.iter().map(JobId::as_str).collect()
}

async fn claim(ctx: &Ctx, n: u32) -> Vec<ClaimedJob> {
    ctx.store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(n, LEASE)
                .max_attempts(MAX)
                .settle(PLAIN),
        )
        .await
        .unwrap()
        .jobs
}

async fn list(ctx: &Ctx, state: JobState) -> Vec<JobId> {
    ctx.store.list(&ctx.q, state, None, 10_000).await.unwrap().ids
}

/// (pending, scheduled, active, dead) of the case's queue.
pub(crate) async fn sizes(ctx: &Ctx) -> (u64, u64, u64, u64) {
    let c = ctx.store.counts(&ctx.q).await.unwrap();
    (c.pending, c.scheduled, c.active, c.dead)
}

/// The store's clock in ms.
pub(crate) async fn store_now(ctx: &Ctx) -> u64 {
    ctx.probe.now_ms().await
}

/// Waits until the store's clock has passed `ms`, so the next write gets a later score.
pub(crate) async fn after(ctx: &Ctx, ms: u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    while store_now(ctx).await <= ms {
        assert!(Instant::now() < deadline, "the store clock did not pass {ms}");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Every key of the case's queue, as its suffix after `emq:{q}:`, sorted.
pub(crate) async fn queue_keys(ctx: &Ctx) -> Vec<String> {
    ctx.probe.keys().await
}

/// The queue's keys but its retention setting (which every case's queue starts with).
pub(crate) async fn job_keys(ctx: &Ctx) -> Vec<String> {
    let mut keys = queue_keys(ctx).await;
    keys.retain(|k| !k.starts_with("retention"));
    keys
}

/// Waits until `reap` has put `n` lapsed leases back (the caller claimed them with a short lease).
async fn lapse_and_reap(ctx: &Ctx, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut back = 0;
    while back < n {
        assert!(Instant::now() < deadline, "reap returned {back} of {n} lapsed leases");
        back += ctx.store.reap(&ctx.q, 100, None).await.unwrap();
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Makes every given job dead: claimed ones are discarded.
async fn discard_all(ctx: &Ctx, claimed: &[ClaimedJob]) {
    let request = echomq::store::DiscardRequest::new("x").settle(PLAIN);
    let replies = futures::future::join_all(
        claimed
            .iter()
            .map(|c| ctx.store.discard(&ctx.q, &c.id, c.token, &request)),
    )
    .await;
    for r in replies {
        assert_eq!(r.unwrap(), Discarded::Dead);
    }
}

// ---------------------------------------------------------------------------------------------
// drain

pub async fn drain_drops_pending_lane_and_scheduled_jobs_but_not_active_or_dead(ctx: &Ctx) {
    let g = group("g");
    ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap(); // 1 2 3
    ctx.store.genqueue(&ctx.q, &g, &jobs(3)).await.unwrap(); // 4 5 6
    let later = [NewJob::new("later").with_delay(Duration::from_secs(60))];
    ctx.store.enqueue(&ctx.q, &later).await.unwrap(); // 7
    ctx.store.genqueue(&ctx.q, &group("h"), &later).await.unwrap(); // 8
    let claimed = claim(ctx, 3).await;
    assert_eq!(ids(&claimed), ["1", "4", "2"]);
    discard_all(ctx, &claimed[2..]).await;
    assert_eq!(sizes(ctx).await, (3, 2, 2, 1));

    assert_eq!(ctx.store.drain(&ctx.q).await.unwrap(), 5);
    assert_eq!(sizes(ctx).await, (0, 0, 2, 1));
    for gone in ["3", "5", "6", "7", "8"] {
        assert!(ctx.store.get(&ctx.q, &id(gone)).await.unwrap().is_none(), "job {gone}");
    }
    assert!(list(ctx, JobState::Pending).await.is_empty());
    assert!(list(ctx, JobState::Scheduled).await.is_empty());
    assert_eq!(strs(&list(ctx, JobState::Dead).await), ["2"]);
    // the active jobs are untouched: their holders still settle them
    for c in &claimed[..2] {
        let job = ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Active);
    }
    assert_slot_invariant(ctx).await;
    for c in &claimed[..2] {
        let done = ctx
            .store
            .complete(&ctx.q, &echomq::store::Completion::new(c.id.clone(), c.token), PLAIN)
            .await;
        assert_eq!(done.unwrap(), Settled::Ok);
    }
    assert_slot_invariant(ctx).await;
    assert_eq!(
        ctx.store.drain(&ctx.q).await.unwrap(),
        0,
        "a second drain finds nothing"
    );
}

pub async fn drain_is_chunked_over_more_than_1000_jobs(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(2500)).await.unwrap();
    // 150 groups: more fields in the groups hash than a small (listpack) hash holds, so the lanes
    // are walked over several HSCAN cursors; and one lane longer than a chunk
    for i in 0..150 {
        ctx.store
            .genqueue(&ctx.q, &group(&format!("g{i}")), &jobs(8))
            .await
            .unwrap();
    }
    ctx.store.genqueue(&ctx.q, &group("big"), &jobs(1500)).await.unwrap();
    let delayed: Vec<NewJob> = jobs(1100)
        .into_iter()
        .map(|j| j.with_delay(Duration::from_secs(60)))
        .collect();
    ctx.store.enqueue(&ctx.q, &delayed).await.unwrap();
    assert_eq!(sizes(ctx).await, (5200, 1100, 0, 0));

    assert_eq!(ctx.store.drain(&ctx.q).await.unwrap(), 6300);
    assert_eq!(sizes(ctx).await, (0, 0, 0, 0));
    let left: Vec<String> = queue_keys(ctx)
        .await
        .into_iter()
        .filter(|k| k.starts_with("job:") || k.starts_with("lane:") || k == "pending" || k == "scheduled")
        .collect();
    assert!(
        left.is_empty(),
        "drain left {} keys, e.g. {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
    assert!(claim(ctx, 100).await.is_empty());
    assert_slot_invariant(ctx).await;
}

pub async fn drain_then_claim_hands_out_nothing_and_clears_stale_ring_members(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("a"), &jobs(2)).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("b"), &jobs(2)).await.unwrap();
    assert_eq!(ctx.probe.ring().await, ["~", "a", "b"]);
    assert_eq!(ctx.store.drain(&ctx.q).await.unwrap(), 6);

    assert!(claim(ctx, 10).await.is_empty());
    assert!(
        ctx.probe.ring().await.is_empty(),
        "claim drops the members drain emptied"
    );
    assert!(
        ctx.probe.group_fields().await.iter().all(|f| !f.starts_with("r:")),
        "no ring flag outlives its member: {:?}",
        ctx.probe.group_fields().await
    );
    assert_slot_invariant(ctx).await;

    // the members come back with new work (their flags were cleared, so the ring step pushes them)
    ctx.store.genqueue(&ctx.q, &group("a"), &jobs(1)).await.unwrap(); // 7
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap(); // 8
    assert_eq!(ids(&claim(ctx, 10).await), ["7", "8"]);
    assert_slot_invariant(ctx).await;
}

// ---------------------------------------------------------------------------------------------
// obliterate

pub async fn obliterate_refuses_active_jobs_without_force(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("g"), &jobs(2)).await.unwrap();
    let claimed = claim(ctx, 2).await;
    let keys = queue_keys(ctx).await;

    let refused = ctx.store.obliterate(&ctx.q, false).await.unwrap();
    assert_eq!(refused, Obliterated::Active { active: 2 });
    assert_eq!(
        queue_keys(ctx).await,
        keys,
        "a refused obliterate writes nothing (not even its mark)"
    );
    assert_eq!(sizes(ctx).await, (3, 0, 2, 0));
    assert!(ctx.store.queues().await.unwrap().contains(&ctx.q));
    // the queue still works: no obliterating mark was left behind
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    for c in &claimed {
        let done = ctx
            .store
            .complete(&ctx.q, &echomq::store::Completion::new(c.id.clone(), c.token), PLAIN)
            .await;
        assert_eq!(done.unwrap(), Settled::Ok);
    }
    assert_slot_invariant(ctx).await;
    // rows 2 3 5 6 are left (1 and 4 completed without retention)
    assert_eq!(
        ctx.store.obliterate(&ctx.q, false).await.unwrap(),
        Obliterated::Done { removed: 4 }
    );
}

pub async fn obliterate_with_force_deletes_every_key_of_the_queue(ctx: &Ctx) {
    ctx.keep(10).await;
    let g = group("g");
    let record = SettleOptions::default().record(true);
    ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap(); // 1 2 3
    ctx.store.genqueue(&ctx.q, &g, &jobs(2)).await.unwrap(); // 4 5
    let later = [NewJob::new("later").with_delay(Duration::from_secs(60))];
    ctx.store.enqueue(&ctx.q, &later).await.unwrap(); // 6
    let claimed = claim(ctx, 3).await;
    assert_eq!(ids(&claimed), ["1", "4", "2"]);
    let c = &claimed[0];
    let done = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(c.id.clone(), c.token).output(Some(b"out")),
            record,
        )
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
    discard_all(ctx, &claimed[2..]).await;
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 1)
        .await
        .unwrap();
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 2)
        .await
        .unwrap();
    ctx.store.pause(&ctx.q).await.unwrap();
    // job 4 is active and its group at its limit: job 5 waits in the lane, off the ring
    assert_eq!(sizes(ctx).await, (2, 1, 1, 1));
    assert!(!queue_keys(ctx).await.is_empty());

    let done = ctx.store.obliterate(&ctx.q, true).await.unwrap();
    assert_eq!(done, Obliterated::Done { removed: 6 });
    assert_eq!(
        queue_keys(ctx).await,
        Vec::<String>::new(),
        "every key of the queue is gone"
    );
    assert!(!ctx.store.queues().await.unwrap().contains(&ctx.q));
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap(), Counts::default());
    let settle = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(id("4").clone(), 1), PLAIN)
        .await;
    assert_eq!(
        settle.unwrap(),
        Settled::Gone,
        "the holder of an obliterated job finds it gone"
    );

    // the name can be used again, from a fresh start
    let again = ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    assert_eq!(again[0].id().as_str(), "1");
    assert_eq!(ids(&claim(ctx, 10).await), ["1"]);
    assert_slot_invariant(ctx).await;
}

pub async fn obliterate_is_chunked_over_more_than_1000_jobs(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1500)).await.unwrap();
    for i in 0..150 {
        ctx.store
            .genqueue(&ctx.q, &group(&format!("g{i}")), &jobs(8))
            .await
            .unwrap();
    }
    ctx.store.genqueue(&ctx.q, &group("big"), &jobs(1500)).await.unwrap();
    let delayed: Vec<NewJob> = jobs(1100)
        .into_iter()
        .map(|j| j.with_delay(Duration::from_secs(60)))
        .collect();
    ctx.store.enqueue(&ctx.q, &delayed).await.unwrap();
    let claimed = claim(ctx, 1001).await;
    assert_eq!(claimed.len(), 1001);
    assert!(claimed.iter().any(|c| c.group.is_some()));
    assert_eq!(sizes(ctx).await, (4200 - 1001, 1100, 1001, 0));

    let done = ctx.store.obliterate(&ctx.q, true).await.unwrap();
    assert_eq!(done, Obliterated::Done { removed: 5300 });
    let left = queue_keys(ctx).await;
    assert!(
        left.is_empty(),
        "obliterate left {} keys, e.g. {:?}",
        left.len(),
        &left[..left.len().min(5)]
    );
    assert!(!ctx.store.queues().await.unwrap().contains(&ctx.q));
}

/// Enqueues racing an obliterate: each is refused while the queue is marked, or lands once it is
/// gone. Either way, once all is quiet, `queues()` lists the queue exactly when it holds jobs (an
/// enqueue landing between the last chunk and the unregistering must not leave its jobs in a
/// queue no tool lists).
pub async fn obliterate_raced_by_enqueues_lists_the_queue_exactly_when_it_holds_jobs(ctx: &Ctx) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    for round in 0..40 {
        ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap();
        let quit = Arc::new(AtomicBool::new(false));
        let producer = {
            let (store, q, quit) = (ctx.store.clone(), ctx.q.clone(), quit.clone());
            tokio::spawn(async move {
                while !quit.load(Ordering::Relaxed) {
                    match store.enqueue(&q, &jobs(1)).await {
                        Ok(_) | Err(Error::Obliterating { .. }) => {}
                        Err(e) => panic!("enqueue beside an obliterate: {e}"),
                    }
                }
            })
        };
        let done = ctx.store.obliterate(&ctx.q, true).await.unwrap();
        // quiet at once: an enqueue after the unregistering registers the queue again itself,
        // so only the one in flight may land after it
        quit.store(true, Ordering::Relaxed);
        assert!(matches!(done, Obliterated::Done { .. }), "round {round}: {done:?}");
        producer.await.unwrap();
        let listed = ctx.store.queues().await.unwrap().contains(&ctx.q);
        let holds = ctx.store.counts(&ctx.q).await.unwrap().pending > 0;
        assert_eq!(listed, holds, "round {round}: listed {listed}, holds jobs {holds}");
    }
}

pub async fn enqueue_is_refused_while_the_queue_is_being_obliterated(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    ctx.probe.set_obliterating_mark().await;

    let err = ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap_err();
    assert!(
        matches!(&err, Error::Obliterating { queue } if queue == ctx.q.as_str()),
        "{err:?}"
    );
    assert!(err.to_string().contains(ctx.q.as_str()), "{err}");
    let err = ctx.store.genqueue(&ctx.q, &group("g"), &jobs(2)).await.unwrap_err();
    assert!(matches!(&err, Error::Obliterating { .. }), "{err:?}");
    assert_eq!(sizes(ctx).await, (1, 0, 0, 0), "nothing written");
    assert!(ctx.store.get(&ctx.q, &id("2")).await.unwrap().is_none());
    assert!(
        claim(ctx, 10).await.is_empty(),
        "claims give nothing while obliterating"
    );

    ctx.probe.clear_obliterating_mark().await;
    let next = ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    assert_eq!(next[0].id().as_str(), "2", "the refused enqueues took no id");
}

// ---------------------------------------------------------------------------------------------
// get

pub async fn get_returns_a_waiting_row_with_its_options(ctx: &Ctx) {
    let g = group("tenant");
    ctx.store
        .enqueue(&ctx.q, &[NewJob::new("flat").with_max_attempts(5)])
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &g, &[NewJob::new("lane").with_id(JobId::new("j-1").unwrap())])
        .await
        .unwrap();

    let job = ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap();
    assert_eq!(job.id, id("1"));
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.payload, b"flat");
    assert_eq!(job.attempts, 0);
    assert_eq!(job.max_attempts, Some(5));
    assert_eq!(job.group, None);
    assert_eq!(job.run_at, None);
    assert_eq!(job.stalled, 0);
    assert_eq!(job.last_error, None);
    assert_eq!(job.cancel, None);
    assert_eq!(job.output, None);
    assert_eq!(job.finished_at, None);
    assert_eq!(job.score, None);

    let job = ctx.store.get(&ctx.q, &id("j-1")).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.payload, b"lane");
    assert_eq!(job.group, Some(g));
    assert_eq!(job.max_attempts, None);
    assert_eq!(job.score, None);
}

pub async fn get_returns_a_scheduled_row_with_its_due_time(ctx: &Ctx) {
    let t0 = store_now(ctx).await;
    ctx.store
        .enqueue(&ctx.q, &[NewJob::new("x").with_delay(Duration::from_secs(60))])
        .await
        .unwrap();
    let t1 = store_now(ctx).await;
    let job = ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Scheduled);
    let run_at = job.run_at.expect("a scheduled row has run_at");
    assert!(
        (t0 + 60_000..=t1 + 60_000).contains(&run_at),
        "run_at {run_at} not in [{t0}, {t1}] + 60 s"
    );
    assert_eq!(job.score, Some(run_at), "the score of a scheduled job is its due time");
}

pub async fn get_returns_an_active_row_with_its_lease_deadline(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let t0 = store_now(ctx).await;
    let claimed = claim(ctx, 1).await;
    let t1 = store_now(ctx).await;
    let job = ctx.store.get(&ctx.q, &claimed[0].id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Active);
    assert_eq!(job.attempts, 1);
    let score = job.score.expect("an active row has its lease deadline");
    assert!(
        (t0 + 30_000..=t1 + 30_000).contains(&score),
        "deadline {score} not in [{t0}, {t1}] + 30 s"
    );
    assert_eq!(job.cancel, None);

    let cancelled = ctx.store.cancel(&ctx.q, &claimed[0].id, Some("stop"), PLAIN).await;
    assert_eq!(cancelled.unwrap(), CancelOutcome::Requested);
    let job = ctx.store.get(&ctx.q, &claimed[0].id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Active);
    assert_eq!(job.cancel.as_deref(), Some("stop"));
}

pub async fn get_returns_a_retried_row_with_its_last_error(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = &claim(ctx, 1).await[0];
    let t0 = store_now(ctx).await;
    let retried = ctx
        .store
        .retry(
            &ctx.q,
            &c.id,
            c.token,
            &RetryRequest::new("boom")
                .after(Duration::from_secs(60))
                .max_attempts(MAX)
                .settle(PLAIN),
        )
        .await;
    assert_eq!(retried.unwrap(), Retried::Retrying);
    let t1 = store_now(ctx).await;
    let job = ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Scheduled);
    assert_eq!(job.attempts, 1);
    assert_eq!(job.last_error.as_deref(), Some("boom"));
    let run_at = job.run_at.unwrap();
    assert!((t0 + 60_000..=t1 + 60_000).contains(&run_at));
    assert_eq!(job.score, Some(run_at));
}

pub async fn get_returns_a_dead_row_with_its_time_of_death(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = &claim(ctx, 1).await[0];
    let t0 = store_now(ctx).await;
    let dead = ctx
        .store
        .discard(
            &ctx.q,
            &c.id,
            c.token,
            &echomq::store::DiscardRequest::new("bad input").settle(PLAIN),
        )
        .await;
    assert_eq!(dead.unwrap(), Discarded::Dead);
    let t1 = store_now(ctx).await;
    let job = ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Dead);
    assert_eq!(job.attempts, 1);
    assert_eq!(job.last_error.as_deref(), Some("bad input"));
    let score = job.score.unwrap();
    assert!((t0..=t1).contains(&score), "time of death {score} not in [{t0}, {t1}]");
}

pub async fn get_returns_a_retained_row_with_its_output(ctx: &Ctx) {
    ctx.keep(10).await;
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = &claim(ctx, 1).await[0];
    let t0 = store_now(ctx).await;
    let done = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(c.id.clone(), c.token).output(Some(b"result")),
            PLAIN,
        )
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
    let t1 = store_now(ctx).await;
    let job = ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Completed);
    assert_eq!(job.output.as_deref(), Some(&b"result"[..]));
    let finished = job.finished_at.unwrap();
    assert!((t0..=t1).contains(&finished));
    assert_eq!(job.score, Some(finished));
}

pub async fn get_shows_the_stall_count(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    ctx.store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, Duration::from_millis(1))
                .max_attempts(MAX)
                .settle(PLAIN),
        )
        .await
        .unwrap();
    let policy = StalledPolicy::default().max_stalled(3).limit(10);
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let swept = ctx.store.sweep_stalled(&ctx.q, policy).await.unwrap();
        if !swept.recovered.is_empty() {
            break;
        }
        assert!(Instant::now() < deadline, "the 1 ms lease never lapsed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let job = ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.stalled, 1);
    assert_eq!(job.attempts, 1);
}

pub async fn get_of_an_unknown_id_is_none(ctx: &Ctx) {
    assert_eq!(ctx.store.get(&ctx.q, &id("nope")).await.unwrap(), None);
    assert_eq!(ctx.store.get(&ctx.q, &id("17")).await.unwrap(), None);
}

// ---------------------------------------------------------------------------------------------
// remove

pub async fn remove_deletes_a_pending_job(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap();
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("2"), false).await.unwrap(),
        Removed::Removed
    );
    assert!(ctx.store.get(&ctx.q, &id("2")).await.unwrap().is_none());
    assert_eq!(sizes(ctx).await, (2, 0, 0, 0));
    assert_eq!(ids(&claim(ctx, 10).await), ["1", "3"]);
}

pub async fn remove_deletes_a_lane_job_and_keeps_the_slot_invariant(ctx: &Ctx) {
    let g = group("g");
    ctx.store.genqueue(&ctx.q, &g, &jobs(3)).await.unwrap(); // 1 2 3
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("2"), false).await.unwrap(),
        Removed::Removed
    );
    assert_eq!(sizes(ctx).await, (2, 0, 0, 0));
    assert_eq!(strs(&list(ctx, JobState::Pending).await), ["1", "3"]);
    assert_slot_invariant(ctx).await;
    assert_eq!(ids(&claim(ctx, 10).await), ["1"]);
    assert_slot_invariant(ctx).await;
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("3"), false).await.unwrap(),
        Removed::Removed
    );
    assert_slot_invariant(ctx).await;
    assert!(claim(ctx, 10).await.is_empty());
    assert_eq!(sizes(ctx).await, (0, 0, 1, 0));
}

pub async fn remove_deletes_a_scheduled_job(ctx: &Ctx) {
    let later = [
        NewJob::new("a").with_delay(Duration::from_secs(60)),
        NewJob::new("b").with_delay(Duration::from_secs(60)),
    ];
    ctx.store.enqueue(&ctx.q, &later).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("g"), &later[..1]).await.unwrap(); // 3
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("1"), false).await.unwrap(),
        Removed::Removed
    );
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("3"), false).await.unwrap(),
        Removed::Removed
    );
    assert_eq!(sizes(ctx).await, (0, 1, 0, 0));
    assert_eq!(strs(&list(ctx, JobState::Scheduled).await), ["2"]);
    assert_slot_invariant(ctx).await;
}

pub async fn remove_deletes_a_dead_job(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    discard_all(ctx, &claim(ctx, 1).await).await;
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("1"), false).await.unwrap(),
        Removed::Removed
    );
    assert_eq!(sizes(ctx).await, (0, 0, 0, 0));
    assert!(list(ctx, JobState::Dead).await.is_empty());
    assert!(ctx.store.get(&ctx.q, &id("1")).await.unwrap().is_none());
}

pub async fn remove_deletes_a_retained_row(ctx: &Ctx) {
    ctx.keep(10).await;
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = &claim(ctx, 1).await[0];
    let done = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(c.id.clone(), c.token), PLAIN)
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
    assert_eq!(ctx.store.remove(&ctx.q, &c.id, false).await.unwrap(), Removed::Removed);
    assert!(ctx.store.get(&ctx.q, &c.id).await.unwrap().is_none());
    assert!(list(ctx, JobState::Completed).await.is_empty());
}

pub async fn remove_of_an_active_job_without_force_is_refused(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    ctx.store.genqueue(&ctx.q, &group("g"), &jobs(1)).await.unwrap();
    let claimed = claim(ctx, 2).await;
    for c in &claimed {
        assert_eq!(ctx.store.remove(&ctx.q, &c.id, false).await.unwrap(), Removed::Active);
        let job = ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap();
        assert_eq!(job.state, JobState::Active);
    }
    assert_eq!(sizes(ctx).await, (0, 0, 2, 0));
    assert_slot_invariant(ctx).await;
    for c in &claimed {
        let done = ctx
            .store
            .complete(&ctx.q, &echomq::store::Completion::new(c.id.clone(), c.token), PLAIN)
            .await;
        assert_eq!(done.unwrap(), Settled::Ok, "the holder still holds it");
    }
}

pub async fn remove_of_an_active_job_with_force_frees_its_slot(ctx: &Ctx) {
    let g = group("g");
    ctx.store.genqueue(&ctx.q, &g, &jobs(3)).await.unwrap(); // 1 2 3, limit 1
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap(); // 4
    let claimed = claim(ctx, 2).await;
    assert_eq!(ids(&claimed), ["1", "4"]);
    ctx.probe.clear_wakes().await;

    assert_eq!(
        ctx.store.remove(&ctx.q, &id("1"), true).await.unwrap(),
        Removed::Removed
    );
    assert!(ctx.store.get(&ctx.q, &id("1")).await.unwrap().is_none());
    assert_slot_invariant(ctx).await;
    assert_eq!(
        ctx.probe.wakes().await,
        1,
        "the freed slot put the group back on the ring"
    );
    let settle = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(id("1").clone(), claimed[0].token),
            PLAIN,
        )
        .await;
    assert_eq!(settle.unwrap(), Settled::Gone);
    assert_eq!(ids(&claim(ctx, 10).await), ["2"], "the group's slot is free again");
    assert_slot_invariant(ctx).await;

    assert_eq!(
        ctx.store.remove(&ctx.q, &id("4"), true).await.unwrap(),
        Removed::Removed
    );
    assert_eq!(sizes(ctx).await, (1, 0, 1, 0));
    assert_slot_invariant(ctx).await;
}

pub async fn remove_of_an_unknown_id_is_gone(ctx: &Ctx) {
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("nope"), true).await.unwrap(),
        Removed::Gone
    );
    assert_eq!(ctx.store.remove(&ctx.q, &id("3"), false).await.unwrap(), Removed::Gone);
}

// ---------------------------------------------------------------------------------------------
// redrive

/// One job (id 1) claimed on its only attempt.
async fn on_its_last_attempt(ctx: &Ctx) -> ClaimedJob {
    ctx.store
        .enqueue(&ctx.q, &[NewJob::new("x").with_max_attempts(1)])
        .await
        .unwrap();
    claim(ctx, 1).await.remove(0)
}

/// That attempt fails: the job is dead.
async fn fail_last_attempt(ctx: &Ctx, c: &ClaimedJob) {
    let dead = ctx
        .store
        .retry(
            &ctx.q,
            &c.id,
            c.token,
            &RetryRequest::new("boom")
                .after(Duration::ZERO)
                .max_attempts(MAX)
                .settle(PLAIN),
        )
        .await;
    assert_eq!(dead.unwrap(), Retried::Dead);
}

pub async fn redrive_moves_a_dead_job_back_to_pending_with_a_raised_budget(ctx: &Ctx) {
    let c = on_its_last_attempt(ctx).await;
    fail_last_attempt(ctx, &c).await;
    ctx.probe.clear_wakes().await;

    assert_eq!(ctx.store.redrive(&ctx.q, &c.id, 2).await.unwrap(), Redriven::Redriven);
    assert_eq!(ctx.probe.wakes().await, 1);
    assert_eq!(sizes(ctx).await, (1, 0, 0, 0));
    let job = ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.attempts, 1, "attempts are kept");
    assert_eq!(job.max_attempts, Some(3), "max_attempts = attempts + extra");
    assert_eq!(job.score, None);

    let again = claim(ctx, 1).await;
    assert_eq!(ids(&again), ["1"]);
    assert_eq!(again[0].attempts, 2);
    let old = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(c.id.clone(), c.token), PLAIN)
        .await;
    assert_eq!(old.unwrap(), Settled::Stale, "the token of the dead attempt is stale");
}

pub async fn redrive_runs_a_job_whose_earlier_run_was_asked_to_cancel(ctx: &Ctx) {
    // a cancel asked of a running job that then failed its last attempt: the operator's redrive
    // runs it again (the spent cancel mark would bury it as cancelled at the next claim)
    let c = on_its_last_attempt(ctx).await;
    let asked = ctx.store.cancel(&ctx.q, &c.id, Some("stop"), PLAIN).await.unwrap();
    assert_eq!(asked, CancelOutcome::Requested);
    fail_last_attempt(ctx, &c).await;
    assert_eq!(ctx.store.redrive(&ctx.q, &c.id, 1).await.unwrap(), Redriven::Redriven);
    assert_eq!(ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap().cancel, None);
    let again = claim(ctx, 1).await;
    assert_eq!(ids(&again), ["1"], "handed out, not buried as cancelled");
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().cancelled, 0);
}

pub async fn redrive_returns_a_dead_lane_job_to_its_lane(ctx: &Ctx) {
    let g = group("g");
    ctx.store.genqueue(&ctx.q, &g, &jobs(2)).await.unwrap(); // 1 2
    discard_all(ctx, &claim(ctx, 1).await).await;
    assert_slot_invariant(ctx).await;
    assert_eq!(
        ctx.store.redrive(&ctx.q, &id("1"), 1).await.unwrap(),
        Redriven::Redriven
    );
    assert_eq!(
        strs(&list(ctx, JobState::Pending).await),
        ["2", "1"],
        "to its lane's tail"
    );
    let claimed = claim(ctx, 10).await;
    assert_eq!(ids(&claimed), ["2"], "one at a time: the group's limit holds");
    assert_eq!(claimed[0].group.as_ref(), Some(&g));
    assert_slot_invariant(ctx).await;
    let done = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(claimed[0].id.clone(), 1), PLAIN)
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
    let claimed = claim(ctx, 10).await;
    assert_eq!(ids(&claimed), ["1"]);
    assert_eq!(claimed[0].attempts, 2);
    assert_slot_invariant(ctx).await;
}

pub async fn redrive_of_a_job_that_is_not_dead_is_refused(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    claim(ctx, 1).await;
    for (i, state) in [("1", JobState::Active), ("2", JobState::Pending)] {
        assert_eq!(ctx.store.redrive(&ctx.q, &id(i), 3).await.unwrap(), Redriven::NotDead);
        let job = ctx.store.get(&ctx.q, &id(i)).await.unwrap().unwrap();
        assert_eq!(job.state, state);
        assert_eq!(job.max_attempts, None, "nothing written");
    }
    assert_eq!(sizes(ctx).await, (1, 0, 1, 0));
}

pub async fn redrive_of_an_unknown_id_is_gone(ctx: &Ctx) {
    assert_eq!(ctx.store.redrive(&ctx.q, &id("nope"), 3).await.unwrap(), Redriven::Gone);
    assert_eq!(sizes(ctx).await, (0, 0, 0, 0));
}

pub async fn redrive_all_moves_more_than_1000_dead_jobs(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1200)).await.unwrap();
    let claimed = claim(ctx, 1200).await;
    assert_eq!(claimed.len(), 1200);
    discard_all(ctx, &claimed).await;
    assert_eq!(sizes(ctx).await, (0, 0, 0, 1200));
    ctx.probe.clear_wakes().await;

    assert_eq!(ctx.store.redrive_all(&ctx.q, 2).await.unwrap(), 1200);
    assert_eq!(sizes(ctx).await, (1200, 0, 0, 0));
    assert_eq!(ctx.probe.wakes().await, 16, "wakes stop at 16");
    for i in ["1", "600", "1200"] {
        let job = ctx.store.get(&ctx.q, &id(i)).await.unwrap().unwrap();
        assert_eq!(
            (job.state, job.attempts, job.max_attempts),
            (JobState::Pending, 1, Some(3))
        );
    }
    assert_eq!(
        ctx.store.redrive_all(&ctx.q, 2).await.unwrap(),
        0,
        "nothing left to redrive"
    );
    let again = claim(ctx, 1200).await;
    assert_eq!(again.len(), 1200);
    assert!(again.iter().all(|c| c.attempts == 2));
}

// ---------------------------------------------------------------------------------------------
// promote_job

pub async fn promote_job_makes_a_scheduled_job_ready_now(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap(); // 1
    let later = [NewJob::new("later").with_delay(Duration::from_secs(60))];
    ctx.store.enqueue(&ctx.q, &later).await.unwrap(); // 2
    ctx.probe.clear_wakes().await;

    assert_eq!(
        ctx.store.promote_job(&ctx.q, &id("2")).await.unwrap(),
        PromotedJob::Promoted
    );
    assert_eq!(ctx.probe.wakes().await, 1);
    assert_eq!(sizes(ctx).await, (2, 0, 0, 0));
    let job = ctx.store.get(&ctx.q, &id("2")).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(job.run_at, None);
    assert_eq!(
        ids(&claim(ctx, 10).await),
        ["1", "2"],
        "at a fresh sequence: behind the waiting jobs"
    );
}

pub async fn promote_job_sends_a_lane_job_to_its_lane(ctx: &Ctx) {
    let g = group("g");
    let later = [NewJob::new("later").with_delay(Duration::from_secs(60))];
    ctx.store.genqueue(&ctx.q, &g, &later).await.unwrap(); // 1
    assert!(claim(ctx, 10).await.is_empty());
    ctx.probe.clear_wakes().await;

    assert_eq!(
        ctx.store.promote_job(&ctx.q, &id("1")).await.unwrap(),
        PromotedJob::Promoted
    );
    assert_eq!(ctx.probe.wakes().await, 1);
    assert_eq!(strs(&list(ctx, JobState::Pending).await), ["1"]);
    let claimed = claim(ctx, 10).await;
    assert_eq!(ids(&claimed), ["1"]);
    assert_eq!(claimed[0].group.as_ref(), Some(&g));
    assert_slot_invariant(ctx).await;
}

pub async fn promote_job_of_a_job_that_is_not_scheduled_is_refused(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    claim(ctx, 1).await;
    ctx.probe.clear_wakes().await;
    for i in ["1", "2"] {
        assert_eq!(
            ctx.store.promote_job(&ctx.q, &id(i)).await.unwrap(),
            PromotedJob::NotScheduled
        );
    }
    assert_eq!(sizes(ctx).await, (1, 0, 1, 0));
    assert_eq!(ctx.probe.wakes().await, 0);
}

pub async fn promote_job_of_an_unknown_id_is_gone(ctx: &Ctx) {
    assert_eq!(
        ctx.store.promote_job(&ctx.q, &id("nope")).await.unwrap(),
        PromotedJob::Gone
    );
}

// ---------------------------------------------------------------------------------------------
// cancel

pub async fn cancel_of_a_pending_job_cancels_it(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    let reply = ctx.store.cancel(&ctx.q, &id("1"), Some("not needed"), PLAIN).await;
    assert_eq!(reply.unwrap(), CancelOutcome::Cancelled);
    assert!(ctx.store.get(&ctx.q, &id("1")).await.unwrap().is_none(), "not retained");
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.pending, counts.cancelled), (1, 1));
    assert_eq!(ids(&claim(ctx, 10).await), ["2"]);
}

pub async fn cancel_of_a_scheduled_job_cancels_it(ctx: &Ctx) {
    ctx.keep(10).await;
    let later = [NewJob::new("later").with_delay(Duration::from_secs(60))];
    ctx.store.enqueue(&ctx.q, &later).await.unwrap();
    let reply = ctx.store.cancel(&ctx.q, &id("1"), None, PLAIN).await;
    assert_eq!(reply.unwrap(), CancelOutcome::Cancelled);
    let job = ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert!(job.finished_at.is_some());
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.scheduled, counts.cancelled), (0, 1));
    assert_eq!(strs(&list(ctx, JobState::Cancelled).await), ["1"]);
    let promoted = ctx
        .store
        .promote(&ctx.q, 10, echomq::schedule::GRACE_MIN)
        .await
        .unwrap();
    assert_eq!(promoted.moved, 0);
}

pub async fn cancel_of_a_lane_job_takes_it_out_of_its_lane(ctx: &Ctx) {
    ctx.keep(10).await;
    let g = group("g");
    ctx.store.genqueue(&ctx.q, &g, &jobs(3)).await.unwrap(); // 1 2 3
    let reply = ctx.store.cancel(&ctx.q, &id("1"), Some("why"), PLAIN).await;
    assert_eq!(reply.unwrap(), CancelOutcome::Cancelled);
    let job = ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Cancelled);
    assert_eq!(job.last_error.as_deref(), Some("why"));
    assert_eq!(strs(&list(ctx, JobState::Pending).await), ["2", "3"]);
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().pending, 2);
    assert_slot_invariant(ctx).await;
    assert_eq!(ids(&claim(ctx, 10).await), ["2"]);
    assert_slot_invariant(ctx).await;
}

pub async fn cancel_of_an_active_job_requests_it_from_its_consumer(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    let mut requests = ctx.store.cancel_requests(&ctx.q).await.unwrap();
    let claimed = claim(ctx, 2).await;

    let reply = ctx.store.cancel(&ctx.q, &id("1"), Some("user asked"), PLAIN).await;
    assert_eq!(reply.unwrap(), CancelOutcome::Requested);
    let got = tokio::time::timeout(Duration::from_secs(5), requests.next())
        .await
        .expect("a cancel request within 5 s")
        .expect("the stream is open");
    assert_eq!(
        got,
        CancelRequest {
            id: id("1"),
            reason: Some("user asked".into())
        }
    );
    let reply = ctx.store.cancel(&ctx.q, &id("2"), None, PLAIN).await;
    assert_eq!(reply.unwrap(), CancelOutcome::Requested);
    let got = tokio::time::timeout(Duration::from_secs(5), requests.next())
        .await
        .expect("a cancel request within 5 s")
        .expect("the stream is open");
    assert_eq!(
        got,
        CancelRequest {
            id: id("2"),
            reason: None
        }
    );

    let job = ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap();
    assert_eq!(job.state, JobState::Active, "a request, never a kill");
    assert_eq!(job.cancel.as_deref(), Some("user asked"));
    assert_eq!(
        ctx.store
            .get(&ctx.q, &id("2"))
            .await
            .unwrap()
            .unwrap()
            .cancel
            .as_deref(),
        Some("")
    );
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.active, counts.cancelled), (2, 0));
    let done = ctx
        .store
        .complete_cancelled(
            &ctx.q,
            &claimed[0].id,
            claimed[0].token,
            &echomq::store::CancelledRequest::new()
                .reason(Some("user asked"))
                .settle(PLAIN),
        )
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().cancelled, 1);
}

pub async fn cancel_of_a_finished_job_is_finished(ctx: &Ctx) {
    ctx.keep(10).await;
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    let claimed = claim(ctx, 2).await;
    discard_all(ctx, &claimed[..1]).await;
    let c = &claimed[1];
    let done = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(c.id.clone(), c.token), PLAIN)
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
    for i in ["1", "2"] {
        assert_eq!(
            ctx.store.cancel(&ctx.q, &id(i), None, PLAIN).await.unwrap(),
            CancelOutcome::Finished
        );
    }
    assert_eq!(
        ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap().state,
        JobState::Dead
    );
    assert_eq!(
        ctx.store.get(&ctx.q, &id("2")).await.unwrap().unwrap().state,
        JobState::Completed
    );
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().cancelled, 0);
}

pub async fn cancel_of_an_unknown_id_is_gone(ctx: &Ctx) {
    assert_eq!(
        ctx.store.cancel(&ctx.q, &id("nope"), None, PLAIN).await.unwrap(),
        CancelOutcome::Gone
    );
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().cancelled, 0);
}

// ---------------------------------------------------------------------------------------------
// set_group_limit

pub async fn set_group_limit_lets_a_group_run_that_many_jobs_at_once(ctx: &Ctx) {
    let g = group("g");
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 3)
        .await
        .unwrap();
    ctx.store.genqueue(&ctx.q, &g, &jobs(5)).await.unwrap();
    assert_eq!(ctx.probe.wakes().await, 3, "a wake per job the limit lets run");
    assert_eq!(ids(&claim(ctx, 10).await), ["1", "2", "3"]);
    assert_eq!(ctx.probe.slots().await.get("g"), Some(&3));
    assert_slot_invariant(ctx).await;
}

pub async fn set_group_limit_default_applies_to_groups_without_their_own(ctx: &Ctx) {
    let (a, b) = (group("a"), group("b"));
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 2)
        .await
        .unwrap();
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(b.clone()), 1)
        .await
        .unwrap();
    ctx.store.genqueue(&ctx.q, &a, &jobs(4)).await.unwrap(); // 1-4
    ctx.store.genqueue(&ctx.q, &b, &jobs(4)).await.unwrap(); // 5-8
    let claimed = claim(ctx, 10).await;
    assert_eq!(ids(&claimed), ["1", "5", "2"]);
    assert_slot_invariant(ctx).await;
}

pub async fn set_group_limit_raised_makes_more_jobs_claimable_and_wakes(ctx: &Ctx) {
    let g = group("g");
    ctx.store.genqueue(&ctx.q, &g, &jobs(5)).await.unwrap();
    assert_eq!(ids(&claim(ctx, 10).await), ["1"]);
    assert!(claim(ctx, 10).await.is_empty(), "limit 1");
    ctx.probe.clear_wakes().await;

    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 3)
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 2, "a wake per job the two new slots let run");
    assert_eq!(ids(&claim(ctx, 10).await), ["2", "3"]);
    assert_slot_invariant(ctx).await;

    ctx.probe.clear_wakes().await;
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 1)
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 0, "a lowered limit makes nothing claimable");
    assert_eq!(ctx.probe.slots().await.get("g"), Some(&3), "and preempts nothing");
    for c in ["1", "2"] {
        let done = ctx
            .store
            .complete(&ctx.q, &echomq::store::Completion::new(id(c).clone(), 1), PLAIN)
            .await;
        assert_eq!(done.unwrap(), Settled::Ok);
    }
    assert!(claim(ctx, 10).await.is_empty(), "still at the lowered limit");
    let done = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(id("3").clone(), 1), PLAIN)
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
    assert_eq!(ids(&claim(ctx, 10).await), ["4"]);
    assert_slot_invariant(ctx).await;
}

pub async fn set_group_limit_raised_for_a_group_on_the_ring_wakes_for_its_new_slots(ctx: &Ctx) {
    let g = group("g");
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 2)
        .await
        .unwrap();
    ctx.store.genqueue(&ctx.q, &g, &jobs(6)).await.unwrap();
    assert_eq!(ids(&claim(ctx, 1).await), ["1"]);
    assert_eq!(ctx.probe.ring().await, ["g"], "one slot left: still on the ring");
    ctx.probe.clear_wakes().await;

    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(g.clone()), 4)
        .await
        .unwrap();
    assert_eq!(ctx.probe.wakes().await, 2, "two more jobs claimable now: two wakes");
    assert_eq!(ids(&claim(ctx, 10).await), ["2", "3", "4"]);
    assert_slot_invariant(ctx).await;
}

// ---------------------------------------------------------------------------------------------
// counts

pub async fn counts_report_every_state_and_counter(ctx: &Ctx) {
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap(), Counts::default());
    let g = group("g");
    ctx.store.enqueue(&ctx.q, &jobs(5)).await.unwrap(); // 1-5
    ctx.store.genqueue(&ctx.q, &g, &jobs(3)).await.unwrap(); // 6 7 8
    let later = [NewJob::new("later").with_delay(Duration::from_secs(60))];
    ctx.store.enqueue(&ctx.q, &later).await.unwrap(); // 9
    let c = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((c.pending, c.scheduled), (8, 1), "lane jobs count as pending");

    let claimed = claim(ctx, 4).await;
    assert_eq!(ids(&claimed), ["1", "6", "2", "3"]);
    let ok = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(id("1").clone(), 1), PLAIN)
        .await;
    assert_eq!(ok.unwrap(), Settled::Ok);
    let retried = ctx
        .store
        .retry(
            &ctx.q,
            &id("2"),
            1,
            &RetryRequest::new("e")
                .after(Duration::ZERO)
                .max_attempts(MAX)
                .settle(PLAIN),
        )
        .await;
    assert_eq!(retried.unwrap(), Retried::Retrying);
    discard_all(ctx, &claimed[3..]).await;
    let cancelled = ctx.store.cancel(&ctx.q, &id("4"), None, PLAIN).await;
    assert_eq!(cancelled.unwrap(), CancelOutcome::Cancelled);
    // job 5 lapses twice: reaped once, swept once
    let short = Duration::from_millis(1);
    assert_eq!(
        ids(&ctx
            .store
            .claim(
                &ctx.q,
                echomq::store::ClaimRequest::new(1, short)
                    .max_attempts(MAX)
                    .settle(PLAIN)
            )
            .await
            .unwrap()),
        ["5"]
    );
    lapse_and_reap(ctx, 1).await;
    assert_eq!(
        ids(&ctx
            .store
            .claim(
                &ctx.q,
                echomq::store::ClaimRequest::new(1, short)
                    .max_attempts(MAX)
                    .settle(PLAIN)
            )
            .await
            .unwrap()),
        ["5"]
    );
    let policy = StalledPolicy::default().max_stalled(3).limit(10);
    let deadline = Instant::now() + Duration::from_secs(2);
    while ctx
        .store
        .sweep_stalled(&ctx.q, policy)
        .await
        .unwrap()
        .recovered
        .is_empty()
    {
        assert!(Instant::now() < deadline, "the 1 ms lease never lapsed");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    ctx.store.pause(&ctx.q).await.unwrap();

    let c = ctx.store.counts(&ctx.q).await.unwrap();
    let mut want = Counts::default();
    want.pending = 4; // 2 and 5 flat, 7 and 8 in g's lane
    want.scheduled = 1;
    want.active = 1;
    want.dead = 1;
    want.completed = 1;
    want.cancelled = 1;
    want.failed = 1;
    want.retried = 1;
    want.stalled = 1;
    want.reaped = 1;
    want.paused = true;
    // the flat ones by kind: 2 and 5 are raw jobs (the lane jobs are not counted by kind)
    want.ready_by_kind = vec![(None, 2)];
    // 2 (retried at once) and the lane jobs are in the pending tally; 5, reaped to the front, is not
    assert!(
        c.oldest_pending_age.is_some_and(|a| a < Duration::from_secs(60)),
        "{c:?}"
    );
    want.oldest_pending_age = c.oldest_pending_age;
    assert_eq!(c, want);
    assert_slot_invariant(ctx).await;

    ctx.store.resume(&ctx.q).await.unwrap();
    assert!(!ctx.store.counts(&ctx.q).await.unwrap().paused);
}

pub async fn counts_sum_lanes_over_many_groups(ctx: &Ctx) {
    for i in 0..300 {
        ctx.store
            .genqueue(&ctx.q, &group(&format!("g{i}")), &jobs(2))
            .await
            .unwrap();
    }
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().pending, 600);
    let claimed = claim(ctx, 1000).await;
    assert_eq!(claimed.len(), 300, "one per group at limit 1");
    let c = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!(
        (c.pending, c.active),
        (300, 300),
        "a group at its limit still counts its lane"
    );
    assert_slot_invariant(ctx).await;
}

// ---------------------------------------------------------------------------------------------
// list

pub async fn list_pending_gives_flat_jobs_in_claim_order_then_lanes(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap(); // 1 2 3
    ctx.store.genqueue(&ctx.q, &group("a"), &jobs(2)).await.unwrap(); // 4 5
    ctx.store.genqueue(&ctx.q, &group("b"), &jobs(2)).await.unwrap(); // 6 7
    assert_eq!(
        strs(&list(ctx, JobState::Pending).await),
        ["1", "2", "3", "4", "5", "6", "7"]
    );
    // pages by cursor: within the flat set, across into the lanes, within a lane, lane to lane
    assert_eq!(
        pages(ctx, JobState::Pending, &[2, 2, 2, 5]).await,
        [vec!["1", "2"], vec!["3", "4"], vec!["5", "6"], vec!["7"]]
    );
    assert_eq!(
        pages(ctx, JobState::Pending, &[3, 2, 5]).await,
        [vec!["1", "2", "3"], vec!["4", "5"], vec!["6", "7"]]
    );
    // the page that ends on the last job is the last (each part is read one job past the page)
    assert_eq!(pages(ctx, JobState::Pending, &[7]).await.len(), 1);
    assert_eq!(
        pages(ctx, JobState::Pending, &[3, 4]).await,
        [vec!["1", "2", "3"], vec!["4", "5", "6", "7"]]
    );
}

/// The pages of `state` of the given sizes, each from the cursor of the page before, until the
/// last (a page with no next); at most as many pages as sizes, every page but the last full.
async fn pages(ctx: &Ctx, state: JobState, sizes: &[u32]) -> Vec<Vec<String>> {
    let (mut out, mut cursor) = (Vec::new(), None::<String>);
    for (i, limit) in sizes.iter().enumerate() {
        let page = ctx.store.list(&ctx.q, state, cursor.as_deref(), *limit).await.unwrap();
        out.push(page.ids.iter().map(ToString::to_string).collect());
        match page.next {
            None => return out,
            Some(next) => {
                assert_eq!(page.ids.len(), *limit as usize, "a page with a next page is full");
                assert!(i + 1 < sizes.len(), "more pages than expected after {out:?}");
                cursor = Some(next);
            }
        }
    }
    out
}

pub async fn list_pending_includes_lanes_of_groups_at_their_limit(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap(); // 1
    ctx.store.genqueue(&ctx.q, &group("a"), &jobs(3)).await.unwrap(); // 2 3 4
    ctx.store.genqueue(&ctx.q, &group("b"), &jobs(2)).await.unwrap(); // 5 6
    assert_eq!(ids(&claim(ctx, 2).await), ["1", "2"]);
    // a is at its limit (off the ring); b still on it
    assert_eq!(ctx.probe.ring().await, ["b"]);
    let pending = list(ctx, JobState::Pending).await;
    assert_eq!(strs(&pending), ["3", "4", "5", "6"], "every group's lane, by name");
    assert_eq!(
        pages(ctx, JobState::Pending, &[1, 2, 2]).await,
        [vec!["3"], vec!["4", "5"], vec!["6"]]
    );
    assert_eq!(pending.len() as u64, ctx.store.counts(&ctx.q).await.unwrap().pending);
    assert_slot_invariant(ctx).await;
}

pub async fn list_scheduled_orders_by_due_time(ctx: &Ctx) {
    let delays = [300, 100, 200];
    let batch: Vec<NewJob> = delays
        .iter()
        .map(|s| NewJob::new("x").with_delay(Duration::from_secs(*s)))
        .collect();
    ctx.store.enqueue(&ctx.q, &batch).await.unwrap();
    assert_eq!(strs(&list(ctx, JobState::Scheduled).await), ["2", "3", "1"]);
    assert_eq!(
        pages(ctx, JobState::Scheduled, &[1, 1, 1]).await,
        [vec!["2"], vec!["3"], vec!["1"]]
    );
}

pub async fn list_active_orders_by_lease_deadline(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap();
    for lease in [60, 20, 40] {
        ctx.store
            .claim(
                &ctx.q,
                echomq::store::ClaimRequest::new(1, Duration::from_secs(lease))
                    .max_attempts(MAX)
                    .settle(PLAIN),
            )
            .await
            .unwrap();
    }
    assert_eq!(strs(&list(ctx, JobState::Active).await), ["2", "3", "1"]);
}

pub async fn list_dead_gives_newest_first(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(4)).await.unwrap();
    let claimed = claim(ctx, 4).await;
    for i in [2, 0, 3, 1] {
        discard_all(ctx, &claimed[i..=i]).await;
        // past this death's own score (not the time before the call: a slow call can outlast it)
        let died = ctx.probe.score("dead", &claimed[i].id).await.unwrap();
        after(ctx, died).await;
    }
    assert_eq!(strs(&list(ctx, JobState::Dead).await), ["2", "4", "1", "3"]);
    assert_eq!(
        pages(ctx, JobState::Dead, &[1, 2, 2]).await,
        [vec!["2"], vec!["4", "1"], vec!["3"]]
    );
}

pub async fn list_completed_and_cancelled_give_retained_rows_newest_first(ctx: &Ctx) {
    ctx.keep(10).await;
    ctx.store.enqueue(&ctx.q, &jobs(5)).await.unwrap();
    let claimed = claim(ctx, 3).await; // 1 2 3
                                       // each wait passes the finished row's own score, so the next finish scores later
    for c in [&claimed[1], &claimed[0]] {
        let done = ctx
            .store
            .complete(&ctx.q, &echomq::store::Completion::new(c.id.clone(), c.token), PLAIN)
            .await;
        assert_eq!(done.unwrap(), Settled::Ok);
        after(ctx, ctx.probe.score("completed", &c.id).await.unwrap()).await;
    }
    for i in ["5", "4"] {
        let done = ctx.store.cancel(&ctx.q, &id(i), None, PLAIN).await;
        assert_eq!(done.unwrap(), CancelOutcome::Cancelled);
        after(ctx, ctx.probe.score("cancelled", &id(i)).await.unwrap()).await;
    }
    assert_eq!(strs(&list(ctx, JobState::Completed).await), ["1", "2"]);
    assert_eq!(strs(&list(ctx, JobState::Cancelled).await), ["4", "5"]);
    // each state its own set of kept rows
    assert_eq!(ctx.probe.set_len("completed").await, 2);
    assert_eq!(ctx.probe.set_len("cancelled").await, 2);
    assert_eq!(pages(ctx, JobState::Completed, &[1, 5]).await, [vec!["1"], vec!["2"]]);
    assert_eq!(pages(ctx, JobState::Cancelled, &[1, 1]).await, [vec!["4"], vec!["5"]]);
}

pub async fn list_goes_on_after_the_job_a_page_ended_on_has_left(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(4)).await.unwrap(); // 1 2 3 4
    ctx.store.genqueue(&ctx.q, &group("a"), &jobs(3)).await.unwrap(); // 5 6 7
    ctx.store.genqueue(&ctx.q, &group("b"), &jobs(1)).await.unwrap(); // 8
    let page = |cursor: Option<String>, limit| async move {
        let p = ctx
            .store
            .list(&ctx.q, JobState::Pending, cursor.as_deref(), limit)
            .await
            .unwrap();
        (p.ids.iter().map(ToString::to_string).collect::<Vec<_>>(), p.next)
    };
    let (first, next) = page(None, 2).await;
    assert_eq!(first, ["1", "2"]);
    // the job the page ended on is removed, one after it cancelled: the next page starts after
    // where it was, and a job that left is not listed
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("2"), false).await.unwrap(),
        Removed::Removed
    );
    let done = ctx.store.cancel(&ctx.q, &id("3"), None, PLAIN).await;
    assert_eq!(done.unwrap(), CancelOutcome::Cancelled);
    let (second, next) = page(next, 2).await;
    assert_eq!(second, ["4", "5"]);
    // the lane job the page ended on (a's first) leaves its lane
    assert_eq!(
        ctx.store.remove(&ctx.q, &id("5"), false).await.unwrap(),
        Removed::Removed
    );
    let (third, next) = page(next, 5).await;
    assert_eq!(third, ["6", "7", "8"]);
    assert_eq!(next, None);
    // the same on a set listed newest first: the dead job a page ended on redriven
    let held = claim(ctx, 3).await;
    discard_all(ctx, &held).await;
    let dead = list(ctx, JobState::Dead).await;
    let first = ctx.store.list(&ctx.q, JobState::Dead, None, 1).await.unwrap();
    assert_eq!(first.ids, dead[..1]);
    ctx.store.redrive(&ctx.q, &dead[0], 1).await.unwrap();
    let rest = ctx
        .store
        .list(&ctx.q, JobState::Dead, first.next.as_deref(), 10)
        .await
        .unwrap();
    assert_eq!(rest.ids, dead[1..]);
}

// ---------------------------------------------------------------------------------------------
// queues

pub async fn queues_lists_a_queue_from_its_first_enqueue_until_obliterate(ctx: &Ctx) {
    let other = crate::harness::queue_name("queues-other");
    assert!(!ctx.store.queues().await.unwrap().contains(&ctx.q));
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    ctx.store.genqueue(&other, &group("g"), &jobs(1)).await.unwrap();
    let listed = ctx.store.queues().await.unwrap();
    assert!(listed.contains(&ctx.q) && listed.contains(&other), "{listed:?}");
    assert_eq!(listed.iter().filter(|q| **q == ctx.q).count(), 1, "listed once");
    let mut sorted = listed.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "in name order");

    ctx.store.obliterate(&ctx.q, false).await.unwrap();
    let listed = ctx.store.queues().await.unwrap();
    assert!(!listed.contains(&ctx.q));
    assert!(listed.contains(&other));
    ctx.store.obliterate(&other, false).await.unwrap();
    assert!(!ctx.store.queues().await.unwrap().contains(&other));
}

/// A refused enqueue registers nothing: the queue it names is not listed until one lands. On Redis
/// the name's `SADD` is a command of its own (no script can reach the set of names on a Cluster):
/// sent beside the script, it would land though the script was refused.
pub async fn an_enqueue_refused_while_obliterating_leaves_the_queue_unlisted(ctx: &Ctx) {
    ctx.probe.set_obliterating_mark().await;
    let err = ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap_err();
    assert!(matches!(&err, Error::Obliterating { .. }), "{err:?}");
    let err = ctx.store.genqueue(&ctx.q, &group("g"), &jobs(2)).await.unwrap_err();
    assert!(matches!(&err, Error::Obliterating { .. }), "{err:?}");
    // more jobs than one script call takes: every call is refused, and none registers
    let many: Vec<NewJob> = (0..2500).map(|i| NewJob::new(format!("{i}"))).collect();
    let err = ctx.store.enqueue(&ctx.q, &many).await.unwrap_err();
    assert!(matches!(&err, Error::Obliterating { .. }), "{err:?}");
    assert!(
        !ctx.store.queues().await.unwrap().contains(&ctx.q),
        "a refused enqueue registered the queue"
    );
    assert_eq!(job_keys(ctx).await, ["obliterating"], "nothing written but the mark");

    ctx.probe.clear_obliterating_mark().await;
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    assert!(
        ctx.store.queues().await.unwrap().contains(&ctx.q),
        "an enqueue that lands registers"
    );
}

/// An enqueue that fails inside the store (its arguments reach it, then a write of it fails)
/// registers nothing either: the embedded store's registration rolls back with the transaction,
/// the Redis script replies an error and its client sends no `SADD`. The queue's first enqueue
/// that lands registers it.
pub async fn an_enqueue_failing_in_the_store_leaves_the_queue_unlisted(ctx: &Ctx) {
    ctx.probe.refuse_new_jobs().await;
    let err = ctx.store.enqueue(&ctx.q, &jobs(3)).await.unwrap_err();
    assert!(matches!(&err, Error::Store { .. }), "{err:?}");
    let err = ctx.store.genqueue(&ctx.q, &group("g"), &jobs(2)).await.unwrap_err();
    assert!(matches!(&err, Error::Store { .. }), "{err:?}");
    assert!(
        !ctx.store.queues().await.unwrap().contains(&ctx.q),
        "a failed enqueue registered the queue"
    );
    ctx.probe.allow_new_jobs().await;
    assert!(
        job_keys(ctx).await.is_empty(),
        "nothing written: {:?}",
        job_keys(ctx).await
    );

    ctx.store.genqueue(&ctx.q, &group("g"), &jobs(1)).await.unwrap();
    assert!(ctx.store.queues().await.unwrap().contains(&ctx.q));
    // registered once, and listed while the queue lives (the later enqueues need not register)
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    let listed = ctx.store.queues().await.unwrap();
    assert_eq!(listed.iter().filter(|q| **q == ctx.q).count(), 1, "{listed:?}");
}

/// Each life of a queue registers it: after an obliterate unlisted it, the next enqueue lists it
/// again, and the one after that keeps it listed.
pub async fn each_life_of_a_queue_registers_it_again_after_an_obliterate(ctx: &Ctx) {
    for life in 0..3 {
        ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
        ctx.store.genqueue(&ctx.q, &group("g"), &jobs(1)).await.unwrap();
        assert!(ctx.store.queues().await.unwrap().contains(&ctx.q), "life {life}");
        ctx.store.obliterate(&ctx.q, false).await.unwrap();
        assert!(!ctx.store.queues().await.unwrap().contains(&ctx.q), "life {life}");
        assert!(job_keys(ctx).await.is_empty(), "life {life}: {:?}", job_keys(ctx).await);
    }
}

crate::conformance!(
    obliterate_raced_by_enqueues_lists_the_queue_exactly_when_it_holds_jobs,
    drain_drops_pending_lane_and_scheduled_jobs_but_not_active_or_dead,
    drain_is_chunked_over_more_than_1000_jobs,
    drain_then_claim_hands_out_nothing_and_clears_stale_ring_members,
    obliterate_refuses_active_jobs_without_force,
    obliterate_with_force_deletes_every_key_of_the_queue,
    obliterate_is_chunked_over_more_than_1000_jobs,
    enqueue_is_refused_while_the_queue_is_being_obliterated,
    get_returns_a_waiting_row_with_its_options,
    get_returns_a_scheduled_row_with_its_due_time,
    get_returns_an_active_row_with_its_lease_deadline,
    get_returns_a_retried_row_with_its_last_error,
    get_returns_a_dead_row_with_its_time_of_death,
    get_returns_a_retained_row_with_its_output,
    get_shows_the_stall_count,
    get_of_an_unknown_id_is_none,
    remove_deletes_a_pending_job,
    remove_deletes_a_lane_job_and_keeps_the_slot_invariant,
    remove_deletes_a_scheduled_job,
    remove_deletes_a_dead_job,
    remove_deletes_a_retained_row,
    remove_of_an_active_job_without_force_is_refused,
    remove_of_an_active_job_with_force_frees_its_slot,
    remove_of_an_unknown_id_is_gone,
    redrive_moves_a_dead_job_back_to_pending_with_a_raised_budget,
    redrive_returns_a_dead_lane_job_to_its_lane,
    redrive_runs_a_job_whose_earlier_run_was_asked_to_cancel,
    redrive_of_a_job_that_is_not_dead_is_refused,
    redrive_of_an_unknown_id_is_gone,
    redrive_all_moves_more_than_1000_dead_jobs,
    promote_job_makes_a_scheduled_job_ready_now,
    promote_job_sends_a_lane_job_to_its_lane,
    promote_job_of_a_job_that_is_not_scheduled_is_refused,
    promote_job_of_an_unknown_id_is_gone,
    cancel_of_a_pending_job_cancels_it,
    cancel_of_a_scheduled_job_cancels_it,
    cancel_of_a_lane_job_takes_it_out_of_its_lane,
    cancel_of_an_active_job_requests_it_from_its_consumer,
    cancel_of_a_finished_job_is_finished,
    cancel_of_an_unknown_id_is_gone,
    set_group_limit_lets_a_group_run_that_many_jobs_at_once,
    set_group_limit_default_applies_to_groups_without_their_own,
    set_group_limit_raised_makes_more_jobs_claimable_and_wakes,
    set_group_limit_raised_for_a_group_on_the_ring_wakes_for_its_new_slots,
    counts_report_every_state_and_counter,
    counts_sum_lanes_over_many_groups,
    list_pending_gives_flat_jobs_in_claim_order_then_lanes,
    list_pending_includes_lanes_of_groups_at_their_limit,
    list_scheduled_orders_by_due_time,
    list_active_orders_by_lease_deadline,
    list_dead_gives_newest_first,
    list_completed_and_cancelled_give_retained_rows_newest_first,
    list_goes_on_after_the_job_a_page_ended_on_has_left,
    queues_lists_a_queue_from_its_first_enqueue_until_obliterate,
    an_enqueue_refused_while_obliterating_leaves_the_queue_unlisted,
    an_enqueue_failing_in_the_store_leaves_the_queue_unlisted,
    each_life_of_a_queue_registers_it_again_after_an_obliterate,
);
