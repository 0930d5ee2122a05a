//! The twin of `scripts/pause.lua`: claims give nothing until resume; jobs keep arriving and waiting.

use super::db::Db;
use crate::error::Result;

pub(crate) fn pause(db: &Db) -> Result<()> {
    db.kv_set("paused", 1)
}
