//! The holder verbs — complete, complete_many, complete_cancelled, retry, discard, update_data,
//! extend_lock and release — and their fence (the attempts token): each with the holder's token, a stale token, the token
//! of a reaped lease, the token of a re-driven job and an unknown id, on a flat and on a lane job.
//! Then what each settle does besides the move: retry's budget and delays, complete_many's batches,
//! completion records, retention, and the slot invariant on every exit of a lane job from `active`.

use echomq::store::RetryRequest;
use std::collections::HashMap;
use std::time::Duration;

use echomq::store::{Completion, Counts, Discarded, Extended, Redriven, Retried, SettleOptions, Settled};
use echomq::{ClaimedJob, GroupName, JobId, JobRow, JobState, NewJob};

use crate::harness::{assert_slot_invariant, wait_until, Ctx, Record};

/// A lease no case outlives.
pub const LEASE: Duration = Duration::from_secs(30);
/// A lease a case waits out: short enough that cases stay fast, long enough to outlive a claim.
pub const SHORT: Duration = Duration::from_millis(25);
/// The default attempt budget handed to claim and retry where the budget is not under test.
pub const BUDGET: u32 = 10;
/// Retry's delay where the delay is not under test: the job stays scheduled for the whole case.
const LATER: Duration = Duration::from_secs(60);

pub fn plain() -> SettleOptions {
    SettleOptions::default()
}

fn recording() -> SettleOptions {
    SettleOptions::default().record(true)
}

pub fn group(name: &str) -> GroupName {
    GroupName::new(name).unwrap()
}

/// Enqueues one job (flat, or in `group`'s lane) and returns its id.
pub async fn add(ctx: &Ctx, group: Option<&GroupName>, payload: &str) -> JobId {
    let job = [NewJob::new(payload)];
    let replies = match group {
        None => ctx.store.enqueue(&ctx.q, &job).await.unwrap(),
        Some(g) => ctx.store.genqueue(&ctx.q, g, &job).await.unwrap(),
    };
    replies[0].id().clone()
}

/// Enqueues `n` jobs in `group`'s lane, in order.
pub async fn add_lane(ctx: &Ctx, group: &GroupName, n: usize) -> Vec<JobId> {
    let jobs: Vec<NewJob> = (0..n).map(|i| NewJob::new(format!("{group}-{i}"))).collect();
    let replies = ctx.store.genqueue(&ctx.q, group, &jobs).await.unwrap();
    replies.iter().map(|r| r.id().clone()).collect()
}

pub async fn claim(ctx: &Ctx, n: u32, lease: Duration) -> Vec<ClaimedJob> {
    ctx.store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(n, lease)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap()
        .jobs
}

/// Claims one job and checks it is `id`.
pub async fn claim_id(ctx: &Ctx, id: &JobId, lease: Duration) -> ClaimedJob {
    let mut got = claim(ctx, 1, lease).await;
    assert_eq!(got.len(), 1, "claim gave nothing, expected job {id}");
    let c = got.remove(0);
    assert_eq!(&c.id, id, "claim gave the wrong job");
    c
}

pub fn ids(claimed: &[ClaimedJob]) -> Vec<JobId> {
    claimed.iter().map(|c| c.id.clone()).collect()
}

pub async fn get(ctx: &Ctx, id: &JobId) -> JobRow {
    ctx.store
        .get(&ctx.q, id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("job {id} has no row"))
}

pub async fn counts(ctx: &Ctx) -> Counts {
    ctx.store.counts(&ctx.q).await.unwrap()
}

/// The store's clock, ms.
pub async fn server_ms(ctx: &Ctx) -> u64 {
    ctx.probe.now_ms().await
}

/// The score of `id` in the sorted set `set` (`active`, `dead`, …), read under the contract.
pub async fn zscore(ctx: &Ctx, set: &str, id: &JobId) -> Option<u64> {
    ctx.probe.score(set, id).await
}

/// Waits until the store's clock is past `id`'s lease deadline.
pub async fn lapse(ctx: &Ctx, id: &JobId) {
    let deadline = zscore(ctx, "active", id)
        .await
        .unwrap_or_else(|| panic!("job {id} is not in active"));
    wait_until(Duration::from_secs(2), "the lease to lapse", move || async move {
        server_ms(ctx).await > deadline
    })
    .await;
}

/// A verb that only the current lease holder may call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Holder {
    Complete,
    CompleteMany,
    CompleteCancelled,
    Retry,
    Discard,
    UpdateData,
    ExtendLock,
    Release,
}

/// Every holder verb's reply, on one scale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reply {
    Ok,
    Retrying,
    Dead,
    Stale,
    Gone,
}

fn settled(s: Settled) -> Reply {
    match s {
        Settled::Ok => Reply::Ok,
        Settled::Stale => Reply::Stale,
        Settled::Gone => Reply::Gone,
        other => panic!("a reply this suite does not know: {other:?}"),
    }
}

impl Holder {
    /// The reply of the verb for the holder.
    fn held(self) -> Reply {
        match self {
            Holder::Retry => Reply::Retrying,
            Holder::Discard => Reply::Dead,
            _ => Reply::Ok,
        }
    }

    /// Whether the holder keeps the job (and its slot) after the verb.
    fn keeps_the_job(self) -> bool {
        matches!(self, Holder::UpdateData | Holder::ExtendLock)
    }

    pub async fn call(self, ctx: &Ctx, id: &JobId, token: u64) -> Reply {
        let (store, q) = (&ctx.store, &ctx.q);
        match self {
            Holder::Complete => settled(
                store
                    .complete(
                        q,
                        &echomq::store::Completion::new(id.clone(), token).output(Some(b"out")),
                        plain(),
                    )
                    .await
                    .unwrap(),
            ),
            Holder::CompleteMany => {
                let batch = [Completion::new(id.clone(), token)];
                let replies = store.complete_many(q, &batch, plain()).await.unwrap();
                assert_eq!(replies.len(), 1, "one reply per entry");
                settled(replies[0])
            }
            Holder::CompleteCancelled => settled(
                store
                    .complete_cancelled(
                        q,
                        id,
                        token,
                        &echomq::store::CancelledRequest::new()
                            .reason(Some("stop"))
                            .settle(plain()),
                    )
                    .await
                    .unwrap(),
            ),
            Holder::Retry => match store
                .retry(
                    q,
                    id,
                    token,
                    &RetryRequest::new("boom")
                        .after(LATER)
                        .max_attempts(BUDGET)
                        .settle(plain()),
                )
                .await
                .unwrap()
            {
                Retried::Retrying => Reply::Retrying,
                Retried::Dead => Reply::Dead,
                Retried::Stale => Reply::Stale,
                Retried::Gone => Reply::Gone,
                other => panic!("a reply this suite does not know: {other:?}"),
            },
            Holder::Discard => match store
                .discard(
                    q,
                    id,
                    token,
                    &echomq::store::DiscardRequest::new("gave up").settle(plain()),
                )
                .await
                .unwrap()
            {
                Discarded::Dead => Reply::Dead,
                Discarded::Stale => Reply::Stale,
                Discarded::Gone => Reply::Gone,
                other => panic!("a reply this suite does not know: {other:?}"),
            },
            Holder::UpdateData => settled(store.update_data(q, id, token, b"checkpoint").await.unwrap()),
            Holder::ExtendLock => match store.extend_lock(q, id, token, LATER).await.unwrap() {
                Extended::Ok => Reply::Ok,
                Extended::Stale => Reply::Stale,
                Extended::Gone => Reply::Gone,
                other => panic!("a reply this suite does not know: {other:?}"),
            },
            Holder::Release => settled(store.release(q, id, token, Duration::ZERO).await.unwrap()),
        }
    }
}

/// What a refused verb must leave exactly as it was: the row (with its score), the active set, the
/// counters (the oldest pending job's age, which grows by itself, as whether there is one), the
/// slots, the ring and the wake list.
#[derive(Debug, PartialEq)]
struct World {
    row: Option<JobRow>,
    active: Vec<JobId>,
    counts: Counts,
    slots: HashMap<String, u64>,
    ring: Vec<String>,
    wakes: u64,
}

async fn world(ctx: &Ctx, id: &JobId) -> World {
    let mut counts = counts(ctx).await;
    counts.oldest_pending_age = counts.oldest_pending_age.map(|_| Duration::ZERO);
    World {
        row: ctx.store.get(&ctx.q, id).await.unwrap(),
        active: ctx
            .store
            .list(&ctx.q, JobState::Active, None, 10_000)
            .await
            .unwrap()
            .ids,
        counts,
        slots: ctx.probe.slots().await,
        ring: ctx.probe.ring().await,
        wakes: ctx.probe.wakes().await,
    }
}

/// `verb` answers `want` and writes nothing.
pub async fn refused(ctx: &Ctx, verb: Holder, id: &JobId, token: u64, want: Reply) {
    let before = world(ctx, id).await;
    assert_eq!(
        verb.call(ctx, id, token).await,
        want,
        "{verb:?} of {id} with token {token}"
    );
    let after = world(ctx, id).await;
    assert_eq!(before, after, "{verb:?} refused with {want:?} must write nothing");
}

