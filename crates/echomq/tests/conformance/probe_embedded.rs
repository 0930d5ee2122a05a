//! The probe of the embedded store: its own rusqlite connection to the case's database file,
//! reading and writing the tables that mirror the Redis keyspace (`store/embedded/schema.rs`) for
//! the case's queue. Each call runs on a blocking thread, so a probe never stalls the runtime the
//! store's callers run on.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::store::embedded::EmbeddedStore;
use echomq::store::Store;
use echomq::{JobId, QueueName};
use rusqlite::types::Value;
use rusqlite::{params, Connection, OptionalExtension};

use super::{Record, Snapshot};

/// How long a probe's statement waits for the store's writer.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The sorted sets of the keyspace, the only names a case may pass as a set.
const SETS: &[&str] = &[
    "pending",
    "active",
    "scheduled",
    "dead",
    "completed",
    "cancelled",
    "schedules",
    "schedule_due",
    "dedup_sweep",
];

#[derive(Clone)]
pub struct EmbeddedProbe {
    path: String,
    queue: String,
    conn: Arc<Mutex<Connection>>,
}

/// The `emq_jobs` column of a row field (the row's `group` is the column `grp`).
fn column(field: &str) -> &'static str {
    match field {
        "data" => "data",
        "state" => "state",
        "attempts" => "attempts",
        "free" => "free",
        "group" => "grp",
        "max_attempts" => "max_attempts",
        "run_at" => "run_at",
        "stalled" => "stalled",
        "last_error" => "last_error",
        "cancel" => "cancel",
        "output" => "output",
        "finished_at" => "finished_at",
        "priority" => "priority",
        "retry" => "retry",
        other => panic!("{other:?} is not a field of a job row"),
    }
}

/// A row field's value as Redis would show it.
fn text(v: Value) -> Option<String> {
    match v {
        Value::Null => None,
        Value::Integer(i) => Some(i.to_string()),
        Value::Real(r) => Some(r.to_string()),
        Value::Text(s) => Some(s),
        Value::Blob(b) => Some(String::from_utf8_lossy(&b).into_owned()),
    }
}

/// True of a row with no field (only a lease left on it: no row to the verbs).
const NO_FIELD: &str = "coalesce(data, state, attempts, grp, max_attempts, run_at, stalled, last_error, cancel, \
                        output, finished_at) IS NULL";

/// The column of the rows a sorted set lives in, for `active` and `pending` (schema 2).
fn row_col(set: &str) -> Option<&'static str> {
    match set {
        "active" => Some("lease"),
        "pending" => Some("pending"),
        _ => None,
    }
}

/// Deletes the row of `id` when it has no field and is in no row set left (a hash with no fields).
fn drop_if_no_row(c: &Connection, q: &str, id: &str) {
    c.execute(
        &format!(
            "DELETE FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND lease IS NULL AND pending IS NULL AND {NO_FIELD}"
        ),
        params![q, id],
    )
    .expect("delete a row with no field");
}

fn set_name(set: &str) -> &str {
    assert!(SETS.contains(&set), "{set:?} is not a sorted set of the keyspace");
    set
}

impl EmbeddedProbe {
    pub fn open(path: &str, q: &QueueName) -> Self {
        let conn = Connection::open(path).unwrap_or_else(|e| panic!("probe connection to {path}: {e}"));
        conn.busy_timeout(BUSY_TIMEOUT).expect("busy_timeout");
        EmbeddedProbe {
            path: path.to_string(),
            queue: q.as_str().to_string(),
            conn: Arc::new(Mutex::new(conn)),
        }
    }

    /// Runs `f` with the connection and the queue's name on a blocking thread; a panic in `f` is
    /// the caller's, with its own message.
    async fn with<T, F>(&self, f: F) -> T
    where
        T: Send + 'static,
        F: FnOnce(&Connection, &str) -> T + Send + 'static,
    {
        let conn = self.conn.clone();
        let queue = self.queue.clone();
        let task = tokio::task::spawn_blocking(move || {
            let conn = conn.lock().unwrap_or_else(|p| p.into_inner());
            f(&conn, &queue)
        });
        match task.await {
            Ok(t) => t,
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("probe task: {e}"),
        }
    }

    pub async fn wakes(&self) -> u64 {
        self.with(|c, q| {
            c.query_row(
                "SELECT value FROM emq_kv WHERE queue = ?1 AND key = 'wakes'",
                params![q],
                |r| r.get::<_, i64>(0),
            )
            .optional()
            .expect("read wakes")
            .map_or(0, |n| u64::try_from(n).expect("wakes is not negative"))
        })
        .await
    }

