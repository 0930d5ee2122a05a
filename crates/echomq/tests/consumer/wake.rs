//! Wakes: a parked consumer is woken by an enqueue well inside its beat (and, on a store that serves
//! hand-offs, handed the job by that enqueue); an enqueue from another handle starts within a beat;
//! one wake token wakes one parked caller.
//!
//! "Parked by now" below is a pause before an enqueue, not a synchronisation: no contract call says
//! a consumer is parked, and the assertions hold whether it is or not; the pause makes the wake the
//! path they measure.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, Verdict};
use tokio::sync::mpsc;

use crate::harness::{completed, wait_until, Ctx};

async fn a_parked_consumer_is_woken_by_an_enqueue_well_inside_one_beat(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let (tx, mut started) = mpsc::unbounded_channel::<Instant>();
    let handler = move |_job: JobContext| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            Verdict::Done
        }
    };
    // a beat of 10 s: only a wake can start the job soon
    let opts = ConsumerOptions::default().with_beat(Duration::from_secs(10));
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    let mut latencies = Vec::new();
    for i in 0..5 {
        tokio::time::sleep(Duration::from_millis(200)).await; // parked by now
        let at = Instant::now();
        store.enqueue(q, &[NewJob::new(format!("{i}"))]).await.unwrap();
        let began = tokio::time::timeout(Duration::from_secs(5), started.recv())
            .await
            .expect("the enqueue woke the consumer")
            .unwrap();
        latencies.push(began.duration_since(at));
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
    let worst = latencies.iter().max().copied().unwrap();
    assert!(
        worst < Duration::from_millis(500),
        "enqueue → handler start, beat 10 s: {latencies:?}"
    );
    assert_eq!(completed(store, q).await, 5);
    // on a store that serves hand-offs each job went straight to the consumer's offer, made again
    // after each job ended (a served park is not woken by the commit: its jobs are running)
    // a job whose enqueue came while the consumer was between parks (a loaded machine) is claimed
    // by its round instead: the others are handed over
    ctx.assert_handed_over("jobs handed to the parked consumer", |n| n > 0);
}

/// At the default beat of 5 s: Redis wakes the park by the token the other handle's enqueue pushed;
/// the embedded store's park sees the file's change counter move within half a second.
async fn an_enqueue_from_another_handle_starts_well_inside_a_beat(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let other = ctx.other_handle().await; // as another process would: no shared in-process wake
    let (tx, mut started) = mpsc::unbounded_channel::<Instant>();
    let handler = move |_job: JobContext| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            Verdict::Done
        }
    };
    let c = Consumer::start(store.clone(), q.clone(), handler, ConsumerOptions::default()).unwrap();
    let mut latencies = Vec::new();
    for i in 0..3 {
        tokio::time::sleep(Duration::from_millis(150 * i + 100)).await; // somewhere in a park
        let at = Instant::now();
        other.enqueue(q, &[NewJob::new(format!("{i}"))]).await.unwrap();
        let began = tokio::time::timeout(Duration::from_secs(5), started.recv())
            .await
            .unwrap()
            .unwrap();
        latencies.push(began.duration_since(at));
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
    // a wake (Redis) or a look at the file (embedded, every 500 ms) ends the park, and the next
    // round claims: well inside the beat of 5 s even on a loaded machine (a round took 330 ms
    // beside a build)
    let worst = latencies.iter().max().copied().unwrap();
    assert!(
        worst < Duration::from_millis(2000),
        "enqueue → handler start: {latencies:?}"
    );
    assert_eq!(completed(store, q).await, 3);
}

