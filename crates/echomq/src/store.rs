//! The `Store` contract: one async method per verb of the closed list, plus `park` and
//! `cancel_requests`, so that nothing above it names Redis. Replies are typed; a store turns its
//! wire replies into these values and nothing else sees them.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;

use crate::error::{Error, Result};
use crate::job::{ClaimedJob, JobRow, JobState, NewJob};
use crate::keyspace::{GroupName, JobId, QueueName};
use crate::rate::{RateLimit, RateLimits, RateTarget};
use crate::registry::ConsumerEntry;
use crate::schedule::{Refill, RefillRequest, Schedule, ScheduleInfo, ScheduleName};

#[cfg(any(feature = "redis", feature = "embedded"))]
pub(crate) mod engine;
mod jobs_page;
#[cfg(any(feature = "redis", feature = "embedded"))]
pub(crate) mod reply;
#[cfg(any(feature = "redis", feature = "embedded"))]
pub(crate) mod scripts;
#[cfg(any(feature = "redis", feature = "embedded"))]
pub(crate) mod verbs;
#[cfg(any(feature = "redis", feature = "embedded"))]
pub(crate) use jobs_page::After;
pub use jobs_page::JobsPage;

#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(feature = "redis")]
pub mod redis;

/// The largest number of jobs one enqueue/genqueue/claim/complete_many script call handles; larger
/// batches are split by the client (and pipelined in one round trip).
pub const BATCH_MAX: usize = 1000;

/// The payload bytes one script call (or embedded transaction) carries at most: enqueue and
/// complete_many batches are split here too, and a claim takes no job once the payloads it hands
/// out reach it (it always takes the first, so a claim passes it by one payload at most).
pub const BATCH_BYTES_MAX: usize = 8 * 1024 * 1024;

/// The default payload limit: 16 MiB.
pub const PAYLOAD_LIMIT_DEFAULT: usize = 16 * 1024 * 1024;

/// The default number of extra attempts a redrive grants.
pub const REDRIVE_EXTRA_DEFAULT: u32 = 3;

/// The default chunk size of drain, obliterate and redrive-all calls (the client loops).
pub const CHUNK_DEFAULT: u32 = 1000;

/// The default `MAXLEN ~` of the completion-record stream.
pub const RECORDS_MAXLEN_DEFAULT: u64 = 10_000;

/// Lapsed leases one reap of a beat's round ([`Recovery::Reap`]) returns at most, and the default
/// limit of [`RedeliveryPolicy`].
pub const REAP_LIMIT: u32 = 1000;

/// The default redelivery budget of [`RedeliveryPolicy`].
pub const MAX_REDELIVERIES_DEFAULT: u32 = 3;

/// The reply to one job of an enqueue or genqueue.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Enqueued {
    /// A new job with this id.
    New(JobId),
    /// A caller id whose row already exists (or came earlier in the same batch): nothing written.
    Duplicate(JobId),
    /// A dedup key another job holds (`until_finished`, `for`): nothing written; that job's id.
    Deduplicated(JobId),
    /// A `debounce` key whose job still waits: that job took this payload and starts a window
    /// from now; its id.
    Debounced(JobId),
}

impl Enqueued {
    /// The job's id: the new job's, or the one that answered for this enqueue.
    pub fn id(&self) -> &JobId {
        match self {
            Enqueued::New(id) | Enqueued::Duplicate(id) | Enqueued::Deduplicated(id) | Enqueued::Debounced(id) => id,
        }
    }
}

/// The reply of a fenced settle (complete, complete_many per job, complete_cancelled, update_data).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Settled {
    /// Done.
    Ok,
    /// The caller no longer holds the job (its token is old, or the job left `active`).
    Stale,
    /// No such row.
    Gone,
}

/// The reply of retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retried {
    /// Scheduled (or ready at once with a zero delay) for another attempt.
    Retrying,
    /// Its attempts reached max_attempts: dead.
    Dead,
    /// Not the holder.
    Stale,
    /// No such row.
    Gone,
}

/// The reply of discard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Discarded {
    /// Dead now.
    Dead,
    /// Not the holder.
    Stale,
    /// No such row.
    Gone,
}

/// The reply of extend_lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Extended {
    /// The lease now ends `lease` after the store's now.
    Ok,
    /// Not the holder, or not in `active`.
    Stale,
    /// No such row.
    Gone,
}

/// What a settle does besides the move: completion records. (What it keeps of a finished job is
/// the queue's [`Retention`], a setting in the store.)
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct SettleOptions {
    /// Write a completion record to `emq:{q}:completions` inside the settling script.
    pub record: bool,
}

impl SettleOptions {
    /// No completion records: the default, as a constant.
    pub const fn new() -> Self {
        SettleOptions { record: false }
    }

    /// Whether each settle writes a completion record (off by default).
    pub const fn record(mut self, record: bool) -> Self {
        self.record = record;
        self
    }
}

/// What a queue keeps of its finished jobs — completed and cancelled; dead jobs stay in the morgue,
/// payload and all, until redriven or removed. A setting stored in the store beside the queue
/// ([`Store::set_retention`]), read by every verb that finishes a job, so what `get` and
/// `JobHandle::wait` see does not depend on which worker settled it. A kept row holds the job's
/// state, attempts, kind, group, times, its output (or cancel reason) and no payload; a queue that
/// never set one keeps [`Retention::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct Retention {
    /// The newest rows kept of each finished state — this many completed and this many cancelled;
    /// 0 keeps none (a row is deleted as its job finishes).
    pub keep: u32,
    /// How long a finished row is kept: rows older than this are deleted as later jobs of the
    /// queue finish (so an idle queue keeps its last rows until its next finish).
    pub max_age: Duration,
    /// The longest output kept, in bytes: a longer output is dropped, and the row keeps its size
    /// ([`JobRow::output_dropped`]).
    pub max_output: u32,
}

impl Default for Retention {
    /// 10,000 rows of each finished state, for 24 hours, outputs up to 64 KiB.
    fn default() -> Self {
        Retention {
            keep: 10_000,
            max_age: Duration::from_secs(24 * 3600),
            max_output: 64 * 1024,
        }
    }
}

impl Retention {
    /// Keeps nothing: every finished row is deleted as its job finishes (what a benchmark or a
    /// queue whose results nobody reads wants). `JobHandle::wait` still learns when a job ends,
    /// but with no row to read its outcome from it answers `Outcome::Expired`.
    pub fn off() -> Self {
        Retention {
            keep: 0,
            ..Retention::default()
        }
    }
}

setters! { Retention {
    /// The newest rows kept of each finished state (0: none).
    keep: keep: u32;
    /// How long a finished row is kept.
    max_age: max_age: Duration;
    /// The longest output kept, in bytes.
    max_output: max_output: u32;
}}

/// The reply of mark_waited.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Waited {
    /// Still to finish, and now marked: the verb that finishes it publishes its id.
    Waiting,
    /// Finished (completed, cancelled or dead): its row.
    Finished(Box<JobRow>),
    /// No row. `sequence` is the queue's id sequence: a generated id at or below it was pushed (its
    /// row is past retention, or was removed); above it, no such job was ever pushed.
    Gone {
        /// The last sequence value the queue handed out (0 before its first job).
        sequence: u64,
    },
}

/// A completion ([`Store::complete`], one entry of [`Store::complete_many`]): the job, its
/// holder's attempts token, and the handler's output if any.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Completion {
    /// The job.
    pub id: JobId,
    /// The holder's attempts token.
    pub token: u64,
    /// The handler's output, if any.
    pub output: Option<Vec<u8>>,
}

impl Completion {
    /// The completion of the attempt `token` of job `id`, with no output.
    pub fn new(id: JobId, token: u64) -> Self {
        Completion {
            id,
            token,
            output: None,
        }
    }

