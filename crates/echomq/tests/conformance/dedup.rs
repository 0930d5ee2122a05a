//! Dedup keys on enqueue and genqueue: `until_finished` (one job while it waits or runs), `for`
//! (one job per window, finished or not) and `debounce` (one waiting job taking the last payload,
//! its start pushed back); the reply names the job that holds the key.

use std::time::Duration;

use echomq::store::Enqueued;
use echomq::{Dedup, DedupKey, DedupMode, Error, JobId, JobState, NewJob};

use crate::harness::Ctx;
use crate::steps::{claim, complete, group, payloads};

fn keyed(payload: &str, key: &str, mode: DedupMode) -> NewJob {
    NewJob::new(payload.as_bytes().to_vec()).with_dedup(Dedup::new(DedupKey::new(key).unwrap(), mode).unwrap())
}

async fn one(ctx: &Ctx, job: NewJob) -> Enqueued {
    ctx.store.enqueue(&ctx.q, &[job]).await.unwrap().remove(0)
}

fn new_id(e: &Enqueued) -> JobId {
    match e {
        Enqueued::New(id) => id.clone(),
        other => panic!("a new job, got {other:?}"),
    }
}

async fn data(ctx: &Ctx, id: &JobId) -> String {
    let row = ctx.store.get(&ctx.q, id).await.unwrap().unwrap();
    String::from_utf8(row.payload).unwrap()
}

pub async fn enqueue_with_dedup_until_finished_answers_the_job_that_waits_or_runs(ctx: &Ctx) {
    let u = DedupMode::UntilFinished;
    let a = new_id(&one(ctx, keyed("a", "k", u)).await);
    assert_eq!(one(ctx, keyed("b", "k", u)).await, Enqueued::Deduplicated(a.clone()));
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().pending, 1, "nothing written");
    let running = claim(ctx, 10).await;
    assert_eq!(payloads(&running), ["a"]);
    assert_eq!(
        one(ctx, keyed("c", "k", u)).await,
        Enqueued::Deduplicated(a.clone()),
        "held while it runs"
    );
    complete(ctx, &running[0]).await;
    let d = new_id(&one(ctx, keyed("d", "k", u)).await);
    assert_ne!(d, a, "a finished holder lets the key go");
    // a batch: the key's first job holds it for the rest
    let batch = ctx
        .store
        .enqueue(&ctx.q, &[keyed("e", "k2", u), keyed("f", "k2", u), keyed("g", "k", u)])
        .await
        .unwrap();
    let e = new_id(&batch[0]);
    assert_eq!(batch[1..], [Enqueued::Deduplicated(e), Enqueued::Deduplicated(d)]);
    // a lane's jobs too
    let g = group("g");
    let lane = ctx
        .store
        .genqueue(&ctx.q, &g, &[keyed("h", "k3", u), keyed("i", "k3", u)])
        .await
        .unwrap();
    let h = new_id(&lane[0]);
    assert_eq!(lane[1], Enqueued::Deduplicated(h.clone()));
    assert_eq!(data(ctx, &h).await, "h");
}

pub async fn enqueue_with_dedup_for_a_window_holds_even_once_the_job_finished(ctx: &Ctx) {
    let window = DedupMode::For(Duration::from_millis(1500));
    let a = new_id(&one(ctx, keyed("a", "t", window)).await);
    let job = claim(ctx, 10).await;
    complete(ctx, &job[0]).await;
    assert_eq!(
        one(ctx, keyed("b", "t", window)).await,
        Enqueued::Deduplicated(a.clone()),
        "within the window, finished or not"
    );
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let b = new_id(&one(ctx, keyed("c", "t", window)).await);
    assert_ne!(a, b, "a new window");
    assert_eq!(data(ctx, &b).await, "c");
}

