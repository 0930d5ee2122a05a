//! The twin of `scripts/set_rate_limit.lua`: a rate limit in the groups hash (`rate`, `rate:~`,
//! `rate:<g>`; none removes it), started afresh (its TAT dropped: the kv `tat`, the group's in
//! `tats`, for the default every group's), the groups it held back in `throttled` back on the
//! ring's tail (r: flags kept), and a wake per group (the queue's: per ring member), at most 16.

use super::common::{paused_read, wake};
use super::db::Db;
use super::rate::Rate;
use crate::error::{Error, Result};

pub(crate) fn set_rate_limit(db: &Db, target: &str, group: &str, spec: &str) -> Result<()> {
    if !spec.is_empty() && Rate::read(Some(spec), None, 0).is_none() {
        return Err(Error::InvalidOption {
            field: "rate_limit",
            value: spec.to_string(),
            reason: "not a limit the store keeps",
        });
    }
    let field = match target {
        "queue" => "rate".to_string(),
        "default" => "rate:~".to_string(),
        _ => format!("rate:{group}"),
    };
    let paused = paused_read(db)?;
    let back = match target {
        "default" => db.zrange("throttled", 0, -1, false)?,
        "group" if db.zscore("throttled", group)?.is_some() => vec![group.to_string()],
        _ => Vec::new(),
    };
    let ringed = db.llen("ring")?;

    if spec.is_empty() {
        db.gdel(&field)?;
    } else {
        db.gset(&field, spec)?;
    }
    match target {
        "queue" => {
            db.kv_del("tat")?;
        }
        "default" => {
            db.zrem_upto("tats", i64::MAX)?;
            db.zrem_upto("throttled", i64::MAX)?;
        }
        _ => {
            db.zrem("tats", group)?;
            db.zrem("throttled", group)?;
        }
    }
    for g in &back {
        db.rpush("ring", g)?;
    }
    let n = if target == "queue" { ringed } else { back.len() as i64 };
    wake(db, n, paused)
}
