//! The twin of `scripts/claim.lua`, step by step: up to n jobs off the ring under a lease. The walk
//! is planned from reads alone — the ring, each member's fields, the heads of pending and of the
//! lanes, every row it takes — then written: pop the head member; if eligible take one job from it
//! and push it back at the tail while still eligible, else clear its flag. A paused or obliterating
//! queue claims nothing. The budget guard (attempts − free against max_attempts), claim-time
//! cancels and malformed rows as the script. Rate limits as the script: the queue's `rate` gates
//! every start (the walk stops while it admits none), a group's (`rate:<g>`, else `rate:~`) its
//! lane — a group it no longer admits moves to the zset `throttled` (its r: flag kept), and each
//! claim first takes the due ones from its head onto the walk's tail. TATs: the zset `tats` for
//! groups (members past are removed), the kv `tat` for the queue.

use std::collections::{HashMap, HashSet};

use super::common::{self, bury, expire, finish, lane, lua_number, retention_read, Kept};
use super::db::{Db, Field};
use super::rate::Rate;
use crate::error::Result;
use crate::job::ClaimedJob;
use crate::keyspace::{GroupName, JobId};
use crate::store::{Claimed, BATCH_BYTES_MAX};

/// A group's (active count, limit, own rate limit): its own limit, else the queue default l:~,
/// else 1 (the walk's HMGET a:<g> l:<g> l:~ rate:<g>).
fn slots(db: &Db, g: &str) -> Result<(i64, i64, Option<String>)> {
    let num = |v: Option<String>| v.and_then(|s| s.parse::<i64>().ok());
    let active = num(db.gget(&format!("a:{g}"))?).unwrap_or(0);
    let limit = match num(db.gget(&format!("l:{g}"))?) {
        Some(l) => l,
        None => num(db.gget("l:~")?).unwrap_or(1),
    };
    Ok((active, limit, db.gget(&format!("rate:{g}"))?))
}

/// One member met by the walk: its ready jobs (the head of pending or of its lane, read in pages
/// of ids, `taken` of them used, `size` in all) and, for a group, its active count and limit.
struct Member {
    /// The group; `None` for the flat set.
    group: Option<String>,
    size: i64,
    /// How far `size` was counted: a size that reached it may be short of the member's jobs.
    counted_to: i64,
    ids: Vec<String>,
    /// Each id's rank.
    ranks: Vec<i64>,
    taken: usize,
    a: i64,
    a0: i64,
    limit: i64,
    /// The group's rate limit (its own, else the default).
    rate: Option<Rate>,
}

/// A job settled by the claim instead of handed out, in the order met.
struct Settled {
    id: String,
    cancelled: bool,
    reason: String,
    /// The attempts it has used, as its record states them.
    attempt: String,
    /// Its waited mark.
    waited: Option<String>,
}

/// The walk: its reads so far and what it decided.
struct Walk<'a, 'b> {
    db: &'a Db<'b>,
    maxdef: i64,
    deadline: i64,
    ring_len: i64,
    /// The most pops the walk makes (n, the ring's length and the bad rows it may meet).
    cap: i64,
    /// How far a member's size is first counted: one job past the n a claim takes, so that a deep
    /// queue costs a claim no more than a shallow one (a count here is a walk over rows, not
    /// ZCARD's stored size); a walk that reaches it counts further, doubling.
    first_count: i64,
    ring: Vec<String>,
    popped: usize,
    back: Vec<String>,
    repopped: usize,
    members: HashMap<String, usize>,
    order: Vec<Member>,
    out: Vec<ClaimedJob>,
    settled: Vec<Settled>,
    /// Every id met, with its priority (an id in two ready sets, only by hand, is handed out once).
    met: HashMap<String, i64>,
    /// The pending tally of every job taken out of its set (a missing row counted at priority 0).
    left: common::Tally,
    bytes: usize,
    /// The queue's priority aging, read when a job of a priority above 0 is first handed out.
    aging: Option<i64>,
    now_us: i64,
    /// The groups' default rate limit.
    default_rate: Option<String>,
}

impl Walk<'_, '_> {
    /// The ring's next member: its members as they were (read in pages), then those pushed back.
    fn pop(&mut self) -> Result<Option<String>> {
        if (self.popped as i64) < self.ring_len {
            if self.popped == self.ring.len() {
                let page = self.db.lrange("ring", self.popped as i64, 100)?;
                self.ring.extend(page);
            }
            self.popped += 1;
            return Ok(self.ring.get(self.popped - 1).cloned());
        }
        if self.repopped < self.back.len() {
            self.repopped += 1;
            return Ok(Some(self.back[self.repopped - 1].clone()));
        }
        Ok(None)
    }