    /// The handler's output, kept with the job (`None`: none).
    pub fn output(mut self, output: Option<impl Into<Vec<u8>>>) -> Self {
        self.output = output.map(Into::into);
        self
    }
}

/// The reply of promote.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Promoted {
    /// Due jobs moved to ready.
    pub moved: u64,
    /// Time until the next scheduled job or schedule slot is due, read in the same step; `None`
    /// when none waits.
    pub next_due_in: Option<Duration>,
    /// Jobs fired for schedule slots.
    pub fired: u64,
    /// The schedules left with few slots: the caller computes more ([`crate::schedule::refill`])
    /// and writes them with [`Store::refill_schedule`] (the consumer does, after its beat).
    pub refills: Vec<RefillRequest>,
}

/// The reply of sweep_stalled: ids recovered to ready and ids dead-lettered.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Swept {
    /// Recovered to pending (or their lane's front).
    pub recovered: Vec<JobId>,
    /// Dead-lettered: with `last_error = "stalled"`, or naming the defect of a key of another type
    /// found at the job's row (only by hand).
    pub dead: Vec<JobId>,
}

/// The reply of remove.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Removed {
    /// The row and its membership are gone.
    Removed,
    /// No such row.
    Gone,
    /// The job is active and `force` was not given: nothing done.
    Active,
}

/// The reply of redrive for one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Redriven {
    /// Back to ready with a raised budget.
    Redriven,
    /// The job is not dead.
    NotDead,
    /// No such row.
    Gone,
}

/// The reply of promote_job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum PromotedJob {
    /// Ready now.
    Promoted,
    /// The job is not scheduled.
    NotScheduled,
    /// No such row.
    Gone,
}

/// What a cancel request did: the reply of `cancel` (a handler that meets a cancel gets
/// [`crate::Cancelled`] instead).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CancelOutcome {
    /// It was waiting: cancelled now.
    Cancelled,
    /// It is running: the request is on the row and published to its consumer.
    Requested,
    /// No such row.
    Gone,
    /// It already finished (dead, completed or cancelled).
    Finished,
}

/// The reply of obliterate for one chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Obliterated {
    /// Every key of the queue is gone; `removed` job rows went in all.
    Done {
        /// Job rows deleted.
        removed: u64,
    },
    /// The queue holds active jobs and `force` was not given: nothing done.
    Active {
        /// How many.
        active: u64,
    },
}

/// Sizes per state and the counters of one queue.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Counts {
    /// Ready jobs, flat and in lanes.
    pub pending: u64,
    /// Delayed jobs and waiting retries.
    pub scheduled: u64,
    /// Leased jobs.
    pub active: u64,
    /// Dead jobs.
    pub dead: u64,
    /// Completions counted since the queue was created or obliterated.
    pub completed: u64,
    /// Cancellations counted.
    pub cancelled: u64,
    /// Jobs dead-lettered (counted).
    pub failed: u64,
    /// Retries counted.
    pub retried: u64,
    /// Stalled recoveries counted.
    pub stalled: u64,
    /// Reaped leases counted.
    pub reaped: u64,
    /// Whether the queue is paused.
    pub paused: bool,
    /// How long the oldest pending job has waited ready, on the store's clock, to within a
    /// second; `None` when no pending job is counted. Read in O(1) from the pending tally the
    /// store keeps: it counts every job made ready by enqueue, promotion, retry, redrive or a
    /// schedule, but not the jobs put back at the front of their set (recovered from a lapsed
    /// lease or a stall, or released), nor jobs an earlier version made ready.
    pub oldest_pending_age: Option<Duration>,
    /// The flat ready jobs of each kind that has some (`None`: raw jobs), by kind: what waits for
    /// a consumer of that kind. Jobs in group lanes are not counted here.
    pub ready_by_kind: Vec<(Option<String>, u64)>,
}

/// How many groups a page of [`Store::groups`] holds: at least this many unless it is the last
/// (a Redis page ends where a chunk of the groups hash ends, so it may hold a chunk's more).
pub const GROUPS_PAGE: usize = 100;

/// A group as [`Store::groups`] lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct GroupRow {
    /// The group.
    pub group: GroupName,
    /// Its ready jobs (its lane's length).
    pub waiting: u64,
    /// Its running jobs (the slots it holds).
    pub active: u64,
    /// Its own concurrency limit; `None`: the queue's default.
    pub limit: Option<u32>,
}

/// A page of [`Store::groups`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct GroupsPage {
    /// The page's groups, by name.
    pub groups: Vec<GroupRow>,
    /// The queue's default limit, for groups without their own.
    pub default_limit: u32,
    /// The cursor of the next page; `None` after the last. Opaque: a store's own.
    pub next: Option<String>,
}

/// The most minutes [`Store::history`] reads: a day, what a queue busy every minute keeps.
pub const HISTORY_MINUTES_MAX: u32 = 1440;

/// Jobs completed and dead-lettered per minute (history): each settle counts its jobs in the
/// minute it ran, once per call however many jobs it settles.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct History {
    /// The first minute's start, in minutes since the Unix epoch (store clock).
    pub first_minute: u64,
    /// Jobs completed in each minute, oldest first.
    pub completed: Vec<u64>,
    /// Jobs dead-lettered in each minute, oldest first.
    pub failed: Vec<u64>,
}

/// Refuses a history of 0 minutes or of more than [`HISTORY_MINUTES_MAX`].
pub(crate) fn check_history_minutes(minutes: u32) -> Result<()> {
    if minutes == 0 || minutes > HISTORY_MINUTES_MAX {
        return Err(Error::InvalidOption {
            field: "minutes",
            value: minutes.to_string(),
            reason: "1 to 1440",
        });
    }
    Ok(())
}

/// Which limit set_group_limit sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LimitTarget {
    /// One group's own limit.
    Group(GroupName),
    /// The queue's default, for groups without their own.
    Default,
}

/// What a recovery sweep is allowed to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct StalledPolicy {
    /// Dead-letter a job on its `max_stalled`-th stall (1 = the first, the default).
    pub max_stalled: u32,
    /// At most this many lapsed leases per sweep (100 by default).
    pub limit: u32,
}

impl Default for StalledPolicy {
    fn default() -> Self {
        Self {
            max_stalled: 1,
            limit: 100,
        }
    }
}

setters! { StalledPolicy {
    /// Dead-letter a job on its `max_stalled`-th stall (at least 1).
    max_stalled: max_stalled: u32;
    /// At most this many lapsed leases per sweep.
    limit: limit: u32;
}}

/// Reap with a budget of its own for lapsed leases ([`Recovery::Redeliver`]): a lapsed lease gives
/// back the attempt its claim took, so only handler failures spend `max_attempts`, and is counted
/// on the job's row (`stalled`, as [`JobRow::stalled`] reads it); the lapse past `max_redeliveries`
/// is dead, `last_error` "lease lapsed N times: its worker died or stalled each time".
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedeliveryPolicy {
    /// Lapsed leases a job is redelivered after (at least 1; [`MAX_REDELIVERIES_DEFAULT`]): the
    /// next lapse is dead. A job that kills its worker every time still ends.
    pub max_redeliveries: u32,
    /// At most this many lapsed leases per reap ([`REAP_LIMIT`] by default).
    pub limit: u32,
}

impl Default for RedeliveryPolicy {
    fn default() -> Self {
        Self {
            max_redeliveries: MAX_REDELIVERIES_DEFAULT,
            limit: REAP_LIMIT,
        }
    }
}

setters! { RedeliveryPolicy {
    /// Lapsed leases a job is redelivered after (at least 1): the next lapse is dead.
    max_redeliveries: max_redeliveries: u32;
    /// At most this many lapsed leases per reap.
    limit: limit: u32;
}}

