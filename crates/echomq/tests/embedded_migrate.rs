//! A file the native embedded store wrote (schema 9) opened by the engine store: migrated in place
//! into the engine's keyspace, every job, schedule, setting, counter and record kept and working.
//!
//! The fixture `fixtures/embedded-v9.db` was written by the native `EmbeddedStore` of schema 9 (the
//! build before migration 10), by a throwaway program run once against it, then removed:
//! on queue `main` it set the retention (keep 50, 3650 days, outputs up to 4096 bytes), the
//! priority aging (30 s), a queue rate limit (1000/s, burst 50), group `g`'s rate limit (100/s,
//! burst 10), group `g`'s limit (2) and the default group limit (3); enqueued `run`, `done` and
//! `boom` and claimed them (100-day lease, records on); completed `done` with the output
//! `result of done`; discarded `boom` ("it blew up"); enqueued `cxl` and cancelled it waiting
//! ("not wanted"); enqueued the flat jobs `f-low` (priority 5), `f-mid` (priority 2, kind `email`,
//! max_attempts 7) and `f-top` (priority 0), in that order; genqueued `g1` (priority 3) and `g2`
//! (priority 0) in group `g`; enqueued the delayed jobs `later` (1 h), `dup` (2 h, dedup key `k1`
//! until finished) and `win` (3 h, dedup key `k2` for 50 years); upserted the schedules `every-5m`
//! (every 300 s, template `tick`, priority 1, max_attempts 4, kind `tick`) and `nightly` (cron
//! `0 3 * * *` in Europe/Paris, template `night` in group `g`) and paused `nightly`; on queue
//! `paused` it enqueued `p1` and paused the queue. Then `PRAGMA wal_checkpoint(TRUNCATE)`,
//! `journal_mode = DELETE` and `VACUUM`. On a copy, the native store claimed the waiting jobs one
//! at a time in the order `f-top`, `g2`, `f-mid`, `g1`, `f-low`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::Duration;

use echomq::dedup::{Dedup, DedupMode};
use echomq::store::embedded::engine::Reply;
use echomq::store::embedded::EmbeddedStore;
use echomq::store::embedded::SCHEMA_VERSION;
use echomq::store::{Enqueued, SettleOptions, Settled, Store};
use echomq::{DedupKey, GroupName, JobId, JobState, NewJob, QueueName, Timing};

const FIXTURE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/embedded-v9.db");

/// The minute (Unix ms / 60000) the fixture's jobs finished in: its history's one minute.
const FIXTURE_MINUTE: i64 = 29_943_985;

fn id(s: &str) -> JobId {
    JobId::new(s).unwrap()
}

fn now_minute() -> i64 {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64;
    ms / 60_000
}

/// The fixture copied into `dir`, its history's minute moved to now (the history verb reads back
/// a day at most; the fixture's minute is long past).
fn fixture_copy(dir: &tempfile::TempDir) -> String {
    let path = dir.path().join("store.db");
    std::fs::copy(FIXTURE, &path).unwrap();
    let conn = rusqlite::Connection::open(&path).unwrap();
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    assert_eq!(v, 9, "the fixture is a schema-9 file");
    let moved = conn
        .execute(
            "UPDATE emq_kv SET key = replace(key, ?1, ?2) WHERE key LIKE 'metrics:%' AND key LIKE ?3",
            rusqlite::params![
                format!(":m{FIXTURE_MINUTE}"),
                format!(":m{}", now_minute()),
                format!("%:m{FIXTURE_MINUTE}")
            ],
        )
        .unwrap();
    assert_eq!(moved, 2, "the completed and the failed minute");
    drop(conn);
    path.to_str().unwrap().to_string()
}

/// The file's version, and the names of its tables.
fn tables(path: &str) -> (i64, Vec<String>) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
    let mut stmt = conn
        .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' ORDER BY name")
        .unwrap();
    let names = stmt
        .query_map([], |r| r.get::<_, String>(0))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    (v, names)
}

