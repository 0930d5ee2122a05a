//! Migration 10: the native store's tables (schema 9) turned into the engine's keyspace — every key
//! written as the scripts would have written it on Redis (`docs/keyspace.md`), stored as the
//! engine stores it (`engine/keyspace.rs`) — and the native tables dropped.
//!
//! What goes where:
//! - `emq_jobs` → the job rows of `kv_jobs` (a field per column; `output_dropped` in the row's
//!   overflow; `pending` and the lease as the row's `pending` and `active` scores), and the sizes of
//!   `emq:{q}:pending` and `emq:{q}:active` on their `kv_keys` rows. A row with no field that keeps
//!   a score stays such a row, as the engine keeps one.
//! - `emq_zsets` → a sorted set each (`scheduled`, `dead`, `completed`, `cancelled`, `lane:<g>`,
//!   `dedup_sweep`, `throttled`, `tats`, `schedules`, `schedule_due`, `pending_since`, …);
//!   `emq_lists` → a list each (`ring`), in position order.
//! - `emq_groups` → the hash `emq:{q}:groups`, with `lane_jobs` (the native counter `size:lanes`)
//!   the count of the jobs in the lanes.
//! - `emq_kv` → `id`, `paused`, `obliterating`, `tat` as strings; `clock` and `aging` in the hash
//!   `order`; `retention:<f>` in the hash `retention`; `metrics:<event>` as the field `count` and
//!   `metrics:<event>:m<minute>` as the field `m<minute>` of the hash `metrics:<event>`;
//!   `pending_tally:<f>` as the field `<f>` of the hash `pending_tally`; `wakes` as that many wake
//!   tokens (at most 16) in the list `wake`; `size:pending` is the size of `pending`, computed from
//!   the rows. A key this build does not know is carried as a string of its name.
//! - `emq_schedules` → the hashes `schedule:<name>`; `emq_dedup` → the hash `dedup` (the holder, or
//!   `holder|until` for a window); `emq_records` → the stream `completions`, one entry per record
//!   in order, its id from the record's time; `emq_queues` → the set `emq:queues` and each queue's
//!   `registered`, paid.
//! - `emq_cancels` is not carried: no consumer reading it lives across an upgrade, and a running
//!   job's request is on its row (`cancel`).
//!
//! A key the keyspace already holds (a file the engine store opened at schema 9 wrote its own keys
//! beside the native tables) is kept as it is: the native key of the same name is not carried
//! (the set `emq:queues` gains the native queues).

use std::collections::BTreeMap;

use rusqlite::types::ValueRef;

use crate::store::embedded::engine::keyspace::Type;
use rusqlite::{params, Connection, OptionalExtension};

/// The engine keyspace's tables (its durable cancel log among them).
pub(crate) use crate::store::embedded::engine::keyspace::SCHEMA as ENGINE_SCHEMA;

/// The native tables, dropped once carried.
const NATIVE_TABLES: [&str; 10] = [
    "emq_queues",
    "emq_kv",
    "emq_jobs",
    "emq_zsets",
    "emq_lists",
    "emq_groups",
    "emq_records",
    "emq_cancels",
    "emq_schedules",
    "emq_dedup",
];

// The type codes of `kv_keys.type` (the engine's `keyspace::Type`).
const STRING: i64 = Type::String as i64;
const HASH: i64 = Type::Hash as i64;
const ZSET: i64 = Type::Zset as i64;
const LIST: i64 = Type::List as i64;
const SET: i64 = Type::Set as i64;
const STREAM: i64 = Type::Stream as i64;

/// The most wake tokens a wake list holds (the scripts' LTRIM).
const WAKES_MAX: i64 = 16;

/// The set of every queue name (`keyspace::QUEUES_KEY`).
const QUEUES_KEY: &[u8] = crate::keyspace::QUEUES_KEY.as_bytes();

