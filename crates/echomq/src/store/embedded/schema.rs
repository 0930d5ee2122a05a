//! The embedded store's schema. Versions 1 to 9 are the native store's tables (`emq_*`: the Redis
//! keyspace mirrored table by table); version 10 is the engine's keyspace (`kv_*`: the keys the
//! scripts write, stored by type), into which migration 10 carries every key of the native tables.
//! Migrations are numbered and run inside one `BEGIN IMMEDIATE` transaction (several processes may
//! open a file at once): a file is migrated whole or not at all. A file from a newer schema is
//! refused, never touched.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Result};

mod to_engine;

/// The schema this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 10;

/// The native store's migrations, in SQL: migration n takes a file from version n-1 to n (1 to 9).
/// Migration 10 is [`to_engine::migrate`].
pub(crate) const MIGRATIONS: &[&str] = &[
    // 1: the keyspace
    "
    -- emq:queues
    CREATE TABLE emq_queues (queue TEXT PRIMARY KEY) WITHOUT ROWID;
    -- the strings and counters of a queue: id, paused, obliterating, wakes (the wake list's length,
    -- at most 16), metrics:<event>
    CREATE TABLE emq_kv (
      queue TEXT NOT NULL, key TEXT NOT NULL, value INTEGER NOT NULL,
      PRIMARY KEY (queue, key)) WITHOUT ROWID;
    -- emq:{q}:job:<id>: a column per field, NULL = field absent; numbers kept as text as Redis keeps them
    CREATE TABLE emq_jobs (
      queue TEXT NOT NULL, id TEXT NOT NULL,
      data BLOB, state TEXT, attempts TEXT, grp TEXT, max_attempts TEXT, run_at TEXT, stalled TEXT,
      last_error TEXT, cancel TEXT, output BLOB, finished_at TEXT,
      PRIMARY KEY (queue, id)) WITHOUT ROWID;
    -- the sorted sets pending and active (both on the rows from migration 2), scheduled, dead,
    -- completed (and cancelled from migration 9); ties ordered by member bytes
    CREATE TABLE emq_zsets (
      queue TEXT NOT NULL, zset TEXT NOT NULL, member TEXT NOT NULL, score INTEGER NOT NULL,
      PRIMARY KEY (queue, zset, member)) WITHOUT ROWID;
    CREATE INDEX emq_zsets_order ON emq_zsets (queue, zset, score, member);
    -- the lists ring and lane:<g>, in pos order (LPUSH below the least pos, RPUSH above the most)
    CREATE TABLE emq_lists (
      queue TEXT NOT NULL, list TEXT NOT NULL, pos INTEGER NOT NULL, member TEXT NOT NULL,
      PRIMARY KEY (queue, list, pos)) WITHOUT ROWID;
    CREATE INDEX emq_lists_member ON emq_lists (queue, list, member);
    -- emq:{q}:groups: a:<g>, l:<g>, r:<g>, l:~, r:~
    CREATE TABLE emq_groups (
      queue TEXT NOT NULL, field TEXT NOT NULL, value TEXT NOT NULL,
      PRIMARY KEY (queue, field)) WITHOUT ROWID;
    -- emq:{q}:completions
    CREATE TABLE emq_records (
      seq INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, id TEXT NOT NULL,
      status TEXT NOT NULL, attempts TEXT NOT NULL, field TEXT, value BLOB, at INTEGER NOT NULL);
    CREATE INDEX emq_records_queue ON emq_records (queue, seq);
    -- emq:{q}:cancel, durable: consumers read the requests newer than the last they saw
    CREATE TABLE emq_cancels (
      seq INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, id TEXT NOT NULL, reason TEXT);
    CREATE INDEX emq_cancels_queue ON emq_cancels (queue, seq);
    ",
    // 2: the sorted sets active and pending on the rows: a lease and a pending column, each ordered
    // by a partial index. An id left in one of them with no row keeps its score on a row with no
    // field.
    // The rows keyed (id, queue) and set members (member, zset, queue): a lookup's first comparison
    // is on the id, which differs between rows, so SQLite's fast text comparison decides most of
    // them (the sets' order index keeps its (queue, zset, score, member)).
    "
    CREATE TABLE emq_jobs_2 (
      queue TEXT NOT NULL, id TEXT NOT NULL,
      data BLOB, state TEXT, attempts TEXT, grp TEXT, max_attempts TEXT, run_at TEXT, stalled TEXT,
      last_error TEXT, cancel TEXT, output BLOB, finished_at TEXT, lease INTEGER, pending INTEGER,
      PRIMARY KEY (id, queue)) WITHOUT ROWID;
    INSERT INTO emq_jobs_2 (queue, id, data, state, attempts, grp, max_attempts, run_at, stalled, last_error,
      cancel, output, finished_at)
      SELECT queue, id, data, state, attempts, grp, max_attempts, run_at, stalled, last_error, cancel, output,
      finished_at FROM emq_jobs;
    DROP TABLE emq_jobs;
    ALTER TABLE emq_jobs_2 RENAME TO emq_jobs;
    INSERT INTO emq_jobs (queue, id, lease)
      SELECT queue, member, score FROM emq_zsets WHERE zset = 'active'
      ON CONFLICT (id, queue) DO UPDATE SET lease = excluded.lease;
    INSERT INTO emq_jobs (queue, id, pending)
      SELECT queue, member, score FROM emq_zsets WHERE zset = 'pending'
      ON CONFLICT (id, queue) DO UPDATE SET pending = excluded.pending;
    DELETE FROM emq_zsets WHERE zset IN ('active', 'pending');
    CREATE TABLE emq_zsets_2 (
      queue TEXT NOT NULL, zset TEXT NOT NULL, member TEXT NOT NULL, score INTEGER NOT NULL,
      PRIMARY KEY (member, zset, queue)) WITHOUT ROWID;
    INSERT INTO emq_zsets_2 (queue, zset, member, score) SELECT queue, zset, member, score FROM emq_zsets;
    DROP TABLE emq_zsets;
    ALTER TABLE emq_zsets_2 RENAME TO emq_zsets;
    CREATE INDEX emq_zsets_order ON emq_zsets (queue, zset, score, member);
    CREATE INDEX emq_jobs_lease ON emq_jobs (queue, lease, id) WHERE lease IS NOT NULL;
    CREATE INDEX emq_jobs_pending ON emq_jobs (queue, pending, id) WHERE pending IS NOT NULL;
    ",
    "
    -- free: the claims that used no attempt (release), written only when above 0
    ALTER TABLE emq_jobs ADD COLUMN free TEXT;
    ",
    "
    -- kind: what kind of job a typed push made it (a worker routes by it); absent for a raw job
    ALTER TABLE emq_jobs ADD COLUMN kind TEXT;
    ",
    "
    -- waited: the mark of a job a caller waits on (its finish is announced); output_dropped: the
    -- size of an output the queue's retention did not keep
    ALTER TABLE emq_jobs ADD COLUMN waited TEXT;
    ALTER TABLE emq_jobs ADD COLUMN output_dropped TEXT;
    ",
    "
    -- priority (1..9, absent = 0) and retry (a job's own retry policy, as text), written only when
    -- set; the lanes become sorted sets ranked as `pending` is, each keeping its order (ranks 1,
    -- 2, …: after recovered jobs at 0, before every rank given since, which are far larger)
    ALTER TABLE emq_jobs ADD COLUMN priority TEXT;
    ALTER TABLE emq_jobs ADD COLUMN retry TEXT;
    INSERT INTO emq_zsets (queue, zset, member, score)
      SELECT queue, list, member, row_number() OVER (PARTITION BY queue, list ORDER BY pos)
      FROM emq_lists WHERE list LIKE 'lane:%'
      ON CONFLICT (member, zset, queue) DO NOTHING;
    DELETE FROM emq_lists WHERE list LIKE 'lane:%';
    ",
    "
    -- emq:{q}:schedule:<name>: a schedule's fields, one row each (its name in the sorted set
    -- schedules, its next slot in schedule_due)
    CREATE TABLE emq_schedules (
      queue TEXT NOT NULL, name TEXT NOT NULL, field TEXT NOT NULL, value BLOB NOT NULL,
      PRIMARY KEY (queue, name, field)) WITHOUT ROWID;
    -- emq:{q}:dedup: each dedup key held, its holder and the end of its window (ms; NULL: until
    -- the holder finishes, or while it waits for a debounce)
    CREATE TABLE emq_dedup (
      queue TEXT NOT NULL, key TEXT NOT NULL, holder TEXT NOT NULL, till INTEGER,
      PRIMARY KEY (queue, key)) WITHOUT ROWID;
    ",
    "
    -- the sizes counts reads in O(1) where a count(*) is O(n), among a queue's counters:
    -- size:pending (the rows in pending) and size:lanes (the members of every lane:<g>), kept by
    -- the writes that move a row into or out of them, once per transaction
    INSERT INTO emq_kv (queue, key, value)
      SELECT queue, 'size:pending', count(*) FROM emq_jobs WHERE pending IS NOT NULL GROUP BY queue;
    INSERT INTO emq_kv (queue, key, value)
      SELECT queue, 'size:lanes', count(*) FROM emq_zsets WHERE substr(zset, 1, 5) = 'lane:' GROUP BY queue;
    ",
    "
    -- the kept rows of each finished state in a set of its own: cancelled rows leave `completed`
    -- for `cancelled` (each state's list pages its own set)
    UPDATE emq_zsets SET zset = 'cancelled' WHERE zset = 'completed' AND EXISTS (
      SELECT 1 FROM emq_jobs AS j
      WHERE j.id = emq_zsets.member AND j.queue = emq_zsets.queue AND j.state = 'cancelled');
    ",
];

/// Brings the file to [`SCHEMA_VERSION`], or refuses a newer one. A file already current takes a
/// read only: an open never queues for the write lock behind other processes' verbs (under a
/// steady stream of them it could wait out the busy timeout and fail). Only a migration takes
/// `BEGIN IMMEDIATE`, and reads the version again under it (another process may have migrated
/// the file meanwhile). A new file (version 0) gets the engine's keyspace at once; a file of
/// version 1 to 9 runs the native migrations up to 9, then migration 10 carries it into the
/// keyspace, all in one transaction.
pub(crate) fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    if version(conn, path)? == SCHEMA_VERSION {
        return Ok(());
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| super::open_error(path, e))?;
    let version = version(&tx, path)?;
    if version == 0 {
        tx.execute_batch(to_engine::ENGINE_SCHEMA)
            .map_err(|e| super::open_error(path, e))?;
    } else if version < SCHEMA_VERSION {
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
            tx.execute_batch(sql).map_err(|e| super::open_error(path, e))?;
            tx.pragma_update(None, "user_version", i as i64 + 1)
                .map_err(|e| super::open_error(path, e))?;
        }
        to_engine::migrate(&tx, now_us()).map_err(|e| super::open_error(path, e))?;
    }
    if version < SCHEMA_VERSION {
        tx.pragma_update(None, "user_version", SCHEMA_VERSION)
            .map_err(|e| super::open_error(path, e))?;
    }
    tx.commit().map_err(|e| super::open_error(path, e))
}

