//! The Redis types on SQLite, for one queue inside one `BEGIN IMMEDIATE` transaction: the rows
//! (hashes), the sorted sets, the lists, the groups hash, the counters, the wake list, the records.
//! Each method is the twin of the Redis command its name says, so a twin reads like its script.

use std::cell::Cell;

use rusqlite::{params, OptionalExtension};

use super::txn::{self, Txn};

use super::sql_error;

mod row_sets;
use crate::error::Result;
pub(crate) use row_sets::RowSet;

/// A job row: every field of `emq:{q}:job:<id>`, `None` = absent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Row {
    pub(crate) data: Option<Vec<u8>>,
    pub(crate) state: Option<String>,
    pub(crate) attempts: Option<String>,
    /// The claims that used no attempt (release), absent = 0.
    pub(crate) free: Option<String>,
    pub(crate) group: Option<String>,
    pub(crate) max_attempts: Option<String>,
    pub(crate) run_at: Option<String>,
    pub(crate) stalled: Option<String>,
    pub(crate) last_error: Option<String>,
    pub(crate) cancel: Option<String>,
    pub(crate) output: Option<Vec<u8>>,
    pub(crate) finished_at: Option<String>,
    pub(crate) kind: Option<String>,
    /// How urgent it is (1..9; absent = 0).
    pub(crate) priority: Option<String>,
    /// The job's own retry policy, as its text.
    pub(crate) retry: Option<String>,
    /// The mark of a job a caller waits on (mark_waited).
    pub(crate) waited: Option<String>,
    /// The size of an output the queue's retention did not keep.
    pub(crate) output_dropped: Option<String>,
}

/// A new job's row, as enqueue writes it whole.
pub(crate) struct NewRow<'a> {
    pub(crate) id: String,
    pub(crate) data: &'a [u8],
    pub(crate) state: &'static str,
    pub(crate) max_attempts: Option<String>,
    pub(crate) kind: Option<&'a str>,
    pub(crate) priority: Option<String>,
    pub(crate) retry: Option<String>,
    pub(crate) run_at: Option<String>,
    /// Its score in `pending` (a ready flat job's rank), or none.
    pub(crate) pending: Option<i64>,
    /// Its lease deadline in `active`, for a row written claimed (a hand-off's): at attempt 1.
    pub(crate) lease: Option<i64>,
}

impl NewRow<'_> {
    /// Its attempts field: 1 for a row written claimed, else absent.
    fn attempts(&self) -> Option<&'static str> {
        self.lease.map(|_| "1")
    }
}

/// The sorted set `active`, kept on the rows (see [`RowSet`]).
pub(crate) const ACTIVE: &str = "active";

/// Every field column of a job row, as one SQL value: NULL exactly when the row has no field (no
/// `emq:{q}:job:<id>` hash: only a lease left on it, see [`ACTIVE`]).
macro_rules! fields {
    () => {
        "coalesce(data, state, attempts, grp, max_attempts, run_at, stalled, last_error, cancel, output, finished_at, free, kind, \
         waited, output_dropped, priority, retry)"
    };
}
pub(crate) use fields;

/// A new row over one already there (only a row with no field, keeping a lease, gets here: the
/// callers refuse live ids): every field as written, its sets kept (a ready job's new place in
/// `pending` written), as HSET leaves the sets be and ZADD moves the score; a row written claimed
/// (a hand-off's) is out of `pending` and in `active` at its own lease, as the claim leaves it.
macro_rules! new_row_conflict {
    () => {
        " ON CONFLICT (id, queue) DO UPDATE SET data = excluded.data, state = excluded.state, \
         grp = excluded.grp, max_attempts = excluded.max_attempts, kind = excluded.kind, run_at = excluded.run_at, \
         priority = excluded.priority, retry = excluded.retry, \
         attempts = excluded.attempts, free = NULL, stalled = NULL, last_error = NULL, cancel = NULL, output = NULL, \
         finished_at = NULL, waited = NULL, output_dropped = NULL, \
         pending = CASE WHEN excluded.lease IS NULL THEN coalesce(excluded.pending, emq_jobs.pending) END, \
         lease = coalesce(excluded.lease, emq_jobs.lease)"
    };
}

/// Rows per multi-row statement of a batch write (enqueue's rows and set members).
const MULTI: usize = 50;

/// `head` then `MULTI` copies of `row` (its `{}` numbered from `first`, `per` parameters a row),
/// comma-separated, then `tail`.
fn multi_sql(head: &str, per: usize, first: usize, row: impl Fn(usize) -> String, tail: &str) -> String {
    let rows: Vec<String> = (0..MULTI).map(|i| row(first + i * per)).collect();
    format!("{head} {}{tail}", rows.join(", "))
}

/// The fields a claim reads (data, state, attempts, free, max_attempts, cancel, kind, waited, retry),
/// from column `at` on.
fn claim_fields(r: &rusqlite::Row<'_>, at: usize) -> rusqlite::Result<Row> {
    Ok(Row {
        data: bytes(r, at)?,
        state: text(r, at + 1)?,
        attempts: text(r, at + 2)?,
        free: text(r, at + 3)?,
        max_attempts: text(r, at + 4)?,
        cancel: text(r, at + 5)?,
        kind: text(r, at + 6)?,
        waited: text(r, at + 7)?,
        retry: text(r, at + 8)?,
        priority: text(r, at + 9)?,
        ..Row::default()
    })
}

