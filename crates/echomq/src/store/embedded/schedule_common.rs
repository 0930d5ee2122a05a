//! What the schedule verbs' twins share (the twins of their `_lib.lua` helpers), and promote's
//! schedule step. A schedule's hash `emq:{q}:schedule:<name>` is its rows of `emq_schedules` (one
//! per field, the same field names), its name is in the sorted set `schedules` and its next slot
//! in `schedule_due`.

use std::collections::BTreeMap;

use rusqlite::params;

use super::common::{flat_read, ready, Count, Flat, Lanes, Order};
use super::db::{Db, NewRow};
use crate::error::Result;
use crate::schedule::{self, Misfire, Overlap, RefillRequest};

/// A schedule's fields (the twin of HGETALL); empty when there is no such schedule.
pub(crate) fn fields(db: &Db, name: &str) -> Result<BTreeMap<String, Vec<u8>>> {
    let mut stmt = db
        .sql()
        .prepare_cached("SELECT field, value FROM emq_schedules WHERE queue = ?1 AND name = ?2")
        .map_err(|e| db.err(e))?;
    let rows = stmt
        .query_map(params![db.queue(), name], |r| {
            Ok((r.get::<_, String>(0)?, r.get::<_, Vec<u8>>(1)?))
        })
        .map_err(|e| db.err(e))?;
    rows.collect::<std::result::Result<_, _>>().map_err(|e| db.err(e))
}

/// HSET of fields of a schedule.
pub(crate) fn set(db: &Db, name: &str, fields: &[(&str, Vec<u8>)]) -> Result<()> {
    let mut stmt = db
        .sql()
        .prepare_cached(
            "INSERT INTO emq_schedules (queue, name, field, value) VALUES (?1, ?2, ?3, ?4) \
             ON CONFLICT (queue, name, field) DO UPDATE SET value = excluded.value",
        )
        .map_err(|e| db.err(e))?;
    for (field, value) in fields {
        stmt.execute(params![db.queue(), name, field, value])
            .map_err(|e| db.err(e))?;
    }
    Ok(())
}

/// HDEL of one field, or DEL of the whole schedule (`field` none).
pub(crate) fn del(db: &Db, name: &str, field: Option<&str>) -> Result<()> {
    db.sql()
        .prepare_cached("DELETE FROM emq_schedules WHERE queue = ?1 AND name = ?2 AND (?3 IS NULL OR field = ?3)")
        .and_then(|mut s| s.execute(params![db.queue(), name, field]))
        .map(drop)
        .map_err(|e| db.err(e))
}

pub(crate) fn text(f: &BTreeMap<String, Vec<u8>>, k: &str) -> Option<String> {
    f.get(k).map(|v| String::from_utf8_lossy(v).into_owned())
}

pub(crate) fn number(f: &BTreeMap<String, Vec<u8>>, k: &str) -> Option<i64> {
    text(f, k).and_then(|s| s.parse().ok())
}

pub(crate) fn num(n: i64) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// What an upsert carries over from the schedule it changes (the twin's `carry`): its stored
/// slots (those already due and not decided are kept) and its backlog of missed slots.
pub(crate) struct Carry {
    pub(crate) slots: Vec<i64>,
    pub(crate) backlog: i64,
}

/// The twin of `emq_schedule_slots_write`: the carried slots after the last decided one and before
/// now, then the given slots after the last decided one and not before now, kept; the cursor at
/// the last given (none: now), the backlog carried (else 0), the version; the due entry at the
/// first kept slot (none: now), none while paused.
pub(crate) fn slots_write(
    db: &Db,
    name: &str,
    given: &[i64],
    last_slot: Option<i64>,
    paused: bool,
    version: i64,
    carry: Option<Carry>,
) -> Result<()> {
    let now = db.now();
    let after = last_slot.unwrap_or(-1);
    let mut keep = Vec::new();
    let mut backlog = 0;
    if let Some(c) = carry {
        keep.extend(c.slots.into_iter().filter(|s| *s > after && *s < now));
        backlog = c.backlog;
    }
    keep.extend(given.iter().copied().filter(|s| *s > after && *s >= now));
    let cursor = given.last().copied().unwrap_or(now);
    set(
        db,
        name,
        &[
            ("slots", schedule::slots_text(&keep).into_bytes()),
            ("cursor", num(cursor)),
            ("backlog", num(backlog)),
            ("version", num(version)),
        ],
    )?;
    if paused {
        db.zrem("schedule_due", name)?;
    } else {
        db.zadd("schedule_due", keep.first().copied().unwrap_or(now), name)?;
    }
    Ok(())
}

