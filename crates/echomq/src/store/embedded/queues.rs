//! The twin of scripts/queues.lua: every registered queue name (the enqueue twins register a queue,
//! the last chunk of obliterate unregisters it). The one table outside any queue: `db.queue()` is
//! not used. Names that are not valid queue names (a row written by hand) are skipped, as the Redis
//! store skips foreign members; sorted as the Redis store sorts.

use super::db::Db;
use crate::error::Result;
use crate::keyspace::QueueName;

pub(crate) fn queues(db: &Db) -> Result<Vec<QueueName>> {
    let mut stmt = db
        .sql()
        .prepare_cached("SELECT queue FROM emq_queues ORDER BY queue")
        .map_err(|e| db.err(e))?;
    let rows = stmt.query_map([], |r| r.get::<_, String>(0)).map_err(|e| db.err(e))?;
    let mut names = Vec::new();
    for name in rows {
        if let Ok(q) = QueueName::new(name.map_err(|e| db.err(e))?) {
            names.push(q);
        }
    }
    names.sort();
    Ok(names)
}
