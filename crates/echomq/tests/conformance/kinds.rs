//! Kinds: a claim of some kinds takes only their jobs (flat jobs from their sets by kind, in rank
//! order across them; a lane whose head is of another kind passed over untouched), the wakes by
//! kind, the counts by kind, and a queue an earlier version wrote filled by kind at its first such
//! claim.

use std::time::Duration;

use echomq::store::{ClaimRequest, Completion, SettleOptions};
use echomq::{ClaimedJob, Kinds, NewJob};

use crate::harness::{assert_slot_invariant, Ctx};
use crate::steps::{claim, group, payloads, LEASE, MAX};

/// A job of `kind` (`None`: raw) whose payload is `p`.
fn job(p: &str, kind: Option<&str>) -> NewJob {
    let j = NewJob::new(p.as_bytes());
    match kind {
        Some(k) => j.with_kind(k),
        None => j,
    }
}

async fn claim_kinds(ctx: &Ctx, n: u32, kinds: Kinds) -> Vec<ClaimedJob> {
    ctx.store
        .claim(&ctx.q, ClaimRequest::new(n, LEASE).max_attempts(MAX).kinds(kinds))
        .await
        .unwrap()
        .jobs
}

/// a1 b1 r1 a2 b2 (r: raw), flat
async fn enqueue_mixed(ctx: &Ctx) {
    let jobs = [
        job("a1", Some("a")),
        job("b1", Some("b")),
        job("r1", None),
        job("a2", Some("a")),
        job("b2", Some("b")),
    ];
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
}

pub async fn claim_of_some_kinds_takes_only_their_flat_jobs_in_rank_order(ctx: &Ctx) {
    enqueue_mixed(ctx).await;
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!(
        counts.ready_by_kind,
        [(None, 1), (Some("a".into()), 2), (Some("b".into()), 2)],
        "counted by kind"
    );
    assert_eq!(payloads(&claim_kinds(ctx, 10, Kinds::only(["a"])).await), ["a1", "a2"]);
    // two sets merged by rank: FIFO across the kinds run
    let got = claim_kinds(ctx, 10, Kinds::only(["b"]).with_raw()).await;
    assert_eq!(payloads(&got), ["b1", "r1", "b2"]);
    assert_eq!(got[1].kind, None, "the raw job");
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.pending, counts.active), (0, 5));
    assert!(counts.ready_by_kind.is_empty(), "{:?}", counts.ready_by_kind);
    assert_eq!(ctx.probe.set_len("pending").await, 0, "each left pending too");
    assert!(
        claim(ctx, 10).await.is_empty(),
        "nothing left for a claim of every kind"
    );
}

pub async fn claim_of_some_kinds_keeps_priorities_across_its_kinds(ctx: &Ctx) {
    let jobs = [
        job("a-low", Some("a")).with_priority(5),
        job("b-mid", Some("b")).with_priority(2),
        job("a-top", Some("a")),
        job("c-top", Some("c")),
    ];
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    let got = claim_kinds(ctx, 10, Kinds::only(["a", "b"])).await;
    assert_eq!(payloads(&got), ["a-top", "b-mid", "a-low"]);
    assert_eq!(payloads(&claim(ctx, 10).await), ["c-top"]);
}

pub async fn claim_of_every_kind_takes_its_jobs_out_of_their_kinds_sets(ctx: &Ctx) {
    enqueue_mixed(ctx).await;
    assert_eq!(payloads(&claim(ctx, 3).await), ["a1", "b1", "r1"]);
    assert_eq!(
        payloads(&claim_kinds(ctx, 10, Kinds::only(["a", "b"])).await),
        ["a2", "b2"]
    );
    for kind in ["a", "b", ""] {
        assert_eq!(ctx.probe.set_len(&format!("pending:{kind}")).await, 0, "kind {kind:?}");
    }
}

pub async fn claim_of_some_kinds_leaves_the_flat_set_on_the_ring_for_other_kinds(ctx: &Ctx) {
    enqueue_mixed(ctx).await;
    assert_eq!(payloads(&claim_kinds(ctx, 10, Kinds::only(["a"])).await), ["a1", "a2"]);
    assert_eq!(ctx.probe.ring().await, ["~"], "b's and the raw jobs wait: '~' stays");
    assert!(claim_kinds(ctx, 10, Kinds::only(["a"])).await.is_empty());
    assert_eq!(ctx.probe.ring().await, ["~"]);
    assert_eq!(payloads(&claim(ctx, 10).await), ["b1", "r1", "b2"]);
    assert!(claim(ctx, 1).await.is_empty());
    assert!(
        ctx.probe.ring().await.is_empty(),
        "the flat set is off the ring once empty"
    );
}

