//! The twin of `scripts/_lib.lua`: the steps the verbs share, one function per Lua helper, with the
//! same name less the `emq_` prefix.

use std::collections::HashMap;

use super::db::{text, Col, Db, Field, NewRow, ACTIVE};
use crate::error::Result;
use crate::store::Settled;

/// Whether the queue is paused (the twin of `emq_paused_read`): a paused queue makes nothing
/// claimable, so its verbs push no wake (resume pushes them).
pub(crate) fn paused_read(db: &Db) -> Result<bool> {
    db.exists_flag("paused")
}

/// One wake token per job made claimable, at most 16; none while paused (`paused` as
/// [`paused_read`] read it before the first write). The twin of `emq_wake`.
pub(crate) fn wake(db: &Db, n: i64, paused: bool) -> Result<()> {
    if n <= 0 || paused {
        return Ok(());
    }
    db.push_wakes(n)
}

/// What a lane job of g leaving `active`, or ready jobs joining g's lane, needs of g (the twin of
/// `emq_lane_read`, read before the first write; the writes keep it up to date): its active count
/// a:<g>, whether it is on the ring (r:<g>), its limit (its own, else the queue default l:~, else 1)
/// and its lane's length, counted as [`Count`] says.
#[derive(Debug, Clone)]
pub(crate) struct Lane {
    pub(crate) a: i64,
    pub(crate) ringed: bool,
    pub(crate) limit: i64,
    pub(crate) len: i64,
}

/// How far a twin counts a lane for [`Lane::len`]: `Whole` for the claimable arithmetic of jobs
/// joining it; `Any` (0 or 1: whether it holds a job) for a leave's ring step, which asks no more.
/// ZCARD is O(1) in Redis, a count of the lane's rows here is not.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Count {
    Whole,
    Any,
}

/// g's state ([`Lane`]), its four fields in one statement.
pub(crate) fn lane_read(db: &Db, g: &str, count: Count) -> Result<Lane> {
    type Fields = (Option<String>, Option<String>, Option<String>, Option<String>);
    let (a, r, own, default): Fields = db
        .sql()
        .prepare_cached(
            "SELECT (SELECT value FROM emq_groups WHERE queue = ?1 AND field = ?2), \
                    (SELECT value FROM emq_groups WHERE queue = ?1 AND field = ?3), \
                    (SELECT value FROM emq_groups WHERE queue = ?1 AND field = ?4), \
                    (SELECT value FROM emq_groups WHERE queue = ?1 AND field = 'l:~')",
        )
        .and_then(|mut s| {
            s.query_row(
                rusqlite::params![db.queue(), format!("a:{g}"), format!("r:{g}"), format!("l:{g}")],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
        })
        .map_err(|e| db.err(e))?;
    let len = match count {
        Count::Whole => db.zcard(&lane(g))?,
        Count::Any => i64::from(db.znonempty(&lane(g))?),
    };
    Ok(Lane {
        a: num(a).unwrap_or(0),
        ringed: r.is_some(),
        limit: num(own).or_else(|| num(default)).unwrap_or(1),
        len,
    })
}

fn num(v: Option<String>) -> Option<i64> {
    v.and_then(|s| s.parse::<i64>().ok())
}

/// The groups a twin has read, each once, in the order first read (the scripts' `lanes` table and,
/// where the order matters, their `order` list).
#[derive(Default)]
pub(crate) struct Lanes {
    at: HashMap<String, usize>,
    read: Vec<(String, Lane)>,
}

impl Lanes {
    /// g's state, read on first use ([`lane_read`]).
    pub(crate) fn read(&mut self, db: &Db, g: &str, count: Count) -> Result<&mut Lane> {
        let i = match self.at.get(g) {
            Some(&i) => i,
            None => {
                self.read.push((g.to_string(), lane_read(db, g, count)?));
                self.at.insert(g.to_string(), self.read.len() - 1);
                self.read.len() - 1
            }
        };
        Ok(&mut self.read[i].1)
    }

    /// g's state, when read.
    pub(crate) fn get(&mut self, g: &str) -> Option<&mut Lane> {
        let i = *self.at.get(g)?;
        Some(&mut self.read[i].1)
    }

    /// Every group read, in the order first read.
    pub(crate) fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Lane)> {
        self.read.iter_mut().map(|(g, s)| (g.as_str(), s))
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.read.is_empty()
    }
}

/// Whether g (s from [`lane_read`]) belongs back on the ring: off it, with a ready job and a free
/// slot (the twin of `emq_lane_eligible`).
pub(crate) fn lane_eligible(s: &Lane) -> bool {
    !(s.ringed || s.a >= s.limit || s.len == 0)
}

/// The ring step for g: pushed at the ring's tail and its r: flag set when eligible. 1 when pushed
/// (the twin of `emq_lane_ring`).
pub(crate) fn lane_ring(db: &Db, g: &str, s: &mut Lane) -> Result<i64> {
    if !lane_eligible(s) {
        return Ok(0);
    }
    db.rpush("ring", g)?;
    db.gset(&format!("r:{g}"), "1")?;
    s.ringed = true;
    Ok(1)
}

/// A lane job of g left `active`: the slot invariant (a:<g> less one, deleted at 0), then the ring
/// step. 1 when it put g back on the ring (the twin of `emq_lane_leave`). A twin that puts the job
/// back on g's lane does so first ([`lane_front`]).
pub(crate) fn lane_leave(db: &Db, g: &str, s: &mut Lane) -> Result<i64> {
    s.a -= 1;
    let key = format!("a:{g}");
    if s.a <= 0 {
        s.a = 0;
        db.gdel(&key)?;
    } else {
        db.gset(&key, &s.a.to_string())?;
    }
    lane_ring(db, g, s)
}