/// `verb` answers the holder's reply, and the job is where that reply says.
async fn held(ctx: &Ctx, verb: Holder, id: &JobId, token: u64) {
    let before = counts(ctx).await;
    let was = get(ctx, id).await;
    assert_eq!(
        verb.call(ctx, id, token).await,
        verb.held(),
        "{verb:?} of {id} by its holder"
    );
    let after = counts(ctx).await;
    let row = ctx.store.get(&ctx.q, id).await.unwrap();
    match verb {
        Holder::Complete | Holder::CompleteMany => {
            assert_eq!(row, None, "a completed row is deleted when nothing is retained");
            assert_eq!(after.completed, before.completed + 1);
        }
        Holder::CompleteCancelled => {
            assert_eq!(row, None, "a cancelled row is deleted when nothing is retained");
            assert_eq!(after.cancelled, before.cancelled + 1);
        }
        Holder::Retry => {
            let row = row.unwrap();
            assert_eq!(row.state, JobState::Scheduled);
            assert_eq!(row.last_error.as_deref(), Some("boom"));
            assert_eq!(row.attempts, token, "retry keeps attempts");
            assert_eq!(after.retried, before.retried + 1);
        }
        Holder::Discard => {
            let row = row.unwrap();
            assert_eq!(row.state, JobState::Dead);
            assert_eq!(row.last_error.as_deref(), Some("gave up"));
            assert_eq!(row.attempts, token, "discard keeps attempts");
            assert_eq!(after.failed, before.failed + 1);
        }
        Holder::UpdateData => {
            let row = row.unwrap();
            assert_eq!(row.state, JobState::Active);
            assert_eq!(row.payload, b"checkpoint");
        }
        Holder::ExtendLock => {
            let row = row.unwrap();
            assert_eq!(row.state, JobState::Active);
            let now = server_ms(ctx).await;
            let deadline = row.score.unwrap();
            assert!(
                deadline > now + LATER.as_millis() as u64 - 5_000,
                "the lease now ends about {LATER:?} from now"
            );
        }
        Holder::Release => {
            let row = row.unwrap();
            assert_eq!(row.state, JobState::Pending, "released with no delay: ready at once");
            assert_eq!(row.attempts, was.attempts - 1, "the released claim used no attempt");
            assert_eq!(row.free, was.free + 1);
            assert_eq!(
                (after.completed, after.retried, after.failed),
                (before.completed, before.retried, before.failed),
                "a release settles nothing"
            );
            // out of the way of the scenario's next claim, which expects its own job
            let removed = ctx.store.remove(&ctx.q, id, false).await.unwrap();
            assert_eq!(removed, echomq::store::Removed::Removed, "a released job is not active");
        }
    }
    if verb.keeps_the_job() {
        assert_eq!(after.active, before.active);
    } else {
        assert_eq!(after.active, before.active - 1, "the job left active");
        assert_eq!(zscore(ctx, "active", id).await, None);
    }
}

/// The fence scenarios below run once on a flat job, then once on a lane job.
fn flat_then_lane() -> [Option<GroupName>; 2] {
    [None, Some(group("lane-g"))]
}

async fn with_the_holders_token(ctx: &Ctx, verb: Holder) {
    for g in flat_then_lane() {
        let g = g.as_ref();
        let id = add(ctx, g, "p").await;
        let c = claim_id(ctx, &id, LEASE).await;
        assert_eq!(c.attempts, 1);
        held(ctx, verb, &id, c.token).await;
        assert_slot_invariant(ctx).await;
        if g.is_some() && !verb.keeps_the_job() {
            assert_eq!(ctx.probe.slots().await, HashMap::new(), "the lane job's slot is free");
        }
    }
}

async fn with_a_stale_token(ctx: &Ctx, verb: Holder) {
    for g in flat_then_lane() {
        let g = g.as_ref();
        let id = add(ctx, g, "p").await;
        let first = claim_id(ctx, &id, LEASE).await;
        let r = ctx
            .store
            .retry(
                &ctx.q,
                &id,
                first.token,
                &RetryRequest::new("again")
                    .after(Duration::ZERO)
                    .max_attempts(BUDGET)
                    .settle(plain()),
            )
            .await
            .unwrap();
        assert_eq!(r, Retried::Retrying);
        let second = claim_id(ctx, &id, LEASE).await;
        assert_eq!(second.attempts, first.attempts + 1, "each claim is a new token");
        refused(ctx, verb, &id, first.token, Reply::Stale).await;
        refused(ctx, verb, &id, second.token + 1, Reply::Stale).await;
        refused(ctx, verb, &id, 0, Reply::Stale).await;
        assert_slot_invariant(ctx).await;
        held(ctx, verb, &id, second.token).await;
        assert_slot_invariant(ctx).await;
    }
}

async fn after_a_reap(ctx: &Ctx, verb: Holder) {
    for g in flat_then_lane() {
        let g = g.as_ref();
        let id = add(ctx, g, "p").await;
        let old = claim_id(ctx, &id, SHORT).await;
        lapse(ctx, &id).await;
        assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1);
        let row = get(ctx, &id).await;
        assert_eq!(row.state, JobState::Pending, "the reaped job is ready again");
        assert_eq!(row.attempts, old.attempts, "reap keeps attempts");
        assert_slot_invariant(ctx).await;
        refused(ctx, verb, &id, old.token, Reply::Stale).await;
        let new = claim_id(ctx, &id, LEASE).await;
        assert_eq!(new.attempts, old.attempts + 1);
        refused(ctx, verb, &id, old.token, Reply::Stale).await;
        assert_slot_invariant(ctx).await;
        held(ctx, verb, &id, new.token).await;
        assert_slot_invariant(ctx).await;
    }
}

async fn after_a_redrive(ctx: &Ctx, verb: Holder) {
    for g in flat_then_lane() {
        let g = g.as_ref();
        let id = add(ctx, g, "p").await;
        let old = claim_id(ctx, &id, LEASE).await;
        let d = ctx
            .store
            .discard(
                &ctx.q,
                &id,
                old.token,
                &echomq::store::DiscardRequest::new("poison").settle(plain()),
            )
            .await
            .unwrap();
        assert_eq!(d, Discarded::Dead);
        refused(ctx, verb, &id, old.token, Reply::Stale).await;
        assert_eq!(ctx.store.redrive(&ctx.q, &id, 3).await.unwrap(), Redriven::Redriven);
        let row = get(ctx, &id).await;
        assert_eq!(row.state, JobState::Pending);
        assert_eq!(row.attempts, old.attempts, "redrive keeps attempts");
        refused(ctx, verb, &id, old.token, Reply::Stale).await;
        let new = claim_id(ctx, &id, LEASE).await;
        assert_eq!(new.attempts, old.attempts + 1, "the old token never comes back");
        refused(ctx, verb, &id, old.token, Reply::Stale).await;
        assert_slot_invariant(ctx).await;
        held(ctx, verb, &id, new.token).await;
        assert_slot_invariant(ctx).await;
    }
}

async fn of_an_unknown_id(ctx: &Ctx, verb: Holder) {
    refused(ctx, verb, &JobId::new("never-enqueued").unwrap(), 1, Reply::Gone).await;
    refused(ctx, verb, &JobId::parse("424242").unwrap(), 0, Reply::Gone).await;
    // a job settled and deleted: a replayed verb finds no row
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    assert_eq!(
        ctx.store
            .complete(&ctx.q, &echomq::store::Completion::new(id.clone(), c.token), plain())
            .await
            .unwrap(),
        Settled::Ok
    );
    refused(ctx, verb, &id, c.token, Reply::Gone).await;
}

/// Every holder verb, for the cases that run over all of them.
const HOLDERS: [Holder; 8] = [
    Holder::Complete,
    Holder::CompleteMany,
    Holder::CompleteCancelled,
    Holder::Retry,
    Holder::Discard,
    Holder::UpdateData,
    Holder::ExtendLock,
    Holder::Release,
];

/// A job never claimed has no token (its row has no `attempts`): every holder verb is refused
/// stale (the row exists), whatever the token, and writes nothing.
pub async fn every_holder_verb_of_a_job_never_claimed_is_stale(ctx: &Ctx) {
    let waiting = add(ctx, None, "p").await;
    let lane = add(ctx, Some(&group("g")), "p").await;
    let later = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("p").with_delay(Duration::from_secs(60))])
        .await
        .unwrap()[0]
        .id()
        .clone();
    for verb in HOLDERS {
        for id in [&waiting, &lane, &later] {
            for token in [0, 1] {
                refused(ctx, verb, id, token, Reply::Stale).await;
            }
        }
    }
    assert_slot_invariant(ctx).await;
}

/// The settles (complete, complete_many, complete_cancelled) read a holder's membership of `active`
/// from its row's state, which every verb moving a job into or out of `active` writes in the same
/// step: a holder whose row's state was rewritten under it is stale and nothing is written; one
/// whose row still says active settles, on both stores alike.
pub async fn a_settle_reads_a_holders_membership_of_active_from_its_rows_state(ctx: &Ctx) {
    for verb in [Holder::Complete, Holder::CompleteMany, Holder::CompleteCancelled] {
        for g in flat_then_lane() {
            let id = add(ctx, g.as_ref(), "p").await;
            let c = claim_id(ctx, &id, LEASE).await;
            ctx.probe.set_row_field(&id, "state", "pending").await;
            refused(ctx, verb, &id, c.token, Reply::Stale).await;
            ctx.probe.set_row_field(&id, "state", "active").await;
            held(ctx, verb, &id, c.token).await;
            assert_slot_invariant(ctx).await;
        }
    }
}

