//! Schedules: a job template fired at the slots of a cron expression (in an IANA time zone) or of
//! an interval, by every consumer's promote leg, exactly once per slot.
//!
//! The store never parses cron. The slot times are computed here and handed to the store ahead of
//! time: it keeps the next [`SLOTS_AHEAD`] of each schedule (`slots`) and the last one it was given
//! (`cursor`). The promote step that fires a schedule's due slots also decides, in the same atomic
//! step, what is left; when fewer than half of [`SLOTS_AHEAD`] remain it names the schedule in its
//! reply, and the consumer computes the slots after the cursor ([`refill`]) and writes them with
//! [`Store::refill_schedule`](crate::Store::refill_schedule) — accepted only while the schedule's
//! version and cursor are those the request named, so a refill computed from an expression an
//! upsert has since replaced, or a replay of one already written, changes nothing.
//!
//! A fired job's id is `sched:<name>:<slot ms>`: the slot is the id, and the step that fires it
//! moves the schedule past it, so a slot fires once across crashes, replays and any number of
//! consumers, whether or not the row of an earlier fire still exists.

use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use chrono::{TimeZone, Utc};
pub use chrono_tz::Tz;

use crate::error::{Error, NameKind, Result};
use crate::keyspace::{GroupName, JobId};
use crate::retry::{duration_text, parse_duration, RetryPolicy};

/// The longest schedule name, in bytes: a fired job's id `sched:<name>:<slot ms>` stays a valid
/// job id.
pub const SCHEDULE_NAME_MAX_BYTES: usize = 64;

/// How many future slot times the store keeps of each schedule; a promote that leaves fewer than
/// half of them asks for more.
pub const SLOTS_AHEAD: usize = 32;

/// The least grace of a schedule without its own: a slot fired this long after its time is on time.
/// A consumer uses the larger of this and two of its beats.
pub const GRACE_MIN: Duration = Duration::from_secs(5);

/// The shortest interval of an `every` schedule.
pub const EVERY_MIN: Duration = Duration::from_secs(1);

/// The longest interval: a year (a slot a year apart is the most a refill walks for an interval).
pub const EVERY_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// The most due schedules one promote step fires; the rest are due at once in the next.
pub const FIRE_MAX: usize = 64;

/// The most slots a refill walks through after an outage before it counts the rest as missed
/// without listing their times.
const WALK_MAX: usize = 2_000_000;

/// A validated schedule name: a valid name (`[A-Za-z0-9._:-]`) of at most
/// [`SCHEDULE_NAME_MAX_BYTES`] bytes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ScheduleName(String);

impl ScheduleName {
    /// Validates and wraps a schedule name.
    pub fn new(name: impl Into<String>) -> Result<Self> {
        let name = name.into();
        crate::keyspace::check_name(NameKind::Schedule, name.as_bytes())?;
        if name.len() > SCHEDULE_NAME_MAX_BYTES {
            return Err(Error::InvalidName {
                kind: NameKind::Schedule,
                value: name,
                reason: "longer than 64 bytes",
            });
        }
        Ok(Self(name))
    }

    /// The name as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The id of the job fired for the slot at `slot_ms` (Unix ms): `sched:<name>:<slot_ms>`.
    pub fn slot_job(&self, slot_ms: i64) -> JobId {
        JobId::from_store(format!("sched:{}:{slot_ms}", self.0))
    }
}

impl fmt::Display for ScheduleName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl FromStr for ScheduleName {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        Self::new(s)
    }
}

/// When a schedule fires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Timing {
    /// At every multiple of the interval since the Unix epoch (so an edit never shifts the grid):
    /// `every 30s` fires at :00 and :30 of each minute. At least [`EVERY_MIN`], whole milliseconds.
    Every(Duration),
    /// At the times a cron expression matches in a time zone: 5 fields (minute granularity) or 6
    /// (seconds first). A local time a daylight-saving change skips fires at the first valid
    /// time after it; a local time it repeats fires once.
    Cron {
        /// The expression, as given.
        expr: String,
        /// The IANA time zone it is read in.
        zone: Tz,
    },
}

