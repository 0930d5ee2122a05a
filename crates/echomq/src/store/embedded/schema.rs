//! The embedded store's schema: the Redis keyspace mirrored table by table, so each native twin
//! reads like its script. Migrations are numbered and run inside `BEGIN IMMEDIATE` (several
//! processes may open a new file at once); a file from a newer schema is refused, never touched.

use rusqlite::{Connection, TransactionBehavior};

use crate::error::{Error, Result};

/// The schema this build writes (`PRAGMA user_version`).
pub const SCHEMA_VERSION: i64 = 1;

/// Migration n takes a file from version n-1 to n.
const MIGRATIONS: &[&str] = &[
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
    -- the sorted sets pending, active, scheduled, dead, completed; ties ordered by member bytes
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
];

/// Brings the file to [`SCHEMA_VERSION`], or refuses a newer one.
pub(crate) fn migrate(conn: &mut Connection, path: &str) -> Result<()> {
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(|e| super::sql_error("open", e))?;
    let version: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(|e| super::sql_error("open", e))?;
    if version > SCHEMA_VERSION {
        return Err(Error::Store {
            verb: "open",
            reason: format!(
                "{path} has schema version {version}, newer than this build's {SCHEMA_VERSION}: \
                 refusing to touch it (upgrade echomq)"
            ),
        });
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        tx.execute_batch(sql).map_err(|e| super::sql_error("open", e))?;
        tx.pragma_update(None, "user_version", i as i64 + 1)
            .map_err(|e| super::sql_error("open", e))?;
    }
    tx.commit().map_err(|e| super::sql_error("open", e))
}