    fn left(&self) -> i64 {
        self.ring_len - self.popped as i64 + (self.back.len() - self.repopped) as i64
    }

    /// Whether member `i` holds a job past those taken. Its size is counted no further than
    /// `first_count`; a walk that took that many counts further (twice as far each time), so a
    /// member is never dropped from the ring while it holds jobs.
    fn more(&mut self, i: usize) -> Result<bool> {
        let s = &self.order[i];
        if (s.taken as i64) < s.size {
            return Ok(true);
        }
        if s.size < s.counted_to {
            return Ok(false);
        }
        let cap = 2 * s.counted_to.max(s.taken as i64);
        let size = match &s.group {
            None => self.db.zcard_upto("pending", cap)?,
            Some(g) => self.db.zcard_upto(&lane(g), cap)?,
        };
        let s = &mut self.order[i];
        s.size = size;
        s.counted_to = cap;
        Ok((s.taken as i64) < size)
    }

    /// The member `m`, read on first meeting.
    fn member(&mut self, m: &str) -> Result<usize> {
        if let Some(&i) = self.members.get(m) {
            return Ok(i);
        }
        let member = if m == "~" {
            Member {
                group: None,
                size: self.db.zcard_upto("pending", self.first_count)?,
                counted_to: self.first_count,
                ids: Vec::new(),
                ranks: Vec::new(),
                taken: 0,
                a: 0,
                a0: 0,
                limit: 0,
                rate: None,
            }
        } else {
            let (a, limit, own) = slots(self.db, m)?;
            let spec = own.or_else(|| self.default_rate.clone());
            let rate = match spec {
                Some(spec) => Rate::read(Some(&spec), self.db.zscore("tats", m)?, self.now_us),
                None => None,
            };
            Member {
                group: Some(m.to_string()),
                size: self.db.zcard_upto(&lane(m), self.first_count)?,
                counted_to: self.first_count,
                ids: Vec::new(),
                ranks: Vec::new(),
                taken: 0,
                a,
                a0: a,
                limit,
                rate,
            }
        };
        self.order.push(member);
        self.members.insert(m.to_string(), self.order.len() - 1);
        Ok(self.order.len() - 1)
    }

    /// The next job id of member `i` and its rank; its next page holds `ahead` ids.
    fn next_id(&mut self, i: usize, ahead: i64) -> Result<Option<(String, i64)>> {
        let s = &mut self.order[i];
        if s.taken == s.ids.len() {
            let from = s.taken as i64;
            let page = match &s.group {
                Some(g) => self.db.zrange_scored(&lane(g), from, ahead)?,
                None => self.db.zrange_scored("pending", from, ahead)?,
            };
            for (id, rank) in page {
                s.ids.push(id);
                s.ranks.push(rank);
            }
        }
        s.taken += 1;
        Ok(s.ids.get(s.taken - 1).cloned().zip(s.ranks.get(s.taken - 1).copied()))
    }