/// `added` ready jobs joined the tail of g's lane (s counting them): the ring step, and how many of
/// them g's free slots make claimable (the twin of `emq_lane_step`).
pub(crate) fn lane_step(db: &Db, g: &str, s: &mut Lane, added: i64) -> Result<i64> {
    lane_ring(db, g, s)?;
    let free = (s.limit - s.a).max(0);
    let before = (s.len - added).max(0);
    Ok(s.len.min(free) - before.min(free))
}

/// A job back at the front of g's lane, its row pending (the twin of `emq_lane_front`).
pub(crate) fn lane_front(db: &Db, g: &str, s: &mut Lane, id: &str) -> Result<()> {
    db.hset(id, &[Field::State("pending")])?;
    db.zadd(&lane(g), 0, id)?;
    s.len += 1;
    Ok(())
}

/// What the flat set's ring step needs (the twin of `emq_flat_read`): whether '~' is on the ring,
/// and whether pending holds a job (`len` 0 or 1: the step asks no more).
pub(crate) struct Flat {
    pub(crate) ringed: bool,
    pub(crate) len: i64,
}

pub(crate) fn flat_read(db: &Db) -> Result<Flat> {
    Ok(Flat {
        ringed: db.gget("r:~")?.is_some(),
        len: i64::from(db.znonempty("pending")?),
    })
}

/// A flat job back in pending at `score`, its row pending (the twin of `emq_flat_ready`).
pub(crate) fn flat_ready(db: &Db, s: &mut Flat, id: &str, score: i64) -> Result<()> {
    db.hset(id, &[Field::State("pending")])?;
    db.zadd("pending", score, id)?;
    s.len += 1;
    Ok(())
}

/// The flat set's ring step: '~' pushed at the ring's tail when off it and pending holds a job (the
/// twin of `emq_flat_step`).
pub(crate) fn flat_step(db: &Db, s: &mut Flat) -> Result<()> {
    if s.ringed || s.len == 0 {
        return Ok(());
    }
    db.rpush("ring", "~")?;
    db.gset("r:~", "1")?;
    s.ringed = true;
    Ok(())
}

/// The fence of every holder verb: `Err(reply)` when the caller does not hold the job (Gone: no
/// row, or a row with no field, as Redis has no hash there; Stale: another token, or none); else
/// the row's group. The caller then tests membership of `active` (the script's ZREM reply) and
/// answers stale on a job outside it. As the script, it does not read `state`: every verb that
/// moves an id into or out of `active` writes the row's state in the same step.
pub(crate) fn fence(db: &Db, id: &str, token: u64) -> Result<std::result::Result<Option<String>, Settled>> {
    Ok(fence_held(db, id, token)?.map(|held| held.group))
}

/// A job its caller holds, as the fence found it.
pub(crate) struct Held {
    /// The row's group.
    pub(crate) group: Option<String>,
    /// Whether its row's state is `active`: the settles' membership test, read with the fence
    /// (every verb moving a job into or out of `active` writes its state in the same step).
    pub(crate) active: bool,
    /// The attempts it has used (attempts − free; `emq_used`).
    pub(crate) used: i64,
    /// Its `free` count as stored.
    pub(crate) free: Option<String>,
    /// Its waited mark ([`Db::notify`] takes it).
    pub(crate) waited: Option<String>,
}

/// The attempts a job has used: its claims (attempts) less the claims that used none (free); a
/// malformed count reads as 0 (the twin of `emq_used`).
pub(crate) fn used(attempts: Option<&str>, free: Option<&str>) -> i64 {
    let n = |v: Option<&str>| v.and_then(lua_number).map_or(0, |f| f as i64);
    n(attempts) - n(free)
}

/// [`fence`], with the job's state read in the same look (the settles' membership of `active`).
pub(crate) fn fence_held(db: &Db, id: &str, token: u64) -> Result<std::result::Result<Held, Settled>> {
    use rusqlite::OptionalExtension;
    /// attempts, group, state active, has a field, free, waited
    type Look = (
        Option<String>,
        Option<String>,
        bool,
        bool,
        Option<String>,
        Option<String>,
    );
    let row: Option<Look> = db
        .sql()
        .prepare_cached(concat!(
            "SELECT attempts, grp, state IS 'active', ",
            super::db::fields!(),
            " IS NOT NULL, free, waited FROM emq_jobs WHERE queue = ?1 AND id = ?2"
        ))
        .and_then(|mut s| {
            s.query_row(rusqlite::params![db.queue(), id], |r| {
                Ok((text(r, 0)?, text(r, 1)?, r.get(2)?, r.get(3)?, text(r, 4)?, text(r, 5)?))
            })
            .optional()
        })
        .map_err(|e| db.err(e))?;
    let Some((attempts, group, active, true, free, waited)) = row else {
        return Ok(Err(Settled::Gone));
    };
    if attempts.as_deref() != Some(token.to_string().as_str()) {
        return Ok(Err(Settled::Stale));
    }
    Ok(Ok(Held {
        group,
        active,
        used: used(attempts.as_deref(), free.as_deref()),
        free,
        waited,
    }))
}

/// A queue's retention as the finishing verbs read it, and the kept rows past their age (the twin
/// of what `emq_retention_read` returns).
pub(crate) struct Kept {
    /// The newest finished rows kept (0: a row is deleted as it finishes).
    pub(crate) keep: i64,
    /// The longest output kept, in bytes.
    cap: i64,
    /// The set of the finishing state's kept rows: `completed` or `cancelled`.
    done: &'static str,
    /// Kept rows finished more than the retention's age ago (at most 100 a call).
    expired: Vec<String>,
    /// The size of `done`, read once (a count is a scan here, not ZCARD's O(1)) and kept up
    /// to date by [`expire`] and [`finish`].
    card: std::cell::Cell<i64>,
}

impl Kept {
    /// Nothing read: for a verb that finishes no job.
    pub(crate) fn none() -> Self {
        Kept {
            keep: 0,
            cap: 0,
            done: "completed",
            expired: Vec::new(),
            card: std::cell::Cell::new(0),
        }
    }
}