    pub async fn clear_wakes(&self) {
        self.with(|c, q| {
            c.execute("DELETE FROM emq_kv WHERE queue = ?1 AND key = 'wakes'", params![q])
                .expect("clear wakes");
        })
        .await
    }

    pub async fn keep_wakes(&self, n: u64) {
        self.with(move |c, q| {
            c.execute(
                "UPDATE emq_kv SET value = min(value, ?2) WHERE queue = ?1 AND key = 'wakes'",
                params![q, n as i64],
            )
            .expect("keep wakes");
        })
        .await
    }

    pub async fn slots(&self) -> std::collections::HashMap<String, u64> {
        self.with(|c, q| {
            let mut s = c
                .prepare("SELECT field, value FROM emq_groups WHERE queue = ?1 AND substr(field, 1, 2) = 'a:'")
                .expect("prepare slots");
            let rows = s
                .query_map(params![q], |r| Ok((r.get::<_, String>(0)?, r.get::<_, Value>(1)?)))
                .expect("read slots");
            rows.map(|row| {
                let (field, value) = row.expect("a slot");
                let n = text(value).unwrap_or_default();
                (field[2..].to_string(), n.parse().expect("a: is an integer"))
            })
            .collect()
        })
        .await
    }

    fn list(c: &Connection, q: &str, list: &str) -> Vec<String> {
        let mut s = c
            .prepare_cached("SELECT member FROM emq_lists WHERE queue = ?1 AND list = ?2 ORDER BY pos")
            .expect("prepare list");
        let rows = s
            .query_map(params![q, list], |r| r.get::<_, String>(0))
            .expect("read list");
        rows.map(|m| m.expect("a member")).collect()
    }

    pub async fn ring(&self) -> Vec<String> {
        self.with(|c, q| Self::list(c, q, "ring")).await
    }

    pub async fn dedup_keys(&self) -> Vec<String> {
        self.with(|c, q| {
            let mut s = c
                .prepare("SELECT key FROM emq_dedup WHERE queue = ?1 ORDER BY key")
                .expect("prepare dedup");
            let rows = s.query_map(params![q], |r| r.get::<_, String>(0)).expect("read dedup");
            rows.map(|k| k.expect("a key")).collect()
        })
        .await
    }