/// A row's field as text, whatever its storage class. Redis keeps every field as bytes, so a value
/// stored as a number or a blob (by hand, or by another tool) reads as its text, and the guard
/// that finds it malformed names it (a claim buries the job): the read itself never fails.
pub(crate) fn text(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<String>> {
    use rusqlite::types::ValueRef;
    Ok(match r.get_ref(i)? {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
    })
}

/// A row's byte field (data, output), whatever its storage class (as [`text`]).
pub(crate) fn bytes(r: &rusqlite::Row<'_>, i: usize) -> rusqlite::Result<Option<Vec<u8>>> {
    use rusqlite::types::ValueRef;
    Ok(match r.get_ref(i)? {
        ValueRef::Null => None,
        ValueRef::Integer(n) => Some(n.to_string().into_bytes()),
        ValueRef::Real(f) => Some(f.to_string().into_bytes()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(t.to_vec()),
    })
}

/// One field to write with `hset`.
#[derive(Debug, Clone)]
pub(crate) enum Field<'a> {
    Data(&'a [u8]),
    State(&'a str),
    MaxAttempts(&'a str),
    RunAt(i64),
    Stalled(i64),
    LastError(&'a str),
    Cancel(&'a str),
    Output(&'a [u8]),
    FinishedAt(i64),
    Free(i64),
    OutputDropped(i64),
    Waited,
}

impl Field<'_> {
    fn column(&self) -> &'static str {
        match self {
            Field::Data(_) => "data",
            Field::State(_) => "state",
            Field::MaxAttempts(_) => "max_attempts",
            Field::RunAt(_) => "run_at",
            Field::Stalled(_) => "stalled",
            Field::LastError(_) => "last_error",
            Field::Cancel(_) => "cancel",
            Field::Output(_) => "output",
            Field::FinishedAt(_) => "finished_at",
            Field::Free(_) => "free",
            Field::OutputDropped(_) => "output_dropped",
            Field::Waited => "waited",
        }
    }

    fn value(&self) -> rusqlite::types::Value {
        use rusqlite::types::Value;
        match self {
            Field::Data(b) | Field::Output(b) => Value::Blob(b.to_vec()),
            Field::State(s) | Field::MaxAttempts(s) | Field::LastError(s) | Field::Cancel(s) => {
                Value::Text(s.to_string())
            }
            Field::RunAt(n) | Field::Stalled(n) | Field::FinishedAt(n) | Field::Free(n) | Field::OutputDropped(n) => {
                Value::Text(n.to_string())
            }
            Field::Waited => Value::Text("1".to_string()),
        }
    }
}

/// A field to delete with `hdel`.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Col {
    Data,
    RunAt,
    Stalled,
    Cancel,
    LastError,
}

impl Col {
    fn column(self) -> &'static str {
        match self {
            Col::Data => "data",
            Col::RunAt => "run_at",
            Col::Stalled => "stalled",
            Col::Cancel => "cancel",
            Col::LastError => "last_error",
        }
    }
}

/// One queue's keyspace inside one transaction.
pub(crate) struct Db<'a> {
    tx: &'a Txn<'a>,
    q: &'a str,
    verb: &'static str,
    now: Cell<Option<i64>>,
    /// Whether this transaction signals the queue's parked consumers (the store notifies them
    /// after commit).
    pub(crate) woke: Cell<bool>,
    /// Whether this transaction published a cancel request (the store notifies the queue's cancel
    /// streams after commit).
    pub(crate) cancels: Cell<bool>,
    /// Wake tokens pushed by this transaction (the store hands them to parks in this process).
    pub(crate) tokens: Cell<i64>,
    /// The waited jobs this transaction finished (the store tells the queue's waits after commit;
    /// `None` in the list: every waited job, from a verb that reads no row).
    pub(crate) finished: std::cell::RefCell<Vec<Option<String>>>,
    /// The offers of this process's parked consumers an enqueue may serve as it writes.
    pub(crate) direct: super::handoff::Direct,
    /// The rows this transaction moved into `pending` less those it moved out: the size of
    /// `pending` the store keeps moves by it at commit ([`Db::flush_counts`]), so ZCARD of
    /// `pending` is O(1), as Redis's is, where a count(*) is O(n).
    pub(crate) pending_moved: Cell<i64>,
    /// The same for the members of every lane (`lane:<g>`), whose sum counts reads in O(1) (the
    /// scripts keep it in the groups hash's `lane_jobs`).
    pub(crate) lanes_moved: Cell<i64>,
}

type R<T> = Result<T>;

/// The wake list's length cap (the scripts' LTRIM).
pub(crate) const WAKES_MAX: i64 = 16;

/// The cancel requests a queue keeps (its newest).
pub(crate) const CANCELS_KEPT: i64 = 1000;

impl<'a> Db<'a> {
    /// The transaction, for a twin's own statement (its SQL stays in its file).
    pub(crate) fn sql(&self) -> &Txn<'a> {
        self.tx
    }

    /// The queue's name.
    pub(crate) fn queue(&self) -> &str {
        self.q
    }

    /// Maps a SQLite error to the verb's store error.
    pub(crate) fn err(&self, e: rusqlite::Error) -> crate::Error {
        sql_error(self.verb, e)
    }

    pub(crate) fn new(tx: &'a Txn<'a>, q: &'a str, verb: &'static str) -> Self {
        Db {
            tx,
            q,
            verb,
            now: Cell::new(None),
            woke: Cell::new(false),
            cancels: Cell::new(false),
            tokens: Cell::new(0),
            finished: std::cell::RefCell::new(Vec::new()),
            direct: super::handoff::Direct::default(),
            pending_moved: Cell::new(0),
            lanes_moved: Cell::new(0),
        }
    }

    /// This transaction may serve `direct`'s offers as it writes ([`super::handoff::direct`]).
    pub(crate) fn offering(mut self, direct: super::handoff::Direct) -> Self {
        self.direct = direct;
        self
    }

    fn e(&self, e: rusqlite::Error) -> crate::Error {
        sql_error(self.verb, e)
    }

    /// Runs `f` under a savepoint, for one leg of a transaction that runs several (the consumer's
    /// round): when `f` errs, what it wrote is undone (and the wakes it counted forgotten) and its
    /// error comes back inside `Ok`, so the other legs still commit. Errs itself only when the
    /// savepoint cannot be opened or rolled back: the transaction must then fail whole.
    pub(crate) fn leg<T>(&self, f: impl FnOnce() -> R<T>) -> R<R<T>> {
        let (woke, cancels, tokens) = (self.woke.get(), self.cancels.get(), self.tokens.get());
        let (finished, moved) = (
            self.finished.borrow().len(),
            (self.pending_moved.get(), self.lanes_moved.get()),
        );
        txn::run(self.tx, "SAVEPOINT emq_leg").map_err(|e| self.e(e))?;
        let out = f();
        if out.is_err() {
            txn::run(self.tx, "ROLLBACK TO emq_leg").map_err(|e| self.e(e))?;
            self.woke.set(woke);
            self.cancels.set(cancels);
            self.tokens.set(tokens);
            self.pending_moved.set(moved.0);
            self.lanes_moved.set(moved.1);
            self.finished.borrow_mut().truncate(finished);
        }
        txn::run(self.tx, "RELEASE emq_leg").map_err(|e| self.e(e))?;
        Ok(out)
    }

    /// The store's clock in ms, read once per transaction (as a script reads TIME once).
    pub(crate) fn now(&self) -> i64 {
        self.now_us().div_euclid(1000)
    }

    /// The transaction's time in µs (the clock of the rate limits); [`Db::now`] is its whole ms.
    pub(crate) fn now_us(&self) -> i64 {
        if let Some(t) = self.now.get() {
            return t;
        }
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        self.now.set(Some(t));
        t
    }

    // ---- strings and counters (emq_kv)

    pub(crate) fn kv_get(&self, key: &str) -> R<Option<i64>> {
        self.tx
            .prepare_cached("SELECT value FROM emq_kv WHERE queue = ?1 AND key = ?2")
            .and_then(|mut s| s.query_row(params![self.q, key], |r| r.get(0)).optional())
            .map_err(|e| self.e(e))
    }

    pub(crate) fn kv_set(&self, key: &str, value: i64) -> R<()> {
        self.tx
            .prepare_cached("INSERT INTO emq_kv (queue, key, value) VALUES (?1, ?2, ?3) ON CONFLICT (queue, key) DO UPDATE SET value = excluded.value")
            .and_then(|mut s| s.execute(params![self.q, key, value]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    pub(crate) fn kv_del(&self, key: &str) -> R<bool> {
        self.tx
            .prepare_cached("DELETE FROM emq_kv WHERE queue = ?1 AND key = ?2")
            .and_then(|mut s| s.execute(params![self.q, key]))
            .map(|n| n > 0)
            .map_err(|e| self.e(e))
    }

    /// INCRBY, the new value: a read, then a write of the known sum, not an upsert with
    /// `RETURNING` (which builds a result table for its one row; `docs/performance.md`).
    pub(crate) fn kv_incr(&self, key: &str, by: i64) -> R<i64> {
        let value = self.kv_get(key)?.unwrap_or(0) + by;
        self.kv_set(key, value)?;
        Ok(value)
    }

    /// The size of `pending` in O(1): as committed (`emq_kv` key `size:pending`), moved by this
    /// transaction.
    pub(crate) fn pending_len(&self) -> R<i64> {
        Ok(self.kv_get("size:pending")?.unwrap_or(0) + self.pending_moved.get())
    }

    /// The members of every lane in O(1): as committed (`emq_kv` key `size:lanes`), moved by this
    /// transaction.
    pub(crate) fn lanes_len(&self) -> R<i64> {
        Ok(self.kv_get("size:lanes")?.unwrap_or(0) + self.lanes_moved.get())
    }

    /// The sizes moved by what this transaction moved into or out of `pending` and the lanes,
    /// written before the commit (none when nothing moved). They sit beside the queue's other
    /// counters, on a page most transactions write anyway (a table of their own would add a page to
    /// every commit).
    pub(crate) fn flush_counts(&self) -> R<()> {
        for (key, moved) in [
            ("size:pending", self.pending_moved.replace(0)),
            ("size:lanes", self.lanes_moved.replace(0)),
        ] {
            if moved != 0 {
                self.kv_incr(key, moved)?;
            }
        }
        Ok(())
    }

    /// `n` members joined (or, negative, left) the set `z`: counted when it is a lane.
    fn lane_moved(&self, z: &str, n: i64) {
        if z.starts_with("lane:") {
            self.lanes_moved.set(self.lanes_moved.get() + n);
        }
    }

    pub(crate) fn exists_flag(&self, key: &str) -> R<bool> {
        Ok(self.kv_get(key)?.is_some())
    }

    /// HINCRBY emq:{q}:metrics:<event> count n
    pub(crate) fn count(&self, event: &str, n: i64) -> R<()> {
        if n <= 0 {
            return Ok(());
        }
        self.kv_incr(&format!("metrics:{event}"), n)?;
        // this minute's count in the history (the field m<minute> of the script's hash): the
        // first count of a minute deletes the minute of a day before
        if event == "completed" || event == "failed" {
            let minute = self.now().div_euclid(60_000);
            if self.kv_incr(&format!("metrics:{event}:m{minute}"), n)? == n {
                self.kv_del(&format!("metrics:{event}:m{}", minute - 1440))?;
            }
        }
        Ok(())
    }

    /// RPUSH of n wake tokens (n > 0), trimmed to 16. The caller tells a paused queue, which gets
    /// none ([`super::common::wake`]).
    pub(crate) fn push_wakes(&self, n: i64) -> R<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO emq_kv (queue, key, value) VALUES (?1, 'wakes', min(?2, ?3)) \
                 ON CONFLICT (queue, key) DO UPDATE SET value = min(value + excluded.value, ?3)",
            )
            .and_then(|mut s| s.execute(params![self.q, n, WAKES_MAX]))
            .map_err(|e| self.e(e))?;
        self.tokens.set(self.tokens.get() + n);
        self.woke.set(true);
        Ok(())
    }

    // ---- rows (emq_jobs)

    pub(crate) fn row(&self, id: &str) -> R<Option<Row>> {
        self.tx
            .prepare_cached(concat!(
                "SELECT data, state, attempts, grp, max_attempts, run_at, stalled, last_error, cancel, output, \
                     finished_at, free, kind, waited, output_dropped, priority, retry FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND ",
                fields!(),
                " IS NOT NULL"
            ))
            .and_then(|mut s| {
                s.query_row(params![self.q, id], |r| {
                    Ok(Row {
                        data: bytes(r, 0)?,
                        state: text(r, 1)?,
                        attempts: text(r, 2)?,
                        group: text(r, 3)?,
                        max_attempts: text(r, 4)?,
                        run_at: text(r, 5)?,
                        stalled: text(r, 6)?,
                        last_error: text(r, 7)?,
                        cancel: text(r, 8)?,
                        output: bytes(r, 9)?,
                        finished_at: text(r, 10)?,
                        free: text(r, 11)?,
                        kind: text(r, 12)?,
                        waited: text(r, 13)?,
                        output_dropped: text(r, 14)?,
                        priority: text(r, 15)?,
                        retry: text(r, 16)?,
                    })
                })
                .optional()
            })
            .map_err(|e| self.e(e))
    }

    /// HGET priority: a row's priority field (absent on a row of priority 0, and with no row).
    pub(crate) fn priority(&self, id: &str) -> R<Option<String>> {
        self.tx
            .prepare_cached("SELECT priority FROM emq_jobs WHERE queue = ?1 AND id = ?2")
            .and_then(|mut s| s.query_row(params![self.q, id], |r| text(r, 0)).optional())
            .map(Option::flatten)
            .map_err(|e| self.e(e))
    }

    /// The fields a claim reads (HGETALL, of which it uses data state attempts free max_attempts
    /// cancel kind waited retry).
    pub(crate) fn claim_row(&self, id: &str) -> R<Option<Row>> {
        self.tx
            .prepare_cached(concat!(
                "SELECT data, state, attempts, free, max_attempts, cancel, kind, waited, retry, priority FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND ",
                fields!(),
                " IS NOT NULL"
            ))
            .and_then(|mut s| s.query_row(params![self.q, id], |r| claim_fields(r, 0)).optional())
            .map_err(|e| self.e(e))
    }

    /// HSET state active attempts n, ZREM pending and ZADD active deadline, of a row known to exist
    /// (a claim's): one write.
    /// (`from_pending`: the row is a member of `pending`, which this update takes it out of.)
    pub(crate) fn set_active(&self, id: &str, attempts: i64, deadline: i64, from_pending: bool) -> R<()> {
        self.tx
            .prepare_cached(
                "UPDATE emq_jobs SET state = 'active', attempts = ?3, lease = ?4, pending = NULL WHERE queue = ?1 AND id = ?2",
            )
            .and_then(|mut s| s.execute(params![self.q, id, attempts.to_string(), deadline]))
            .map_err(|e| self.e(e))?;
        if from_pending {
            self.pending_moved.set(self.pending_moved.get() - 1);
        }
        Ok(())
    }

    pub(crate) fn row_exists(&self, id: &str) -> R<bool> {
        self.tx
            .prepare_cached(concat!(
                "SELECT 1 FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND ",
                fields!(),
                " IS NOT NULL"
            ))
            .and_then(|mut s| s.exists(params![self.q, id]))
            .map_err(|e| self.e(e))
    }

    /// HSET: the fields written, the row created when absent.
    pub(crate) fn hset(&self, id: &str, fields: &[Field<'_>]) -> R<()> {
        if fields.is_empty() {
            return Ok(());
        }
        // one upsert for every field: the statement text depends only on which fields, so the
        // cache holds a handful of them
        let cols: Vec<&str> = fields.iter().map(Field::column).collect();
        let marks: Vec<String> = (0..cols.len()).map(|i| format!("?{}", i + 3)).collect();
        let sets: Vec<String> = cols.iter().map(|c| format!("{c} = excluded.{c}")).collect();
        let sql = format!(
            "INSERT INTO emq_jobs (queue, id, {}) VALUES (?1, ?2, {}) ON CONFLICT (id, queue) DO UPDATE SET {}",
            cols.join(", "),
            marks.join(", "),
            sets.join(", ")
        );
        let mut values: Vec<rusqlite::types::Value> = Vec::with_capacity(fields.len() + 2);
        values.push(self.q.to_string().into());
        values.push(id.to_string().into());
        values.extend(fields.iter().map(Field::value));
        self.tx
            .prepare_cached(&sql)
            .and_then(|mut s| s.execute(rusqlite::params_from_iter(values)))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    /// Every new row of a batch, in order, `MULTI` to a statement. Each with a place in `pending`
    /// and no lease joins `pending` (the callers refuse live ids: a row it writes over has no field
    /// and, at most, a lease).
    pub(crate) fn insert_rows(&self, group: Option<&str>, rows: &[NewRow<'_>]) -> R<()> {
        let joining = rows.iter().filter(|r| r.pending.is_some() && r.lease.is_none()).count();
        self.pending_moved.set(self.pending_moved.get() + joining as i64);
        static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let sql = SQL.get_or_init(|| {
            multi_sql(
                "INSERT INTO emq_jobs (queue, id, data, state, grp, max_attempts, run_at, pending, attempts, lease, \
                 kind, priority, retry) VALUES",
                11,
                3,
                |p| {
                    format!(
                        "(?1, ?{}, ?{}, ?{}, ?2, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{}, ?{})",
                        p,
                        p + 1,
                        p + 2,
                        p + 3,
                        p + 4,
                        p + 5,
                        p + 6,
                        p + 7,
                        p + 8,
                        p + 9,
                        p + 10
                    )
                },
                new_row_conflict!(),
            )
        });
        let mut chunks = rows.chunks_exact(MULTI);
        for chunk in &mut chunks {
            let mut stmt = self.tx.prepare_cached(sql).map_err(|e| self.e(e))?;
            stmt.raw_bind_parameter(1, self.q).map_err(|e| self.e(e))?;
            stmt.raw_bind_parameter(2, group).map_err(|e| self.e(e))?;
            for (i, r) in chunk.iter().enumerate() {
                let p = 3 + i * 11;
                stmt.raw_bind_parameter(p, &r.id).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 1, r.data).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 2, r.state).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 3, &r.max_attempts).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 4, &r.run_at).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 5, r.pending).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 6, r.attempts()).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 7, r.lease).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 8, r.kind).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 9, &r.priority).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 10, &r.retry).map_err(|e| self.e(e))?;
            }
            stmt.raw_execute().map_err(|e| self.e(e))?;
        }
        for r in chunks.remainder() {
            self.tx
                .prepare_cached(concat!(
                    "INSERT INTO emq_jobs (queue, id, data, state, grp, max_attempts, run_at, pending, attempts, \
                         lease, kind, priority, retry) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
                    new_row_conflict!()
                ))
                .and_then(|mut s| {
                    s.execute(params![
                        self.q,
                        r.id,
                        r.data,
                        r.state,
                        group,
                        r.max_attempts,
                        r.run_at,
                        r.pending,
                        r.attempts(),
                        r.lease,
                        r.kind,
                        r.priority,
                        r.retry
                    ])
                })
                .map_err(|e| self.e(e))?;
        }
        Ok(())
    }

    /// ZADD of many (set, score, member), in order, `MULTI` to a statement.
    pub(crate) fn zadd_many(&self, members: &[(&str, i64, String)]) -> R<()> {
        if members.iter().any(|(z, ..)| RowSet::of(z).is_some()) {
            for (z, score, member) in members {
                self.zadd(z, *score, member)?;
            }
            return Ok(());
        }
        static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let sql = SQL.get_or_init(|| {
            multi_sql(
                "INSERT INTO emq_zsets (queue, zset, member, score) VALUES",
                3,
                2,
                |p| format!("(?1, ?{}, ?{}, ?{})", p, p + 1, p + 2),
                " ON CONFLICT (member, zset, queue) DO NOTHING",
            )
        });
        let mut chunks = members.chunks_exact(MULTI);
        for chunk in &mut chunks {
            // a chunk counts its new lane members as a whole: so it holds one set, or no lane
            let one_set = chunk.iter().all(|(z, ..)| *z == chunk[0].0);
            if !one_set && chunk.iter().any(|(z, ..)| z.starts_with("lane:")) {
                for (z, score, member) in chunk {
                    self.zadd(z, *score, member)?;
                }
                continue;
            }
            let mut stmt = self.tx.prepare_cached(sql).map_err(|e| self.e(e))?;
            stmt.raw_bind_parameter(1, self.q).map_err(|e| self.e(e))?;
            for (i, (z, score, member)) in chunk.iter().enumerate() {
                let p = 2 + i * 3;
                stmt.raw_bind_parameter(p, *z).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 1, member).map_err(|e| self.e(e))?;
                stmt.raw_bind_parameter(p + 2, *score).map_err(|e| self.e(e))?;
            }
            let inserted = stmt.raw_execute().map_err(|e| self.e(e))?;
            if one_set {
                self.lane_moved(chunk[0].0, inserted as i64);
            }
            if inserted < chunk.len() {
                // members already there (rare: a caller's): their scores move as ZADD's do
                for (z, score, member) in chunk {
                    self.zadd_xx(z, *score, member)?;
                }
            }
        }
        for (z, score, member) in chunks.remainder() {
            self.zadd(z, *score, member)?;
        }
        Ok(())
    }

    /// HDEL of fields.
    pub(crate) fn hdel(&self, id: &str, cols: &[Col]) -> R<()> {
        for c in cols {
            let sql = format!("UPDATE emq_jobs SET {} = NULL WHERE queue = ?1 AND id = ?2", c.column());
            self.tx
                .prepare_cached(&sql)
                .and_then(|mut s| s.execute(params![self.q, id]))
                .map_err(|e| self.e(e))?;
        }
        Ok(())
    }

    /// DEL of a row: true when there was one. An id in `active` or `pending` keeps its score on a
    /// row with no field (DEL leaves the sets be, as in Redis).
    pub(crate) fn del_row(&self, id: &str) -> R<bool> {
        let deleted = self
            .tx
            .prepare_cached("DELETE FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND lease IS NULL AND pending IS NULL")
            .and_then(|mut s| s.execute(params![self.q, id]))
            .map_err(|e| self.e(e))?;
        if deleted > 0 {
            return Ok(true);
        }
        self.tx
            .prepare_cached(concat!(
                "UPDATE emq_jobs SET data = NULL, state = NULL, attempts = NULL, grp = NULL, max_attempts = NULL, \
                 run_at = NULL, stalled = NULL, last_error = NULL, cancel = NULL, output = NULL, finished_at = NULL, \
                 free = NULL, kind = NULL, waited = NULL, output_dropped = NULL WHERE queue = ?1 AND id = ?2 AND (lease IS NOT NULL OR pending IS NOT NULL) AND ",
                fields!(),
                " IS NOT NULL"
            ))
            .and_then(|mut s| s.execute(params![self.q, id]))
            .map(|n| n > 0)
            .map_err(|e| self.e(e))
    }

    /// ZREM active + DEL of the row, of a job its caller holds: one delete.
    pub(crate) fn del_active_row(&self, id: &str) -> R<()> {
        self.tx
            .prepare_cached("DELETE FROM emq_jobs WHERE queue = ?1 AND id = ?2")
            .and_then(|mut s| s.execute(params![self.q, id]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    // ---- sorted sets (emq_zsets; `active` is the rows' lease column, in db/active.rs)

    pub(crate) fn zadd(&self, z: &str, score: i64, member: &str) -> R<()> {
        if let Some(set) = RowSet::of(z) {
            return self.set_score(set, member, score);
        }
        if !z.starts_with("lane:") {
            // one upsert: no size is kept of the other sets (a rate limit's `tats` moves a member
            // on every claim)
            return self
                .tx
                .prepare_cached("INSERT INTO emq_zsets (queue, zset, member, score) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (member, zset, queue) DO UPDATE SET score = excluded.score")
                .and_then(|mut s| s.execute(params![self.q, z, member, score]))
                .map(drop)
                .map_err(|e| self.e(e));
        }
        // a lane's new member counted; an existing one's score moved
        let added = self
            .tx
            .prepare_cached("INSERT INTO emq_zsets (queue, zset, member, score) VALUES (?1, ?2, ?3, ?4) ON CONFLICT (member, zset, queue) DO NOTHING")
            .and_then(|mut s| s.execute(params![self.q, z, member, score]))
            .map_err(|e| self.e(e))?;
        if added > 0 {
            self.lane_moved(z, 1);
        } else {
            self.zadd_xx(z, score, member)?;
        }
        Ok(())
    }

    /// ZADD XX: only an existing member's score moves. True when it existed.
    pub(crate) fn zadd_xx(&self, z: &str, score: i64, member: &str) -> R<bool> {
        if let Some(set) = RowSet::of(z) {
            return self.move_score(set, member, score);
        }
        self.tx
            .prepare_cached("UPDATE emq_zsets SET score = ?4 WHERE queue = ?1 AND zset = ?2 AND member = ?3")
            .and_then(|mut s| s.execute(params![self.q, z, member, score]))
            .map(|n| n > 0)
            .map_err(|e| self.e(e))
    }

    /// ZREM: true when it was a member.
    pub(crate) fn zrem(&self, z: &str, member: &str) -> R<bool> {
        if let Some(set) = RowSet::of(z) {
            return self.drop_member(set, member);
        }
        let gone = self
            .tx
            .prepare_cached("DELETE FROM emq_zsets WHERE queue = ?1 AND zset = ?2 AND member = ?3")
            .and_then(|mut s| s.execute(params![self.q, z, member]))
            .map_err(|e| self.e(e))?;
        self.lane_moved(z, -(gone as i64));
        Ok(gone > 0)
    }

    pub(crate) fn zscore(&self, z: &str, member: &str) -> R<Option<i64>> {
        if let Some(set) = RowSet::of(z) {
            return self.score(set, member);
        }
        self.tx
            .prepare_cached("SELECT score FROM emq_zsets WHERE queue = ?1 AND zset = ?2 AND member = ?3")
            .and_then(|mut s| s.query_row(params![self.q, z, member], |r| r.get(0)).optional())
            .map_err(|e| self.e(e))
    }

    pub(crate) fn zcard(&self, z: &str) -> R<i64> {
        if let Some(set) = RowSet::of(z) {
            return self.card(set);
        }
        self.tx
            .prepare_cached("SELECT count(*) FROM emq_zsets WHERE queue = ?1 AND zset = ?2")
            .and_then(|mut s| s.query_row(params![self.q, z], |r| r.get(0)))
            .map_err(|e| self.e(e))
    }

    /// ZCARD counted no further than `cap`: O(min(n, cap)) where a full count is O(n).
    pub(crate) fn zcard_upto(&self, z: &str, cap: i64) -> R<i64> {
        if let Some(set) = RowSet::of(z) {
            return self.card_upto(set, cap);
        }
        self.tx
            .prepare_cached("SELECT count(*) FROM (SELECT 1 FROM emq_zsets WHERE queue = ?1 AND zset = ?2 LIMIT ?3)")
            .and_then(|mut s| s.query_row(params![self.q, z, cap], |r| r.get(0)))
            .map_err(|e| self.e(e))
    }

    /// ZCARD > 0, without counting: O(1) where a count is O(n).
    pub(crate) fn znonempty(&self, z: &str) -> R<bool> {
        if let Some(set) = RowSet::of(z) {
            return Ok(self.first(set)?.is_some());
        }
        self.tx
            .prepare_cached("SELECT 1 FROM emq_zsets WHERE queue = ?1 AND zset = ?2 LIMIT 1")
            .and_then(|mut s| s.exists(params![self.q, z]))
            .map_err(|e| self.e(e))
    }

    /// ZRANGE by rank, `limit` members from `offset` (ascending; `rev` = ZREVRANGE).
    pub(crate) fn zrange(&self, z: &str, offset: i64, limit: i64, rev: bool) -> R<Vec<String>> {
        if let Some(set) = RowSet::of(z) {
            return self.range(set, offset, limit, rev);
        }
        let sql = if rev {
            "SELECT member FROM emq_zsets WHERE queue = ?1 AND zset = ?2 ORDER BY score DESC, member DESC LIMIT ?3 OFFSET ?4"
        } else {
            "SELECT member FROM emq_zsets WHERE queue = ?1 AND zset = ?2 ORDER BY score, member LIMIT ?3 OFFSET ?4"
        };
        self.strings(sql, params![self.q, z, limit, offset])
    }

    /// ZRANGE … WITHSCORES by rank, `limit` members from `offset` (ascending).
    pub(crate) fn zrange_scored(&self, z: &str, offset: i64, limit: i64) -> R<Vec<(String, i64)>> {
        if let Some(set) = RowSet::of(z) {
            return self.range_scored(set, offset, limit);
        }
        self.tx
            .prepare_cached(
                "SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?2 ORDER BY score, member LIMIT ?3 OFFSET ?4",
            )
            .and_then(|mut s| {
                s.query_map(params![self.q, z, limit, offset], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(|e| self.e(e))
    }

    /// ZRANGE … WITHSCORES of the lowest member.
    pub(crate) fn zfirst(&self, z: &str) -> R<Option<(String, i64)>> {
        if let Some(set) = RowSet::of(z) {
            return self.first(set);
        }
        self.tx
            .prepare_cached(
                "SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?2 ORDER BY score, member LIMIT 1",
            )
            .and_then(|mut s| {
                s.query_row(params![self.q, z], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(|e| self.e(e))
    }

    /// ZRANGE z offset offset WITHSCORES of a set kept in emq_zsets: its member of that rank.
    pub(crate) fn zrange_from(&self, z: &str, offset: i64) -> R<Option<(String, i64)>> {
        self.tx
            .prepare_cached(
                "SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?2 ORDER BY score, member LIMIT 1 OFFSET ?3",
            )
            .and_then(|mut s| {
                s.query_row(params![self.q, z, offset], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
            })
            .map_err(|e| self.e(e))
    }

    /// ZREMRANGEBYSCORE z -inf max of a set kept in emq_zsets.
    pub(crate) fn zrem_upto(&self, z: &str, max: i64) -> R<()> {
        self.tx
            .prepare_cached("DELETE FROM emq_zsets WHERE queue = ?1 AND zset = ?2 AND score <= ?3")
            .and_then(|mut s| s.execute(params![self.q, z, max]))
            .map(|gone| self.lane_moved(z, -(gone as i64)))
            .map_err(|e| self.e(e))
    }

    /// ZRANGEBYSCORE z -inf max LIMIT 0 limit.
    pub(crate) fn zrange_upto(&self, z: &str, max: i64, limit: i64) -> R<Vec<String>> {
        if let Some(set) = RowSet::of(z) {
            return self.upto(set, max, limit);
        }
        self.strings(
            "SELECT member FROM emq_zsets WHERE queue = ?1 AND zset = ?2 AND score <= ?3 ORDER BY score, member LIMIT ?4",
            params![self.q, z, max, limit],
        )
    }

    /// ZRANGEBYSCORE z -inf max WITHSCORES LIMIT 0 limit of a set kept in emq_zsets.
    pub(crate) fn zrange_upto_scored(&self, z: &str, max: i64, limit: i64) -> R<Vec<(String, i64)>> {
        self.tx
            .prepare_cached(
                "SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?2 AND score <= ?3 \
                 ORDER BY score, member LIMIT ?4",
            )
            .and_then(|mut s| {
                s.query_map(params![self.q, z, max, limit], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(|e| self.e(e))
    }

    /// ZREMRANGEBYRANK z 0 count-1 of a set kept in emq_zsets: its `count` lowest members gone.
    pub(crate) fn zrem_head(&self, z: &str, count: i64) -> R<()> {
        self.tx
            .prepare_cached(
                "DELETE FROM emq_zsets WHERE queue = ?1 AND zset = ?2 AND member IN \
                 (SELECT member FROM emq_zsets WHERE queue = ?1 AND zset = ?2 ORDER BY score, member LIMIT ?3)",
            )
            .and_then(|mut s| s.execute(params![self.q, z, count]))
            .map(|gone| self.lane_moved(z, -(gone as i64)))
            .map_err(|e| self.e(e))
    }

    // ---- lists (emq_lists)

    fn list_end(&self, list: &str, last: bool) -> R<Option<i64>> {
        let sql = if last {
            "SELECT max(pos) FROM emq_lists WHERE queue = ?1 AND list = ?2"
        } else {
            "SELECT min(pos) FROM emq_lists WHERE queue = ?1 AND list = ?2"
        };
        self.tx
            .prepare_cached(sql)
            .and_then(|mut s| s.query_row(params![self.q, list], |r| r.get(0)))
            .map_err(|e| self.e(e))
    }

    fn list_put(&self, list: &str, pos: i64, member: &str) -> R<()> {
        self.tx
            .prepare_cached("INSERT INTO emq_lists (queue, list, pos, member) VALUES (?1, ?2, ?3, ?4)")
            .and_then(|mut s| s.execute(params![self.q, list, pos, member]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    pub(crate) fn rpush(&self, list: &str, member: &str) -> R<()> {
        let pos = self.list_end(list, true)?.map_or(0, |p| p + 1);
        self.list_put(list, pos, member)
    }

    pub(crate) fn llen(&self, list: &str) -> R<i64> {
        self.tx
            .prepare_cached("SELECT count(*) FROM emq_lists WHERE queue = ?1 AND list = ?2")
            .and_then(|mut s| s.query_row(params![self.q, list], |r| r.get(0)))
            .map_err(|e| self.e(e))
    }

    /// LRANGE list offset offset+limit-1.
    pub(crate) fn lrange(&self, list: &str, offset: i64, limit: i64) -> R<Vec<String>> {
        self.strings(
            "SELECT member FROM emq_lists WHERE queue = ?1 AND list = ?2 ORDER BY pos LIMIT ?3 OFFSET ?4",
            params![self.q, list, limit, offset],
        )
    }

    /// LTRIM list count -1: its first `count` members gone.
    pub(crate) fn ltrim_head(&self, list: &str, count: i64) -> R<()> {
        self.tx
            .prepare_cached(
                "DELETE FROM emq_lists WHERE queue = ?1 AND list = ?2 AND pos IN \
                 (SELECT pos FROM emq_lists WHERE queue = ?1 AND list = ?2 ORDER BY pos LIMIT ?3)",
            )
            .and_then(|mut s| s.execute(params![self.q, list, count]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    // ---- the groups hash (emq_groups)

    pub(crate) fn gget(&self, field: &str) -> R<Option<String>> {
        self.tx
            .prepare_cached("SELECT value FROM emq_groups WHERE queue = ?1 AND field = ?2")
            .and_then(|mut s| s.query_row(params![self.q, field], |r| r.get(0)).optional())
            .map_err(|e| self.e(e))
    }

    pub(crate) fn gset(&self, field: &str, value: &str) -> R<()> {
        self.tx
            .prepare_cached("INSERT INTO emq_groups (queue, field, value) VALUES (?1, ?2, ?3) ON CONFLICT (queue, field) DO UPDATE SET value = excluded.value")
            .and_then(|mut s| s.execute(params![self.q, field, value]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    pub(crate) fn gdel(&self, field: &str) -> R<()> {
        self.tx
            .prepare_cached("DELETE FROM emq_groups WHERE queue = ?1 AND field = ?2")
            .and_then(|mut s| s.execute(params![self.q, field]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    /// The fields of the groups hash that begin with `prefix`, with their values, by name (an
    /// HSCAN MATCH `prefix*`).
    pub(crate) fn gprefixed(&self, prefix: &str) -> R<Vec<(String, String)>> {
        self.tx
            .prepare_cached(
                "SELECT field, value FROM emq_groups WHERE queue = ?1 AND substr(field, 1, length(?2)) = ?2 ORDER BY field",
            )
            .and_then(|mut s| {
                s.query_map(params![self.q, prefix], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .map_err(|e| self.e(e))
    }

    /// The names `g` of the fields `<prefix><g>` of the groups hash (a two-byte prefix: `a:`, `r:`
    /// or `l:`) after `after`, by name, at most `limit`: one range of the table's key, however
    /// many groups the queue has.
    pub(crate) fn gnames(&self, prefix: &str, after: Option<&str>, limit: i64) -> R<Vec<String>> {
        // every field of the prefix sorts below the prefix with its ':' raised to ';'
        let from = format!("{prefix}{}", after.unwrap_or(""));
        let to = format!("{};", prefix.trim_end_matches(':'));
        self.strings(
            "SELECT substr(field, 3) FROM emq_groups WHERE queue = ?1 AND field > ?2 AND field < ?3 \
             ORDER BY field LIMIT ?4",
            params![self.q, from, to, limit],
        )
    }

    /// Every field of the groups hash, by name.
    pub(crate) fn gfields(&self) -> R<Vec<String>> {
        self.strings(
            "SELECT field FROM emq_groups WHERE queue = ?1 ORDER BY field",
            params![self.q],
        )
    }

    // ---- records and cancel requests

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn record(
        &self,
        recmax: i64,
        id: &str,
        status: &str,
        attempts: &str,
        field: &str,
        value: Option<&[u8]>,
    ) -> R<()> {
        if recmax <= 0 {
            return Ok(());
        }
        let now = self.now();
        self.tx
            .prepare_cached("INSERT INTO emq_records (queue, id, status, attempts, field, value, at) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)")
            .and_then(|mut s| s.execute(params![self.q, id, status, attempts, value.map(|_| field), value, now]))
            .map_err(|e| self.e(e))?;
        // MAXLEN ~ recmax: trimmed now and then, as Redis trims whole nodes
        self.tx
            .prepare_cached(
                "DELETE FROM emq_records WHERE queue = ?1 AND seq <= \
                 (SELECT seq FROM emq_records WHERE queue = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
            )
            .and_then(|mut s| s.execute(params![self.q, recmax + 100]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    /// PUBLISH emq:{q}:finished of a job that finished, when its row carries the waited mark
    /// (`emq_notify`): the store tells the queue's waits once this transaction commits.
    pub(crate) fn notify(&self, waited: Option<&str>, id: &str) {
        if waited.is_some() {
            self.finished.borrow_mut().push(Some(id.to_string()));
        }
    }

    /// PUBLISH emq:{q}:finished `*`: every waited job of the queue is looked at again (from a
    /// verb that reads no row).
    pub(crate) fn notify_all(&self) {
        self.finished.borrow_mut().push(None);
    }

    /// PUBLISH emq:{q}:cancel: a durable request the queue's cancel streams read, in every process.
    /// The queue keeps its newest [`CANCELS_KEPT`] (a stream reads them within a poll, 200 ms).
    pub(crate) fn publish_cancel(&self, id: &str, reason: Option<&str>) -> R<()> {
        self.tx
            .prepare_cached("INSERT INTO emq_cancels (queue, id, reason) VALUES (?1, ?2, ?3)")
            .and_then(|mut s| s.execute(params![self.q, id, reason]))
            .map(drop)
            .map_err(|e| self.e(e))?;
        self.tx
            .prepare_cached(
                "DELETE FROM emq_cancels WHERE queue = ?1 AND seq < \
                 (SELECT seq FROM emq_cancels WHERE queue = ?1 ORDER BY seq DESC LIMIT 1 OFFSET ?2)",
            )
            .and_then(|mut s| s.execute(params![self.q, CANCELS_KEPT - 1]))
            .map(drop)
            .map_err(|e| self.e(e))?;
        self.cancels.set(true);
        Ok(())
    }

    // ---- whole-queue statements (queues, obliterate)

    pub(crate) fn register(&self) -> R<()> {
        self.tx
            .prepare_cached("INSERT INTO emq_queues (queue) VALUES (?1) ON CONFLICT DO NOTHING")
            .and_then(|mut s| s.execute(params![self.q]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    pub(crate) fn unregister(&self) -> R<()> {
        self.tx
            .prepare_cached("DELETE FROM emq_queues WHERE queue = ?1")
            .and_then(|mut s| s.execute(params![self.q]))
            .map(drop)
            .map_err(|e| self.e(e))
    }

    /// Deletes every remaining key of the queue but its rows (obliterate's last step).
    pub(crate) fn delete_queue_keys(&self) -> R<()> {
        self.clear(RowSet::Active)?;
        self.clear(RowSet::Pending)?;
        for table in [
            "emq_kv",
            "emq_zsets",
            "emq_lists",
            "emq_groups",
            "emq_records",
            "emq_cancels",
            "emq_schedules",
            "emq_dedup",
        ] {
            self.tx
                .execute(&format!("DELETE FROM {table} WHERE queue = ?1"), params![self.q])
                .map_err(|e| self.e(e))?;
        }
        // pending and the lanes are empty, and their counts gone with the rest
        self.pending_moved.set(0);
        self.lanes_moved.set(0);
        Ok(())
    }

    fn strings(&self, sql: &str, p: impl rusqlite::Params) -> R<Vec<String>> {
        let mut stmt = self.tx.prepare_cached(sql).map_err(|e| self.e(e))?;
        let rows = stmt.query_map(p, |r| r.get::<_, String>(0)).map_err(|e| self.e(e))?;
        rows.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| self.e(e))
    }
}