impl Timing {
    /// An interval, checked.
    pub fn every(interval: Duration) -> Result<Self> {
        if interval < EVERY_MIN || interval > EVERY_MAX || !interval.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(Error::InvalidOption {
                field: "every",
                value: duration_text(interval),
                reason: "a whole number of milliseconds, from 1s to 365d",
            });
        }
        Ok(Timing::Every(interval))
    }

    /// A cron expression in `zone` (an IANA name such as `Europe/Berlin`; `UTC` when `None`), checked.
    pub fn cron(expr: &str, zone: Option<&str>) -> Result<Self> {
        let zone = parse_zone(zone.unwrap_or("UTC"))?;
        parse_cron(expr)?;
        Ok(Timing::Cron {
            expr: expr.trim().to_string(),
            zone,
        })
    }

    /// The time zone slots are read in (UTC for an interval).
    pub fn zone(&self) -> Tz {
        match self {
            Timing::Every(_) => Tz::UTC,
            Timing::Cron { zone, .. } => *zone,
        }
    }

    /// The stored text: `every <ms>` or `cron <expr>`.
    pub(crate) fn text(&self) -> String {
        match self {
            Timing::Every(d) => format!("every {}", d.as_millis()),
            Timing::Cron { expr, .. } => format!("cron {expr}"),
        }
    }

    /// The stored text and zone read back.
    pub(crate) fn read(text: &str, zone: &str) -> Result<Self> {
        match text.split_once(' ') {
            Some(("every", ms)) => match ms.parse::<u64>() {
                Ok(ms) => Timing::every(Duration::from_millis(ms)),
                Err(_) => Err(bad_timing(text)),
            },
            Some(("cron", expr)) => Timing::cron(expr, Some(zone)),
            _ => Err(bad_timing(text)),
        }
    }

    /// The slots after `after_ms` (Unix ms), in order, lazily.
    pub fn slots_after(&self, after_ms: i64) -> Box<dyn Iterator<Item = i64> + '_> {
        match self {
            Timing::Every(d) => {
                // bounded as `Timing::every` checks, so a variant built by hand cannot divide by 0
                let step = d.as_millis().clamp(1, EVERY_MAX.as_millis()) as i64;
                let first = (after_ms.div_euclid(step) + 1) * step;
                Box::new((0..).map(move |i| first + i * step))
            }
            Timing::Cron { expr, zone } => {
                let Ok(cron) = parse_cron(expr) else {
                    return Box::new(std::iter::empty());
                };
                let start = zone.timestamp_millis_opt(after_ms).single();
                match start {
                    Some(start) => Box::new(
                        CronSlots {
                            cron,
                            at: start,
                            done: false,
                        }
                        .filter(move |s| *s > after_ms),
                    ),
                    None => Box::new(std::iter::empty()),
                }
            }
        }
    }
}

struct CronSlots {
    cron: croner::Cron,
    at: chrono::DateTime<Tz>,
    done: bool,
}

impl Iterator for CronSlots {
    type Item = i64;
    fn next(&mut self) -> Option<i64> {
        if self.done {
            return None;
        }
        match self.cron.find_next_occurrence(&self.at, false) {
            Ok(next) => {
                self.at = next;
                Some(next.timestamp_millis())
            }
            Err(_) => {
                self.done = true;
                None
            }
        }
    }
}

fn bad_timing(text: &str) -> Error {
    Error::InvalidOption {
        field: "timing",
        value: text.to_string(),
        reason: "`every <ms>` or `cron <expression>`",
    }
}

fn parse_zone(zone: &str) -> Result<Tz> {
    zone.parse::<Tz>().map_err(|_| Error::InvalidOption {
        field: "tz",
        value: zone.to_string(),
        reason: "an IANA time zone such as UTC or Europe/Berlin",
    })
}