async fn one_wake_token_wakes_one_parked_caller(ctx: &Ctx) {
    // as BLPOP hands a token to one client: two parks, one single-job enqueue, one park ends; the
    // other stays parked (no round trip for nothing) until a second enqueue
    let (store, q) = (&ctx.store, &ctx.q);
    let ended = Arc::new(AtomicUsize::new(0));
    let parks: Vec<_> = (0..2)
        .map(|_| {
            let (store, q, ended) = (store.clone(), q.clone(), ended.clone());
            tokio::spawn(async move {
                let woken = store
                    .park(&q, &echomq::Kinds::all(), Duration::from_secs(20))
                    .await
                    .unwrap();
                ended.fetch_add(1, Ordering::SeqCst);
                woken
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(100)).await; // parked by now
    store.enqueue(q, &[NewJob::new("a")]).await.unwrap();
    wait_until(Duration::from_secs(5), "one park woken", || async {
        ended.load(Ordering::SeqCst) == 1
    })
    .await;
    // not a synchronisation: the time in which a second (wrong) wake would show
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(ended.load(Ordering::SeqCst), 1, "the other park stays parked");
    store.enqueue(q, &[NewJob::new("b")]).await.unwrap();
    for p in parks {
        let woken = tokio::time::timeout(Duration::from_secs(5), p)
            .await
            .expect("the second enqueue woke the other park")
            .unwrap();
        assert!(woken, "each park was woken by a token");
    }
}

/// Each start of a job that fails every attempt, retried after a fixed 200 ms, beat 5 s: each
/// retry starts at its delay, not at the next beat (the park that follows the settle ends by the
/// retry's due time, though the promote that bounded it ran before the retry was scheduled).
async fn a_retry_starts_at_its_delay_not_at_the_next_beat(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let (tx, mut started) = mpsc::unbounded_channel::<Instant>();
    let handler = move |_job: JobContext| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            Verdict::Error("fails every time".into())
        }
    };
    let delay = Duration::from_millis(200);
    let opts = ConsumerOptions::default()
        .with_beat(Duration::from_secs(5))
        .with_max_attempts(4)
        .with_retry(echomq::RetryPolicy::fixed(delay));
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await; // parked by now
    store.enqueue(q, &[NewJob::new("x")]).await.unwrap();
    let mut starts = Vec::new();
    for _ in 0..4 {
        let at = tokio::time::timeout(Duration::from_secs(12), started.recv())
            .await
            .expect("every attempt starts within two beats")
            .unwrap();
        starts.push(at);
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
    let gaps: Vec<Duration> = starts.windows(2).map(|w| w[1].duration_since(w[0])).collect();
    // the figures, for a reader running it with --nocapture
    #[allow(clippy::print_stderr)]
    {
        eprintln!("retry gaps (delay {delay:?}): {gaps:?}");
    }
    for gap in &gaps {
        assert!(*gap >= delay, "a retry started before its delay: {gaps:?}");
        // a beat is 5 s: a retry that waited for it would show a gap of seconds
        assert!(
            *gap < Duration::from_millis(1500),
            "a retry waited for the beat: {gaps:?}"
        );
    }
}

/// A job enqueued with a delay, ahead of everything scheduled, starts at its due time, not at the
/// parked consumer's next beat: enqueued by another handle (as another process would) on Redis; on
/// the embedded store, whose wakes reach the parks of their own process only (another process's
/// commits are seen at the next park's end, within a beat), by the consumer's own handle.
async fn a_delayed_enqueue_starts_at_its_due_time(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let other = if store.serves_handoffs() {
        store.clone()
    } else {
        ctx.other_handle().await
    };
    let (tx, mut started) = mpsc::unbounded_channel::<Instant>();
    let handler = move |_job: JobContext| {
        let tx = tx.clone();
        async move {
            let _ = tx.send(Instant::now());
            Verdict::Done
        }
    };
    let opts = ConsumerOptions::default().with_beat(Duration::from_secs(5));
    let c = Consumer::start(store.clone(), q.clone(), handler, opts).unwrap();
    // a job due far later first: the consumer's parks end at it, not at the beat alone
    other
        .enqueue(q, &[NewJob::new("later").with_delay(Duration::from_secs(60))])
        .await
        .unwrap();
    let delay = Duration::from_millis(300);
    let mut lates = Vec::new();
    for i in 0..3 {
        tokio::time::sleep(Duration::from_millis(300)).await; // parked by now
        let at = Instant::now();
        other
            .enqueue(q, &[NewJob::new(format!("{i}")).with_delay(delay)])
            .await
            .unwrap();
        let began = tokio::time::timeout(Duration::from_secs(12), started.recv())
            .await
            .expect("the delayed job started within two beats")
            .unwrap();
        lates.push(began.duration_since(at));
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
    // the figures, for a reader running it with --nocapture
    #[allow(clippy::print_stderr)]
    {
        eprintln!("delayed push → start (delay {delay:?}): {lates:?}");
    }
    for late in &lates {
        assert!(*late >= delay, "a delayed job started before its delay: {lates:?}");
        assert!(
            *late < Duration::from_millis(1500),
            "a delayed job waited for the beat: {lates:?}"
        );
    }
}

crate::consumer_cases!(
    a_parked_consumer_is_woken_by_an_enqueue_well_inside_one_beat,
    an_enqueue_from_another_handle_starts_well_inside_a_beat,
    one_wake_token_wakes_one_parked_caller,
    a_retry_starts_at_its_delay_not_at_the_next_beat,
    a_delayed_enqueue_starts_at_its_due_time,
);