/// The recovery leg of a consumer's beat: exactly one mechanism, chosen at start.
///
/// Every claim uses one of the job's attempts. Under [`Reap`](Recovery::Reap) and
/// [`Stalled`](Recovery::Stalled) a lapsed lease has used the attempt its claim took (a worker
/// killed mid-job, by OOM or a deploy, counts as a failed attempt), and a job whose lease lapses on
/// its last attempt goes dead at its next claim ("lease expired on the last attempt"): a job that
/// kills its worker cannot loop for ever. [`Redeliver`](Recovery::Redeliver) gives lapses a budget
/// of their own instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Recovery {
    /// No recovery leg.
    Off,
    /// Lapsed leases back to ready, each having used the attempt its claim took (the default):
    /// with `max_attempts` 3, three lapses in a row leave the job dead.
    #[default]
    Reap,
    /// The count-thresholded stalled sweep: each lapse counted on the row and having used its
    /// attempt; dead at `max_stalled` (last_error "stalled") or at the attempt budget, whichever
    /// comes first.
    Stalled(StalledPolicy),
    /// Reap, with lapsed leases on a budget of their own ([`RedeliveryPolicy`]): a lapse gives its
    /// attempt back, so a worker that dies mid-job does not spend the job's error budget; the
    /// attempt number a handler sees is that of the lapsed claim again.
    Redeliver(RedeliveryPolicy),
}

/// The kinds of job a consumer runs: every kind (the default), or only some — named kinds and,
/// when asked, raw jobs (pushed without a kind). A consumer of some kinds claims only their jobs:
/// the store keeps ready flat jobs by kind, so such a claim never reads a job it cannot run, and
/// it parks on its kinds' wakes, so the jobs of other kinds never wake it. A group's lane whose
/// next job is of another kind is passed over, its order and its slots untouched.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Kinds {
    /// `None`: every kind; else the kinds run, sorted, each once ("" for raw jobs).
    only: Option<Arc<[String]>>,
}

impl Kinds {
    /// Every kind, raw jobs included.
    pub fn all() -> Self {
        Kinds::default()
    }

    /// Only these kinds (each 1 to [`crate::job::KIND_MAX`] bytes of printable text, no
    /// spaces), and no raw job unless [`with_raw`](Self::with_raw) adds them. An empty list runs
    /// nothing: [`crate::ConsumerOptions::validate`] refuses it.
    pub fn only<I, S>(kinds: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let mut v: Vec<String> = kinds.into_iter().map(Into::into).collect();
        v.sort_unstable();
        v.dedup();
        Kinds { only: Some(v.into()) }
    }

    /// These kinds and raw jobs too; every kind stays every kind.
    pub fn with_raw(self) -> Self {
        match self.only {
            None => self,
            Some(list) => {
                let mut v = list.to_vec();
                v.push(String::new());
                v.sort_unstable();
                v.dedup();
                Kinds { only: Some(v.into()) }
            }
        }
    }

    /// Whether every kind is run.
    pub fn is_all(&self) -> bool {
        self.only.is_none()
    }

    /// Whether a job of `kind` (`None`: a raw job) is run.
    pub fn runs(&self, kind: Option<&str>) -> bool {
        match &self.only {
            None => true,
            Some(list) => list.iter().any(|k| k == kind.unwrap_or("")),
        }
    }

    /// The named kinds run, sorted (`None`: every kind); raw jobs are not among them
    /// ([`runs_raw`](Self::runs_raw)).
    pub fn names(&self) -> Option<Vec<&str>> {
        self.only
            .as_ref()
            .map(|l| l.iter().filter(|k| !k.is_empty()).map(String::as_str).collect())
    }

    /// The kinds run as the registry and `emq stats --json` list them (`None`: every kind; `""`
    /// for raw jobs).
    pub fn store_names(&self) -> Option<Vec<String>> {
        self.only.as_ref().map(|l| l.to_vec())
    }

    /// Whether raw jobs are run.
    pub fn runs_raw(&self) -> bool {
        self.runs(None)
    }

    /// The kinds as the store takes them (`None`: every kind; "" for raw jobs).
    pub(crate) fn store_list(&self) -> Option<&[String]> {
        self.only.as_deref()
    }

    /// Refuses an empty list and a kind that is no valid name.
    pub(crate) fn check(&self) -> Result<()> {
        let Some(list) = &self.only else { return Ok(()) };
        if list.is_empty() {
            return Err(Error::InvalidOption {
                field: "kinds",
                value: "[]".into(),
                reason: "at least one kind (or raw jobs); leave it unset for every kind",
            });
        }
        list.iter().filter(|k| !k.is_empty()).try_for_each(|k| check_kind(k))
    }
}

impl<S: Into<String>, const N: usize> From<[S; N]> for Kinds {
    fn from(kinds: [S; N]) -> Self {
        Kinds::only(kinds)
    }
}

impl<S: Into<String>> From<Vec<S>> for Kinds {
    fn from(kinds: Vec<S>) -> Self {
        Kinds::only(kinds)
    }
}

impl std::fmt::Display for Kinds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.only {
            None => f.write_str("every kind"),
            Some(list) => {
                let shown: Vec<&str> = list.iter().map(|k| if k.is_empty() { "(raw)" } else { k }).collect();
                f.write_str(&shown.join(" "))
            }
        }
    }
}

/// A claim ([`Store::claim`], a round's last leg): `n` jobs (0 = none in a round) under `lease`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClaimRequest {
    /// Jobs wanted; 0 sends no claim.
    pub n: u32,
    /// The lease of each.
    pub lease: Duration,
    /// The default attempt budget.
    pub max_attempts: u32,
    /// Retention and records for claim-time cancellations.
    pub settle: SettleOptions,
    /// The kinds claimed (every kind by default).
    pub kinds: Kinds,
    /// Of the `n`, how many the caller holds until a slot of its frees rather than starts at once
    /// (prefetch; 0 by default, at most `n`): the store hands out none of them on its last attempt
    /// (the claim stops before such a job), and none under a rate limit (the claim asks only for
    /// the `n - held` it starts).
    pub held: u32,
}

impl ClaimRequest {
    /// Up to `n` jobs, each leased for `lease`, under the consumer's default budget
    /// ([`crate::consumer::MAX_ATTEMPTS_DEFAULT`]) and the default settle options.
    pub fn new(n: u32, lease: Duration) -> Self {
        ClaimRequest {
            n,
            lease,
            max_attempts: crate::consumer::MAX_ATTEMPTS_DEFAULT,
            settle: SettleOptions::default(),
            kinds: Kinds::all(),
            held: 0,
        }
    }
}

setters! { ClaimRequest {
    /// The attempt budget of a job without its own (at least 1).
    max_attempts: max_attempts: u32;
    /// Retention and records for the jobs the claim finds cancelled.
    settle: settle: SettleOptions;
    /// The kinds claimed.
    kinds: kinds: Kinds;
    /// How many of the jobs the caller holds rather than starts at once.
    held: held: u32;
}}

/// A beat's round ([`Store::recover_promote_claim`]): its recovery leg, its promote (at most
/// `pump` due jobs; a schedule slot more than `grace` late missed) and its claim.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoundRequest {
    /// The recovery leg.
    pub recovery: Recovery,
    /// The most due jobs the promote moves.
    pub pump: u32,
    /// How late a schedule slot may fire (a schedule's own grace wins).
    pub grace: Duration,
    /// The claim (`n` 0: none).
    pub claim: ClaimRequest,
}