fn parse_cron(expr: &str) -> Result<croner::Cron> {
    let fields = expr.split_whitespace().count();
    let refuse = || Error::InvalidOption {
        field: "cron",
        value: expr.to_string(),
        reason: "a cron expression of 5 fields, or 6 with seconds first",
    };
    if !(5..=6).contains(&fields) {
        return Err(refuse());
    }
    croner::Cron::from_str(expr.trim()).map_err(|_| refuse())
}

impl fmt::Display for Timing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Timing::Every(d) => write!(f, "every {}", duration_text(*d)),
            Timing::Cron { expr, zone } => write!(f, "cron '{expr}' {zone}"),
        }
    }
}

/// What a schedule does with slots missed by more than its grace (every consumer down, an outage).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Misfire {
    /// Fire nothing for them.
    Skip,
    /// One catch-up job, for the latest of them (the default).
    #[default]
    Once,
    /// One job per missed slot, at most this many (the latest).
    All(u32),
}

/// The most catch-up jobs `all` fires when no bound is given.
pub const MISFIRE_ALL_DEFAULT: u32 = 100;

/// The largest bound `all:N` takes: a refill lists that many missed slots by time, and the store
/// keeps them on the schedule until they fire.
pub const MISFIRE_ALL_MAX: u32 = 1000;

impl Misfire {
    /// How many of the latest missed slots a refill lists by time (the rest are counted).
    pub(crate) fn listed(self) -> usize {
        match self {
            Misfire::All(n) => n.max(1) as usize,
            _ => 1,
        }
    }
}

impl fmt::Display for Misfire {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Misfire::Skip => f.write_str("skip"),
            Misfire::Once => f.write_str("once"),
            Misfire::All(n) => write!(f, "all:{n}"),
        }
    }
}

impl FromStr for Misfire {
    type Err = Error;
    /// `skip`, `once`, `all` or `all:N` (N ≥ 1).
    fn from_str(s: &str) -> Result<Self> {
        let refuse = || Error::InvalidOption {
            field: "misfire",
            value: s.to_string(),
            reason: "skip, once, all or all:N (1 <= N <= 1000)",
        };
        match s {
            "skip" => Ok(Misfire::Skip),
            "once" => Ok(Misfire::Once),
            "all" => Ok(Misfire::All(MISFIRE_ALL_DEFAULT)),
            _ => match s.strip_prefix("all:").map(str::parse::<u32>) {
                Some(Ok(n)) if (1..=MISFIRE_ALL_MAX).contains(&n) => Ok(Misfire::All(n)),
                _ => Err(refuse()),
            },
        }
    }
}

/// Whether a slot fires while the schedule's previous job is still waiting or running.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Overlap {
    /// Fire anyway (the default).
    #[default]
    Allow,
    /// Skip the slot, and count it.
    Skip,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Overlap::Allow => "allow",
            Overlap::Skip => "skip",
        })
    }
}

impl FromStr for Overlap {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "allow" => Ok(Overlap::Allow),
            "skip" => Ok(Overlap::Skip),
            _ => Err(Error::InvalidOption {
                field: "overlap",
                value: s.to_string(),
                reason: "allow or skip",
            }),
        }
    }
}

/// The job a schedule fires: a payload and the options of an enqueued job.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JobTemplate {
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// The group the job runs in, if any.
    pub group: Option<GroupName>,
    /// 0 (the default, the most urgent) to [`PRIORITY_MAX`](crate::job::PRIORITY_MAX).
    pub priority: u8,
    /// The job's attempt budget; absent = the consumer's default.
    pub max_attempts: Option<u32>,
    /// The job's own retry curve (a storable one).
    pub retry: Option<RetryPolicy>,
    /// The job's kind, for a worker that routes by kind.
    pub kind: Option<String>,
}

