//! Rate limits: the queue's own gates every start, a group's (its own or the default) gates its
//! lane and takes a limited group off the ring until its next admission; every claim says how long
//! until a limit holding work back admits a start again; set_rate_limit and rate_limits.

use std::time::Duration;

use echomq::store::{Claimed, LimitTarget};
use echomq::{JobState, RateLimit, RateTarget};

use crate::harness::Ctx;
use crate::steps::{group, named, payloads, LEASE, MAX};

fn limit(text: &str, burst: u32) -> RateLimit {
    text.parse::<RateLimit>().unwrap().with_burst(burst).unwrap()
}

async fn set(ctx: &Ctx, target: RateTarget, l: Option<RateLimit>) {
    ctx.store.set_rate_limit(&ctx.q, &target, l).await.unwrap();
}

async fn claim(ctx: &Ctx, n: u32) -> Claimed {
    ctx.store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(n, LEASE).max_attempts(MAX))
        .await
        .unwrap()
}

/// Lets every group run up to 100 jobs at once, so only the rate limits hold a lane back.
async fn wide_groups(ctx: &Ctx) {
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 100)
        .await
        .unwrap();
}

fn within(wait: Option<Duration>, low: Duration, high: Duration) {
    let w = wait.unwrap_or_else(|| panic!("a wait between {low:?} and {high:?}, got none"));
    assert!(low <= w && w <= high, "a wait between {low:?} and {high:?}, got {w:?}");
}

const HOUR: Duration = Duration::from_secs(3600);

pub async fn claim_under_a_queue_rate_limit_starts_its_burst_then_one_per_interval_and_says_when(ctx: &Ctx) {
    // 10/1s: one start per 100 ms, three at once
    set(ctx, RateTarget::Queue, Some(limit("10/1s", 3))).await;
    ctx.store
        .enqueue(&ctx.q, &named(&["a", "b", "c", "d", "e", "f"]))
        .await
        .unwrap();
    let first = claim(ctx, 10).await;
    assert_eq!(payloads(&first), ["a", "b", "c"], "the burst, in claim order");
    // the fourth start's slot: 300 ms of TAT ahead, less the tolerance of two intervals
    within(first.wait, Duration::from_millis(80), Duration::from_millis(100));
    assert!(first.queue_limited, "the queue's own limit: nothing starts sooner");
    let none = claim(ctx, 10).await;
    assert!(none.is_empty(), "nothing between two slots: {:?}", payloads(&none));
    within(none.wait, Duration::from_millis(1), Duration::from_millis(100));
    tokio::time::sleep(none.wait.unwrap()).await;
    let next = claim(ctx, 10).await;
    // one per slot: a second one only when this claim came a whole interval late
    assert!(
        (1..=2).contains(&next.len()),
        "the next slot's start: {:?}",
        payloads(&next)
    );
    assert_eq!(payloads(&next)[0], "d");
}

pub async fn claim_under_a_queue_rate_limit_admits_no_start_before_its_slot(ctx: &Ctx) {
    // 5/1s: one start per 200 ms, none of it early (no window of a second holds a sixth)
    set(ctx, RateTarget::Queue, Some(limit("5/1s", 1))).await;
    ctx.store.enqueue(&ctx.q, &named(&["a", "b"])).await.unwrap();
    let first = claim(ctx, 10).await;
    assert_eq!(payloads(&first), ["a"]);
    let none = claim(ctx, 10).await;
    assert!(none.is_empty());
    within(none.wait, Duration::from_millis(150), Duration::from_millis(200));
    // a claim 2 ms before the slot is refused, told the little that is left
    tokio::time::sleep(none.wait.unwrap().saturating_sub(Duration::from_millis(2))).await;
    let mut second = claim(ctx, 10).await;
    if second.is_empty() {
        within(second.wait, Duration::from_micros(1), Duration::from_millis(3));
        tokio::time::sleep(second.wait.unwrap()).await;
        second = claim(ctx, 10).await;
    }
    // (a loaded machine may have sent it past the slot: admitted then, and on time either way)
    assert_eq!(payloads(&second), ["b"]);
    // on the store's clock (each row's lease deadline less the lease): a whole interval apart
    let started = |id: &echomq::JobId| {
        let id = id.clone();
        async move {
            let row = ctx.store.get(&ctx.q, &id).await.unwrap().expect("the row");
            row.score.expect("a lease deadline")
        }
    };
    let (a, b) = (started(&first.jobs[0].id).await, started(&second.jobs[0].id).await);
    assert!(b - a >= 200, "the second start came {} ms after the first", b - a);
}