pub async fn claim_of_some_kinds_passes_over_a_lane_whose_head_is_another_kind(ctx: &Ctx) {
    let g = group("g");
    let lane = [job("b1", Some("b")), job("a1", Some("a")), job("a2", Some("a"))];
    let ids = ctx.store.genqueue(&ctx.q, &g, &lane).await.unwrap();
    // FIFO within the group: a1 waits behind b1, whatever consumer of a asks; the pass forwards a
    // wake to b's consumers (the lane's own token went to wake_any, which a pool of a may take)
    ctx.probe.clear_wakes().await;
    assert!(claim_kinds(ctx, 10, Kinds::only(["a"])).await.is_empty());
    assert_eq!(ctx.probe.list_len("wake:b").await, 1, "forwarded to b");
    // the head's kind is kept: a second pass reads no row (the row's kind changed by hand is not
    // seen while the kept one stands)
    assert!(ctx.probe.group_fields().await.iter().any(|f| f == "hk:g"), "kept");
    ctx.probe.set_row_field(ids[0].id(), "kind", "a").await;
    assert!(claim_kinds(ctx, 10, Kinds::only(["a"])).await.is_empty());
    ctx.probe.set_row_field(ids[0].id(), "kind", "b").await;
    assert_eq!(
        ctx.probe.slots().await.get("g").copied().unwrap_or(0),
        0,
        "no slot taken"
    );
    assert_eq!(ctx.probe.ring().await, ["g"], "still on the ring, in order");
    let b1 = claim_kinds(ctx, 10, Kinds::only(["b"])).await;
    assert_eq!(payloads(&b1), ["b1"]);
    // the group's limit (1) holds: a1 waits for b1's slot
    assert!(claim_kinds(ctx, 10, Kinds::only(["a"])).await.is_empty());
    let done = Completion::new(b1[0].id.clone(), b1[0].token);
    ctx.store
        .complete(&ctx.q, &done, SettleOptions::default())
        .await
        .unwrap();
    assert!(claim_kinds(ctx, 10, Kinds::only(["b"])).await.is_empty(), "a1 is no b");
    assert_eq!(payloads(&claim_kinds(ctx, 10, Kinds::only(["a"])).await), ["a1"]);
    assert!(
        !ctx.probe.group_fields().await.iter().any(|f| f.starts_with("hk:")),
        "dropped once taken"
    );
    assert_slot_invariant(ctx).await;
}

pub async fn claim_of_some_kinds_takes_flat_jobs_past_lanes_of_other_kinds(ctx: &Ctx) {
    ctx.store
        .genqueue(&ctx.q, &group("g"), &[job("b1", Some("b"))])
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("h"), &[job("c1", Some("c"))])
        .await
        .unwrap();
    ctx.store
        .enqueue(&ctx.q, &[job("a1", Some("a")), job("a2", Some("a"))])
        .await
        .unwrap();
    assert_eq!(payloads(&claim_kinds(ctx, 10, Kinds::only(["a"])).await), ["a1", "a2"]);
    let mut rest = payloads(&claim(ctx, 10).await);
    rest.sort();
    assert_eq!(rest, ["b1", "c1"], "the lanes passed over wait for their kinds");
}

pub async fn claim_of_some_kinds_fills_the_sets_by_kind_of_a_queue_an_earlier_version_wrote(ctx: &Ctx) {
    enqueue_mixed(ctx).await;
    ctx.probe.forget_kinds(&["a", "b", ""]).await;
    assert_eq!(payloads(&claim_kinds(ctx, 10, Kinds::only(["b"])).await), ["b1", "b2"]);
    assert_eq!(ctx.probe.set_len("pending:a").await, 2, "every kind filled");
    assert_eq!(
        payloads(&claim_kinds(ctx, 10, Kinds::only(["a"]).with_raw()).await),
        ["a1", "r1", "a2"]
    );
}

