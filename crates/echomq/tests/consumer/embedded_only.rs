//! What only the embedded store has, so it runs on that store alone:
//!
//! - the direct hand-off (`Store::park_with_handoff` served inside the enqueue's transaction):
//!   Redis serves no offer (`serves_handoffs` is false; its park drops the hand-off and waits on
//!   its wake list), so these cases have nothing to observe there. The consumer-level effects of
//!   the hand-off that hold on every store (a woken consumer, a stop racing the enqueue) are
//!   generic cases in `wake.rs` and `stop.rs`, which count the hand-offs where a store serves them;
//! - SQLite's storage classes, a write refused inside a round's transaction (a trigger, as a full
//!   disk refuses one), and the bounded durable log of cancel requests: SQLite's own, no Redis
//!   twin (Redis holds fields as bytes, a script errs before its first write, cancels are
//!   published).

use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::consumer::Recovery;
use echomq::store::{CancelOutcome, ClaimRequest, Handoff, SettleOptions};
use echomq::{GroupName, JobState, NewJob, QueueName, Store};
use tokio::sync::mpsc;

use crate::harness::Ctx;

fn offer(n: u32) -> ClaimRequest {
    ClaimRequest::new(n, Duration::from_secs(30)).max_attempts(3)
}

/// A handoff that forwards the jobs it is handed.
fn forward() -> (Handoff, mpsc::UnboundedReceiver<Vec<echomq::ClaimedJob>>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handoff: Handoff = Box::new(move |jobs| {
        let _ = tx.send(jobs);
    });
    (handoff, rx)
}

async fn a_parked_offer_is_served_by_the_enqueue_that_wakes_it_and_a_withdrawn_one_is_not(ctx: &Ctx) {
    let (store, q) = (ctx.store.clone(), ctx.q.clone());

    // parked with an offer of 2: the enqueue of 3 claims 2 of them in its own transaction and
    // hands them over before its reply; the third waits, and the park reports a wake
    let (handoff, mut handed) = forward();
    let park = store.park_with_handoff(&q, Duration::from_secs(10), offer(2), handoff);
    tokio::pin!(park);
    assert!(
        futures::poll!(park.as_mut()).is_pending(),
        "parked (its offer registered)"
    );
    let jobs: Vec<NewJob> = (0..3).map(|i| NewJob::new(format!("{i}"))).collect();
    store.enqueue(&q, &jobs).await.unwrap();
    let got = handed.try_recv().expect("handed over by the time the enqueue replied");
    let ids: Vec<String> = got.iter().map(|j| j.id.to_string()).collect();
    assert_eq!(ids, ["1", "2"], "in claim order, as a claim right after the enqueue");
    assert!(got.iter().all(|j| j.attempts == 1));
    let woke = tokio::time::timeout(Duration::from_secs(5), park)
        .await
        .unwrap()
        .unwrap();
    assert!(woke, "the park ends woken");
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (1, 2));
    assert!(handed.try_recv().is_err(), "handed once");
    assert_eq!(ctx.handed_over(&q).unwrap(), 2);
    // the served park left the third job's wake token to other parks: one plain park takes it
    assert!(store
        .park(&q, &echomq::Kinds::all(), Duration::from_millis(10))
        .await
        .unwrap());
    assert!(
        !store
            .park(&q, &echomq::Kinds::all(), Duration::from_millis(10))
            .await
            .unwrap(),
        "one token, for job 3"
    );

    // an offer withdrawn (its park dropped) is not served: the next enqueue claims nothing
    let (handoff, mut handed) = forward();
    {
        let park = store.park_with_handoff(&q, Duration::from_secs(10), offer(5), handoff);
        tokio::pin!(park);
        assert!(futures::poll!(park.as_mut()).is_pending());
    }
    store.enqueue(&q, &[NewJob::new("late")]).await.unwrap();
    assert!(
        handed.recv().await.is_none(),
        "the withdrawn offer's handoff was dropped, never called"
    );
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (2, 2));
    assert_eq!(ctx.handed_over(&q).unwrap(), 2);
}