    /// One job taken from a member (`g`: its group) at its rank: read its row and decide. True
    /// when handed out.
    fn judge(&mut self, next: Option<(String, i64)>, g: Option<&str>) -> Result<bool> {
        let Some((id, rank)) = next else { return Ok(false) };
        if let Some(&p) = self.met.get(&id) {
            self.left.add(rank, p, -1, None);
            return Ok(false);
        }
        // a missing row: dropped
        let Some(row) = self.db.claim_row(&id)? else {
            self.met.insert(id, 0);
            self.left.add(rank, 0, -1, None);
            return Ok(false);
        };
        let p = common::priority_of(row.priority.as_deref());
        self.met.insert(id.clone(), p);
        self.left.add(rank, p, -1, None);
        let att = whole(row.attempts.as_deref(), 0, 0);
        let free = whole(row.free.as_deref(), 0, 0).filter(|f| att.is_some_and(|a| *f <= a));
        let maxa = whole(row.max_attempts.as_deref(), self.maxdef, 1);
        let defect = match (&row.data, row.state.as_deref(), att, free, maxa) {
            (None, ..) => Some("malformed row: no data".to_string()),
            (_, s, ..) if s != Some("pending") => {
                Some(format!("malformed row: state {} in a ready set", s.unwrap_or("nil")))
            }
            (_, _, None, ..) => Some(format!(
                "malformed row: attempts {}",
                row.attempts.as_deref().unwrap_or("")
            )),
            (_, _, _, None, _) => Some(format!("malformed row: free {}", row.free.as_deref().unwrap_or(""))),
            (_, _, _, _, None) => Some(format!(
                "malformed row: max_attempts {}",
                row.max_attempts.clone().unwrap_or_else(|| self.maxdef.to_string())
            )),
            _ => None,
        };
        let (att, free, maxa) = (att.unwrap_or(0), free.unwrap_or(0), maxa.unwrap_or(self.maxdef));
        // the attempts it has used, as its record states them (a malformed count as it stands)
        let attempt = match defect {
            Some(_) => row.attempts.clone().unwrap_or_else(|| "0".into()),
            None => (att - free).to_string(),
        };
        if let (None, Some(reason)) = (&defect, &row.cancel) {
            self.settled.push(Settled {
                id,
                cancelled: true,
                reason: reason.clone(),
                attempt,
                waited: row.waited.clone(),
            });
            return Ok(false);
        }
        let defect = defect.or_else(|| (att - free >= maxa).then(|| "lease expired on the last attempt".into()));
        if let Some(reason) = defect {
            self.settled.push(Settled {
                id,
                cancelled: false,
                reason,
                attempt,
                waited: row.waited.clone(),
            });
            return Ok(false);
        }
        if p > 0 && self.aging.is_none() {
            self.aging = Some(common::aging_of(self.db)?);
        }
        let wait = common::rank_ready(rank, p, self.aging.unwrap_or(0))
            .map(|ready| std::time::Duration::from_millis((self.db.now() - ready).max(0) as u64));
        let payload = row.data.unwrap_or_default();
        self.bytes += payload.len();
        let id = JobId::from_store(id);
        let retry = crate::retry::stored(&id, row.retry.as_deref().unwrap_or(""));
        self.out.push(ClaimedJob {
            id,
            retry,
            payload,
            token: (att + 1) as u64,
            attempts: (att + 1 - free) as u64,
            group: g.and_then(|g| GroupName::new(g).ok()),
            kind: row.kind,
            max_attempts: maxa as u64,
            wait,
        });
        Ok(true)
    }
}

