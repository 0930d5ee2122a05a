//! The twin of `scripts/set_priority_aging.lua`: the queue's priority aging, the kv key `aging`
//! (the field of `emq:{q}:order`) that every twin making a job ready reads.

use super::db::Db;
use crate::error::Result;

pub(crate) fn set_priority_aging(db: &Db, aging_ms: i64) -> Result<()> {
    db.kv_set("aging", aging_ms)
}
