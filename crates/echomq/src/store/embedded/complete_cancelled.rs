//! The twin of `scripts/complete_cancelled.lua`: the `cancel(reason)` verdict, fenced like complete,
//! ending in cancelled (deleted, or retained with the reason as last_error).

use super::common::{fence, settle_finished};
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
    match fence(db, id, token)? {
        Ok(group) => settle_finished(
            db,
            id,
            token,
            group,
            "cancelled",
            (keep, recmax),
            reason.map(Field::LastError),
        ),
        Err(refused) => Ok(refused),
    }
}