/// The kv keys of a queue's retention (the fields of `emq:{q}:retention`).
pub(crate) const RETENTION_KEYS: [&str; 3] = ["retention:keep", "retention:age", "retention:cap"];

/// A queue's retention (the twin of `emq_retention_of`): each of its fields, or its default.
pub(crate) fn retention_of(db: &Db) -> Result<crate::store::Retention> {
    let d = crate::store::Retention::default();
    let [keep, age, cap] = RETENTION_KEYS;
    let field = |key: &str, default: i64| -> Result<i64> { Ok(db.kv_get(key)?.unwrap_or(default)) };
    Ok(crate::store::Retention {
        keep: field(keep, d.keep as i64)?.clamp(0, u32::MAX as i64) as u32,
        max_age: std::time::Duration::from_millis(field(age, d.max_age.as_millis() as i64)?.max(1) as u64),
        max_output: field(cap, d.max_output as i64)?.clamp(0, u32::MAX as i64) as u32,
    })
}

/// Before `adding` rows finish as `state` ("completed" or "cancelled"): the queue's retention,
/// and when rows are kept the ones of that state past their age (the twin of
/// `emq_retention_read`).
pub(crate) fn retention_read(db: &Db, state: &str, adding: i64) -> Result<Kept> {
    let r = retention_of(db)?;
    let mut kept = Kept {
        keep: r.keep as i64,
        cap: r.max_output as i64,
        done: if state == "cancelled" { "cancelled" } else { "completed" },
        ..Kept::none()
    };
    if kept.keep > 0 && adding > 0 {
        kept.expired = db.zrange_upto(kept.done, db.now() - r.max_age.as_millis() as i64, 100)?;
        kept.card.set(db.zcard(kept.done)?);
    }
    Ok(kept)
}

/// The kept rows past their age deleted (the twin of `emq_expire`).
pub(crate) fn expire(db: &Db, kept: &Kept) -> Result<()> {
    for id in &kept.expired {
        db.del_row(id)?;
        if db.zrem(kept.done, id)? {
            kept.card.set(kept.card.get() - 1);
        }
    }
    Ok(())
}

/// A held job in `active` leaves it finished: its row deleted with its lease in one delete, or
/// kept (see [`finish`]).
pub(crate) fn finish_active(db: &Db, id: &str, state: &str, kept: &Kept, extra: Option<Field<'_>>) -> Result<()> {
    if kept.keep <= 0 {
        return db.del_active_row(id);
    }
    db.zrem(ACTIVE, id)?;
    finish(db, id, state, kept, extra)
}

/// A finished job (completed / cancelled) under the queue's retention (the twin of `emq_finish`):
/// deleted, or kept — its state, finish time and value (an output over the cap dropped, its size
/// kept), its payload dropped — with its state's set of kept rows trimmed to the newest `keep`.
pub(crate) fn finish(db: &Db, id: &str, state: &str, kept: &Kept, extra: Option<Field<'_>>) -> Result<()> {
    if kept.keep <= 0 {
        db.del_row(id)?;
        return Ok(());
    }
    let now = db.now();
    let reason = matches!(extra, Some(Field::LastError(_)));
    let mut fields = vec![Field::State(state), Field::FinishedAt(now)];
    fields.extend(extra.map(|f| match f {
        Field::Output(o) if o.len() as i64 > kept.cap => Field::OutputDropped(o.len() as i64),
        f => f,
    }));
    db.hset(id, &fields)?;
    // a kept row holds the outcome, not the payload, and no earlier attempt's error (a cancel's
    // reason is its last_error)
    if reason {
        db.hdel(id, &[Col::Data])?;
    } else {
        db.hdel(id, &[Col::Data, Col::LastError])?;
    }
    // a finished row is new to its set (its id was in no set of finished jobs)
    db.zadd(kept.done, now, id)?;
    kept.card.set(kept.card.get() + 1);
    let over = kept.card.get() - kept.keep;
    if over > 0 {
        for old in db.zrange(kept.done, 0, over, false)? {
            db.del_row(&old)?;
            db.zrem(kept.done, &old)?;
        }
        kept.card.set(kept.keep);
    }
    Ok(())
}

/// One entry of a settle that finishes a held job: the job, its holder's token, and the verdict's
/// value (an output, or a cancel reason).
pub(crate) struct Finishing<'a> {
    pub(crate) id: &'a str,
    pub(crate) token: u64,
    /// `Field::Output` or `Field::LastError`.
    pub(crate) value: Option<Field<'a>>,
}

