//! The twin of scripts/get.lua: one job's row, and its score in the set its state names (lease
//! deadline while active, time of death while dead, due time while scheduled, finished_at while
//! kept), parsed as the Redis store parses the script's reply.

use super::db::Db;
use crate::error::{Error, Result};
use crate::job::{JobRow, JobState};
use crate::keyspace::{GroupName, JobId};

pub(crate) fn get(db: &Db, id: &JobId) -> Result<Option<JobRow>> {
    let Some(row) = db.row(id.as_str())? else {
        return Ok(None);
    };
    let set = match row.state.as_deref() {
        Some("active") => Some("active"),
        Some("scheduled") => Some("scheduled"),
        Some("dead") => Some("dead"),
        Some("completed") => Some("completed"),
        Some("cancelled") => Some("cancelled"),
        _ => None,
    };
    let score = match set {
        Some(z) => db.zscore(z, id.as_str())?.map(|s| s.max(0) as u64),
        None => None,
    };
    let bad = |field: &str| Error::Protocol {
        verb: "get",
        reply: format!("malformed field {field} in the row of job {id}"),
    };
    let int = |field: &str, v: &str| v.parse::<u64>().map_err(|_| bad(field));
    let state = match row.state.as_deref() {
        Some(s) => JobState::parse(s).ok_or_else(|| bad("state"))?,
        None => JobState::Pending,
    };
    let count = |field: &str, v: Option<&str>| v.map(|v| int(field, v)).transpose().map(Option::unwrap_or_default);
    let attempts = count("attempts", row.attempts.as_deref())?;
    let free = count("free", row.free.as_deref())?;
    Ok(Some(JobRow {
        id: id.clone(),
        state,
        payload: row.data.unwrap_or_default(),
        // the attempts it has used: its claims less those that used none
        attempts: attempts.saturating_sub(free),
        free,
        max_attempts: row
            .max_attempts
            .as_deref()
            .map(|v| int("max_attempts", v))
            .transpose()?,
        group: row.group.map(GroupName::new).transpose()?,
        kind: row.kind,
        priority: row
            .priority
            .as_deref()
            .map(|v| v.parse::<u8>().map_err(|_| bad("priority")))
            .transpose()?
            .unwrap_or(0),
        retry: row.retry,
        run_at: row.run_at.as_deref().map(|v| int("run_at", v)).transpose()?,
        stalled: row
            .stalled
            .as_deref()
            .map(|v| int("stalled", v))
            .transpose()?
            .unwrap_or(0),
        last_error: row.last_error,
        cancel: row.cancel,
        output: row.output,
        output_dropped: row
            .output_dropped
            .as_deref()
            .map(|v| int("output_dropped", v))
            .transpose()?,
        finished_at: row.finished_at.as_deref().map(|v| int("finished_at", v)).transpose()?,
        score,
    }))
}