/// A queue's base `emq:{q}:` in SQL, of the column `queue`.
macro_rules! base {
    ($q:literal) => {
        concat!("'emq:{' || ", $q, " || '}:'")
    };
}

/// The job rows: a column per field (bytes, as the scripts write them), the number of fields, the
/// scores in `pending` and `active`. A row the keyspace already holds is kept.
const JOBS: &str = concat!(
    "INSERT OR IGNORE INTO kv_jobs (id, base, fields, f_data, f_state, f_attempts, f_group, f_max_attempts, \
       f_run_at, f_stalled, f_last_error, f_cancel, f_output, f_finished_at, f_kind, f_priority, f_retry, \
       f_waited, f_free, pending, active) \
     SELECT CAST(id AS BLOB), CAST(",
    base!("queue"),
    " AS BLOB), \
       (data IS NOT NULL) + (state IS NOT NULL) + (attempts IS NOT NULL) + (grp IS NOT NULL) \
       + (max_attempts IS NOT NULL) + (run_at IS NOT NULL) + (stalled IS NOT NULL) \
       + (last_error IS NOT NULL) + (cancel IS NOT NULL) + (output IS NOT NULL) \
       + (finished_at IS NOT NULL) + (kind IS NOT NULL) + (priority IS NOT NULL) + (retry IS NOT NULL) \
       + (waited IS NOT NULL) + (free IS NOT NULL) + (output_dropped IS NOT NULL), \
       CAST(data AS BLOB), CAST(state AS BLOB), CAST(attempts AS BLOB), CAST(grp AS BLOB), \
       CAST(max_attempts AS BLOB), CAST(run_at AS BLOB), CAST(stalled AS BLOB), CAST(last_error AS BLOB), \
       CAST(cancel AS BLOB), CAST(output AS BLOB), CAST(finished_at AS BLOB), CAST(kind AS BLOB), \
       CAST(priority AS BLOB), CAST(retry AS BLOB), CAST(waited AS BLOB), CAST(free AS BLOB), \
       CAST(pending AS REAL), CAST(lease AS REAL) \
     FROM emq_jobs \
     WHERE coalesce(data, state, attempts, grp, max_attempts, run_at, stalled, last_error, cancel, output, \
       finished_at, kind, priority, retry, waited, free, output_dropped, pending, lease) IS NOT NULL"
);

/// The sizes of the row set `set` (`pending` or `active`: the rows' column of the same name) of
/// every queue, counted from the rows: exact whatever wrote them.
fn row_set_sizes(set: &str) -> String {
    format!(
        "INSERT INTO kv_keys (key, type, size) \
         SELECT CAST(base || '{set}' AS BLOB), {ZSET}, count(*) FROM kv_jobs WHERE {set} IS NOT NULL GROUP BY base \
         ON CONFLICT (key) DO UPDATE SET type = excluded.type, size = excluded.size"
    )
}

/// The keys of the sorted sets, lists, schedules and dedup hashes, one statement each (types 3
/// zset, 4 list, 2 hash), their sizes counted: a name the keyspace holds already is kept as it is.
const KEYS: [&str; 4] = [
    concat!(
        "INSERT OR IGNORE INTO kv_keys (key, type, size) SELECT CAST(",
        base!("queue"),
        " || zset AS BLOB), 3, count(*) FROM emq_zsets WHERE true GROUP BY queue, zset"
    ),
    concat!(
        "INSERT OR IGNORE INTO kv_keys (key, type, size) SELECT CAST(",
        base!("queue"),
        " || list AS BLOB), 4, count(*) FROM emq_lists WHERE true GROUP BY queue, list"
    ),
    concat!(
        "INSERT OR IGNORE INTO kv_keys (key, type, size) SELECT CAST(",
        base!("queue"),
        " || 'schedule:' || name AS BLOB), 2, count(*) FROM emq_schedules WHERE true GROUP BY queue, name"
    ),
    concat!(
        "INSERT OR IGNORE INTO kv_keys (key, type, size) SELECT CAST(",
        base!("queue"),
        " || 'dedup' AS BLOB), 2, count(*) FROM emq_dedup WHERE true GROUP BY queue"
    ),
];