/// A schedule: its name, when it fires, the job it fires and its policies.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Schedule {
    /// Its name, unique within its queue.
    pub name: ScheduleName,
    /// When it fires.
    pub timing: Timing,
    /// The job each slot fires.
    pub template: JobTemplate,
    /// What it does with slots missed by more than the grace.
    pub misfire: Misfire,
    /// Whether a slot fires while the previous job is still waiting or running.
    pub overlap: Overlap,
    /// How late a fire may be and still be on time; `None`: the firing consumer's default, the
    /// larger of [`GRACE_MIN`] and two of its beats.
    pub grace: Option<Duration>,
}

impl Schedule {
    /// A schedule with the default policies (misfire `once`, overlap `allow`, the consumer's grace).
    pub fn new(name: ScheduleName, timing: Timing, template: JobTemplate) -> Self {
        Self {
            name,
            timing,
            template,
            misfire: Misfire::default(),
            overlap: Overlap::default(),
            grace: None,
        }
    }

    /// Checks what the store cannot: the template's priority, budget, kind and retry curve.
    pub(crate) fn check(&self) -> Result<()> {
        let t = &self.template;
        if t.priority > crate::job::PRIORITY_MAX {
            return Err(Error::InvalidOption {
                field: "priority",
                value: t.priority.to_string(),
                reason: "0 to 9",
            });
        }
        if t.max_attempts == Some(0) {
            return Err(Error::InvalidOption {
                field: "max_attempts",
                value: "0".into(),
                reason: "at least 1",
            });
        }
        if let Some(kind) = &t.kind {
            crate::store::check_kind(kind)?;
        }
        if t.retry.as_ref().is_some_and(|r| !r.is_storable()) {
            return Err(Error::InvalidOption {
                field: "retry",
                value: "a function".into(),
                reason: "a stored retry policy (fixed or exponential)",
            });
        }
        if let Timing::Every(d) = self.timing {
            Timing::every(d)?;
        }
        if let Misfire::All(n) = self.misfire {
            if !(1..=MISFIRE_ALL_MAX).contains(&n) {
                return Err(Error::InvalidOption {
                    field: "misfire",
                    value: self.misfire.to_string(),
                    reason: "all:N with 1 <= N <= 1000",
                });
            }
        }
        Ok(())
    }

    /// The fields the store keeps of the definition (the hash `emq:{q}:schedule:<name>`, the
    /// embedded row's columns): the same names in both stores.
    pub(crate) fn fields(&self) -> Vec<(&'static str, Vec<u8>)> {
        let t = &self.template;
        vec![
            ("timing", self.timing.text().into_bytes()),
            ("tz", self.timing.zone().name().as_bytes().to_vec()),
            ("data", t.payload.clone()),
            ("group", t.group.as_ref().map(|g| g.as_str().into()).unwrap_or_default()),
            (
                "priority",
                match t.priority {
                    0 => Vec::new(),
                    p => p.to_string().into_bytes(),
                },
            ),
            (
                "max_attempts",
                t.max_attempts.map(|n| n.to_string().into_bytes()).unwrap_or_default(),
            ),
            (
                "retry",
                t.retry.as_ref().map(|r| r.to_string().into_bytes()).unwrap_or_default(),
            ),
            ("kind", t.kind.clone().unwrap_or_default().into_bytes()),
            ("misfire", self.misfire.to_string().into_bytes()),
            ("overlap", self.overlap.to_string().into_bytes()),
            (
                "grace",
                self.grace
                    .map(|g| g.as_millis().to_string().into_bytes())
                    .unwrap_or_default(),
            ),
        ]
    }
}

