//! The twin of `scripts/history.lua`: jobs completed and dead-lettered per minute, from the
//! minute counts the counting verbs keep ([`super::db::Db::count`]).

use super::db::Db;
use crate::error::Result;
use crate::store::History;

pub(crate) fn history(db: &Db, minutes: u32) -> Result<History> {
    let first = db.now().div_euclid(60_000) - i64::from(minutes) + 1;
    let series = |event: &str| -> Result<Vec<u64>> {
        (0..i64::from(minutes))
            .map(|i| {
                Ok(db
                    .kv_get(&format!("metrics:{event}:m{}", first + i))?
                    .unwrap_or(0)
                    .max(0) as u64)
            })
            .collect()
    };
    Ok(History {
        first_minute: first.max(0) as u64,
        completed: series("completed")?,
        failed: series("failed")?,
    })
}