pub async fn claim_under_an_exact_rate_limit_holds_every_window_to_its_max(ctx: &Ctx) {
    // 3/1s with a burst of 3: the burst at once, then GCRA alone would admit the next in 333 ms;
    // the window admits it only once the first start is a second old
    let exact = limit("3/1s", 3).exact_window().unwrap();
    set(ctx, RateTarget::Queue, Some(exact)).await;
    ctx.store
        .enqueue(&ctx.q, &named(&["a", "b", "c", "d", "e", "f", "z"]))
        .await
        .unwrap();
    assert_eq!(payloads(&claim(ctx, 10).await), ["a", "b", "c"]);
    let none = claim(ctx, 10).await;
    assert!(none.is_empty(), "{:?}", payloads(&none));
    // a second after the burst, less the time between the two claims (GCRA alone: 333 ms)
    within(none.wait, Duration::from_millis(400), Duration::from_secs(1));
    assert!(none.queue_limited);
    let reported = ctx.store.rate_limits(&ctx.q).await.unwrap().queue.expect("the limit");
    assert_eq!(reported.limit, exact);
    assert!(reported.wait > Duration::from_millis(350), "{reported:?}");
    tokio::time::sleep(none.wait.unwrap()).await;
    assert_eq!(
        payloads(&claim(ctx, 10).await),
        ["d", "e", "f"],
        "a window later, the next three"
    );
    // a group's exact limit keeps its own log
    wide_groups(ctx).await;
    set(ctx, RateTarget::Queue, None).await;
    set(
        ctx,
        RateTarget::Group(group("g")),
        Some(limit("2/1h", 2).exact_window().unwrap()),
    )
    .await;
    ctx.store
        .genqueue(&ctx.q, &group("g"), &named(&["g1", "g2", "g3"]))
        .await
        .unwrap();
    let mut p = payloads(&claim(ctx, 10).await);
    p.sort();
    assert_eq!(p, ["g1", "g2", "z"], "the flat job left, and the group's burst");
    let held = claim(ctx, 10).await;
    assert!(held.is_empty());
    within(held.wait, HOUR - Duration::from_secs(60), HOUR);
    // a new limit starts afresh, its log dropped
    set(
        ctx,
        RateTarget::Group(group("g")),
        Some(limit("2/1h", 2).exact_window().unwrap()),
    )
    .await;
    assert_eq!(payloads(&claim(ctx, 10).await), ["g3"]);
}

pub async fn claim_under_a_queue_rate_limit_gates_lane_jobs_too(ctx: &Ctx) {
    wide_groups(ctx).await;
    set(ctx, RateTarget::Queue, Some(limit("1/1h", 2))).await;
    ctx.store
        .genqueue(&ctx.q, &group("a"), &named(&["a1", "a2"]))
        .await
        .unwrap();
    ctx.store.enqueue(&ctx.q, &named(&["f1", "f2"])).await.unwrap();
    let got = claim(ctx, 10).await;
    assert_eq!(got.len(), 2, "the burst of two, lane and flat jobs alike");
    within(got.wait, HOUR / 2, HOUR);
    assert!(claim(ctx, 10).await.is_empty());
}

pub async fn claim_under_a_group_rate_limit_throttles_that_group_only(ctx: &Ctx) {
    wide_groups(ctx).await;
    set(ctx, RateTarget::Group(group("slow")), Some(limit("1/1h", 1))).await;
    ctx.store
        .genqueue(&ctx.q, &group("slow"), &named(&["s1", "s2", "s3"]))
        .await
        .unwrap();
    ctx.store
        .genqueue(&ctx.q, &group("fast"), &named(&["x1", "x2", "x3"]))
        .await
        .unwrap();
    ctx.store.enqueue(&ctx.q, &named(&["f1", "f2"])).await.unwrap();
    let got = claim(ctx, 100).await;
    let mut p = payloads(&got);
    p.sort();
    assert_eq!(p, ["f1", "f2", "s1", "x1", "x2", "x3"], "the limited group starts once");
    within(got.wait, HOUR - Duration::from_secs(60), HOUR);
    assert!(!got.queue_limited, "a group's limit: other work may start sooner");
    assert!(
        !ctx.probe.ring().await.contains(&"slow".to_string()),
        "a throttled group is off the ring"
    );
    let limits = ctx.store.rate_limits(&ctx.q).await.unwrap();
    assert_eq!(limits.throttled, 1);
    // its waiting jobs are still listed and counted
    let listed = ctx.store.list(&ctx.q, JobState::Pending, None, 100).await.unwrap().ids;
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().pending, 2);
    let again = claim(ctx, 100).await;
    assert!(again.is_empty(), "s2 waits: {:?}", payloads(&again));
    within(again.wait, HOUR - Duration::from_secs(60), HOUR);
    // a new job of the throttled group does not put it back on the ring
    ctx.store
        .genqueue(&ctx.q, &group("slow"), &named(&["s4"]))
        .await
        .unwrap();
    assert!(claim(ctx, 100).await.is_empty());
    crate::harness::assert_slot_invariant(ctx).await;
}