/// The elements of the keys [`KEYS`] made (`?1`: the least kid a key made here has), in the same
/// order.
const ELEMENTS: [&str; 4] = [
    concat!(
        "INSERT INTO kv_zset (kid, member, score) SELECT k.kid, CAST(z.member AS BLOB), CAST(z.score AS REAL) \
         FROM emq_zsets AS z JOIN kv_keys AS k ON k.key = CAST(",
        base!("z.queue"),
        " || z.zset AS BLOB) WHERE k.kid >= ?1"
    ),
    concat!(
        "INSERT INTO kv_list (kid, pos, value) SELECT k.kid, \
           row_number() OVER (PARTITION BY l.queue, l.list ORDER BY l.pos) - 1, CAST(l.member AS BLOB) \
         FROM emq_lists AS l JOIN kv_keys AS k ON k.key = CAST(",
        base!("l.queue"),
        " || l.list AS BLOB) WHERE k.kid >= ?1"
    ),
    concat!(
        "INSERT INTO kv_hash (kid, field, value) SELECT k.kid, CAST(s.field AS BLOB), CAST(s.value AS BLOB) \
         FROM emq_schedules AS s JOIN kv_keys AS k ON k.key = CAST(",
        base!("s.queue"),
        " || 'schedule:' || s.name AS BLOB) WHERE k.kid >= ?1"
    ),
    concat!(
        "INSERT INTO kv_hash (kid, field, value) SELECT k.kid, CAST(d.key AS BLOB), \
           CAST(CASE WHEN d.till IS NULL THEN d.holder ELSE d.holder || '|' || d.till END AS BLOB) \
         FROM emq_dedup AS d JOIN kv_keys AS k ON k.key = CAST(",
        base!("d.queue"),
        " || 'dedup' AS BLOB) WHERE k.kid >= ?1"
    ),
];

/// Field/value pairs (a hash's, a stream entry's).
type Pairs = Vec<(Vec<u8>, Vec<u8>)>;

/// A key written from Rust: its elements.
enum Value {
    String(Vec<u8>),
    Hash(BTreeMap<Vec<u8>, Vec<u8>>),
    Zset(Vec<(Vec<u8>, f64)>),
    List(Vec<Vec<u8>>),
    /// Entries, each its id and its fields.
    Stream(Vec<(String, Pairs)>),
}

/// The keys written from Rust, by name.
#[derive(Default)]
struct Keys(BTreeMap<Vec<u8>, Value>);

impl Keys {
    fn string(&mut self, key: String, value: Vec<u8>) {
        self.0.entry(key.into_bytes()).or_insert(Value::String(value));
    }

    fn field(&mut self, key: String, field: &str, value: Vec<u8>) {
        if let Value::Hash(h) = self
            .0
            .entry(key.into_bytes())
            .or_insert_with(|| Value::Hash(BTreeMap::new()))
        {
            h.insert(field.as_bytes().to_vec(), value);
        }
    }
}

/// The base `emq:{q}:` of queue `q`.
fn base(q: &str) -> String {
    format!("emq:{{{q}}}:")
}

/// A stored value as the bytes Redis would hold: an integer in decimal (a whole real too), text and
/// blobs as they are.
fn bytes(v: ValueRef<'_>) -> Option<Vec<u8>> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string().into_bytes()),
        ValueRef::Real(f) if f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0 => {
            Some((f as i64).to_string().into_bytes())
        }
        ValueRef::Real(f) => Some(f.to_string().into_bytes()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(t.to_vec()),
    }
}

