//! The model-based property test: random sequences of verbs run against a small reference model
//! of the queue (written here, step by step after the scripts) and, in lockstep, against both
//! stores — the Redis store and a fresh embedded store on its own temporary file.
//!
//! Verbs: enqueue, genqueue, claim (1–8, short or long lease), complete, complete_many,
//! complete_cancelled, update_data, retry (at once or much later), discard, release (at once or much
//! later: the attempt given back), reap and sweep_stalled after the short leases lapsed, remove
//! (forced or not), redrive, cancel, promote_job, set_group_limit (a group's or the default),
//! set_rate_limit (the queue's, the default or a group's: one start an hour, a burst of 1 or 2, or
//! none — so within a sequence a limit admits its burst and then holds its target back), and an
//! enqueue or genqueue while a consumer is parked offering a claim: it must be handed what a
//! claim right after that enqueue returns when the enqueue woke the queue, else nothing (the
//! embedded store serves the offer in the enqueue's transaction; Redis runs that claim).
//! Every store reply must equal the model's. After every step, on each store:
//!
//! * each job is in exactly one place (pending / a lane / scheduled / active / dead / gone) and its
//!   row's `state` (and attempts, group, budget, stalls, last error, cancel mark, payload) agrees;
//! * `list` gives the model's order for pending (claim order per member), scheduled and active;
//! * `counts` and its counters agree;
//! * the slot invariant: each group's `a:<g>` equals its jobs in `active`;
//! * the ring and the throttled groups hold no duplicate and together exactly the members whose
//!   `r:` flag is set, and the ring every eligible member not throttled (the one documented
//!   exception: a raised queue default reaches a group at its next settle);
//! * the fencing token (`attempts + free`) never decreases while a row lives;
//! * the pending tally counts exactly the ready jobs its rule counts, and `pending_since` holds
//!   its fields.
//!
//! Time: a short lease is 20 ms plus the claim's index (so deadlines order the claims strictly,
//! as the model does), a long one ten minutes; reap and sweep wait until every short lease has
//! lapsed. Delays are an hour plus a counter, so due times are distinct and nothing falls due.
//!
//! Failures shrink to a short sequence; proptest keeps it in `tests/model.proptest-regressions`
//! and replays it first on every run. Minimal sequences found are also kept below as named tests.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/probe_conn.rs"]
mod probe_conn;
#[path = "support/redis_server.rs"]
mod redis_server;

use echomq::store::RetryRequest;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, SystemTime};

use echomq::keyspace::QueueKeys;
use echomq::store::embedded::EmbeddedStore;
use echomq::store::redis::RedisStore;
use echomq::store::{
    CancelOutcome, Completion, Discarded, Enqueued, LimitTarget, PromotedJob, Redriven, Removed, Retried,
    SettleOptions, Settled, StalledPolicy, Store,
};
use echomq::{GroupName, JobId, JobState, NewJob, QueueName, RateLimit, RateTarget};
use proptest::prelude::*;
use proptest::test_runner::{Config, FileFailurePersistence, TestCaseError};

const GROUPS: [&str; 3] = ["g0", "g1", "g2"];
const CALLER_IDS: [&str; 4] = ["c0", "c1", "c2", "c3"];
/// An id never enqueued.
const NOWHERE: &str = "nowhere";
const SHORT_LEASE_MS: u64 = 20;
const LONG_LEASE_MS: u64 = 600_000;
const LATER_MS: u64 = 3_600_000;
/// Larger than any case's job count: reap and sweep take every lapsed lease.
const NO_LIMIT: u32 = 1000;
const RETRY_ERROR: &str = "boom";
const DISCARD_ERROR: &str = "thrown away";
const LAST_ATTEMPT: &str = "lease expired on the last attempt";
const STALLED: &str = "stalled";
const FLAT: &str = "~";
/// The attempt budget of a parked consumer's offer.
const HANDED_MAX_ATTEMPTS: u32 = 3;

// ---------------------------------------------------------------------------------------------
// The operations, as generated (state-free: a pick is resolved against the model when it runs)
// ---------------------------------------------------------------------------------------------

/// One new job of an enqueue/genqueue batch.
#[derive(Debug, Clone)]
struct Spec {
    /// A caller id (an index into `CALLER_IDS`), else generated.
    id: Option<u8>,
    /// Delayed by an hour (plus a counter).
    later: bool,
    max_attempts: Option<u32>,
    /// 0 (the default, the most urgent) to 9.
    priority: u8,
    payload: u8,
}

/// Which jobs a pick chooses among; when none is there, among the living rows; `Any`: among every
/// id ever seen (gone or not) and one never enqueued.
#[derive(Debug, Clone, Copy)]
enum Among {
    Active,
    Pending,
    Scheduled,
    Dead,
    Any,
}

/// The token a holder verb presents.
#[derive(Debug, Clone, Copy)]
enum Token {
    Current,
    Old,
    Next,
}

#[derive(Debug, Clone, Copy)]
struct Pick {
    among: Among,
    index: u8,
    token: Token,
}

#[derive(Debug, Clone)]
enum Op {
    Enqueue(Vec<Spec>),
    Genqueue(u8, Vec<Spec>),
    Claim {
        n: u32,
        short: bool,
        max_attempts: u32,
    },
    Complete(Pick),
    CompleteMany(Vec<Pick>),
    CompleteCancelled(Pick),
    UpdateData(Pick, u8),
    Retry {
        pick: Pick,
        later: bool,
        max_attempts: u32,
    },
    Discard(Pick),
    /// The holder gives the job back, its attempt unused: ready at once, or much later.
    Release {
        pick: Pick,
        later: bool,
    },
    /// Reap at most `limit` lapsed leases, with a redelivery budget or none.
    Reap {
        limit: u32,
        max_redeliveries: Option<u32>,
    },
    Sweep {
        max_stalled: u32,
        limit: u32,
    },
    Remove {
        pick: Pick,
        force: bool,
    },
    Redrive {
        pick: Pick,
        extra: u32,
    },
    Cancel(Pick),
    PromoteJob(Pick),
    SetGroupLimit {
        group: Option<u8>,
        limit: u32,
    },
    /// A rate limit of one start an hour with this burst (`None`: removed) for the queue (target
    /// 0), the groups' default (1) or a group (2 and up).
    SetRateLimit {
        target: u8,
        burst: Option<u32>,
    },
    /// An enqueue (a genqueue into `group`) while a consumer is parked offering a claim of `n`.
    Handed {
        n: u32,
        group: Option<u8>,
        specs: Vec<Spec>,
    },
}

// ---------------------------------------------------------------------------------------------
// Resolved steps and replies
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone)]
struct NewSpec {
    id: Option<String>,
    delay_ms: Option<u64>,
    max_attempts: Option<u32>,
    priority: u8,
    payload: Vec<u8>,
}

#[derive(Debug, Clone)]
enum Step {
    Enqueue(Vec<NewSpec>),
    Genqueue(String, Vec<NewSpec>),
    /// `index` orders the claims' lease deadlines.
    Claim {
        n: u32,
        long: bool,
        index: u64,
        lease_ms: u64,
        max_attempts: u32,
    },
    Complete(String, u64),
    CompleteMany(Vec<(String, u64)>),
    CompleteCancelled(String, u64),
    UpdateData(String, u64, Vec<u8>),
    /// `delay_ms` 0 = ready at once.
    Retry {
        id: String,
        token: u64,
        delay_ms: u64,
        max_attempts: u32,
    },
    Discard(String, u64),
    /// (id, token, delay_ms): `delay_ms` 0 = ready at once.
    Release(String, u64, u64),
    /// (limit)
    Reap(u32, Option<u32>),
    /// (max_stalled, limit)
    Sweep(u32, u32),
    Remove(String, bool),
    Redrive(String, u32),
    Cancel(String),
    PromoteJob(String),
    SetGroupLimit(Option<String>, u32),
    SetRateLimit(RateOn, Option<u32>),
    /// `enqueue` (an Enqueue or Genqueue step) while a consumer parks offering a claim of `n`
    /// under a long lease ordered by `index`. It gets what a claim right after the enqueue would
    /// when the enqueue `woke` the queue, else nothing: the embedded store serves the offer in the
    /// enqueue's transaction, the Redis store (no hand-off) runs the claim after it.
    Handed {
        enqueue: Box<Step>,
        n: u32,
        index: u64,
        lease_ms: u64,
        woke: bool,
    },
}

/// What a model rate limit applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum RateOn {
    Queue,
    Default,
    Group(String),
}

/// The one rate the model sets: a start an hour (so none is admitted again within a sequence).
const RATE_PER_MS: u64 = 3_600_000;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Reply {
    Enqueued(Vec<Enqueued>),
    /// (id, payload, attempts, group) per job, in claim order.
    Claimed(Vec<(String, Vec<u8>, u64, Option<String>)>),
    Settled(Settled),
    SettledMany(Vec<Settled>),
    Retried(Retried),
    Discarded(Discarded),
    Reaped(u64),
    /// (recovered, dead), each in the order their leases lapsed.
    Swept(Vec<String>, Vec<String>),
    Removed(Removed),
    Redriven(Redriven),
    Cancelled(CancelOutcome),
    PromotedJob(PromotedJob),
    /// An enqueue's reply and the jobs handed over (as `Claimed`).
    Handed(Vec<Enqueued>, Vec<(String, Vec<u8>, u64, Option<String>)>),
    Unit,
}

// ---------------------------------------------------------------------------------------------
// The reference model
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Place {
    Pending,
    Scheduled,
    Active,
    Dead,
}

impl Place {
    fn state(self) -> JobState {
        match self {
            Place::Pending => JobState::Pending,
            Place::Scheduled => JobState::Scheduled,
            Place::Active => JobState::Active,
            Place::Dead => JobState::Dead,
        }
    }
}

/// (long lease, claim index): the order of lease deadlines.
type LeaseKey = (bool, u64);

