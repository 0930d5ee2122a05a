//! The twin of `scripts/complete.lua`: fenced by the attempts token; the row deleted (or retained as
//! completed); a lane job frees its slot (ring step, a wake when that put its group back on the ring).

use super::common::{fence, finish, leave_lane};
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
    let group = match fence(db, id, token)? {
        Ok(g) => g,
        Err(refused) => return Ok(refused),
    };
    // the membership test is the ZREM the settle needs anyway
    if !db.zrem("active", id)? {
        return Ok(Settled::Stale);
    }
    finish(db, id, "completed", keep, output.map(Field::Output))?;
    if let Some(g) = group {
        leave_lane(db, &g)?;
    }
    db.count("completed", 1)?;
    db.record(recmax, id, "completed", &token.to_string(), "output", output)?;
    Ok(Settled::Ok)
}
