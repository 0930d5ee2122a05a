//! What only the Redis store has, so it runs on that store alone: a Redis of the test's own,
//! killed (SIGKILL) and restarted from its AOF, password-protected, or with a user that may not
//! load scripts; and the idle command rate and CPU, counted by that server. The embedded store has
//! no server to lose, to log in to or to count commands of. Each test starts its own `redis-server`
//! (`support/redis_server.rs`; with none on PATH it fails saying how to get one).
//!
//! Covered: the idle rate and CPU; an outage ridden out (the server SIGKILLed and restarted from
//! its AOF); a settle made during one; a settle lost to a longer one (logged at warn); the
//! back-off's growth through one; a cancel sent after one; a consumer started while the server is
//! down, which waits for it; the refusals no retry mends, which end an open, a producer, a consumer
//! and a `Worker` at once naming the cause (a password refused or missing, an ACL denial, a server
//! that does not speak Redis); a user that may not load scripts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::store::redis::RedisStore;
use echomq::store::Store;
use echomq::{Consumer, ConsumerOptions, JobContext, NewJob, QueueName, Verdict};

use crate::harness::redis_server::{self, OwnedServer};
use crate::harness::{captured_log, wait_until};

/// CPU ticks (utime + stime, in clock ticks) so far of this process's threads named `name`
/// (Linux: `/proc/self/task/*/comm` and `stat`).
fn thread_ticks(name: &str) -> u64 {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        panic!("/proc/self/task is needed to measure a thread's CPU (Linux)");
    };
    tasks
        .flatten()
        .filter(|t| std::fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
        .filter_map(|t| {
            let stat = std::fs::read_to_string(t.path().join("stat")).ok()?;
            // `tid (comm) state …`: utime and stime are the 12th and 13th fields after the comm
            let mut rest = stat.rsplit_once(')')?.1.split_whitespace().skip(11);
            Some(rest.next()?.parse::<u64>().ok()? + rest.next()?.parse::<u64>().ok()?)
        })
        .sum()
}