#[derive(Debug, Clone)]
struct Row {
    payload: Vec<u8>,
    place: Place,
    /// The fencing token: claims in all.
    attempts: u64,
    /// Claims that used no attempt (releases).
    free: u64,
    group: Option<String>,
    max_attempts: Option<u64>,
    priority: u8,
    stalled: u64,
    last_error: Option<String>,
    cancel: Option<String>,
    /// Its score in `pending` (or its lane) while ready.
    score: u64,
    /// Its due order while scheduled.
    due: u64,
    /// Its lease while active.
    lease: LeaseKey,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Metrics {
    completed: u64,
    cancelled: u64,
    failed: u64,
    retried: u64,
    stalled: u64,
    reaped: u64,
}

#[derive(Debug, Default)]
struct Model {
    /// emq:{q}:id
    seq: u64,
    /// The last rank given (emq:{q}:order's clock, as an order: every job made ready ranks after
    /// every earlier one; recovered jobs rank 0)
    rank: u64,
    rows: BTreeMap<String, Row>,
    /// Every id ever enqueued (their rows may be gone).
    known: BTreeSet<String>,
    pending: BTreeSet<(u64, String)>,
    lanes: BTreeMap<String, BTreeSet<(u64, String)>>,
    ring: VecDeque<String>,
    flags: BTreeSet<String>,
    active_of: BTreeMap<String, u64>,
    limits: BTreeMap<String, u64>,
    default_limit: Option<u64>,
    scheduled: BTreeSet<(u64, String)>,
    active: BTreeSet<(LeaseKey, String)>,
    dead: BTreeSet<String>,
    metrics: Metrics,
    claims: u64,
    /// The rate limits' bursts: the queue's, the groups' default, each group's own.
    rate_queue: Option<u64>,
    rate_default: Option<u64>,
    rate_own: BTreeMap<String, u64>,
    /// Starts since the queue limit was set (its TAT); each limited group's starts since its limit
    /// was set and the claim of the first of them (its next admission: an hour after that claim).
    queue_used: u64,
    group_used: BTreeMap<String, (u64, u64)>,
    /// Claims the store ran (the order of their clocks).
    claim_seq: u64,
    /// The groups held back (emq:{q}:throttled), by admission: (first start's claim, name).
    throttled: BTreeSet<(u64, String)>,
}

impl Model {
    // --- resolution of generated ops into concrete steps ---

    fn candidates(&self, among: Among) -> Vec<String> {
        let place = match among {
            Among::Active => Some(Place::Active),
            Among::Pending => Some(Place::Pending),
            Among::Scheduled => Some(Place::Scheduled),
            Among::Dead => Some(Place::Dead),
            Among::Any => None,
        };
        let mut c: Vec<String> = match place {
            Some(p) => self
                .rows
                .iter()
                .filter(|(_, r)| r.place == p)
                .map(|(id, _)| id.clone())
                .collect(),
            None => Vec::new(),
        };
        if c.is_empty() {
            c = self.rows.keys().cloned().collect();
        }
        if c.is_empty() || place.is_none() {
            c = self.known.iter().cloned().collect();
            c.push(NOWHERE.to_string());
        }
        c
    }

    fn pick(&self, p: Pick) -> (String, u64) {
        let c = self.candidates(p.among);
        let id = c[p.index as usize % c.len()].clone();
        let held = self.rows.get(&id).map_or(0, |r| r.attempts);
        let token = match p.token {
            Token::Current => held,
            Token::Old => held.saturating_sub(1),
            Token::Next => held + 1,
        };
        (id, token)
    }

    fn resolve(&mut self, op: &Op, delays: &mut u64) -> Step {
        let mut new_specs = |specs: &[Spec]| -> Vec<NewSpec> {
            specs
                .iter()
                .map(|s| NewSpec {
                    id: s.id.map(|i| CALLER_IDS[i as usize % CALLER_IDS.len()].to_string()),
                    delay_ms: s.later.then(|| {
                        *delays += 1;
                        LATER_MS + *delays
                    }),
                    max_attempts: s.max_attempts,
                    priority: s.priority,
                    payload: format!("p{}", s.payload).into_bytes(),
                })
                .collect()
        };
        match op {
            Op::Handed { n, group, specs } => {
                let g = group.map(|g| GROUPS[g as usize % GROUPS.len()].to_string());
                let specs = new_specs(specs);
                let woke = self.wakes(g.as_deref(), &specs);
                let enqueue = Box::new(match g {
                    Some(g) => Step::Genqueue(g, specs),
                    None => Step::Enqueue(specs),
                });
                self.claims += 1;
                Step::Handed {
                    enqueue,
                    n: *n,
                    index: self.claims,
                    lease_ms: LONG_LEASE_MS + self.claims,
                    woke,
                }
            }
            Op::Enqueue(specs) => Step::Enqueue(new_specs(specs)),
            Op::Genqueue(g, specs) => Step::Genqueue(GROUPS[*g as usize % GROUPS.len()].to_string(), new_specs(specs)),
            Op::Claim { n, short, max_attempts } => {
                self.claims += 1;
                let index = self.claims;
                let lease_ms = if *short { SHORT_LEASE_MS } else { LONG_LEASE_MS } + index;
                Step::Claim {
                    n: *n,
                    long: !short,
                    index,
                    lease_ms,
                    max_attempts: *max_attempts,
                }
            }
            Op::Complete(p) => {
                let (id, t) = self.pick(*p);
                Step::Complete(id, t)
            }
            Op::CompleteMany(ps) => Step::CompleteMany(ps.iter().map(|p| self.pick(*p)).collect()),
            Op::CompleteCancelled(p) => {
                let (id, t) = self.pick(*p);
                Step::CompleteCancelled(id, t)
            }
            Op::UpdateData(p, payload) => {
                let (id, t) = self.pick(*p);
                Step::UpdateData(id, t, format!("u{payload}").into_bytes())
            }
            Op::Retry {
                pick,
                later,
                max_attempts,
            } => {
                let (id, token) = self.pick(*pick);
                let delay_ms = later_ms(*later, delays);
                Step::Retry {
                    id,
                    token,
                    delay_ms,
                    max_attempts: *max_attempts,
                }
            }
            Op::Discard(p) => {
                let (id, t) = self.pick(*p);
                Step::Discard(id, t)
            }
            Op::Release { pick, later } => {
                let (id, token) = self.pick(*pick);
                let delay_ms = later_ms(*later, delays);
                Step::Release(id, token, delay_ms)
            }
            Op::Reap {
                limit,
                max_redeliveries,
            } => Step::Reap(*limit, *max_redeliveries),
            Op::Sweep { max_stalled, limit } => Step::Sweep(*max_stalled, *limit),
            Op::Remove { pick, force } => Step::Remove(self.pick(*pick).0, *force),
            Op::Redrive { pick, extra } => Step::Redrive(self.pick(*pick).0, *extra),
            Op::Cancel(p) => Step::Cancel(self.pick(*p).0),
            Op::PromoteJob(p) => Step::PromoteJob(self.pick(*p).0),
            Op::SetGroupLimit { group, limit } => {
                Step::SetGroupLimit(group.map(|g| GROUPS[g as usize % GROUPS.len()].to_string()), *limit)
            }
            Op::SetRateLimit { target, burst } => {
                let on = match target {
                    0 => RateOn::Queue,
                    1 => RateOn::Default,
                    t => RateOn::Group(GROUPS[(*t as usize - 2) % GROUPS.len()].to_string()),
                };
                Step::SetRateLimit(on, *burst)
            }
        }
    }

    // --- the helpers of scripts/lib ---

    fn row(&mut self, id: &str) -> &mut Row {
        self.rows.get_mut(id).expect("model: a row the step needs")
    }

    /// Whether an enqueue of `specs` (into g's lane) pushes a wake: it makes a job claimable, or
    /// schedules one due before every job scheduled (emq_due_wake: a park ends at the earliest due
    /// time it saw).
    fn wakes(&self, g: Option<&str>, specs: &[NewSpec]) -> bool {
        let mut seen = BTreeSet::new();
        let new: Vec<&NewSpec> = specs
            .iter()
            .filter(|s| {
                let dup =
                    s.id.as_ref()
                        .is_some_and(|id| seen.contains(id) || self.rows.contains_key(id) || !seen.insert(id.clone()));
                !dup
            })
            .collect();
        let ready = new.iter().filter(|s| s.delay_ms.is_none()).count();
        let head = self.scheduled.first().map(|(due, _)| *due);
        let new_head = new
            .iter()
            .filter_map(|s| s.delay_ms)
            .any(|d| head.is_none_or(|h| d < h));
        new_head
            || match g {
                None => ready > 0,
                Some(g) => {
                    let (active, limit) = self.slots(g);
                    ready > 0 && (self.lane_len(g) as u64) < limit.saturating_sub(active)
                }
            }
    }

    fn lane(&mut self, g: &str) -> &mut BTreeSet<(u64, String)> {
        self.lanes.entry(g.to_string()).or_default()
    }

    fn lane_len(&self, g: &str) -> usize {
        self.lanes.get(g).map_or(0, BTreeSet::len)
    }

    /// The next rank of priority `p`: a sequence runs in well under the default aging (60 s), so
    /// the store's ranks order as (priority, arrival) do.
    fn next_rank(&mut self, p: u8) -> u64 {
        self.rank += 1;
        u64::from(p) * (1 << 40) + self.rank
    }

    /// (active count, limit): its own, else the queue default, else 1.
    fn slots(&self, g: &str) -> (u64, u64) {
        (
            self.active_of.get(g).copied().unwrap_or(0),
            self.limits.get(g).copied().or(self.default_limit).unwrap_or(1),
        )
    }

    fn eligible(&self, m: &str) -> bool {
        if m == FLAT {
            return !self.pending.is_empty();
        }
        let (a, l) = self.slots(m);
        a < l && self.lane_len(m) > 0
    }

    fn ring_step(&mut self, g: &str) {
        if self.flags.contains(g) || !self.eligible(g) {
            return;
        }
        self.ring.push_back(g.to_string());
        self.flags.insert(g.to_string());
    }

    fn ring_step_flat(&mut self) {
        self.ring_step(FLAT);
    }

    fn free_slot(&mut self, g: &str) {
        let left = self.active_of.get(g).copied().unwrap_or(0) as i64 - 1;
        if left <= 0 {
            self.active_of.remove(g);
        } else {
            self.active_of.insert(g.to_string(), left as u64);
        }
    }

    fn leave_lane(&mut self, g: &str) {
        self.free_slot(g);
        self.ring_step(g);
    }

    /// emq_ready: flat or its lane at a fresh rank; state pending.
    fn ready(&mut self, id: &str) {
        let g = self.row(id).group.clone();
        self.row(id).place = Place::Pending;
        let s = self.next_rank(self.rows[id].priority);
        self.row(id).score = s;
        match g {
            Some(g) => self.lane(&g).insert((s, id.to_string())),
            None => self.pending.insert((s, id.to_string())),
        };
    }

    /// Scheduled until `due` (the order of due times).
    fn schedule(&mut self, id: &str, due: u64) {
        let row = self.row(id);
        row.place = Place::Scheduled;
        row.due = due;
        self.scheduled.insert((due, id.to_string()));
    }

    /// Back at the front of its set, state pending: its lane or pending at rank 0 (no ring step).
    /// True for a flat job.
    fn front(&mut self, id: &str) -> bool {
        self.row(id).place = Place::Pending;
        match self.rows[id].group.clone() {
            Some(g) => {
                self.row(id).score = 0;
                self.lane(&g).insert((0, id.to_string()));
                false
            }
            None => {
                self.row(id).score = 0;
                self.pending.insert((0, id.to_string()));
                true
            }
        }
    }

