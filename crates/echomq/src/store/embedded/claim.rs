//! The twin of `scripts/claim.lua`: up to n jobs off the ring under a lease. Pop the head member; if
//! eligible take one job from it and push it back at the tail while still eligible, else clear its
//! flag. A paused or obliterating queue claims nothing. The max-attempts guard, claim-time cancels
//! and malformed rows as the script.

use super::common::{bury, finish, lane, lua_number, slots};
use super::db::{Db, Field, Row};
use crate::error::Result;
use crate::job::ClaimedJob;
use crate::keyspace::{GroupName, JobId};
use crate::store::BATCH_BYTES_MAX;

struct Claim<'a, 'b> {
    db: &'a Db<'b>,
    deadline: i64,
    maxdef: i64,
    keep: i64,
    recmax: i64,
    out: Vec<ClaimedJob>,
    /// The payload bytes handed out so far.
    bytes: usize,
    failed: i64,
    cancelled: i64,
}

impl Claim<'_, '_> {
    /// One popped lane job: hand it out, or settle it here. True when handed out.
    fn take(&mut self, id: &str, g: Option<&str>) -> Result<bool> {
        let row = self.db.claim_row(id)?;
        self.take_row(id, g, row, false)
    }

    /// One job and its row (`None`: no row): hand it out, or settle it here. A job read at the head
    /// of `pending` (`popped`) leaves it here: in the claim's one update when handed out, else
    /// before it is settled or dropped. True when handed out.
    fn take_row(&mut self, id: &str, g: Option<&str>, row: Option<Row>, popped: bool) -> Result<bool> {
        let db = self.db;
        let Some(row) = row else {
            // a missing row: dropped
            if popped {
                db.zrem("pending", id)?;
            }
            return Ok(false);
        };
        let att = whole(row.attempts.as_deref(), 0, 0);
        let maxa = whole(row.max_attempts.as_deref(), self.maxdef, 1);
        let mut defect = match (&row.data, row.state.as_deref(), att, maxa) {
            (None, ..) => Some("malformed row: no data".to_string()),
            (_, s, ..) if s != Some("pending") => {
                Some(format!("malformed row: state {} in a ready set", s.unwrap_or("nil")))
            }
            (_, _, None, _) => Some(format!(
                "malformed row: attempts {}",
                row.attempts.as_deref().unwrap_or("")
            )),
            (_, _, _, None) => Some(format!(
                "malformed row: max_attempts {}",
                row.max_attempts.clone().unwrap_or_else(|| self.maxdef.to_string())
            )),
            _ => None,
        };
        let attempts_text = row.attempts.clone().unwrap_or_else(|| "0".into());
        let (att, maxa) = (att.unwrap_or(0), maxa.unwrap_or(self.maxdef));
        let cancel = if defect.is_none() { row.cancel.as_deref() } else { None };
        if defect.is_none() && cancel.is_none() && att >= maxa {
            defect = Some("lease expired on the last attempt".into());
        }
        if defect.is_none() && cancel.is_none() {
            // handed out: active under the lease, out of pending, in one update
            db.set_active(id, att + 1, self.deadline)?;
            let payload = row.data.unwrap_or_default();
            self.bytes += payload.len();
            self.out.push(ClaimedJob {
                id: JobId::from_store(id.to_string()),
                payload,
                attempts: (att + 1) as u64,
                group: g.and_then(|g| GroupName::new(g).ok()),
            });
            return Ok(true);
        }
        // settled here, out of pending first
        if popped {
            db.zrem("pending", id)?;
        }
        if let Some(reason) = cancel {
            finish(db, id, "cancelled", self.keep, Some(Field::LastError(reason)))?;
            db.record(
                self.recmax,
                id,
                "cancelled",
                &attempts_text,
                "error",
                Some(reason.as_bytes()),
            )?;
            self.cancelled += 1;
        } else if let Some(defect) = defect {
            bury(db, id, &defect)?;
            db.record(
                self.recmax,
                id,
                "dead",
                &attempts_text,
                "error",
                Some(defect.as_bytes()),
            )?;
            self.failed += 1;
        }
        Ok(false)
    }
}

pub(crate) fn claim(
    db: &Db,
    n: i64,
    lease_ms: i64,
    max_attempts: i64,
    keep: i64,
    recmax: i64,
) -> Result<Vec<ClaimedJob>> {
    if db.exists_flag("paused")? || db.exists_flag("obliterating")? {
        return Ok(Vec::new());
    }
    let ring_len = db.llen("ring")?;
    if ring_len == 0 {
        return Ok(Vec::new());
    }
    let mut c = Claim {
        db,
        deadline: db.now() + lease_ms,
        maxdef: max_attempts,
        keep,
        recmax,
        out: Vec::new(),
        bytes: 0,
        failed: 0,
        cancelled: 0,
    };
    let mut got = 0;
    let mut budget = n + ring_len + 1000;
    // no job taken once the payloads handed out reach the byte bound (the script's ARGV[7])
    let full = |c: &Claim| c.bytes >= BATCH_BYTES_MAX;
    while got < n && !full(&c) && budget > 0 {
        budget -= 1;
        let Some(m) = db.lpop("ring")? else { break };
        if m == "~" {
            let want = if db.lnonempty("ring")? { 1 } else { n - got };
            // the head of pending with the rows, read in one go; each leaves pending as it is
            // taken, until the bytes run out
            for (id, row) in db.pending_head(want)? {
                if full(&c) {
                    break;
                }
                if c.take_row(&id, None, row, true)? {
                    got += 1;
                }
            }
            if db.znonempty("pending")? {
                db.rpush("ring", "~")?;
            } else {
                db.gdel("r:~")?;
            }
        } else {
            let (mut a, limit) = slots(db, &m)?;
            let lane = lane(&m);
            if a < limit {
                if let Some(id) = db.lpop(&lane)? {
                    if c.take(&id, Some(&m))? {
                        got += 1;
                        a += 1;
                        db.gset(&format!("a:{m}"), &a.to_string())?;
                    }
                }
            }
            if a < limit && db.lnonempty(&lane)? {
                db.rpush("ring", &m)?;
            } else {
                db.gdel(&format!("r:{m}"))?;
            }
        }
    }
    db.count("failed", c.failed)?;
    db.count("cancelled", c.cancelled)?;
    Ok(c.out)
}

/// A row's count as the script's `emq_whole` takes it: absent is `default`; else a number that is
/// whole, at least `least` and under 2^53 (NaN, the infinities, fractions and negatives are not).
fn whole(v: Option<&str>, default: i64, least: i64) -> Option<i64> {
    let Some(s) = v else {
        return Some(default);
    };
    let n = lua_number(s)?;
    (n >= least as f64 && n < 9_007_199_254_740_992.0 && n.fract() == 0.0).then_some(n as i64)
}