impl RoundRequest {
    /// A round of `recovery` and `claim`, promoting as a consumer does by default
    /// ([`crate::consumer::PUMP_BATCH_DEFAULT`] jobs, slots missed past
    /// [`crate::schedule::GRACE_MIN`]).
    pub fn new(recovery: Recovery, claim: ClaimRequest) -> Self {
        RoundRequest {
            recovery,
            pump: crate::consumer::PUMP_BATCH_DEFAULT,
            grace: crate::schedule::GRACE_MIN,
            claim,
        }
    }
}

setters! { RoundRequest {
    /// The most due jobs the promote moves.
    pump: pump: u32;
    /// How late a schedule slot may fire.
    grace: grace: Duration;
}}

/// What a discard asks ([`Store::discard`]): the failure kept as the job's `last_error`, and
/// what its death keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct DiscardRequest {
    /// The failure, kept as the job's `last_error`.
    pub error: String,
    /// Retention and records of the dead job.
    pub settle: SettleOptions,
}

impl DiscardRequest {
    /// A discard for `error`, under the default settle options.
    pub fn new(error: impl Into<String>) -> Self {
        DiscardRequest {
            error: error.into(),
            settle: SettleOptions::default(),
        }
    }
}

setters! { DiscardRequest {
    /// What the death keeps (retention and records).
    settle: settle: SettleOptions;
}}

/// What the end of a cancelled job asks ([`Store::complete_cancelled`]): the reason kept as its
/// `last_error`, if any, and what the cancelled job keeps.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct CancelledRequest {
    /// Why it was cancelled, if said.
    pub reason: Option<String>,
    /// Retention and records of the cancelled job.
    pub settle: SettleOptions,
}

impl CancelledRequest {
    /// No reason, the default settle options.
    pub fn new() -> Self {
        Self::default()
    }

    /// Why it was cancelled (`None`: not said).
    pub fn reason(mut self, reason: Option<impl Into<String>>) -> Self {
        self.reason = reason.map(Into::into);
        self
    }
}

setters! { CancelledRequest {
    /// What the cancelled job keeps (retention and records).
    settle: settle: SettleOptions;
}}

/// The reply of a claim: the jobs handed out, in claim order, and — when a rate limit held work
/// back — how long until it admits a start again. Reads as the list of its jobs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claimed {
    /// The jobs handed out.
    pub jobs: Vec<ClaimedJob>,
    /// How long until a rate limit that held work back admits a start again (the queue's while it
    /// admits none, else the first throttled group's); `None` when none held any.
    pub wait: Option<Duration>,
    /// Whether that limit is the queue's own: nothing of the queue starts before `wait` ends, so a
    /// consumer need not listen for wakes meanwhile.
    pub queue_limited: bool,
}

impl std::ops::Deref for Claimed {
    type Target = Vec<ClaimedJob>;

    fn deref(&self) -> &Vec<ClaimedJob> {
        &self.jobs
    }
}

impl std::ops::DerefMut for Claimed {
    fn deref_mut(&mut self) -> &mut Vec<ClaimedJob> {
        &mut self.jobs
    }
}

impl IntoIterator for Claimed {
    type Item = ClaimedJob;
    type IntoIter = std::vec::IntoIter<ClaimedJob>;

    fn into_iter(self) -> Self::IntoIter {
        self.jobs.into_iter()
    }
}

impl<'a> IntoIterator for &'a Claimed {
    type Item = &'a ClaimedJob;
    type IntoIter = std::slice::Iter<'a, ClaimedJob>;

    fn into_iter(self) -> Self::IntoIter {
        self.jobs.iter()
    }
}

/// What a retry asks ([`Store::retry`]): when the job's next attempt runs, the budget of a job
/// without one of its own, the failure kept as its `last_error`, and what a death keeps.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetryRequest {
    /// How long until the next attempt (zero: ready at once).
    pub delay: Duration,
    /// The attempt budget of a job without its own (at least 1).
    pub max_attempts: u32,
    /// The failure, kept as the job's `last_error`.
    pub error: String,
    /// Retention and records, when the retry finds the attempts spent and the job dies.
    pub settle: SettleOptions,
}

impl RetryRequest {
    /// A retry of a failure `error`: ready at once, under the consumer's default budget
    /// ([`crate::consumer::MAX_ATTEMPTS_DEFAULT`]), with the default settle options.
    pub fn new(error: impl Into<String>) -> Self {
        RetryRequest {
            delay: Duration::ZERO,
            max_attempts: crate::consumer::MAX_ATTEMPTS_DEFAULT,
            error: error.into(),
            settle: SettleOptions::default(),
        }
    }
}

setters! { RetryRequest {
    /// The next attempt `delay` from now.
    after: delay: Duration;
    /// The budget of a job without its own.
    max_attempts: max_attempts: u32;
    /// What a death keeps (retention and records).
    settle: settle: SettleOptions;
}}

/// Where a store hands the jobs it claimed for a parked caller ([`Store::park_with_handoff`]).
/// Called on whichever thread committed the claim (a task of the caller's runtime, or a store's
/// own thread), so it must not block and must not assume a runtime context.
pub type Handoff = Box<dyn FnOnce(Vec<ClaimedJob>) + Send>;

/// The replies of one round: each leg answers on its own, so a failed earlier leg never discards
/// the jobs the claim returned.
#[derive(Debug)]
#[non_exhaustive]
pub struct Round {
    /// The recovery leg (reaped count or the sweep), or its error.
    pub recovered: Result<()>,
    /// The promote leg.
    pub promoted: Result<Promoted>,
    /// The claim.
    pub claimed: Result<Claimed>,
}

/// The replies of [`Store::complete_then_claim`]: the completions, then the claim that came after
/// them, each on its own (a refused batch never discards the jobs the claim leased).
#[derive(Debug)]
#[non_exhaustive]
pub struct CompletedThenClaimed {
    /// One reply per completion, in order, or the batch's error.
    pub completed: Result<Vec<Settled>>,
    /// The jobs the claim leased.
    pub claimed: Result<Claimed>,
}

/// A cancel request for a running job, as delivered to the consumers of its queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CancelRequest {
    /// The job to cancel.
    pub id: JobId,
    /// The reason given, if any.
    pub reason: Option<String>,
}

/// The contract between the consumer (and every tool) and a store. One method per verb of the
/// closed list, each one atomic step on the store's clock, plus `park` and `cancel_requests`.
#[async_trait]
pub trait Store: Send + Sync {
    /// enqueue: new flat jobs → `pending` at their sequence (FIFO), or `scheduled` when delayed.
    /// Registers the queue (lists it in [`Store::queues`]) when its jobs land, and only then: a
    /// refused or failed enqueue registers nothing. One reply per job, in order. Batches beyond
    /// [`BATCH_MAX`] jobs or [`BATCH_BYTES_MAX`] bytes are split, each written whole or not at all:
    /// when a later batch fails, the earlier ones stay enqueued (and registered) and the call
    /// returns the error.
    async fn enqueue(&self, queue: &QueueName, jobs: &[NewJob]) -> Result<Vec<Enqueued>>;

    /// genqueue: new jobs of `group` → its lane (or `scheduled` when delayed); the ring step.
    async fn genqueue(&self, queue: &QueueName, group: &GroupName, jobs: &[NewJob]) -> Result<Vec<Enqueued>>;

    /// claim: up to the request's `n` jobs off the ring under its `lease`. Jobs at their attempt
    /// budget (its `max_attempts` is the default for rows without their own) go dead instead; rows
    /// carrying a cancel go to cancelled (under its `settle`); malformed rows go dead. A paused queue gives none.
    /// Rate limits hold starts back ([`Store::set_rate_limit`]); the reply says how long until they
    /// admit one again.
    async fn claim(&self, queue: &QueueName, request: ClaimRequest) -> Result<Claimed>;