/// A stored value as a number (a malformed one: None).
fn number(v: ValueRef<'_>) -> Option<i64> {
    match v {
        ValueRef::Integer(n) => Some(n),
        ValueRef::Real(f) => Some(f as i64),
        ValueRef::Text(t) | ValueRef::Blob(t) => std::str::from_utf8(t).ok()?.trim().parse().ok(),
        ValueRef::Null => None,
    }
}

/// Field/value pairs as the engine encodes a job row's overflow and a stream entry.
fn encode_pairs(pairs: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    crate::store::embedded::engine::keyspace::encode_extra(pairs).unwrap_or_default()
}

/// A stream entry as the engine's XADD stores it: its id (with an empty value), then its fields.
fn encode_entry(id: &str, fields: &[(Vec<u8>, Vec<u8>)]) -> Vec<u8> {
    let mut pairs = Vec::with_capacity(fields.len() + 1);
    pairs.push((id.as_bytes().to_vec(), Vec::new()));
    pairs.extend_from_slice(fields);
    encode_pairs(&pairs)
}

/// Carries every native table into the keyspace and drops the native tables, inside the caller's
/// transaction. `now_us`: the store's time, the token of each registered queue's life.
pub(crate) fn migrate(conn: &Connection, now_us: i64) -> rusqlite::Result<()> {
    conn.execute_batch(ENGINE_SCHEMA)?;

    // the rows, then the sizes of the row sets
    conn.execute(JOBS, [])?;
    let dropped: Vec<(String, String, Vec<u8>)> = {
        let mut stmt =
            conn.prepare("SELECT queue, id, output_dropped FROM emq_jobs WHERE output_dropped IS NOT NULL")?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, bytes(r.get_ref(2)?).unwrap_or_default()))
        })?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    for (q, id, size) in dropped {
        let extra = encode_pairs(&[(b"output_dropped".to_vec(), size)]);
        conn.execute(
            "UPDATE kv_jobs SET extra = ?3 WHERE id = ?1 AND base = ?2 AND extra IS NULL",
            params![id.as_bytes(), base(&q).as_bytes(), extra],
        )?;
    }
    for set in ["pending", "active"] {
        conn.execute(&row_set_sizes(set), [])?;
    }

    // the sorted sets, lists, schedules and dedup hashes, in bulk
    let first_kid: i64 = conn.query_row("SELECT coalesce(max(kid), 0) + 1 FROM kv_keys", [], |r| r.get(0))?;
    for sql in KEYS {
        conn.execute(sql, [])?;
    }
    for sql in ELEMENTS {
        conn.execute(sql, [first_kid])?;
    }

    // the rest, in the Redis form
    let mut keys = Keys::default();
    let mut lanes: BTreeMap<String, i64> = {
        let mut stmt =
            conn.prepare("SELECT queue, count(*) FROM emq_zsets WHERE substr(zset, 1, 5) = 'lane:' GROUP BY queue")?;
        let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    {
        let mut stmt = conn.prepare("SELECT queue, key, value FROM emq_kv ORDER BY queue, key")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let q: String = r.get(0)?;
            let key: String = r.get(1)?;
            kv(&mut keys, &mut lanes, &q, &key, r.get_ref(2)?);
        }
    }
    {
        let mut stmt = conn.prepare("SELECT queue, field, value FROM emq_groups ORDER BY queue, field")?;
        let mut rows = stmt.query([])?;
        while let Some(r) = rows.next()? {
            let q: String = r.get(0)?;
            let field: String = r.get(1)?;
            if let Some(v) = bytes(r.get_ref(2)?) {
                keys.field(format!("{}groups", base(&q)), &field, v);
            }
        }
    }
    // lane_jobs: the jobs in every lane of a queue that counted them, or holds any
    for (q, n) in lanes {
        keys.field(format!("{}groups", base(&q)), "lane_jobs", n.to_string().into_bytes());
    }
    records(conn, &mut keys)?;
    let queues: Vec<String> = {
        let mut stmt = conn.prepare("SELECT queue FROM emq_queues ORDER BY queue")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    let token = format!("{}.{:06}", now_us.div_euclid(1_000_000), now_us.rem_euclid(1_000_000));
    for q in &queues {
        keys.0
            .entry(format!("{}registered", base(q)).into_bytes())
            .or_insert_with(|| Value::Zset(vec![(token.clone().into_bytes(), 1.0)]));
    }
    for (key, value) in keys.0 {
        write(conn, &key, value)?;
    }
    register(conn, &queues)?;

    for table in NATIVE_TABLES {
        conn.execute_batch(&format!("DROP TABLE IF EXISTS {table}"))?;
    }
    Ok(())
}