pub async fn enqueue_with_dedup_debounce_gives_the_waiting_job_the_last_payload_and_starts_it_later(ctx: &Ctx) {
    let window = DedupMode::Debounce(Duration::from_millis(300));
    let a = new_id(&one(ctx, keyed("0", "d", window)).await);
    let row = ctx.store.get(&ctx.q, &a).await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Scheduled, "a debounced job waits its window");
    let first_start = row.run_at.unwrap();
    // 100 enqueues of the key in about a second: one job, the last payload
    for i in 1..100 {
        let e = one(ctx, keyed(&i.to_string(), "d", window)).await;
        assert_eq!(e, Enqueued::Debounced(a.clone()), "enqueue {i}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let row = ctx.store.get(&ctx.q, &a).await.unwrap().unwrap();
    assert_eq!(row.payload, b"99");
    assert!(
        row.run_at.unwrap() > first_start + 500,
        "its start pushed back: {row:?}"
    );
    tokio::time::sleep(Duration::from_millis(350)).await;
    ctx.store
        .promote(&ctx.q, 100, echomq::schedule::GRACE_MIN)
        .await
        .unwrap();
    let ran = claim(ctx, 10).await;
    assert_eq!(payloads(&ran), ["99"], "one job, the last payload");
    // once it runs, the key is free: the next enqueue is a new job
    let b = new_id(&one(ctx, keyed("next", "d", window)).await);
    assert_ne!(a, b);
    // within one batch: the first job takes the later payload
    let batch = ctx
        .store
        .enqueue(&ctx.q, &[keyed("x", "d2", window), keyed("y", "d2", window)])
        .await
        .unwrap();
    let x = new_id(&batch[0]);
    assert_eq!(batch[1], Enqueued::Debounced(x.clone()));
    assert_eq!(data(ctx, &x).await, "y");
}

pub async fn enqueue_with_dedup_debounce_takes_back_a_ready_job_that_has_not_started(ctx: &Ctx) {
    let window = DedupMode::Debounce(Duration::from_millis(50));
    let a = new_id(&one(ctx, keyed("0", "d", window)).await);
    tokio::time::sleep(Duration::from_millis(100)).await;
    ctx.store
        .promote(&ctx.q, 100, echomq::schedule::GRACE_MIN)
        .await
        .unwrap();
    assert_eq!(
        ctx.store.get(&ctx.q, &a).await.unwrap().unwrap().state,
        JobState::Pending
    );
    // ready, not started: still waiting, so the push debounces it
    assert_eq!(one(ctx, keyed("1", "d", window)).await, Enqueued::Debounced(a.clone()));
    let row = ctx.store.get(&ctx.q, &a).await.unwrap().unwrap();
    assert_eq!((row.state, row.payload.as_slice()), (JobState::Scheduled, &b"1"[..]));
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!((counts.pending, counts.scheduled), (0, 1), "out of the ready set");
    assert_eq!(counts.oldest_pending_age, None, "out of the pending tally");
    assert!(claim(ctx, 10).await.is_empty(), "nothing to claim during the window");
    tokio::time::sleep(Duration::from_millis(100)).await;
    ctx.store
        .promote(&ctx.q, 100, echomq::schedule::GRACE_MIN)
        .await
        .unwrap();
    assert_eq!(payloads(&claim(ctx, 10).await), ["1"], "one job, the last payload");
    // a lane's ready holder too
    let g = group("g");
    let h = new_id(
        &ctx.store
            .genqueue(&ctx.q, &g, &[keyed("x", "e", window)])
            .await
            .unwrap()[0],
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    ctx.store
        .promote(&ctx.q, 100, echomq::schedule::GRACE_MIN)
        .await
        .unwrap();
    let again = ctx
        .store
        .genqueue(&ctx.q, &g, &[keyed("y", "e", window)])
        .await
        .unwrap();
    assert_eq!(again, [Enqueued::Debounced(h.clone())]);
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!(
        (counts.pending, counts.oldest_pending_age),
        (0, None),
        "out of its lane"
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    ctx.store
        .promote(&ctx.q, 100, echomq::schedule::GRACE_MIN)
        .await
        .unwrap();
    assert_eq!(payloads(&claim(ctx, 10).await), ["y"]);
}

pub async fn enqueue_with_dedup_refuses_bad_keys_and_windows_and_is_gone_after_obliterate(ctx: &Ctx) {
    assert!(matches!(DedupKey::new(""), Err(Error::InvalidName { .. })));
    assert!(matches!(DedupKey::new("a b"), Err(Error::InvalidName { .. })));
    let k = DedupKey::new("k").unwrap();
    assert!(Dedup::new(k.clone(), DedupMode::For(Duration::ZERO)).is_err());
    let too_long = DedupMode::Debounce(echomq::dedup::WINDOW_MAX + Duration::from_millis(1));
    assert!(Dedup::new(k.clone(), too_long).is_err());
    assert!(Dedup::new(k.clone(), DedupMode::For(echomq::dedup::WINDOW_MAX)).is_ok());
    // the fields are public: an enqueue checks the window again, and writes nothing
    let built = NewJob::new("x").with_dedup(Dedup {
        key: k.clone(),
        mode: too_long,
    });
    assert!(matches!(
        ctx.store.enqueue(&ctx.q, &[built]).await,
        Err(Error::InvalidOption { field: "dedup", .. })
    ));
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().scheduled, 0);
    // a window outlives its job, but not its queue
    let window = DedupMode::For(Duration::from_secs(60));
    new_id(&one(ctx, keyed("a", "k", window)).await);
    ctx.store.obliterate(&ctx.q, true).await.unwrap();
    let b = new_id(&one(ctx, keyed("b", "k", window)).await);
    assert_eq!(data(ctx, &b).await, "b");
}

/// A sweep's look at a dedup key from its score in `dedup_sweep`: (the ms from which it is due, how
/// many looks found it still held).
fn look(sweep: &[(String, u64)], key: &str) -> (u64, u64) {
    let (_, score) = sweep
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("{key} in {sweep:?}"));
    (score / 32, score % 32)
}

fn keys(sweep: &[(String, u64)]) -> Vec<&str> {
    sweep.iter().map(|(k, _)| k.as_str()).collect()
}

/// Makes every member of `dedup_sweep` in `keys` due now (as a minute on would).
async fn make_due(ctx: &Ctx, keys: &[&str]) -> u64 {
    let now = ctx.probe.now_ms().await;
    for key in keys {
        ctx.probe.set_member_score("dedup_sweep", key, now * 32).await;
    }
    now
}

/// Claims and completes every ready job.
async fn finish_all(ctx: &Ctx) {
    loop {
        let jobs = claim(ctx, 100).await;
        if jobs.is_empty() {
            return;
        }
        for job in &jobs {
            complete(ctx, job).await;
        }
    }
}

pub async fn enqueue_with_dedup_sweeps_the_keys_whose_holders_finished(ctx: &Ctx) {
    let (u, window) = (DedupMode::UntilFinished, DedupMode::For(Duration::from_secs(2)));
    let before = ctx.probe.now_ms().await;
    let batch = [keyed("a", "done", u), keyed("b", "window", window)];
    ctx.store.enqueue(&ctx.q, &batch).await.unwrap();
    let after = ctx.probe.now_ms().await;
    // each key taken is due for a look a minute on, or when its window ends, none made yet
    let sweep = ctx.probe.members("dedup_sweep").await;
    assert_eq!(keys(&sweep), ["done", "window"]);
    let (at, level) = look(&sweep, "done");
    assert!(
        (before + 60_000..=after + 60_000).contains(&at) && level == 0,
        "{sweep:?}"
    );
    let (window_ends, level) = look(&sweep, "window");
    assert!(
        (before + 2_000..=after + 2_000).contains(&window_ends) && level == 0,
        "{sweep:?}"
    );
    finish_all(ctx).await;
    let waits = new_id(&one(ctx, keyed("c", "waits", u)).await);
    assert_eq!(
        ctx.probe.dedup_keys().await,
        ["done", "waits", "window"],
        "none due yet"
    );
    // a minute on (made due now) for two keys, and past the window: the next enqueue that takes a
    // key lets go of those whose holders finished, and looks at a held one again later
    while ctx.probe.now_ms().await <= window_ends {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let now = make_due(ctx, &["done", "waits"]).await;
    one(ctx, keyed("d", "fresh", u)).await;
    let after = ctx.probe.now_ms().await;
    assert_eq!(ctx.probe.dedup_keys().await, ["fresh", "waits"]);
    let sweep = ctx.probe.members("dedup_sweep").await;
    assert_eq!(keys(&sweep), ["fresh", "waits"]);
    let (at, level) = look(&sweep, "waits");
    assert!((now + 60_000..=after + 60_000).contains(&at) && level == 1, "{sweep:?}");
    // each look that finds it held puts the next twice as far
    let now = ctx.probe.now_ms().await;
    ctx.probe.set_member_score("dedup_sweep", "waits", now * 32 + 1).await;
    one(ctx, keyed("e", "fresh2", u)).await;
    let after = ctx.probe.now_ms().await;
    let (at, level) = look(&ctx.probe.members("dedup_sweep").await, "waits");
    assert!(
        (now + 120_000..=after + 120_000).contains(&at) && level == 2,
        "{at} {level}"
    );
    // what is held still answers with its holder; what was let go is taken anew
    assert_eq!(one(ctx, keyed("f", "waits", u)).await, Enqueued::Deduplicated(waits));
    assert!(matches!(one(ctx, keyed("g", "done", u)).await, Enqueued::New(_)));
    assert!(matches!(one(ctx, keyed("h", "window", window)).await, Enqueued::New(_)));
    // a key due whose holder finished, taken again by the enqueue that sweeps it: the new job holds
    // it, due a minute on again (the sweep leaves the keys its own call takes alone)
    finish_all(ctx).await;
    make_due(ctx, &["done"]).await;
    let before = ctx.probe.now_ms().await;
    let again = new_id(&one(ctx, keyed("i", "done", u)).await);
    let after = ctx.probe.now_ms().await;
    let (at, level) = look(&ctx.probe.members("dedup_sweep").await, "done");
    assert!(
        (before + 60_000..=after + 60_000).contains(&at) && level == 0,
        "{at} {level}"
    );
    assert_eq!(one(ctx, keyed("j", "done", u)).await, Enqueued::Deduplicated(again));
}

pub async fn enqueue_with_dedup_sweeps_at_most_20_and_twice_the_keys_it_takes(ctx: &Ctx) {
    let u = DedupMode::UntilFinished;
    let names: Vec<String> = (0..30).map(|i| format!("k{i:02}")).collect();
    let batch: Vec<NewJob> = names.iter().map(|k| keyed("x", k, u)).collect();
    ctx.store.enqueue(&ctx.q, &batch).await.unwrap();
    finish_all(ctx).await;
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    make_due(ctx, &names).await;
    // one key taken: 22 looked at, in score then key order, each let go
    one(ctx, keyed("y", "one", u)).await;
    let held = ctx.probe.dedup_keys().await;
    assert_eq!(held, ["k22", "k23", "k24", "k25", "k26", "k27", "k28", "k29", "one"]);
    assert_eq!(keys(&ctx.probe.members("dedup_sweep").await), held);
    // two keys taken: the 8 left (of 24 it may look at)
    ctx.store
        .enqueue(&ctx.q, &[keyed("z", "two", u), keyed("z", "three", u)])
        .await
        .unwrap();
    assert_eq!(ctx.probe.dedup_keys().await, ["one", "three", "two"]);
}

crate::conformance!(
    enqueue_with_dedup_until_finished_answers_the_job_that_waits_or_runs,
    enqueue_with_dedup_for_a_window_holds_even_once_the_job_finished,
    enqueue_with_dedup_debounce_gives_the_waiting_job_the_last_payload_and_starts_it_later,
    enqueue_with_dedup_debounce_takes_back_a_ready_job_that_has_not_started,
    enqueue_with_dedup_refuses_bad_keys_and_windows_and_is_gone_after_obliterate,
    enqueue_with_dedup_sweeps_the_keys_whose_holders_finished,
    enqueue_with_dedup_sweeps_at_most_20_and_twice_the_keys_it_takes,
);