/// A schedule as the store holds it: its definition and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleInfo {
    /// The definition.
    pub schedule: Schedule,
    /// Paused: no slot fires (and none is missed) until resumed.
    pub paused: bool,
    /// The next slot the store holds (Unix ms), if any.
    pub next_slot: Option<i64>,
    /// The last slot decided (fired, skipped or missed), Unix ms.
    pub last_slot: Option<i64>,
    /// When the last job was fired (store time, Unix ms).
    pub last_fire: Option<i64>,
    /// The id of the last job fired.
    pub last_job: Option<JobId>,
    /// Jobs fired for slots.
    pub fired: u64,
    /// Slots missed by more than the grace (fired late or not at all, by the misfire policy).
    pub missed: u64,
    /// Slots skipped by the overlap policy.
    pub skipped: u64,
    /// The version: raised by every upsert and resume.
    pub version: u64,
}

impl ScheduleInfo {
    /// Reads the stored fields (both stores' names) of schedule `name`.
    pub(crate) fn read(name: &str, f: &BTreeMap<String, Vec<u8>>) -> Result<Self> {
        let text = |k: &str| {
            f.get(k)
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default()
        };
        let opt = |k: &str| Some(text(k)).filter(|s| !s.is_empty());
        let num = |k: &str| opt(k).and_then(|s| s.parse::<i64>().ok());
        let count = |k: &str| num(k).unwrap_or(0).max(0) as u64;
        let corrupt = |what: &str| Error::Store {
            verb: "list_schedules",
            reason: format!("schedule {name}: {what}"),
        };
        let timing = Timing::read(&text("timing"), &text("tz")).map_err(|e| corrupt(&e.to_string()))?;
        let template = JobTemplate {
            payload: f.get("data").cloned().unwrap_or_default(),
            group: opt("group").and_then(|g| GroupName::new(g).ok()),
            priority: num("priority").unwrap_or(0).clamp(0, 9) as u8,
            max_attempts: num("max_attempts").map(|n| n.max(1) as u32),
            retry: opt("retry").and_then(|r| r.parse().ok()),
            kind: opt("kind"),
        };
        let schedule = Schedule {
            name: ScheduleName::new(name).map_err(|e| corrupt(&e.to_string()))?,
            timing,
            template,
            misfire: opt("misfire").and_then(|m| m.parse().ok()).unwrap_or_default(),
            overlap: opt("overlap").and_then(|m| m.parse().ok()).unwrap_or_default(),
            grace: num("grace").map(|ms| Duration::from_millis(ms.max(0) as u64)),
        };
        Ok(Self {
            schedule,
            paused: text("paused") == "1",
            next_slot: slots_read(&text("slots")).into_iter().next(),
            last_slot: num("last_slot"),
            last_fire: num("last_fire"),
            last_job: opt("last_job").map(JobId::from_store),
            fired: count("fired"),
            missed: count("missed"),
            skipped: count("skipped"),
            version: count("version"),
        })
    }
}

/// The stored slot list read back (a malformed entry is dropped).
pub(crate) fn slots_read(text: &str) -> Vec<i64> {
    text.split(',').filter_map(|s| s.parse().ok()).collect()
}

/// How far before its own clock a client starts the slots of an upsert: the store keeps those not
/// before its clock, so a client clock ahead of the store's by up to this loses no slot.
pub const CLOCK_MARGIN_MS: i64 = 60_000;

/// The first slots of a new or changed schedule: those in the [`CLOCK_MARGIN_MS`] before `now_ms`
/// (the store drops those before its own clock), then the [`SLOTS_AHEAD`] after `now_ms`.
pub fn first_slots(timing: &Timing, now_ms: i64) -> Vec<i64> {
    let mut out = Vec::new();
    let mut ahead = 0;
    for s in timing.slots_after(now_ms - CLOCK_MARGIN_MS - 1) {
        if s > now_ms {
            ahead += 1;
        }
        out.push(s);
        if ahead >= SLOTS_AHEAD {
            break;
        }
    }
    out
}