    /// complete: fenced by `token`; the row is kept under the queue's [`Retention`] (or deleted);
    /// a lane's slot is freed.
    async fn complete(&self, queue: &QueueName, job: &Completion, settle: SettleOptions) -> Result<Settled>;

    /// complete_many: complete for a batch in one step, one reply per entry.
    async fn complete_many(
        &self,
        queue: &QueueName,
        jobs: &[Completion],
        settle: SettleOptions,
    ) -> Result<Vec<Settled>>;

    /// complete_cancelled: as complete, ending in cancelled.
    async fn complete_cancelled(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        request: &CancelledRequest,
    ) -> Result<Settled>;

    /// retry: fenced; at its budget (its own `max_attempts`, else the request's) → dead; else
    /// scheduled the request's `delay` from now (zero: ready at once), with its `error` as
    /// `last_error`.
    async fn retry(&self, queue: &QueueName, id: &JobId, token: u64, retry: &RetryRequest) -> Result<Retried>;

    /// release: fenced; the holder gives the job back without using an attempt (its `free` count
    /// + 1, so the attempts it has used stay those before this claim; its token stays, so this
    /// holder's later settles are refused as stale). `delay` zero: ready at once, at the front of
    /// its set; else scheduled `delay` from now. Call it only once the job's handler is gone.
    async fn release(&self, queue: &QueueName, id: &JobId, token: u64, delay: Duration) -> Result<Settled>;

    /// discard: fenced; dead now with the request's `error` as `last_error`.
    async fn discard(&self, queue: &QueueName, id: &JobId, token: u64, request: &DiscardRequest) -> Result<Discarded>;

    /// reap: up to `limit` lapsed leases back to ready (the front). `max_redeliveries` `None`: each
    /// has used the attempt its claim took (claim buries a job with no attempt left: "lease expired
    /// on the last attempt"). `Some(n)` (n ≥ 1): each gives that attempt back (`free` + 1) and is
    /// counted (`stalled` + 1); one whose count passes `n` goes dead instead ("lease lapsed N
    /// times: its worker died or stalled each time"). Returns how many went back to ready.
    async fn reap(&self, queue: &QueueName, limit: u32, max_redeliveries: Option<u32>) -> Result<u64>;

    /// sweep_stalled: lapsed leases counted; at `max_stalled` dead, else recovered.
    async fn sweep_stalled(&self, queue: &QueueName, policy: StalledPolicy) -> Result<Swept>;

    /// promote: up to `limit` due jobs to ready, and the due slots of the queue's schedules fired
    /// (at most 64 schedules a call), a slot more than `grace` late missed (a schedule's own grace
    /// wins); also the time until the next due job or slot, and the schedules to refill.
    async fn promote(&self, queue: &QueueName, limit: u32, grace: Duration) -> Result<Promoted>;

    /// upsert_schedule: the schedule created, or changed in place (its slots recomputed from now;
    /// a slot already decided never fires again; its counts and pause kept). Returns its version.
    async fn upsert_schedule(&self, queue: &QueueName, schedule: &Schedule) -> Result<u64>;

    /// remove_schedule: the schedule deleted (the jobs it fired stay). `false`: no such schedule.
    async fn remove_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool>;

    /// pause_schedule: the schedule fires, and misses, nothing until resumed. `false`: no such
    /// schedule.
    async fn pause_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool>;

    /// resume_schedule: a paused schedule fires again from its next slot after now (the slots that
    /// passed while paused are neither fired nor missed). `false`: no such schedule.
    async fn resume_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool>;

    /// list_schedules: the queue's schedules, by name, with their state.
    async fn list_schedules(&self, queue: &QueueName) -> Result<Vec<ScheduleInfo>>;

    /// trigger_schedule: one job of the schedule's template now, outside its slots (its id
    /// `sched:<name>:run<n>`). `None`: no such schedule.
    async fn trigger_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<Option<JobId>>;

    /// refill_schedule: the slots a promote asked for, computed by [`crate::schedule::refill`];
    /// written only while the schedule has the request's version and cursor (`false`: refused).
    async fn refill_schedule(&self, queue: &QueueName, request: &RefillRequest, refill: &Refill) -> Result<bool>;

    /// extend_lock: fenced; the lease now ends `lease` after the store's now.
    async fn extend_lock(&self, queue: &QueueName, id: &JobId, token: u64, lease: Duration) -> Result<Extended>;

    /// update_data: fenced checkpoint: the row's payload becomes `payload`.
    async fn update_data(&self, queue: &QueueName, id: &JobId, token: u64, payload: &[u8]) -> Result<Settled>;

    /// pause: claims give nothing until resume.
    async fn pause(&self, queue: &QueueName) -> Result<()>;

    /// resume: claims give jobs again; wakes parked consumers.
    async fn resume(&self, queue: &QueueName) -> Result<()>;

    /// drain: drops every ready and scheduled job (chunked: the client loops). Returns how many.
    async fn drain(&self, queue: &QueueName) -> Result<u64>;

    /// obliterate: deletes every key of the queue (chunked), refusing active jobs unless `force`.
    async fn obliterate(&self, queue: &QueueName, force: bool) -> Result<Obliterated>;

    /// get: one job's row, or `None`.
    async fn get(&self, queue: &QueueName, id: &JobId) -> Result<Option<JobRow>>;

    /// remove: deletes a job wherever it is; an active job only with `force`.
    async fn remove(&self, queue: &QueueName, id: &JobId, force: bool) -> Result<Removed>;

    /// redrive: a dead job back to ready, attempts kept, `max_attempts = attempts + extra`.
    async fn redrive(&self, queue: &QueueName, id: &JobId, extra: u32) -> Result<Redriven>;

    /// redrive every dead job (chunked: the client loops). Returns how many.
    async fn redrive_all(&self, queue: &QueueName, extra: u32) -> Result<u64>;

    /// promote_job: a scheduled job ready now.
    async fn promote_job(&self, queue: &QueueName, id: &JobId) -> Result<PromotedJob>;

    /// cancel: a waiting job is cancelled; a running one gets a request (row + published).
    async fn cancel(
        &self,
        queue: &QueueName,
        id: &JobId,
        reason: Option<&str>,
        settle: SettleOptions,
    ) -> Result<CancelOutcome>;

    /// set_retention: what the queue keeps of its finished jobs, from its next finish on.
    async fn set_retention(&self, queue: &QueueName, retention: &Retention) -> Result<()>;

    /// retention: the queue's retention as the finishing verbs read it (the default when unset).
    async fn retention(&self, queue: &QueueName) -> Result<Retention>;

    /// set_priority_aging: how long a lower priority waits behind a higher one — a ready job of
    /// priority p is claimed before every priority-0 job made ready more than p × `aging` after
    /// it; zero is strict (no job runs while a more urgent one waits). Jobs already ready keep
    /// their place. At most [`PRIORITY_AGING_MAX`](crate::job::PRIORITY_AGING_MAX).
    async fn set_priority_aging(&self, queue: &QueueName, aging: Duration) -> Result<()>;

    /// priority_aging: the queue's priority aging (the default,
    /// [`PRIORITY_AGING_DEFAULT`](crate::job::PRIORITY_AGING_DEFAULT), when unset).
    async fn priority_aging(&self, queue: &QueueName) -> Result<Duration>;

    /// mark_waited: a finished job's row; else the job marked as waited on, so that the verb that
    /// finishes it (completes, cancels or buries it, or removes it) tells the streams of
    /// [`Store::finished_waits`] — only a marked job costs that verb anything. Open the stream first:
    /// a finish after this call then reaches it.
    async fn mark_waited(&self, queue: &QueueName, id: &JobId) -> Result<Waited>;