    /// A set kept in `emq_zsets` (not `pending` or `active`, columns of the rows).
    pub async fn members(&self, set: &str) -> Vec<(String, u64)> {
        let set = set_name(set).to_string();
        assert!(row_col(&set).is_none(), "{set} is a column of the rows");
        self.with(move |c, q| {
            let mut s = c
                .prepare("SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?2 ORDER BY member")
                .expect("prepare members");
            let rows = s
                .query_map(params![q, set], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)? as u64))
                })
                .expect("read members");
            rows.map(|m| m.expect("a member")).collect()
        })
        .await
    }

    pub async fn set_member_score(&self, set: &str, member: &str, score: u64) {
        let (set, member) = (set_name(set).to_string(), member.to_string());
        assert!(row_col(&set).is_none(), "{set} is a column of the rows");
        self.with(move |c, q| {
            c.execute(
                "INSERT INTO emq_zsets (queue, zset, member, score) VALUES (?1, ?2, ?3, ?4) \
                 ON CONFLICT (member, zset, queue) DO UPDATE SET score = excluded.score",
                params![q, set, member, score as i64],
            )
            .expect("set a score");
        })
        .await
    }

    pub async fn group_fields(&self) -> Vec<String> {
        self.with(|c, q| {
            let mut s = c
                .prepare("SELECT field FROM emq_groups WHERE queue = ?1")
                .expect("prepare groups");
            let rows = s.query_map(params![q], |r| r.get::<_, String>(0)).expect("read groups");
            let mut fields: Vec<String> = rows.map(|f| f.expect("a field")).collect();
            fields.sort();
            fields
        })
        .await
    }

    pub async fn row_field(&self, id: &JobId, field: &str) -> Option<String> {
        let (id, col) = (id.to_string(), column(field));
        self.with(move |c, q| {
            let sql = format!("SELECT {col} FROM emq_jobs WHERE queue = ?1 AND id = ?2");
            c.query_row(&sql, params![q, id], |r| r.get::<_, Value>(0))
                .optional()
                .expect("read a row field")
                .and_then(text)
        })
        .await
    }

    /// HSET: the row made when absent, the field written (as a blob for the payload and output,
    /// as text for the rest, as the store writes them).
    pub async fn set_row_field(&self, id: &JobId, field: &str, value: &str) {
        let (id, col, value) = (id.to_string(), column(field), value.to_string());
        self.with(move |c, q| {
            let value = match col {
                "data" | "output" => Value::Blob(value.into_bytes()),
                _ => Value::Text(value),
            };
            c.execute(
                "INSERT INTO emq_jobs (queue, id) VALUES (?1, ?2) ON CONFLICT (id, queue) DO NOTHING",
                params![q, id],
            )
            .expect("make the row");
            let sql = format!("UPDATE emq_jobs SET {col} = ?3 WHERE queue = ?1 AND id = ?2");
            c.execute(&sql, params![q, id, value]).expect("write a row field");
        })
        .await
    }

    /// HDEL: the field gone, and the row with it when it was the last (as a hash with no fields).
    pub async fn del_row_field(&self, id: &JobId, field: &str) {
        let (id, col) = (id.to_string(), column(field));
        self.with(move |c, q| {
            let sql = format!("UPDATE emq_jobs SET {col} = NULL WHERE queue = ?1 AND id = ?2");
            c.execute(&sql, params![q, id]).expect("delete a row field");
            drop_if_no_row(c, q, &id);
        })
        .await
    }

    pub async fn del_row(&self, id: &JobId) -> bool {
        let id = id.to_string();
        self.with(move |c, q| {
            // an id in active or pending keeps its score on a row with no field (DEL leaves sets be)
            let deleted = c
                .execute(
                    "DELETE FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND lease IS NULL AND pending IS NULL",
                    params![q, id],
                )
                .expect("delete a row");
            deleted == 1
                || c.execute(
                    &format!(
                        "UPDATE emq_jobs SET data = NULL, state = NULL, attempts = NULL, grp = NULL, \
                         max_attempts = NULL, run_at = NULL, stalled = NULL, last_error = NULL, cancel = NULL, \
                         output = NULL, finished_at = NULL WHERE queue = ?1 AND id = ?2 AND NOT {NO_FIELD}"
                    ),
                    params![q, id],
                )
                .expect("empty a row kept for its sets")
                    == 1
        })
        .await
    }

    pub async fn row_exists(&self, id: &JobId) -> bool {
        let id = id.to_string();
        self.with(move |c, q| {
            c.prepare(&format!(
                "SELECT 1 FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND NOT {NO_FIELD}"
            ))
            .and_then(|mut s| s.exists(params![q, id]))
            .expect("read a row")
        })
        .await
    }

    pub async fn score(&self, set: &str, id: &JobId) -> Option<u64> {
        let (set, id) = (set_name(set).to_string(), id.to_string());
        self.with(move |c, q| {
            // `active` and `pending` are columns of the rows (schema 2)
            let sql = match row_col(&set) {
                Some(col) => {
                    format!("SELECT {col} FROM emq_jobs WHERE queue = ?1 AND ?2 = ?2 AND id = ?3 AND {col} IS NOT NULL")
                }
                None => "SELECT score FROM emq_zsets WHERE queue = ?1 AND zset = ?2 AND member = ?3".to_string(),
            };
            c.query_row(&sql, params![q, set, id], |r| r.get::<_, i64>(0))
                .optional()
                .expect("read a score")
                .map(|s| s as u64)
        })
        .await
    }

    pub async fn set_len(&self, set: &str) -> u64 {
        let set = set_name(set).to_string();
        self.with(move |c, q| {
            let sql = match row_col(&set) {
                Some(col) => {
                    format!("SELECT count(*) FROM emq_jobs WHERE queue = ?1 AND ?2 = ?2 AND {col} IS NOT NULL")
                }
                None => "SELECT count(*) FROM emq_zsets WHERE queue = ?1 AND zset = ?2".to_string(),
            };
            c.query_row(&sql, params![q, set], |r| r.get::<_, i64>(0))
                .expect("count a set") as u64
        })
        .await
    }

    pub async fn remove_from_set(&self, set: &str, id: &JobId) -> bool {
        let (set, id) = (set_name(set).to_string(), id.to_string());
        self.with(move |c, q| {
            if let Some(col) = row_col(&set) {
                let n = c
                    .execute(
                        &format!("UPDATE emq_jobs SET {col} = NULL WHERE queue = ?1 AND id = ?2 AND {col} IS NOT NULL"),
                        params![q, id],
                    )
                    .expect("remove from a row set");
                drop_if_no_row(c, q, &id);
                return n == 1;
            }
            c.execute(
                "DELETE FROM emq_zsets WHERE queue = ?1 AND zset = ?2 AND member = ?3",
                params![q, set, id],
            )
            .expect("remove from a set")
                == 1
        })
        .await
    }

    /// The embedded store's clock is this machine's.
    pub async fn set_schedule_slots(&self, name: &str, slots: &[u64]) {
        let text = slots.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let (name, first) = (name.to_string(), slots.first().copied().unwrap_or(0) as i64);
        self.with(move |c, q| {
            c.execute(
                "UPDATE emq_schedules SET value = ?3 WHERE queue = ?1 AND name = ?2 AND field = 'slots'",
                params![q, name, text.into_bytes()],
            )
            .expect("set the slots");
            c.execute(
                "INSERT INTO emq_zsets (queue, zset, member, score) VALUES (?1, 'schedule_due', ?2, ?3) \
                 ON CONFLICT (member, zset, queue) DO UPDATE SET score = excluded.score",
                params![q, name, first],
            )
            .expect("set the due entry");
        })
        .await
    }

    pub async fn now_ms(&self) -> u64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("the clock is past 1970")
            .as_millis() as u64
    }

    pub async fn records(&self) -> Vec<Record> {
        self.with(|c, q| {
            let mut s = c
                .prepare(
                    "SELECT seq, id, status, attempts, field, value, at FROM emq_records WHERE queue = ?1 ORDER BY seq",
                )
                .expect("prepare records");
            let rows = s
                .query_map(params![q], |r| {
                    Ok((
                        r.get::<_, i64>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                        r.get::<_, Value>(3)?,
                        r.get::<_, Option<String>>(4)?,
                        r.get::<_, Value>(5)?,
                        r.get::<_, i64>(6)?,
                    ))
                })
                .expect("read records");
            rows.map(|row| {
                let (seq, id, status, attempts, field, value, at) = row.expect("a record");
                let value = text(value);
                let (mut output, mut error) = (None, None);
                match field.as_deref() {
                    None => assert_eq!(value, None, "record {seq}: a value with no field"),
                    Some("output") => output = Some(value.expect("an output record has its value")),
                    Some("error") => error = Some(value.expect("an error record has its value")),
                    Some(other) => panic!("record {seq} has an unknown field {other:?}"),
                }
                Record {
                    id,
                    status,
                    attempts: text(attempts).expect("a record has attempts"),
                    output,
                    error,
                    at: u64::try_from(at).expect("at is not negative"),
                }
            })
            .collect()
        })
        .await
    }

    /// The queue's rows, named as the Redis keys they mirror.
    pub async fn keys(&self) -> Vec<String> {
        self.with(|c, q| {
            let strings = |sql: &str| -> Vec<String> {
                let mut s = c.prepare(sql).expect("prepare keys");
                let rows = s.query_map(params![q], |r| r.get::<_, String>(0)).expect("read keys");
                rows.map(|k| k.expect("a key")).collect()
            };
            let mut keys = Vec::new();
            // the wake list's length is a counter: an empty list is no key
            keys.extend(strings(
                "SELECT CASE key WHEN 'wakes' THEN 'wake' ELSE key END FROM emq_kv \
                 WHERE queue = ?1 AND NOT (key = 'wakes' AND value = 0)",
            ));
            keys.extend(strings(
                "SELECT 'job:' || id FROM emq_jobs WHERE queue = ?1 AND coalesce(data, state, attempts, grp, \
                 max_attempts, run_at, stalled, last_error, cancel, output, finished_at) IS NOT NULL",
            ));
            keys.extend(strings("SELECT DISTINCT zset FROM emq_zsets WHERE queue = ?1"));
            keys.extend(strings(
                "SELECT DISTINCT 'active' FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL",
            ));
            keys.extend(strings(
                "SELECT DISTINCT 'pending' FROM emq_jobs WHERE queue = ?1 AND pending IS NOT NULL",
            ));
            keys.extend(strings("SELECT DISTINCT list FROM emq_lists WHERE queue = ?1"));
            keys.extend(strings("SELECT DISTINCT 'groups' FROM emq_groups WHERE queue = ?1"));
            keys.extend(strings(
                "SELECT DISTINCT 'completions' FROM emq_records WHERE queue = ?1",
            ));
            keys.extend(strings("SELECT DISTINCT 'cancel' FROM emq_cancels WHERE queue = ?1"));
            // the Redis store's `registered` mirrors the queue's row in emq_queues
            keys.extend(strings("SELECT 'registered' FROM emq_queues WHERE queue = ?1"));
            keys.sort();
            keys
        })
        .await
    }

    /// Every row of the queue in every table, by what it mirrors: a list as its members in order
    /// (not their positions, which a pop and a push move without changing the list), an empty wake
    /// list as nothing.
    pub async fn snapshot(&self) -> Snapshot {
        self.with(|c, q| {
            let mut out: BTreeMap<String, Vec<u8>> = BTreeMap::new();
            let mut rows = |table: &str, sql: &str, key_cols: usize| {
                let mut s = c.prepare(sql).expect("prepare snapshot");
                let n = s.column_count();
                let mut rows = s.query(params![q]).expect("read snapshot");
                while let Some(r) = rows.next().expect("a row") {
                    let values: Vec<Value> = (0..n).map(|i| r.get::<_, Value>(i).expect("a value")).collect();
                    let key = format!("{table}{:?}", &values[..key_cols]);
                    let value = format!("{:?}", &values[key_cols..]).into_bytes();
                    assert!(out.insert(key.clone(), value).is_none(), "{key} twice");
                }
            };
            rows("queues", "SELECT queue FROM emq_queues WHERE queue = ?1", 1);
            rows(
                "kv",
                "SELECT key, value FROM emq_kv WHERE queue = ?1 AND NOT (key = 'wakes' AND value = 0)",
                1,
            );
            rows(
                "job",
                &format!(
                    "SELECT id, data, state, attempts, grp, max_attempts, run_at, stalled, last_error, cancel, \
                     output, finished_at FROM emq_jobs WHERE queue = ?1 AND NOT {NO_FIELD}"
                ),
                1,
            );
            rows(
                "zset",
                "SELECT zset, member, score FROM emq_zsets WHERE queue = ?1 \
                 UNION ALL SELECT 'active', id, lease FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL \
                 UNION ALL SELECT 'pending', id, pending FROM emq_jobs WHERE queue = ?1 AND pending IS NOT NULL",
                2,
            );
            rows(
                "list",
                "SELECT list, group_concat(member, ' ' ORDER BY pos) FROM emq_lists WHERE queue = ?1 GROUP BY list",
                1,
            );
            rows("groups", "SELECT field, value FROM emq_groups WHERE queue = ?1", 1);
            rows(
                "record",
                "SELECT seq, id, status, attempts, field, value, at FROM emq_records WHERE queue = ?1",
                1,
            );
            rows("cancel", "SELECT seq, id, reason FROM emq_cancels WHERE queue = ?1", 1);
            Snapshot(out.into_iter().collect())
        })
        .await
    }

    pub async fn set_obliterating_mark(&self) {
        self.with(|c, q| {
            c.execute(
                "INSERT INTO emq_kv (queue, key, value) VALUES (?1, 'obliterating', 1) \
                 ON CONFLICT (queue, key) DO UPDATE SET value = excluded.value",
                params![q],
            )
            .expect("set the obliterating mark");
        })
        .await
    }

    pub async fn refuse_new_jobs(&self) {
        self.with(|c, q| {
            // the trigger lives in the database file: the store's own connection meets it
            let q = q.replace('\'', "''");
            c.execute_batch(&format!(
                "CREATE TRIGGER IF NOT EXISTS emq_probe_refuse_new_jobs BEFORE INSERT ON emq_jobs \
                 WHEN NEW.queue = '{q}' BEGIN SELECT RAISE(ABORT, 'new jobs refused by the probe'); END"
            ))
            .expect("create the refusing trigger");
        })
        .await
    }

    pub async fn allow_new_jobs(&self) {
        self.with(|c, _| {
            c.execute_batch("DROP TRIGGER IF EXISTS emq_probe_refuse_new_jobs")
                .expect("drop the refusing trigger");
        })
        .await
    }

    pub async fn clear_obliterating_mark(&self) {
        self.with(|c, q| {
            c.execute(
                "DELETE FROM emq_kv WHERE queue = ?1 AND key = 'obliterating'",
                params![q],
            )
            .expect("clear the obliterating mark");
        })
        .await
    }

    pub async fn store_with_payload_limit(&self, limit: usize) -> Arc<dyn Store> {
        let store = EmbeddedStore::open(&self.path).await.expect("open the embedded store");
        Arc::new(store.with_payload_limit(limit))
    }
}