    fn bury(&mut self, id: &str, err: &str) {
        let r = self.row(id);
        r.place = Place::Dead;
        r.last_error = Some(err.to_string());
        self.dead.insert(id.to_string());
    }

    fn leave_active(&mut self, id: &str) {
        let lease = self.rows[id].lease;
        assert!(
            self.active.remove(&(lease, id.to_string())),
            "model: {id} was in active"
        );
    }

    /// emq_unwait: out of scheduled, its lane or pending.
    fn unwait(&mut self, id: &str) {
        let r = self.rows[id].clone();
        match (r.place, r.group) {
            (Place::Scheduled, _) => assert!(self.scheduled.remove(&(r.due, id.to_string()))),
            (Place::Pending, Some(g)) => assert!(self.lane(&g).remove(&(r.score, id.to_string()))),
            (Place::Pending, None) => assert!(self.pending.remove(&(r.score, id.to_string()))),
            _ => unreachable!("unwait of a job not waiting"),
        }
    }

    /// The fence: Err(gone or stale) unless the caller holds the job.
    fn fence(&self, id: &str, token: u64) -> Result<(), Settled> {
        match self.rows.get(id) {
            None => Err(Settled::Gone),
            Some(r) if r.place != Place::Active || r.attempts != token => Err(Settled::Stale),
            Some(_) => Ok(()),
        }
    }

    /// The lapsed leases (every short one), in the order they lapsed, at most `limit`.
    fn lapsed(&self, limit: usize) -> Vec<String> {
        self.active
            .iter()
            .filter(|((long, _), _)| !long)
            .map(|(_, id)| id.clone())
            .take(limit)
            .collect()
    }

    // --- the verbs ---

    fn apply(&mut self, step: &Step) -> Reply {
        match step {
            Step::Handed {
                enqueue,
                n,
                index,
                woke,
                ..
            } => {
                let Reply::Enqueued(enqueued) = self.apply(enqueue) else {
                    unreachable!("an enqueue replies Enqueued")
                };
                let handed = if *woke {
                    self.claim(*n as usize, (true, *index), HANDED_MAX_ATTEMPTS as u64)
                } else {
                    Vec::new()
                };
                Reply::Handed(enqueued, handed)
            }
            Step::Enqueue(specs) => Reply::Enqueued(self.new_jobs(None, specs)),
            Step::Genqueue(g, specs) => Reply::Enqueued(self.new_jobs(Some(g), specs)),
            Step::Claim {
                n,
                long,
                index,
                max_attempts,
                ..
            } => Reply::Claimed(self.claim(*n as usize, (*long, *index), *max_attempts as u64)),
            Step::Complete(id, token) => Reply::Settled(self.complete(id, *token, false)),
            Step::CompleteCancelled(id, token) => Reply::Settled(self.complete(id, *token, true)),
            Step::UpdateData(id, token, payload) => Reply::Settled(match self.fence(id, *token) {
                Err(e) => e,
                Ok(()) => {
                    self.row(id).payload = payload.clone();
                    Settled::Ok
                }
            }),
            Step::CompleteMany(entries) => Reply::SettledMany(self.complete_many(entries)),
            Step::Retry {
                id,
                token,
                delay_ms,
                max_attempts,
            } => Reply::Retried(self.retry(id, *token, *delay_ms, *max_attempts as u64)),
            Step::Discard(id, token) => Reply::Discarded(match self.fence(id, *token) {
                Err(Settled::Gone) => Discarded::Gone,
                Err(_) => Discarded::Stale,
                Ok(()) => {
                    self.leave_active(id);
                    self.bury(id, DISCARD_ERROR);
                    if let Some(g) = self.rows[id].group.clone() {
                        self.leave_lane(&g);
                    }
                    self.metrics.failed += 1;
                    Discarded::Dead
                }
            }),
            Step::Release(id, token, delay_ms) => Reply::Settled(self.release(id, *token, *delay_ms)),
            Step::Reap(limit, budget) => Reply::Reaped(self.reap(*limit as usize, budget.map(u64::from))),
            Step::Sweep(max_stalled, limit) => {
                let (recovered, dead) = self.sweep(*max_stalled as u64, *limit as usize);
                Reply::Swept(recovered, dead)
            }
            Step::Remove(id, force) => Reply::Removed(self.remove(id, *force)),
            Step::Redrive(id, extra) => Reply::Redriven(self.redrive(id, *extra as u64)),
            Step::Cancel(id) => Reply::Cancelled(self.cancel(id)),
            Step::PromoteJob(id) => Reply::PromotedJob(self.promote_job(id)),
            Step::SetGroupLimit(target, limit) => {
                match target {
                    None => self.default_limit = Some(*limit as u64),
                    Some(g) => {
                        self.limits.insert(g.clone(), *limit as u64);
                        self.ring_step(g);
                    }
                }
                Reply::Unit
            }
            Step::SetRateLimit(on, burst) => {
                let burst = burst.map(u64::from);
                match on {
                    RateOn::Queue => {
                        self.rate_queue = burst;
                        self.queue_used = 0;
                    }
                    RateOn::Default => {
                        self.rate_default = burst;
                        self.group_used.clear();
                        for (_, g) in std::mem::take(&mut self.throttled) {
                            self.ring.push_back(g);
                        }
                    }
                    RateOn::Group(g) => {
                        match burst {
                            Some(b) => self.rate_own.insert(g.clone(), b),
                            None => self.rate_own.remove(g),
                        };
                        self.group_used.remove(g);
                        if let Some(held) = self.throttled.iter().find(|(_, m)| m == g).cloned() {
                            self.throttled.remove(&held);
                            self.ring.push_back(g.clone());
                        }
                    }
                }
                Reply::Unit
            }
        }
    }

    /// A group's rate limit (its burst): its own, else the default.
    fn rate_of(&self, g: &str) -> Option<u64> {
        self.rate_own.get(g).copied().or(self.rate_default)
    }

    /// Whether g's rate limit (if any) admits a start now: it has used less than its burst.
    fn group_admits(&self, g: &str) -> bool {
        self.rate_of(g)
            .is_none_or(|b| self.group_used.get(g).map_or(0, |u| u.0) < b)
    }

    fn queue_admits(&self) -> bool {
        self.rate_queue.is_none_or(|b| self.queue_used < b)
    }

    /// A start of g (flat: `None`) under the limits that apply.
    fn count_start(&mut self, g: Option<&str>) {
        if self.rate_queue.is_some() {
            self.queue_used += 1;
        }
        if let Some(g) = g.filter(|g| self.rate_of(g).is_some()) {
            let seq = self.claim_seq;
            self.group_used.entry(g.to_string()).or_insert((0, seq)).0 += 1;
        }
    }

    /// emq_new_jobs.
    fn new_jobs(&mut self, g: Option<&str>, specs: &[NewSpec]) -> Vec<Enqueued> {
        let mut seen = BTreeSet::new();
        let dup: Vec<bool> = specs
            .iter()
            .map(|s| match &s.id {
                Some(id) => seen.contains(id) || self.rows.contains_key(id) || !seen.insert(id.clone()),
                None => false,
            })
            .collect();
        let mut reply = Vec::new();
        let mut ready = Vec::new();
        for (s, dup) in specs.iter().zip(dup) {
            if dup {
                reply.push(Enqueued::Duplicate(JobId::parse(s.id.clone().unwrap()).unwrap()));
                continue;
            }
            self.seq += 1;
            let id = s.id.clone().unwrap_or_else(|| self.seq.to_string());
            let place = if s.delay_ms.is_some() {
                Place::Scheduled
            } else {
                Place::Pending
            };
            self.rows.insert(
                id.clone(),
                Row {
                    payload: s.payload.clone(),
                    place,
                    attempts: 0,
                    free: 0,
                    group: g.map(str::to_string),
                    max_attempts: s.max_attempts.map(u64::from),
                    priority: s.priority,
                    stalled: 0,
                    last_error: None,
                    cancel: None,
                    score: self.seq,
                    due: s.delay_ms.unwrap_or(0),
                    lease: (false, 0),
                },
            );
            self.known.insert(id.clone());
            match s.delay_ms {
                Some(d) => {
                    self.scheduled.insert((d, id.clone()));
                }
                None => {
                    let rank = self.next_rank(s.priority);
                    self.row(&id).score = rank;
                    ready.push((rank, id.clone()));
                }
            }
            reply.push(Enqueued::New(JobId::parse(id).unwrap()));
        }
        if !ready.is_empty() {
            match g {
                Some(g) => {
                    self.lane(g).extend(ready);
                    self.ring_step(g);
                }
                None => {
                    self.pending.extend(ready);
                    self.ring_step_flat();
                }
            }
        }
        reply
    }

    /// claim.lua's ring walk.
    fn claim(&mut self, n: usize, lease: LeaseKey, maxdef: u64) -> Vec<(String, Vec<u8>, u64, Option<String>)> {
        let mut out = Vec::new();
        // no lane holds a job: the walk is the flat set's alone and leaves the ring as it is, unless
        // it finds pending empty: then every member goes (each a group whose lane emptied), flags
        // and all; groups in `throttled` stay there
        if self.lanes.values().all(BTreeSet::is_empty) {
            if !self.flags.contains(FLAT) && self.ring.is_empty() {
                return out;
            }
            self.claim_seq += 1;
            if !self.queue_admits() {
                return out;
            }
            while out.len() < n && self.queue_admits() {
                let Some((_, id)) = self.pending.pop_first() else { break };
                if self.take(&id, lease, maxdef, &mut out) {
                    self.count_start(None);
                }
            }
            if self.pending.is_empty() {
                for m in std::mem::take(&mut self.ring) {
                    self.flags.remove(&m);
                }
                self.flags.remove(FLAT);
            }
            return out;
        }
        if self.ring.is_empty() && self.throttled.is_empty() {
            return out;
        }
        self.claim_seq += 1;
        let mut budget = n + self.ring.len() + 1000;
        while out.len() < n && budget > 0 {
            // the queue's limit stops the walk, the ring as it is
            if !self.queue_admits() {
                break;
            }
            budget -= 1;
            let Some(m) = self.ring.pop_front() else { break };
            if m == FLAT {
                let want = if self.ring.is_empty() { n - out.len() } else { 1 };
                let mut used = 0;
                while used < want && self.queue_admits() {
                    let Some((_, id)) = self.pending.pop_first() else { break };
                    used += 1;
                    if self.take(&id, lease, maxdef, &mut out) {
                        self.count_start(None);
                    }
                }
                if self.pending.is_empty() {
                    self.flags.remove(FLAT);
                } else {
                    self.ring.push_back(m);
                }
            } else {
                let (mut a, limit) = self.slots(&m);
                if a < limit && self.group_admits(&m) {
                    if let Some((_, id)) = self.lane(&m).pop_first() {
                        if self.take(&id, lease, maxdef, &mut out) {
                            a += 1;
                            self.active_of.insert(m.clone(), a);
                            self.count_start(Some(&m));
                        }
                    }
                }
                if a < limit && self.lane_len(&m) > 0 {
                    if self.group_admits(&m) {
                        self.ring.push_back(m);
                    } else {
                        // held back, its r: flag kept
                        let first = self.group_used.get(&m).map_or(0, |u| u.1);
                        self.throttled.insert((first, m));
                    }
                } else {
                    self.flags.remove(&m);
                }
            }
        }
        out
    }