// --- release --------------------------------------------------------------------------------------

pub async fn release_with_the_holders_token_gives_the_job_back(ctx: &Ctx) {
    with_the_holders_token(ctx, Holder::Release).await;
}

pub async fn release_with_a_stale_token_is_stale_and_writes_nothing(ctx: &Ctx) {
    with_a_stale_token(ctx, Holder::Release).await;
}

pub async fn release_after_a_reap_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_reap(ctx, Holder::Release).await;
}

pub async fn release_after_a_redrive_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_redrive(ctx, Holder::Release).await;
}

pub async fn release_of_an_unknown_id_is_gone(ctx: &Ctx) {
    of_an_unknown_id(ctx, Holder::Release).await;
}

// --- complete -------------------------------------------------------------------------------------

pub async fn complete_with_the_holders_token_completes(ctx: &Ctx) {
    with_the_holders_token(ctx, Holder::Complete).await;
}

pub async fn complete_with_a_stale_token_is_stale_and_writes_nothing(ctx: &Ctx) {
    with_a_stale_token(ctx, Holder::Complete).await;
}

pub async fn complete_after_a_reap_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_reap(ctx, Holder::Complete).await;
}

pub async fn complete_after_a_redrive_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_redrive(ctx, Holder::Complete).await;
}

pub async fn complete_of_an_unknown_id_is_gone(ctx: &Ctx) {
    of_an_unknown_id(ctx, Holder::Complete).await;
}

// --- complete_many --------------------------------------------------------------------------------

pub async fn complete_many_with_the_holders_token_completes(ctx: &Ctx) {
    with_the_holders_token(ctx, Holder::CompleteMany).await;
}

pub async fn complete_many_with_a_stale_token_is_stale_and_writes_nothing(ctx: &Ctx) {
    with_a_stale_token(ctx, Holder::CompleteMany).await;
}

pub async fn complete_many_after_a_reap_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_reap(ctx, Holder::CompleteMany).await;
}

pub async fn complete_many_after_a_redrive_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_redrive(ctx, Holder::CompleteMany).await;
}

pub async fn complete_many_of_an_unknown_id_is_gone(ctx: &Ctx) {
    of_an_unknown_id(ctx, Holder::CompleteMany).await;
}

// --- complete_cancelled ---------------------------------------------------------------------------

pub async fn complete_cancelled_with_the_holders_token_cancels(ctx: &Ctx) {
    with_the_holders_token(ctx, Holder::CompleteCancelled).await;
}

pub async fn complete_cancelled_with_a_stale_token_is_stale_and_writes_nothing(ctx: &Ctx) {
    with_a_stale_token(ctx, Holder::CompleteCancelled).await;
}

pub async fn complete_cancelled_after_a_reap_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_reap(ctx, Holder::CompleteCancelled).await;
}

pub async fn complete_cancelled_after_a_redrive_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_redrive(ctx, Holder::CompleteCancelled).await;
}

pub async fn complete_cancelled_of_an_unknown_id_is_gone(ctx: &Ctx) {
    of_an_unknown_id(ctx, Holder::CompleteCancelled).await;
}

// --- retry ----------------------------------------------------------------------------------------

pub async fn retry_with_the_holders_token_schedules_another_attempt(ctx: &Ctx) {
    with_the_holders_token(ctx, Holder::Retry).await;
}

pub async fn retry_with_a_stale_token_is_stale_and_writes_nothing(ctx: &Ctx) {
    with_a_stale_token(ctx, Holder::Retry).await;
}

pub async fn retry_after_a_reap_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_reap(ctx, Holder::Retry).await;
}

pub async fn retry_after_a_redrive_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_redrive(ctx, Holder::Retry).await;
}

pub async fn retry_of_an_unknown_id_is_gone(ctx: &Ctx) {
    of_an_unknown_id(ctx, Holder::Retry).await;
}

// --- discard --------------------------------------------------------------------------------------

pub async fn discard_with_the_holders_token_moves_the_job_to_dead(ctx: &Ctx) {
    with_the_holders_token(ctx, Holder::Discard).await;
}

pub async fn discard_with_a_stale_token_is_stale_and_writes_nothing(ctx: &Ctx) {
    with_a_stale_token(ctx, Holder::Discard).await;
}

pub async fn discard_after_a_reap_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_reap(ctx, Holder::Discard).await;
}

pub async fn discard_after_a_redrive_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_redrive(ctx, Holder::Discard).await;
}

pub async fn discard_of_an_unknown_id_is_gone(ctx: &Ctx) {
    of_an_unknown_id(ctx, Holder::Discard).await;
}

// --- update_data ----------------------------------------------------------------------------------

pub async fn update_data_with_the_holders_token_replaces_the_payload(ctx: &Ctx) {
    with_the_holders_token(ctx, Holder::UpdateData).await;
}

pub async fn update_data_with_a_stale_token_is_stale_and_writes_nothing(ctx: &Ctx) {
    with_a_stale_token(ctx, Holder::UpdateData).await;
}

pub async fn update_data_after_a_reap_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_reap(ctx, Holder::UpdateData).await;
}

pub async fn update_data_after_a_redrive_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_redrive(ctx, Holder::UpdateData).await;
}

pub async fn update_data_of_an_unknown_id_is_gone(ctx: &Ctx) {
    of_an_unknown_id(ctx, Holder::UpdateData).await;
}

// --- extend_lock ----------------------------------------------------------------------------------

pub async fn extend_lock_with_the_holders_token_extends(ctx: &Ctx) {
    with_the_holders_token(ctx, Holder::ExtendLock).await;
}

pub async fn extend_lock_with_a_stale_token_is_stale_and_writes_nothing(ctx: &Ctx) {
    with_a_stale_token(ctx, Holder::ExtendLock).await;
}

pub async fn extend_lock_after_a_reap_is_stale_and_not_back_in_active(ctx: &Ctx) {
    after_a_reap(ctx, Holder::ExtendLock).await;
}

pub async fn extend_lock_after_a_redrive_is_stale_for_the_old_token(ctx: &Ctx) {
    after_a_redrive(ctx, Holder::ExtendLock).await;
}

pub async fn extend_lock_of_an_unknown_id_is_gone(ctx: &Ctx) {
    of_an_unknown_id(ctx, Holder::ExtendLock).await;
}

// --- attempts and the budget ----------------------------------------------------------------------

pub async fn retry_reap_and_redrive_never_lower_attempts(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    assert_eq!(get(ctx, &id).await.attempts, 0, "no claim yet");
    let c = claim_id(ctx, &id, LEASE).await;
    assert_eq!((c.attempts, get(ctx, &id).await.attempts), (1, 1), "claim: +1");
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            1,
            &RetryRequest::new("e")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Retrying);
    assert_eq!(get(ctx, &id).await.attempts, 1, "retry keeps attempts");
    let c = claim_id(ctx, &id, SHORT).await;
    assert_eq!((c.attempts, get(ctx, &id).await.attempts), (2, 2));
    lapse(ctx, &id).await;
    assert_eq!(ctx.store.reap(&ctx.q, 10, None).await.unwrap(), 1);
    assert_eq!(get(ctx, &id).await.attempts, 2, "reap keeps attempts");
    let c = claim_id(ctx, &id, SHORT).await;
    assert_eq!(c.attempts, 3);
    lapse(ctx, &id).await;
    let swept = ctx
        .store
        .sweep_stalled(&ctx.q, echomq::store::StalledPolicy::default().max_stalled(5).limit(10))
        .await
        .unwrap();
    assert_eq!(swept.recovered, std::slice::from_ref(&id));
    assert_eq!(get(ctx, &id).await.attempts, 3, "the stalled sweep keeps attempts");
    let c = claim_id(ctx, &id, LEASE).await;
    assert_eq!(c.attempts, 4);
    let d = ctx
        .store
        .discard(&ctx.q, &id, 4, &echomq::store::DiscardRequest::new("x").settle(plain()))
        .await
        .unwrap();
    assert_eq!(d, Discarded::Dead);
    assert_eq!(get(ctx, &id).await.attempts, 4, "discard keeps attempts");
    assert_eq!(ctx.store.redrive(&ctx.q, &id, 2).await.unwrap(), Redriven::Redriven);
    assert_eq!(get(ctx, &id).await.attempts, 4, "redrive keeps attempts");
    let c = claim_id(ctx, &id, LEASE).await;
    assert_eq!((c.attempts, get(ctx, &id).await.attempts), (5, 5));
}

