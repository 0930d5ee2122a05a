//! The keyspace on SQLite: the Redis data types the scripts use, each key a row of `kv_keys` (its
//! type, its size, a list's head position, a string's value) and each element a row of its type's
//! table. Values and members are bytes (`BLOB`: no numeric affinity, so `007` stays `007`); a
//! collection keeps its size, so `ZCARD`, `LLEN` and `HLEN` are O(1) as on Redis; an empty
//! collection is deleted, as Redis deletes it.
//!
//! Within one script the keys met are cached ([`Keyspace::meta`]): a key's size and head are
//! written back when the script ends ([`Keyspace::flush`]) and the cache is dropped, so nothing
//! here outlives the script's transaction.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

/// The keyspace's tables. Created when missing; a key's type is [`Type`]'s code. Kept in
/// `keyspace.sql`, which the schema's migration to the keyspace creates too.
pub(crate) const SCHEMA: &str = include_str!("keyspace.sql");

/// The cancel requests the durable log keeps (the newest): a consumer of another process reads
/// the log within a beat, far fewer apart.
pub(crate) const CANCELS_KEPT: i64 = 1000;

/// The fields of a job row (`emq:{q}:job:<id>`) kept in columns of their own (`f_<field>`); any
/// other field goes to the row's overflow (`extra`).
pub(crate) const JOB_FIELDS: [&str; 17] = [
    "data",
    "state",
    "attempts",
    "group",
    "max_attempts",
    "run_at",
    "stalled",
    "last_error",
    "cancel",
    "output",
    "finished_at",
    "kind",
    "priority",
    "retry",
    "waited",
    "free",
    "dedup",
];

/// The sorted sets kept as columns of the job rows, their members being the jobs' ids.
pub(crate) const ROW_ZSETS: [&str; 2] = ["pending", "active"];

/// Where a key's elements live: its storage class, by the key's pattern.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class<'k> {
    /// Any key: its elements in the table of its type.
    Generic,
    /// `emq:{q}:job:<id>` as a hash: one row of `kv_jobs` (other types stay generic).
    JobRow { base: &'k [u8], id: &'k [u8] },
    /// `emq:{q}:pending` and `emq:{q}:active`: each member's score a column of its job's row
    /// (`ROW_ZSETS[col]`); the set's size on its key's row, as any key's.
    RowZset { base: &'k [u8], col: usize },
}

/// The class of `key`. A queue's base is `emq:{<name>}:` (a name holds no brace).
pub(crate) fn classify(key: &[u8]) -> Class<'_> {
    let Some(rest) = key.strip_prefix(b"emq:{") else {
        return Class::Generic;
    };
    let Some(close) = rest.windows(2).position(|w| w == b"}:") else {
        return Class::Generic;
    };
    let (base, suffix) = key.split_at(5 + close + 2);
    if let Some(id) = suffix.strip_prefix(b"job:") {
        return Class::JobRow { base, id };
    }
    match ROW_ZSETS.iter().position(|z| z.as_bytes() == suffix) {
        Some(col) => Class::RowZset { base, col },
        None => Class::Generic,
    }
}

/// A job row as the running script sees it: its fields (the columns, then the overflow in the
/// order written) and its scores in the row sets.
#[derive(Debug, Clone, Default)]
pub(crate) struct Row {
    pub(crate) cols: [Option<Vec<u8>>; 17],
    pub(crate) extra: Vec<(Vec<u8>, Vec<u8>)>,
    pub(crate) scores: [Option<f64>; 2],
    dirty: bool,
}

impl Row {
    /// The hash's size (0: the hash does not exist).
    pub(crate) fn len(&self) -> usize {
        self.cols.iter().filter(|c| c.is_some()).count() + self.extra.len()
    }

    /// A field's value.
    pub(crate) fn get(&self, field: &[u8]) -> Option<&Vec<u8>> {
        match JOB_FIELDS.iter().position(|f| f.as_bytes() == field) {
            Some(i) => self.cols[i].as_ref(),
            None => self.extra.iter().find(|(f, _)| f == field).map(|(_, v)| v),
        }
    }

    /// Sets a field; whether it is new.
    pub(crate) fn set(&mut self, field: &[u8], value: Vec<u8>) -> bool {
        self.dirty = true;
        match JOB_FIELDS.iter().position(|f| f.as_bytes() == field) {
            Some(i) => self.cols[i].replace(value).is_none(),
            None => match self.extra.iter_mut().find(|(f, _)| f == field) {
                Some(slot) => {
                    slot.1 = value;
                    false
                }
                None => {
                    self.extra.push((field.to_vec(), value));
                    true
                }
            },
        }
    }

