//! The twin of `scripts/complete_cancelled.lua`: fenced like complete, ending in cancelled (the row
//! kept under the queue's retention with the reason as last_error, or deleted); a lane job frees its slot.

use super::common::{settle_finished, Finishing};
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::Settled;

pub(crate) fn complete_cancelled(db: &Db, id: &str, token: u64, reason: Option<&str>, recmax: i64) -> Result<Settled> {
    let entry = Finishing {
        id,
        token,
        value: reason.map(Field::LastError),
    };
    let reply = settle_finished(db, &[entry], "cancelled", recmax)?;
    Ok(reply.first().copied().unwrap_or(Settled::Gone))
}