pub(crate) fn claim(db: &Db, n: i64, lease_ms: i64, max_attempts: i64, recmax: i64) -> Result<Claimed> {
    if db.exists_flag("paused")? || db.exists_flag("obliterating")? {
        return Ok(Claimed::default());
    }
    // the idle path: an empty ring and no throttled group
    let ring_len = db.llen("ring")?;
    if ring_len == 0 && !db.znonempty("throttled")? {
        return Ok(Claimed::default());
    }
    let now_us = db.now_us();
    // the queue's limit and the groups' default (each group's own is read with its fields)
    let queue_spec = db.gget("rate")?;
    let mut qrate = match &queue_spec {
        Some(spec) => Rate::read(Some(spec), db.kv_get("tat")?, now_us),
        None => None,
    };
    // the throttled groups due again join the walk at the ring's tail (a page at most)
    let due = db.zrange_upto("throttled", now_us, 1000)?;
    let mut w = Walk {
        db,
        maxdef: max_attempts,
        deadline: db.now() + lease_ms,
        ring_len,
        cap: n + ring_len + due.len() as i64 + 1000,
        first_count: n + 1,
        ring: Vec::new(),
        popped: 0,
        back: Vec::new(),
        repopped: 0,
        members: HashMap::new(),
        order: Vec::new(),
        out: Vec::new(),
        settled: Vec::new(),
        met: HashMap::new(),
        left: common::Tally::default(),
        bytes: 0,
        aging: None,
        now_us,
        default_rate: db.gget("rate:~")?,
    };
    w.back.extend(due.iter().cloned());

    // The walk, from reads alone.
    let mut got = 0;
    let mut budget = w.cap;
    // the r: flags of the members dropped from the ring; the groups throttled (group, admission)
    let (mut dropped, mut held) = (Vec::new(), Vec::<(String, f64)>::new());
    // whether the queue's limit stopped the walk
    let mut stopped = false;
    while got < n && w.bytes < BATCH_BYTES_MAX && budget > 0 {
        if !Rate::admits(qrate.as_ref(), now_us) {
            stopped = true;
            break;
        }
        budget -= 1;
        let Some(m) = w.pop()? else { break };
        let i = w.member(&m)?;
        match w.order[i].group.clone() {
            None => {
                let want = if w.left() == 0 { n - got } else { 1 };
                let mut used = 0;
                while used < want && w.bytes < BATCH_BYTES_MAX && w.more(i)? && Rate::admits(qrate.as_ref(), now_us) {
                    used += 1;
                    let id = w.next_id(i, n - got)?;
                    if w.judge(id, None)? {
                        got += 1;
                        Rate::take(qrate.as_mut());
                    }
                }
            }
            Some(g) => {
                let s = &w.order[i];
                if s.a < s.limit && Rate::admits(s.rate.as_ref(), now_us) && w.more(i)? {
                    let id = w.next_id(i, n - got)?;
                    if w.judge(id, Some(&g))? {
                        got += 1;
                        w.order[i].a += 1;
                        Rate::take(w.order[i].rate.as_mut());
                        Rate::take(qrate.as_mut());
                    }
                }
            }
        }
        let open = w.order[i].group.is_none() || w.order[i].a < w.order[i].limit;
        if open && w.more(i)? {
            match &w.order[i].rate {
                Some(r) if !Rate::admits(Some(r), now_us) => held.push((m, r.next())),
                _ => w.back.push(m),
            }
        } else {
            dropped.push(format!("r:{m}"));
        }
    }
    // the wait: the queue's next admission while it admits none, else the earliest group's in
    // throttled once this claim's moves are written (the first not taken due, or one throttled here)
    let wake_at = match &qrate {
        Some(q) if stopped => Some(q.next()),
        _ => {
            let first = db.zrange_from("throttled", due.len() as i64)?.map(|(_, at)| at as f64);
            held.iter().map(|h| h.1).chain(first).reduce(f64::min)
        }
    };
    let wait = wake_at.map(|at| ((at - now_us as f64).ceil() as i64).max(1));

    let cancels = w.settled.iter().filter(|j| j.cancelled).count() as i64;
    let kept = if cancels > 0 {
        retention_read(db, "cancelled", cancels)?
    } else {
        Kept::none()
    };

    // The writes.
    // the ring: the members popped leave its head, those pushed back and not taken again join its tail
    if w.popped > 0 {
        db.ltrim_head("ring", w.popped as i64)?;
    }
    expire(db, &kept)?;
    for m in &w.back[w.repopped..] {
        db.rpush("ring", m)?;
    }
    // each member's jobs used leave its set: a lane's by one trim; pending's handed out leave it in
    // the same update that leases them (set_active, below), the others one by one here
    let handed: HashSet<&str> = w.out.iter().map(|j| j.id.as_str()).collect();
    for s in &w.order {
        match &s.group {
            Some(g) if s.taken > 0 => db.zrem_head(&lane(g), s.taken as i64)?,
            None => {
                for id in s.ids[..s.taken].iter().filter(|id| !handed.contains(id.as_str())) {
                    db.zrem("pending", id)?;
                }
            }
            _ => {}
        }
    }
    w.left.write(db)?;
    // the groups hash: the dropped members' flags first, then each group's active count
    for f in &dropped {
        db.gdel(f)?;
    }
    for s in &w.order {
        if let Some(g) = s.group.as_deref().filter(|_| s.a != s.a0) {
            db.gset(&format!("a:{g}"), &s.a.to_string())?;
        }
    }
    for job in &w.out {
        db.set_active(job.id.as_str(), job.token as i64, w.deadline, job.group.is_none())?;
    }
    // the limits: the due groups leave throttled, the groups throttled here join it; the TATs moved
    for g in &due {
        db.zrem("throttled", g)?;
    }
    for (g, at) in &held {
        db.zadd("throttled", at.ceil() as i64, g)?;
    }
    let moved: Vec<(&str, i64)> = w
        .order
        .iter()
        .filter_map(|s| Some((s.group.as_deref()?, s.rate.as_ref().filter(|r| r.moved)?.stored_tat())))
        .collect();
    if !moved.is_empty() {
        db.zrem_upto("tats", now_us)?;
        for (g, tat) in moved {
            db.zadd("tats", tat, g)?;
        }
    }
    if let Some(q) = qrate.as_ref().filter(|q| q.moved) {
        db.kv_set("tat", q.stored_tat())?;
    }
    let (mut failed, mut cancelled) = (0, 0);
    for j in &w.settled {
        if j.cancelled {
            finish(db, &j.id, "cancelled", &kept, Some(Field::LastError(&j.reason)))?;
            cancelled += 1;
        } else {
            bury(db, &j.id, &j.reason)?;
            failed += 1;
        }
        let status = if j.cancelled { "cancelled" } else { "dead" };
        db.record(recmax, &j.id, status, &j.attempt, "error", Some(j.reason.as_bytes()))?;
        db.notify(j.waited.as_deref(), &j.id);
    }
    db.count("failed", failed)?;
    db.count("cancelled", cancelled)?;
    Ok(Claimed {
        jobs: w.out,
        wait: wait.map(|us| std::time::Duration::from_micros(us as u64)),
        queue_limited: stopped && wait.is_some(),
    })
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
