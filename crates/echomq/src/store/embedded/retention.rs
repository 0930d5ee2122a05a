//! The twin of `scripts/retention.lua`: a queue's retention as the finishing twins read it, each
//! field absent at its default.

use super::common::retention_of;
use super::db::Db;
use crate::error::Result;
use crate::store::Retention;

pub(crate) fn retention(db: &Db) -> Result<Retention> {
    retention_of(db)
}
