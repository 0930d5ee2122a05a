//! Bad input: every invalid name, option and payload is refused with a typed error
//! naming the value, before anything is written. (That a script refusing malformed ARGV writes
//! nothing, and that every key a script builds uses a listed suffix, are Redis-only:
//! `tests/redis_scripts.rs`.)

use echomq::store::RetryRequest;
use std::sync::Arc;
use std::time::Duration;

use echomq::error::NameKind;
use echomq::store::{LimitTarget, SettleOptions, Settled, StalledPolicy, Store};
use echomq::{Error, GroupName, JobId, JobState, NewJob, QueueName};

use crate::admin::{group, id, job_keys, jobs, sizes};
use crate::harness::{Ctx, Snapshot};

const LEASE: Duration = Duration::from_secs(30);

/// The one job of the queue, claimed under [`LEASE`] with a budget of 3.
async fn claim_one(store: &Arc<dyn Store>, q: &QueueName) -> echomq::ClaimedJob {
    store
        .claim(
            q,
            echomq::store::ClaimRequest::new(1, LEASE).max_attempts(3).settle(PLAIN),
        )
        .await
        .unwrap()
        .remove(0)
}
const PLAIN: SettleOptions = SettleOptions::new();

/// Names refused as queue names, group names and job ids alike.
fn bad_names() -> Vec<String> {
    [
        String::new(),
        "x".repeat(129),
        "a b".into(),
        " lead".into(),
        "a{b".into(),
        "q}".into(),
        "{q}".into(),
        "é".into(),
        "naïve".into(),
        "tab\t".into(),
        "new\nline".into(),
        "a/b".into(),
        "a*".into(),
    ]
    .into()
}

/// All of the queue's state: equal snapshots mean nothing was written (a counter, a flag, a wake
/// token included).
async fn snapshot(ctx: &Ctx) -> Snapshot {
    ctx.probe.snapshot().await
}

/// A store of the case's kind that accepts payloads of at most 16 bytes.
async fn small_store(ctx: &Ctx) -> Arc<dyn Store> {
    ctx.probe.store_with_payload_limit(16).await
}

fn assert_invalid_name(err: &Error, want_kind: NameKind, bad: &str) {
    match err {
        Error::InvalidName { kind, value, .. } => {
            assert_eq!(*kind, want_kind, "{err}");
            assert_eq!(value, bad, "the error names the value");
        }
        other => panic!("{bad:?}: expected InvalidName, got {other:?}"),
    }
    assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
}

