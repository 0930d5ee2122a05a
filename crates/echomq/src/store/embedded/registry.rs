//! The file of the registry of live consumers: `PATH-consumers` beside the store's file `PATH`,
//! opened by the store's thread on the first registry verb. A file of its own because a commit to
//! the store's file moves `PRAGMA data_version`, which ends other processes' parks: an entry written
//! every beat there would end every park of every other process every beat. The registry's
//! scripts run there on an engine of its own.

use rusqlite::Connection;

use super::open_error;
use crate::error::Result;

/// The registry file of the store at `path`.
pub(crate) fn path_of(store_path: &str) -> String {
    format!("{store_path}-consumers")
}

/// Opens (creating when missing) the registry file of the store at `store_path`. Losing it loses
/// nothing but entries every live consumer writes again within a beat, so commits are not synced.
pub(crate) fn open(store_path: &str) -> Result<Connection> {
    let path = path_of(store_path);
    let mut conn = Connection::open(&path).map_err(|e| open_error(&path, e))?;
    conn.busy_handler(Some(super::busy_wait))
        .map_err(|e| open_error(&path, e))?;
    super::until_not_busy(|| conn.pragma_update(None, "journal_mode", "WAL")).map_err(|e| open_error(&path, e))?;
    conn.pragma_update(None, "synchronous", "OFF")
        .map_err(|e| open_error(&path, e))?;
    Ok(conn)
}