    /// The finishes of the queue's waited jobs, as they happen: `Some(id)` for one job, `None` for
    /// "look at every waited job again" (a drain or obliterate, which reads no row; a lost
    /// subscription, resumed; a notice this stream missed). Subscribed when this returns.
    async fn finished_waits(&self, queue: &QueueName) -> Result<BoxStream<'static, Option<JobId>>>;

    /// set_group_limit: a group's own limit or the queue default (n ≥ 1), then the ring step.
    async fn set_group_limit(&self, queue: &QueueName, target: &LimitTarget, limit: u32) -> Result<()>;

    /// set_rate_limit: at most `limit`'s max starts per its period, its burst at once, for the
    /// queue, one group or the default of groups without their own; `None` removes it. Enforced by
    /// every claim on the store's clock. A change starts the limit afresh (the target's budget
    /// full); a group's change, or the default's, puts the groups it held back on the ring again.
    async fn set_rate_limit(&self, queue: &QueueName, target: &RateTarget, limit: Option<RateLimit>) -> Result<()>;

    /// rate_limits: the queue's rate limits and their state.
    async fn rate_limits(&self, queue: &QueueName) -> Result<RateLimits>;

    /// counts: sizes per state and the counters.
    async fn counts(&self, queue: &QueueName) -> Result<Counts>;

    /// groups: a page of the queue's groups — each with waiting or running jobs or a limit of its
    /// own — from `cursor` (`None` for the first page; the page's `next` for the one after),
    /// about [`GROUPS_PAGE`] groups a page, by name within a page.
    async fn groups(&self, queue: &QueueName, cursor: Option<&str>) -> Result<GroupsPage>;

    /// register_consumer: the consumer's entry in the registry of live consumers written, its beat
    /// stamped on the store's clock and its deadline that beat plus its ttl; answers the beat (Unix
    /// ms), which the consumer keeps in its entry's `beat_ms`. A consumer calls it at most once per
    /// beat. On its first registration (`beat_ms` 0) up to ten entries of other consumers past
    /// their deadline are deleted. Refuses an entry [`crate::registry`] cannot keep.
    async fn register_consumer(&self, queue: &QueueName, entry: &ConsumerEntry) -> Result<i64>;

    /// unregister_consumer: the consumer's entry removed (it stops); true when there was one.
    async fn unregister_consumer(&self, queue: &QueueName, id: &str) -> Result<bool>;

    /// consumers: the live consumers of the queue (entries not past their deadline on the store's
    /// clock), by id, at most [`crate::registry::CONSUMERS_LISTED_MAX`].
    async fn consumers(&self, queue: &QueueName) -> Result<Vec<ConsumerEntry>>;

    /// history: the jobs completed and dead-lettered in each of the queue's last `minutes` minutes
    /// (1 to [`HISTORY_MINUTES_MAX`], the current one included), on the store's clock.
    async fn history(&self, queue: &QueueName, minutes: u32) -> Result<History>;

    /// list: a page of up to `limit` ids in `state`, from `cursor` (`None` for the first page; the
    /// page's `next` for the one after): scheduled by due time, active by lease deadline, dead,
    /// completed and cancelled (the rows the queue's retention keeps) newest first; pending the flat
    /// set in claim order, then each group's lane in claim order, group after group (by name; on
    /// Redis by name within each chunk of the groups hash it walks). Each page starts where the one
    /// before ended, at the cost of one page whatever the queue holds. A cursor that does not
    /// parse is refused ([`Error::InvalidOption`]).
    async fn list(&self, queue: &QueueName, state: JobState, cursor: Option<&str>, limit: u32) -> Result<JobsPage>;

    /// queues: every queue name registered.
    async fn queues(&self) -> Result<Vec<QueueName>>;

    /// One beat's round: recovery, promote (at most `pump` jobs, schedule slots missed past
    /// `grace`) and a claim, as [`RoundRequest`] says, in one round trip
    /// where the store can (Redis: one pipeline). `Err` only when the store could not be reached at
    /// all; each leg's own reply or error is in the [`Round`].
    async fn recover_promote_claim(&self, queue: &QueueName, round: &RoundRequest) -> Result<Round> {
        let RoundRequest {
            recovery,
            pump,
            grace,
            ref claim,
        } = *round;
        let recovered = match recovery {
            Recovery::Off => Ok(()),
            Recovery::Reap => self.reap(queue, REAP_LIMIT, None).await.map(drop),
            Recovery::Redeliver(p) => self.reap(queue, p.limit, Some(p.max_redeliveries)).await.map(drop),
            Recovery::Stalled(policy) => self.sweep_stalled(queue, policy).await.map(drop),
        };
        let promoted = self.promote(queue, pump, grace).await;
        let claimed = if claim.n == 0 {
            Ok(Claimed::default())
        } else {
            self.claim(queue, claim.clone()).await
        };
        for leg in [
            recovered.as_ref().err(),
            promoted.as_ref().err(),
            claimed.as_ref().err(),
        ] {
            if let Some(e) = leg.filter(|e| e.is_unreachable()) {
                return Err(Error::Unreachable {
                    addr: String::new(),
                    reason: e.to_string(),
                });
            }
        }
        Ok(Round {
            recovered,
            promoted,
            claimed,
        })
    }

    /// complete_many, then a claim, in one round trip where the store can (the scripted stores:
    /// one call of `complete_then_claim.lua`, the completions and then the claim in one script).
    /// The completions reach the store ahead of the claim, so the slots they free (a lane job's)
    /// are free for it: a consumer's next job is the one the store's order gives, never one that
    /// overtook the settle of the job before it. `Err` only when the store could not be reached at
    /// all; each part's own reply or error is in the [`CompletedThenClaimed`].
    async fn complete_then_claim(
        &self,
        queue: &QueueName,
        jobs: &[Completion],
        settle: SettleOptions,
        claim: ClaimRequest,
    ) -> Result<CompletedThenClaimed> {
        let completed = match self.complete_many(queue, jobs, settle).await {
            Err(e) if e.is_unreachable() => return Err(e),
            r => r,
        };
        let claimed = if claim.n == 0 {
            Ok(Claimed::default())
        } else {
            self.claim(queue, claim).await
        };
        Ok(CompletedThenClaimed { completed, claimed })
    }

    /// park: wait up to `timeout` (at most [`PARK_TIMEOUT_MAX`]) for a wake token of `queue` for a
    /// consumer of `kinds`: for every kind, the queue's wake, which every job made claimable
    /// pushes; for some kinds, their own wakes (the flat jobs of each) and the wake of jobs whose
    /// kind the store does not know when it wakes (a lane's next job, a schedule's, a lifted
    /// limit's). True when woken, false on timeout. Runs on a connection of the caller's own: a
    /// parked wait never stalls another caller.
    async fn park(&self, queue: &QueueName, kinds: &Kinds, timeout: Duration) -> Result<bool>;

    /// park, offering `claim` to the transaction that makes work claimable while the caller waits.
    /// A store that can claim there (the embedded store, for a transaction of this process) does so
    /// in that very transaction and, once it has committed, calls `handoff` with the jobs (never
    /// with none): one durable transaction between an enqueue and its handler's start instead of
    /// two. A `handoff` not called is dropped — when the park ends, at the latest. The default
    /// drops it and parks. True when woken (handed jobs or not), false on timeout. A served park is
    /// woken by the commit only when it left other work claimable: else its caller has what there
    /// was (through `handoff`, on the committing thread, with no task woken beside its jobs') and
    /// ends the park when it likes; left alone it returns true at its timeout.
    async fn park_with_handoff(
        &self,
        queue: &QueueName,
        timeout: Duration,
        claim: ClaimRequest,
        handoff: Handoff,
    ) -> Result<bool> {
        drop(handoff);
        self.park(queue, &claim.kinds, timeout).await
    }

