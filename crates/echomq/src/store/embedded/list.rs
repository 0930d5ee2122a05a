//! The twin of scripts/list.lua: a page of up to `limit` ids in one state, after the job the page
//! before ended on (its score and id), each page one range read of an index however deep it is.
//! Scheduled by due time; active by lease deadline; dead, completed and cancelled newest first;
//! pending the flat set in claim order, then every lane (`lane:<g>`) in group name order, each in
//! claim order — one range of the sets' order index, the lanes' names being adjacent in it (the
//! script walks the groups hash in chunks; here the lanes are one chunk, `0`).

use rusqlite::params;

use super::db::Db;
use crate::error::Result;
use crate::job::JobState;
use crate::keyspace::JobId;
use crate::store::{After, JobsPage};

/// The first name past every lane's (`lane:` … `lane;`, `;` following `:`).
const LANES_END: &str = "lane;";

pub(crate) fn list(db: &Db, state: JobState, after: After, limit: i64) -> Result<JobsPage> {
    let (set, rev) = match state {
        JobState::Scheduled => ("scheduled", false),
        JobState::Active => ("active", false),
        JobState::Dead => ("dead", true),
        JobState::Completed => ("completed", true),
        JobState::Cancelled => ("cancelled", true),
        JobState::Pending => return pending(db, after, limit),
    };
    let at = match &after {
        After::Job { score, id } => Some((*score, id.as_str())),
        _ => None,
    };
    let page = after_in(db, set, rev, at, limit)?;
    Ok(page_of(state, page, limit, |score, id| After::Job { score, id }))
}

/// Waiting jobs: the flat set, then the lanes.
fn pending(db: &Db, after: After, limit: i64) -> Result<JobsPage> {
    let mut ids = Vec::new();
    let lane_at = match after {
        After::Lanes { at, .. } => at,
        at => {
            let at = match &at {
                After::Job { score, id } => Some((*score, id.as_str())),
                _ => None,
            };
            let page = after_in(db, "pending", false, at, limit)?;
            if page.len() as i64 >= limit {
                return Ok(page_of(JobState::Pending, page, limit, |score, id| After::Job {
                    score,
                    id,
                }));
            }
            ids.extend(page.into_iter().map(|(id, _)| JobId::from_store(id)));
            None
        }
    };
    let want = limit - ids.len() as i64;
    let lanes = lanes_after(db, lane_at, want)?;
    let next = match lanes.last() {
        Some((lane, id, score)) if lanes.len() as i64 >= want => Some(After::Lanes {
            chunk: "0".to_string(),
            at: Some((lane.clone(), *score, id.clone())),
        }),
        _ => None,
    };
    ids.extend(lanes.into_iter().map(|(_, id, _)| JobId::from_store(id)));
    Ok(JobsPage {
        ids,
        next: next.and_then(|n| n.text(JobState::Pending)),
    })
}

/// A page of (id, score) pairs, with the next page's start when it is full.
fn page_of(state: JobState, page: Vec<(String, i64)>, limit: i64, at: impl Fn(i64, String) -> After) -> JobsPage {
    let next = match page.last() {
        Some((id, score)) if page.len() as i64 >= limit => at(*score, id.clone()).text(state),
        _ => None,
    };
    JobsPage {
        ids: page.into_iter().map(|(id, _)| JobId::from_store(id)).collect(),
        next,
    }
}

/// Up to `limit` (id, score) pairs of a sorted set after the member at `at` (the first when
/// `None`), in its order (`rev`: highest first).
fn after_in(db: &Db, set: &str, rev: bool, at: Option<(i64, &str)>, limit: i64) -> Result<Vec<(String, i64)>> {
    // `active` and `pending` are columns of the rows, each with its partial index
    let sql = match (set, rev, at.is_some()) {
        ("active", _, false) => {
            "SELECT id, lease FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL ORDER BY lease, id LIMIT ?2"
        }
        ("active", _, true) => {
            "SELECT id, lease FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL AND (lease, id) > (?3, ?4) \
             ORDER BY lease, id LIMIT ?2"
        }
        ("pending", _, false) => {
            "SELECT id, pending FROM emq_jobs WHERE queue = ?1 AND pending IS NOT NULL ORDER BY pending, id LIMIT ?2"
        }
        ("pending", _, true) => {
            "SELECT id, pending FROM emq_jobs WHERE queue = ?1 AND pending IS NOT NULL AND (pending, id) > (?3, ?4) \
             ORDER BY pending, id LIMIT ?2"
        }
        (_, false, false) => {
            "SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?5 ORDER BY score, member LIMIT ?2"
        }
        (_, false, true) => {
            "SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?5 AND (score, member) > (?3, ?4) \
             ORDER BY score, member LIMIT ?2"
        }
        (_, true, false) => {
            "SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?5 \
             ORDER BY score DESC, member DESC LIMIT ?2"
        }
        (_, true, true) => {
            "SELECT member, score FROM emq_zsets WHERE queue = ?1 AND zset = ?5 AND (score, member) < (?3, ?4) \
             ORDER BY score DESC, member DESC LIMIT ?2"
        }
    };
    let (score, id) = at.unwrap_or((0, ""));
    let mut stmt = db.sql().prepare_cached(sql).map_err(|e| db.err(e))?;
    // ?5 is bound only where the statement names it
    fn pair(r: &rusqlite::Row<'_>) -> rusqlite::Result<(String, i64)> {
        Ok((r.get(0)?, r.get(1)?))
    }
    let rows = if set == "active" || set == "pending" {
        if at.is_some() {
            stmt.query_map(params![db.queue(), limit, score, id], pair)
        } else {
            stmt.query_map(params![db.queue(), limit], pair)
        }
    } else if at.is_some() {
        stmt.query_map(params![db.queue(), limit, score, id, set], pair)
    } else {
        stmt.query_map(params![db.queue(), limit, None::<i64>, None::<&str>, set], pair)
    }
    .map_err(|e| db.err(e))?;
    rows.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| db.err(e))
}

/// Up to `limit` (group, id, score) of the lanes, by group name then claim order, after the job
/// at `at` (group, score, id) — from the first lane when `None`.
fn lanes_after(db: &Db, at: Option<(String, i64, String)>, limit: i64) -> Result<Vec<(String, String, i64)>> {
    let mut stmt = db
        .sql()
        .prepare_cached(
            "SELECT zset, member, score FROM emq_zsets WHERE queue = ?1 AND (zset, score, member) > (?2, ?3, ?4) \
             AND zset < ?5 ORDER BY zset, score, member LIMIT ?6",
        )
        .map_err(|e| db.err(e))?;
    // the first lane's first job is after ('lane:', every score, '')
    let (lane, score, id) = match at {
        Some((g, score, id)) => (format!("lane:{g}"), score, id),
        None => ("lane:".to_string(), i64::MIN, String::new()),
    };
    let rows = stmt
        .query_map(params![db.queue(), lane, score, id, LANES_END, limit], |r| {
            let lane: String = r.get(0)?;
            Ok((
                lane.strip_prefix("lane:").unwrap_or(&lane).to_string(),
                r.get(1)?,
                r.get(2)?,
            ))
        })
        .map_err(|e| db.err(e))?;
    rows.collect::<std::result::Result<Vec<_>, _>>().map_err(|e| db.err(e))
}