pub async fn retry_after_a_redrive_has_the_raised_budget(ctx: &Ctx) {
    let id = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("p").with_max_attempts(1)])
        .await
        .unwrap()[0]
        .id()
        .clone();
    let c = claim_id(ctx, &id, LEASE).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            c.token,
            &RetryRequest::new("e1")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Dead, "the job's own budget of 1 wins over the default");
    assert_eq!(ctx.store.redrive(&ctx.q, &id, 2).await.unwrap(), Redriven::Redriven);
    let row = get(ctx, &id).await;
    assert_eq!(row.max_attempts, Some(3), "max_attempts = attempts (1) + extra (2)");
    assert_eq!(row.attempts, 1);
    // the row's raised budget wins over the default given to retry (1)
    let c = claim_id(ctx, &id, LEASE).await;
    assert_eq!(c.attempts, 2);
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            2,
            &RetryRequest::new("e2")
                .after(Duration::ZERO)
                .max_attempts(1)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Retrying, "2 attempts of 3");
    let c = claim_id(ctx, &id, LEASE).await;
    assert_eq!(c.attempts, 3);
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            3,
            &RetryRequest::new("e3")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Dead, "3 attempts of 3");
    let row = get(ctx, &id).await;
    assert_eq!((row.state, row.attempts), (JobState::Dead, 3));
    assert_eq!(row.last_error.as_deref(), Some("e3"));
}

// --- retry ----------------------------------------------------------------------------------------

pub async fn retry_at_max_attempts_moves_the_job_to_dead(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let before = counts(ctx).await;
    let t0 = server_ms(ctx).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            c.token,
            &RetryRequest::new("it broke")
                .after(Duration::ZERO)
                .max_attempts(1)
                .settle(plain()),
        )
        .await
        .unwrap();
    let t1 = server_ms(ctx).await;
    assert_eq!(r, Retried::Dead);
    let row = get(ctx, &id).await;
    assert_eq!(row.state, JobState::Dead);
    assert_eq!(row.last_error.as_deref(), Some("it broke"), "the last error is kept");
    assert_eq!(row.attempts, 1);
    assert_eq!(row.payload, b"p");
    let died = zscore(ctx, "dead", &id).await.unwrap();
    assert!((t0..=t1).contains(&died), "the morgue is scored with the time of death");
    let after = counts(ctx).await;
    assert_eq!(after.failed, before.failed + 1, "metrics:failed +1");
    assert_eq!(after.retried, before.retried, "a dead-letter is not a retry");
    assert_eq!((after.dead, after.active, after.pending), (1, 0, 0));
    let dead = ctx.store.list(&ctx.q, JobState::Dead, None, 10).await.unwrap().ids;
    assert_eq!(dead, std::slice::from_ref(&id));
    assert!(claim(ctx, 10, LEASE).await.is_empty(), "a dead job is not claimable");
}

pub async fn retry_below_the_jobs_own_budget_retries_then_dead_letters_at_it(ctx: &Ctx) {
    let id = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("p").with_max_attempts(2)])
        .await
        .unwrap()[0]
        .id()
        .clone();
    let c = claim_id(ctx, &id, LEASE).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            c.token,
            &RetryRequest::new("first")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Retrying);
    assert_eq!(get(ctx, &id).await.last_error.as_deref(), Some("first"));
    let c = claim_id(ctx, &id, LEASE).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            c.token,
            &RetryRequest::new("second")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(
        r,
        Retried::Dead,
        "the job's own max_attempts (2) wins over the default (10)"
    );
    let n = counts(ctx).await;
    assert_eq!((n.retried, n.failed, n.dead), (1, 1, 1));
    assert_eq!(get(ctx, &id).await.last_error.as_deref(), Some("second"));
}

pub async fn retry_with_a_delay_schedules_the_job_at_now_plus_the_delay(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    ctx.probe.clear_wakes().await;
    let delay = Duration::from_millis(400);
    let t0 = server_ms(ctx).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            c.token,
            &RetryRequest::new("later")
                .after(delay)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    let t1 = server_ms(ctx).await;
    assert_eq!(r, Retried::Retrying);
    let row = get(ctx, &id).await;
    assert_eq!(row.state, JobState::Scheduled);
    let due = row.run_at.unwrap();
    let ms = delay.as_millis() as u64;
    assert!((t0 + ms..=t1 + ms).contains(&due), "run_at = the store's now + delay");
    assert_eq!(zscore(ctx, "scheduled", &id).await, Some(due));
    assert_eq!(row.last_error.as_deref(), Some("later"));
    let n = counts(ctx).await;
    assert_eq!((n.scheduled, n.active, n.pending, n.retried), (1, 0, 0, 1));
    // not claimable, but due before anything else scheduled: a parked consumer, whose park ends at
    // the earliest due time its last promote saw, is woken to see this one
    assert_eq!(ctx.probe.wakes().await, 1, "a new head of scheduled: one wake");
    assert!(claim(ctx, 10, LEASE).await.is_empty(), "not claimable before due");
    wait_until(
        Duration::from_secs(2),
        "promote to move the retried job",
        move || async move {
            ctx.store
                .promote(&ctx.q, 10, echomq::schedule::GRACE_MIN)
                .await
                .unwrap()
                .moved
                == 1
        },
    )
    .await;
    let c = claim_id(ctx, &id, LEASE).await;
    assert_eq!(c.attempts, 2);
}

pub async fn retry_with_no_delay_makes_the_job_ready_at_once(ctx: &Ctx) {
    let first = add(ctx, None, "a").await;
    let c = claim_id(ctx, &first, LEASE).await;
    let second = add(ctx, None, "b").await;
    ctx.probe.clear_wakes().await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &first,
            c.token,
            &RetryRequest::new("again")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Retrying);
    let row = get(ctx, &first).await;
    assert_eq!(row.state, JobState::Pending);
    assert_eq!(row.run_at, None);
    assert_eq!(ctx.probe.wakes().await, 1, "one job made claimable: one wake");
    let n = counts(ctx).await;
    assert_eq!((n.scheduled, n.pending, n.active), (0, 2, 0));
    // ready at a fresh sequence: behind the job enqueued while it ran
    let got = claim(ctx, 10, LEASE).await;
    assert_eq!(ids(&got), [second, first]);
    assert_eq!(got[1].attempts, 2);
    assert_eq!(got[1].payload, b"a");
}

pub async fn retry_of_a_lane_job_frees_its_slot(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    let c = claim_id(ctx, &lane[0], LEASE).await;
    assert!(claim(ctx, 10, LEASE).await.is_empty(), "limit 1: the lane waits");
    assert_slot_invariant(ctx).await;
    ctx.probe.clear_wakes().await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &lane[0],
            c.token,
            &RetryRequest::new("e").after(LATER).max_attempts(BUDGET).settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Retrying);
    assert_eq!(ctx.probe.slots().await, HashMap::new(), "the slot is free");
    assert_eq!(
        ctx.probe.wakes().await,
        2,
        "the group is back on the ring, and the retried job is the new head of scheduled: a wake each"
    );
    assert_slot_invariant(ctx).await;
    claim_id(ctx, &lane[1], LEASE).await;
    assert_slot_invariant(ctx).await;
}

pub async fn retry_of_a_lane_job_with_no_delay_requeues_it_at_its_lanes_tail(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    let c = claim_id(ctx, &lane[0], LEASE).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &lane[0],
            c.token,
            &RetryRequest::new("e")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Retrying);
    assert_eq!(get(ctx, &lane[0]).await.state, JobState::Pending);
    assert_slot_invariant(ctx).await;
    let c1 = claim_id(ctx, &lane[1], LEASE).await;
    assert!(claim(ctx, 10, LEASE).await.is_empty(), "limit 1 holds");
    assert_slot_invariant(ctx).await;
    let s = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(lane[1].clone(), c1.token),
            plain(),
        )
        .await
        .unwrap();
    assert_eq!(s, Settled::Ok);
    assert_slot_invariant(ctx).await;
    let again = claim_id(ctx, &lane[0], LEASE).await;
    assert_eq!(again.attempts, 2);
    assert_eq!(again.group, Some(g));
    assert_slot_invariant(ctx).await;
}

pub async fn retry_at_max_attempts_of_a_lane_job_frees_its_slot(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    let c = claim_id(ctx, &lane[0], LEASE).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &lane[0],
            c.token,
            &RetryRequest::new("e")
                .after(Duration::ZERO)
                .max_attempts(1)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Dead);
    assert_eq!(ctx.probe.slots().await, HashMap::new());
    assert_slot_invariant(ctx).await;
    claim_id(ctx, &lane[1], LEASE).await;
    assert_slot_invariant(ctx).await;
}

// --- every exit of a lane job frees its slot ------------------------------------------------------

/// A lane at limit 1: the holder's verb frees the slot, puts the group back on the ring (one wake),
/// and the next job of the lane is claimable.
async fn frees_the_lane_slot(ctx: &Ctx, verb: Holder) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    let got = claim(ctx, 10, LEASE).await;
    assert_eq!(ids(&got), [lane[0].clone()], "limit 1: one job of the lane");
    assert_eq!(ctx.probe.slots().await, HashMap::from([("g".to_string(), 1)]));
    assert!(
        !ctx.probe.ring().await.contains(&"g".to_string()),
        "a full group is off the ring"
    );
    ctx.probe.clear_wakes().await;
    assert_eq!(verb.call(ctx, &lane[0], got[0].attempts).await, verb.held());
    assert_eq!(ctx.probe.slots().await, HashMap::new(), "{verb:?} frees the slot");
    assert_eq!(ctx.probe.ring().await, ["g"], "the group is back on the ring");
    assert_eq!(ctx.probe.wakes().await, 1, "the group back on the ring: one wake");
    assert_slot_invariant(ctx).await;
    claim_id(ctx, &lane[1], LEASE).await;
    assert_slot_invariant(ctx).await;
}