pub async fn enqueue_wakes_the_consumers_of_its_jobs_kinds_and_of_every_kind(ctx: &Ctx) {
    ctx.store
        .enqueue(&ctx.q, &[job("a1", Some("a")), job("a2", Some("a")), job("r", None)])
        .await
        .unwrap();
    assert_eq!(
        ctx.probe.list_len("wake").await,
        3,
        "one a token per job for every kind"
    );
    assert_eq!(ctx.probe.list_len("wake:a").await, 2);
    assert_eq!(ctx.probe.list_len("wake:").await, 1, "the raw job's");
    assert_eq!(ctx.probe.list_len("wake:b").await, 0);
    ctx.store
        .genqueue(&ctx.q, &group("g"), &[job("g1", Some("b"))])
        .await
        .unwrap();
    assert_eq!(
        ctx.probe.list_len("wake_any").await,
        1,
        "a lane's job: its kind unknown to the wake"
    );
    assert_eq!(ctx.probe.list_len("wake:b").await, 0);
}

pub async fn park_of_some_kinds_is_not_woken_by_other_kinds(ctx: &Ctx) {
    // a verb first: the embedded store reports a commit of another connection it has not seen
    // yet (the harness's setup) as a possible wake from another process
    ctx.store.counts(&ctx.q).await.unwrap();
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    // short: the embedded store's park also ends woken when the file changed under it, as its
    // checkpointer's truncation of an idle file (half a second on) does
    let parked = tokio::spawn(async move { store.park(&q, &Kinds::only(["a"]), Duration::from_millis(250)).await });
    tokio::time::sleep(Duration::from_millis(30)).await;
    ctx.store.enqueue(&ctx.q, &[job("b1", Some("b"))]).await.unwrap();
    assert!(!parked.await.unwrap().unwrap(), "a b job does not wake a consumer of a");
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    let parked = tokio::spawn(async move { store.park(&q, &Kinds::only(["a"]), Duration::MAX).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    ctx.store.enqueue(&ctx.q, &[job("a1", Some("a"))]).await.unwrap();
    let woken = tokio::time::timeout(Duration::from_secs(5), parked)
        .await
        .expect("woken by its kind");
    assert!(woken.unwrap().unwrap());
}

pub async fn claim_refuses_an_empty_list_of_kinds_and_a_kind_that_is_no_name(ctx: &Ctx) {
    let req = |kinds: Kinds| ClaimRequest::new(1, LEASE).kinds(kinds);
    let e = ctx
        .store
        .claim(&ctx.q, req(Kinds::only(Vec::<String>::new())))
        .await
        .unwrap_err();
    assert!(matches!(e, echomq::Error::InvalidOption { field: "kinds", .. }), "{e}");
    let e = ctx
        .store
        .claim(&ctx.q, req(Kinds::only(["has space"])))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("invalid job kind \"has space\""), "{e}");
}

pub async fn drain_deletes_the_sets_by_kind_and_obliterate_every_kind_key(ctx: &Ctx) {
    let exact = echomq::RateLimit::new(5, Duration::from_secs(1))
        .unwrap()
        .exact_window()
        .unwrap();
    ctx.store
        .set_rate_limit(&ctx.q, &echomq::RateTarget::Kind("a".into()), Some(exact))
        .await
        .unwrap();
    enqueue_mixed(ctx).await;
    assert_eq!(claim(ctx, 1).await.len(), 1, "a start logged");
    ctx.store.drain(&ctx.q).await.unwrap();
    for kind in ["a", "b", ""] {
        assert_eq!(ctx.probe.set_len(&format!("pending:{kind}")).await, 0, "kind {kind:?}");
    }
    assert!(ctx.store.counts(&ctx.q).await.unwrap().ready_by_kind.is_empty());
    enqueue_mixed(ctx).await;
    ctx.store.obliterate(&ctx.q, true).await.unwrap();
    let left = ctx.probe.keys().await;
    assert!(left.is_empty(), "obliterate left {left:?}");
}

/// The one job of kind `k` claimed by a consumer of `k` (and none by a consumer of `other`).
async fn only_for(ctx: &Ctx, k: &str, other: &str) -> ClaimedJob {
    assert!(
        claim_kinds(ctx, 10, Kinds::only([other])).await.is_empty(),
        "not for {other}"
    );
    let mut got = claim_kinds(ctx, 10, Kinds::only([k])).await;
    assert_eq!(got.len(), 1, "one job of kind {k}");
    got.remove(0)
}

pub async fn promote_release_retry_reap_and_redrive_make_a_job_ready_under_its_kind(ctx: &Ctx) {
    // promote: a delayed job
    let delayed = job("a1", Some("a")).with_delay(Duration::from_millis(1));
    ctx.store.enqueue(&ctx.q, &[delayed]).await.unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(
        ctx.store
            .promote(&ctx.q, 10, Duration::from_secs(60))
            .await
            .unwrap()
            .moved,
        1
    );
    let j = only_for(ctx, "a", "b").await;
    // release at once
    ctx.store.release(&ctx.q, &j.id, j.token, Duration::ZERO).await.unwrap();
    let j = only_for(ctx, "a", "b").await;
    // retry at once
    let retry = echomq::store::RetryRequest::new("boom");
    ctx.store.retry(&ctx.q, &j.id, j.token, &retry).await.unwrap();
    let j = only_for(ctx, "a", "b").await;
    // reap: a lapsed lease
    let short = ClaimRequest::new(1, Duration::from_millis(1))
        .max_attempts(10)
        .kinds(Kinds::only(["a"]));
    ctx.store.release(&ctx.q, &j.id, j.token, Duration::ZERO).await.unwrap();
    assert_eq!(ctx.store.claim(&ctx.q, short).await.unwrap().jobs.len(), 1);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(ctx.store.reap(&ctx.q, 10, None).await.unwrap(), 1);
    let j = only_for(ctx, "a", "b").await;
    // redrive a dead job
    let dead = echomq::store::DiscardRequest::new("no");
    ctx.store.discard(&ctx.q, &j.id, j.token, &dead).await.unwrap();
    ctx.store.redrive(&ctx.q, &j.id, 1).await.unwrap();
    let j = only_for(ctx, "a", "b").await;
    assert_eq!(j.payload, b"a1");
}

pub async fn claim_under_a_kind_rate_limit_holds_that_kind_back_and_lets_the_others_go(ctx: &Ctx) {
    let once = echomq::RateLimit::new(1, Duration::from_secs(3600)).unwrap();
    let target = echomq::RateTarget::Kind("a".into());
    ctx.store.set_rate_limit(&ctx.q, &target, Some(once)).await.unwrap();
    let limits = ctx.store.rate_limits(&ctx.q).await.unwrap();
    assert_eq!(limits.kinds.len(), 1);
    assert_eq!(
        (limits.kinds[0].kind.as_str(), limits.kinds[0].state.limit),
        ("a", once)
    );
    let jobs = [
        job("a1", Some("a")),
        job("b1", Some("b")),
        job("a2", Some("a")),
        job("r1", None),
    ];
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    // a lane headed by a job of a: passed over while a's limit admits none, its order kept
    ctx.store
        .genqueue(&ctx.q, &group("g"), &[job("a3", Some("a")), job("b3", Some("b"))])
        .await
        .unwrap();
    let req = ClaimRequest::new(10, LEASE).max_attempts(MAX);
    let got = ctx.store.claim(&ctx.q, req.clone()).await.unwrap();
    let mut names = payloads(&got.jobs);
    names.sort();
    // one start of a (a1: the flat set comes first on the ring); the lane, headed by a3, passed over
    // with b3 behind it (FIFO within the group); b and the raw job go on
    assert_eq!(names, ["a1", "b1", "r1"]);
    assert!(
        got.wait.is_some_and(|w| w > Duration::from_secs(3000)),
        "told a's next admission: {:?}",
        got.wait
    );
    assert!(!got.queue_limited, "not the queue's own limit");
    assert!(claim_kinds(ctx, 10, Kinds::only(["a"])).await.is_empty(), "a held back");
    let limits = ctx.store.rate_limits(&ctx.q).await.unwrap();
    assert!(limits.kinds[0].state.wait > Duration::from_secs(3000));
    // lifted: a's jobs go on, the lane's in order
    ctx.store.set_rate_limit(&ctx.q, &target, None).await.unwrap();
    assert!(ctx.store.rate_limits(&ctx.q).await.unwrap().kinds.is_empty());
    let mut rest = payloads(&claim(ctx, 10).await);
    rest.sort();
    assert_eq!(rest, ["a2", "a3"], "b3 waits for a3's slot");
    assert_slot_invariant(ctx).await;
}

pub async fn set_rate_limit_refuses_a_kind_that_is_no_name(ctx: &Ctx) {
    let limit = echomq::RateLimit::new(1, Duration::from_secs(1)).unwrap();
    let target = echomq::RateTarget::Kind("has space".into());
    let e = ctx
        .store
        .set_rate_limit(&ctx.q, &target, Some(limit))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("invalid job kind"), "{e}");
}