/// Every row of the keyspace's tables, as text: what a second open must leave as it is.
fn keyspace_dump(path: &str) -> Vec<String> {
    let conn = rusqlite::Connection::open(path).unwrap();
    let mut out = Vec::new();
    for sql in [
        "SELECT quote(key), type, size, head, quote(value) FROM kv_keys ORDER BY key",
        "SELECT quote(k.key), quote(h.field), quote(h.value) FROM kv_hash h JOIN kv_keys k USING (kid) ORDER BY 1, 2",
        "SELECT quote(k.key), quote(z.member), z.score FROM kv_zset z JOIN kv_keys k USING (kid) ORDER BY 1, 2",
        "SELECT quote(k.key), l.pos, quote(l.value) FROM kv_list l JOIN kv_keys k USING (kid) ORDER BY 1, 2",
        "SELECT quote(k.key), quote(s.member) FROM kv_set s JOIN kv_keys k USING (kid) ORDER BY 1, 2",
        "SELECT quote(base), quote(id), fields, quote(f_data), quote(f_state), quote(f_attempts), quote(extra), \
         pending, active FROM kv_jobs ORDER BY 1, 2",
    ] {
        let mut stmt = conn.prepare(sql).unwrap();
        let n = stmt.column_count();
        let rows = stmt
            .query_map([], |r| {
                let mut line = Vec::new();
                for i in 0..n {
                    line.push(format!("{:?}", r.get_ref(i)?));
                }
                Ok(line.join(" "))
            })
            .unwrap();
        out.extend(rows.map(Result::unwrap));
    }
    out
}