pub async fn complete_of_a_lane_job_frees_its_slot_and_wakes(ctx: &Ctx) {
    frees_the_lane_slot(ctx, Holder::Complete).await;
}

pub async fn complete_cancelled_of_a_lane_job_frees_its_slot_and_wakes(ctx: &Ctx) {
    frees_the_lane_slot(ctx, Holder::CompleteCancelled).await;
}

pub async fn discard_of_a_lane_job_frees_its_slot_and_wakes(ctx: &Ctx) {
    frees_the_lane_slot(ctx, Holder::Discard).await;
}

pub async fn complete_of_a_flat_job_pushes_no_wake(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let also = add(ctx, None, "q").await;
    let c = claim_id(ctx, &id, LEASE).await;
    ctx.probe.clear_wakes().await;
    let s = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(id.clone(), c.token), plain())
        .await
        .unwrap();
    assert_eq!(s, Settled::Ok);
    assert_eq!(ctx.probe.wakes().await, 0, "a flat settle pushes no wake");
    let d = claim_id(ctx, &also, LEASE).await;
    assert_eq!(
        ctx.store
            .discard(
                &ctx.q,
                &also,
                d.token,
                &echomq::store::DiscardRequest::new("x").settle(plain())
            )
            .await
            .unwrap(),
        Discarded::Dead
    );
    assert_eq!(ctx.probe.wakes().await, 0, "a flat discard pushes no wake");
}

// --- complete_many --------------------------------------------------------------------------------

fn entry(id: &JobId, token: u64, output: Option<&str>) -> Completion {
    Completion::new(id.clone(), token).output(output.map(|o| o.as_bytes().to_vec()))
}

pub async fn complete_many_settles_a_mixed_batch_entry_by_entry(ctx: &Ctx) {
    assert_eq!(ctx.store.complete_many(&ctx.q, &[], plain()).await.unwrap(), []);
    let a = add(ctx, None, "a").await;
    let b = add(ctx, None, "b").await;
    let c = add(ctx, None, "c").await;
    let got = claim(ctx, 3, LEASE).await;
    assert_eq!(ids(&got), [a.clone(), b.clone(), c.clone()]);
    let b_before = get(ctx, &b).await;
    let ghost = JobId::new("ghost").unwrap();
    let batch = [
        entry(&a, 1, Some("out-a")),
        entry(&b, 7, None),
        entry(&ghost, 1, None),
        entry(&c, 1, None),
    ];
    let replies = ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap();
    assert_eq!(replies, [Settled::Ok, Settled::Stale, Settled::Gone, Settled::Ok]);
    assert_eq!(ctx.store.get(&ctx.q, &a).await.unwrap(), None);
    assert_eq!(ctx.store.get(&ctx.q, &c).await.unwrap(), None);
    assert_eq!(get(ctx, &b).await, b_before, "the stale entry's job is untouched");
    let n = counts(ctx).await;
    assert_eq!((n.completed, n.active), (2, 1));
    let s = ctx
        .store
        .complete_many(&ctx.q, &[entry(&b, 1, None)], plain())
        .await
        .unwrap();
    assert_eq!(s, [Settled::Ok], "its holder still settles it");
}

pub async fn complete_many_answers_stale_for_a_repeated_entry(ctx: &Ctx) {
    let a = add(ctx, None, "a").await;
    let b = add(ctx, None, "b").await;
    claim(ctx, 2, LEASE).await;
    let replies = ctx
        .store
        .complete_many(&ctx.q, &[entry(&a, 1, None), entry(&a, 1, None)], plain())
        .await
        .unwrap();
    assert_eq!(replies, [Settled::Ok, Settled::Stale]);
    assert_eq!(counts(ctx).await.completed, 1, "settled once, counted once");
    // the same with a kept row: one row, one count
    ctx.keep(5).await;
    let replies = ctx
        .store
        .complete_many(&ctx.q, &[entry(&b, 1, Some("x")), entry(&b, 1, Some("y"))], plain())
        .await
        .unwrap();
    assert_eq!(replies, [Settled::Ok, Settled::Stale]);
    assert_eq!(counts(ctx).await.completed, 2);
    let row = get(ctx, &b).await;
    assert_eq!(row.state, JobState::Completed);
    assert_eq!(row.output.as_deref(), Some(&b"x"[..]), "the first entry's output");
    let done = ctx.store.list(&ctx.q, JobState::Completed, None, 10).await.unwrap().ids;
    assert_eq!(done, [b]);
}

pub async fn complete_many_frees_the_slots_of_lane_jobs(ctx: &Ctx) {
    let (g1, g2, g3) = (group("g1"), group("g2"), group("g3"));
    let a = add_lane(ctx, &g1, 2).await;
    let b = add_lane(ctx, &g2, 2).await;
    let c = add_lane(ctx, &g3, 2).await;
    let f = add(ctx, None, "f").await;
    let got = claim(ctx, 10, LEASE).await;
    let mut held = ids(&got);
    held.sort();
    let mut want = vec![a[0].clone(), b[0].clone(), c[0].clone(), f.clone()];
    want.sort();
    assert_eq!(held, want, "one job per lane (limit 1) and the flat job");
    assert_slot_invariant(ctx).await;
    ctx.probe.clear_wakes().await;
    let batch = [
        entry(&a[0], 1, None),
        entry(&b[0], 1, None),
        entry(&c[0], 9, None), // stale: g3 keeps its slot
        entry(&f, 1, None),
    ];
    let replies = ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap();
    assert_eq!(replies, [Settled::Ok, Settled::Ok, Settled::Stale, Settled::Ok]);
    assert_eq!(
        ctx.probe.slots().await,
        HashMap::from([("g3".to_string(), 1)]),
        "g1 and g2 freed, g3 still held"
    );
    assert_eq!(
        ctx.probe.wakes().await,
        2,
        "two groups back on the ring, the flat settle none"
    );
    assert_slot_invariant(ctx).await;
    let mut next = ids(&claim(ctx, 10, LEASE).await);
    next.sort();
    let mut want = vec![a[1].clone(), b[1].clone()];
    want.sort();
    assert_eq!(next, want, "g3 is still at its limit");
    assert_slot_invariant(ctx).await;
}

/// A batch of four or more on a queue with no lane job active (Redis reads then the token alone,
/// not the group, and removes the batch from `active` in one call): each entry still answers by its
/// own row — a holder completes, a job whose token moved on is stale, an unknown id is gone, a
/// repeated entry is stale after its first settle, a job that left `active` with its token (a
/// retry) is stale and untouched — with the queue's default group limit set or not.
pub async fn complete_many_of_a_flat_queue_answers_each_entry_by_its_own_row(ctx: &Ctx) {
    for default_limit in [false, true] {
        if default_limit {
            ctx.store
                .set_group_limit(&ctx.q, &echomq::store::LimitTarget::Default, 3)
                .await
                .unwrap();
        }
        let moved = add(ctx, None, "moved").await;
        let old = claim_id(ctx, &moved, SHORT).await;
        lapse(ctx, &moved).await;
        assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1);
        let a = add(ctx, None, "a").await;
        let b = add(ctx, None, "b").await;
        let retried = add(ctx, None, "retried").await;
        // one left waiting: the flat member stays on the ring (its r:~ flag)
        let waiting = add(ctx, None, "waiting").await;
        let mut held = ids(&claim(ctx, 4, LEASE).await);
        held.sort();
        let mut want = vec![moved.clone(), a.clone(), b.clone(), retried.clone()];
        want.sort();
        assert_eq!(held, want);
        assert_eq!(get(ctx, &moved).await.attempts, old.attempts + 1);
        ctx.store
            .retry(
                &ctx.q,
                &retried,
                1,
                &RetryRequest::new("boom")
                    .after(LATER)
                    .max_attempts(BUDGET)
                    .settle(plain()),
            )
            .await
            .unwrap();
        let retried_before = get(ctx, &retried).await;
        let ghost = JobId::new("ghost").unwrap();
        let batch = [
            entry(&a, 1, None),
            entry(&moved, 1, None),
            entry(&ghost, 1, None),
            entry(&b, 1, None),
            entry(&a, 1, None),
            entry(&retried, 1, None),
        ];
        let replies = ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap();
        assert_eq!(
            replies,
            [
                Settled::Ok,
                Settled::Stale,
                Settled::Gone,
                Settled::Ok,
                Settled::Stale,
                Settled::Stale
            ],
            "default limit set: {default_limit}"
        );
        assert_eq!(ctx.store.get(&ctx.q, &a).await.unwrap(), None);
        assert_eq!(ctx.store.get(&ctx.q, &b).await.unwrap(), None);
        assert_eq!(
            get(ctx, &moved).await.state,
            JobState::Active,
            "the stale entry's job is untouched"
        );
        assert_eq!(get(ctx, &retried).await, retried_before, "the retried job is untouched");
        // the two stale ones by themselves: none removed, both stale
        let stale = [entry(&retried, 1, None), entry(&moved, 1, None)];
        let replies = ctx.store.complete_many(&ctx.q, &stale, plain()).await.unwrap();
        assert_eq!(replies, [Settled::Stale, Settled::Stale]);
        let rest = [entry(&moved, old.token + 1, None)];
        assert_eq!(
            ctx.store.complete_many(&ctx.q, &rest, plain()).await.unwrap(),
            [Settled::Ok]
        );
        let last = claim_id(ctx, &waiting, LEASE).await;
        assert_eq!(
            ctx.store
                .complete_many(&ctx.q, &[entry(&last.id, last.token, None)], plain())
                .await
                .unwrap(),
            [Settled::Ok]
        );
        assert_eq!(counts(ctx).await.active, 0);
    }
}