    /// One popped job: handed out (true), or cancelled / dead here.
    fn take(
        &mut self,
        id: &str,
        lease: LeaseKey,
        maxdef: u64,
        out: &mut Vec<(String, Vec<u8>, u64, Option<String>)>,
    ) -> bool {
        let r = self.rows[id].clone();
        assert_eq!(r.place, Place::Pending, "model: a ready job is pending");
        if r.cancel.is_some() {
            self.rows.remove(id);
            self.metrics.cancelled += 1;
            return false;
        }
        if r.attempts - r.free >= r.max_attempts.unwrap_or(maxdef) {
            self.bury(id, LAST_ATTEMPT);
            self.metrics.failed += 1;
            return false;
        }
        let row = self.row(id);
        row.attempts += 1;
        row.place = Place::Active;
        row.lease = lease;
        out.push((id.to_string(), r.payload, r.attempts + 1 - r.free, r.group));
        self.active.insert((lease, id.to_string()));
        true
    }

    /// complete, or complete_cancelled.
    fn complete(&mut self, id: &str, token: u64, cancelled: bool) -> Settled {
        if let Err(e) = self.fence(id, token) {
            return e;
        }
        self.leave_active(id);
        let r = self.rows.remove(id).expect("fenced");
        if let Some(g) = r.group {
            self.leave_lane(&g);
        }
        if cancelled {
            self.metrics.cancelled += 1;
        } else {
            self.metrics.completed += 1;
        }
        Settled::Ok
    }

    fn complete_many(&mut self, entries: &[(String, u64)]) -> Vec<Settled> {
        let mut seen = BTreeSet::new();
        let mut reply = Vec::new();
        let mut done = Vec::new();
        for (id, token) in entries {
            match self.fence(id, *token) {
                Err(e) => reply.push(e),
                Ok(()) if seen.contains(id) => reply.push(Settled::Stale),
                Ok(()) => {
                    seen.insert(id.clone());
                    done.push(id.clone());
                    reply.push(Settled::Ok);
                }
            }
        }
        let mut lanes = Vec::new();
        for id in &done {
            self.leave_active(id);
            if let Some(g) = self.rows.remove(id).expect("fenced").group {
                lanes.push(g);
            }
        }
        for g in lanes {
            self.leave_lane(&g);
        }
        self.metrics.completed += done.len() as u64;
        reply
    }

    fn retry(&mut self, id: &str, token: u64, delay_ms: u64, maxdef: u64) -> Retried {
        match self.fence(id, token) {
            Err(Settled::Gone) => return Retried::Gone,
            Err(_) => return Retried::Stale,
            Ok(()) => {}
        }
        let r = self.rows[id].clone();
        self.leave_active(id);
        let reply = if token - r.free >= r.max_attempts.unwrap_or(maxdef) {
            self.bury(id, RETRY_ERROR);
            self.metrics.failed += 1;
            Retried::Dead
        } else {
            self.row(id).last_error = Some(RETRY_ERROR.to_string());
            if delay_ms > 0 {
                self.schedule(id, delay_ms);
            } else {
                self.ready(id);
                if r.group.is_none() {
                    self.ring_step_flat();
                }
            }
            self.metrics.retried += 1;
            Retried::Retrying
        };
        if let Some(g) = r.group {
            self.leave_lane(&g);
        }
        reply
    }

    /// release.lua: fenced; out of `active` with `free` + 1; delay 0: the front of its set (flat:
    /// pending at score 0; a lane job: its lane's head), else scheduled; a lane job frees its slot
    /// with the ring step.
    fn release(&mut self, id: &str, token: u64, delay_ms: u64) -> Settled {
        if let Err(e) = self.fence(id, token) {
            return e;
        }
        let g = self.rows[id].group.clone();
        self.leave_active(id);
        self.row(id).free += 1;
        if delay_ms > 0 {
            self.schedule(id, delay_ms);
        } else if self.front(id) {
            self.ring_step_flat();
        }
        if let Some(g) = &g {
            self.leave_lane(g);
        }
        Settled::Ok
    }

    /// reap.lua: lapsed leases back to the front; under a budget each gives its attempt back
    /// (`free` + 1) and is counted (`stalled` + 1), dead once the count passes the budget.
    fn reap(&mut self, limit: usize, budget: Option<u64>) -> u64 {
        let lapsed = self.lapsed(limit);
        for id in &lapsed {
            self.leave_active(id);
        }
        let (mut flat, mut back) = (false, 0u64);
        for id in lapsed.iter().rev() {
            if let Some(max) = budget {
                let lapses = self.rows[id].stalled + 1;
                self.row(id).stalled = lapses;
                self.row(id).free += 1;
                if lapses > max {
                    self.row(id).place = Place::Dead;
                    self.row(id).last_error = Some(format!(
                        "lease lapsed {lapses} times: its worker died or stalled each time"
                    ));
                    self.dead.insert(id.clone());
                    self.metrics.failed += 1;
                    if let Some(g) = self.rows[id].group.clone() {
                        self.free_slot(&g);
                        self.ring_step(&g);
                    }
                    continue;
                }
            }
            back += 1;
            if self.front(id) {
                flat = true;
            } else if let Some(g) = self.rows[id].group.clone() {
                self.free_slot(&g);
                self.ring_step(&g);
            }
        }
        if flat {
            self.ring_step_flat();
        }
        self.metrics.reaped += back;
        back
    }

    fn sweep(&mut self, max_stalled: u64, limit: usize) -> (Vec<String>, Vec<String>) {
        let lapsed = self.lapsed(limit);
        let (mut recovered, mut buried) = (Vec::new(), Vec::new());
        let mut flat = false;
        for id in lapsed.iter().rev() {
            self.leave_active(id);
            let g = self.rows[id].group.clone();
            if let Some(g) = &g {
                self.free_slot(g);
            }
            let stalls = self.rows[id].stalled + 1;
            self.row(id).stalled = stalls;
            if stalls >= max_stalled {
                self.row(id).place = Place::Dead;
                self.row(id).last_error = Some(STALLED.to_string());
                self.dead.insert(id.clone());
                self.metrics.failed += 1;
                buried.push(id.clone());
            } else {
                flat |= self.front(id);
                self.metrics.stalled += 1;
                recovered.push(id.clone());
            }
            if let Some(g) = &g {
                self.ring_step(g);
            }
        }
        if flat {
            self.ring_step_flat();
        }
        recovered.reverse();
        buried.reverse();
        (recovered, buried)
    }

    fn remove(&mut self, id: &str, force: bool) -> Removed {
        let Some(r) = self.rows.get(id).cloned() else {
            return Removed::Gone;
        };
        match r.place {
            Place::Active => {
                if !force {
                    return Removed::Active;
                }
                self.leave_active(id);
                if let Some(g) = &r.group {
                    self.leave_lane(g);
                }
            }
            Place::Pending | Place::Scheduled => self.unwait(id),
            Place::Dead => {
                self.dead.remove(id);
            }
        }
        self.rows.remove(id);
        Removed::Removed
    }

    fn redrive(&mut self, id: &str, extra: u64) -> Redriven {
        let Some(r) = self.rows.get(id).cloned() else {
            return Redriven::Gone;
        };
        if r.place != Place::Dead {
            return Redriven::NotDead;
        }
        self.dead.remove(id);
        let row = self.row(id);
        row.max_attempts = Some(r.attempts - r.free + extra);
        row.stalled = 0;
        row.cancel = None;
        self.ready(id);
        match &r.group {
            Some(g) => self.ring_step(g),
            None => self.ring_step_flat(),
        }
        Redriven::Redriven
    }

    fn cancel(&mut self, id: &str) -> CancelOutcome {
        let Some(r) = self.rows.get(id) else {
            return CancelOutcome::Gone;
        };
        match r.place {
            Place::Active => {
                self.row(id).cancel = Some(String::new());
                CancelOutcome::Requested
            }
            Place::Pending | Place::Scheduled => {
                self.unwait(id);
                self.rows.remove(id);
                self.metrics.cancelled += 1;
                CancelOutcome::Cancelled
            }
            Place::Dead => CancelOutcome::Finished,
        }
    }

    fn promote_job(&mut self, id: &str) -> PromotedJob {
        let Some(r) = self.rows.get(id).cloned() else {
            return PromotedJob::Gone;
        };
        if r.place != Place::Scheduled {
            return PromotedJob::NotScheduled;
        }
        self.scheduled.remove(&(r.due, id.to_string()));
        self.ready(id);
        match &r.group {
            Some(g) => self.ring_step(g),
            None => self.ring_step_flat(),
        }
        PromotedJob::Promoted
    }

    // --- what the stores must show ---

    /// list(pending): the flat set in claim order, then every group's lane in claim order, group
    /// after group by name.
    fn list_pending(&self) -> Vec<String> {
        let mut out: Vec<String> = self.pending.iter().map(|(_, id)| id.clone()).collect();
        // a BTreeMap's String keys go in byte order, as the stores order group names
        for lane in self.lanes.values() {
            out.extend(lane.iter().map(|(_, id)| id.clone()));
        }
        out
    }

    fn list_scheduled(&self) -> Vec<String> {
        self.scheduled.iter().map(|(_, id)| id.clone()).collect()
    }

    fn list_active(&self) -> Vec<String> {
        self.active.iter().map(|(_, id)| id.clone()).collect()
    }

    fn ready_count(&self) -> u64 {
        (self.pending.len() + self.lanes.values().map(BTreeSet::len).sum::<usize>()) as u64
    }

    /// The groups hash as the model holds it: a:<g>, l:<g>, l:~ with their values; r:<m> flags.
    fn groups_hash(&self) -> BTreeMap<String, Option<u64>> {
        let mut h = BTreeMap::new();
        for (g, a) in &self.active_of {
            h.insert(format!("a:{g}"), Some(*a));
        }
        for (g, l) in &self.limits {
            h.insert(format!("l:{g}"), Some(*l));
        }
        if let Some(l) = self.default_limit {
            h.insert("l:~".to_string(), Some(l));
        }
        for m in &self.flags {
            h.insert(format!("r:{m}"), None);
        }
        // a limit's text is no number: the comparison reads it as none
        if self.rate_queue.is_some() {
            h.insert("rate".to_string(), None);
        }
        if self.rate_default.is_some() {
            h.insert("rate:~".to_string(), None);
        }
        for g in self.rate_own.keys() {
            h.insert(format!("rate:{g}"), None);
        }
        h
    }

