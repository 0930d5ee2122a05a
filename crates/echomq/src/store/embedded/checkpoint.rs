//! The checkpointer: copies the `-wal` file's commits into the database file on a thread and a
//! connection of its own, off the verbs' path. SQLite's own checkpoint runs inside the commit that
//! crosses the `-wal` size limit, and that commit then waits for the copy and its fsync (the tail of
//! the enqueue → start latency); here the store's connection only checkpoints as a safety net, at
//! [`WAL_AUTOCHECKPOINT_PAGES`], should this thread fall behind.
//!
//! * While commits come (`PRAGMA data_version` moved): a `PASSIVE` checkpoint every
//!   [`CHECKPOINT_EVERY`] — it never waits for, nor blocks, a reader or a writer of any process.
//! * Once the file has been quiet for [`IDLE_AFTER`]: a `TRUNCATE` checkpoint, which empties the
//!   `-wal` file, so it does not stay at its high-water mark. It does not wait either (no busy
//!   timeout on this connection): when another connection is busy, it is tried again a tick later.

use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// How often the checkpointer looks for new commits.
pub(crate) const CHECKPOINT_EVERY: Duration = Duration::from_millis(100);

/// How long the file must be quiet before the `-wal` file is truncated.
pub(crate) const IDLE_AFTER: Duration = Duration::from_millis(500);

/// The store connection's own automatic checkpoint, in pages (SQLite's default is 1000): only
/// reached when the checkpointer falls behind or could not start.
pub(crate) const WAL_AUTOCHECKPOINT_PAGES: i64 = 10_000;

/// Starts the checkpointer of the file `conn` has open. It ends when the returned sender is
/// dropped (with the store's thread). When it cannot start, SQLite's own checkpoint stays as it
/// was and `None` is returned.
pub(crate) fn spawn(path: &str, conn: &Connection) -> Option<Sender<()>> {
    let own = match Connection::open(path) {
        Ok(c) => c,
        Err(e) => {
            tracing::warn!(path, error = %e, "the checkpointer cannot open the file; SQLite checkpoints in the commits");
            return None;
        }
    };
    let (stop, stopped) = std::sync::mpsc::channel::<()>();
    let started = std::thread::Builder::new()
        .name("emq-checkpoint".into())
        .spawn(move || run(own, stopped));
    if let Err(e) = started {
        tracing::warn!(path, error = %e, "cannot start the checkpointer; SQLite checkpoints in the commits");
        return None;
    }
    if let Err(e) = conn.pragma_update(None, "wal_autocheckpoint", WAL_AUTOCHECKPOINT_PAGES) {
        tracing::warn!(path, error = %e, "cannot raise wal_autocheckpoint");
    }
    Some(stop)
}

fn run(conn: Connection, stopped: Receiver<()>) {
    let version = |c: &Connection| -> Option<i64> { c.query_row("PRAGMA data_version", [], |r| r.get(0)).ok() };
    let mut seen = version(&conn);
    // a commit not yet truncated away, and when the last one was seen
    let mut dirty = true;
    let mut last_commit = Instant::now();
    loop {
        match stopped.recv_timeout(CHECKPOINT_EVERY) {
            Err(RecvTimeoutError::Timeout) => {}
            // the store is gone: closing the last connection checkpoints and removes the -wal file
            Ok(()) | Err(RecvTimeoutError::Disconnected) => return,
        }
        let now = version(&conn);
        if now != seen {
            seen = now;
            last_commit = Instant::now();
            // another process's truncation moves the version too, and leaves nothing to truncate:
            // so two checkpointers never keep each other busy
            dirty = checkpoint(&conn, "PASSIVE").is_none_or(|(_, frames)| frames > 0);
        } else if dirty && last_commit.elapsed() >= IDLE_AFTER {
            dirty = !matches!(checkpoint(&conn, "TRUNCATE"), Some((false, _)));
        }
    }
}

/// One checkpoint: (busy, frames left in the `-wal` file), `None` when it failed.
fn checkpoint(conn: &Connection, mode: &str) -> Option<(bool, i64)> {
    let sql = format!("PRAGMA wal_checkpoint({mode})");
    match conn.query_row(&sql, [], |r| Ok((r.get::<_, i64>(0)? != 0, r.get::<_, i64>(1)?))) {
        Ok(r) => Some(r),
        Err(e) => {
            tracing::debug!(error = %e, mode, "checkpoint failed; trying again later");
            None
        }
    }
}