/// The time in µs since the Unix epoch (0 on a clock before it).
fn now_us() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64)
}

/// The file's schema version (`PRAGMA user_version`); a version newer than this build's is an
/// error, and the file is not touched.
pub(crate) fn version(conn: &Connection, path: &str) -> Result<i64> {
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| super::open_error(path, e))?;
    if version > SCHEMA_VERSION {
        return Err(Error::Misconfigured {
            addr: path.to_string(),
            reason: format!(
                "{path} has schema version {version}, newer than this build's {SCHEMA_VERSION}: \
                 refusing to touch it (upgrade echomq)"
            ),
        });
    }
    Ok(version)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use rusqlite::{params, Connection};

    use super::{MIGRATIONS, SCHEMA_VERSION};
    use crate::keyspace::{JobId, QueueName};
    use crate::store::embedded::EmbeddedStore;
    use crate::store::{SettleOptions, Settled, Store};

    /// The file's tables of the native store (none once migrated).
    fn native_tables(path: &str) -> Vec<String> {
        let conn = Connection::open(path).unwrap();
        let mut stmt = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table' AND name LIKE 'emq_%'")
            .unwrap();
        let names = stmt.query_map([], |r| r.get(0)).unwrap();
        names.collect::<Result<_, _>>().unwrap()
    }

    #[tokio::test]
    async fn a_schema_1_file_is_migrated_into_the_keyspace_its_active_and_pending_on_the_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        let path = path.to_str().unwrap();
        // a file as a schema-1 build left it: job 1 active, job 2 waiting, and the id 9 in active
        // with no row (its row deleted under the store's feet)
        let conn = Connection::open(path).unwrap();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.pragma_update(None, "user_version", 1).unwrap();
        let far = 4_000_000_000_000_i64;
        for (id, state, attempts) in [("1", "active", Some("1")), ("2", "pending", None)] {
            conn.execute(
                "INSERT INTO emq_jobs (queue, id, data, state, attempts) VALUES ('q', ?1, x'7b7d', ?2, ?3)",
                params![id, state, attempts],
            )
            .unwrap();
        }
        for (zset, member, score) in [("active", "1", far), ("active", "9", far + 1), ("pending", "2", 2)] {
            conn.execute(
                "INSERT INTO emq_zsets (queue, zset, member, score) VALUES ('q', ?1, ?2, ?3)",
                params![zset, member, score],
            )
            .unwrap();
        }
        // job 2 is claimable: the flat set's member on the ring, with its flag
        conn.execute_batch(
            "INSERT INTO emq_lists (queue, list, pos, member) VALUES ('q', 'ring', 0, '~');
             INSERT INTO emq_groups (queue, field, value) VALUES ('q', 'r:~', '1');",
        )
        .unwrap();
        drop(conn);

        let store = EmbeddedStore::open(path).await.unwrap();
        let q = QueueName::new("q").unwrap();
        let counts = store.counts(&q).await.unwrap();
        assert_eq!((counts.active, counts.pending), (2, 1), "both ids still in active");
        assert_eq!(
            store.get(&q, &JobId::from_store("9".to_string())).await.unwrap(),
            None,
            "no row made up for 9"
        );
        let job1 = store
            .get(&q, &JobId::from_store("1".to_string()))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(job1.score, Some(far as u64), "the lease deadline kept");
        let settled = store
            .complete(
                &q,
                &crate::store::Completion::new(JobId::from_store("1".to_string()), 1),
                SettleOptions::default(),
            )
            .await
            .unwrap();
        assert_eq!(settled, Settled::Ok, "the holder of job 1 still settles it");
        let claimed = store
            .claim(
                &q,
                crate::store::ClaimRequest::new(5, Duration::from_secs(5)).max_attempts(3),
            )
            .await
            .unwrap();
        assert_eq!(claimed.len(), 1);
        assert_eq!(claimed[0].id.as_str(), "2");
        drop(store);

        let conn = Connection::open(path).unwrap();
        let v: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).unwrap();
        assert_eq!(v, SCHEMA_VERSION);
        assert_eq!(native_tables(path), Vec::<String>::new());
        let (fields, active): (i64, f64) = conn
            .query_row(
                "SELECT fields, active FROM kv_jobs WHERE id = CAST('9' AS BLOB)",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap();
        assert_eq!(
            (fields, active),
            (0, (far + 1) as f64),
            "9 still in active, with no field"
        );
    }

    #[tokio::test]
    async fn a_schema_5_file_is_migrated_into_the_keyspace_its_list_lanes_sorted_in_their_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v5.db");
        let path = path.to_str().unwrap();
        // a file as a schema-5 build left it: group g's lane a list (positions below 0 from a
        // recovery's LPUSH), on the ring
        let conn = Connection::open(path).unwrap();
        for sql in &MIGRATIONS[..5] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 5).unwrap();
        for (pos, id) in [(-1, "back"), (0, "first"), (1, "second")] {
            conn.execute(
                "INSERT INTO emq_jobs (queue, id, data, state, grp) VALUES ('q', ?1, x'7b7d', 'pending', 'g')",
                params![id],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO emq_lists (queue, list, pos, member) VALUES ('q', 'lane:g', ?1, ?2)",
                params![pos, id],
            )
            .unwrap();
        }
        conn.execute_batch(
            "INSERT INTO emq_lists (queue, list, pos, member) VALUES ('q', 'ring', 0, 'g');
             INSERT INTO emq_groups (queue, field, value) VALUES ('q', 'r:g', '1'), ('q', 'l:g', '10');",
        )
        .unwrap();
        drop(conn);

        let store = EmbeddedStore::open(path).await.unwrap();
        let q = QueueName::new("q").unwrap();
        let g = crate::keyspace::GroupName::new("g").unwrap();
        let urgent = crate::NewJob::new(b"{}".to_vec())
            .with_id(JobId::new("urgent").unwrap())
            .with_priority(0);
        store.genqueue(&q, &g, &[urgent]).await.unwrap();
        let claimed = store
            .claim(
                &q,
                crate::store::ClaimRequest::new(10, Duration::from_secs(5)).max_attempts(3),
            )
            .await
            .unwrap();
        let ids: Vec<&str> = claimed.iter().map(|j| j.id.as_str()).collect();
        assert_eq!(
            ids,
            ["back", "first", "second", "urgent"],
            "the lane's order kept, new jobs after it"
        );
        drop(store);
        assert_eq!(native_tables(path), Vec::<String>::new());
    }

    #[tokio::test]
    async fn a_schema_7_file_is_migrated_into_the_keyspace_its_waiting_jobs_counted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v7.db");
        let path = path.to_str().unwrap();
        // a file as a schema-7 build left it: two flat jobs in pending, three in g's lane
        let conn = Connection::open(path).unwrap();
        for sql in &MIGRATIONS[..7] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 7).unwrap();
        for (i, id) in ["f1", "f2"].iter().enumerate() {
            conn.execute(
                "INSERT INTO emq_jobs (queue, id, data, state, pending) VALUES ('q', ?1, x'7b7d', 'pending', ?2)",
                params![id, i as i64 + 1],
            )
            .unwrap();
        }
        for (i, id) in ["g1", "g2", "g3"].iter().enumerate() {
            conn.execute(
                "INSERT INTO emq_jobs (queue, id, data, state, grp) VALUES ('q', ?1, x'7b7d', 'pending', 'g')",
                params![id],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO emq_zsets (queue, zset, member, score) VALUES ('q', 'lane:g', ?1, ?2)",
                params![id, i as i64 + 1],
            )
            .unwrap();
        }
        conn.execute_batch(
            "INSERT INTO emq_lists (queue, list, pos, member) VALUES ('q', 'ring', 0, 'g'), ('q', 'ring', 1, '~');
             INSERT INTO emq_groups (queue, field, value) VALUES ('q', 'r:g', '1'), ('q', 'r:~', '1');",
        )
        .unwrap();
        drop(conn);

        let store = EmbeddedStore::open(path).await.unwrap();
        let q = QueueName::new("q").unwrap();
        assert_eq!(store.counts(&q).await.unwrap().pending, 5, "counted by the migration");
        let claimed = store
            .claim(
                &q,
                crate::store::ClaimRequest::new(2, Duration::from_secs(5)).max_attempts(3),
            )
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2);
        store.enqueue(&q, &[crate::NewJob::new(b"{}".to_vec())]).await.unwrap();
        assert_eq!(store.counts(&q).await.unwrap().pending, 4, "then kept by the writes");
    }

    #[tokio::test]
    async fn a_schema_8_file_is_migrated_into_the_keyspace_its_cancelled_rows_in_a_set_of_their_own() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v8.db");
        let path = path.to_str().unwrap();
        // a file as a schema-8 build left it: kept rows of both finished states in `completed`
        let conn = Connection::open(path).unwrap();
        for sql in &MIGRATIONS[..8] {
            conn.execute_batch(sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 8).unwrap();
        for (i, (id, state)) in [
            ("d1", "completed"),
            ("c1", "cancelled"),
            ("d2", "completed"),
            ("c2", "cancelled"),
        ]
        .iter()
        .enumerate()
        {
            conn.execute(
                "INSERT INTO emq_jobs (queue, id, state, finished_at) VALUES ('q', ?1, ?2, ?3)",
                params![id, state, (i as i64 + 1).to_string()],
            )
            .unwrap();
            conn.execute(
                "INSERT INTO emq_zsets (queue, zset, member, score) VALUES ('q', 'completed', ?1, ?2)",
                params![id, i as i64 + 1],
            )
            .unwrap();
        }
        drop(conn);

        let store = EmbeddedStore::open(path).await.unwrap();
        let q = QueueName::new("q").unwrap();
        let listed = |state| {
            let store = &store;
            let q = &q;
            async move {
                let page = store.list(q, state, None, 10).await.unwrap();
                page.ids.iter().map(|i| i.to_string()).collect::<Vec<_>>()
            }
        };
        assert_eq!(listed(crate::JobState::Completed).await, ["d2", "d1"]);
        assert_eq!(listed(crate::JobState::Cancelled).await, ["c2", "c1"]);
    }
}
