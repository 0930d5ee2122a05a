//! The twin of `scripts/retry.lua`: fenced; the holder hands the job back after a failure. At its
//! budget (the attempts it has used, attempts − free, reaching its own max_attempts, else the
//! default) it goes dead (metrics failed); else it waits in `scheduled` until now + delay (delay 0:
//! ready at once), the error as last_error (metrics retried). A lane job frees its slot either way.
//! Reads first, as the script: the row, its group or the flat set, then the writes.

use rusqlite::{params, OptionalExtension};

use super::common::{
    bury, fence_held, flat_read, flat_step, lane_leave, lane_read, lua_number, paused_read, ready, wake, Count,
};
use super::db::{text, Db, Field};
use crate::error::{Error, Result};
use crate::store::{Retried, Settled};

pub(crate) fn retry(
    db: &Db,
    id: &str,
    token: u64,
    delay_ms: i64,
    max_attempts: i64,
    error: &str,
    recmax: i64,
) -> Result<Retried> {
    if delay_ms < 0 || max_attempts < 1 {
        return Err(Error::Store {
            verb: "retry",
            reason: "retry: delay, max_attempts or record".into(),
        });
    }
    let held = match fence_held(db, id, token)? {
        Ok(held) => held,
        Err(Settled::Gone) => return Ok(Retried::Gone),
        Err(_) => return Ok(Retried::Stale),
    };
    let g = held.group.as_deref();
    // tonumber(HGET max_attempts or default) or default
    let (maxa, priority) = hget_max_attempts(db, id)?;
    let maxa = maxa.and_then(|m| lua_number(&m)).unwrap_or(max_attempts as f64);
    let dead = held.used as f64 >= maxa;
    let mut lane = match g {
        Some(g) => Some(lane_read(db, g, Count::Any)?),
        None => None,
    };
    let mut flat = match g {
        None if !dead && delay_ms <= 0 => Some(flat_read(db)?),
        _ => None,
    };
    let paused = paused_read(db)?;
    let mut order = match dead || delay_ms > 0 {
        true => None,
        false => Some(super::common::Order::read(db)?),
    };
    if !db.zrem("active", id)? {
        return Ok(Retried::Stale);
    }
    let now = db.now();
    let mut wakes = 0;
    let reply = if dead {
        bury(db, id, error)?;
        db.count("failed", 1)?;
        db.record(
            recmax,
            id,
            "dead",
            &held.used.to_string(),
            "error",
            Some(error.as_bytes()),
        )?;
        db.notify(held.waited.as_deref(), id);
        Retried::Dead
    } else {
        db.hset(id, &[Field::LastError(error)])?;
        if delay_ms > 0 {
            db.hset(id, &[Field::State("scheduled"), Field::RunAt(now + delay_ms)])?;
            db.zadd("scheduled", now + delay_ms, id)?;
        } else if let (Some(s), Some(o)) = (lane.as_mut(), order.as_mut()) {
            ready(db, id, g, &mut s.len, o, priority.as_deref())?;
            o.write(db)?;
        } else if let (Some(s), Some(o)) = (flat.as_mut(), order.as_mut()) {
            ready(db, id, None, &mut s.len, o, priority.as_deref())?;
            o.write(db)?;
            flat_step(db, s)?;
            wakes = 1;
        }
        db.count("retried", 1)?;
        Retried::Retrying
    };
    // after the job is back in its lane, so the ring step sees it
    if let (Some(g), Some(s)) = (g, lane.as_mut()) {
        wakes += lane_leave(db, g, s)?;
    }
    wake(db, wakes, paused)?;
    Ok(reply)
}

/// HGET job:<id> max_attempts — without reading the payload.
/// HMGET max_attempts priority.
fn hget_max_attempts(db: &Db, id: &str) -> Result<(Option<String>, Option<String>)> {
    db.sql()
        .prepare_cached("SELECT max_attempts, priority FROM emq_jobs WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| Ok((text(r, 0)?, text(r, 1)?)))
                .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