/// complete, complete_many and complete_cancelled (the twin of `emq_settle_finished`): each entry
/// fenced on its own, a repeated entry stale after its first settle; then every held job leaves
/// `active` finished as `state` ("completed" or "cancelled") under the queue's retention — kept
/// with its value (the output, or the reason as last_error), or deleted — its lane's slot freed
/// with the ring step, the event counted and recorded, a waited job announced. Reads first, as the
/// script: every fence, the groups, the retention, then the writes.
pub(crate) fn settle_finished(db: &Db, entries: &[Finishing<'_>], state: &str, recmax: i64) -> Result<Vec<Settled>> {
    let mut reply = Vec::with_capacity(entries.len());
    let mut firsts = std::collections::HashSet::new();
    let mut done = Vec::new();
    for e in entries {
        if firsts.contains(e.id) {
            reply.push(Settled::Stale);
            continue;
        }
        match fence_held(db, e.id, e.token)? {
            Err(refused) => reply.push(refused),
            Ok(held) => {
                firsts.insert(e.id);
                if held.active {
                    reply.push(Settled::Ok);
                    done.push((e, held));
                } else {
                    reply.push(Settled::Stale);
                }
            }
        }
    }
    // the groups of the held jobs and whether the queue is paused, then the writes
    let mut lanes = Lanes::default();
    for (_, held) in &done {
        if let Some(g) = &held.group {
            lanes.read(db, g, Count::Any)?;
        }
    }
    let paused = !lanes.is_empty() && paused_read(db)?;
    let kept = if done.is_empty() {
        Kept::none()
    } else {
        retention_read(db, state, done.len() as i64)?
    };
    expire(db, &kept)?;
    let record_field = if state == "cancelled" { "error" } else { "output" };
    let mut wakes = 0;
    for (e, held) in &done {
        finish_active(db, e.id, state, &kept, e.value.clone())?;
        let value = match &e.value {
            Some(Field::LastError(reason)) => Some(reason.as_bytes()),
            Some(Field::Output(output)) => Some(*output),
            _ => None,
        };
        db.record(recmax, e.id, state, &held.used.to_string(), record_field, value)?;
        db.notify(held.waited.as_deref(), e.id);
        if let Some(g) = &held.group {
            if let Some(s) = lanes.get(g) {
                wakes += lane_leave(db, g, s)?;
            }
        }
    }
    wake(db, wakes, paused)?;
    db.count(state, done.len() as i64)?;
    Ok(reply)
}

/// A job to the morgue, scored with the store's time of death.
pub(crate) fn bury(db: &Db, id: &str, err: &str) -> Result<()> {
    db.hset(id, &[Field::State("dead"), Field::LastError(err)])?;
    db.zadd("dead", db.now(), id)
}

/// A job made ready again, in the flat set or its lane at a fresh rank of its priority (`priority`:
/// the row's field, 0 when absent; `order` from [`Order::read`], written back by the caller);
/// state pending; `len`, the length of the set it joins ([`Lane::len`] of g, else
/// [`Flat::len`]), counts it (the twin of `emq_ready`).
pub(crate) fn ready(
    db: &Db,
    id: &str,
    g: Option<&str>,
    len: &mut i64,
    order: &mut Order,
    priority: Option<&str>,
) -> Result<()> {
    db.hset(id, &[Field::State("pending")])?;
    let rank = order.rank(priority_of(priority));
    match g {
        Some(g) => db.zadd(&lane(g), rank, id)?,
        None => db.zadd("pending", rank, id)?,
    }
    *len += 1;
    Ok(())
}

/// A row's priority field as a number, 0 when absent or not one of 0..=9 (enqueue writes only
/// those).
pub(crate) fn priority_of(field: Option<&str>) -> i64 {
    field
        .and_then(|p| p.parse::<i64>().ok())
        .filter(|p| (0..=i64::from(crate::job::PRIORITY_MAX)).contains(p))
        .unwrap_or(0)
}

/// The start of the ranks' clock: 2026-01-01T00:00:00Z, in ms since the Unix epoch.
const RANK_EPOCH_MS: i64 = 1_767_225_600_000;
/// Rank units per ms of the clock.
const RANK_PER_MS: i64 = 256;
/// What strict aging adds per priority step: more than any clock part until 2137.
const RANK_STRICT_STEP: i64 = 900_000_000_000_000;

/// The pending tally (the twin of the script's, `emq_tally` in _lib.lua), which tells the age of
/// the oldest pending job in O(1): the pending jobs (flat and in lanes) of each priority p ranked
/// within each second of rank are counted under the field `<p>:<rank second>` (kv
/// `pending_tally:<field>`), and the set `pending_since` holds the same fields, each scored by the
/// Unix ms its first job was made ready. A job's rank and priority alone name its field, so the
/// verb that takes it out finds the field the verb that ranked it counted, whatever the aging has
/// become. Ranks below one second of clock (jobs put back at the front, recovered or released)
/// are not counted, nor are jobs an earlier version ranked: a count that would go below 1 drops
/// its field. A verb tallies the jobs it ranks ([`Order::rank`]) or takes out of `pending` or a
/// lane, then writes the tally once.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    /// Each field met, its count moved and the ms of its first job joining.
    fields: Vec<(String, i64, Option<i64>)>,
    /// The priority and rank second of the last field met, and its index: a batch's ranks share one.
    last: Option<(i64, i64, usize)>,
}

impl Tally {
    /// `n` jobs of priority `p` at `rank`: +1 joining (`clock`: its rank's clock part, the time it
    /// was made ready), -1 leaving (no clock).
    pub(crate) fn add(&mut self, rank: i64, p: i64, n: i64, clock: Option<i64>) {
        let second = 1000 * RANK_PER_MS;
        if rank < second {
            return;
        }
        let sec = rank.div_euclid(second);
        let i = match self.last {
            Some((lp, ls, i)) if lp == p && ls == sec => i,
            _ => {
                let f = format!("{p}:{sec}");
                let i = match self.fields.iter().position(|(g, ..)| *g == f) {
                    Some(i) => i,
                    None => {
                        self.fields.push((f, 0, None));
                        self.fields.len() - 1
                    }
                };
                self.last = Some((p, sec, i));
                i
            }
        };
        let (_, count, ms) = &mut self.fields[i];
        *count += n;
        if ms.is_none() {
            *ms = clock.map(|c| RANK_EPOCH_MS + c.div_euclid(RANK_PER_MS));
        }
    }

    /// The tally written: each field's count moved; a field new here joins `pending_since` at the
    /// ms of its first job, and a field left with no job leaves both.
    pub(crate) fn write(&self, db: &Db) -> Result<()> {
        for (f, n, ms) in &self.fields {
            if *n == 0 {
                continue;
            }
            let key = format!("pending_tally:{f}");
            let left = db.kv_incr(&key, *n)?;
            if left <= 0 {
                db.kv_del(&key)?;
                db.zrem("pending_since", f)?;
            } else if left == *n {
                db.zadd("pending_since", ms.unwrap_or(0), f)?;
            }
        }
        Ok(())
    }
}

