//! The twin of scripts/list.lua: up to `limit` ids in one state from `offset`. Pending = the flat
//! set in claim order, then each lane on the ring in ring order (at most the first 1000 members),
//! then the lanes of the groups a rate limit holds back, by admission (at most the first 1000),
//! then the lanes of groups off the ring — at their limit, their jobs wait all the same — by group
//! name; scheduled by due time; active by lease deadline; dead newest first; completed / cancelled
//! = retained rows newest first (filtered by state among at most 10,000 retained rows).

use std::collections::HashSet;

use rusqlite::params;

use super::common;
use super::db::Db;
use crate::error::Result;
use crate::job::JobState;
use crate::keyspace::JobId;

/// The ring members the pending walk looks at (LRANGE ring 0 999).
const RING_MAX: i64 = 1000;

/// The retained rows the completed / cancelled filter looks at (ZREVRANGE completed 0 9999).
const RETAINED_MAX: i64 = 10_000;

pub(crate) fn list(db: &Db, state: JobState, offset: i64, limit: i64) -> Result<Vec<JobId>> {
    let ids = match state {
        JobState::Scheduled => db.zrange("scheduled", offset, limit, false)?,
        JobState::Active => db.zrange("active", offset, limit, false)?,
        JobState::Dead => db.zrange("dead", offset, limit, true)?,
        JobState::Completed | JobState::Cancelled => retained(db, state.as_str(), offset, limit)?,
        JobState::Pending => pending(db, offset, limit)?,
    };
    Ok(ids.into_iter().map(JobId::from_store).collect())
}

/// The newest `RETAINED_MAX` members of `completed` whose row is in `state`, newest first.
fn retained(db: &Db, state: &str, offset: i64, limit: i64) -> Result<Vec<String>> {
    let mut stmt = db
        .sql()
        .prepare_cached(
            "SELECT z.member FROM \
               (SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = 'completed' \
                ORDER BY score DESC, member DESC LIMIT ?2) AS z \
             JOIN emq_jobs AS j ON j.queue = ?1 AND j.id = z.member \
             WHERE j.state = ?3 ORDER BY z.score DESC, z.member DESC LIMIT ?4 OFFSET ?5",
        )
        .map_err(|e| db.err(e))?;
    let rows = stmt
        .query_map(params![db.queue(), RETAINED_MAX, state, limit, offset], |r| {
            r.get::<_, String>(0)
        })
        .map_err(|e| db.err(e))?;
    rows.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| db.err(e))
}

fn pending(db: &Db, offset: i64, limit: i64) -> Result<Vec<String>> {
    let mut out = db.zrange("pending", offset, limit, false)?;
    let mut skip = (offset - db.zcard("pending")?).max(0);
    // the page continues through lane g (skipping what the offset still skips)
    let mut walk = |out: &mut Vec<String>, g: &str| -> Result<()> {
        let lane = common::lane(g);
        let len = db.zcard(&lane)?;
        if skip >= len {
            skip -= len;
        } else {
            out.extend(db.zrange(&lane, skip, limit - out.len() as i64, false)?);
            skip = 0;
        }
        Ok(())
    };
    for g in db.lrange("ring", 0, RING_MAX)? {
        if out.len() as i64 >= limit {
            return Ok(out);
        }
        if g != "~" {
            walk(&mut out, &g)?;
        }
    }
    for g in db.zrange("throttled", 0, RING_MAX, false)? {
        if out.len() as i64 >= limit {
            return Ok(out);
        }
        walk(&mut out, &g)?;
    }
    if out.len() as i64 >= limit {
        return Ok(out);
    }
    // groups off the ring holding a slot (a:<g> without r:<g>): a non-empty lane off the ring is
    // always one of these (a group leaves the ring with jobs waiting only at its limit)
    let fields = db.gfields()?;
    let on_ring: HashSet<&str> = fields.iter().filter_map(|f| f.strip_prefix("r:")).collect();
    let mut off: Vec<&str> = fields
        .iter()
        .filter_map(|f| f.strip_prefix("a:"))
        .filter(|g| !on_ring.contains(g))
        .collect();
    off.sort_unstable();
    off.dedup();
    for g in off {
        if out.len() as i64 >= limit {
            break;
        }
        walk(&mut out, g)?;
    }
    Ok(out)
}
