//! Consumer tests that need a Redis of their own: the idle command rate (counted by the server,
//! commands inside scripts included) and an outage (the server SIGKILLed and restarted from its
//! AOF).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/redis_server.rs"]
mod redis_server;

use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::store::redis::RedisStore;
use echomq::store::Store;
use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, QueueName, Verdict};
use redis_server::OwnedServer;

async fn commands(conn: &mut redis::aio::MultiplexedConnection) -> u64 {
    let text: String = redis::cmd("INFO").arg("commandstats").query_async(conn).await.unwrap();
    text.lines()
        .filter_map(|l| l.split_once("calls=")?.1.split(',').next()?.parse::<u64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_idle_at_a_beat_of_1s_sends_at_most_12_commands_a_second() {
    let server = OwnedServer::start(&["--appendonly", "no"]);
    let store: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url()).await.unwrap());
    let q = QueueName::new("idle").unwrap();
    let c = Consumer::start(
        store,
        q,
        |_j: JobContext| async { Verdict::Done },
        ConsumerOptions::default(),
    )
    .unwrap();
    let mut conn = redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let (a, t) = (commands(&mut conn).await, Instant::now());
    tokio::time::sleep(Duration::from_secs(5)).await;
    let b = commands(&mut conn).await;
    // the first INFO is counted inside the window
    let rate = (b - a - 1) as f64 / t.elapsed().as_secs_f64();
    eprintln!("idle: {rate:.2} commands/s");
    assert!(rate <= 12.0, "an idle consumer sent {rate:.1} commands/s");
    assert!(
        rate >= 3.0,
        "an idle consumer sent only {rate:.1} commands/s: is it running at all?"
    );
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consumer_rides_out_redis_killed_for_3s_and_restarted_from_its_aof() {
    let mut server = OwnedServer::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let store: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url()).await.unwrap());
    let q = QueueName::new("outage").unwrap();
    let jobs: Vec<NewJob> = (0..200).map(|i| NewJob::new(format!("{i}"))).collect();
    store.enqueue(&q, &jobs).await.unwrap();
    let opts = ConsumerOptions::default()
        .with_beat(Duration::from_millis(200))
        .with_lease(Duration::from_millis(1500))
        .with_concurrency(4)
        .with_max_attempts(50);
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        |_j: JobContext| async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Verdict::Done
        },
        opts,
    )
    .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while store.counts(&q).await.unwrap().completed < 30 {
        assert!(Instant::now() < deadline, "no progress before the outage");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    server.kill9();
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!c.is_finished(), "an outage slows the beat; it never ends the loop");
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Ok(counts) = store.counts(&q).await {
            if counts.completed == 200 && counts.pending == 0 && counts.active == 0 {
                break;
            }
        }
        assert!(Instant::now() < deadline, "not every job completed after the restart");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let counts = store.counts(&q).await.unwrap();
    assert_eq!((counts.dead, counts.scheduled), (0, 0));
    c.stop(Duration::from_secs(5)).await.unwrap();
}
