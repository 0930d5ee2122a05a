//! Results: what a queue keeps of its finished jobs (its retention, a setting in the store), and the
//! waits on them — the waited mark, and the notice every verb that finishes a marked job gives.

use echomq::store::RetryRequest;
use std::time::Duration;

use echomq::store::{Completion, Retention, Settled, StalledPolicy, Waited};
use echomq::{JobId, JobState, NewJob, QueueName};
use futures::stream::BoxStream;
use futures::StreamExt;

use crate::harness::Ctx;
use crate::settle::{add, claim, claim_id, counts, get, plain, BUDGET, LEASE, SHORT};

/// The next notice of `stream`, within 5 s.
async fn notice(stream: &mut BoxStream<'static, Option<JobId>>, what: &str) -> Option<JobId> {
    tokio::time::timeout(Duration::from_secs(5), stream.next())
        .await
        .unwrap_or_else(|_| panic!("no notice within 5 s: {what}"))
        .unwrap_or_else(|| panic!("the notices ended: {what}"))
}

/// No notice on `stream` for a while.
async fn no_notice(stream: &mut BoxStream<'static, Option<JobId>>, what: &str) {
    if let Ok(n) = tokio::time::timeout(Duration::from_millis(700), stream.next()).await {
        panic!("a notice {n:?}: {what}");
    }
}

async fn mark(ctx: &Ctx, id: &JobId) -> Waited {
    ctx.store.mark_waited(&ctx.q, id).await.unwrap()
}

async fn complete(ctx: &Ctx, id: &JobId, token: u64, output: Option<&[u8]>) {
    let done = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(id.clone(), token).output(output),
            plain(),
        )
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
}