fn assert_invalid_option(err: &Error, want_field: &str, want_value: &str) {
    match err {
        Error::InvalidOption { field, value, .. } => {
            assert_eq!(*field, want_field, "{err}");
            assert_eq!(value, want_value, "{err}");
        }
        other => panic!("expected InvalidOption {want_field}, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&format!("{want_field} = {want_value}")),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// names: a store takes only validated names, so an invalid one never reaches it

pub async fn enqueue_refuses_invalid_queue_names(ctx: &Ctx) {
    for bad in bad_names() {
        let err = QueueName::new(bad.clone()).unwrap_err();
        assert_invalid_name(&err, NameKind::Queue, &bad);
        assert!(bad.parse::<QueueName>().is_err());
    }
    assert!(
        QueueName::new("x".repeat(128)).is_ok(),
        "128 bytes is the limit, inclusive"
    );
    assert!(QueueName::new("a.b_c:d-E9").is_ok());
    assert_eq!(sizes(ctx).await, (0, 0, 0, 0));
}

pub async fn genqueue_refuses_invalid_group_names(ctx: &Ctx) {
    for bad in bad_names() {
        let err = GroupName::new(bad.clone()).unwrap_err();
        assert_invalid_name(&err, NameKind::Group, &bad);
    }
    assert!(GroupName::new("x".repeat(128)).is_ok());
    // digits-only group names are fine (only caller ids reserve them)
    let g = GroupName::new("42").unwrap();
    ctx.store.genqueue(&ctx.q, &g, &jobs(1)).await.unwrap();
    assert_eq!(sizes(ctx).await, (1, 0, 0, 0));
}

pub async fn enqueue_refuses_invalid_caller_ids(ctx: &Ctx) {
    for bad in bad_names() {
        assert_invalid_name(&JobId::new(bad.clone()).unwrap_err(), NameKind::JobId, &bad);
        assert_invalid_name(&JobId::parse(bad.clone()).unwrap_err(), NameKind::JobId, &bad);
    }
    for digits in ["1", "123", "0007"] {
        let err = JobId::new(digits).unwrap_err();
        assert_invalid_name(&err, NameKind::JobId, digits);
        assert!(err.to_string().contains("digits-only"), "{err}");
        // a reference to an existing (generated) id is fine
        assert!(JobId::parse(digits).is_ok());
    }
    assert!(JobId::new("x".repeat(128)).is_ok());
    assert!(JobId::new("order-17").is_ok());
    assert!(JobId::new("1e3").is_ok(), "one non-digit is enough");
    assert!(job_keys(ctx).await.is_empty());
}

pub async fn enqueue_refuses_invalid_kinds_and_writes_nothing(ctx: &Ctx) {
    let g = GroupName::new("g").unwrap();
    for bad in ["", "two words", "tab\there", "new\nline", &"k".repeat(129)] {
        let job = NewJob::new("{}").with_kind(bad);
        let err = ctx
            .store
            .enqueue(&ctx.q, &[NewJob::new("ok"), job.clone()])
            .await
            .unwrap_err();
        assert_invalid_name(&err, NameKind::JobKind, bad);
        let err = ctx.store.genqueue(&ctx.q, &g, &[job]).await.unwrap_err();
        assert_invalid_name(&err, NameKind::JobKind, bad);
    }
    assert!(job_keys(ctx).await.is_empty(), "nothing written");
    let fine = NewJob::new("{}").with_kind("k".repeat(128));
    ctx.store.enqueue(&ctx.q, &[fine]).await.unwrap();
}

pub async fn enqueue_refuses_a_digits_only_id_made_by_parse_and_writes_nothing(ctx: &Ctx) {
    // `JobId::parse` takes digits (a reference to a generated id); as a new job's id it would take
    // the row of the job generated with that number later
    let taken = JobId::parse("2").unwrap();
    let batch = [NewJob::new("a"), NewJob::new("b").with_id(taken.clone())];
    let err = ctx.store.enqueue(&ctx.q, &batch).await.unwrap_err();
    assert_invalid_name(&err, NameKind::JobId, "2");
    let g = group("g");
    let err = ctx.store.genqueue(&ctx.q, &g, &batch[1..]).await.unwrap_err();
    assert_invalid_name(&err, NameKind::JobId, "2");
    assert!(job_keys(ctx).await.is_empty(), "nothing written");
    let ids = ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    assert_eq!(ids[1].id(), &taken, "the generated id 2 is free");
    assert_eq!(
        ctx.store.get(&ctx.q, &taken).await.unwrap().unwrap().payload,
        br#"{"n":1}"#
    );
}

// ---------------------------------------------------------------------------------------------
// payloads

pub async fn enqueue_refuses_an_oversized_payload_and_writes_nothing(ctx: &Ctx) {
    let small = small_store(ctx).await;
    let batch = [
        NewJob::new(vec![b'a'; 16]),
        NewJob::new(vec![b'b'; 17]),
        NewJob::new("c"),
    ];
    let err = small.enqueue(&ctx.q, &batch).await.unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    assert!(
        err.to_string().contains("17") && err.to_string().contains("16"),
        "{err}"
    );
    let err = small.genqueue(&ctx.q, &group("g"), &batch).await.unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    assert!(job_keys(ctx).await.is_empty(), "nothing written");
    assert!(
        !ctx.store.queues().await.unwrap().contains(&ctx.q),
        "not even the registration"
    );

    let ok = small.enqueue(&ctx.q, &batch[..1]).await.unwrap();
    assert_eq!(ok[0].id().as_str(), "1", "a payload at the limit is accepted");
}

pub async fn complete_refuses_an_oversized_output(ctx: &Ctx) {
    ctx.keep(10).await;
    let small = small_store(ctx).await;
    small.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = claim_one(&small, &ctx.q).await;
    let before = snapshot(ctx).await;
    let retain = SettleOptions::default().record(true);
    let err = small
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(c.id.clone(), c.token).output(Some(&[b'o'; 17])),
            retain,
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    let many = [echomq::store::Completion::new(c.id.clone(), c.token).output(Some(vec![b'o'; 17]))];
    let err = small.complete_many(&ctx.q, &many, retain).await.unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    let done = small
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(c.id.clone(), c.token).output(Some(&[b'o'; 16])),
            retain,
        )
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
}

pub async fn update_data_refuses_an_oversized_payload(ctx: &Ctx) {
    let small = small_store(ctx).await;
    small.enqueue(&ctx.q, &[NewJob::new("first")]).await.unwrap();
    let c = claim_one(&small, &ctx.q).await;
    let before = snapshot(ctx).await;
    let err = small
        .update_data(&ctx.q, &c.id, c.token, &[b'p'; 17])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    assert_eq!(ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap().payload, b"first");
}

// ---------------------------------------------------------------------------------------------
// options

pub async fn enqueue_refuses_max_attempts_zero_and_writes_nothing(ctx: &Ctx) {
    let batch = [
        NewJob::new("a"),
        NewJob::new("b").with_max_attempts(0),
        NewJob::new("c"),
    ];
    let err = ctx.store.enqueue(&ctx.q, &batch).await.unwrap_err();
    assert_invalid_option(&err, "max_attempts", "0");
    let err = ctx.store.genqueue(&ctx.q, &group("g"), &batch).await.unwrap_err();
    assert_invalid_option(&err, "max_attempts", "0");
    assert!(job_keys(ctx).await.is_empty(), "nothing written");
    let ok = ctx.store.enqueue(&ctx.q, &batch[..1]).await.unwrap();
    assert_eq!(ok[0].id().as_str(), "1");
}

pub async fn enqueue_refuses_a_zero_wait_for_replicas_and_writes_nothing(ctx: &Ctx) {
    let batch = [NewJob::new("a"), NewJob::new("b").with_wait_replicas(1, Duration::ZERO)];
    let err = ctx.store.enqueue(&ctx.q, &batch).await.unwrap_err();
    assert_invalid_option(&err, "wait_replicas timeout", "0");
    let err = ctx.store.genqueue(&ctx.q, &group("g"), &batch).await.unwrap_err();
    assert_invalid_option(&err, "wait_replicas timeout", "0");
    assert!(job_keys(ctx).await.is_empty(), "nothing written");
    // a job asking for no replica at all waits for none, on every store (the embedded store has
    // none to wait for, and a test server runs without any)
    let none = NewJob::new("c").with_wait_replicas(0, Duration::from_millis(100));
    let ok = ctx.store.enqueue(&ctx.q, &[none]).await.unwrap();
    assert_eq!(ok[0].id().as_str(), "1");
}

pub async fn claim_refuses_n_zero_a_zero_lease_and_max_attempts_zero(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    let before = snapshot(ctx).await;
    let err = ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(0, LEASE).max_attempts(3).settle(PLAIN),
        )
        .await
        .unwrap_err();
    assert_invalid_option(&err, "n", "0");
    let err = ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, Duration::ZERO)
                .max_attempts(3)
                .settle(PLAIN),
        )
        .await
        .unwrap_err();
    assert_invalid_option(&err, "lease", "0");
    let err = ctx
        .store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, LEASE).max_attempts(0).settle(PLAIN),
        )
        .await
        .unwrap_err();
    assert_invalid_option(&err, "max_attempts", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    assert_eq!(ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap().attempts, 0);
}