    /// Whether [`Store::park_with_handoff`] may serve the offer (call `handoff`); false for a store
    /// that only parks. A caller whose offer may be served learns of it from `handoff`, not from the
    /// park's end.
    fn serves_handoffs(&self) -> bool {
        false
    }

    /// How many settle round trips a consumer keeps in flight at once (at least 1): while they are
    /// out, the jobs that finish meanwhile gather into the next batch, so the store has the next
    /// round trip before it has answered the last. More round trips keep a store busy that waits
    /// on the network; each is a smaller batch, which costs a store that pays per call. The
    /// default is 2.
    fn settle_round_trips(&self) -> usize {
        2
    }

    /// cancel_requests: the stream of cancel requests for running jobs of `queue`.
    async fn cancel_requests(&self, queue: &QueueName) -> Result<BoxStream<'static, CancelRequest>>;
}

/// Checks a payload against a limit.
pub(crate) fn check_payload(len: usize, limit: usize) -> Result<()> {
    if len > limit {
        return Err(Error::PayloadTooLarge { size: len, limit });
    }
    Ok(())
}

/// Refuses a batch of completions when any output is over the store's payload limit: a batch is
/// refused whole, before anything is written.
pub(crate) fn check_outputs(jobs: &[Completion], limit: usize) -> Result<()> {
    jobs.iter()
        .filter_map(|c| c.output.as_ref())
        .try_for_each(|o| check_payload(o.len(), limit))
}

/// Refuses a zero count or duration, naming the option: the checks every store makes before it
/// writes anything.
/// A claim's lease and default attempt budget: each at least 1 (ms, attempts).
pub(crate) fn check_claim(lease: Duration, max_attempts: u32) -> Result<()> {
    positive("lease", millis("lease", lease)?)?;
    positive("max_attempts", max_attempts as u64)
}

/// The longest duration a verb takes (a lease, a delay), in ms: 2^53, the largest a script's
/// numbers hold exactly (the Redis scripts refuse a lease from there on).
pub const DURATION_MAX_MS: u64 = 1 << 53;

/// A duration in ms, refused from [`DURATION_MAX_MS`] on, naming the option: a deadline or due
/// time computed from a longer one would overflow, or lose its precision in a script.
pub(crate) fn millis(field: &'static str, d: Duration) -> Result<u64> {
    match u64::try_from(d.as_millis()) {
        Ok(ms) if ms < DURATION_MAX_MS => Ok(ms),
        _ => Err(Error::InvalidOption {
            field,
            value: format!("{d:?}"),
            reason: "must be below 2^53 ms",
        }),
    }
}

pub(crate) fn positive(field: &'static str, v: u64) -> Result<()> {
    if v == 0 {
        return Err(Error::InvalidOption {
            field,
            value: "0".into(),
            reason: "must be at least 1",
        });
    }
    Ok(())
}

/// Checks a batch of new jobs: payload sizes, no attempt budget of 0, and no caller id of digits
/// only (those are the store's own: such an id would take the row of a job enqueued later).
pub(crate) fn check_jobs(jobs: &[NewJob], payload_limit: usize) -> Result<()> {
    for job in jobs {
        if let Some(id) = job.id.as_ref().filter(|id| id.is_generated()) {
            return Err(Error::InvalidName {
                kind: crate::error::NameKind::JobId,
                value: id.to_string(),
                reason: "digits-only ids are reserved for generated ids",
            });
        }
        check_payload(job.payload.len(), payload_limit)?;
        if let Some(m) = job.max_attempts {
            positive("max_attempts", m as u64)?;
        }
        if let Some(d) = job.delay {
            millis("delay", d)?;
        }
        if let Some(kind) = &job.kind {
            check_kind(kind)?;
        }
        if let Some(dedup) = &job.dedup {
            dedup.check()?;
        }
        if let Some(p) = job.priority.filter(|p| *p > crate::job::PRIORITY_MAX) {
            return Err(Error::InvalidOption {
                field: "priority",
                value: p.to_string(),
                reason: "0 (the most urgent) to 9",
            });
        }
        if let Some(r) = job.retry.as_ref().filter(|r| !r.is_storable()) {
            return Err(Error::InvalidOption {
                field: "retry",
                value: r.to_string(),
                reason: "a function cannot be stored on a job: give it to the worker",
            });
        }
        if let Some((_, timeout)) = job.wait_replicas {
            let ms = millis("wait_replicas timeout", timeout)?;
            positive("wait_replicas timeout", ms)?;
            // the longest WAIT a Redis store sends (it holds up the connection it rides)
            if ms > 5_000 {
                return Err(Error::InvalidOption {
                    field: "wait_replicas timeout",
                    value: format!("{ms}ms"),
                    reason: "at most 5000 ms",
                });
            }
        }
    }
    Ok(())
}

/// Refuses a priority aging over [`PRIORITY_AGING_MAX`](crate::job::PRIORITY_AGING_MAX) or with a
/// part below a millisecond; its milliseconds.
pub(crate) fn check_priority_aging(aging: Duration) -> Result<u64> {
    let ms = millis("priority_aging", aging)?;
    if aging > crate::job::PRIORITY_AGING_MAX || Duration::from_millis(ms) != aging {
        return Err(Error::InvalidOption {
            field: "priority_aging",
            value: format!("{aging:?}"),
            reason: "whole milliseconds, at most 365 days (0 = strict)",
        });
    }
    Ok(ms)
}

/// Refuses a job kind that is empty, longer than [`crate::job::KIND_MAX`] bytes, or holds a
/// control character or a space (a kind is a name, printed in logs and `emq get`).
pub(crate) fn check_kind(kind: &str) -> Result<()> {
    let reason = if kind.is_empty() {
        "must not be empty"
    } else if kind.len() > crate::job::KIND_MAX {
        "must be at most 128 bytes"
    } else if kind.chars().any(|c| c.is_control() || c.is_whitespace()) {
        "must hold no spaces or control characters"
    } else {
        return Ok(());
    };
    Err(Error::InvalidName {
        kind: crate::error::NameKind::JobKind,
        value: kind.to_string(),
        reason,
    })
}

/// The longest one park waits: a longer timeout waits this long, and the caller parks again.
pub const PARK_TIMEOUT_MAX: Duration = Duration::from_secs(24 * 3600);

/// The largest page `list` answers.
pub const LIST_LIMIT_MAX: u32 = 10_000;

/// Checks a `list` page size.
pub(crate) fn check_list_limit(limit: u32) -> Result<()> {
    if limit == 0 || limit > LIST_LIMIT_MAX {
        return Err(Error::InvalidOption {
            field: "limit",
            value: limit.to_string(),
            reason: "must be 1..=10000",
        });
    }
    Ok(())
}

/// A retention's age in ms, refused when under 1 ms or from [`DURATION_MAX_MS`] on.
pub(crate) fn check_retention(retention: &Retention) -> Result<u64> {
    let age = millis("max_age", retention.max_age)?;
    positive("max_age", age)?;
    Ok(age)
}

/// The `MAXLEN ~` a settle writes records with (0 = no records).
pub(crate) fn records_maxlen(settle: SettleOptions) -> u64 {
    if settle.record {
        RECORDS_MAXLEN_DEFAULT
    } else {
        0
    }
}

