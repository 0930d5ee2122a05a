//! The twin of `scripts/set_retention.lua`: what a queue keeps of its finished jobs, as the kv
//! keys of [`RETENTION_KEYS`] (the fields of `emq:{q}:retention`), read by every twin that
//! finishes a job.

use super::common::RETENTION_KEYS;
use super::db::Db;
use crate::error::Result;

pub(crate) fn set_retention(db: &Db, keep: i64, age_ms: i64, cap: i64) -> Result<()> {
    let [k, a, c] = RETENTION_KEYS;
    db.kv_set(k, keep)?;
    db.kv_set(a, age_ms)?;
    db.kv_set(c, cap)
}
