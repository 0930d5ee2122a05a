//! One `BEGIN IMMEDIATE` transaction through the connection's cached statements.
//!
//! rusqlite's own transactions parse `BEGIN`, `COMMIT` and each savepoint statement anew every
//! time, and on a store that sits idle between verbs each parse runs cold on the enqueue → start
//! path. These are parsed once per connection (`docs/performance.md`).

use std::ops::Deref;

use rusqlite::Connection;

/// An open `BEGIN IMMEDIATE` transaction: committed by [`Txn::commit`], rolled back when dropped
/// without it (as a rusqlite transaction is).
pub(crate) struct Txn<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Txn<'c> {
    /// Begins one on `conn`, waiting for the write lock as its busy timeout says.
    pub(crate) fn begin(conn: &'c Connection) -> rusqlite::Result<Self> {
        run(conn, "BEGIN IMMEDIATE")?;
        Ok(Txn { conn, open: true })
    }

    /// Commits it; on an error it stays open and rolls back when dropped.
    pub(crate) fn commit(mut self) -> rusqlite::Result<()> {
        run(self.conn, "COMMIT")?;
        self.open = false;
        Ok(())
    }
}

impl Deref for Txn<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Txn<'_> {
    fn drop(&mut self) {
        // a statement still open within it is reset by SQLite's rollback; an error leaves
        // autocommit to SQLite, which rolled the transaction back already (I/O or full errors)
        if self.open && !self.conn.is_autocommit() {
            if let Err(e) = run(self.conn, "ROLLBACK") {
                tracing::warn!(error = %e, "rolling back an embedded store transaction failed");
            }
        }
    }
}

/// Runs one statement without parameters or rows through the connection's statement cache.
pub(crate) fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

#[cfg(test)]
mod tests {
    use rusqlite::Connection;

    use super::{run, Txn};

    fn rows(conn: &Connection) -> i64 {
        conn.query_row("SELECT count(*) FROM t", [], |r| r.get(0)).unwrap()
    }

    #[test]
    fn a_committed_transaction_stays_and_a_dropped_one_rolls_back() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("t.db")).unwrap();
        conn.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (v INTEGER)")
            .unwrap();
        for round in 0..3 {
            let t = Txn::begin(&conn).unwrap();
            assert!(!conn.is_autocommit(), "round {round}: BEGIN left autocommit on");
            t.execute("INSERT INTO t VALUES (1)", []).unwrap();
            t.commit().unwrap();
            let t = Txn::begin(&conn).unwrap();
            t.execute("INSERT INTO t VALUES (2)", []).unwrap();
            drop(t);
            assert!(conn.is_autocommit());
            assert_eq!(rows(&conn), round + 1, "round {round}: only the committed rows stay");
        }
    }

    #[test]
    fn a_savepoint_inside_rolls_back_alone() {
        let dir = tempfile::tempdir().unwrap();
        let conn = Connection::open(dir.path().join("t.db")).unwrap();
        conn.execute_batch("CREATE TABLE t (v INTEGER)").unwrap();
        let t = Txn::begin(&conn).unwrap();
        t.execute("INSERT INTO t VALUES (1)", []).unwrap();
        run(&t, "SAVEPOINT s").unwrap();
        t.execute("INSERT INTO t VALUES (2)", []).unwrap();
        run(&t, "ROLLBACK TO s").unwrap();
        run(&t, "RELEASE s").unwrap();
        t.commit().unwrap();
        assert_eq!(rows(&conn), 1);
    }

    #[test]
    fn a_second_writer_is_refused_busy_while_one_holds_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let (a, b) = (Connection::open(&path).unwrap(), Connection::open(&path).unwrap());
        a.execute_batch("PRAGMA journal_mode=WAL; CREATE TABLE t (v INTEGER)")
            .unwrap();
        b.busy_timeout(std::time::Duration::ZERO).unwrap();
        let held = Txn::begin(&a).unwrap();
        let refused = Txn::begin(&b).err().expect("the write lock is held");
        assert_eq!(refused.sqlite_error_code(), Some(rusqlite::ErrorCode::DatabaseBusy));
        assert!(b.is_autocommit(), "a refused BEGIN leaves no transaction open");
        drop(held);
        Txn::begin(&b).unwrap().commit().unwrap();
    }
}
