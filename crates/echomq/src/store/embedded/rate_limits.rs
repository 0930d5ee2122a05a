//! The twin of `scripts/rate_limits.lua`: the queue's rate limits and their state, as the claim
//! reads them.

use super::db::Db;
use super::rate::Rate;
use crate::error::Result;
use crate::rate::{RateLimits, RateParts};

pub(crate) fn rate_limits(db: &Db) -> Result<RateLimits> {
    let now_us = db.now_us();
    let wait_of = |spec: &str, tat: Option<i64>| {
        Rate::read(Some(spec), tat, now_us).map_or(0, |r| (r.next() - now_us as f64).ceil().max(0.0) as u64)
    };
    let queue = db.gget("rate")?.unwrap_or_default();
    let queue_wait_us = if queue.is_empty() {
        0
    } else {
        wait_of(&queue, db.kv_get("tat")?)
    };
    let first_wait_us = db.zfirst("throttled")?.map_or(0, |(_, at)| (at - now_us).max(0) as u64);
    let mut groups = Vec::new();
    for (f, spec) in db.gprefixed("rate:")? {
        let Some(g) = f.strip_prefix("rate:").filter(|g| *g != "~") else {
            continue;
        };
        let wait = wait_of(&spec, db.zscore("tats", g)?);
        groups.push((g.to_string(), spec, wait));
    }
    RateParts {
        queue,
        queue_wait_us,
        group_default: db.gget("rate:~")?.unwrap_or_default(),
        throttled: db.zcard("throttled")? as u64,
        first_wait_us,
        groups,
    }
    .read("rate_limits")
}