    /// The throttled groups in admission order.
    fn throttled_order(&self) -> Vec<String> {
        self.throttled.iter().map(|(_, g)| g.clone()).collect()
    }

    /// The model's own invariants (each job in one place, the slot and ring invariants), so a
    /// sequence that breaks the design is caught even where the stores agree with the model.
    fn check_self(&self) -> Result<(), String> {
        // each job in exactly one place, and its row agrees
        let mut places: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (_, id) in &self.pending {
            places.entry(id).or_default().push("pending");
        }
        for (g, lane) in &self.lanes {
            for (_, id) in lane {
                places.entry(id).or_default().push(g);
            }
        }
        for (_, id) in &self.scheduled {
            places.entry(id).or_default().push("scheduled");
        }
        for (_, id) in &self.active {
            places.entry(id).or_default().push("active");
        }
        for id in &self.dead {
            places.entry(id).or_default().push("dead");
        }
        for (id, r) in &self.rows {
            let want = match (r.place, &r.group) {
                (Place::Pending, Some(g)) => g.as_str(),
                (Place::Pending, None) => "pending",
                (Place::Scheduled, _) => "scheduled",
                (Place::Active, _) => "active",
                (Place::Dead, _) => "dead",
            };
            let got = places.remove(id.as_str()).unwrap_or_default();
            if got != [want] {
                return Err(format!("model: {id} ({:?}) is in {got:?}, not [{want}]", r.place));
            }
        }
        if let Some((id, got)) = places.into_iter().next() {
            return Err(format!("model: {id} has no row but is in {got:?}"));
        }
        // the slot invariant
        let mut per_group: BTreeMap<String, u64> = BTreeMap::new();
        for (_, id) in &self.active {
            if let Some(g) = &self.rows[id].group {
                *per_group.entry(g.clone()).or_default() += 1;
            }
        }
        if per_group != self.active_of {
            return Err(format!(
                "model: slots {:?} != active per group {per_group:?}",
                self.active_of
            ));
        }
        check_ring(
            self,
            &self.ring.iter().cloned().collect::<Vec<_>>(),
            &self.throttled_order(),
            &self.flags,
        )
    }
}

/// The ring and the throttled groups: no duplicate, together exactly the flagged members; the ring
/// every eligible member not throttled — except a group without a limit of its own holding a slot
/// (a raised queue default reaches it at its next settle, set_group_limit.lua) — and every
/// non-empty lane on the ring, throttled or holding a slot (else list and counts could not see it).
fn check_ring(model: &Model, ring: &[String], throttled: &[String], flags: &BTreeSet<String>) -> Result<(), String> {
    let mut set: BTreeSet<String> = ring.iter().cloned().collect();
    if set.len() != ring.len() {
        return Err(format!("the ring holds a duplicate: {ring:?}"));
    }
    for g in throttled {
        if !set.insert(g.clone()) {
            return Err(format!("{g} is on the ring {ring:?} and throttled {throttled:?} too"));
        }
    }
    if &set != flags {
        return Err(format!(
            "ring {ring:?} and throttled {throttled:?} != r: flags {flags:?}"
        ));
    }
    if model.eligible(FLAT) && !set.contains(FLAT) {
        return Err(format!("the flat set is eligible but off the ring {ring:?}"));
    }
    for g in GROUPS {
        let exempt = !model.limits.contains_key(g) && model.slots(g).0 > 0;
        if model.eligible(g) && !set.contains(g) && !exempt {
            return Err(format!("{g} is eligible but off the ring {ring:?}"));
        }
        if model.lane_len(g) > 0 && !set.contains(g) && model.slots(g).0 == 0 {
            return Err(format!("{g}'s lane is not empty, off the ring and holds no slot"));
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The stores: running a step, and reading what the contract does not show (ring, groups hash)
// ---------------------------------------------------------------------------------------------

fn jid(id: &str) -> JobId {
    JobId::parse(id).expect("a valid id")
}

fn new_jobs(specs: &[NewSpec]) -> Vec<NewJob> {
    specs
        .iter()
        .map(|s| {
            let mut j = NewJob::new(s.payload.clone());
            if let Some(id) = &s.id {
                j = j.with_id(JobId::new(id.clone()).expect("a caller id"));
            }
            if let Some(d) = s.delay_ms {
                j = j.with_delay(Duration::from_millis(d));
            }
            if let Some(m) = s.max_attempts {
                j = j.with_max_attempts(m);
            }
            if s.priority > 0 {
                j = j.with_priority(s.priority);
            }
            j
        })
        .collect()
}

/// Claimed jobs as a reply shows them.
fn claim_reply(jobs: Vec<echomq::ClaimedJob>) -> Vec<(String, Vec<u8>, u64, Option<String>)> {
    jobs.into_iter()
        .map(|j| (j.id.to_string(), j.payload, j.attempts, j.group.map(|g| g.to_string())))
        .collect()
}

/// A [`Step::Handed`] on a store that serves parked offers (`serves_offers`: the embedded store):
/// the wake tokens this process holds taken first, so the park registers its offer; then the
/// enqueue, by whose reply the jobs were handed over. Elsewhere: the enqueue, then a claim when
/// it woke the queue.
async fn run_handed(store: &dyn Store, q: &QueueName, step: &Step, serves_offers: bool) -> echomq::Result<Reply> {
    let Step::Handed {
        enqueue,
        n,
        lease_ms,
        woke,
        ..
    } = step
    else {
        unreachable!("a Handed step")
    };
    let lease = Duration::from_millis(*lease_ms);
    let so = SettleOptions::default();
    let enqueued = |r: Reply| match r {
        Reply::Enqueued(e) => e,
        other => panic!("an enqueue replied {other:?}"),
    };
    if !serves_offers {
        let e = enqueued(Box::pin(run_step(store, q, enqueue, false)).await?);
        let jobs = if *woke {
            store
                .claim(
                    q,
                    echomq::store::ClaimRequest::new(*n, lease)
                        .max_attempts(HANDED_MAX_ATTEMPTS)
                        .settle(so),
                )
                .await?
                .jobs
        } else {
            Vec::new()
        };
        return Ok(Reply::Handed(e, claim_reply(jobs)));
    }
    while store.park(q, &echomq::Kinds::all(), Duration::from_millis(1)).await? {}
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let handoff: echomq::store::Handoff = Box::new(move |jobs| {
        let _ = tx.send(jobs);
    });
    let offer = echomq::store::ClaimRequest::new(*n, lease)
        .max_attempts(HANDED_MAX_ATTEMPTS)
        .settle(so);
    let park = store.park_with_handoff(q, Duration::from_secs(30), offer, handoff);
    tokio::pin!(park);
    assert!(
        futures::poll!(park.as_mut()).is_pending(),
        "parked, its offer registered"
    );
    let e = enqueued(Box::pin(run_step(store, q, enqueue, true)).await?);
    // handed over (or the offer dropped) before the enqueue replied; the park's end withdraws it
    let jobs = rx.try_recv().unwrap_or_default();
    Ok(Reply::Handed(e, claim_reply(jobs)))
}

async fn run_step(store: &dyn Store, q: &QueueName, step: &Step, serves_offers: bool) -> echomq::Result<Reply> {
    let so = SettleOptions::default();
    Ok(match step {
        Step::Handed { .. } => run_handed(store, q, step, serves_offers).await?,
        Step::Enqueue(specs) => Reply::Enqueued(store.enqueue(q, &new_jobs(specs)).await?),
        Step::Genqueue(g, specs) => {
            let g = GroupName::new(g.clone()).expect("a group");
            Reply::Enqueued(store.genqueue(q, &g, &new_jobs(specs)).await?)
        }
        Step::Claim {
            n,
            lease_ms,
            max_attempts,
            ..
        } => {
            let jobs = store
                .claim(
                    q,
                    echomq::store::ClaimRequest::new(*n, Duration::from_millis(*lease_ms))
                        .max_attempts(*max_attempts)
                        .settle(so),
                )
                .await?
                .jobs;
            Reply::Claimed(claim_reply(jobs))
        }
        Step::Complete(id, token) => Reply::Settled(
            store
                .complete(q, &echomq::store::Completion::new(jid(id), *token), so)
                .await?,
        ),
        Step::CompleteCancelled(id, token) => Reply::Settled(
            store
                .complete_cancelled(
                    q,
                    &jid(id),
                    *token,
                    &echomq::store::CancelledRequest::new().reason(Some("stop")).settle(so),
                )
                .await?,
        ),
        Step::UpdateData(id, token, payload) => Reply::Settled(store.update_data(q, &jid(id), *token, payload).await?),
        Step::CompleteMany(entries) => {
            let batch: Vec<Completion> = entries
                .iter()
                .map(|(id, token)| Completion::new(jid(id), *token))
                .collect();
            Reply::SettledMany(store.complete_many(q, &batch, so).await?)
        }
        Step::Retry {
            id,
            token,
            delay_ms,
            max_attempts,
        } => Reply::Retried(
            store
                .retry(
                    q,
                    &jid(id),
                    *token,
                    &RetryRequest::new(RETRY_ERROR)
                        .after(Duration::from_millis(*delay_ms))
                        .max_attempts(*max_attempts)
                        .settle(so),
                )
                .await?,
        ),
        Step::Discard(id, token) => Reply::Discarded(
            store
                .discard(
                    q,
                    &jid(id),
                    *token,
                    &echomq::store::DiscardRequest::new(DISCARD_ERROR).settle(so),
                )
                .await?,
        ),
        Step::Release(id, token, delay_ms) => Reply::Settled(
            store
                .release(q, &jid(id), *token, Duration::from_millis(*delay_ms))
                .await?,
        ),
        Step::Reap(limit, budget) => Reply::Reaped(store.reap(q, *limit, *budget).await?),
        Step::Sweep(max_stalled, limit) => {
            let swept = store
                .sweep_stalled(q, StalledPolicy::default().max_stalled(*max_stalled).limit(*limit))
                .await?;
            let ids = |v: Vec<JobId>| v.into_iter().map(|i| i.to_string()).collect();
            Reply::Swept(ids(swept.recovered), ids(swept.dead))
        }
        Step::Remove(id, force) => Reply::Removed(store.remove(q, &jid(id), *force).await?),
        Step::Redrive(id, extra) => Reply::Redriven(store.redrive(q, &jid(id), *extra).await?),
        Step::Cancel(id) => Reply::Cancelled(store.cancel(q, &jid(id), None, so).await?),
        Step::PromoteJob(id) => Reply::PromotedJob(store.promote_job(q, &jid(id)).await?),
        Step::SetGroupLimit(target, limit) => {
            let target = match target {
                Some(g) => LimitTarget::Group(GroupName::new(g.clone()).expect("a group")),
                None => LimitTarget::Default,
            };
            store.set_group_limit(q, &target, *limit).await?;
            Reply::Unit
        }
        Step::SetRateLimit(on, burst) => {
            let target = match on {
                RateOn::Queue => RateTarget::Queue,
                RateOn::Default => RateTarget::GroupDefault,
                RateOn::Group(g) => RateTarget::Group(GroupName::new(g.clone()).expect("a group")),
            };
            let limit = burst.map(|b| {
                RateLimit::new(1, Duration::from_millis(RATE_PER_MS))
                    .and_then(|l| l.with_burst(b))
                    .expect("a limit")
            });
            store.set_rate_limit(q, &target, limit).await?;
            Reply::Unit
        }
    })
}

/// Reads the ring and the groups hash of a store, under the contract: through a Redis connection,
/// or the embedded store's raw commands.
enum Probe {
    Redis(probe_conn::ProbeConn, QueueKeys),
}

impl Probe {
    /// The ring in order, and the groups hash (field → value).
    /// The ring, the groups hash and the throttled groups (by admission).
    async fn ring_and_groups(&mut self) -> (Vec<String>, BTreeMap<String, String>, Vec<String>) {
        match self {
            Probe::Redis(conn, keys) => {
                let ring: Vec<String> = redis::cmd("LRANGE")
                    .arg(keys.ring())
                    .arg(0)
                    .arg(-1)
                    .query_async(conn)
                    .await
                    .expect("LRANGE ring");
                let groups: BTreeMap<String, String> = redis::cmd("HGETALL")
                    .arg(keys.groups())
                    .query_async(conn)
                    .await
                    .expect("HGETALL groups");
                let throttled: Vec<String> = redis::cmd("ZRANGE")
                    .arg(keys.throttled())
                    .arg(0)
                    .arg(-1)
                    .query_async(conn)
                    .await
                    .expect("ZRANGE throttled");
                (ring, groups, throttled)
            }
        }
    }
}

impl Probe {
    /// The flat set `pending` and the raw jobs' set by kind (`pending:`), each member with its
    /// rank: the model's jobs are all raw, so the two hold the same.
    async fn flat_and_raw(&mut self) -> (Vec<(String, i64)>, Vec<(String, i64)>) {
        match self {
            Probe::Redis(conn, keys) => {
                let read = |key: String| {
                    let mut conn = conn.clone();
                    async move {
                        redis::cmd("ZRANGE")
                            .arg(key)
                            .arg(0)
                            .arg(-1)
                            .arg("WITHSCORES")
                            .query_async::<Vec<(String, i64)>>(&mut conn)
                            .await
                            .expect("ZRANGE")
                    }
                };
                (read(keys.pending()).await, read(keys.pending_kind("")).await)
            }
        }
    }
}

/// The pending tally as the store keeps it — each field's count, and the fields of
/// `pending_since` — and as its ready sets tell it: each ready job at a rank of one second of clock
/// or more counted under `<priority>:<floor(rank / 256000)>`.
struct TallyProbe {
    kept: BTreeMap<String, i64>,
    since: BTreeSet<String>,
    told: BTreeMap<String, i64>,
}

/// The field a ready job at `rank` of priority `p` is tallied under, if any.
fn tally_field(rank: i64, p: Option<String>) -> Option<String> {
    let p: i64 = p.and_then(|p| p.parse().ok()).unwrap_or(0);
    (rank >= 256_000).then(|| format!("{p}:{}", rank.div_euclid(256_000)))
}

impl Probe {
    async fn tally(&mut self) -> TallyProbe {
        let mut told = BTreeMap::new();
        match self {
            Probe::Redis(conn, keys) => {
                let kept: BTreeMap<String, i64> = redis::cmd("HGETALL")
                    .arg(keys.pending_tally())
                    .query_async(conn)
                    .await
                    .expect("HGETALL pending_tally");
                let since: BTreeSet<String> = redis::cmd("ZRANGE")
                    .arg(keys.pending_since())
                    .arg(0)
                    .arg(-1)
                    .query_async(conn)
                    .await
                    .expect("ZRANGE pending_since");
                let sets = [keys.pending()]
                    .into_iter()
                    .chain(GROUPS.iter().map(|g| keys.lane(&GroupName::new(*g).expect("a group"))));
                for set in sets {
                    let ranked: Vec<(String, i64)> = redis::cmd("ZRANGE")
                        .arg(&set)
                        .arg(0)
                        .arg(-1)
                        .arg("WITHSCORES")
                        .query_async(conn)
                        .await
                        .expect("ZRANGE a ready set");
                    for (id, rank) in ranked {
                        let p: Option<String> = redis::cmd("HGET")
                            .arg(format!("{}job:{id}", keys.base()))
                            .arg("priority")
                            .query_async(conn)
                            .await
                            .expect("HGET priority");
                        if let Some(f) = tally_field(rank, p) {
                            *told.entry(f).or_default() += 1;
                        }
                    }
                }
                TallyProbe { kept, since, told }
            }
        }
    }
}

struct Side {
    name: &'static str,
    store: Box<dyn Store>,
    /// Whether its store serves a parked consumer's offer (`park_with_handoff`) itself.
    serves_offers: bool,
    probe: Probe,
    /// The fencing token (attempts + free) each living row last showed.
    attempts: BTreeMap<String, u64>,
}

fn diff<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: the store shows {got:?}, the model {want:?}"))
    }
}

/// Every invariant, read from one store through the contract (and the probe for the ring).
async fn check_store(side: &mut Side, q: &QueueName, model: &Model) -> Result<(), String> {
    let store = side.store.as_ref();
    let e = |e: echomq::Error| e.to_string();
    let counts = store.counts(q).await.map_err(e)?;
    let m = model.metrics;
    diff(
        "counts (pending, scheduled, active, dead)",
        (counts.pending, counts.scheduled, counts.active, counts.dead),
        (
            model.ready_count(),
            model.scheduled.len() as u64,
            model.active.len() as u64,
            model.dead.len() as u64,
        ),
    )?;
    diff(
        "counters (completed, cancelled, failed, retried, stalled, reaped)",
        (
            counts.completed,
            counts.cancelled,
            counts.failed,
            counts.retried,
            counts.stalled,
            counts.reaped,
        ),
        (m.completed, m.cancelled, m.failed, m.retried, m.stalled, m.reaped),
    )?;
    let list = |state| async move {
        store
            .list(q, state, None, 10_000)
            .await
            .map(|v| v.ids.into_iter().map(|i| i.to_string()).collect::<Vec<_>>())
            .map_err(|e| e.to_string())
    };
    let pending = list(JobState::Pending).await?;
    let scheduled = list(JobState::Scheduled).await?;
    let active = list(JobState::Active).await?;
    let dead = list(JobState::Dead).await?;
    diff("list(pending), in claim order", &pending, &model.list_pending())?;
    diff("list(scheduled), by due time", &scheduled, &model.list_scheduled())?;
    diff("list(active), by lease deadline", &active, &model.list_active())?;
    let mut dead_sorted = dead.clone();
    dead_sorted.sort();
    diff(
        "list(dead) as a set",
        dead_sorted,
        model.dead.iter().cloned().collect::<Vec<_>>(),
    )?;
    // each job in exactly one place, its row's state that place's
    let mut place: BTreeMap<&str, JobState> = BTreeMap::new();
    for (ids, state) in [
        (&pending, JobState::Pending),
        (&scheduled, JobState::Scheduled),
        (&active, JobState::Active),
        (&dead, JobState::Dead),
    ] {
        for id in ids {
            if let Some(other) = place.insert(id, state) {
                return Err(format!("{id} is listed both {other} and {state}"));
            }
        }
    }
    let mut slots: BTreeMap<String, u64> = BTreeMap::new();
    for id in model.known.iter().map(String::as_str).chain([NOWHERE]) {
        let job = store.get(q, &jid(id)).await.map_err(e)?;
        let want = model.rows.get(id);
        let Some(job) = job else {
            if want.is_some() {
                return Err(format!("{id}: the store has no row, the model {want:?}"));
            }
            side.attempts.remove(id);
            continue;
        };
        let Some(want) = want else {
            return Err(format!("{id}: the store has a row {job:?}, the model none"));
        };
        if place.get(id) != Some(&job.state) {
            return Err(format!(
                "{id}: its row says {} but it is listed {:?}",
                job.state,
                place.get(id)
            ));
        }
        if job.state == JobState::Active {
            if let Some(g) = &job.group {
                *slots.entry(g.to_string()).or_default() += 1;
            }
        }
        let waiting = job.state == JobState::Scheduled;
        if job.run_at.is_some() != waiting || job.score.is_some() != (job.state != JobState::Pending) {
            return Err(format!(
                "{id}: run_at {:?} or score {:?} do not fit {}",
                job.run_at, job.score, job.state
            ));
        }
        let token = job.attempts + job.free;
        let seen = side.attempts.insert(id.to_string(), token).unwrap_or(0);
        if token < seen {
            return Err(format!(
                "{id}: its token (attempts + free) went down from {seen} to {token}"
            ));
        }
        diff(
            &format!("{id}: (state, attempts, free, group, max_attempts, stalled, last_error, cancel, payload)"),
            (
                job.state,
                job.attempts,
                job.free,
                job.group.map(|g| g.to_string()),
                job.max_attempts,
                job.stalled,
                job.last_error,
                job.cancel,
                job.payload,
            ),
            (
                want.place.state(),
                want.attempts - want.free,
                want.free,
                want.group.clone(),
                want.max_attempts,
                want.stalled,
                want.last_error.clone(),
                want.cancel.clone(),
                want.payload.clone(),
            ),
        )?;
    }
    // the slot invariant, and the ring, read under the contract
    let (ring, groups, throttled) = side.probe.ring_and_groups().await;
    let a_fields: BTreeMap<String, u64> = groups
        .iter()
        .filter_map(|(k, v)| {
            k.strip_prefix("a:")
                .map(|g| (g.to_string(), v.parse().unwrap_or(u64::MAX)))
        })
        .collect();
    diff(
        "slot invariant: a:<g> against the active jobs per group",
        &a_fields,
        &slots,
    )?;
    let flags: BTreeSet<String> = groups
        .keys()
        .filter_map(|k| k.strip_prefix("r:").map(str::to_string))
        .collect();
    check_ring(model, &ring, &throttled, &flags)?;
    diff("the ring", ring, model.ring.iter().cloned().collect::<Vec<_>>())?;
    diff("the throttled groups", throttled, model.throttled_order())?;
    let mut hash: BTreeMap<String, Option<u64>> = groups
        .into_iter()
        .map(|(k, v)| {
            let v = if k.starts_with("r:") { None } else { v.parse().ok() };
            (k, v)
        })
        .collect();
    // the count of every lane's jobs a Redis queue keeps once a job has joined a lane (no group's
    // field: the embedded store's triggers count them in a table of their own)
    if let Some(kept) = hash.remove("lane_jobs") {
        let laned = model.lanes.values().map(BTreeSet::len).sum::<usize>() as u64;
        diff("the lanes' count (lane_jobs)", kept, Some(laned))?;
    }
    // the count of kinds with a limit of their own, which every claim reads with the queue's other
    // settings (the model sets no kind's limit)
    if let Some(n) = hash.remove("kind_limits") {
        diff("the limited kinds' count (kind_limits)", n, Some(0))?;
    }
    // the mark that the flat sets by kind hold every flat job; when set, the raw jobs' set (every
    // job of the model is raw) is pending itself
    if let Some(mark) = hash.remove("by_kind") {
        diff("the by-kind mark", mark, Some(1))?;
        let (flat, raw) = side.probe.flat_and_raw().await;
        diff("the raw jobs' set against pending", raw, flat)?;
    }
    diff("the groups hash", hash, model.groups_hash())?;
    // the pending tally counts what the ready sets hold, and pending_since names its fields
    let tally = side.probe.tally().await;
    diff("the pending tally", &tally.kept, &tally.told)?;
    diff(
        "the fields of pending_since",
        tally.since,
        tally.kept.keys().cloned().collect::<BTreeSet<_>>(),
    )?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Running a sequence
// ---------------------------------------------------------------------------------------------

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("a tokio runtime")
    })
}