    /// Deletes a field; whether it was there.
    pub(crate) fn del(&mut self, field: &[u8]) -> bool {
        let gone = match JOB_FIELDS.iter().position(|f| f.as_bytes() == field) {
            Some(i) => self.cols[i].take().is_some(),
            None => {
                let before = self.extra.len();
                self.extra.retain(|(f, _)| f != field);
                self.extra.len() < before
            }
        };
        self.dirty |= gone;
        gone
    }

    /// Every field and value: the columns in their order, then the overflow.
    pub(crate) fn all(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut out: Vec<(Vec<u8>, Vec<u8>)> = JOB_FIELDS
            .iter()
            .zip(&self.cols)
            .filter_map(|(f, v)| v.as_ref().map(|v| (f.as_bytes().to_vec(), v.clone())))
            .collect();
        out.extend(self.extra.iter().cloned());
        out
    }

    /// Drops every field (the scores stay).
    pub(crate) fn clear(&mut self) {
        self.cols = Default::default();
        self.extra.clear();
        self.dirty = true;
    }

    /// Sets a score in a row set.
    pub(crate) fn set_score(&mut self, col: usize, score: Option<f64>) {
        self.scores[col] = score;
        self.dirty = true;
    }
}

/// The overflow fields as stored: (length, bytes) of each field and value, lengths as 4 bytes
/// big-endian.
pub(crate) fn encode_extra(extra: &[(Vec<u8>, Vec<u8>)]) -> Option<Vec<u8>> {
    if extra.is_empty() {
        return None;
    }
    let mut out = Vec::new();
    for (f, v) in extra {
        for part in [f, v] {
            out.extend_from_slice(&(part.len() as u32).to_be_bytes());
            out.extend_from_slice(part);
        }
    }
    Some(out)
}

pub(crate) fn decode_extra(mut b: &[u8]) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut out = Vec::new();
    let take = |b: &mut &[u8]| -> Option<Vec<u8>> {
        let (len, rest) = b.split_first_chunk::<4>()?;
        let len = u32::from_be_bytes(*len) as usize;
        let part = rest.get(..len)?.to_vec();
        *b = &rest[len..];
        Some(part)
    };
    while let (Some(f), Some(v)) = (take(&mut b), take(&mut b)) {
        out.push((f, v));
    }
    out
}

/// The row columns' SQL, in [`JOB_FIELDS`] order.
fn columns() -> String {
    JOB_FIELDS
        .iter()
        .map(|f| format!("f_{f}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The read of one job row (built once: the statement cache is keyed by its text).
static ROW_SELECT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    format!(
        "SELECT {}, extra, pending, active FROM kv_jobs WHERE id = ?1 AND base = ?2",
        columns()
    )
});

/// The write of one job row (built once).
static ROW_WRITE: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
    let n = JOB_FIELDS.len();
    format!(
        "INSERT OR REPLACE INTO kv_jobs (id, base, fields, {}, extra, pending, active) VALUES (?1, ?2, ?3, {})",
        columns(),
        (4..n + 7).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ")
    )
});

/// A key's type, as `TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    String = 1,
    Hash = 2,
    Zset = 3,
    List = 4,
    Set = 5,
    /// A stream: its entries in the list table (each its id and fields), its last id as the key's
    /// value.
    Stream = 6,
}

impl Type {
    fn from_code(code: i64) -> Option<Type> {
        Some(match code {
            1 => Type::String,
            2 => Type::Hash,
            3 => Type::Zset,
            4 => Type::List,
            5 => Type::Set,
            6 => Type::Stream,
            _ => return None,
        })
    }

    /// The name `TYPE` answers.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Type::String => "string",
            Type::Hash => "hash",
            Type::Zset => "zset",
            Type::List => "list",
            Type::Set => "set",
            Type::Stream => "stream",
        }
    }

    /// The table of the type's elements (none for a string: its value is on its key's row).
    /// The statement deleting a key's elements (None: a string has none).
    fn delete_elements(self) -> Option<&'static str> {
        match self {
            Type::String => None,
            Type::Hash => Some("DELETE FROM kv_hash WHERE kid = ?1"),
            Type::Zset => Some("DELETE FROM kv_zset WHERE kid = ?1"),
            Type::List | Type::Stream => Some("DELETE FROM kv_list WHERE kid = ?1"),
            Type::Set => Some("DELETE FROM kv_set WHERE kid = ?1"),
        }
    }
}