/// How the queue ranks the jobs it makes ready (the twin of `emq_order_read` / `emq_rank`): the
/// rank of a job of priority p made ready now is its clock part — the store's time in 1/256 ms
/// since 2026-01-01, or one past the last rank's when that is later, so ranks never repeat and
/// one priority stays first in first out — plus p × aging (strict aging 0: p × 9e14, past every
/// clock part). The least rank is claimed first; recovered jobs take 0.
pub(crate) struct Order {
    clock: i64,
    aging: i64,
    tick: i64,
    moved: bool,
    /// The ranks given, tallied.
    tally: Tally,
}

impl Order {
    /// The queue's ranking state (kv `clock` and `aging`, absent aging = the default), read
    /// before the first write.
    pub(crate) fn read(db: &Db) -> Result<Order> {
        Ok(Order {
            clock: db.kv_get("clock")?.unwrap_or(0),
            aging: aging_of(db)?,
            tick: (db.now() - RANK_EPOCH_MS) * RANK_PER_MS,
            moved: false,
            tally: Tally::default(),
        })
    }

    /// The aging in ms (0 = strict).
    pub(crate) fn aging(&self) -> i64 {
        self.aging
    }

    /// The next rank of priority `p`.
    pub(crate) fn rank(&mut self, p: i64) -> i64 {
        self.clock = (self.clock + 1).max(self.tick);
        self.moved = true;
        let rank = match (p, self.aging) {
            (0, _) => self.clock,
            (p, 0) => self.clock + p * RANK_STRICT_STEP,
            (p, aging) => self.clock + p * aging * RANK_PER_MS,
        };
        self.tally.add(rank, p, 1, Some(self.clock));
        rank
    }

    /// The clock written back when a rank was given, and the ranks given tallied (the twin of
    /// `emq_order_write`).
    pub(crate) fn write(&self, db: &Db) -> Result<()> {
        if self.moved {
            db.kv_set("clock", self.clock)?;
        }
        self.tally.write(db)
    }
}

/// The queue's priority aging in ms (0 = strict), as [`Order::read`] reads it.
pub(crate) fn aging_of(db: &Db) -> Result<i64> {
    Ok(db
        .kv_get("aging")?
        .unwrap_or(crate::job::PRIORITY_AGING_DEFAULT.as_millis() as i64))
}

/// The time (Unix ms) a job of priority `p` ranked `rank` was made ready, read back from its rank
/// (the twin of `emq_rank_ready`); `None` for a rank that tells none (a recovered job's 0, or the
/// 1, 2, … of a lane an earlier version kept).
pub(crate) fn rank_ready(rank: i64, p: i64, aging: i64) -> Option<i64> {
    let clock = match (p, aging) {
        (0, _) => rank,
        (p, 0) => rank - p * RANK_STRICT_STEP,
        (p, aging) => rank - p * aging * RANK_PER_MS,
    };
    (clock >= 1000 * RANK_PER_MS).then(|| RANK_EPOCH_MS + clock.div_euclid(RANK_PER_MS))
}

/// A waiting job taken out of wherever it waits, a pending one out of the pending tally too (its
/// rank and priority read first); false when not there.
pub(crate) fn unwait(db: &Db, id: &str, state: &str, g: Option<&str>) -> Result<bool> {
    if state == "scheduled" {
        return db.zrem("scheduled", id);
    }
    let set = g.map_or_else(|| "pending".to_string(), lane);
    let Some(rank) = db.zscore(&set, id)? else {
        return Ok(false);
    };
    let mut left = Tally::default();
    left.add(rank, priority_of(db.priority(id)?.as_deref()), -1, None);
    let gone = db.zrem(&set, id)?;
    left.write(db)?;
    Ok(gone)
}

/// The sorted set name of g's lane.
pub(crate) fn lane(g: &str) -> String {
    format!("lane:{g}")
}

/// The group names with a non-empty lane are those with an a: or r: field.
pub(crate) fn lane_groups(db: &Db) -> Result<Vec<String>> {
    Ok(lane_groups_of(db.gfields()?))
}

/// The groups these fields of the groups hash name with an a: or r: field, sorted, each once.
pub(crate) fn lane_groups_of(fields: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut groups: Vec<String> = fields
        .into_iter()
        .filter_map(|f| {
            f.strip_prefix("a:")
                .or_else(|| f.strip_prefix("r:"))
                .map(str::to_string)
        })
        .filter(|g| g != "~")
        .collect();
    // a group may hold both an a: and an r: field: sorted, so dedup sees the pair side by side
    groups.sort();
    groups.dedup();
    groups
}

/// Parses a row's number field as Redis's `tonumber` would (absent = `default`; malformed = None).
/// Lua's `tonumber` of a stored number: surrounding spaces allowed, a finite decimal, else `None`.
pub(crate) fn lua_number(s: &str) -> Option<f64> {
    s.trim().parse::<f64>().ok().filter(|f| f.is_finite())
}

pub(crate) fn number(v: Option<&str>, default: i64) -> Option<i64> {
    match v {
        None => Some(default),
        Some(s) => s
            .trim()
            .parse::<i64>()
            .ok()
            .or_else(|| s.trim().parse::<f64>().ok().map(|f| f as i64)),
    }
}

/// What new jobs' transaction reads before it writes, in one statement (one look where four
/// statements would each take their own turn through SQLite).
struct Look {
    /// The queue is being obliterated: new jobs are refused.
    obliterating: bool,
    /// The queue is paused (no hand-off).
    paused: bool,
    /// The id sequence's value (0 before the first job).
    id: i64,
    /// The queue is in `emq:queues` already.
    registered: bool,
    /// The ring holds a member: something else is claimable (no hand-off).
    ring: bool,
}