fn redis_url() -> &'static str {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| redis_server::url_from_env_or_start("EMQ_TEST_REDIS_URL"))
}

fn queue_name() -> QueueName {
    static SEQ: AtomicU32 = AtomicU32::new(0);
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    QueueName::new(format!("model-{}-{n}", std::process::id())).expect("a queue name")
}

/// Runs `ops` against the model and both stores in lockstep; Err names the first disagreement.
/// Ok: the replies, one per op (the model's, which both stores gave).
fn run(ops: &[Op]) -> Result<Vec<Reply>, String> {
    runtime().block_on(run_async(ops))
}

async fn run_async(ops: &[Op]) -> Result<Vec<Reply>, String> {
    let q = queue_name();
    let url = redis_url();
    let redis = RedisStore::open(url).await.map_err(|e| e.to_string())?;
    let conn = redis_server::connect(url).await;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let path = dir.path().join("model.db");
    let path = path.to_str().expect("a UTF-8 path");
    let embedded = EmbeddedStore::open(path).await.map_err(|e| e.to_string())?;
    let mut sides = [
        Side {
            name: "redis",
            store: Box::new(redis),
            serves_offers: false,
            probe: Probe::Redis(probe_conn::ProbeConn::Redis(conn), QueueKeys::new(&q)),
            attempts: BTreeMap::new(),
        },
        Side {
            name: "embedded",
            store: Box::new(embedded.clone()),
            serves_offers: true,
            probe: Probe::Redis(probe_conn::ProbeConn::Engine(embedded), QueueKeys::new(&q)),
            attempts: BTreeMap::new(),
        },
    ];
    // the model keeps no finished row: the queue's retention is off on both stores
    for side in &sides {
        let off = side.store.set_retention(&q, &echomq::Retention::off()).await;
        off.map_err(|e| format!("{}: set_retention: {e}", side.name))?;
    }
    let mut model = Model::default();
    let mut delays = 0;
    // every short lease has lapsed on both stores' clocks once this wall-clock time has passed
    let mut lapse_at = SystemTime::UNIX_EPOCH;
    let result = async {
        let mut replies = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let step = model.resolve(op, &mut delays);
            if matches!(step, Step::Reap(..) | Step::Sweep(..)) {
                if let Ok(wait) = lapse_at.duration_since(SystemTime::now()) {
                    tokio::time::sleep(wait).await;
                }
            }
            let want = model.apply(&step);
            let mut got = Vec::new();
            for side in &sides {
                got.push(run_step(side.store.as_ref(), &q, &step, side.serves_offers).await);
            }
            if let Step::Claim {
                long: false, lease_ms, ..
            } = step
            {
                lapse_at = SystemTime::now() + Duration::from_millis(lease_ms + 3);
            }
            let wrong: Vec<String> = sides
                .iter()
                .zip(&got)
                .filter(|(_, g)| !matches!(g, Ok(r) if *r == want))
                .map(|(s, g)| format!("{} replied {g:?}", s.name))
                .collect();
            if !wrong.is_empty() {
                return Err(format!(
                    "step {i} {op:?} = {step:?}: the model replies {want:?}, but {}",
                    wrong.join("; ")
                ));
            }
            model
                .check_self()
                .map_err(|e| format!("after step {i} {op:?} = {step:?}: {e}"))?;
            for side in &mut sides {
                check_store(side, &q, &model)
                    .await
                    .map_err(|e| format!("after step {i} {op:?} = {step:?}, {}: {e}", side.name))?;
            }
            replies.push(want);
        }
        Ok(replies)
    }
    .await;
    // leave nothing behind on a Redis that may be shared
    let _ = sides[0].store.obliterate(&q, true).await;
    result
}