/// A key as the script sees it: its row id, type, size (elements) and, for a list, the position
/// of its first element.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub(crate) kid: i64,
    pub(crate) ty: Type,
    pub(crate) size: i64,
    pub(crate) head: i64,
    /// The size or head changed since the key was read: written back by [`Keyspace::flush`].
    dirty: bool,
}

/// The `kid` of a job row's hash, which has no row in `kv_keys`.
pub(crate) const ROW_KID: i64 = -1;

/// Why a command failed: an error reply the script sees (`WRONGTYPE`, a bad argument), or the
/// file's own failure, which ends the script whatever it does.
#[derive(Debug)]
pub(crate) enum Fail {
    /// An error reply: `redis.call` raises it, `redis.pcall` returns it.
    Reply(String),
    /// SQLite or I/O failed: the script is aborted and its transaction rolled back.
    Fatal(rusqlite::Error),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Fatal(e)
    }
}

pub(crate) type R<T> = std::result::Result<T, Fail>;

/// A job field as bytes, whatever storage class a hand gave it (Redis holds every field as bytes;
/// the engine writes blobs): text as its bytes, a number as its decimal text.
fn field_bytes(v: rusqlite::types::ValueRef<'_>) -> Option<Vec<u8>> {
    use rusqlite::types::ValueRef;
    match v {
        ValueRef::Null => None,
        ValueRef::Blob(b) | ValueRef::Text(b) => Some(b.to_vec()),
        ValueRef::Integer(n) => Some(n.to_string().into_bytes()),
        ValueRef::Real(x) => Some(crate::store::reply::format_double(x).into_bytes()),
    }
}