/// One `emq_kv` row of queue `q` into its Redis key; `lanes` gains the queues that counted their
/// lanes' jobs (`size:lanes`), at 0 when their lanes hold none.
fn kv(keys: &mut Keys, lanes: &mut BTreeMap<String, i64>, q: &str, key: &str, value: ValueRef<'_>) {
    let b = base(q);
    let Some(v) = bytes(value) else { return };
    match key {
        "id" | "paused" | "obliterating" | "tat" => keys.string(format!("{b}{key}"), v),
        "clock" | "aging" => keys.field(format!("{b}order"), key, v),
        "size:pending" => {}
        "size:lanes" => {
            lanes.entry(q.to_string()).or_insert(0);
        }
        "wakes" => {
            let n = number(value).unwrap_or(0).clamp(0, WAKES_MAX);
            if n > 0 {
                keys.0
                    .entry(format!("{b}wake").into_bytes())
                    .or_insert_with(|| Value::List(vec![b"1".to_vec(); n as usize]));
            }
        }
        _ => {
            if let Some(f) = key.strip_prefix("retention:") {
                keys.field(format!("{b}retention"), f, v);
            } else if let Some(f) = key.strip_prefix("pending_tally:") {
                keys.field(format!("{b}pending_tally"), f, v);
            } else if let Some(event) = key.strip_prefix("metrics:") {
                match event.split_once(':') {
                    Some((event, minute)) => keys.field(format!("{b}metrics:{event}"), minute, v),
                    None => keys.field(format!("{b}metrics:{event}"), "count", v),
                }
            } else {
                keys.string(format!("{b}{key}"), v);
            }
        }
    }
}

/// `emq_records` into each queue's stream `completions`: an entry per record, in order, with the
/// fields the scripts' XADD writes (id, status, attempts, the output or error, at); its id the
/// record's time in ms, a sequence after the last entry's within one ms (ids always ascend).
fn records(conn: &Connection, keys: &mut Keys) -> rusqlite::Result<()> {
    let mut stmt =
        conn.prepare("SELECT queue, id, status, attempts, field, value, at FROM emq_records ORDER BY queue, seq")?;
    let mut rows = stmt.query([])?;
    let mut last: Option<(String, i64, i64)> = None;
    while let Some(r) = rows.next()? {
        let q: String = r.get(0)?;
        let at = number(r.get_ref(6)?).unwrap_or(0);
        let (ms, seq) = match &last {
            Some((lq, lms, lseq)) if *lq == q && *lms >= at => (*lms, lseq + 1),
            _ => (at.max(0), 0),
        };
        last = Some((q.clone(), ms, seq));
        let mut fields = vec![
            (b"id".to_vec(), bytes(r.get_ref(1)?).unwrap_or_default()),
            (b"status".to_vec(), bytes(r.get_ref(2)?).unwrap_or_default()),
            (b"attempts".to_vec(), bytes(r.get_ref(3)?).unwrap_or_default()),
        ];
        if let (Some(f), Some(v)) = (bytes(r.get_ref(4)?), bytes(r.get_ref(5)?)) {
            fields.push((f, v));
        }
        fields.push((b"at".to_vec(), at.to_string().into_bytes()));
        if let Value::Stream(entries) = keys
            .0
            .entry(format!("{}completions", base(&q)).into_bytes())
            .or_insert_with(|| Value::Stream(Vec::new()))
        {
            entries.push((format!("{ms}-{seq}"), fields));
        }
    }
    Ok(())
}