/// A batch of four or more flat jobs, every one held: all complete and their rows go (a second
/// settle of the same batch finds them gone); recorded or retained, each gets its record or its
/// retained row.
/// Batches of first attempts (one shared token 1) on a flat queue where one job was claimed again
/// after its lease was reaped (its old holder's 1 is stale) and one was reaped and waits again:
/// each entry is answered by its own job, a repeat stale after its first settle.
pub async fn complete_many_of_first_attempts_tells_a_job_claimed_again_and_one_reaped(ctx: &Ctx) {
    let j1 = add(ctx, None, "j1").await;
    claim_id(ctx, &j1, SHORT).await;
    lapse(ctx, &j1).await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1);
    assert_eq!(claim_id(ctx, &j1, LEASE).await.attempts, 2, "j1 claimed again");
    let mut rest = Vec::new();
    for name in ["j2", "j3", "j4", "j5", "j6", "j7"] {
        rest.push(add(ctx, None, name).await);
    }
    let [j2, j3, j4, j5, j6, j7] = rest.try_into().unwrap();
    claim_id(ctx, &j2, SHORT).await;
    assert_eq!(claim(ctx, 5, LEASE).await.len(), 5);
    lapse(ctx, &j2).await;
    assert_eq!(ctx.store.reap(&ctx.q, 100, None).await.unwrap(), 1, "j2 waits again");
    assert_slot_invariant(ctx).await;

    // every entry with the token of a first attempt
    let firsts = |ids: &[&JobId]| -> Vec<Completion> { ids.iter().map(|id| entry(id, 1, None)).collect() };
    let batch = firsts(&[&j2, &j3, &j4, &j3]);
    assert_eq!(
        ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap(),
        [Settled::Stale, Settled::Ok, Settled::Ok, Settled::Stale]
    );
    assert_eq!(
        get(ctx, &j2).await.state,
        JobState::Pending,
        "the reaped job waits untouched"
    );
    assert_slot_invariant(ctx).await;

    let batch = firsts(&[&j1, &j5, &j6, &j7]);
    assert_eq!(
        ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap(),
        [Settled::Stale, Settled::Ok, Settled::Ok, Settled::Ok]
    );
    let held = get(ctx, &j1).await;
    assert_eq!(
        (held.state, held.attempts),
        (JobState::Active, 2),
        "its new holder keeps it"
    );
    assert_slot_invariant(ctx).await;
    assert_eq!(
        ctx.store
            .complete_many(&ctx.q, &[entry(&j1, 2, None)], plain())
            .await
            .unwrap(),
        [Settled::Ok]
    );
    assert_slot_invariant(ctx).await;
    let c = counts(ctx).await;
    assert_eq!((c.active, c.pending, c.completed), (0, 1, 6));
}

pub async fn complete_many_of_four_or_more_held_flat_jobs_settles_every_one(ctx: &Ctx) {
    for (settle, label, keep) in [
        (plain(), "plain", 0),
        (recording(), "recorded", 0),
        (plain(), "retained", 10),
    ] {
        ctx.keep(keep).await;
        let mut held = Vec::new();
        for i in 0..6 {
            held.push(add(ctx, None, &format!("{label}-{i}")).await);
        }
        let got = claim(ctx, 6, LEASE).await;
        let batch: Vec<Completion> = got.iter().map(|c| entry(&c.id, c.token, None)).collect();
        let before = records(ctx).await.len();
        let replies = ctx.store.complete_many(&ctx.q, &batch, settle).await.unwrap();
        assert_eq!(replies, vec![Settled::Ok; 6], "{label}");
        let n = counts(ctx).await;
        assert_eq!(n.active, 0, "{label}");
        for id in &held {
            let row = ctx.store.get(&ctx.q, id).await.unwrap();
            if keep > 0 {
                assert_eq!(
                    row.map(|j| j.state),
                    Some(JobState::Completed),
                    "{label}: {id} retained"
                );
            } else {
                assert_eq!(row, None, "{label}: {id}'s row deleted");
            }
        }
        let added = records(ctx).await.len() - before;
        assert_eq!(added, if settle.record { 6 } else { 0 }, "{label}: records");
        let again = ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap();
        let want = if keep > 0 { Settled::Stale } else { Settled::Gone };
        assert_eq!(again, vec![want; 6], "{label}: a second settle");
    }
    assert_eq!(counts(ctx).await.completed, 18);
}

/// A batch of four or more whose one lane job is the queue's only one active, while flat jobs wait
/// (the groups hash holds just that group's slot count and the flat member's flag): the lane job's
/// slot is freed, and its group's next job is claimable.
pub async fn complete_many_of_flat_jobs_and_one_lane_job_frees_its_slot(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 1).await;
    let mut flat = Vec::new();
    for i in 0..5 {
        flat.push(add(ctx, None, &format!("f{i}")).await);
    }
    let got = claim(ctx, 5, LEASE).await;
    assert!(ids(&got).contains(&lane[0]), "the lane job is among the claimed");
    assert_eq!(ctx.probe.slots().await, HashMap::from([("g".to_string(), 1)]));
    assert_eq!(counts(ctx).await.pending, 1, "a flat job still waits");
    let batch: Vec<Completion> = got.iter().map(|c| entry(&c.id, c.token, None)).collect();
    let replies = ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap();
    assert_eq!(replies, vec![Settled::Ok; 5]);
    assert_eq!(ctx.probe.slots().await, HashMap::new(), "the lane job's slot is freed");
    assert_slot_invariant(ctx).await;
    let next = add_lane(ctx, &g, 1).await;
    let mut after = ids(&claim(ctx, 10, LEASE).await);
    after.sort();
    let mut want = vec![next[0].clone(), flat[4].clone()];
    want.sort();
    assert_eq!(after, want, "the group's next job and the last flat one");
    assert_slot_invariant(ctx).await;
}

// --- completion records ---------------------------------------------------------------------------

/// The completion records, oldest first.
async fn records(ctx: &Ctx) -> Vec<Record> {
    ctx.probe.records().await
}

fn record_at(record: &Record, t0: u64, t1: u64) {
    assert!(
        (t0..=t1).contains(&record.at),
        "the record's time is the store's time of the settle"
    );
}

pub async fn complete_with_record_writes_a_completion_record(ctx: &Ctx) {
    let quiet = add(ctx, None, "p").await;
    let c = claim_id(ctx, &quiet, LEASE).await;
    let s = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(quiet.clone(), c.token).output(Some(b"x")),
            plain(),
        )
        .await
        .unwrap();
    assert_eq!(s, Settled::Ok);
    assert!(records(ctx).await.is_empty(), "no record unless asked");
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let t0 = server_ms(ctx).await;
    let s = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(id.clone(), c.token).output(Some(b"the output")),
            recording(),
        )
        .await
        .unwrap();
    let t1 = server_ms(ctx).await;
    assert_eq!(s, Settled::Ok);
    let recs = records(ctx).await;
    assert_eq!(recs.len(), 1);
    let r = &recs[0];
    assert_eq!(r.id, id.as_str());
    assert_eq!(r.status, "completed");
    assert_eq!(r.attempts, "1");
    assert_eq!(r.output.as_deref(), Some("the output"));
    record_at(r, t0, t1);
    // a refused settle writes no record
    let s = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(id.clone(), c.token),
            recording(),
        )
        .await
        .unwrap();
    assert_eq!(s, Settled::Gone);
    assert_eq!(records(ctx).await.len(), 1);
}

pub async fn complete_many_with_record_writes_one_record_per_completed_entry(ctx: &Ctx) {
    let a = add(ctx, None, "a").await;
    let b = add(ctx, None, "b").await;
    let c = add(ctx, None, "c").await;
    claim(ctx, 3, LEASE).await;
    let batch = [entry(&a, 1, Some("oa")), entry(&b, 2, Some("ob")), entry(&c, 1, None)];
    let replies = ctx.store.complete_many(&ctx.q, &batch, recording()).await.unwrap();
    assert_eq!(replies, [Settled::Ok, Settled::Stale, Settled::Ok]);
    let recs = records(ctx).await;
    let who: Vec<&str> = recs.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        who,
        [a.as_str(), c.as_str()],
        "records in batch order, none for the stale entry"
    );
    assert!(recs.iter().all(|r| r.status == "completed" && r.attempts == "1"));
    assert_eq!(recs[0].output.as_deref(), Some("oa"));
    assert_eq!(recs[1].output, None, "no output given, none recorded");
}