/// A promote's request for more slots of a schedule, and what computing them needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RefillRequest {
    /// The schedule.
    pub name: ScheduleName,
    /// Its version when asked; a refill of another version is refused.
    pub version: u64,
    /// Its stored timing text and zone.
    pub timing: String,
    /// Its time zone's name.
    pub zone: String,
    /// Its misfire policy's text.
    pub misfire: String,
    /// Its grace in ms (its own, else the consumer's).
    pub grace_ms: i64,
    /// The last slot the store was given (Unix ms): the refill starts after it.
    pub cursor: i64,
    /// The store's time when asked (Unix ms).
    pub now_ms: i64,
}

/// The slots of a refill: after the cursor, the latest missed ones the misfire policy needs by
/// time (the older counted in `omitted`), those within the grace, then [`SLOTS_AHEAD`] future ones.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refill {
    /// Missed slots not listed by time: the store adds them to the missed count.
    pub omitted: u64,
    /// The slots, ascending.
    pub slots: Vec<i64>,
}

/// Computes the refill a request asks for.
pub fn refill(req: &RefillRequest) -> Result<Refill> {
    let timing = Timing::read(&req.timing, &req.zone)?;
    let misfire: Misfire = req.misfire.parse().unwrap_or_default();
    let keep = misfire.listed();
    let late_before = req.now_ms - req.grace_ms;
    let mut late: VecDeque<i64> = VecDeque::with_capacity(keep + 1);
    let (mut omitted, mut slots, mut future, mut walked) = (0u64, Vec::new(), 0usize, 0usize);
    let mut after = req.cursor;
    // an interval's missed slots are counted without walking them
    if let Timing::Every(d) = timing {
        let step = d.as_millis() as i64;
        let last_late = (late_before - 1).div_euclid(step) * step;
        let first = (req.cursor.div_euclid(step) + 1) * step;
        if last_late >= first {
            let n = ((last_late - first) / step + 1) as usize;
            if n > keep {
                omitted = (n - keep) as u64;
                after = first + (n - keep - 1) as i64 * step;
            }
        }
    }
    for s in timing.slots_after(after) {
        walked += 1;
        if s < late_before {
            late.push_back(s);
            if late.len() > keep {
                late.pop_front();
                omitted += 1;
            }
            if walked >= WALK_MAX {
                tracing::warn!(schedule = %req.name, "refill: more than {WALK_MAX} missed slots walked; the rest are not counted");
                return refill(&RefillRequest {
                    cursor: late_before,
                    ..req.clone()
                })
                .map(|r| Refill {
                    omitted: r.omitted + omitted + late.len() as u64,
                    slots: r.slots,
                });
            }
            continue;
        }
        if s > req.now_ms {
            future += 1;
        }
        slots.push(s);
        if future >= SLOTS_AHEAD {
            break;
        }
    }
    let mut all: Vec<i64> = late.into_iter().collect();
    all.extend(slots);
    Ok(Refill { omitted, slots: all })
}

/// This machine's clock, Unix ms: where the slots of an upsert start (the store keeps those not
/// before its own clock).
pub(crate) fn wall_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A slot time (Unix ms) as a wall time in `zone`, for display: `2026-12-05 02:30:00 CET`.
pub fn local_text(ms: i64, zone: Tz) -> String {
    match utc(ms) {
        Some(t) => t.with_timezone(&zone).format("%Y-%m-%d %H:%M:%S %Z").to_string(),
        None => ms.to_string(),
    }
}

/// The store's time as a UTC date, for display.
pub fn utc(ms: i64) -> Option<chrono::DateTime<Utc>> {
    Utc.timestamp_millis_opt(ms).single()
}

