//! The twin of `scripts/complete_cancelled.lua`: the `cancel(reason)` verdict, fenced like complete,
//! ending in cancelled (deleted, or retained with the reason as last_error).

use super::common::{fence, finish, leave_lane};
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::Settled;

pub(crate) fn complete_cancelled(
    db: &Db,
    id: &str,
    token: u64,
    reason: Option<&str>,
    keep: i64,
    recmax: i64,
) -> Result<Settled> {
    let group = match fence(db, id, token)? {
        Ok(g) => g,
        Err(refused) => return Ok(refused),
    };
    if !db.zrem("active", id)? {
        return Ok(Settled::Stale);
    }
    finish(db, id, "cancelled", keep, reason.map(Field::LastError))?;
    if let Some(g) = group {
        leave_lane(db, &g)?;
    }
    db.count("cancelled", 1)?;
    db.record(
        recmax,
        id,
        "cancelled",
        &token.to_string(),
        "error",
        reason.map(str::as_bytes),
    )?;
    Ok(Settled::Ok)
}