pub async fn claim_under_a_held_kind_takes_its_other_kinds_whole_batch(ctx: &Ctx) {
    let once = echomq::RateLimit::new(1, Duration::from_secs(3600)).unwrap();
    let target = echomq::RateTarget::Kind("a".into());
    ctx.store.set_rate_limit(&ctx.q, &target, Some(once)).await.unwrap();
    let jobs = [job("a1", Some("a")), job("a2", Some("a"))];
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    assert_eq!(claim(ctx, 1).await.len(), 1, "a's one start");
    // other members on the ring: the flat set must not step aside while b's jobs may start
    ctx.store
        .genqueue(&ctx.q, &group("g1"), &[job("g1", Some("c"))])
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("g2"), &[job("g2", Some("c"))])
        .await
        .unwrap();
    let bs: Vec<NewJob> = (1..=5).map(|i| job(&format!("b{i}"), Some("b"))).collect();
    ctx.store.enqueue(&ctx.q, &bs).await.unwrap();
    let got = claim_kinds(ctx, 10, Kinds::only(["a", "b"])).await;
    assert_eq!(payloads(&got), ["b1", "b2", "b3", "b4", "b5"]);
}

pub async fn claim_of_some_kinds_skips_an_entry_that_left_pending_without_touching_its_job(ctx: &Ctx) {
    let ids = ctx
        .store
        .enqueue(&ctx.q, &[job("a1", Some("a")), job("a2", Some("a"))])
        .await
        .unwrap();
    // a claim that knew nothing of the sets by kind took a1: out of pending, its row active
    assert!(ctx.probe.remove_from_set("pending", ids[0].id()).await);
    ctx.probe.set_row_field(ids[0].id(), "state", "active").await;
    let got = claim_kinds(ctx, 10, Kinds::only(["a"])).await;
    assert_eq!(payloads(&got), ["a2"]);
    assert_eq!(
        ctx.probe.row_field(ids[0].id(), "state").await.as_deref(),
        Some("active"),
        "left alone"
    );
    assert_eq!(ctx.probe.set_len("pending:a").await, 0, "the stale entry dropped");
}