/// A queue that never set a retention keeps the default — 10,000 rows, 24 hours, outputs up to
/// 64 KiB — and so keeps a completed job's row: its output, its state and times, and neither its
/// payload nor an earlier attempt's error.
pub async fn retention_of_a_queue_that_set_none_is_the_default_and_keeps_results(ctx: &Ctx) {
    let q = QueueName::new(format!("{}-default", ctx.q)).unwrap();
    let r = ctx.store.retention(&q).await.unwrap();
    assert_eq!(r, Retention::default());
    assert_eq!(
        (r.keep, r.max_age, r.max_output),
        (10_000, Duration::from_secs(86_400), 65_536)
    );
    let id = ctx.store.enqueue(&q, &[NewJob::new("the payload")]).await.unwrap()[0]
        .id()
        .clone();
    let c = ctx
        .store
        .claim(
            &q,
            echomq::store::ClaimRequest::new(1, LEASE)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap()
        .remove(0);
    let retried = ctx
        .store
        .retry(
            &q,
            &id,
            c.token,
            &RetryRequest::new("first try failed")
                .after(Duration::ZERO)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(retried, echomq::store::Retried::Retrying);
    let c = ctx
        .store
        .claim(
            &q,
            echomq::store::ClaimRequest::new(1, LEASE)
                .max_attempts(BUDGET)
                .settle(plain()),
        )
        .await
        .unwrap()
        .remove(0);
    let done = ctx
        .store
        .complete(
            &q,
            &echomq::store::Completion::new(id.clone(), c.token).output(Some(b"\"ok\"")),
            plain(),
        )
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
    let row = ctx
        .store
        .get(&q, &id)
        .await
        .unwrap()
        .expect("the completed row is kept");
    assert_eq!(row.state, JobState::Completed);
    assert_eq!(row.output.as_deref(), Some(&b"\"ok\""[..]));
    assert_eq!(row.attempts, 2);
    assert!(row.finished_at.is_some());
    assert!(row.payload.is_empty(), "a kept row drops its payload");
    assert_eq!(row.last_error, None, "no earlier attempt's error");
    ctx.store.obliterate(&q, true).await.unwrap();
}

/// set_retention is read back as set, by every handle on the store, and refuses a zero age.
pub async fn set_retention_is_read_back_and_refuses_a_zero_age(ctx: &Ctx) {
    let r = Retention::default()
        .keep(7)
        .max_age(Duration::from_secs(90))
        .max_output(100);
    ctx.store.set_retention(&ctx.q, &r).await.unwrap();
    assert_eq!(ctx.store.retention(&ctx.q).await.unwrap(), r);
    let zero = r.max_age(Duration::ZERO);
    let err = ctx.store.set_retention(&ctx.q, &zero).await.unwrap_err();
    assert!(err.to_string().contains("max_age"), "{err}");
    assert_eq!(ctx.store.retention(&ctx.q).await.unwrap(), r, "nothing written");
}

/// An output over the retention's cap is not kept: the row keeps its size instead.
pub async fn set_retention_caps_the_output_kept(ctx: &Ctx) {
    ctx.store
        .set_retention(&ctx.q, &Retention::default().keep(10).max_output(4))
        .await
        .unwrap();
    let small = add(ctx, None, "a").await;
    let big = add(ctx, None, "b").await;
    let got = claim(ctx, 2, LEASE).await;
    complete(ctx, &small, got[0].token, Some(b"1234")).await;
    complete(ctx, &big, got[1].token, Some(b"12345")).await;
    let row = get(ctx, &small).await;
    assert_eq!((row.output.as_deref(), row.output_dropped), (Some(&b"1234"[..]), None));
    let row = get(ctx, &big).await;
    assert_eq!(row.state, JobState::Completed);
    assert_eq!((row.output, row.output_dropped), (None, Some(5)));
}

/// Kept rows past the retention's age are deleted as later jobs of the queue finish; the count
/// trims the oldest past `keep`.
pub async fn set_retention_trims_rows_past_their_age_or_count(ctx: &Ctx) {
    let age = Duration::from_millis(300);
    ctx.store
        .set_retention(&ctx.q, &Retention::default().keep(2).max_age(age))
        .await
        .unwrap();
    let old = add(ctx, None, "old").await;
    let c = claim_id(ctx, &old, LEASE).await;
    complete(ctx, &old, c.token, None).await;
    tokio::time::sleep(age + Duration::from_millis(200)).await;
    assert!(
        ctx.store.get(&ctx.q, &old).await.unwrap().is_some(),
        "kept until a finish"
    );
    let mut fresh = Vec::new();
    for i in 0..3 {
        let id = add(ctx, None, &format!("new-{i}")).await;
        let c = claim_id(ctx, &id, LEASE).await;
        complete(ctx, &id, c.token, None).await;
        fresh.push(id);
    }
    assert!(
        ctx.store.get(&ctx.q, &old).await.unwrap().is_none(),
        "past its age: gone"
    );
    assert!(
        ctx.store.get(&ctx.q, &fresh[0]).await.unwrap().is_none(),
        "past the count"
    );
    let kept = ctx.store.list(&ctx.q, JobState::Completed, None, 10).await.unwrap().ids;
    assert_eq!(kept, [fresh[2].clone(), fresh[1].clone()]);
}

/// A job still to finish is marked and waits; its completion is announced on the queue's notices,
/// and marking it again then answers its row.
pub async fn mark_waited_marks_a_job_and_its_completion_is_announced(ctx: &Ctx) {
    ctx.keep(10).await;
    let mut notices = ctx.store.finished_waits(&ctx.q).await.unwrap();
    let id = add(ctx, None, "job").await;
    assert_eq!(mark(ctx, &id).await, Waited::Waiting);
    assert_eq!(mark(ctx, &id).await, Waited::Waiting, "marking twice is one mark");
    let c = claim_id(ctx, &id, LEASE).await;
    assert_eq!(c.payload, b"job", "the mark changes nothing a claim sees");
    complete(ctx, &id, c.token, Some(b"42")).await;
    assert_eq!(notice(&mut notices, "the completion").await, Some(id.clone()));
    match mark(ctx, &id).await {
        Waited::Finished(row) => {
            assert_eq!(row.state, JobState::Completed);
            assert_eq!(row.output.as_deref(), Some(&b"42"[..]));
        }
        other => panic!("expected the finished row, got {other:?}"),
    }
}

/// A job nobody marked finishes without a notice.
pub async fn mark_waited_of_none_leaves_the_finishes_unannounced(ctx: &Ctx) {
    let mut notices = ctx.store.finished_waits(&ctx.q).await.unwrap();
    let id = add(ctx, None, "job").await;
    let c = claim_id(ctx, &id, LEASE).await;
    complete(ctx, &id, c.token, None).await;
    if ctx.dir.is_none() {
        no_notice(&mut notices, "an unmarked job's completion").await;
        return;
    }
    // the embedded store's beat says "look again" (`None`) when its file changed under it — its
    // checkpointer emptying the -wal file half a second after the last commit counts — so only a
    // notice naming the job is wrong there
    let until = tokio::time::Instant::now() + Duration::from_millis(700);
    while let Ok(n) = tokio::time::timeout_at(until, notices.next()).await {
        assert!(matches!(n, Some(None)), "a notice {n:?}: an unmarked job's completion");
    }
}

/// With no row, mark_waited answers the queue's id sequence: a generated id at or below it was
/// handed out.
pub async fn mark_waited_of_a_job_with_no_row_answers_the_sequence(ctx: &Ctx) {
    for _ in 0..3 {
        add(ctx, None, "x").await;
    }
    let c = claim(ctx, 1, LEASE).await.remove(0);
    complete(ctx, &c.id, c.token, None).await;
    assert_eq!(mark(ctx, &c.id).await, Waited::Gone { sequence: 3 });
    let never = JobId::parse("99").unwrap();
    assert_eq!(mark(ctx, &never).await, Waited::Gone { sequence: 3 });
}

/// Every verb that finishes a marked job announces it: complete_many, complete_cancelled, cancel of
/// a waiting job, discard, retry at the budget, claim (a cancel on the row, the budget spent),
/// sweep_stalled at its threshold, remove, reap and promote (a malformed row buried); drain, which
/// reads no row, tells every wait to look again.
pub async fn mark_waited_jobs_are_announced_by_every_verb_that_finishes_them(ctx: &Ctx) {
    let mut notices = ctx.store.finished_waits(&ctx.q).await.unwrap();
    let marked = |payload: &'static str| async move {
        let id = add(ctx, None, payload).await;
        assert_eq!(mark(ctx, &id).await, Waited::Waiting);
        id
    };

    let id = marked("many").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let batch = [Completion::new(id.clone(), c.token)];
    assert_eq!(
        ctx.store.complete_many(&ctx.q, &batch, plain()).await.unwrap(),
        [Settled::Ok]
    );
    assert_eq!(notice(&mut notices, "complete_many").await, Some(id));

    let id = marked("cancelled").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let r = ctx
        .store
        .complete_cancelled(
            &ctx.q,
            &id,
            c.token,
            &echomq::store::CancelledRequest::new()
                .reason(Some("stop"))
                .settle(plain()),
        )
        .await;
    assert_eq!(r.unwrap(), Settled::Ok);
    assert_eq!(notice(&mut notices, "complete_cancelled").await, Some(id));

    let id = marked("waiting").await;
    ctx.store.cancel(&ctx.q, &id, None, plain()).await.unwrap();
    assert_eq!(notice(&mut notices, "cancel of a waiting job").await, Some(id));

    let id = marked("discarded").await;
    let c = claim_id(ctx, &id, LEASE).await;
    ctx.store
        .discard(
            &ctx.q,
            &id,
            c.token,
            &echomq::store::DiscardRequest::new("bad").settle(plain()),
        )
        .await
        .unwrap();
    assert_eq!(notice(&mut notices, "discard").await, Some(id));

    let id = marked("retried").await;
    let c = claim_id(ctx, &id, LEASE).await;
    let r = ctx
        .store
        .retry(
            &ctx.q,
            &id,
            c.token,
            &RetryRequest::new("spent")
                .after(Duration::ZERO)
                .max_attempts(1)
                .settle(plain()),
        )
        .await;
    assert_eq!(r.unwrap(), echomq::store::Retried::Dead);
    assert_eq!(notice(&mut notices, "retry at the budget").await, Some(id));

    // claim: a row carrying a cancel, then one whose budget is spent
    let id = marked("claim-cancelled").await;
    claim_id(ctx, &id, SHORT).await;
    ctx.store.cancel(&ctx.q, &id, Some("operator"), plain()).await.unwrap();
    tokio::time::sleep(SHORT * 3).await;
    ctx.store.reap(&ctx.q, 10, None).await.unwrap();
    assert!(
        claim(ctx, 1, LEASE).await.is_empty(),
        "cancelled at claim, not handed out"
    );
    assert_eq!(notice(&mut notices, "claim of a row carrying a cancel").await, Some(id));
    let id = marked("claim-spent").await;
    ctx.store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, SHORT)
                .max_attempts(1)
                .settle(plain()),
        )
        .await
        .unwrap();
    tokio::time::sleep(SHORT * 3).await;
    ctx.store.reap(&ctx.q, 10, None).await.unwrap();
    assert!(ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, LEASE)
                .max_attempts(1)
                .settle(plain())
        )
        .await
        .unwrap()
        .is_empty());
    assert_eq!(notice(&mut notices, "claim at the budget").await, Some(id));

    let id = marked("stalled").await;
    claim_id(ctx, &id, SHORT).await;
    tokio::time::sleep(SHORT * 3).await;
    let swept = ctx
        .store
        .sweep_stalled(&ctx.q, StalledPolicy::default().max_stalled(1).limit(10))
        .await
        .unwrap();
    assert_eq!(swept.dead, std::slice::from_ref(&id));
    assert_eq!(notice(&mut notices, "sweep_stalled").await, Some(id));

    // reap under a redelivery budget of 1: the second lapse buries the job
    let id = marked("redelivered").await;
    for _ in 0..2 {
        claim_id(ctx, &id, SHORT).await;
        tokio::time::sleep(SHORT * 3).await;
        ctx.store.reap(&ctx.q, 10, Some(1)).await.unwrap();
    }
    assert_eq!(get(ctx, &id).await.state, JobState::Dead);
    assert_eq!(notice(&mut notices, "reap past the redelivery budget").await, Some(id));

    let id = marked("removed").await;
    ctx.store.remove(&ctx.q, &id, false).await.unwrap();
    assert_eq!(notice(&mut notices, "remove").await, Some(id));

    // reap and promote bury a row whose state is malformed (only by hand)
    let id = marked("reaped").await;
    claim_id(ctx, &id, SHORT).await;
    ctx.probe.set_row_field(&id, "state", "bogus").await;
    tokio::time::sleep(SHORT * 3).await;
    ctx.store.reap(&ctx.q, 10, None).await.unwrap();
    assert_eq!(notice(&mut notices, "reap of a malformed row").await, Some(id));
    let id = ctx
        .store
        .enqueue(&ctx.q, &[NewJob::new("later").with_delay(SHORT)])
        .await
        .unwrap()[0]
        .id()
        .clone();
    assert_eq!(mark(ctx, &id).await, Waited::Waiting);
    ctx.probe.set_row_field(&id, "state", "bogus").await;
    tokio::time::sleep(SHORT * 3).await;
    ctx.store
        .promote(&ctx.q, 10, echomq::schedule::GRACE_MIN)
        .await
        .unwrap();
    assert_eq!(notice(&mut notices, "promote of a malformed row").await, Some(id));

    let id = marked("drained").await;
    ctx.store.drain(&ctx.q).await.unwrap();
    assert_eq!(
        notice(&mut notices, "drain").await,
        None,
        "look at every waited job again"
    );
    assert_eq!(mark(ctx, &id).await, Waited::Gone { sequence: 13 });
    assert_eq!(counts(ctx).await.active, 0);
}

crate::conformance!(
    retention_of_a_queue_that_set_none_is_the_default_and_keeps_results,
    set_retention_is_read_back_and_refuses_a_zero_age,
    set_retention_caps_the_output_kept,
    set_retention_trims_rows_past_their_age_or_count,
    mark_waited_marks_a_job_and_its_completion_is_announced,
    mark_waited_of_none_leaves_the_finishes_unannounced,
    mark_waited_of_a_job_with_no_row_answers_the_sequence,
    mark_waited_jobs_are_announced_by_every_verb_that_finishes_them,
);