/// A duration in the schedule's text form, parsed (`30s`, `5m`, `1500ms`).
pub fn parse_interval(text: &str) -> Result<Duration> {
    parse_duration(text).ok_or_else(|| Error::InvalidOption {
        field: "every",
        value: text.to_string(),
        reason: "a whole number and a unit: ms, s, m, h or d (e.g. 30s)",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Datelike, NaiveDate, Timelike};

    fn ny(y: i32, m: u32, d: u32) -> i64 {
        let tz: Tz = "America/New_York".parse().unwrap();
        tz.from_local_datetime(&NaiveDate::from_ymd_opt(y, m, d).unwrap().and_hms_opt(0, 0, 0).unwrap())
            .single()
            .unwrap()
            .timestamp_millis()
    }

    #[test]
    fn a_daily_new_york_slot_fires_once_on_every_day_of_a_year_across_both_dst_changes() {
        let t = Timing::cron("30 2 * * *", Some("America/New_York")).unwrap();
        let zone = t.zone();
        let start = ny(2026, 1, 1);
        let end = ny(2027, 1, 1);
        let slots: Vec<i64> = t.slots_after(start - 1).take_while(|s| *s < end).collect();
        assert_eq!(slots.len(), 365, "one slot per day of 2026");
        let mut days = std::collections::BTreeSet::new();
        for s in &slots {
            let local = zone.timestamp_millis_opt(*s).unwrap();
            assert!(days.insert(local.ordinal()), "two slots on day {}", local.date_naive());
            // 2026-03-08 has no 02:30 (clocks jump 02:00 -> 03:00): the first valid time after it
            if local.month() == 3 && local.day() == 8 {
                assert_eq!((local.hour(), local.minute()), (3, 0), "{local}");
            } else {
                assert_eq!((local.hour(), local.minute()), (2, 30), "{local}");
            }
        }
        // 2026-11-01 repeats 01:00-02:00 only; an hourly-at-:30 schedule fires 01:30 once per instant
        let hourly = Timing::cron("30 1 * * *", Some("America/New_York")).unwrap();
        let fall: Vec<i64> = hourly
            .slots_after(ny(2026, 11, 1) - 1)
            .take_while(|s| *s < ny(2026, 11, 2))
            .collect();
        assert_eq!(fall.len(), 1, "the repeated 01:30 fires once: {fall:?}");
    }

    #[test]
    fn an_interval_keeps_its_grid_at_multiples_since_the_epoch() {
        let t = Timing::every(Duration::from_secs(30)).unwrap();
        let s: Vec<i64> = t.slots_after(61_000).take(3).collect();
        assert_eq!(s, vec![90_000, 120_000, 150_000]);
        assert_eq!(t.slots_after(90_000).next(), Some(120_000));
    }

    #[test]
    fn six_fields_fire_by_the_second_and_bad_expressions_and_zones_are_refused() {
        let t = Timing::cron("*/10 * * * * *", None).unwrap();
        let s: Vec<i64> = t.slots_after(0).take(2).collect();
        assert_eq!(s, vec![10_000, 20_000]);
        assert!(matches!(
            Timing::cron("* * *", None),
            Err(Error::InvalidOption { field: "cron", .. })
        ));
        assert!(matches!(
            Timing::cron("61 * * * *", None),
            Err(Error::InvalidOption { field: "cron", .. })
        ));
        assert!(matches!(
            Timing::cron("* * * * *", Some("Mars/Olympus")),
            Err(Error::InvalidOption { field: "tz", .. })
        ));
        assert!(Timing::every(Duration::from_millis(500)).is_err());
        assert!(ScheduleName::new("x".repeat(65)).is_err());
        assert!(ScheduleName::new("x".repeat(64)).is_ok());
        assert!(ScheduleName::new("bad name").is_err());
    }

    #[test]
    fn bounds_refuse_what_would_overflow_or_grow_without_end() {
        assert!(Timing::every(EVERY_MAX).is_ok());
        assert!(Timing::every(EVERY_MAX + Duration::from_millis(1)).is_err());
        assert!(Timing::every(Duration::from_secs(1 << 61)).is_err());
        // a variant built by hand still gives slots, never a division by zero
        let zero = Timing::Every(Duration::ZERO);
        assert_eq!(zero.slots_after(10).take(2).collect::<Vec<_>>(), [11, 12]);
        assert_eq!("all:1000".parse::<Misfire>().unwrap(), Misfire::All(1000));
        for bad in ["all:0", "all:1001", "all:4294967295"] {
            assert!(bad.parse::<Misfire>().is_err(), "{bad}");
        }
        let every = Timing::every(Duration::from_secs(1)).unwrap();
        let mut s = Schedule::new(ScheduleName::new("s").unwrap(), every, JobTemplate::default());
        s.misfire = Misfire::All(u32::MAX);
        assert!(matches!(s.check(), Err(Error::InvalidOption { field: "misfire", .. })));
        s.timing = Timing::Every(Duration::from_secs(1 << 61));
        s.misfire = Misfire::Once;
        assert!(matches!(s.check(), Err(Error::InvalidOption { field: "every", .. })));
    }

    #[test]
    fn the_first_slots_start_a_margin_before_the_clock_and_reach_past_it() {
        let every = Timing::every(Duration::from_secs(1)).unwrap();
        let now = 1_000_000_500;
        let slots = first_slots(&every, now);
        assert_eq!(slots.first(), Some(&(now - CLOCK_MARGIN_MS + 500)));
        assert_eq!(slots.iter().filter(|s| **s > now).count(), SLOTS_AHEAD);
        assert!(slots.windows(2).all(|w| w[0] < w[1]));
        let daily = Timing::cron("30 2 * * *", None).unwrap();
        assert_eq!(first_slots(&daily, now).len(), SLOTS_AHEAD, "none in the margin");
    }

    #[test]
    fn the_stored_text_reads_back() {
        for t in [
            Timing::every(Duration::from_secs(90)).unwrap(),
            Timing::cron("0 9 * * 1-5", Some("Europe/Berlin")).unwrap(),
        ] {
            assert_eq!(Timing::read(&t.text(), t.zone().name()).unwrap(), t);
        }
        for m in ["skip", "once", "all:3"] {
            assert_eq!(m.parse::<Misfire>().unwrap().to_string(), m);
        }
        assert!("all:0".parse::<Misfire>().is_err());
        assert!("sometimes".parse::<Overlap>().is_err());
    }

    fn req(cursor: i64, now: i64, misfire: &str) -> RefillRequest {
        RefillRequest {
            name: ScheduleName::new("s").unwrap(),
            version: 1,
            timing: "every 1000".into(),
            zone: "UTC".into(),
            misfire: misfire.into(),
            grace_ms: 500,
            cursor,
            now_ms: now,
        }
    }

    #[test]
    fn a_refill_after_an_outage_lists_the_misses_the_policy_needs_and_counts_the_rest() {
        // cursor at 10 s, now 100.2 s: slots 11..=99 s are late (89), 100 s on time
        let once = refill(&req(10_000, 100_200, "once")).unwrap();
        assert_eq!(once.omitted, 88);
        assert_eq!(once.slots[0], 99_000);
        assert_eq!(once.slots[1], 100_000);
        assert_eq!(once.slots.len(), 2 + SLOTS_AHEAD);
        let all = refill(&req(10_000, 100_200, "all:5")).unwrap();
        assert_eq!(all.omitted, 84);
        assert_eq!(&all.slots[..6], &[95_000, 96_000, 97_000, 98_000, 99_000, 100_000]);
        // a cron schedule walks its slots and counts the same
        let mut cron = req(10_000, 100_200, "once");
        cron.timing = "cron * * * * * *".into();
        assert_eq!(refill(&cron).unwrap(), once);
        // nothing missed: the future alone
        let fresh = refill(&req(100_000, 100_200, "once")).unwrap();
        assert_eq!((fresh.omitted, fresh.slots.len()), (0, SLOTS_AHEAD));
        assert_eq!(fresh.slots[0], 101_000);
    }
}