/// A schedule's job template (the twin of `emq_template_read`).
#[derive(Clone)]
pub(crate) struct Template {
    data: Vec<u8>,
    pub(crate) group: Option<String>,
    priority: Option<String>,
    max_attempts: Option<String>,
    retry: Option<String>,
    kind: Option<String>,
}

impl Template {
    pub(crate) fn read(f: &BTreeMap<String, Vec<u8>>) -> Self {
        let opt = |k: &str| text(f, k).filter(|s| !s.is_empty());
        Self {
            data: f.get("data").cloned().unwrap_or_default(),
            group: opt("group"),
            priority: opt("priority"),
            max_attempts: opt("max_attempts"),
            retry: opt("retry"),
            kind: opt("kind"),
        }
    }
}

/// Where a fired job joins: its group's lane or the flat set (the twin of promote's `joins`).
#[derive(Default)]
pub(crate) struct Joined {
    pub(crate) lanes: Lanes,
    pub(crate) flat: Option<Flat>,
}

impl Joined {
    pub(crate) fn join(&mut self, db: &Db, g: Option<&str>) -> Result<()> {
        match g {
            Some(g) => self.lanes.read(db, g, Count::Whole).map(drop),
            None if self.flat.is_none() => {
                self.flat = Some(flat_read(db)?);
                Ok(())
            }
            None => Ok(()),
        }
    }
}

/// A fired job written ready from its template (the twin of `emq_fire`).
pub(crate) fn fire(db: &Db, id: &str, t: &Template, joined: &mut Joined, order: &mut Order) -> Result<()> {
    db.insert_rows(
        t.group.as_deref(),
        &[NewRow {
            id: id.to_string(),
            data: &t.data,
            state: "pending",
            max_attempts: t.max_attempts.clone(),
            kind: t.kind.as_deref(),
            priority: t.priority.clone(),
            retry: t.retry.clone(),
            run_at: None,
            pending: None,
            lease: None,
        }],
    )?;
    let len = match t.group.as_deref() {
        Some(g) => &mut joined.lanes.read(db, g, Count::Whole)?.len,
        None => match joined.flat.as_mut() {
            Some(s) => &mut s.len,
            None => return Ok(()),
        },
    };
    ready(db, id, t.group.as_deref(), len, order, t.priority.as_deref())
}

/// One due schedule as promote's schedule step planned it (the twin of the script's `plans`).
pub(crate) struct Planned {
    name: String,
    drop: bool,
    fields: Vec<(&'static str, Vec<u8>)>,
    due: i64,
}

/// What promote's schedule step read and decided before its writes: the plans, the jobs to fire
/// and the refill requests; and the next slot after them (none: `None`).
#[derive(Default)]
pub(crate) struct Fires {
    pub(crate) plans: Vec<Planned>,
    fired: Vec<(String, Template)>,
    pub(crate) refills: Vec<RefillRequest>,
    pub(crate) next_at: Option<i64>,
}

impl Fires {
    /// How many jobs fire.
    pub(crate) fn len(&self) -> usize {
        self.fired.len()
    }

