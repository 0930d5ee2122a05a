//! The twin of scripts/list.lua: a page of up to `limit` ids in one state, after the job the page
//! before ended on (its score and id), each page one range read of an index however deep it is.
//! Scheduled by due time; active by lease deadline; dead, completed and cancelled newest first;
//! pending the flat set in claim order, then every lane (`lane:<g>`) in group name order, each in
//! claim order — one range of the sets' order index, the lanes' names being adjacent in it (the
//! script walks the groups hash in chunks; here the lanes are one chunk, `0`). Each part is read one
//! id past the page: a page has a next page only when that id exists.

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
    let mut page = Page::new(state, limit);
    page.take(after_in(db, set, rev, job_at(&after), limit + 1)?, |score, id| {
        After::Job { score, id }
    });
    Ok(page.done())
}

/// The position of a job in a set, when the cursor names one.
fn job_at(after: &After) -> Option<(i64, &str)> {
    match after {
        After::Job { score, id } => Some((*score, id.as_str())),
        _ => None,
    }
}

/// Waiting jobs: the flat set, then the lanes.
fn pending(db: &Db, after: After, limit: i64) -> Result<JobsPage> {
    let mut page = Page::new(JobState::Pending, limit);
    let lane_at = match after {
        After::Lanes { at, .. } => at,
        at => {
            let flat = after_in(db, "pending", false, job_at(&at), limit + 1)?;
            if page.take(flat, |score, id| After::Job { score, id }) {
                return Ok(page.done());
            }
            None
        }
    };
    let lanes = lanes_after(db, lane_at, limit - page.ids.len() as i64 + 1)?;
    for (group, id, score) in lanes {
        let at = |score, id| After::Lanes {
            chunk: "0".to_string(),
            at: Some((group.clone(), score, id)),
        };
        if page.take(vec![(id, score)], at) {
            break;
        }
    }
    Ok(page.done())
}

/// A page being filled, each part read one id past what it still takes (the twin of the script's
/// `take`): an id read past the page says a next page has some, which starts after the page's last.
struct Page {
    state: JobState,
    limit: usize,
    ids: Vec<JobId>,
    last: Option<After>,
    more: bool,
}

impl Page {
    fn new(state: JobState, limit: i64) -> Self {
        Page {
            state,
            limit: limit.max(0) as usize,
            ids: Vec::new(),
            last: None,
            more: false,
        }
    }

    /// Takes (id, score) pairs, each at the position `at` names; true once an id was read past
    /// the page.
    fn take(&mut self, pairs: Vec<(String, i64)>, at: impl Fn(i64, String) -> After) -> bool {
        for (id, score) in pairs {
            if self.ids.len() == self.limit {
                self.more = true;
                return true;
            }
            self.last = Some(at(score, id.clone()));
            self.ids.push(JobId::from_store(id));
        }
        false
    }

    fn done(self) -> JobsPage {
        let next = match (self.more, self.last) {
            (true, Some(last)) => last.text(self.state),
            _ => None,
        };
        JobsPage { ids: self.ids, next }
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
