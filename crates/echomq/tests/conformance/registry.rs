//! The registry of live consumers: an entry written once a beat, listed while its deadline (the
//! store's time of its last beat plus its ttl) is ahead, gone when its consumer unregisters or when
//! it lapses; bad entries refused; a registration wakes no parked consumer, on Redis nor across
//! processes sharing an embedded store's file.

use std::time::Duration;

use echomq::registry::ConsumerEntry;
use echomq::{Error, NewJob};

use crate::harness::Ctx;

fn entry(id: &str, ttl: Duration) -> ConsumerEntry {
    let mut e = ConsumerEntry::for_this_process(4, ttl);
    e.id = id.to_string();
    e
}

pub async fn register_consumer_lists_it_until_it_lapses(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    assert!(store.consumers(q).await.unwrap().is_empty());
    let minute = Duration::from_secs(60);
    let before = ctx.probe.now_ms().await as i64;
    store.register_consumer(q, &entry("b", minute)).await.unwrap();
    let mut a = entry("a", minute);
    store.register_consumer(q, &a).await.unwrap();
    let after = ctx.probe.now_ms().await as i64;
    let live = store.consumers(q).await.unwrap();
    assert_eq!(
        live.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "by id"
    );
    let got = &live[0];
    assert_eq!((got.host.as_str(), got.pid), (a.host.as_str(), std::process::id()));
    assert_eq!((got.concurrency, got.in_hand, got.started_ms), (4, 0, a.started_ms));
    assert!(
        (before..=after).contains(&got.beat_ms),
        "the beat on the store's clock: {got:?}"
    );
    assert_eq!(got.ttl, minute);
    assert_eq!(got.deadline_ms(), got.beat_ms + 60_000);
    // a later beat rewrites the entry: one entry, the jobs in hand of now
    a.in_hand = 3;
    store.register_consumer(q, &a).await.unwrap();
    let live = store.consumers(q).await.unwrap();
    assert_eq!(live.len(), 2);
    assert_eq!(live[0].in_hand, 3);
    // a consumer that stops beating lapses at its deadline
    store
        .register_consumer(q, &entry("c", Duration::from_millis(300)))
        .await
        .unwrap();
    assert_eq!(store.consumers(q).await.unwrap().len(), 3);
    tokio::time::sleep(Duration::from_millis(450)).await;
    let live = store.consumers(q).await.unwrap();
    assert_eq!(
        live.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(),
        ["a", "b"],
        "c lapsed"
    );
    // other queues keep their own registries
    let other = echomq::QueueName::new(format!("{q}-other")).unwrap();
    assert!(store.consumers(&other).await.unwrap().is_empty());
}

pub async fn unregister_consumer_removes_its_entry_once(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    for id in ["a", "b"] {
        store
            .register_consumer(q, &entry(id, Duration::from_secs(60)))
            .await
            .unwrap();
    }
    assert!(store.unregister_consumer(q, "b").await.unwrap());
    assert!(!store.unregister_consumer(q, "b").await.unwrap(), "once");
    assert!(!store.unregister_consumer(q, "never").await.unwrap());
    let live = store.consumers(q).await.unwrap();
    assert_eq!(live.iter().map(|e| e.id.as_str()).collect::<Vec<_>>(), ["a"]);
}

pub async fn register_consumer_refuses_bad_entries(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    let good = entry("ok", Duration::from_secs(5));
    let bads: [fn(&mut ConsumerEntry); 6] = [
        |e| e.id = String::new(),
        |e| e.id = "a\nb".into(),
        |e| e.id = "x".repeat(256),
        |e| e.host = "h\u{7}".into(),
        |e| e.ttl = Duration::ZERO,
        |e| e.ttl = Duration::from_secs(2 * 86_400),
    ];
    for spoil in bads {
        let mut bad = good.clone();
        spoil(&mut bad);
        let err = store.register_consumer(q, &bad).await.unwrap_err();
        assert!(matches!(err, Error::InvalidOption { .. }), "{bad:?}: {err:?}");
    }
    assert!(matches!(
        store.unregister_consumer(q, "").await,
        Err(Error::InvalidOption { .. })
    ));
    assert!(store.consumers(q).await.unwrap().is_empty(), "nothing written");
}

pub async fn consumers_registering_wake_no_parked_consumer(ctx: &Ctx) {
    let (store, q) = (&ctx.store, &ctx.q);
    // a second handle, as another process holds (on the embedded store: its own connection to the
    // file, whose parks notice other connections' commits). Once the file is quiet (the embedded
    // store's checkpointer empties the -wal file a moment after the last commit, which other
    // connections notice as a change) a read, so its park starts from what it has seen.
    let other = ctx
        .probe
        .store_with_payload_limit(echomq::store::PAYLOAD_LIMIT_DEFAULT)
        .await;
    ctx.probe.clear_wakes().await;
    tokio::time::sleep(Duration::from_millis(1200)).await;
    other.counts(q).await.unwrap();
    let park = {
        let (other, q) = (other.clone(), q.clone());
        tokio::spawn(async move { other.park(&q, &echomq::Kinds::all(), Duration::from_millis(600)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    for i in 0..5 {
        store
            .register_consumer(q, &entry(&format!("w{i}"), Duration::from_secs(5)))
            .await
            .unwrap();
    }
    assert!(!park.await.unwrap().unwrap(), "a registration woke a parked consumer");
    // the control: an enqueue wakes it
    let park = {
        let (other, q) = (other.clone(), q.clone());
        tokio::spawn(async move { other.park(&q, &echomq::Kinds::all(), Duration::from_millis(600)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    store.enqueue(q, &[NewJob::new("x")]).await.unwrap();
    assert!(park.await.unwrap().unwrap(), "an enqueue wakes it");
}

crate::conformance!(
    register_consumer_lists_it_until_it_lapses,
    unregister_consumer_removes_its_entry_once,
    register_consumer_refuses_bad_entries,
    consumers_registering_wake_no_parked_consumer,
);