    /// The groups (or the flat set) the fired jobs join, read into `joined` in firing order.
    pub(crate) fn join(&self, db: &Db, joined: &mut Joined) -> Result<()> {
        for (_, t) in &self.fired {
            joined.join(db, t.group.as_deref())?;
        }
        Ok(())
    }
}

/// The reads and decisions of promote's schedule step (the script's, line for line): the due
/// schedules (at most [`schedule::FIRE_MAX`]), each planned by [`schedule::plan`].
pub(crate) fn plan_due(db: &Db, now: i64, grace: i64) -> Result<Fires> {
    let mut out = Fires::default();
    let head = db.zfirst("schedule_due")?;
    let Some((_, at)) = head else { return Ok(out) };
    if at > now {
        out.next_at = Some(at);
        return Ok(out);
    }
    if db.exists_flag("obliterating")? {
        return Ok(out);
    }
    let names = db.zrange_upto("schedule_due", now, schedule::FIRE_MAX as i64)?;
    if let Some((_, at)) = db.zrange_from("schedule_due", names.len() as i64)? {
        out.next_at = Some(at);
    }
    for name in names {
        let f = fields(db, &name)?;
        if !f.contains_key("timing") || text(&f, "paused").as_deref() == Some("1") {
            out.plans.push(Planned {
                name,
                drop: true,
                fields: Vec::new(),
                due: 0,
            });
            continue;
        }
        let g_ms = number(&f, "grace").unwrap_or(grace);
        let misfire: Misfire = text(&f, "misfire").and_then(|m| m.parse().ok()).unwrap_or_default();
        let overlap: Overlap = text(&f, "overlap").and_then(|m| m.parse().ok()).unwrap_or_default();
        let last_job = text(&f, "last_job").filter(|s| !s.is_empty());
        let previous_live = match (overlap, &last_job) {
            (Overlap::Skip, Some(id)) => matches!(
                db.row(id)?.and_then(|r| r.state).as_deref(),
                Some("pending" | "active" | "scheduled")
            ),
            _ => false,
        };
        let slots = schedule::slots_read(&text(&f, "slots").unwrap_or_default());
        let backlog = number(&f, "backlog").unwrap_or(0).max(0) as u64;
        let p = schedule::plan(&slots, backlog, now, g_ms, misfire, overlap, previous_live);
        let (due, fields) = if p.starved {
            // no future slot: nothing decided until a refill brings one
            (now + 1000, Vec::new())
        } else {
            let mut n = 0;
            let mut last = None;
            for s in &p.fire {
                let id = format!("sched:{name}:{s}");
                if !db.row_exists(&id)? {
                    out.fired.push((id.clone(), Template::read(&f)));
                    n += 1;
                    last = Some(id);
                }
            }
            let count = |k: &str| number(&f, k).unwrap_or(0);
            let mut fields = vec![
                ("slots", schedule::slots_text(&p.left).into_bytes()),
                ("backlog", num(0)),
                ("fired", num(count("fired") + n)),
                ("missed", num(count("missed") + p.missed as i64)),
                ("skipped", num(count("skipped") + p.skipped as i64)),
            ];
            if let Some(s) = p.last_slot {
                fields.push(("last_slot", num(s)));
            }
            if let Some(id) = last {
                fields.push(("last_job", id.into_bytes()));
                fields.push(("last_fire", num(now)));
            }
            (p.left[0], fields)
        };
        out.plans.push(Planned {
            name: name.clone(),
            drop: false,
            fields,
            due,
        });
        out.next_at = Some(out.next_at.map_or(due, |n| n.min(due)));
        if schedule::wants_refill(p.left.iter().filter(|s| **s > now).count()) {
            out.refills.push(RefillRequest {
                name: schedule::ScheduleName::new(name.as_str())?,
                version: number(&f, "version").unwrap_or(0).max(0) as u64,
                timing: text(&f, "timing").unwrap_or_default(),
                zone: text(&f, "tz").unwrap_or_else(|| "UTC".into()),
                misfire: text(&f, "misfire").unwrap_or_else(|| "once".into()),
                grace_ms: g_ms,
                cursor: number(&f, "cursor").unwrap_or(0),
                now_ms: now,
            });
        }
    }
    Ok(out)
}

/// The writes of promote's schedule step: each schedule's state and due entry.
pub(crate) fn write_fires_plans(db: &Db, fires: &Fires) -> Result<()> {
    for p in &fires.plans {
        if p.drop {
            db.zrem("schedule_due", &p.name)?;
        } else {
            if !p.fields.is_empty() {
                set(db, &p.name, &p.fields)?;
            }
            db.zadd("schedule_due", p.due, &p.name)?;
        }
    }
    Ok(())
}

/// The writes of promote's schedule step ([`write_fires_plans`]), then the fired jobs made ready
/// (`order` and `joined` read before the first write). Returns each fired job's group (`None`:
/// the flat set), for the ring steps and wakes.
pub(crate) fn write_fires(
    db: &Db,
    fires: &Fires,
    joined: &mut Joined,
    order: &mut Order,
) -> Result<Vec<Option<String>>> {
    write_fires_plans(db, fires)?;
    let mut groups = Vec::with_capacity(fires.fired.len());
    for (id, t) in &fires.fired {
        fire(db, id, t, joined, order)?;
        groups.push(t.group.clone());
    }
    Ok(groups)
}
