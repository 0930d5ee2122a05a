//! The twin of `scripts/complete.lua`: fenced by the attempts token; the row deleted (or retained as
//! completed); a lane job frees its slot (ring step, a wake when that put its group back on the ring).

use super::common::settle_finished;
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::Settled;

pub(crate) fn complete(
    db: &Db,
    id: &str,
    token: u64,
    output: Option<&[u8]>,
    keep: i64,
    recmax: i64,
) -> Result<Settled> {
    settle_finished(db, id, token, "completed", (keep, recmax), output.map(Field::Output))
}
