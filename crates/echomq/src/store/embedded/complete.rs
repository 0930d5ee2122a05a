//! The twin of `scripts/complete.lua`: fenced by the attempts token; the row kept as completed under the
//! queue's retention (or deleted); a lane job frees its slot (ring step, a wake when that put its group back on the ring).

use super::common::{settle_finished, Finishing};
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::Settled;

pub(crate) fn complete(db: &Db, id: &str, token: u64, output: Option<&[u8]>, recmax: i64) -> Result<Settled> {
    let entry = Finishing {
        id,
        token,
        value: output.map(Field::Output),
    };
    let reply = settle_finished(db, &[entry], "completed", recmax)?;
    Ok(reply.first().copied().unwrap_or(Settled::Gone))
}