/// Opens a store from a URL: `redis://` and `rediss://` open Redis, `redis+cluster://` and
/// `rediss+cluster://` a Redis Cluster (see [`redis::RedisStore::open`]); `sqlite:PATH`, `sqlite://PATH`
/// or a plain path (no `scheme://`) open the embedded store on that file, with `?synchronous=full`
/// for commits that reach the disk before they are acknowledged (power-loss durable; the default
/// `normal` is `kill -9` safe); any other scheme is an error naming it. See [`open_default`] for no
/// URL at all.
pub async fn open(url: &str) -> Result<Box<dyn Store>> {
    if let Some(path) = url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
        // a refused URL is named as given, prefix and all
        return open_embedded(path).await.map_err(|e| match e {
            Error::InvalidUrl { reason, .. } => Error::InvalidUrl {
                url: url.to_string(),
                reason,
            },
            other => other,
        });
    }
    match url.split_once("://") {
        #[cfg(feature = "redis")]
        Some(("redis" | "rediss" | "redis+cluster" | "rediss+cluster", _)) => {
            Ok(Box::new(redis::RedisStore::open(url).await?))
        }
        Some((scheme, _)) => Err(Error::UnsupportedScheme {
            scheme: scheme.to_string(),
        }),
        None => open_embedded(url).await,
    }
}

/// [`open`] for a worker: a Redis URL is only checked now, and the store connects at its first
/// verb (each verb before then fails as `open` would: [`Error::Unreachable`] while the server is
/// down), so a consumer started while the server is down backs off until it is up, as it does
/// through any outage. A refusal no retry mends ([`Error::Misconfigured`]) still ends the consumer
/// at its first round. The embedded store has no server to wait for: its file is opened now, as
/// [`open`] opens it. Producers and one-shot tools want [`open`], which fails at once.
pub async fn open_lazy(url: &str) -> Result<Box<dyn Store>> {
    match url.split_once("://") {
        #[cfg(feature = "redis")]
        Some(("redis" | "rediss" | "redis+cluster" | "rediss+cluster", _)) => {
            Ok(Box::new(redis::RedisStore::open_lazy(url)?))
        }
        _ => open(url).await,
    }
}

/// A store URL fit to print: the credentials of `scheme://user:password@host…` replaced by `…`.
pub fn redact_url(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => format!("{}://…@{}", &url[..s], &url[at + 1..]),
        _ => url.to_string(),
    }
}

/// The commit durability an embedded store URL asks for (`?synchronous=normal|full`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Synchronous {
    Normal,
    Full,
}

/// An embedded store URL's file and durability: `PATH` or `PATH?synchronous=normal|full` (the
/// default `normal`). Any other query is refused, naming it.
pub(crate) fn embedded_path(url: &str) -> Result<(&str, Synchronous)> {
    let invalid = |reason: String| Error::InvalidUrl {
        url: url.to_string(),
        reason,
    };
    let (path, query) = match url.split_once('?') {
        Some((path, query)) => (path, Some(query)),
        None => (url, None),
    };
    if path.is_empty() {
        return Err(invalid("an empty path".into()));
    }
    let mut synchronous = Synchronous::Normal;
    for pair in query.into_iter().flat_map(|q| q.split('&')) {
        synchronous = match pair.split_once('=') {
            Some(("synchronous", v)) if v.eq_ignore_ascii_case("normal") => Synchronous::Normal,
            Some(("synchronous", v)) if v.eq_ignore_ascii_case("full") => Synchronous::Full,
            Some(("synchronous", v)) => {
                return Err(invalid(format!("synchronous must be normal or full, not {v:?}")));
            }
            _ => {
                return Err(invalid(format!(
                    "unknown option {pair:?} (known: synchronous=normal|full)"
                )))
            }
        };
    }
    Ok((path, synchronous))
}

/// Opens the default store: the embedded store on `./echomq.db` in the current directory.
pub async fn open_default() -> Result<Box<dyn Store>> {
    open_embedded(DEFAULT_EMBEDDED_PATH).await
}

/// The file of the default store.
pub const DEFAULT_EMBEDDED_PATH: &str = "echomq.db";

async fn open_embedded(url: &str) -> Result<Box<dyn Store>> {
    #[cfg(feature = "embedded")]
    {
        Ok(Box::new(embedded::EmbeddedStore::open_url(url).await?))
    }
    #[cfg(not(feature = "embedded"))]
    {
        embedded_path(url)?;
        Err(Error::UnsupportedScheme {
            scheme: "sqlite".into(),
        })
    }
}

/// `items` in batches of at most [`BATCH_MAX`] whose sizes sum to at most [`BATCH_BYTES_MAX`]
/// (an item larger than that alone), so that one script call (or embedded transaction) stays
/// bounded in count and bytes.
pub(crate) fn bounded<T>(items: &[T], size: impl Fn(&T) -> usize) -> Vec<&[T]> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < items.len() {
        let (mut end, mut bytes) = (start, 0);
        while end < items.len()
            && end - start < BATCH_MAX
            && (end == start || bytes + size(&items[end]) <= BATCH_BYTES_MAX)
        {
            bytes += size(&items[end]);
            end += 1;
        }
        out.push(&items[start..end]);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_are_bounded_by_count_and_by_bytes() {
        let sizes: Vec<usize> = vec![1; 2500];
        let lens: Vec<usize> = bounded(&sizes, |s| *s).iter().map(|b| b.len()).collect();
        assert_eq!(lens, [BATCH_MAX, BATCH_MAX, 500]);
        let third = BATCH_BYTES_MAX / 3;
        let sizes = [third, third, third, third, BATCH_BYTES_MAX * 2, 1];
        let lens: Vec<usize> = bounded(&sizes, |s| *s).iter().map(|b| b.len()).collect();
        assert_eq!(lens, [3, 1, 1, 1], "an item over the bound goes alone");
        assert!(bounded(&[] as &[usize], |s| *s).is_empty());
    }

    #[cfg(feature = "embedded")]
    #[tokio::test]
    async fn an_embedded_url_s_durability_reaches_the_connection() {
        use embedded::{Durability, EmbeddedStore};
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("q.db");
        let path = path.to_str().unwrap();
        for (url, want) in [
            (path.to_string(), Durability::Normal),
            (format!("{path}?synchronous=full"), Durability::Full),
            (format!("{path}?synchronous=normal"), Durability::Normal),
        ] {
            let store = EmbeddedStore::open_url(&url).await.unwrap();
            assert_eq!(store.durability().await.unwrap(), want, "{url}");
            assert_eq!(store.path(), path);
        }
    }

    #[test]
    fn a_redacted_url_keeps_no_credentials() {
        assert_eq!(redact_url("redis://u:secret@h:6379/2"), "redis://…@h:6379/2");
        assert_eq!(redact_url("redis://h:6379"), "redis://h:6379");
        assert_eq!(redact_url("sqlite:a@b.db"), "sqlite:a@b.db");
    }

    #[test]
    fn an_embedded_url_gives_its_path_and_durability() {
        assert_eq!(embedded_path("a.db").unwrap(), ("a.db", Synchronous::Normal));
        assert_eq!(
            embedded_path("/x/a.db?synchronous=full").unwrap(),
            ("/x/a.db", Synchronous::Full)
        );
        assert_eq!(
            embedded_path("a.db?synchronous=FULL").unwrap(),
            ("a.db", Synchronous::Full)
        );
        assert_eq!(
            embedded_path("a.db?synchronous=normal").unwrap(),
            ("a.db", Synchronous::Normal)
        );
    }

    #[test]
    fn an_embedded_url_with_a_bad_option_or_no_path_is_refused_naming_it() {
        for (url, names) in [
            ("a.db?synchronous=off", "\"off\""),
            ("a.db?journal=wal", "journal=wal"),
            ("a.db?", "\"\""),
            ("", "empty path"),
            ("?synchronous=full", "empty path"),
        ] {
            let e = embedded_path(url).unwrap_err();
            assert!(matches!(e, Error::InvalidUrl { .. }), "{url}: {e:?}");
            assert!(e.to_string().contains(names), "{url}: {e}");
        }
    }
}