pub async fn claim_takes_a_throttled_group_back_when_its_limit_admits_again(ctx: &Ctx) {
    wide_groups(ctx).await;
    // one start per 200 ms
    set(ctx, RateTarget::Group(group("g")), Some(limit("5/1s", 1))).await;
    ctx.store
        .genqueue(&ctx.q, &group("g"), &named(&["g1", "g2", "g3"]))
        .await
        .unwrap();
    let first = claim(ctx, 10).await;
    assert_eq!(payloads(&first), ["g1"]);
    within(first.wait, Duration::from_millis(150), Duration::from_millis(200));
    tokio::time::sleep(first.wait.unwrap()).await;
    let second = claim(ctx, 10).await;
    assert_eq!(payloads(&second), ["g2"], "back by itself at its admission");
    assert_eq!(ctx.store.rate_limits(&ctx.q).await.unwrap().throttled, 1);
    crate::harness::assert_slot_invariant(ctx).await;
}

pub async fn claim_gives_each_group_under_the_default_limit_its_own_budget(ctx: &Ctx) {
    wide_groups(ctx).await;
    set(ctx, RateTarget::GroupDefault, Some(limit("1/1h", 1))).await;
    set(ctx, RateTarget::Group(group("own")), Some(limit("1000/1s", 10))).await;
    for g in ["a", "b", "c", "own"] {
        let jobs: Vec<String> = (1..=3).map(|i| format!("{g}{i}")).collect();
        let jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
        ctx.store.genqueue(&ctx.q, &group(g), &named(&jobs)).await.unwrap();
    }
    let mut p = payloads(&claim(ctx, 100).await);
    p.sort();
    assert_eq!(
        p,
        ["a1", "b1", "c1", "own1", "own2", "own3"],
        "one each under the default; a group's own limit instead of it"
    );
    assert_eq!(ctx.store.rate_limits(&ctx.q).await.unwrap().throttled, 3);
}

pub async fn set_rate_limit_off_puts_a_throttled_group_back_at_once(ctx: &Ctx) {
    wide_groups(ctx).await;
    let g = RateTarget::Group(group("g"));
    set(ctx, g.clone(), Some(limit("1/1h", 1))).await;
    ctx.store
        .genqueue(&ctx.q, &group("g"), &named(&["g1", "g2", "g3"]))
        .await
        .unwrap();
    assert_eq!(payloads(&claim(ctx, 10).await), ["g1"]);
    assert!(claim(ctx, 10).await.is_empty());
    set(ctx, g, None).await;
    let got = claim(ctx, 10).await;
    assert_eq!(payloads(&got), ["g2", "g3"]);
    assert_eq!(got.wait, None, "no limit holds anything back");
    let limits = ctx.store.rate_limits(&ctx.q).await.unwrap();
    assert!(limits.groups.is_empty() && limits.throttled == 0, "{limits:?}");
    crate::harness::assert_slot_invariant(ctx).await;
}

pub async fn set_rate_limit_of_the_default_restarts_every_group_it_held(ctx: &Ctx) {
    wide_groups(ctx).await;
    set(ctx, RateTarget::GroupDefault, Some(limit("1/1h", 1))).await;
    for g in ["a", "b"] {
        let jobs = [format!("{g}1"), format!("{g}2")];
        let jobs: Vec<&str> = jobs.iter().map(String::as_str).collect();
        ctx.store.genqueue(&ctx.q, &group(g), &named(&jobs)).await.unwrap();
    }
    assert_eq!(claim(ctx, 10).await.len(), 2);
    assert!(claim(ctx, 10).await.is_empty());
    // a new default: each group's budget starts afresh under it
    set(ctx, RateTarget::GroupDefault, Some(limit("1/1h", 1))).await;
    let mut p = payloads(&claim(ctx, 10).await);
    p.sort();
    assert_eq!(p, ["a2", "b2"]);
}