// ---------------------------------------------------------------------------------------------
// The generators
// ---------------------------------------------------------------------------------------------

fn spec() -> impl Strategy<Value = Spec> {
    (
        prop::option::weighted(0.35, 0u8..4),
        prop::bool::weighted(0.12),
        prop::option::weighted(0.3, 1u32..=3),
        prop::option::weighted(0.3, 1u8..=9),
        0u8..10,
    )
        .prop_map(|(id, later, max_attempts, priority, payload)| Spec {
            id,
            later,
            max_attempts,
            priority: priority.unwrap_or(0),
            payload,
        })
}

fn specs() -> impl Strategy<Value = Vec<Spec>> {
    prop::collection::vec(spec(), 1..=4)
}

/// A pick that prefers `among` (three times in four).
fn pick(among: Among) -> impl Strategy<Value = Pick> {
    (
        prop_oneof![
            6 => Just(among),
            1 => Just(Among::Any),
            1 => Just(Among::Active),
        ],
        any::<u8>(),
        prop_oneof![
            8 => Just(Token::Current),
            1 => Just(Token::Old),
            1 => Just(Token::Next),
        ],
    )
        .prop_map(|(among, index, token)| Pick { among, index, token })
}

/// Mostly every lapsed lease; sometimes only the first one or two.
fn recovery_limit() -> impl Strategy<Value = u32> {
    prop_oneof![4 => Just(NO_LIMIT), 1 => Just(1u32), 1 => Just(2u32)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => specs().prop_map(Op::Enqueue),
        3 => (1u32..=8, prop::option::weighted(0.4, 0u8..3), specs())
            .prop_map(|(n, group, specs)| Op::Handed { n, group, specs }),
        6 => (0u8..3, specs()).prop_map(|(g, s)| Op::Genqueue(g, s)),
        8 => (1u32..=8, prop::bool::weighted(0.6), prop_oneof![1 => Just(1u32), 1 => Just(2u32), 4 => Just(3u32)])
            .prop_map(|(n, short, max_attempts)| Op::Claim { n, short, max_attempts }),
        3 => pick(Among::Active).prop_map(Op::Complete),
        2 => prop::collection::vec(pick(Among::Active), 1..=4).prop_map(Op::CompleteMany),
        1 => pick(Among::Active).prop_map(Op::CompleteCancelled),
        1 => (pick(Among::Active), 0u8..10).prop_map(|(p, payload)| Op::UpdateData(p, payload)),
        3 => (pick(Among::Active), prop::bool::weighted(0.3), 1u32..=4)
            .prop_map(|(pick, later, max_attempts)| Op::Retry { pick, later, max_attempts }),
        1 => pick(Among::Active).prop_map(Op::Discard),
        2 => (pick(Among::Active), any::<bool>()).prop_map(|(pick, later)| Op::Release { pick, later }),
        4 => (recovery_limit(), prop::option::of(1u32..=2))
            .prop_map(|(limit, max_redeliveries)| Op::Reap { limit, max_redeliveries }),
        4 => (1u32..=2, recovery_limit()).prop_map(|(max_stalled, limit)| Op::Sweep { max_stalled, limit }),
        2 => (pick(Among::Pending), any::<bool>()).prop_map(|(pick, force)| Op::Remove { pick, force }),
        3 => (pick(Among::Dead), 1u32..=3).prop_map(|(pick, extra)| Op::Redrive { pick, extra }),
        2 => pick(Among::Pending).prop_map(Op::Cancel),
        2 => pick(Among::Scheduled).prop_map(Op::PromoteJob),
        3 => (prop::option::weighted(0.75, 0u8..3), 1u32..=3)
            .prop_map(|(group, limit)| Op::SetGroupLimit { group, limit }),
        1 => (0u8..5, prop::option::weighted(0.7, 1u32..=2))
            .prop_map(|(target, burst)| Op::SetRateLimit { target, burst }),
    ]
}