async fn a_served_park_that_left_nothing_claimable_is_not_woken_and_ends_at_its_timeout(ctx: &Ctx) {
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    let (handoff, mut handed) = forward();
    let park = store.park_with_handoff(&q, Duration::from_millis(400), offer(2), handoff);
    tokio::pin!(park);
    assert!(futures::poll!(park.as_mut()).is_pending(), "parked");
    store.enqueue(&q, &[NewJob::new("only")]).await.unwrap();
    assert_eq!(ids(&handed.try_recv().expect("handed over")), ["1"]);
    // not a synchronisation: the time in which a (wrong) wake by the commit would show
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(
        futures::poll!(park.as_mut()).is_pending(),
        "nothing else claimable: the commit woke no park"
    );
    let began = Instant::now();
    assert!(park.await.unwrap(), "a served park reports a wake at its timeout");
    assert!(began.elapsed() >= Duration::from_millis(200));
    // and with work left over, the serving commit wakes it at once
    let (handoff, mut handed) = forward();
    let park = store.park_with_handoff(&q, Duration::from_secs(10), offer(1), handoff);
    tokio::pin!(park);
    assert!(futures::poll!(park.as_mut()).is_pending(), "parked");
    store.enqueue(&q, &[NewJob::new("a"), NewJob::new("b")]).await.unwrap();
    assert_eq!(handed.try_recv().expect("handed over").len(), 1);
    let woke = tokio::time::timeout(Duration::from_secs(5), park)
        .await
        .unwrap()
        .unwrap();
    assert!(woke);
}

/// Takes the wake tokens left waiting, parks offering a claim of `n` (registered once the first
/// poll is pending), runs `enqueue`, and returns what its transaction handed over (empty: nothing).
async fn handed_by<F: std::future::Future<Output = ()>>(
    store: &Arc<dyn Store>,
    q: &QueueName,
    n: u32,
    enqueue: F,
) -> Vec<echomq::ClaimedJob> {
    while store
        .park(q, &echomq::Kinds::all(), Duration::from_millis(1))
        .await
        .unwrap()
    {}
    let (handoff, mut handed) = forward();
    let park = store.park_with_handoff(q, Duration::from_millis(300), offer(n), handoff);
    tokio::pin!(park);
    assert!(
        futures::poll!(park.as_mut()).is_pending(),
        "parked, its offer registered"
    );
    enqueue.await;
    let _ = park.await.unwrap();
    handed.recv().await.unwrap_or_default()
}

fn ids(jobs: &[echomq::ClaimedJob]) -> Vec<String> {
    jobs.iter().map(|j| j.id.to_string()).collect()
}

async fn an_enqueue_hands_its_jobs_over_as_a_claim_after_it_would(ctx: &Ctx) {
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    let enqueue = |payloads: &'static [&'static str]| {
        let (store, q) = (store.clone(), q.clone());
        async move {
            let jobs: Vec<NewJob> = payloads.iter().map(|p| NewJob::new(*p)).collect();
            store.enqueue(&q, &jobs).await.unwrap();
        }
    };
    let lease = Duration::from_secs(30);
    let claim_all = || store.claim(&q, echomq::store::ClaimRequest::new(10, lease).max_attempts(3));

    // nothing else claimable: the new jobs go straight to the offer; the one left over is
    // pending and on the ring, and the handed ones settle with their token as claimed jobs do
    let handed = handed_by(&store, &q, 2, enqueue(&["a", "b", "c"])).await;
    assert_eq!(ids(&handed), ["1", "2"]);
    assert!(handed.iter().all(|j| j.attempts == 1 && j.group.is_none()));
    assert_eq!(
        handed.iter().map(|j| j.payload.as_slice()).collect::<Vec<_>>(),
        [b"a", b"b"]
    );
    let rest = claim_all().await.unwrap();
    assert_eq!((ids(&rest), rest[0].attempts), (vec!["3".to_string()], 1));
    assert!(claim_all().await.unwrap().is_empty(), "nothing left on the ring");
    for job in &handed {
        let settled = store
            .complete(
                &q,
                &echomq::store::Completion::new(job.id.clone(), 1),
                SettleOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(settled, echomq::store::Settled::Ok);
    }
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (0, 1));

    // an older job waiting: the offer gets it first, in claim order, and the new one waits
    store.enqueue(&q, &[NewJob::new("old")]).await.unwrap();
    assert_eq!(ids(&handed_by(&store, &q, 1, enqueue(&["new"])).await), ["4"]);
    assert_eq!(ids(&claim_all().await.unwrap()), ["5"]);

    // a paused queue hands nothing over: its jobs wait for the resume
    store.pause(&q).await.unwrap();
    assert!(handed_by(&store, &q, 4, enqueue(&["paused"])).await.is_empty());
    assert!(claim_all().await.unwrap().is_empty());
    store.resume(&q).await.unwrap();
    assert_eq!(ids(&claim_all().await.unwrap()), ["6"]);
}