/// Every collection's size on its key's row is its elements' count, and every job row's field
/// count its fields'.
fn sizes_are_exact(path: &str) {
    let conn = rusqlite::Connection::open(path).unwrap();
    let wrong: Vec<String> = conn
        .prepare(
            "SELECT quote(key) || ' ' || size FROM kv_keys AS k WHERE size != CASE \
               WHEN type = 1 THEN 0 \
               WHEN key LIKE 'emq:{%}:pending' THEN \
                 (SELECT count(*) FROM kv_jobs WHERE base = substr(k.key, 1, length(k.key) - 7) AND pending IS NOT NULL) \
               WHEN key LIKE 'emq:{%}:active' THEN \
                 (SELECT count(*) FROM kv_jobs WHERE base = substr(k.key, 1, length(k.key) - 6) AND active IS NOT NULL) \
               WHEN type = 2 THEN (SELECT count(*) FROM kv_hash WHERE kid = k.kid) \
               WHEN type = 3 THEN (SELECT count(*) FROM kv_zset WHERE kid = k.kid) \
               WHEN type IN (4, 6) THEN (SELECT count(*) FROM kv_list WHERE kid = k.kid) \
               WHEN type = 5 THEN (SELECT count(*) FROM kv_set WHERE kid = k.kid) END \
             UNION ALL SELECT 'empty ' || quote(key) FROM kv_keys WHERE type != 1 AND size = 0 \
             UNION ALL SELECT 'row ' || quote(id) FROM kv_jobs WHERE fields != \
               (f_data IS NOT NULL) + (f_state IS NOT NULL) + (f_attempts IS NOT NULL) + (f_group IS NOT NULL) \
               + (f_max_attempts IS NOT NULL) + (f_run_at IS NOT NULL) + (f_stalled IS NOT NULL) \
               + (f_last_error IS NOT NULL) + (f_cancel IS NOT NULL) + (f_output IS NOT NULL) \
               + (f_finished_at IS NOT NULL) + (f_kind IS NOT NULL) + (f_priority IS NOT NULL) \
               + (f_retry IS NOT NULL) + (f_waited IS NOT NULL) + (f_free IS NOT NULL) + (f_dedup IS NOT NULL) \
               + (extra IS NOT NULL)",
        )
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(wrong.is_empty(), "sizes off: {wrong:?}");
    let pending: i64 = conn
        .query_row(
            "SELECT size FROM kv_keys WHERE key = CAST('emq:{main}:pending' AS BLOB)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pending, 3, "the size of a row set is on its key's row");
}

fn bulk(r: &Reply) -> &[u8] {
    match r {
        Reply::Bulk(b) => b,
        other => panic!("not a bulk string: {other:?}"),
    }
}

fn array(r: &Reply) -> &[Reply] {
    match r {
        Reply::Array(a) => a,
        other => panic!("not an array: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schema_9_file_is_carried_into_the_engine_keyspace_with_everything_in_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = fixture_copy(&dir);
    let store = EmbeddedStore::open(&path).await.unwrap();
    let (version, names) = tables(&path);
    assert_eq!(version, 10);
    assert_eq!(SCHEMA_VERSION, 10);
    assert!(
        names.iter().all(|n| !n.starts_with("emq_")),
        "the native tables are dropped: {names:?}"
    );
    for t in [
        "kv_keys",
        "kv_hash",
        "kv_zset",
        "kv_list",
        "kv_set",
        "kv_jobs",
        "kv_cancels",
    ] {
        assert!(names.iter().any(|n| n == t), "{t} is there: {names:?}");
    }

    sizes_are_exact(&path);

    // the keys in the form the scripts write them
    let raw = |words: &[&str]| {
        let store = store.clone();
        let words: Vec<Vec<u8>> = words.iter().map(|w| w.as_bytes().to_vec()).collect();
        async move { store.raw(words).await.unwrap() }
    };
    let text = |r: Reply| match r {
        Reply::Bulk(b) => String::from_utf8(b).unwrap(),
        Reply::Array(a) => a
            .iter()
            .map(|r| String::from_utf8_lossy(bulk(r)).into_owned())
            .collect::<Vec<_>>()
            .join(" "),
        other => format!("{other:?}"),
    };
    for (words, want) in [
        (&["GET", "emq:{main}:id"][..], "14"),
        (&["GET", "emq:{main}:tat"], "1796639102444934"),
        (&["GET", "emq:{paused}:paused"], "1"),
        (&["HGETALL", "emq:{main}:order"], "aging 30000 clock 7529856625921"),
        (
            &["HGETALL", "emq:{main}:retention"],
            "age 315360000000 cap 4096 keep 50",
        ),
        (
            &["HGETALL", "emq:{main}:groups"],
            "l:g 2 l:~ 3 lane_jobs 2 r:g 1 r:~ 1 rate 1000/1000/50 rate:g 100/1000/10",
        ),
        (&["HGETALL", "emq:{main}:dedup"], "k1 dup k2 win|3373439102445"),
        (&["HGET", "emq:{main}:metrics:completed", "count"], "1"),
        (&["HGET", "emq:{main}:metrics:failed", "count"], "1"),
        (&["HGET", "emq:{main}:pending_tally", "0:29413502"], "2"),
        (&["LRANGE", "emq:{main}:ring", "0", "-1"], "~ g"),
        (&["LLEN", "emq:{main}:wake"], "Int(11)"),
        (
            &["ZRANGE", "emq:{main}:lane:g", "0", "-1", "WITHSCORES"],
            "g2 7529856625921 g1 7529879665920",
        ),
        (&["ZRANGE", "emq:{main}:pending", "0", "-1"], "f-top f-mid f-low"),
        (&["ZRANGE", "emq:{main}:registered", "0", "-1", "WITHSCORES"], ""),
        (&["SMEMBERS", "emq:queues"], "main paused"),
        (&["TYPE", "emq:{main}:completions"], "Status(\"stream\")"),
        (&["HGET", "emq:{main}:schedule:nightly", "paused"], "1"),
        (&["HGET", "emq:{main}:job:f-mid", "max_attempts"], "7"),
    ] {
        let got = text(raw(words).await);
        if words[1] == "emq:{main}:registered" {
            let parts: Vec<&str> = got.split(' ').collect();
            assert_eq!(parts.len(), 2, "one registration: {got}");
            assert_eq!(parts[1], "1", "paid");
            continue;
        }
        assert_eq!(got, want, "{words:?}");
    }
    assert_eq!(
        text(raw(&["HGETALL", "emq:{main}:job:run"]).await),
        "data {\"job\":\"run\"} state active attempts 1",
        "a row holds exactly its fields"
    );

    let q = QueueName::new("main").unwrap();
    let p = QueueName::new("paused").unwrap();
    let g = GroupName::new("g").unwrap();

    // the counts: sets, counters, pause
    let c = store.counts(&q).await.unwrap();
    assert_eq!(
        (c.pending, c.scheduled, c.active, c.dead),
        (5, 3, 1, 1),
        "pending, scheduled, active, dead"
    );
    assert_eq!((c.completed, c.cancelled, c.failed), (1, 1, 1), "the event counters");
    assert_eq!((c.retried, c.stalled, c.reaped), (0, 0, 0));
    assert!(!c.paused);
    assert!(c.oldest_pending_age.is_some(), "the pending tally kept");
    let c = store.counts(&p).await.unwrap();
    assert_eq!(c.pending, 1);
    assert!(c.paused, "the paused queue stays paused");

    // every job, field by field
    let job = |name: &'static str| {
        let store = store.clone();
        let q = q.clone();
        async move {
            store
                .get(&q, &id(name))
                .await
                .unwrap()
                .unwrap_or_else(|| panic!("{name} kept"))
        }
    };
    let run = job("run").await;
    assert_eq!(
        (run.state, run.attempts, run.payload.as_slice()),
        (JobState::Active, 1, &b"{\"job\":\"run\"}"[..])
    );
    assert_eq!(run.score, Some(1_805_279_102_441), "its lease deadline");
    let done = job("done").await;
    assert_eq!((done.state, done.attempts), (JobState::Completed, 1));
    assert_eq!(done.output.as_deref(), Some(&b"result of done"[..]));
    assert_eq!(done.finished_at, Some(1_796_639_102_442));
    assert!(done.payload.is_empty(), "a kept row holds no payload");
    let boom = job("boom").await;
    assert_eq!((boom.state, boom.attempts), (JobState::Dead, 1));
    assert_eq!(boom.last_error.as_deref(), Some("it blew up"));
    assert_eq!(boom.payload, b"{\"job\":\"boom\"}");
    assert_eq!(boom.score, Some(1_796_639_102_443), "its time of death");
    let cxl = job("cxl").await;
    assert_eq!((cxl.state, cxl.attempts), (JobState::Cancelled, 0));
    assert_eq!(cxl.last_error.as_deref(), Some("not wanted"));
    assert_eq!(cxl.finished_at, Some(1_796_639_102_444));
    for (name, payload, priority) in [("f-low", "low", 5), ("f-mid", "mid", 2), ("f-top", "top", 0)] {
        let j = job(name).await;
        assert_eq!(
            (j.state, j.attempts, j.group.clone()),
            (JobState::Pending, 0, None),
            "{name}"
        );
        assert_eq!(
            (j.payload.as_slice(), j.priority),
            (payload.as_bytes(), priority),
            "{name}"
        );
    }
    let mid = job("f-mid").await;
    assert_eq!((mid.kind.as_deref(), mid.max_attempts), (Some("email"), Some(7)));
    for (name, payload, priority) in [("g1", "g one", 3), ("g2", "g two", 0)] {
        let j = job(name).await;
        assert_eq!((j.state, j.group.as_ref()), (JobState::Pending, Some(&g)), "{name}");
        assert_eq!(
            (j.payload.as_slice(), j.priority),
            (payload.as_bytes(), priority),
            "{name}"
        );
    }
    for (name, run_at) in [
        ("later", 1_796_642_702_445),
        ("dup", 1_796_646_302_445),
        ("win", 1_796_649_902_445),
    ] {
        let j = job(name).await;
        assert_eq!(
            (j.state, j.run_at, j.score),
            (JobState::Scheduled, Some(run_at), Some(run_at)),
            "{name}"
        );
        assert_eq!(j.payload, name.as_bytes());
    }
    let p1 = store.get(&p, &id("p1")).await.unwrap().unwrap();
    assert_eq!((p1.state, p1.payload.as_slice()), (JobState::Pending, &b"p"[..]));

    // each state's list, in its order
    let listed = |state| {
        let store = store.clone();
        let q = q.clone();
        async move {
            let page = store.list(&q, state, None, 100).await.unwrap();
            page.ids.iter().map(|i| i.to_string()).collect::<Vec<_>>()
        }
    };
    assert_eq!(listed(JobState::Pending).await, ["f-top", "f-mid", "f-low", "g2", "g1"]);
    assert_eq!(listed(JobState::Scheduled).await, ["later", "dup", "win"]);
    assert_eq!(listed(JobState::Active).await, ["run"]);
    assert_eq!(listed(JobState::Completed).await, ["done"]);
    assert_eq!(listed(JobState::Cancelled).await, ["cxl"]);
    assert_eq!(listed(JobState::Dead).await, ["boom"]);

    // schedules
    let schedules = store.list_schedules(&q).await.unwrap();
    assert_eq!(schedules.len(), 2);
    let (every, nightly) = (&schedules[0], &schedules[1]);
    assert_eq!(every.schedule.name.as_str(), "every-5m");
    assert_eq!(every.schedule.timing, Timing::Every(Duration::from_secs(300)));
    assert_eq!(every.schedule.template.payload, b"tick");
    assert_eq!(
        (every.schedule.template.priority, every.schedule.template.max_attempts),
        (1, Some(4))
    );
    assert_eq!(every.schedule.template.kind.as_deref(), Some("tick"));
    assert_eq!(
        (every.paused, every.next_slot, every.version),
        (false, Some(1_796_639_400_000), 13)
    );
    assert_eq!(nightly.schedule.name.as_str(), "nightly");
    assert_eq!(
        nightly.schedule.timing,
        Timing::cron("0 3 * * *", Some("Europe/Paris")).unwrap()
    );
    assert_eq!(nightly.schedule.template.group.as_ref(), Some(&g));
    assert_eq!((nightly.paused, nightly.version), (true, 14));

    // settings
    let limits = store.rate_limits(&q).await.unwrap();
    let queue_limit = limits.queue.expect("the queue's rate limit").limit;
    assert_eq!(
        (queue_limit.max(), queue_limit.per(), queue_limit.burst()),
        (1000, Duration::from_secs(1), 50)
    );
    assert_eq!(limits.groups.len(), 1);
    assert_eq!(limits.groups[0].group, g);
    let gl = limits.groups[0].state.limit;
    assert_eq!((gl.max(), gl.per(), gl.burst()), (100, Duration::from_secs(1), 10));
    assert!(limits.group_default.is_none());
    let retention = store.retention(&q).await.unwrap();
    assert_eq!(
        (retention.keep, retention.max_age, retention.max_output),
        (50, Duration::from_secs(3650 * 86_400), 4096)
    );
    assert_eq!(store.priority_aging(&q).await.unwrap(), Duration::from_secs(30));
    let groups = store.groups(&q, None).await.unwrap();
    assert_eq!(groups.default_limit, 3);
    assert_eq!(groups.groups.len(), 1);
    assert_eq!(
        (
            &groups.groups[0].group,
            groups.groups[0].waiting,
            groups.groups[0].active,
            groups.groups[0].limit
        ),
        (&g, 2, 0, Some(2))
    );
    let history = store.history(&q, 3).await.unwrap();
    assert_eq!(
        (
            history.completed.iter().sum::<u64>(),
            history.failed.iter().sum::<u64>()
        ),
        (1, 1),
        "the minute's counts: {history:?}"
    );
    let queues: Vec<String> = store.queues().await.unwrap().iter().map(|q| q.to_string()).collect();
    assert_eq!(queues, ["main", "paused"]);

    // the records, as the stream's entries
    let entries = store
        .raw(vec![
            b"XRANGE".to_vec(),
            b"emq:{main}:completions".to_vec(),
            b"-".to_vec(),
            b"+".to_vec(),
        ])
        .await
        .unwrap();
    let entries = array(&entries);
    assert_eq!(entries.len(), 3);
    let fields: Vec<Vec<String>> = entries
        .iter()
        .map(|e| {
            array(&array(e)[1])
                .iter()
                .map(|f| String::from_utf8_lossy(bulk(f)).into_owned())
                .collect()
        })
        .collect();
    assert_eq!(
        fields,
        [
            vec![
                "id",
                "done",
                "status",
                "completed",
                "attempts",
                "1",
                "output",
                "result of done",
                "at",
                "1796639102442"
            ],
            vec![
                "id",
                "boom",
                "status",
                "dead",
                "attempts",
                "1",
                "error",
                "it blew up",
                "at",
                "1796639102443"
            ],
            vec![
                "id",
                "cxl",
                "status",
                "cancelled",
                "attempts",
                "0",
                "error",
                "not wanted",
                "at",
                "1796639102444"
            ],
        ]
    );
    assert_eq!(bulk(&array(&entries[0])[0]), b"1796639102442-0");

    // the dedup keys still hold: until the holder finishes, and for a window
    let again = store
        .enqueue(
            &q,
            &[
                NewJob::new(b"dup again".to_vec())
                    .with_dedup(Dedup::new(DedupKey::new("k1").unwrap(), DedupMode::UntilFinished).unwrap()),
                NewJob::new(b"win again".to_vec()).with_dedup(
                    Dedup::new(DedupKey::new("k2").unwrap(), DedupMode::For(Duration::from_secs(60))).unwrap(),
                ),
            ],
        )
        .await
        .unwrap();
    assert_eq!(
        again,
        [Enqueued::Deduplicated(id("dup")), Enqueued::Deduplicated(id("win"))]
    );

    // the active job's token still fences it
    let rec = SettleOptions::default().record(true);
    assert_eq!(
        store
            .complete(&q, &echomq::store::Completion::new(id("run"), 2), rec)
            .await
            .unwrap(),
        Settled::Stale
    );
    assert_eq!(
        store
            .complete(
                &q,
                &echomq::store::Completion::new(id("run"), 1).output(Some(b"ran")),
                rec
            )
            .await
            .unwrap(),
        Settled::Ok
    );
    let run = job("run").await;
    assert_eq!(
        (run.state, run.output.as_deref()),
        (JobState::Completed, Some(&b"ran"[..]))
    );

    // the waiting jobs claimed by priority and round the ring, as the native store claimed them
    let mut order = Vec::new();
    loop {
        let claimed = store
            .claim(
                &q,
                echomq::store::ClaimRequest::new(1, Duration::from_secs(60))
                    .max_attempts(5)
                    .settle(rec),
            )
            .await
            .unwrap();
        let Some(j) = claimed.first() else { break };
        assert_eq!(j.token, 1, "{}: its first claim", j.id);
        order.push(j.id.to_string());
        assert_eq!(
            store
                .complete(
                    &q,
                    &echomq::store::Completion::new(j.id.clone(), j.token).output(Some(b"ok")),
                    rec
                )
                .await
                .unwrap(),
            Settled::Ok
        );
        assert!(order.len() <= 5, "claimed again: {order:?}");
    }
    assert_eq!(order, ["f-top", "g2", "f-mid", "g1", "f-low"]);
    let c = store.counts(&q).await.unwrap();
    assert_eq!((c.pending, c.active, c.scheduled, c.completed), (0, 0, 3, 7));
    let groups = store.groups(&q, None).await.unwrap();
    assert_eq!(groups.groups.len(), 1);
    assert_eq!(
        (
            groups.groups[0].waiting,
            groups.groups[0].active,
            groups.groups[0].limit
        ),
        (0, 0, Some(2)),
        "g's lane emptied, its slots freed, its limit kept"
    );

    // the paused queue gives nothing until resumed
    let none = store
        .claim(
            &p,
            echomq::store::ClaimRequest::new(5, Duration::from_secs(60))
                .max_attempts(5)
                .settle(rec),
        )
        .await
        .unwrap();
    assert!(none.is_empty());
    store.resume(&p).await.unwrap();
    let claimed = store
        .claim(
            &p,
            echomq::store::ClaimRequest::new(5, Duration::from_secs(60))
                .max_attempts(5)
                .settle(rec),
        )
        .await
        .unwrap();
    assert_eq!(claimed.iter().map(|j| j.id.as_str()).collect::<Vec<_>>(), ["p1"]);
    drop(store);

    // a second open migrates nothing
    let before = keyspace_dump(&path);
    let store = EmbeddedStore::open(&path).await.unwrap();
    assert_eq!(store.counts(&q).await.unwrap().completed, 7);
    drop(store);
    assert_eq!(tables(&path).0, 10);
    assert_eq!(keyspace_dump(&path), before, "the keyspace as the first open left it");
}

#[tokio::test]
async fn a_file_of_a_newer_schema_is_refused_and_left_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("newer.db");
    let path = path.to_str().unwrap();
    let conn = rusqlite::Connection::open(path).unwrap();
    conn.execute_batch("CREATE TABLE future (x); INSERT INTO future VALUES (42); PRAGMA user_version = 11;")
        .unwrap();
    drop(conn);
    let bytes = std::fs::read(path).unwrap();
    let err = EmbeddedStore::open(path).await.unwrap_err();
    assert!(
        err.to_string().contains("schema version 11"),
        "the refusal names the version: {err}"
    );
    assert!(
        std::fs::read(path).unwrap() == bytes,
        "the file is the same, byte for byte"
    );
    assert_eq!(tables(path), (11, vec!["future".to_string()]));
    let conn = rusqlite::Connection::open(path).unwrap();
    let rows: Vec<i64> = conn
        .prepare("SELECT x FROM future")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(rows, [42]);
}

#[tokio::test]
async fn a_new_file_starts_at_the_engine_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("new.db");
    let path = path.to_str().unwrap();
    let store = EmbeddedStore::open(path).await.unwrap();
    let q = QueueName::new("fresh").unwrap();
    store.enqueue(&q, &[NewJob::new(b"x".to_vec())]).await.unwrap();
    assert_eq!(store.counts(&q).await.unwrap().pending, 1);
    drop(store);
    let (version, names) = tables(path);
    assert_eq!(version, 10);
    assert_eq!(
        names,
        [
            "kv_cancels",
            "kv_hash",
            "kv_jobs",
            "kv_keys",
            "kv_list",
            "kv_set",
            "kv_zset"
        ]
    );
}