pub async fn complete_cancelled_with_record_writes_a_cancelled_record(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let t0 = server_ms(ctx).await;
    let s = ctx
        .store
        .complete_cancelled(
            &ctx.q,
            &id,
            c.token,
            &echomq::store::CancelledRequest::new()
                .reason(Some("user asked"))
                .settle(recording()),
        )
        .await
        .unwrap();
    let t1 = server_ms(ctx).await;
    assert_eq!(s, Settled::Ok);
    let recs = records(ctx).await;
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].id, id.as_str());
    assert_eq!(recs[0].status, "cancelled");
    assert_eq!(recs[0].error.as_deref(), Some("user asked"));
    record_at(&recs[0], t0, t1);
    assert_eq!(counts(ctx).await.cancelled, 1);
}

pub async fn retry_with_record_writes_a_dead_record_only_when_it_dead_letters(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            c.token,
            &RetryRequest::new("first")
                .after(Duration::ZERO)
                .max_attempts(2)
                .settle(recording()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Retrying);
    assert!(records(ctx).await.is_empty(), "a retry is no completion");
    let c = claim_id(ctx, &id, LEASE).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            c.token,
            &RetryRequest::new("second")
                .after(Duration::ZERO)
                .max_attempts(2)
                .settle(recording()),
        )
        .await
        .unwrap();
    assert_eq!(r, Retried::Dead);
    let recs = records(ctx).await;
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].id, id.as_str());
    assert_eq!(recs[0].status, "dead");
    assert_eq!(recs[0].attempts, "2");
    assert_eq!(recs[0].error.as_deref(), Some("second"));
}

pub async fn discard_with_record_writes_a_dead_record(ctx: &Ctx) {
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let t0 = server_ms(ctx).await;
    let d = ctx
        .store
        .discard(
            &ctx.q,
            &id,
            c.token,
            &echomq::store::DiscardRequest::new("bad input").settle(recording()),
        )
        .await
        .unwrap();
    let t1 = server_ms(ctx).await;
    assert_eq!(d, Discarded::Dead);
    let died = zscore(ctx, "dead", &id).await.unwrap();
    assert!((t0..=t1).contains(&died), "the morgue is scored with the time of death");
    let recs = records(ctx).await;
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].status, "dead");
    assert_eq!(recs[0].error.as_deref(), Some("bad input"));
    record_at(&recs[0], t0, t1);
}

// --- retention ------------------------------------------------------------------------------------

pub async fn complete_with_retain_keeps_the_newest_completed_rows(ctx: &Ctx) {
    ctx.keep(2).await;
    let jobs = vec![
        add(ctx, None, "p1").await,
        add(ctx, None, "p2").await,
        add(ctx, None, "p3").await,
    ];
    let got = claim(ctx, 3, LEASE).await;
    assert_eq!(ids(&got), jobs);
    for (i, id) in jobs.iter().enumerate() {
        let t0 = server_ms(ctx).await;
        let out = format!("out-{i}");
        let s = ctx
            .store
            .complete(
                &ctx.q,
                &echomq::store::Completion::new(id.clone(), 1).output(Some(out.as_bytes())),
                plain(),
            )
            .await
            .unwrap();
        assert_eq!(s, Settled::Ok);
        let row = get(ctx, id).await;
        assert_eq!(row.state, JobState::Completed);
        assert_eq!(row.output, Some(out.into_bytes()));
        assert!(row.finished_at.unwrap() >= t0);
    }
    assert_eq!(
        ctx.store.get(&ctx.q, &jobs[0]).await.unwrap(),
        None,
        "the oldest row is trimmed"
    );
    for id in &jobs[1..] {
        let row = get(ctx, id).await;
        assert_eq!(row.state, JobState::Completed);
        assert_eq!(row.attempts, 1);
        assert_eq!(row.score, row.finished_at, "scored by finished_at in completed");
    }
    let done = ctx.store.list(&ctx.q, JobState::Completed, None, 10).await.unwrap().ids;
    assert_eq!(done, [jobs[2].clone(), jobs[1].clone()], "newest first");
    let n = counts(ctx).await;
    assert_eq!((n.completed, n.active), (3, 0));
    // a retained row is no longer held: settling it again is stale, not gone
    let s = ctx
        .store
        .complete(&ctx.q, &echomq::store::Completion::new(jobs[2].clone(), 1), plain())
        .await
        .unwrap();
    assert_eq!(s, Settled::Stale);
}

pub async fn complete_many_with_retain_keeps_the_newest_completed_rows(ctx: &Ctx) {
    ctx.keep(2).await;
    let mut jobs = Vec::new();
    for i in 0..3 {
        jobs.push(add(ctx, None, &format!("p{i}")).await);
    }
    claim(ctx, 3, LEASE).await;
    let batch: Vec<Completion> = jobs
        .iter()
        .enumerate()
        .map(|(i, id)| entry(id, 1, Some(&format!("out-{i}"))))
        .collect();
    let replies = ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap();
    assert_eq!(replies, [Settled::Ok; 3]);
    assert_eq!(
        ctx.store.get(&ctx.q, &jobs[0]).await.unwrap(),
        None,
        "the oldest row is trimmed"
    );
    for (i, id) in jobs.iter().enumerate().skip(1) {
        let row = get(ctx, id).await;
        assert_eq!(row.state, JobState::Completed);
        assert_eq!(row.output, Some(format!("out-{i}").into_bytes()));
    }
    let done = ctx.store.list(&ctx.q, JobState::Completed, None, 10).await.unwrap().ids;
    assert_eq!(done.len(), 2);
}