pub async fn set_rate_limit_on_the_queue_restarts_its_budget(ctx: &Ctx) {
    set(ctx, RateTarget::Queue, Some(limit("1/1h", 1))).await;
    ctx.store.enqueue(&ctx.q, &named(&["a", "b", "c"])).await.unwrap();
    assert_eq!(payloads(&claim(ctx, 10).await), ["a"]);
    let none = claim(ctx, 10).await;
    assert!(none.is_empty());
    within(none.wait, HOUR - Duration::from_secs(60), HOUR);
    set(ctx, RateTarget::Queue, Some(limit("1/1h", 1))).await;
    assert_eq!(payloads(&claim(ctx, 10).await), ["b"]);
    set(ctx, RateTarget::Queue, None).await;
    let rest = claim(ctx, 10).await;
    assert_eq!(payloads(&rest), ["c"]);
    assert_eq!(rest.wait, None);
}

pub async fn claim_with_no_rate_limit_reports_no_wait(ctx: &Ctx) {
    assert_eq!(claim(ctx, 10).await.wait, None, "an empty queue");
    ctx.store.enqueue(&ctx.q, &named(&["a", "b"])).await.unwrap();
    let got = claim(ctx, 10).await;
    assert_eq!((got.len(), got.wait, got.queue_limited), (2, None, false));
}

pub async fn rate_limits_reports_each_limit_and_its_state(ctx: &Ctx) {
    let none = ctx.store.rate_limits(&ctx.q).await.unwrap();
    assert_eq!(none, Default::default(), "a queue with no limit");
    wide_groups(ctx).await;
    set(ctx, RateTarget::Queue, Some(limit("200/1s", 1))).await;
    set(ctx, RateTarget::GroupDefault, Some(limit("5/1m", 2))).await;
    set(ctx, RateTarget::Group(group("x")), Some(limit("1/1h", 1))).await;
    set(ctx, RateTarget::Group(group("idle")), Some(limit("3/1s", 1))).await;
    ctx.store
        .genqueue(&ctx.q, &group("x"), &named(&["x1", "x2"]))
        .await
        .unwrap();
    assert_eq!(claim(ctx, 10).await.len(), 1);
    let l = ctx.store.rate_limits(&ctx.q).await.unwrap();
    let q = l.queue.expect("the queue's limit");
    assert_eq!(q.limit, limit("200/1s", 1));
    assert!(q.wait <= Duration::from_millis(5), "{:?}", q.wait);
    assert_eq!(l.group_default, Some(limit("5/1m", 2)));
    let groups: Vec<(&str, RateLimit)> = l.groups.iter().map(|g| (g.group.as_str(), g.state.limit)).collect();
    assert_eq!(groups, [("idle", limit("3/1s", 1)), ("x", limit("1/1h", 1))]);
    assert_eq!(l.groups[0].state.wait, Duration::ZERO, "idle admits a start now");
    assert!(l.groups[1].state.wait > HOUR - Duration::from_secs(60));
    assert_eq!(l.throttled, 1);
    assert!(l.next_admission.is_some_and(|w| w > HOUR - Duration::from_secs(60)));
}

pub async fn obliterate_removes_the_rate_limits_and_their_state(ctx: &Ctx) {
    wide_groups(ctx).await;
    set(ctx, RateTarget::Queue, Some(limit("100/1s", 5).exact_window().unwrap())).await;
    set(
        ctx,
        RateTarget::Group(group("g")),
        Some(limit("1/1h", 1).exact_window().unwrap()),
    )
    .await;
    ctx.store
        .genqueue(&ctx.q, &group("g"), &named(&["g1", "g2"]))
        .await
        .unwrap();
    let got = claim(ctx, 10).await;
    crate::steps::complete(ctx, &got[0]).await;
    ctx.store.obliterate(&ctx.q, true).await.unwrap();
    assert_eq!(ctx.store.rate_limits(&ctx.q).await.unwrap(), Default::default());
    assert!(ctx.probe.keys().await.is_empty(), "{:?}", ctx.probe.keys().await);
}

crate::conformance!(
    claim_under_a_queue_rate_limit_starts_its_burst_then_one_per_interval_and_says_when,
    claim_under_a_queue_rate_limit_admits_no_start_before_its_slot,
    claim_under_an_exact_rate_limit_holds_every_window_to_its_max,
    claim_under_a_queue_rate_limit_gates_lane_jobs_too,
    claim_under_a_group_rate_limit_throttles_that_group_only,
    claim_takes_a_throttled_group_back_when_its_limit_admits_again,
    claim_gives_each_group_under_the_default_limit_its_own_budget,
    set_rate_limit_off_puts_a_throttled_group_back_at_once,
    set_rate_limit_of_the_default_restarts_every_group_it_held,
    set_rate_limit_on_the_queue_restarts_its_budget,
    claim_with_no_rate_limit_reports_no_wait,
    rate_limits_reports_each_limit_and_its_state,
    obliterate_removes_the_rate_limits_and_their_state,
);