pub async fn remove_of_a_lane_head_forgets_the_kind_kept_of_it(ctx: &Ctx) {
    let x = || echomq::JobId::new("x").unwrap();
    let g = group("g");
    ctx.store
        .genqueue(&ctx.q, &g, &[job("old", Some("b")).with_id(x())])
        .await
        .unwrap();
    assert!(
        claim_kinds(ctx, 10, Kinds::only(["a"])).await.is_empty(),
        "passed over, its kind kept"
    );
    ctx.store.remove(&ctx.q, &x(), false).await.unwrap();
    assert!(
        !ctx.probe.group_fields().await.iter().any(|f| f.starts_with("hk:")),
        "forgotten"
    );
    ctx.store
        .genqueue(&ctx.q, &g, &[job("new", Some("a")).with_id(x())])
        .await
        .unwrap();
    assert_eq!(payloads(&claim_kinds(ctx, 10, Kinds::only(["a"])).await), ["new"]);
}

crate::conformance!(
    claim_under_a_held_kind_takes_its_other_kinds_whole_batch,
    claim_of_some_kinds_skips_an_entry_that_left_pending_without_touching_its_job,
    remove_of_a_lane_head_forgets_the_kind_kept_of_it,
    claim_under_a_kind_rate_limit_holds_that_kind_back_and_lets_the_others_go,
    set_rate_limit_refuses_a_kind_that_is_no_name,
    promote_release_retry_reap_and_redrive_make_a_job_ready_under_its_kind,
    claim_of_some_kinds_takes_only_their_flat_jobs_in_rank_order,
    claim_of_some_kinds_keeps_priorities_across_its_kinds,
    claim_of_every_kind_takes_its_jobs_out_of_their_kinds_sets,
    claim_of_some_kinds_leaves_the_flat_set_on_the_ring_for_other_kinds,
    claim_of_some_kinds_passes_over_a_lane_whose_head_is_another_kind,
    claim_of_some_kinds_takes_flat_jobs_past_lanes_of_other_kinds,
    claim_of_some_kinds_fills_the_sets_by_kind_of_a_queue_an_earlier_version_wrote,
    enqueue_wakes_the_consumers_of_its_jobs_kinds_and_of_every_kind,
    park_of_some_kinds_is_not_woken_by_other_kinds,
    claim_refuses_an_empty_list_of_kinds_and_a_kind_that_is_no_name,
    drain_deletes_the_sets_by_kind_and_obliterate_every_kind_key,
);