/// A new key of type `ty` (None: the keyspace holds the name already, and keeps it).
fn new_key(conn: &Connection, key: &[u8], ty: i64, size: usize, value: Option<&[u8]>) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached(
        "INSERT INTO kv_keys (key, type, size, value) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (key) DO NOTHING RETURNING kid",
    )?
    .query_row(params![key, ty, size as i64, value], |r| r.get(0))
    .optional()
}

/// Writes one key and its elements (an empty collection is no key, as Redis deletes one).
fn write(conn: &Connection, key: &[u8], value: Value) -> rusqlite::Result<()> {
    match value {
        Value::String(v) => {
            new_key(conn, key, STRING, 0, Some(&v))?;
        }
        Value::Hash(h) if !h.is_empty() => {
            if let Some(kid) = new_key(conn, key, HASH, h.len(), None)? {
                let mut stmt = conn.prepare_cached("INSERT INTO kv_hash (kid, field, value) VALUES (?1, ?2, ?3)")?;
                for (f, v) in h {
                    stmt.execute(params![kid, f, v])?;
                }
            }
        }
        Value::Zset(z) if !z.is_empty() => {
            if let Some(kid) = new_key(conn, key, ZSET, z.len(), None)? {
                let mut stmt = conn.prepare_cached("INSERT INTO kv_zset (kid, member, score) VALUES (?1, ?2, ?3)")?;
                for (m, s) in z {
                    stmt.execute(params![kid, m, s])?;
                }
            }
        }
        Value::List(l) if !l.is_empty() => {
            if let Some(kid) = new_key(conn, key, LIST, l.len(), None)? {
                let mut stmt = conn.prepare_cached("INSERT INTO kv_list (kid, pos, value) VALUES (?1, ?2, ?3)")?;
                for (pos, v) in l.into_iter().enumerate() {
                    stmt.execute(params![kid, pos as i64, v])?;
                }
            }
        }
        Value::Stream(entries) => {
            let Some((last, _)) = entries.last() else { return Ok(()) };
            if let Some(kid) = new_key(conn, key, STREAM, entries.len(), Some(last.clone().as_bytes()))? {
                let mut stmt = conn.prepare_cached("INSERT INTO kv_list (kid, pos, value) VALUES (?1, ?2, ?3)")?;
                for (pos, (id, fields)) in entries.iter().enumerate() {
                    stmt.execute(params![kid, pos as i64, encode_entry(id, fields)])?;
                }
            }
        }
        Value::Hash(_) | Value::Zset(_) | Value::List(_) => {}
    }
    Ok(())
}

/// The native queues added to the set `emq:queues` (made when missing, its size kept exact).
fn register(conn: &Connection, queues: &[String]) -> rusqlite::Result<()> {
    if queues.is_empty() {
        return Ok(());
    }
    conn.execute(
        "INSERT INTO kv_keys (key, type, size) VALUES (?1, ?2, 0) ON CONFLICT (key) DO NOTHING",
        params![QUEUES_KEY, SET],
    )?;
    let (kid, ty): (i64, i64) = conn.query_row("SELECT kid, type FROM kv_keys WHERE key = ?1", [QUEUES_KEY], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    if ty != SET {
        // a key of another type holds the name (only by hand): kept, as any key already there
        return Ok(());
    }
    let mut stmt = conn.prepare_cached("INSERT OR IGNORE INTO kv_set (kid, member) VALUES (?1, ?2)")?;
    for q in queues {
        stmt.execute(params![kid, q.as_bytes()])?;
    }
    conn.execute(
        "UPDATE kv_keys SET size = (SELECT count(*) FROM kv_set WHERE kid = ?1) WHERE kid = ?1",
        [kid],
    )?;
    Ok(())
}
