//! The twin of scripts/cancel.lua: an operator (or any process) cancels a job. Waiting (pending, in
//! a lane, scheduled): it is cancelled now (its row kept under the queue's retention, or deleted; metrics cancelled;
//! a waited job announced). Running:
//! the request goes on the row's `cancel` field (its durable copy: a claim of a row carrying it
//! cancels instead of handing out) and is published to the queue's consumers as a row of
//! `emq_cancels` (the twin of the pub/sub channel, durable: consumers of other processes read it
//! within a poll). Dead, completed or cancelled: finished.

use rusqlite::params;

use super::common;
use super::db::{Db, Field};
use crate::error::Result;
use crate::keyspace::JobId;
use crate::store::{CancelRequest, Cancelled};

/// The most requests one read of [`requests_after`] returns (the stream reads again at once).
const REQUESTS_MAX: i64 = 1000;

pub(crate) fn cancel(db: &Db, id: &str, reason: Option<&str>, recmax: i64) -> Result<Cancelled> {
    let Some(row) = db.row(id)? else {
        return Ok(Cancelled::Gone);
    };
    let Some(state) = row.state.as_deref() else {
        return Ok(Cancelled::Gone);
    };
    if state == "active" {
        db.hset(id, &[Field::Cancel(reason.unwrap_or(""))])?;
        db.publish_cancel(id, reason)?;
        return Ok(Cancelled::Requested);
    }
    if state != "pending" && state != "scheduled" {
        return Ok(Cancelled::Finished);
    }
    let kept = common::retention_read(db, "cancelled", 1)?;
    common::unwait(db, id, state, row.group.as_deref())?;
    common::expire(db, &kept)?;
    common::finish(db, id, "cancelled", &kept, reason.map(Field::LastError))?;
    db.count("cancelled", 1)?;
    db.record(
        recmax,
        id,
        "cancelled",
        &common::used(row.attempts.as_deref(), row.free.as_deref()).to_string(),
        "error",
        reason.map(str::as_bytes),
    )?;
    db.notify(row.waited.as_deref(), id);
    Ok(Cancelled::Cancelled)
}

/// The newest cancel request's sequence (0 when none): a stream starts after it.
pub(crate) fn last_request(db: &Db) -> Result<i64> {
    db.sql()
        .prepare_cached("SELECT coalesce(max(seq), 0) FROM emq_cancels WHERE queue = ?1")
        .and_then(|mut s| s.query_row(params![db.queue()], |r| r.get(0)))
        .map_err(|e| db.err(e))
}

/// The queue's cancel requests after `seq`, oldest first, with their sequences. An empty reason
/// reads as none, as the Redis store reads its channel's message; an id that is not a valid job id
/// (a row written by hand) is skipped.
pub(crate) fn requests_after(db: &Db, seq: i64) -> Result<Vec<(i64, CancelRequest)>> {
    let mut stmt = db
        .sql()
        .prepare_cached("SELECT seq, id, reason FROM emq_cancels WHERE queue = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3")
        .map_err(|e| db.err(e))?;
    let rows = stmt
        .query_map(params![db.queue(), seq, REQUESTS_MAX], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, String>(1)?,
                r.get::<_, Option<String>>(2)?,
            ))
        })
        .map_err(|e| db.err(e))?;
    let mut out = Vec::new();
    for row in rows {
        let (seq, id, reason) = row.map_err(|e| db.err(e))?;
        if let Ok(id) = JobId::parse(id) {
            out.push((
                seq,
                CancelRequest {
                    id,
                    reason: reason.filter(|r| !r.is_empty()),
                },
            ));
        }
    }
    Ok(out)
}