async fn an_enqueue_hands_over_no_more_payload_bytes_than_a_claim_would_take(ctx: &Ctx) {
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    let mib = vec![b'x'; 1024 * 1024];
    let jobs: Vec<NewJob> = (0..20).map(|_| NewJob::new(mib.clone())).collect();
    let enqueue = {
        let (store, q) = (store.clone(), q.clone());
        async move {
            store.enqueue(&q, &jobs).await.unwrap();
        }
    };
    // an offer of 20: a claim takes no job once its payloads reach BATCH_BYTES_MAX, and the
    // enqueue serving the offer stops there too; the rest wait, claimable
    let per_claim = echomq::store::BATCH_BYTES_MAX / mib.len();
    let handed = handed_by(&store, &q, 20, enqueue).await;
    assert_eq!(handed.len(), per_claim);
    let counts = store.counts(&q).await.unwrap();
    assert_eq!(
        (counts.active, counts.pending),
        (per_claim as u64, 20 - per_claim as u64)
    );
    let next = store
        .claim(
            &q,
            echomq::store::ClaimRequest::new(20, Duration::from_secs(30)).max_attempts(3),
        )
        .await
        .unwrap();
    assert_eq!(next.len(), per_claim, "a claim after it takes as many");
}

async fn a_field_of_an_unexpected_storage_class_is_read_as_text_and_judged_as_redis_would(ctx: &Ctx) {
    // SQLite lets a hand store a number or a blob where the store writes text (or text where it
    // writes a blob); Redis holds every field as bytes. Such a row must neither fail the claim for
    // the jobs around it nor block `get`: it reads as its bytes, and a malformed one goes dead
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    let (_, path) = ctx.embedded().expect("an embedded case");
    store
        .enqueue(&q, &[NewJob::new("a"), NewJob::new("b"), NewJob::new("c")])
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "UPDATE kv_jobs SET f_data = 'text payload' WHERE id = CAST('1' AS BLOB); \
         UPDATE kv_jobs SET f_state = 7070 WHERE id = CAST('2' AS BLOB);",
    )
    .unwrap();
    let row = store
        .get(&q, &echomq::JobId::parse("1").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.payload, b"text payload".to_vec());
    // a state no job can be in: `get` names the field and the job, as it does on Redis
    let err = store.get(&q, &echomq::JobId::parse("2").unwrap()).await.unwrap_err();
    assert!(
        err.to_string().contains("state") && err.to_string().contains("job 2"),
        "{err}"
    );
    let claimed = store
        .claim(
            &q,
            echomq::store::ClaimRequest::new(3, Duration::from_secs(30)).max_attempts(3),
        )
        .await
        .unwrap();
    let got: Vec<(String, Vec<u8>)> = claimed.into_iter().map(|j| (j.id.to_string(), j.payload)).collect();
    assert_eq!(
        got,
        vec![("1".into(), b"text payload".to_vec()), ("3".into(), b"c".to_vec())]
    );
    let dead = store
        .get(&q, &echomq::JobId::parse("2").unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(dead.state, JobState::Dead);
    assert!(
        dead.last_error.as_deref().unwrap_or_default().contains("state 7070"),
        "{:?}",
        dead.last_error
    );
}

