//! The twin of `scripts/update_data.lua`: the checkpoint — the holder replaces the row's payload, so
//! a redelivery resumes from it. Fenced like a settle: Ok / Stale / Gone.

use super::common::fence;
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::Settled;

pub(crate) fn update_data(db: &Db, id: &str, token: u64, payload: &[u8]) -> Result<Settled> {
    if let Err(refused) = fence(db, id, token)? {
        return Ok(refused);
    }
    if db.zscore("active", id)?.is_none() {
        return Ok(Settled::Stale);
    }
    db.hset(id, &[Field::Data(payload)])?;
    Ok(Settled::Ok)
}