fn config() -> Config {
    Config {
        // PROPTEST_CASES=n runs a longer hunt
        cases: std::env::var("PROPTEST_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(128),
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config())]

    /// Random sequences of verbs: both stores give the model's replies and keep every invariant.
    #[test]
    fn both_stores_follow_the_model(ops in prop::collection::vec(op(), 1..=40)) {
        run(&ops).map_err(TestCaseError::fail)?;
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-written sequences: the ring's claim-order examples, and minimal sequences found by shrinking
// ---------------------------------------------------------------------------------------------

fn plain(n: u8) -> Vec<Spec> {
    (0..n)
        .map(|payload| Spec {
            id: None,
            later: false,
            max_attempts: None,
            priority: 0,
            payload,
        })
        .collect()
}

/// The ids a claim reply handed out, in order.
fn claimed(reply: &Reply) -> Vec<&str> {
    match reply {
        Reply::Claimed(jobs) => jobs.iter().map(|(id, ..)| id.as_str()).collect(),
        other => panic!("not a claim reply: {other:?}"),
    }
}

const HELD: Pick = Pick {
    among: Among::Active,
    index: 0,
    token: Token::Current,
};

/// The ring's order: f1 f2 f3, then a1 a2, b1 b2, c1 c2 (limit 1): claim(4) gives f1 a1 b1 c1, the next
/// claim(10) gives f2 f3.
#[test]
fn the_ring_hands_out_one_job_per_member_in_turn() {
    let replies = run(&[
        Op::Enqueue(plain(3)),
        Op::Genqueue(0, plain(2)),
        Op::Genqueue(1, plain(2)),
        Op::Genqueue(2, plain(2)),
        Op::Claim {
            n: 4,
            short: false,
            max_attempts: 3,
        },
        Op::Claim {
            n: 8,
            short: false,
            max_attempts: 3,
        },
        Op::CompleteMany(vec![HELD; 4]),
    ])
    .unwrap();
    // f1..f3 = 1..3, a = 4 5, b = 6 7, c = 8 9
    assert_eq!(claimed(&replies[4]), ["1", "4", "6", "8"]);
    assert_eq!(claimed(&replies[5]), ["2", "3"]);
}

/// The ring's order with limit 2: claim(1) + complete repeated gives f1 a1 b1 c1 f2 a2 b2 c2 f3.
#[test]
fn one_job_at_a_time_runs_in_the_pinned_order() {
    let mut ops = vec![
        Op::Enqueue(plain(3)),
        Op::Genqueue(0, plain(2)),
        Op::Genqueue(1, plain(2)),
        Op::Genqueue(2, plain(2)),
        Op::SetGroupLimit { group: None, limit: 2 },
    ];
    for _ in 0..10 {
        ops.push(claim(1, false));
        ops.push(Op::Complete(HELD));
    }
    let replies = run(&ops).unwrap();
    let order: Vec<&str> = replies[5..].iter().step_by(2).flat_map(claimed).collect();
    assert_eq!(order, ["1", "4", "6", "8", "2", "5", "7", "9", "3"]);
}

/// Lapsed lane and flat jobs go back to the front, in lapse order; a second sweep buries them.
#[test]
fn reap_and_sweep_recover_to_the_front() {
    let replies = run(&[
        Op::Enqueue(plain(2)),
        Op::Genqueue(0, plain(3)),
        Op::SetGroupLimit {
            group: Some(0),
            limit: 2,
        },
        Op::Claim {
            n: 3,
            short: true,
            max_attempts: 3,
        },
        Op::Claim {
            n: 1,
            short: true,
            max_attempts: 3,
        },
        Op::Reap {
            limit: NO_LIMIT,
            max_redeliveries: None,
        },
        Op::Claim {
            n: 4,
            short: true,
            max_attempts: 3,
        },
        Op::Sweep {
            max_stalled: 2,
            limit: NO_LIMIT,
        },
        Op::Claim {
            n: 8,
            short: true,
            max_attempts: 3,
        },
        Op::Sweep {
            max_stalled: 2,
            limit: NO_LIMIT,
        },
    ])
    .unwrap();
    let ids = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    // flat 1 2, g0 3 4 5 (limit 2): the ring alternates ~ and g0
    assert_eq!(claimed(&replies[3]), ["1", "3", "2"]);
    assert_eq!(claimed(&replies[4]), ["4"]);
    assert_eq!(replies[5], Reply::Reaped(4));
    // back at the fronts: g0's lane 3 4 5, flat 1 2 at score 0
    assert_eq!(claimed(&replies[6]), ["3", "1", "4", "2"]);
    assert_eq!(replies[7], Reply::Swept(ids(&["1", "2", "3", "4"]), vec![]));
    assert_eq!(claimed(&replies[8]), ["3", "1", "4", "2"]);
    assert_eq!(replies[9], Reply::Swept(vec![], ids(&["1", "2", "3", "4"])));
}

/// A delay of an hour plus the next of `delays` (distinct due times) when `later`, else 0.
fn later_ms(later: bool, delays: &mut u64) -> u64 {
    if !later {
        return 0;
    }
    *delays += 1;
    LATER_MS + *delays
}

fn claim(n: u32, short: bool) -> Op {
    Op::Claim {
        n,
        short,
        max_attempts: 3,
    }
}

/// A cancel request on a running job stays on its row through a reap: the next claim cancels it
/// instead of handing it out, and the group's slot is free again.
#[test]
fn a_cancel_request_survives_recovery() {
    let replies = run(&[
        Op::Genqueue(0, plain(2)),
        claim(1, true),
        Op::Cancel(HELD),
        Op::Reap {
            limit: NO_LIMIT,
            max_redeliveries: None,
        },
        claim(8, false),
        Op::Complete(HELD),
    ])
    .unwrap();
    assert_eq!(replies[2], Reply::Cancelled(CancelOutcome::Requested));
    assert_eq!(replies[3], Reply::Reaped(1));
    assert_eq!(claimed(&replies[4]), ["2"], "job 1 was cancelled, not handed out");
}

/// A raised queue default reaches a group at its next settle (set_group_limit.lua); a group's own
/// limit takes effect at once.
#[test]
fn a_raised_default_reaches_a_group_at_its_next_settle() {
    let replies = run(&[
        Op::Genqueue(0, plain(4)),
        Op::Genqueue(1, plain(3)),
        claim(8, false),
        Op::SetGroupLimit { group: None, limit: 3 },
        claim(8, false),
        Op::Complete(HELD),
        claim(8, false),
        Op::SetGroupLimit {
            group: Some(1),
            limit: 1,
        },
        Op::SetGroupLimit {
            group: Some(0),
            limit: 2,
        },
        Op::CompleteMany(vec![HELD; 3]),
        claim(8, false),
    ])
    .unwrap();
    assert_eq!(claimed(&replies[2]), ["1", "5"]);
    assert_eq!(claimed(&replies[4]), Vec::<&str>::new(), "g0 and g1 stay off the ring");
    assert_eq!(
        claimed(&replies[6]),
        ["2", "3", "4"],
        "g0's settle put it back under the default 3"
    );
    assert_eq!(
        replies[9],
        Reply::SettledMany(vec![Settled::Ok, Settled::Stale, Settled::Stale])
    );
    assert_eq!(
        claimed(&replies[10]),
        Vec::<&str>::new(),
        "g0 at its own limit 2, g1 at 1"
    );
}

/// A job leased on its last attempt dies at the next claim once the lease lapsed; redrive keeps
/// its attempts and raises its budget, so it runs once more.
#[test]
fn the_last_attempt_dies_at_claim_and_redrive_raises_the_budget() {
    let once = Spec {
        id: Some(1),
        later: false,
        max_attempts: Some(1),
        priority: 0,
        payload: 7,
    };
    let replies = run(&[
        Op::Enqueue(vec![once.clone()]),
        Op::Genqueue(2, vec![Spec { id: None, ..once }]),
        claim(2, true),
        Op::Reap {
            limit: 1,
            max_redeliveries: None,
        },
        Op::Reap {
            limit: NO_LIMIT,
            max_redeliveries: None,
        },
        claim(8, false),
        Op::Redrive {
            pick: Pick {
                among: Among::Dead,
                index: 0,
                token: Token::Current,
            },
            extra: 1,
        },
        claim(8, false),
        Op::Retry {
            pick: HELD,
            later: false,
            max_attempts: 3,
        },
    ])
    .unwrap();
    // "2" < "c1": the lane job's lease lapsed first (equal deadlines order by id bytes)
    assert_eq!(replies[3], Reply::Reaped(1));
    assert_eq!(claimed(&replies[5]), Vec::<&str>::new(), "both died at claim");
    assert_eq!(replies[6], Reply::Redriven(Redriven::Redriven));
    assert_eq!(
        replies[7],
        Reply::Claimed(vec![("2".into(), b"p7".to_vec(), 2, Some("g2".into()))])
    );
    assert_eq!(
        replies[8],
        Reply::Retried(Retried::Dead),
        "its budget is attempts + 1 = 2"
    );
}

/// A release gives the attempt back: a job of budget 1 released twice still runs its one attempt,
/// first at its set's front (ahead of the flat job enqueued before it was claimed), and the released
/// holder's settle is stale.
#[test]
fn a_released_job_keeps_its_attempt_and_goes_back_to_the_front() {
    let once = Spec {
        id: None,
        later: false,
        max_attempts: Some(1),
        priority: 0,
        payload: 1,
    };
    // the released holder's token, once its job is scheduled
    let released = Pick {
        among: Among::Scheduled,
        index: 0,
        token: Token::Current,
    };
    let replies = run(&[
        Op::Enqueue(vec![once.clone(), once]),
        claim(1, false),
        Op::Release {
            pick: HELD,
            later: false,
        },
        claim(1, false),
        Op::Release {
            pick: HELD,
            later: true,
        },
        Op::Complete(released),
        claim(8, false),
    ])
    .unwrap();
    assert_eq!(claimed(&replies[1]), ["1"]);
    assert_eq!(replies[2], Reply::Settled(Settled::Ok));
    assert_eq!(
        replies[3],
        Reply::Claimed(vec![("1".into(), b"p1".to_vec(), 1, None)]),
        "back at the front, on the attempt it gave back"
    );
    assert_eq!(replies[4], Reply::Settled(Settled::Ok));
    assert_eq!(
        replies[5],
        Reply::Settled(Settled::Stale),
        "the released holder's settle"
    );
    assert_eq!(claimed(&replies[6]), ["2"], "job 1 is scheduled an hour on");
}

/// Rate limits of one start an hour: the queue's admits its burst and stops every claim after it,
/// the hand-off to a parked consumer included (found by the model: the embedded store's enqueue
/// once handed its new jobs over past the limit); a group's holds that group back off the ring —
/// its jobs still listed — until its limit is set again, and the default's change puts every held
/// group back.
#[test]
fn rate_limits_admit_their_burst_and_hold_the_rest_back() {
    let handed = |r: &Reply| match r {
        Reply::Handed(_, jobs) => jobs.iter().map(|j| j.0.clone()).collect::<Vec<_>>(),
        other => panic!("not a hand-off: {other:?}"),
    };
    let replies = run(&[
        Op::SetRateLimit {
            target: 0,
            burst: Some(1),
        },
        Op::Handed {
            n: 2,
            group: None,
            specs: plain(2),
        },
        claim(8, false),
        Op::SetRateLimit { target: 0, burst: None },
        Op::SetRateLimit {
            target: 1,
            burst: Some(1),
        },
        Op::SetRateLimit {
            target: 3,
            burst: Some(2),
        },
        Op::Genqueue(0, plain(3)),
        Op::Genqueue(1, plain(3)),
        Op::SetGroupLimit { group: None, limit: 3 },
        claim(8, false),
        claim(8, false),
        Op::SetRateLimit {
            target: 1,
            burst: Some(1),
        },
        claim(8, false),
    ])
    .unwrap();
    assert_eq!(handed(&replies[1]), ["1"], "the burst of one");
    assert!(claimed(&replies[2]).is_empty(), "the queue admits no second start");
    // after the queue's limit is removed: the other flat job, g0 once (the default), g1 twice
    assert_eq!(claimed(&replies[9]), ["2", "3", "6", "7"]);
    assert!(claimed(&replies[10]).is_empty(), "both groups held back");
    // the default set again: both groups back, each budget afresh (g1's last job)
    assert_eq!(claimed(&replies[12]), ["4", "8"]);
}