/// The consumer, its store and their connections run on a runtime of their own whose threads are
/// named, so the CPU they use is theirs alone, not the other tests' of this binary.
#[test]
fn an_idle_consumer_with_default_options_sends_at_most_2_commands_a_second_and_uses_no_measurable_cpu() {
    const THREADS: &str = "emq-idle-test";
    let server = OwnedServer::start(&["--appendonly", "no"]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name(THREADS)
        .enable_all()
        .build()
        .unwrap();
    let c = rt.block_on(async {
        let store: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url()).await.unwrap());
        let opts = ConsumerOptions::default();
        Consumer::start(
            store,
            QueueName::new("idle").unwrap(),
            |_j: JobContext| async { Verdict::Done },
            opts,
        )
        .unwrap()
    });
    std::thread::sleep(Duration::from_millis(1500));
    let (calls, ticks, cpu, t) = (
        redis_server::command_calls(server.port),
        thread_ticks(THREADS),
        redis_server::cpu_seconds(server.port),
        Instant::now(),
    );
    // two beats of the default 5 s
    std::thread::sleep(Duration::from_secs(10));
    let secs = t.elapsed().as_secs_f64();
    let ticks = thread_ticks(THREADS) - ticks;
    let redis_cpu = redis_server::cpu_seconds(server.port) - cpu;
    let after = redis_server::command_calls(server.port);
    let sent: u64 = after.iter().map(|(k, n)| n - calls.get(k).copied().unwrap_or(0)).sum();
    // the first INFO commandstats and both INFO cpu are counted inside the window
    let rate = sent.saturating_sub(3) as f64 / secs;
    // clock ticks are 1/100 s on Linux (USER_HZ)
    let consumer_pct = ticks as f64 / 100.0 / secs * 100.0;
    eprintln!(
        "idle: {rate:.2} commands/s, consumer {consumer_pct:.2} % CPU, redis-server {:.2} % CPU",
        redis_cpu / secs * 100.0
    );
    // a beat's round (reap: EVALSHA, ZRANGE; promote: EVALSHA, ZRANGE, ZRANGE; claim: EVALSHA,
    // HMGET, LLEN, once the queue keeps its count of lane jobs, which its first claim starts) and
    // its park (BLPOP): 9 commands every 5 s; an unchanged entry in the registry of live consumers
    // (EVALSHA, TIME, ZADD, HSET) every 30 s, none in this window
    assert!(rate <= 2.0, "an idle consumer sent {rate:.2} commands/s");
    assert!(
        rate >= 0.5,
        "an idle consumer sent only {rate:.2} commands/s: is it running at all?"
    );
    // at most 2 ticks in 10 s (0.2 %): a busy poll or a spin would take hundreds
    assert!(
        ticks <= 2,
        "an idle consumer used {consumer_pct:.2} % CPU ({ticks} ticks in {secs:.1} s)"
    );
    rt.block_on(c.stop(Duration::from_secs(5))).unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_made_while_redis_is_down_lands_once_it_is_back() {
    // the handler finishes during an outage: its completion is tried again until Redis answers,
    // not lost to a lease lapse (30 s here) and a second run
    let mut server = OwnedServer::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let store: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url()).await.unwrap());
    let q = QueueName::new("replay").unwrap();
    store.enqueue(&q, &[NewJob::new("x")]).await.unwrap();
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |_j: JobContext| {
            let (started, mut go) = (started_tx.clone(), go_rx.clone());
            async move {
                let _ = started.send(());
                let _ = go.wait_for(|g| *g).await;
                Verdict::Done
            }
        },
        ConsumerOptions::default().with_lease(Duration::from_secs(30)),
    )
    .unwrap();
    tokio::time::timeout(Duration::from_secs(10), started_rx.recv())
        .await
        .expect("the job started");
    server.kill9();
    go_tx.send(true).unwrap();
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.restart();
    let began = Instant::now();
    loop {
        if let Ok(counts) = store.counts(&q).await {
            if counts.completed == 1 {
                break;
            }
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the completion made during the outage never landed"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(started_rx.try_recv().is_err(), "the job ran once");
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_lost_to_an_outage_is_logged_at_warn_with_queue_id_and_attempt_and_the_job_runs_again() {
    let log = captured_log();
    // the settle is replayed for half a lease (500 ms here), then given up: the outage outlasts it
    let mut server = OwnedServer::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let store: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url()).await.unwrap());
    let q = QueueName::new("lostsettle").unwrap();
    store.enqueue(&q, &[NewJob::new("x")]).await.unwrap();
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let (go_tx, go_rx) = tokio::sync::watch::channel(false);
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |j: JobContext| {
            let (started, mut go) = (started_tx.clone(), go_rx.clone());
            async move {
                let _ = started.send(j.attempt());
                let _ = go.wait_for(|g| *g).await;
                Verdict::Done
            }
        },
        ConsumerOptions::default()
            .with_lease(Duration::from_secs(1))
            .with_beat(Duration::from_millis(200)),
    )
    .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), started_rx.recv()).await;
    assert_eq!(first.expect("the job started"), Some(1));
    server.kill9();
    go_tx.send(true).unwrap();
    let line = |log: &std::sync::Mutex<Vec<u8>>| {
        String::from_utf8_lossy(&log.lock().unwrap())
            .lines()
            .find(|l| l.contains("queue=lostsettle") && l.contains("settle lost"))
            .map(str::to_string)
    };
    let began = Instant::now();
    let warned = loop {
        if let Some(l) = line(log) {
            break l;
        }
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "no warning of the lost settle; logged: {}",
            String::from_utf8_lossy(&log.lock().unwrap())
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(warned.contains(" WARN "), "{warned}");
    assert!(warned.contains("id=1") && warned.contains("token=1"), "{warned}");
    server.restart();
    // the lease lapses, recovery returns the job and it runs again, as the warning says
    let second = tokio::time::timeout(Duration::from_secs(15), started_rx.recv()).await;
    assert_eq!(second.expect("the job ran again after its lease lapsed"), Some(2));
    let began = Instant::now();
    while store.counts(&q).await.map(|c| c.completed).unwrap_or(0) != 1 {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the second run never settled"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
}

/// Through an outage the beat backs off by the formula min(max(30 s, beat),
/// beat × 2^(streak − 1)): at a beat of 50 ms the waits double from 50 ms (each logged at warn with
/// its streak), the loop does wait them out, and once Redis is back the streak ends and work runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_an_outage_the_back_off_doubles_from_the_beat_and_ends_when_redis_is_back() {
    let log = captured_log();
    let mut server = OwnedServer::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let store: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url()).await.unwrap());
    let q = QueueName::new("backoff").unwrap();
    let (ran_tx, mut ran_rx) = tokio::sync::mpsc::unbounded_channel();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |j: JobContext| {
            let ran = ran_tx.clone();
            async move {
                let _ = ran.send(j.payload().to_vec());
                Verdict::Done
            }
        },
        ConsumerOptions::default().with_beat(Duration::from_millis(50)),
    )
    .unwrap();
    server.kill9();
    let killed = Instant::now();
    // (streak, the wait it logged), in the order logged
    let backoffs = |log: &std::sync::Mutex<Vec<u8>>| -> Vec<(u32, String)> {
        String::from_utf8_lossy(&log.lock().unwrap())
            .lines()
            .filter(|l| l.contains("queue=backoff") && l.contains("backing off"))
            .filter_map(|l| {
                let field = |name: &str| {
                    let rest = &l[l.find(&format!("{name}="))? + name.len() + 1..];
                    Some(rest.split_whitespace().next()?.to_string())
                };
                Some((field("streak")?.parse().ok()?, field("sleep")?))
            })
            .collect()
    };
    let seen = loop {
        let seen = backoffs(log);
        if seen.len() >= 5 {
            break seen;
        }
        assert!(
            killed.elapsed() < Duration::from_secs(20),
            "five backed-off beats within 20 s; logged: {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let waits: Vec<(u32, &str)> = seen.iter().take(5).map(|(n, w)| (*n, w.as_str())).collect();
    assert_eq!(
        waits,
        [(1, "50ms"), (2, "100ms"), (3, "200ms"), (4, "400ms"), (5, "800ms")],
        "the waits double from the beat"
    );
    assert!(
        killed.elapsed() >= Duration::from_millis(50 + 100 + 200 + 400),
        "the loop waited out the first four before the fifth: {:?}",
        killed.elapsed()
    );
    server.restart();
    store.enqueue(&q, &[NewJob::new("after")]).await.unwrap();
    let ran = tokio::time::timeout(Duration::from_secs(10), ran_rx.recv()).await;
    assert_eq!(ran.expect("work runs once Redis is back"), Some(b"after".to_vec()));
    let streaks = backoffs(log).len();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(backoffs(log).len(), streaks, "no backing off once healthy");
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_sent_after_an_outage_reaches_its_running_job() {
    // the subscription lives through the outage or is made again: either way a cancel published
    // once Redis is back reaches the job that kept running through it
    let mut server = OwnedServer::start(&["--appendonly", "yes", "--appendfsync", "always"]);
    let store: Arc<dyn Store> = Arc::new(RedisStore::open(&server.url()).await.unwrap());
    let q = QueueName::new("cancel-after-outage").unwrap();
    let long = store.enqueue(&q, &[NewJob::new("long")]).await.unwrap()[0].id().clone();
    let (started_tx, mut started_rx) = tokio::sync::mpsc::unbounded_channel();
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        move |job: JobContext| {
            let started = started_tx.clone();
            async move {
                let _ = started.send(job.payload().to_vec());
                if job.payload() != b"long" {
                    return Verdict::Done;
                }
                tokio::select! {
                    why = job.cancel_token().cancelled() => Verdict::Cancel(why.reason.unwrap_or_default()),
                    _ = tokio::time::sleep(Duration::from_secs(60)) => Verdict::Done,
                }
            }
        },
        ConsumerOptions::default()
            .with_lease(Duration::from_secs(60))
            .with_beat(Duration::from_millis(200))
            .with_concurrency(2)
            .with_cancel(true),
    )
    .unwrap();
    let first = tokio::time::timeout(Duration::from_secs(10), started_rx.recv()).await;
    assert_eq!(first.expect("the long job started"), Some(b"long".to_vec()));
    server.kill9();
    tokio::time::sleep(Duration::from_millis(700)).await;
    server.restart();
    // the consumer is back once it runs a job enqueued after the restart
    let began = Instant::now();
    while store.enqueue(&q, &[NewJob::new("probe")]).await.is_err() {
        assert!(began.elapsed() < Duration::from_secs(10), "Redis never came back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let probe = tokio::time::timeout(Duration::from_secs(15), started_rx.recv()).await;
    assert_eq!(probe.expect("the consumer recovered"), Some(b"probe".to_vec()));
    // the forwarder subscribed again (the server counts the subscribers of the queue's channel)
    let channel = echomq::keyspace::QueueKeys::new(&q).cancel();
    let admin = redis_server::connect(&server.url()).await;
    wait_until(Duration::from_secs(10), "the cancel channel subscribed again", || {
        let (mut admin, channel) = (admin.clone(), channel.clone());
        async move {
            // one channel asked: the reply is [channel, subscribers]
            let (_, subscribers): (String, u64) = redis::cmd("PUBSUB")
                .arg("NUMSUB")
                .arg(&channel)
                .query_async(&mut admin)
                .await
                .unwrap();
            subscribers >= 1
        }
    })
    .await;
    let sent = store
        .cancel(&q, &long, Some("operator"), echomq::store::SettleOptions::default())
        .await
        .unwrap();
    assert_eq!(sent, echomq::store::CancelOutcome::Requested);
    let began = Instant::now();
    while store.counts(&q).await.unwrap().cancelled != 1 {
        assert!(
            began.elapsed() < Duration::from_secs(10),
            "the cancel never reached the running job"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_wrong_password_is_a_refusal_not_an_outage() {
    // a consumer backs off and waits out an unreachable store; a refused password is not one
    let server = OwnedServer::start(&["--appendonly", "no", "--requirepass", "s3cret"]);
    let url = format!("redis://:wrong@127.0.0.1:{}", server.port);
    let err = RedisStore::open(&url).await.unwrap_err();
    assert!(!err.is_unreachable(), "{err:?}");
    assert!(err.is_misconfigured(), "{err:?}");
    assert!(err.to_string().contains("WRONGPASS"), "names the cause: {err}");
    assert!(err.to_string().contains("password"), "says what to change: {err}");
    assert!(
        !err.to_string().contains("wrong@"),
        "the password stays out of the error: {err}"
    );
    // a consumer on it ends at its first round, handing back the same refusal
    let ended = consumer_ends_refused(&url, "wrongpass").await;
    assert!(ended.to_string().contains("WRONGPASS"), "{ended}");
    let ok = format!("redis://:s3cret@127.0.0.1:{}", server.port);
    assert!(RedisStore::open(&ok).await.is_ok());
}

/// Starts a consumer and a `Worker` on a lazily opened store at `url` (whose server refuses
/// them), and returns the refusal both ended on; each must end within a generous bound (a loaded
/// machine), never back off for ever.
async fn consumer_ends_refused(url: &str, queue: &str) -> echomq::Error {
    const WITHIN: Duration = Duration::from_secs(20);
    let store = echomq::open_lazy(url).await.expect("a lazy open checks only the URL");
    let q = QueueName::new(queue).unwrap();
    let c = Consumer::start(
        store.clone(),
        q,
        |_j: JobContext| async { Verdict::Done },
        crate::harness::fast(),
    )
    .unwrap();
    let err = c
        .wait_for(WITHIN)
        .await
        .expect_err("the consumer ends on a refusal no retry mends");
    assert!(err.is_misconfigured(), "the refusal, not a timeout: {err:?}");
    assert!(c.is_finished());
    assert_eq!(c.error().map(|e| e.to_string()), Some(err.to_string()));
    let stopped = c
        .stop(Duration::from_secs(5))
        .await
        .expect_err("stop hands back the refusal too");
    assert_eq!(stopped.to_string(), err.to_string());
    let w = echomq::Worker::new(store, queue)
        .unwrap()
        .on_raw(|_ctx: JobContext| async { Ok::<_, echomq::JobError>(()) })
        .options(crate::harness::fast())
        .start()
        .unwrap();
    let from_worker = tokio::time::timeout(WITHIN, w.wait())
        .await
        .expect("the worker ends on a refusal no retry mends")
        .expect_err("its handle hands the refusal back");
    assert!(from_worker.is_misconfigured(), "{from_worker:?}");
    assert!(w.is_finished());
    err
}

#[tokio::test]
async fn a_missing_password_ends_open_a_producer_and_a_consumer_at_once_naming_noauth() {
    let server = OwnedServer::start(&["--appendonly", "no", "--requirepass", "s3cret"]);
    let url = server.url();
    let began = Instant::now();
    let err = echomq::open(&url)
        .await
        .err()
        .expect("a server that wants a password refuses the open");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "at once: {:?}",
        began.elapsed()
    );
    assert!(err.is_misconfigured(), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("NOAUTH") && text.contains("password"),
        "names the cause: {text}"
    );
    assert!(
        text.contains(&format!("127.0.0.1:{}", server.port)),
        "names the address: {text}"
    );
    // a producer on a store that has not connected yet meets it at its first push
    let lazy = echomq::open_lazy(&url).await.unwrap();
    let queue = echomq::Queue::new(lazy, "noauth").unwrap();
    let pushed = queue.push_raw("x").await.expect_err("the push is refused");
    assert!(
        pushed.is_misconfigured() && pushed.to_string().contains("NOAUTH"),
        "{pushed:?}"
    );
    let ended = consumer_ends_refused(&url, "noauth").await;
    assert!(ended.to_string().contains("NOAUTH"), "{ended}");
}

#[tokio::test]
async fn a_user_the_acl_denies_the_store_s_commands_ends_a_producer_and_a_consumer_naming_noperm() {
    let server = OwnedServer::start(&["--appendonly", "no"]);
    let mut admin = redis_server::connect(&server.url()).await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER", "reader", "on", ">pw", "~*", "&*", "+@all", "-evalsha", "-eval",
        ])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://reader:pw@127.0.0.1:{}", server.port);
    let store = echomq::open(&url)
        .await
        .expect("the user may connect and read the config");
    let q = echomq::Queue::new(store, "noperm").unwrap();
    let err = q.push_raw("x").await.expect_err("the push is refused");
    assert!(err.is_misconfigured(), "{err:?}");
    assert!(err.to_string().contains("NOPERM"), "names the cause: {err}");
    let ended = consumer_ends_refused(&url, "noperm").await;
    assert!(ended.to_string().contains("NOPERM"), "{ended}");
}

/// The longest of `n` timed-out parks of `timeout` on `store`.
async fn slowest_park(store: &RedisStore, q: &QueueName, timeout: Duration, n: usize) -> Duration {
    let mut slowest = Duration::ZERO;
    for _ in 0..n {
        let t = Instant::now();
        assert!(
            !store.park(q, &echomq::Kinds::all(), timeout).await.unwrap(),
            "nothing woke it"
        );
        slowest = slowest.max(t.elapsed());
    }
    slowest
}

/// A short park ends on time, though the server ends a `BLPOP` in steps of 100 ms (its default
/// `hz`): the store ends the block itself (`CLIENT UNBLOCK`), its connection kept for the next
/// park. A user the server refuses `CLIENT` waits for the server's step instead, and parks all
/// the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_park_ends_on_time_and_reuses_its_connection() {
    let server = OwnedServer::start(&["--appendonly", "no"]);
    let store = RedisStore::open(&server.url()).await.unwrap();
    let q = QueueName::new("precise-park").unwrap();
    let mut admin = redis_server::connect(&server.url()).await;
    let connections = |info: String| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix("total_connections_received:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap()
    };
    // the store's shared connection and its first parking connection opened
    slowest_park(&store, &q, Duration::from_millis(10), 1).await;
    let before: String = redis::cmd("INFO").arg("stats").query_async(&mut admin).await.unwrap();
    let slowest = slowest_park(&store, &q, Duration::from_millis(20), 10).await;
    assert!(
        slowest < Duration::from_millis(80),
        "a park of 20 ms took {slowest:?}: the server's step, not the park's time"
    );
    let after: String = redis::cmd("INFO").arg("stats").query_async(&mut admin).await.unwrap();
    assert_eq!(connections(after), connections(before), "no park opened a connection");

    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "noclient", "on", ">pw", "~*", "&*", "+@all", "-client"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let url = format!("redis://noclient:pw@127.0.0.1:{}", server.port);
    let limited = RedisStore::open(&url).await.unwrap();
    let slowest = slowest_park(&limited, &q, Duration::from_millis(20), 3).await;
    assert!(slowest >= Duration::from_millis(20), "{slowest:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_does_not_speak_redis_ends_open_and_a_consumer_at_once() {
    let port = redis_server::http_server();
    let url = format!("redis://127.0.0.1:{port}");
    let began = Instant::now();
    let err = echomq::open(&url).await.err().expect("an HTTP server is not a store");
    assert!(
        began.elapsed() < Duration::from_secs(10),
        "at once: {:?}",
        began.elapsed()
    );
    assert!(err.is_misconfigured(), "a refusal, not an outage: {err:?}");
    assert!(
        err.to_string().contains("does not speak the Redis protocol"),
        "names the cause: {err}"
    );
    let ended = consumer_ends_refused(&url, "http").await;
    assert!(
        ended.to_string().contains("does not speak the Redis protocol"),
        "{ended}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_started_while_the_server_is_down_waits_for_it_and_then_works() {
    crate::harness::captured_log();
    let mut server = OwnedServer::start(&["--appendonly", "no"]);
    let url = server.url();
    server.kill9();
    // producers still fail at once on a server that is down
    let err = echomq::open(&url).await.err().expect("nothing listens");
    assert!(err.is_unreachable(), "{err:?}");
    let store = echomq::open_lazy(&url).await.expect("a lazy open checks only the URL");
    let q = QueueName::new("startup").unwrap();
    let runs = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let c = Consumer::start(
        store.clone(),
        q.clone(),
        crate::harness::counting(&runs),
        crate::harness::fast(),
    )
    .unwrap();
    wait_until(
        Duration::from_secs(20),
        "the consumer logs that it waits for the store",
        || async { !crate::harness::log_lines(&["queue=startup", "store unreachable; waiting for it"]).is_empty() },
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!c.is_finished(), "an outage at start-up does not end the consumer");
    server.restart();
    let producer = echomq::Queue::new(echomq::open(&url).await.unwrap(), "startup").unwrap();
    for i in 0..3 {
        producer.push_raw(format!("{i}")).await.unwrap();
    }
    // the back-off is at most a few seconds by now; generous for a loaded machine
    wait_until(
        Duration::from_secs(60),
        "the three jobs ran once the server came up",
        || async { store.counts(&q).await.is_ok_and(|n| n.completed == 3) },
    )
    .await;
    assert_eq!(runs.load(std::sync::atomic::Ordering::SeqCst), 3);
    c.stop(Duration::from_secs(5)).await.unwrap();
}

#[tokio::test]
async fn a_script_that_cannot_be_loaded_fails_its_own_leg_and_the_claim_beside_it_still_answers() {
    // a user that may run scripts but not load them, on a server that has only claim's script:
    // the round's recover and promote legs fail to load theirs; the claim leg ran and leased a job,
    // which must reach the caller (a lost reply would strand it until its lease lapsed)
    let server = OwnedServer::start(&["--appendonly", "no"]);
    let admin_url = server.url();
    let mut admin = redis_server::connect(&admin_url).await;
    let _: () = redis::cmd("ACL")
        .arg(&["SETUSER", "runner", "on", ">pw", "~*", "&*", "+@all", "-script|load"])
        .query_async(&mut admin)
        .await
        .unwrap();
    let full = RedisStore::open(&admin_url).await.unwrap();
    let q = QueueName::new("legs").unwrap();
    full.enqueue(&q, &[NewJob::new("a")]).await.unwrap();
    let _: () = redis::cmd("SCRIPT").arg("FLUSH").query_async(&mut admin).await.unwrap();
    // claim's script loaded again, through a claim on a queue with nothing in it
    let empty = QueueName::new("nothing").unwrap();
    let none = full
        .claim(
            &empty,
            echomq::store::ClaimRequest::new(1, Duration::from_secs(30)).max_attempts(3),
        )
        .await
        .unwrap();
    assert!(none.is_empty());
    let runner = RedisStore::open(&format!("redis://runner:pw@127.0.0.1:{}", server.port))
        .await
        .unwrap();
    let request = echomq::store::ClaimRequest::new(1, Duration::from_secs(30)).max_attempts(3);
    let round = runner
        .recover_promote_claim(
            &q,
            &echomq::store::RoundRequest::new(echomq::consumer::Recovery::Reap, request)
                .pump(10)
                .grace(echomq::schedule::GRACE_MIN),
        )
        .await
        .unwrap();
    assert!(round.recovered.is_err(), "reap's script could not be loaded");
    assert!(round.promoted.is_err(), "promote's script could not be loaded");
    let jobs = round.claimed.unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].payload, b"a".to_vec());
}

/// The commands (inside scripts included, `INFO` itself left out) the server counted since
/// `before`, by name.
fn commands_since(
    port: u16,
    before: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    redis_server::command_calls(port)
        .into_iter()
        .filter(|(name, _)| name != "info")
        .map(|(name, n)| {
            let was = before.get(&name).copied().unwrap_or(0);
            (name, n - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect()
}

/// A job nobody waits on costs no command: ten jobs claimed and completed in one batch each cost
/// the same commands, as `INFO commandstats` counts them, whether three of them are waited on or
/// none — but for one PUBLISH per waited job; marking a job is one script of one read and one
/// write. Whether a wait's subscription is open changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_nobody_waits_on_costs_no_command_and_a_waited_one_one_publish() {
    let server = OwnedServer::start(&["--appendonly", "no"]);
    let store = RedisStore::open(&server.url()).await.unwrap();
    store.preload().await.unwrap();
    let q = QueueName::new("costs").unwrap();
    store.set_retention(&q, &echomq::Retention::off()).await.unwrap();
    let _notices = store.finished_waits(&q).await.unwrap();
    let lease = Duration::from_secs(30);
    // one round: ten jobs enqueued, `waited` of them marked, all claimed and completed
    let round = |waited: usize| {
        let (store, q) = (store.clone(), q.clone());
        async move {
            let jobs: Vec<NewJob> = (0..10).map(|i| NewJob::new(format!("{i}"))).collect();
            let ids: Vec<_> = store
                .enqueue(&q, &jobs)
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.id().clone())
                .collect();
            let before = redis_server::command_calls(server.port);
            for id in &ids[..waited] {
                let marked = store.mark_waited(&q, id).await.unwrap();
                assert_eq!(marked, echomq::store::Waited::Waiting);
            }
            let marks = commands_since(server.port, &before);
            let before = redis_server::command_calls(server.port);
            let claimed = store
                .claim(&q, echomq::store::ClaimRequest::new(10, lease).max_attempts(3))
                .await
                .unwrap();
            assert_eq!(claimed.len(), 10);
            let batch: Vec<_> = claimed
                .iter()
                .map(|c| echomq::store::Completion::new(c.id.clone(), c.token))
                .collect();
            store.complete_many(&q, &batch, Default::default()).await.unwrap();
            (marks, commands_since(server.port, &before))
        }
    };
    // the first count of a minute also deletes the history's field of a day before: one HDEL
    // more in a round that starts a minute, none in the others
    let minute_turn = |m: &std::collections::BTreeMap<String, u64>| {
        let mut m = m.clone();
        m.remove("hdel");
        m
    };
    // the first claim of a queue counts its lanes' jobs and its limited kinds, once
    let _ = round(0).await;
    let (_, warm) = round(0).await;
    let (_, none) = round(0).await;
    assert_eq!(
        minute_turn(&none),
        minute_turn(&warm),
        "a round's commands are the same each time"
    );
    let hdel = |m: &std::collections::BTreeMap<String, u64>| m.get("hdel").copied().unwrap_or(0);
    assert!(hdel(&none).abs_diff(hdel(&warm)) <= 1, "{none:?} {warm:?}");
    assert_eq!(none.get("publish"), None, "no job waited on: no publish");
    let (marks, three) = round(3).await;
    let mut expected = none.clone();
    *expected.entry("publish".into()).or_default() += 3;
    assert_eq!(
        minute_turn(&three),
        minute_turn(&expected),
        "three waited jobs: three publishes more, nothing else"
    );
    assert!(hdel(&three).abs_diff(hdel(&expected)) <= 1, "{three:?} {expected:?}");
    assert_eq!(
        (marks.get("evalsha"), marks.get("hgetall"), marks.get("hset")),
        (Some(&3), Some(&3), Some(&3)),
        "one mark per waited job: {marks:?}"
    );
    let per_job: u64 = none.values().sum();
    eprintln!(
        "claim 10 + complete_many 10: {per_job} commands ({:.1} a job), unchanged by waits: {none:?}",
        per_job as f64 / 10.0
    );
}

/// A loopback proxy to the server on `port` that, once armed, forwards the next request naming
/// `EVALSHA` to the server, lets the server run it, and then drops the connection before the
/// reply comes back: the client's request ran, and the client cannot know.
struct CuttingProxy {
    url: String,
    armed: Arc<std::sync::atomic::AtomicBool>,
}

impl CuttingProxy {
    fn start(port: u16) -> CuttingProxy {
        use std::io::{Read, Write};
        use std::sync::atomic::{AtomicBool, Ordering};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let armed = Arc::new(AtomicBool::new(false));
        let arm = armed.clone();
        std::thread::spawn(move || {
            for client in listener.incoming().map_while(|c| c.ok()) {
                let Ok(server) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
                    return;
                };
                let (mut c_in, mut s_out) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let (mut s_in, mut c_out) = (server, client);
                let arm = arm.clone();
                // server → client
                let cut = Arc::new(AtomicBool::new(false));
                let cut_reader = cut.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = s_in.read(&mut buf) {
                        if n == 0 || cut_reader.load(Ordering::SeqCst) || c_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                    let _ = c_out.shutdown(std::net::Shutdown::Both);
                });
                // client → server
                std::thread::spawn(move || {
                    let mut buf = [0u8; 65536];
                    while let Ok(n) = c_in.read(&mut buf) {
                        if n == 0 {
                            break;
                        }
                        let evalsha = buf[..n].windows(7).any(|w| w.eq_ignore_ascii_case(b"EVALSHA"));
                        if evalsha && arm.swap(false, Ordering::SeqCst) {
                            // the reply must not reach the client: cut before the server answers
                            cut.store(true, Ordering::SeqCst);
                            let _ = s_out.write_all(&buf[..n]);
                            std::thread::sleep(Duration::from_millis(200));
                            let _ = c_in.shutdown(std::net::Shutdown::Both);
                            let _ = s_out.shutdown(std::net::Shutdown::Both);
                            break;
                        }
                        if s_out.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        CuttingProxy { url, armed }
    }

    fn arm(&self) {
        self.armed.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The connection drops after the server ran an enqueue (generated ids) or a claim, before its
/// reply: the store reports the outage and never sends either again — a resent enqueue would add
/// the jobs twice, a resent claim would lease a second batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_or_a_claim_cut_off_after_it_ran_is_reported_and_never_sent_twice() {
    let server = OwnedServer::start(&["--appendonly", "no"]);
    let proxy = CuttingProxy::start(server.port);
    let store = RedisStore::open(&proxy.url).await.unwrap();
    let direct = RedisStore::open(&server.url()).await.unwrap();
    let q = QueueName::new("cut").unwrap();
    store.preload().await.unwrap();

    proxy.arm();
    let jobs: Vec<NewJob> = (0..5).map(|i| NewJob::new(format!("{i}").into_bytes())).collect();
    let err = store.enqueue(&q, &jobs).await.unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(direct.counts(&q).await.unwrap().pending, 5, "the enqueue ran once");

    // the store reconnects by itself; the claim is cut off the same way
    wait_until(Duration::from_secs(10), "the store is back", || async {
        store.counts(&q).await.is_ok()
    })
    .await;
    proxy.arm();
    let err = store
        .claim(
            &q,
            echomq::store::ClaimRequest::new(2, Duration::from_secs(30)).max_attempts(3),
        )
        .await
        .unwrap_err();
    assert!(err.is_unreachable(), "{err}");
    tokio::time::sleep(Duration::from_millis(300)).await;
    let counts = direct.counts(&q).await.unwrap();
    assert_eq!(
        (counts.active, counts.pending),
        (2, 3),
        "one batch leased, once: {counts:?}"
    );
}