fn look(db: &Db) -> Result<Look> {
    db.sql()
        .prepare_cached(
            "SELECT \
               EXISTS (SELECT 1 FROM emq_kv WHERE queue = ?1 AND key = 'obliterating'), \
               EXISTS (SELECT 1 FROM emq_kv WHERE queue = ?1 AND key = 'paused'), \
               coalesce((SELECT value FROM emq_kv WHERE queue = ?1 AND key = 'id'), 0), \
               EXISTS (SELECT 1 FROM emq_queues WHERE queue = ?1), \
               EXISTS (SELECT 1 FROM emq_lists WHERE queue = ?1 AND list = 'ring')",
        )
        .and_then(|mut s| {
            s.query_row([db.queue()], |r| {
                Ok(Look {
                    obliterating: r.get(0)?,
                    paused: r.get(1)?,
                    id: r.get(2)?,
                    registered: r.get(3)?,
                    ring: r.get(4)?,
                })
            })
        })
        .map_err(|e| db.err(e))
}

/// Who answers a job of an enqueue for its dedup key: a job in the store, or an earlier job of the
/// batch (its index).
enum Holder {
    Stored(String),
    Batch(usize),
}

/// A dedup key a new job takes: the key, and for a window (`for`) its length in ms.
struct Take {
    key: String,
    till: Option<i64>,
}

/// What an enqueue's dedup keys decided before its writes (the twin of `emq_new_jobs`'s dedup
/// reads): per job its holder, whether it debounces, the key it takes, the job whose payload it
/// is written with, and its delay in ms (a debounce waits at least its window).
struct DedupRead {
    held: Vec<Option<Holder>>,
    bounce: Vec<bool>,
    takes: Vec<Option<Take>>,
    payload_at: Vec<Option<usize>>,
    delays: Vec<i64>,
    /// A debounced holder that was ready: its group, to take it out of its ready set.
    unwait: Vec<Option<Option<String>>>,
    /// The sweep of `dedup_sweep`, when the enqueue takes a key.
    sweep: Option<DedupSweep>,
}

fn dedup_read(db: &Db, jobs: &[crate::job::NewJob], dup: &[bool]) -> Result<DedupRead> {
    use crate::dedup::DedupMode;
    let n = jobs.len();
    let mut r = DedupRead {
        held: (0..n).map(|_| None).collect(),
        bounce: vec![false; n],
        takes: (0..n).map(|_| None).collect(),
        payload_at: vec![None; n],
        unwait: vec![None; n],
        sweep: None,
        delays: jobs
            .iter()
            .map(|j| j.delay.map_or(0, |d| d.as_millis() as i64))
            .collect(),
    };
    let mut first_of: HashMap<&str, usize> = HashMap::new();
    for (i, job) in jobs.iter().enumerate() {
        let Some(d) = job.dedup.as_ref().filter(|_| !dup[i]) else {
            continue;
        };
        let key = d.key.as_str();
        if let DedupMode::Debounce(ttl) = d.mode {
            r.delays[i] = r.delays[i].max(ttl.as_millis() as i64);
        }
        let debounce = matches!(d.mode, DedupMode::Debounce(_));
        if let Some(&first) = first_of.get(key) {
            r.held[i] = Some(Holder::Batch(first));
            if debounce {
                r.bounce[i] = true;
                r.payload_at[first] = Some(i);
            }
            continue;
        }
        if let Some((holder, till)) = dedup_get(db, key)? {
            let row = || -> Result<(Option<String>, Option<String>)> {
                Ok(db.row(&holder)?.map_or((None, None), |row| (row.state, row.group)))
            };
            match d.mode {
                DedupMode::For(_) => {
                    if till.unwrap_or(0) > db.now() {
                        r.held[i] = Some(Holder::Stored(holder.clone()));
                    }
                }
                DedupMode::UntilFinished => {
                    if matches!(row()?.0.as_deref(), Some("pending" | "scheduled" | "active")) {
                        r.held[i] = Some(Holder::Stored(holder.clone()));
                    }
                }
                DedupMode::Debounce(_) => {
                    let (state, group) = row()?;
                    if matches!(state.as_deref(), Some("pending" | "scheduled")) {
                        r.held[i] = Some(Holder::Stored(holder.clone()));
                        r.bounce[i] = true;
                        // a ready holder goes back to waiting its window: out of its set first
                        if state.as_deref() == Some("pending") {
                            r.unwait[i] = Some(group);
                        }
                    }
                }
            }
        }
        if r.held[i].is_none() {
            r.takes[i] = Some(Take {
                key: key.to_string(),
                till: match d.mode {
                    DedupMode::For(ttl) => Some(ttl.as_millis() as i64),
                    _ => None,
                },
            });
            first_of.insert(key, i);
        }
    }
    if !first_of.is_empty() {
        r.sweep = Some(dedup_sweep_read(
            db,
            db.now(),
            20 + 2 * first_of.len() as i64,
            &first_of,
        )?);
    }
    Ok(r)
}

/// The holder of a dedup key, and the end of its window (HGET of `emq:{q}:dedup`).
fn dedup_get(db: &Db, key: &str) -> Result<Option<(String, Option<i64>)>> {
    db.sql()
        .prepare_cached("SELECT holder, till FROM emq_dedup WHERE queue = ?1 AND key = ?2")
        .and_then(|mut s| {
            rusqlite::OptionalExtension::optional(
                s.query_row(rusqlite::params![db.queue(), key], |r| Ok((r.get(0)?, r.get(1)?))),
            )
        })
        .map_err(|e| db.err(e))
}

/// A dedup key taken by `holder` (HSET of `emq:{q}:dedup`), with the end of its window.
fn dedup_write(db: &Db, key: &str, holder: &str, till: Option<i64>) -> Result<()> {
    db.sql()
        .prepare_cached(
            "INSERT INTO emq_dedup (queue, key, holder, till) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (queue, key) DO UPDATE SET holder = excluded.holder, till = excluded.till",
        )
        .and_then(|mut s| s.execute(rusqlite::params![db.queue(), key, holder, till]))
        .map(drop)
        .map_err(|e| db.err(e))
}

