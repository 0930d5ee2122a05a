//! The twin of `scripts/complete_cancelled.lua`: the `cancel(reason)` verdict, fenced like complete,
//! ending in cancelled (deleted, or retained with the reason as last_error).

use super::common::settle_finished;
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
    settle_finished(db, id, token, "cancelled", (keep, recmax), reason.map(Field::LastError))
}