pub async fn complete_cancelled_with_retain_keeps_the_row_as_cancelled(ctx: &Ctx) {
    ctx.keep(5).await;
    let id = add(ctx, None, "p").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let s = ctx
        .store
        .complete_cancelled(
            &ctx.q,
            &id,
            c.token,
            &echomq::store::CancelledRequest::new()
                .reason(Some("stop now"))
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(s, Settled::Ok);
    let row = get(ctx, &id).await;
    assert_eq!(row.state, JobState::Cancelled);
    assert_eq!(row.last_error.as_deref(), Some("stop now"));
    assert!(row.finished_at.is_some());
    let cancelled = ctx.store.list(&ctx.q, JobState::Cancelled, None, 10).await.unwrap().ids;
    assert_eq!(cancelled, [id]);
    let n = counts(ctx).await;
    assert_eq!((n.cancelled, n.completed, n.active), (1, 0, 0));
}

// --- update_data ----------------------------------------------------------------------------------

pub async fn update_data_checkpoint_is_what_a_redelivery_sees(ctx: &Ctx) {
    let id = add(ctx, None, "step-0").await;
    let c = claim_id(ctx, &id, SHORT).await;
    let deadline = zscore(ctx, "active", &id).await;
    let s = ctx.store.update_data(&ctx.q, &id, c.token, b"step-1").await.unwrap();
    assert_eq!(s, Settled::Ok);
    let row = get(ctx, &id).await;
    assert_eq!((row.state, row.payload.as_slice()), (JobState::Active, &b"step-1"[..]));
    assert_eq!(
        zscore(ctx, "active", &id).await,
        deadline,
        "a checkpoint does not move the lease"
    );
    lapse(ctx, &id).await;
    assert_eq!(ctx.store.reap(&ctx.q, 10, None).await.unwrap(), 1);
    let again = claim_id(ctx, &id, LEASE).await;
    assert_eq!(again.payload, b"step-1", "the redelivery resumes from the checkpoint");
    assert_eq!(again.attempts, 2);
}

pub async fn update_data_of_a_lane_job_keeps_its_slot(ctx: &Ctx) {
    let g = group("g");
    let lane = add_lane(ctx, &g, 2).await;
    let c = claim_id(ctx, &lane[0], LEASE).await;
    let s = ctx.store.update_data(&ctx.q, &lane[0], c.token, b"half").await.unwrap();
    assert_eq!(s, Settled::Ok);
    assert_eq!(ctx.probe.slots().await, HashMap::from([("g".to_string(), 1)]));
    assert!(
        claim(ctx, 10, LEASE).await.is_empty(),
        "the holder keeps the group's only slot"
    );
    assert_slot_invariant(ctx).await;
}

/// complete_then_claim: the completions land ahead of the claim behind them, so a lane job's slot
/// is free for that claim (its group comes round again in the ring's order), and each part answers
/// on its own: a stale completion does not stop the claim.
pub async fn complete_then_claim_frees_the_slots_for_the_claim_behind_it(ctx: &Ctx) {
    let a = add_lane(ctx, &group("a"), 2).await;
    let b = add_lane(ctx, &group("b"), 1).await;
    let first = claim(ctx, 1, LEASE).await;
    assert_eq!(ids(&first), std::slice::from_ref(&a[0]));
    let claim_two = echomq::store::ClaimRequest::new(2, LEASE)
        .max_attempts(BUDGET)
        .settle(plain());
    let batch = [entry(&a[0], first[0].token, Some("out")), entry(&b[0], 7, None)];
    let r = ctx
        .store
        .complete_then_claim(&ctx.q, &batch, plain(), claim_two.clone())
        .await
        .unwrap();
    assert_eq!(r.completed.unwrap(), [Settled::Ok, Settled::Stale]);
    let got = r.claimed.unwrap();
    assert_eq!(
        ids(&got),
        [b[0].clone(), a[1].clone()],
        "b's turn, then a's: its slot was freed first"
    );
    assert_slot_invariant(ctx).await;
    // no claim asked: only the completions
    let none = echomq::store::ClaimRequest::new(0, claim_two.lease)
        .max_attempts(claim_two.max_attempts)
        .settle(claim_two.settle);
    let done: Vec<Completion> = got.iter().map(|c| entry(&c.id, c.token, None)).collect();
    let r = ctx
        .store
        .complete_then_claim(&ctx.q, &done, plain(), none)
        .await
        .unwrap();
    assert_eq!(r.completed.unwrap(), [Settled::Ok, Settled::Ok]);
    assert!(r.claimed.unwrap().is_empty());
    assert_eq!(counts(ctx).await.completed, 3);
    assert_slot_invariant(ctx).await;
}

/// complete_then_claim: a claim that fails behind the completions (the queue's settings hash
/// corrupted into a string) leaves them landed; its own error is its part of the reply.
pub async fn complete_then_claim_keeps_its_completions_when_its_claim_fails(ctx: &Ctx) {
    let added = [add(ctx, None, "a").await, add(ctx, None, "b").await];
    let first = claim(ctx, 1, LEASE).await;
    assert_eq!(ids(&first), std::slice::from_ref(&added[0]));
    ctx.probe.set_key_string("groups", "corrupt").await;
    let one = echomq::store::ClaimRequest::new(1, LEASE)
        .max_attempts(BUDGET)
        .settle(plain());
    let r = ctx
        .store
        .complete_then_claim(&ctx.q, &[entry(&added[0], first[0].token, None)], plain(), one)
        .await
        .unwrap();
    assert_eq!(r.completed.unwrap(), [Settled::Ok], "the completion landed");
    let e = r.claimed.expect_err("the claim read a string as the settings hash");
    assert!(e.to_string().contains("WRONGTYPE"), "{e}");
    ctx.probe.del_key("groups").await;
    let c = counts(ctx).await;
    assert_eq!((c.completed, c.pending, c.active), (1, 1, 0), "nothing claimed");
    assert_eq!(ids(&claim(ctx, 1, LEASE).await), std::slice::from_ref(&added[1]));
    // no completion: the claim alone
    let last = add(ctx, None, "c").await;
    let one = echomq::store::ClaimRequest::new(1, LEASE)
        .max_attempts(BUDGET)
        .settle(plain());
    let r = ctx.store.complete_then_claim(&ctx.q, &[], plain(), one).await.unwrap();
    assert_eq!(r.completed.unwrap(), []);
    assert_eq!(ids(&r.claimed.unwrap()), [last]);
}

/// A job that failed once and then completed keeps, retained, only its outcome: no `last_error`
/// of the earlier attempt — through complete and through complete_many alike.
pub async fn complete_of_a_retried_job_keeps_no_earlier_error(ctx: &Ctx) {
    ctx.keep(10).await;
    let keep = SettleOptions::new();
    let ids: Vec<JobId> = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("a"), NewJob::new("b")])
        .await
        .unwrap()
        .iter()
        .map(|r| r.id().clone())
        .collect();
    for c in ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(2, LEASE).max_attempts(3).settle(keep),
        )
        .await
        .unwrap()
    {
        let r = ctx
            .store
            .retry(
                &ctx.q,
                &c.id,
                c.token,
                &RetryRequest::new("boom")
                    .after(Duration::ZERO)
                    .max_attempts(3)
                    .settle(keep),
            )
            .await
            .unwrap();
        assert_eq!(r, Retried::Retrying);
    }
    let again = ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(2, LEASE).max_attempts(3).settle(keep),
        )
        .await
        .unwrap();
    let (one, other) = (&again[0], &again[1]);
    assert_eq!(
        ctx.store
            .complete(
                &ctx.q,
                &echomq::store::Completion::new(one.id.clone(), one.token).output(Some(b"out")),
                keep
            )
            .await
            .unwrap(),
        Settled::Ok
    );
    let many = [Completion::new(other.id.clone(), other.token)];
    assert_eq!(
        ctx.store.complete_many(&ctx.q, &many, keep).await.unwrap(),
        [Settled::Ok]
    );
    for id in &ids {
        let row = get(ctx, id).await;
        assert_eq!(row.state, JobState::Completed, "{id}");
        assert_eq!(row.last_error, None, "{id}: no stale error on a completed row");
        assert_eq!(row.attempts, 2, "{id}");
    }
}

crate::conformance!(
    complete_of_a_retried_job_keeps_no_earlier_error,
    complete_then_claim_frees_the_slots_for_the_claim_behind_it,
    complete_then_claim_keeps_its_completions_when_its_claim_fails,
    every_holder_verb_of_a_job_never_claimed_is_stale,
    release_with_the_holders_token_gives_the_job_back,
    release_with_a_stale_token_is_stale_and_writes_nothing,
    release_after_a_reap_is_stale_for_the_old_token,
    release_after_a_redrive_is_stale_for_the_old_token,
    release_of_an_unknown_id_is_gone,
    a_settle_reads_a_holders_membership_of_active_from_its_rows_state,
    complete_with_the_holders_token_completes,
    complete_with_a_stale_token_is_stale_and_writes_nothing,
    complete_after_a_reap_is_stale_for_the_old_token,
    complete_after_a_redrive_is_stale_for_the_old_token,
    complete_of_an_unknown_id_is_gone,
    complete_many_with_the_holders_token_completes,
    complete_many_with_a_stale_token_is_stale_and_writes_nothing,
    complete_many_after_a_reap_is_stale_for_the_old_token,
    complete_many_after_a_redrive_is_stale_for_the_old_token,
    complete_many_of_an_unknown_id_is_gone,
    complete_cancelled_with_the_holders_token_cancels,
    complete_cancelled_with_a_stale_token_is_stale_and_writes_nothing,
    complete_cancelled_after_a_reap_is_stale_for_the_old_token,
    complete_cancelled_after_a_redrive_is_stale_for_the_old_token,
    complete_cancelled_of_an_unknown_id_is_gone,
    retry_with_the_holders_token_schedules_another_attempt,
    retry_with_a_stale_token_is_stale_and_writes_nothing,
    retry_after_a_reap_is_stale_for_the_old_token,
    retry_after_a_redrive_is_stale_for_the_old_token,
    retry_of_an_unknown_id_is_gone,
    discard_with_the_holders_token_moves_the_job_to_dead,
    discard_with_a_stale_token_is_stale_and_writes_nothing,
    discard_after_a_reap_is_stale_for_the_old_token,
    discard_after_a_redrive_is_stale_for_the_old_token,
    discard_of_an_unknown_id_is_gone,
    update_data_with_the_holders_token_replaces_the_payload,
    update_data_with_a_stale_token_is_stale_and_writes_nothing,
    update_data_after_a_reap_is_stale_for_the_old_token,
    update_data_after_a_redrive_is_stale_for_the_old_token,
    update_data_of_an_unknown_id_is_gone,
    extend_lock_with_the_holders_token_extends,
    extend_lock_with_a_stale_token_is_stale_and_writes_nothing,
    extend_lock_after_a_reap_is_stale_and_not_back_in_active,
    extend_lock_after_a_redrive_is_stale_for_the_old_token,
    extend_lock_of_an_unknown_id_is_gone,
    retry_reap_and_redrive_never_lower_attempts,
    retry_after_a_redrive_has_the_raised_budget,
    retry_at_max_attempts_moves_the_job_to_dead,
    retry_below_the_jobs_own_budget_retries_then_dead_letters_at_it,
    retry_with_a_delay_schedules_the_job_at_now_plus_the_delay,
    retry_with_no_delay_makes_the_job_ready_at_once,
    retry_of_a_lane_job_frees_its_slot,
    retry_of_a_lane_job_with_no_delay_requeues_it_at_its_lanes_tail,
    retry_at_max_attempts_of_a_lane_job_frees_its_slot,
    complete_of_a_lane_job_frees_its_slot_and_wakes,
    complete_cancelled_of_a_lane_job_frees_its_slot_and_wakes,
    discard_of_a_lane_job_frees_its_slot_and_wakes,
    complete_of_a_flat_job_pushes_no_wake,
    complete_many_settles_a_mixed_batch_entry_by_entry,
    complete_many_answers_stale_for_a_repeated_entry,
    complete_many_frees_the_slots_of_lane_jobs,
    complete_many_of_a_flat_queue_answers_each_entry_by_its_own_row,
    complete_many_of_flat_jobs_and_one_lane_job_frees_its_slot,
    complete_many_of_four_or_more_held_flat_jobs_settles_every_one,
    complete_many_of_first_attempts_tells_a_job_claimed_again_and_one_reaped,
    complete_with_record_writes_a_completion_record,
    complete_many_with_record_writes_one_record_per_completed_entry,
    complete_cancelled_with_record_writes_a_cancelled_record,
    retry_with_record_writes_a_dead_record_only_when_it_dead_letters,
    discard_with_record_writes_a_dead_record,
    complete_with_retain_keeps_the_newest_completed_rows,
    complete_many_with_retain_keeps_the_newest_completed_rows,
    complete_cancelled_with_retain_keeps_the_row_as_cancelled,
    update_data_checkpoint_is_what_a_redelivery_sees,
    update_data_of_a_lane_job_keeps_its_slot,
);