/// A dedup key let go (HDEL of `emq:{q}:dedup`).
fn dedup_del(db: &Db, key: &str) -> Result<()> {
    db.sql()
        .prepare_cached("DELETE FROM emq_dedup WHERE queue = ?1 AND key = ?2")
        .and_then(|mut s| s.execute(rusqlite::params![db.queue(), key]))
        .map(drop)
        .map_err(|e| db.err(e))
}

/// What a sweep of `dedup_sweep` writes (the twin of the script's): the keys that leave it, those
/// of them still in `dedup`, and the keys still held with their next score.
#[derive(Default)]
struct DedupSweep {
    drop: Vec<String>,
    gone: Vec<String>,
    again: Vec<(i64, String)>,
}

/// The twin of `emq_dedup_sweep_read`: the due keys of `dedup_sweep` (scored `look ms × 32 +
/// level`), at most `budget`, but those in `skip` (the keys the enqueue takes itself). A key is still
/// held while its window has not ended or its holder is pending, scheduled or active; then its next
/// look is 2^level minutes on (level at most 11); else it is let go.
fn dedup_sweep_read(db: &Db, now: i64, budget: i64, skip: &HashMap<&str, usize>) -> Result<DedupSweep> {
    let mut s = DedupSweep::default();
    for (key, score) in db.zrange_upto_scored("dedup_sweep", now * 32 + 31, budget)? {
        if skip.contains_key(key.as_str()) {
            continue;
        }
        let h = dedup_get(db, &key)?;
        let held = match &h {
            None => false,
            Some((holder, till)) => {
                till.unwrap_or(0) > now
                    || matches!(
                        db.row(holder)?.and_then(|row| row.state).as_deref(),
                        Some("pending" | "scheduled" | "active")
                    )
            }
        };
        if held {
            let level = score.rem_euclid(32).min(11);
            s.again
                .push(((now + 60_000 * (1 << level)) * 32 + (level + 1).min(11), key));
        } else {
            if h.is_some() {
                s.gone.push(key.clone());
            }
            s.drop.push(key);
        }
    }
    Ok(s)
}

/// The twin of `emq_dedup_sweep_write`.
fn dedup_sweep_write(db: &Db, s: DedupSweep) -> Result<()> {
    for key in &s.gone {
        dedup_del(db, key)?;
    }
    for key in &s.drop {
        db.zrem("dedup_sweep", key)?;
    }
    for (score, key) in &s.again {
        db.zadd("dedup_sweep", *score, key)?;
    }
    Ok(())
}