async fn a_round_leg_that_fails_midway_leaves_nothing_of_itself_behind(ctx: &Ctx) {
    // the claim leg fails after it has popped the ring and taken a flat job (a write of the
    // file refused, as a full disk would refuse it): it must be undone whole, as a script that
    // errs before its first write leaves Redis, while the other legs commit
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    let (_, path) = ctx.embedded().expect("an embedded case");
    let g = GroupName::new("g").unwrap();
    store.enqueue(&q, &[NewJob::new("f1")]).await.unwrap();
    store
        .genqueue(&q, &g, &[NewJob::new("g1"), NewJob::new("g2")])
        .await
        .unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch(
        "CREATE TRIGGER refuse AFTER INSERT ON kv_jobs \
         WHEN new.f_state = CAST('active' AS BLOB) AND new.f_data = CAST('g1' AS BLOB) \
         BEGIN SELECT RAISE(ABORT, 'disk refused the write'); END",
    )
    .unwrap();
    let claim = ClaimRequest::new(5, Duration::from_secs(30)).max_attempts(3);
    let round = store
        .recover_promote_claim(
            &q,
            &echomq::store::RoundRequest::new(Recovery::Reap, claim.clone())
                .pump(10)
                .grace(echomq::schedule::GRACE_MIN),
        )
        .await
        .unwrap();
    assert!(round.claimed.is_err(), "the claim leg failed: {:?}", round.claimed);
    assert!(round.recovered.is_ok() && round.promoted.is_ok());
    let counts = store.counts(&q).await.unwrap();
    assert_eq!(
        (counts.pending, counts.active),
        (3, 0),
        "nothing of the failed claim stayed"
    );
    conn.execute_batch("DROP TRIGGER refuse").unwrap();
    // the ring and the group's flag are as they were: every job is claimable again
    let round = store
        .recover_promote_claim(
            &q,
            &echomq::store::RoundRequest::new(Recovery::Reap, claim)
                .pump(10)
                .grace(echomq::schedule::GRACE_MIN),
        )
        .await
        .unwrap();
    let mut got: Vec<Vec<u8>> = round.claimed.unwrap().into_iter().map(|j| j.payload).collect();
    got.sort();
    assert_eq!(
        got,
        vec![b"f1".to_vec(), b"g1".to_vec()],
        "the flat job and the lane's head"
    );
}

async fn a_queue_keeps_its_newest_1000_cancel_requests(ctx: &Ctx) {
    // the requests table is how cancels cross processes; streams read it within a poll, so only
    // the newest requests need keeping: it must not grow with every cancel ever made
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    let (_, path) = ctx.embedded().expect("an embedded case");
    let jobs: Vec<NewJob> = (0..1005).map(|i| NewJob::new(format!("{i}"))).collect();
    store.enqueue(&q, &jobs).await.unwrap();
    let mut held = Vec::new();
    while held.len() < jobs.len() {
        let c = store
            .claim(
                &q,
                echomq::store::ClaimRequest::new(1000, Duration::from_secs(60)).max_attempts(3),
            )
            .await
            .unwrap();
        assert!(
            !c.is_empty(),
            "a claim with {} jobs left took none",
            jobs.len() - held.len()
        );
        held.extend(c);
    }
    for j in &held {
        let r = store.cancel(&q, &j.id, None, SettleOptions::default()).await.unwrap();
        assert_eq!(r, CancelOutcome::Requested);
    }
    let conn = rusqlite::Connection::open(path).unwrap();
    let (n, newest): (i64, Vec<u8>) = conn
        .query_row(
            "SELECT count(*), (SELECT message FROM kv_cancels ORDER BY seq DESC LIMIT 1) FROM kv_cancels",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert_eq!(n, 1000);
    assert_eq!(newest, format!("{}\n", held.last().unwrap().id).into_bytes());
}

crate::embedded_cases!(
    a_parked_offer_is_served_by_the_enqueue_that_wakes_it_and_a_withdrawn_one_is_not,
    a_served_park_that_left_nothing_claimable_is_not_woken_and_ends_at_its_timeout,
    an_enqueue_hands_its_jobs_over_as_a_claim_after_it_would,
    an_enqueue_hands_over_no_more_payload_bytes_than_a_claim_would_take,
    a_field_of_an_unexpected_storage_class_is_read_as_text_and_judged_as_redis_would,
    a_round_leg_that_fails_midway_leaves_nothing_of_itself_behind,
    a_queue_keeps_its_newest_1000_cancel_requests,
);