pub async fn extend_lock_refuses_a_zero_lease(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = claim_one(&ctx.store, &ctx.q).await;
    let before = snapshot(ctx).await;
    let err = ctx
        .store
        .extend_lock(&ctx.q, &c.id, c.token, Duration::ZERO)
        .await
        .unwrap_err();
    assert_invalid_option(&err, "lease", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
}

pub async fn retry_refuses_max_attempts_zero(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = claim_one(&ctx.store, &ctx.q).await;
    let before = snapshot(ctx).await;
    let err = ctx
        .store
        .retry(
            &ctx.q,
            &c.id,
            c.token,
            &RetryRequest::new("e")
                .after(Duration::ZERO)
                .max_attempts(0)
                .settle(PLAIN),
        )
        .await
        .unwrap_err();
    assert_invalid_option(&err, "max_attempts", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    assert_eq!(
        ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap().state,
        JobState::Active
    );
}

pub async fn durations_from_2_pow_53_ms_are_refused_and_write_nothing(ctx: &Ctx) {
    // a deadline or due time computed from a longer one would overflow (or, in a script, lose its
    // precision): a lease of Duration::MAX must not come out as a deadline already past
    let too_long = [Duration::from_millis(1 << 53), Duration::MAX];
    let field = |err: Error| match err {
        Error::InvalidOption { field, .. } => field,
        other => panic!("expected InvalidOption, got {other:?}"),
    };
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = claim_one(&ctx.store, &ctx.q).await;
    let before = snapshot(ctx).await;
    for d in too_long {
        let late = [NewJob::new("a"), NewJob::new("b").with_delay(d)];
        assert_eq!(field(ctx.store.enqueue(&ctx.q, &late).await.unwrap_err()), "delay");
        let err = ctx.store.genqueue(&ctx.q, &group("g"), &late).await.unwrap_err();
        assert_eq!(field(err), "delay");
        assert_eq!(
            field(
                ctx.store
                    .claim(
                        &ctx.q,
                        echomq::store::ClaimRequest::new(1, d).max_attempts(3).settle(PLAIN)
                    )
                    .await
                    .unwrap_err()
            ),
            "lease"
        );
        let err = ctx.store.extend_lock(&ctx.q, &c.id, c.token, d).await.unwrap_err();
        assert_eq!(field(err), "lease");
        let err = ctx
            .store
            .retry(
                &ctx.q,
                &c.id,
                c.token,
                &RetryRequest::new("e").after(d).max_attempts(3).settle(PLAIN),
            )
            .await
            .unwrap_err();
        assert_eq!(field(err), "delay");
    }
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    // just below the bound: a job due in some 285,000 years, scheduled
    let far = NewJob::new("far").with_delay(Duration::from_millis((1 << 53) - 1));
    ctx.store.enqueue(&ctx.q, &[far]).await.unwrap();
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().scheduled, 1);
}

pub async fn list_refuses_a_cursor_that_does_not_parse(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    for (state, cursor) in [
        (JobState::Pending, "12"),
        (JobState::Pending, "l,x"),
        (JobState::Dead, "f,1,1"),
        (JobState::Completed, "1,no such id!"),
    ] {
        let err = ctx.store.list(&ctx.q, state, Some(cursor), 10).await.unwrap_err();
        assert_invalid_option(&err, "cursor", cursor);
    }
}

pub async fn list_refuses_a_zero_limit(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    for state in [JobState::Pending, JobState::Dead] {
        let err = ctx.store.list(&ctx.q, state, None, 0).await.unwrap_err();
        assert_invalid_option(&err, "limit", "0");
    }
    let err = ctx
        .store
        .list(&ctx.q, JobState::Pending, None, 10_001)
        .await
        .unwrap_err();
    assert_invalid_option(&err, "limit", "10001");
    assert_eq!(
        ctx.store
            .list(&ctx.q, JobState::Pending, None, 10_000)
            .await
            .unwrap()
            .ids
            .len(),
        1
    );
}

pub async fn set_group_limit_refuses_zero(ctx: &Ctx) {
    ctx.store.genqueue(&ctx.q, &group("g"), &jobs(2)).await.unwrap();
    let before = snapshot(ctx).await;
    for target in [LimitTarget::Group(group("g")), LimitTarget::Default] {
        let err = ctx.store.set_group_limit(&ctx.q, &target, 0).await.unwrap_err();
        assert_invalid_option(&err, "limit", "0");
    }
    assert_eq!(snapshot(ctx).await, before, "nothing written");
}

pub async fn redrive_refuses_zero_extra_attempts(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = claim_one(&ctx.store, &ctx.q).await;
    ctx.store
        .discard(
            &ctx.q,
            &c.id,
            c.token,
            &echomq::store::DiscardRequest::new("x").settle(PLAIN),
        )
        .await
        .unwrap();
    let before = snapshot(ctx).await;
    let err = ctx.store.redrive(&ctx.q, &c.id, 0).await.unwrap_err();
    assert_invalid_option(&err, "extra", "0");
    let err = ctx.store.redrive_all(&ctx.q, 0).await.unwrap_err();
    assert_invalid_option(&err, "extra", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
}

pub async fn reap_promote_and_sweep_stalled_refuse_zero_limits(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let later = [NewJob::new("later").with_delay(Duration::from_millis(1))];
    ctx.store.enqueue(&ctx.q, &later).await.unwrap();
    ctx.store
        .claim(
            &ctx.q,
            echomq::store::ClaimRequest::new(1, Duration::from_millis(1))
                .max_attempts(3)
                .settle(PLAIN),
        )
        .await
        .unwrap();
    let before = snapshot(ctx).await;
    assert_invalid_option(&ctx.store.reap(&ctx.q, 0, None).await.unwrap_err(), "limit", "0");
    let err = ctx.store.reap(&ctx.q, 100, Some(0)).await.unwrap_err();
    assert_invalid_option(&err, "max_redeliveries", "0");
    assert_invalid_option(
        &ctx.store
            .promote(&ctx.q, 0, echomq::schedule::GRACE_MIN)
            .await
            .unwrap_err(),
        "limit",
        "0",
    );
    let zero_limit = StalledPolicy::default().max_stalled(1).limit(0);
    let err = ctx.store.sweep_stalled(&ctx.q, zero_limit).await.unwrap_err();
    assert_invalid_option(&err, "limit", "0");
    let zero_stalls = StalledPolicy::default().max_stalled(0).limit(10);
    let err = ctx.store.sweep_stalled(&ctx.q, zero_stalls).await.unwrap_err();
    assert_invalid_option(&err, "max_stalled", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
}

crate::conformance!(
    enqueue_refuses_invalid_queue_names,
    genqueue_refuses_invalid_group_names,
    enqueue_refuses_invalid_caller_ids,
    enqueue_refuses_invalid_kinds_and_writes_nothing,
    enqueue_refuses_a_digits_only_id_made_by_parse_and_writes_nothing,
    enqueue_refuses_an_oversized_payload_and_writes_nothing,
    complete_refuses_an_oversized_output,
    update_data_refuses_an_oversized_payload,
    enqueue_refuses_max_attempts_zero_and_writes_nothing,
    enqueue_refuses_a_zero_wait_for_replicas_and_writes_nothing,
    claim_refuses_n_zero_a_zero_lease_and_max_attempts_zero,
    extend_lock_refuses_a_zero_lease,
    retry_refuses_max_attempts_zero,
    durations_from_2_pow_53_ms_are_refused_and_write_nothing,
    list_refuses_a_zero_limit,
    list_refuses_a_cursor_that_does_not_parse,
    set_group_limit_refuses_zero,
    redrive_refuses_zero_extra_attempts,
    reap_promote_and_sweep_stalled_refuse_zero_limits,
);