/// New jobs for enqueue (g = None) and genqueue, the twin of `emq_new_jobs`: reads first — the
/// mark, the duplicates, the dedup keys and their holders, the sweep's due keys and theirs, the id
/// counter, the state of the set the ready jobs join — then the writes: every new job takes one
/// sequence value (a generated id is its sequence), then the ring step and one wake per job made
/// claimable.
pub(crate) fn new_jobs(db: &Db, g: Option<&str>, jobs: &[crate::job::NewJob]) -> Result<Vec<crate::store::Enqueued>> {
    use crate::job::ClaimedJob;
    use crate::keyspace::JobId;
    use crate::store::Enqueued;
    let look = look(db)?;
    if look.obliterating {
        return Err(crate::Error::Obliterating {
            queue: db.queue().to_string(),
        });
    }
    let mut seen = std::collections::HashSet::new();
    let mut dup = vec![false; jobs.len()];
    for (i, job) in jobs.iter().enumerate() {
        if let Some(id) = &job.id {
            if !seen.insert(id.as_str()) || db.row_exists(id.as_str())? {
                dup[i] = true;
            }
        }
    }
    let dd = dedup_read(db, jobs, &dup)?;
    for (i, h) in dd.held.iter().enumerate() {
        dup[i] |= h.is_some();
    }
    let fresh = dup.iter().filter(|d| !**d).count() as i64;
    // a consumer of this process parked offering a claim may take the first ready flat jobs: their
    // rows are written active, as its claim would leave them
    let ready = (0..jobs.len()).filter(|&i| !dup[i] && dd.delays[i] == 0).count();
    let mut direct = match g {
        None => super::handoff::direct(db, ready, !look.paused && !look.ring),
        Some(_) => None,
    };
    // the set the ready jobs join (`emq_publish_read`); jobs handed over join none
    let (mut lane_state, mut flat_state) = (None, None);
    let mut order = None;
    if ready > 0 {
        order = Some(Order::read(db)?);
        match g {
            Some(g) => lane_state = Some(lane_read(db, g, Count::Whole)?),
            None => flat_state = Some(flat_read(db)?),
        }
    }
    // the registration (the Redis client's SADD once the script replied it owed), in this
    // transaction: a failure after it rolls it back, so a failed enqueue never lists the queue
    if !look.registered {
        db.register()?;
    }
    let mut handed = Vec::new();
    // the jobs handed over are those a claim would take first: the most urgent, then the earliest
    // (the batch's ready jobs by priority, stably), no job taken once the payloads handed over
    // reach the claim's byte bound (the first always)
    let mut to_hand = vec![false; jobs.len()];
    if let Some(t) = direct.as_ref() {
        let mut ready_jobs: Vec<usize> = (0..jobs.len()).filter(|&i| !dup[i] && dd.delays[i] == 0).collect();
        ready_jobs.sort_by_key(|&i| jobs[i].priority.unwrap_or(0));
        let (mut n, mut bytes) = (0, 0usize);
        for i in ready_jobs {
            if n >= t.n || bytes >= crate::store::BATCH_BYTES_MAX {
                break;
            }
            to_hand[i] = true;
            n += 1;
            bytes += jobs[i].payload.len();
        }
    }
    let mut seq = look.id;
    if fresh > 0 {
        db.kv_set("id", seq + fresh)?;
    }
    let (mut flat_ready, mut lane_ready) = (0i64, 0i64);
    let mut out = Vec::with_capacity(jobs.len());
    // the writes in the order the script makes them, table by table (each table's writes keep
    // their order, and no write reads another table's): rows, then set members, then lane tails
    let mut rows = Vec::with_capacity(jobs.len());
    let mut members = Vec::with_capacity(jobs.len());
    let mut tails = Vec::new();
    let mut ids: Vec<Option<String>> = vec![None; jobs.len()];
    let mut taken = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        if dup[i] {
            let holder = match &dd.held[i] {
                Some(Holder::Stored(h)) => Some(h.clone()),
                Some(Holder::Batch(first)) => ids[*first].clone(),
                None => None,
            };
            match holder {
                Some(h) if dd.bounce[i] => {
                    // a holder already in the store (one of this batch is written with the payload)
                    if let Some(Holder::Stored(_)) = dd.held[i] {
                        let due = db.now() + dd.delays[i];
                        if let Some(g) = &dd.unwait[i] {
                            unwait(db, &h, "pending", g.as_deref())?;
                        }
                        db.hset(
                            &h,
                            &[Field::Data(&job.payload), Field::State("scheduled"), Field::RunAt(due)],
                        )?;
                        members.push(("scheduled", due, h.clone()));
                    }
                    out.push(Enqueued::Debounced(JobId::from_store(h)));
                }
                Some(h) => out.push(Enqueued::Deduplicated(JobId::from_store(h))),
                // validated by the caller: a duplicate always carries its caller id
                None => out.push(Enqueued::Duplicate(
                    job.id.clone().unwrap_or_else(|| JobId::from_store(String::new())),
                )),
            }
            continue;
        }
        seq += 1;
        let id = job.id.as_ref().map_or_else(|| seq.to_string(), |i| i.to_string());
        ids[i] = Some(id.clone());
        if let Some(t) = &dd.takes[i] {
            taken.push((t.key.clone(), id.clone(), t.till.map(|ttl| db.now() + ttl)));
        }
        let data: &[u8] = &jobs[dd.payload_at[i].unwrap_or(i)].payload;
        let max_attempts = job.max_attempts.map(|m| m.to_string());
        let priority = job.priority.filter(|p| *p > 0).map(|p| p.to_string());
        let retry = job.retry.as_ref().map(|r| r.to_string());
        let delay = dd.delays[i];
        if delay > 0 {
            let due = db.now() + delay;
            rows.push(NewRow {
                id: id.clone(),
                data,
                state: "scheduled",
                max_attempts,
                kind: job.kind.as_deref(),
                priority,
                retry,
                run_at: Some(due.to_string()),
                pending: None,
                lease: None,
            });
            members.push(("scheduled", due, id.clone()));
        } else if let Some(taken) = direct.as_ref().filter(|_| to_hand[i]) {
            handed.push((
                job.priority.unwrap_or(0),
                ClaimedJob {
                    id: JobId::from_store(id.clone()),
                    payload: data.to_vec(),
                    token: 1,
                    attempts: 1,
                    group: None,
                    kind: job.kind.clone(),
                    max_attempts: job.max_attempts.unwrap_or(taken.max_attempts) as u64,
                    retry: job.retry.clone(),
                    // handed over as it is enqueued
                    wait: Some(std::time::Duration::ZERO),
                },
            ));
            rows.push(NewRow {
                id: id.clone(),
                data,
                state: "active",
                max_attempts,
                kind: job.kind.as_deref(),
                priority,
                retry,
                run_at: None,
                pending: None,
                lease: Some(taken.deadline),
            });
        } else {
            // a ready flat job's place in `pending` is written with its row
            let rank = match order.as_mut() {
                Some(o) => o.rank(i64::from(job.priority.unwrap_or(0))),
                None => 0,
            };
            rows.push(NewRow {
                id: id.clone(),
                data,
                state: "pending",
                max_attempts,
                kind: job.kind.as_deref(),
                priority,
                retry,
                run_at: None,
                pending: g.is_none().then_some(rank),
                lease: None,
            });
            match g {
                Some(_) => {
                    tails.push((rank, id.clone()));
                    lane_ready += 1;
                }
                None => flat_ready += 1,
            }
        }
        out.push(Enqueued::New(JobId::from_store(id)));
    }
    db.insert_rows(g, &rows)?;
    for (key, holder, till) in taken {
        dedup_write(db, &key, &holder, till)?;
        // due for the sweep when its window ends, or a minute on (level 0)
        db.zadd("dedup_sweep", till.unwrap_or(db.now() + 60_000) * 32, &key)?;
    }
    if let Some(sweep) = dd.sweep {
        dedup_sweep_write(db, sweep)?;
    }
    if let Some(taken) = direct.take() {
        // claimed, not claimable: no wake and no ring step of their own (not in flat_ready)
        // in claim order: by priority, then as they came
        handed.sort_by_key(|(priority, _)| *priority);
        super::handoff::served(db, taken, handed.into_iter().map(|(_, job)| job).collect());
    }
    db.zadd_many(&members)?;
    if let Some(g) = g {
        let lane = lane(g);
        let ranked: Vec<(&str, i64, String)> = tails.into_iter().map(|(rank, id)| (lane.as_str(), rank, id)).collect();
        db.zadd_many(&ranked)?;
    }
    if let Some(o) = &order {
        o.write(db)?;
    }
    // emq_publish_ready
    match (g, lane_state.as_mut(), flat_state.as_mut()) {
        (Some(g), Some(s), _) if lane_ready > 0 => {
            s.len += lane_ready;
            let claimable = lane_step(db, g, s, lane_ready)?;
            wake(db, claimable, look.paused)?;
        }
        (None, _, Some(s)) if flat_ready > 0 => {
            s.len += flat_ready;
            flat_step(db, s)?;
            wake(db, flat_ready, look.paused)?;
        }
        _ => {}
    }
    Ok(out)
}