/// The reply of a key of another type.
pub(crate) fn wrongtype() -> Fail {
    Fail::Reply("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

/// The keyspace of one connection, with the cache of the running script's keys.
pub(crate) struct Keyspace {
    pub(crate) conn: Connection,
    keys: HashMap<Vec<u8>, Option<Meta>>,
    /// The job rows the script reached (by job key), written back when it ends or before a
    /// range read of a row set.
    rows: HashMap<Vec<u8>, Row>,
    /// Some row in `rows` is dirty.
    rows_dirty: bool,
}

impl Keyspace {
    pub(crate) fn new(conn: Connection) -> rusqlite::Result<Self> {
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn,
            keys: HashMap::new(),
            rows: HashMap::new(),
            rows_dirty: false,
        })
    }

    /// Appends a message of a `cancel` channel to the durable log (`kv_cancels`) other processes
    /// read, trimmed to its newest [`CANCELS_KEPT`].
    pub(crate) fn log_cancel(&mut self, channel: &[u8], message: &[u8]) -> rusqlite::Result<()> {
        self.conn
            .prepare_cached("INSERT INTO kv_cancels (channel, message) VALUES (?1, ?2)")?
            .execute(params![channel, message])?;
        let seq = self.conn.last_insert_rowid();
        self.conn
            .prepare_cached("DELETE FROM kv_cancels WHERE seq <= ?1")?
            .execute([seq - CANCELS_KEPT])?;
        Ok(())
    }

    /// The key as it stands (None: absent).
    pub(crate) fn meta(&mut self, key: &[u8]) -> R<Option<Meta>> {
        if let Class::JobRow { base, id } = classify(key) {
            let size = self.row(key, base, id)?.len() as i64;
            if size > 0 {
                return Ok(Some(Meta {
                    kid: ROW_KID,
                    ty: Type::Hash,
                    size,
                    head: 0,
                    dirty: false,
                }));
            }
        }
        self.generic_meta(key)
    }

    /// The key as `kv_keys` holds it (a job row's hash is not there).
    fn generic_meta(&mut self, key: &[u8]) -> R<Option<Meta>> {
        if let Some(m) = self.keys.get(key) {
            return Ok(*m);
        }
        let row = self
            .conn
            .prepare_cached("SELECT kid, type, size, head FROM kv_keys WHERE key = ?1")?
            .query_row([key], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        let m = match row {
            None => None,
            Some((kid, code, size, head)) => {
                let ty = Type::from_code(code)
                    .ok_or_else(|| Fail::Fatal(rusqlite::Error::IntegralValueOutOfRange(1, code)))?;
                Some(Meta {
                    kid,
                    ty,
                    size,
                    head,
                    dirty: false,
                })
            }
        };
        self.keys.insert(key.to_vec(), m);
        Ok(m)
    }

    /// The key if it holds `ty` (None: absent), else `WRONGTYPE`.
    pub(crate) fn typed(&mut self, key: &[u8], ty: Type) -> R<Option<Meta>> {
        match self.meta(key)? {
            Some(m) if m.ty != ty => Err(wrongtype()),
            m => Ok(m),
        }
    }

    /// The key, made (empty, of `ty`) when absent; `WRONGTYPE` when it holds another type.
    pub(crate) fn make(&mut self, key: &[u8], ty: Type) -> R<Meta> {
        if let Some(m) = self.typed(key, ty)? {
            return Ok(m);
        }
        if ty == Type::Hash && matches!(classify(key), Class::JobRow { .. }) {
            return Ok(Meta {
                kid: ROW_KID,
                ty,
                size: 0,
                head: 0,
                dirty: false,
            });
        }
        let kid: i64 = self
            .conn
            .prepare_cached("INSERT INTO kv_keys (key, type) VALUES (?1, ?2) RETURNING kid")?
            .query_row(params![key, ty as i64], |r| r.get(0))?;
        let m = Meta {
            kid,
            ty,
            size: 0,
            head: 0,
            dirty: false,
        };
        self.keys.insert(key.to_vec(), Some(m));
        Ok(m)
    }

    /// Records a collection's new size and head (written back at the script's end). A collection
    /// left empty is deleted now, as Redis deletes it: `EXISTS` and `TYPE` no longer see it.
    pub(crate) fn resize(&mut self, key: &[u8], size: i64, head: i64) -> R<()> {
        let Some(Some(m)) = self.keys.get_mut(key) else {
            // a job row's hash keeps no size of its own
            return Ok(());
        };
        // (a stream stays, emptied, as on Redis: it keeps its last id)
        if size == 0 && m.ty != Type::String && m.ty != Type::Stream {
            let kid = m.kid;
            self.conn
                .prepare_cached("DELETE FROM kv_keys WHERE kid = ?1")?
                .execute([kid])?;
            self.keys.insert(key.to_vec(), None);
            return Ok(());
        }
        m.size = size;
        m.head = head;
        m.dirty = true;
        Ok(())
    }

    /// Deletes the key and its elements; whether it existed.
    pub(crate) fn delete(&mut self, key: &[u8]) -> R<bool> {
        let Some(m) = self.meta(key)? else {
            return Ok(false);
        };
        match classify(key) {
            Class::JobRow { base, id } if m.kid == ROW_KID => {
                self.row(key, base, id)?.clear();
                return Ok(true);
            }
            Class::RowZset { base, col } if m.ty == Type::Zset => {
                // every member's score dropped from its row, the rows left empty deleted
                self.flush_rows()?;
                self.rows.clear();
                let z = ROW_ZSETS[col];
                self.conn
                    .prepare_cached(&format!(
                        "UPDATE kv_jobs SET {z} = NULL WHERE base = ?1 AND {z} IS NOT NULL"
                    ))?
                    .execute([base])?;
                self.conn
                    .prepare_cached(
                        "DELETE FROM kv_jobs WHERE base = ?1 AND fields = 0 AND pending IS NULL AND active IS NULL",
                    )?
                    .execute([base])?;
                self.conn
                    .prepare_cached("DELETE FROM kv_keys WHERE kid = ?1")?
                    .execute([m.kid])?;
                self.keys.insert(key.to_vec(), None);
                return Ok(true);
            }
            _ => {}
        }
        if let Some(sql) = m.ty.delete_elements() {
            self.conn.prepare_cached(sql)?.execute([m.kid])?;
        }
        self.conn
            .prepare_cached("DELETE FROM kv_keys WHERE kid = ?1")?
            .execute([m.kid])?;
        self.keys.insert(key.to_vec(), None);
        Ok(true)
    }

    /// Writes back the sizes and heads that changed and the job rows, and drops the cache: the
    /// script's end.
    pub(crate) fn flush(&mut self) -> rusqlite::Result<()> {
        self.flush_rows()?;
        self.rows.clear();
        for m in self.keys.values().flatten() {
            if m.dirty {
                self.conn
                    .prepare_cached("UPDATE kv_keys SET size = ?2, head = ?3 WHERE kid = ?1")?
                    .execute([m.kid, m.size, m.head])?;
            }
        }
        self.keys.clear();
        Ok(())
    }

    /// Drops the cache without writing it: the script's writes are being rolled back.
    pub(crate) fn forget(&mut self) {
        self.keys.clear();
        self.rows.clear();
        self.rows_dirty = false;
    }

    /// The job row of `key` (`base`, `id` its parts), read once per script.
    pub(crate) fn row(&mut self, key: &[u8], base: &[u8], id: &[u8]) -> R<&mut Row> {
        if !self.rows.contains_key(key) {
            let mut stmt = self.conn.prepare_cached(&ROW_SELECT)?;
            let mut rows = stmt.query(params![id, base])?;
            let mut row = Row::default();
            if let Some(r) = rows.next()? {
                for (i, col) in row.cols.iter_mut().enumerate() {
                    *col = field_bytes(r.get_ref(i)?);
                }
                let n = JOB_FIELDS.len();
                let extra: Option<Vec<u8>> = r.get(n)?;
                row.extra = extra.map(|e| decode_extra(&e)).unwrap_or_default();
                row.scores = [r.get(n + 1)?, r.get(n + 2)?];
            }
            drop(rows);
            drop(stmt);
            self.rows.insert(key.to_vec(), row);
        }
        self.rows_dirty = true;
        self.rows
            .get_mut(key)
            .ok_or_else(|| Fail::Fatal(rusqlite::Error::QueryReturnedNoRows))
    }

    /// The job row holding `key`'s hash when `key` is a job key (None for any other key);
    /// `WRONGTYPE` when the job key holds another type.
    pub(crate) fn job_hash(&mut self, key: &[u8]) -> R<Option<&mut Row>> {
        let Class::JobRow { base, id } = classify(key) else {
            return Ok(None);
        };
        if self.row(key, base, id)?.len() == 0 && self.generic_meta(key)?.is_some() {
            return Err(wrongtype());
        }
        self.row(key, base, id).map(Some)
    }

    /// Writes back the job rows that changed: a row with no field and no score is deleted.
    pub(crate) fn flush_rows(&mut self) -> rusqlite::Result<()> {
        if !self.rows_dirty {
            return Ok(());
        }
        for (key, row) in self.rows.iter_mut().filter(|(_, r)| r.dirty) {
            let Class::JobRow { base, id } = classify(key) else {
                continue;
            };
            if row.len() == 0 && row.scores.iter().all(Option::is_none) {
                self.conn
                    .prepare_cached("DELETE FROM kv_jobs WHERE id = ?1 AND base = ?2")?
                    .execute(params![id, base])?;
            } else {
                let n = JOB_FIELDS.len();
                let mut stmt = self.conn.prepare_cached(&ROW_WRITE)?;
                stmt.raw_bind_parameter(1, id)?;
                stmt.raw_bind_parameter(2, base)?;
                stmt.raw_bind_parameter(3, row.len() as i64)?;
                for (i, col) in row.cols.iter().enumerate() {
                    stmt.raw_bind_parameter(4 + i, col.as_deref())?;
                }
                stmt.raw_bind_parameter(4 + n, encode_extra(&row.extra))?;
                stmt.raw_bind_parameter(5 + n, row.scores[0])?;
                stmt.raw_bind_parameter(6 + n, row.scores[1])?;
                stmt.raw_execute()?;
            }
            row.dirty = false;
        }
        self.rows_dirty = false;
        Ok(())
    }

    /// A string's value (None: absent; `WRONGTYPE` for another type).
    pub(crate) fn string(&mut self, key: &[u8]) -> R<Option<Vec<u8>>> {
        let Some(m) = self.typed(key, Type::String)? else {
            return Ok(None);
        };
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM kv_keys WHERE kid = ?1")?
            .query_row([m.kid], |r| r.get::<_, Option<Vec<u8>>>(0))?)
    }

    /// A stream's last entry id as (ms, seq) (None: no stream); `WRONGTYPE` for another type.
    pub(crate) fn stream_last(&mut self, key: &[u8]) -> R<Option<(i64, i64)>> {
        let Some(m) = self.typed(key, Type::Stream)? else {
            return Ok(None);
        };
        let last: Option<Vec<u8>> = self
            .conn
            .prepare_cached("SELECT value FROM kv_keys WHERE kid = ?1")?
            .query_row([m.kid], |r| r.get(0))?;
        Ok(last.and_then(|v| {
            let text = String::from_utf8(v).ok()?;
            let (ms, seq) = text.split_once('-')?;
            Some((ms.parse().ok()?, seq.parse().ok()?))
        }))
    }

    /// Sets a string, replacing a key of any type (as `SET` does).
    pub(crate) fn set_string(&mut self, key: &[u8], value: &[u8]) -> R<()> {
        if let Some(m) = self.meta(key)? {
            if m.ty != Type::String {
                self.delete(key)?;
            }
        }
        if let Class::JobRow { .. } = classify(key) {
            // the key's string lives in kv_keys: its row's hash is gone (deleted above)
            self.keys.remove(key);
        }
        let m = self.make(key, Type::String)?;
        self.conn
            .prepare_cached("UPDATE kv_keys SET value = ?2 WHERE kid = ?1")?
            .execute(params![m.kid, value])?;
        Ok(())
    }
}
