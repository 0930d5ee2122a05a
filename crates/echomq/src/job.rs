//! Jobs: a typed job ([`Job`]), what a producer hands the store ([`NewJob`]), what a consumer gets
//! ([`ClaimedJob`]), what an operator reads ([`JobRow`]), and the states a job moves through
//! ([`JobState`]).

use std::time::Duration;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::keyspace::{GroupName, JobId};

/// A typed job: a serde type whose JSON is the payload, and its kind, which the pushed row carries
/// and by which a [`Worker`](crate::Worker) picks the handler.
///
/// ```
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct SendEmail { to: String }
///
/// impl echomq::Job for SendEmail {
///     const KIND: &'static str = "send_email";
/// }
/// ```
pub trait Job: Serialize + DeserializeOwned + Send + 'static {
    /// The kind written on every row of this type: 1 to 128 bytes, no spaces. Renaming it strands
    /// the rows already pushed unless the old name is kept in [`KIND_ALIASES`](Self::KIND_ALIASES).
    const KIND: &'static str;
    /// Earlier names of this kind: a worker routes rows carrying any of them here too.
    const KIND_ALIASES: &'static [&'static str] = &[];
}

/// Where a job is. Each job is in exactly one place at a time; `docs/state_machine.md` has the graph.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum JobState {
    /// Ready to claim: in `pending` (flat) or its group's lane.
    /// Entered by enqueue, genqueue, promote, promote_job, reap, sweep_stalled (recovered), retry
    /// and release with no delay, and redrive; left by claim, cancel, remove, drain and obliterate.
    Pending,
    /// Waiting for its due time in `scheduled` (a delay or a retry).
    /// Entered by enqueue/genqueue with a delay and by retry and release with one; left by promote,
    /// promote_job, cancel, remove, drain and obliterate.
    Scheduled,
    /// Leased to a consumer, in `active` with score = lease deadline.
    /// Entered by claim; left by complete, complete_many, complete_cancelled, retry, discard,
    /// release, reap, sweep_stalled, forced remove and forced obliterate.
    Active,
    /// In the morgue `dead`.
    /// Entered by retry past max_attempts, discard, sweep_stalled past max_stalled, reap past
    /// max_redeliveries and claim (the max-attempts guard, a malformed row); left by redrive,
    /// remove and obliterate.
    Dead,
    /// Completed, its row kept under the queue's retention (without the payload).
    /// Entered by complete and complete_many; left by trimming, remove and obliterate.
    Completed,
    /// Cancelled, its row kept under the queue's retention (without the payload).
    /// Entered by complete_cancelled, cancel and claim (a row carrying a cancel request).
    Cancelled,
}

impl JobState {
    /// The value of the row's `state` field.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Pending => "pending",
            JobState::Scheduled => "scheduled",
            JobState::Active => "active",
            JobState::Dead => "dead",
            JobState::Completed => "completed",
            JobState::Cancelled => "cancelled",
        }
    }

    /// Parses a row's `state` field.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "pending" => JobState::Pending,
            "scheduled" => JobState::Scheduled,
            "active" => JobState::Active,
            "dead" => JobState::Dead,
            "completed" => JobState::Completed,
            "cancelled" => JobState::Cancelled,
            _ => return None,
        })
    }
}

impl std::fmt::Display for JobState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A job to enqueue: a payload and its options.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewJob {
    /// The payload bytes, opaque to the store.
    pub payload: Vec<u8>,
    /// A caller-given id: enqueueing it again while its row exists answers `Duplicate`.
    pub id: Option<JobId>,
    /// Run no earlier than this long from now (store clock).
    pub delay: Option<Duration>,
    /// This job's attempt budget; absent = the consumer's default.
    pub max_attempts: Option<u32>,
    /// What kind of job it is, for a worker that routes by kind ([`crate::Job::KIND`]); absent for
    /// a raw job. 1 to [`KIND_MAX`] bytes of printable text.
    pub kind: Option<String>,
    /// Redis: the enqueue returns only once this many replicas confirm they have the job, waiting
    /// at most this long (`WAIT`), else fails with [`crate::Error::NotReplicated`]; the store's
    /// own setting (`RedisStore::wait_replicas`, `?wait=N`) applies when larger. An enqueue call
    /// waits for the most any of its jobs asks. The embedded store has no replicas: its commit is
    /// the job's durability, and it ignores this.
    pub wait_replicas: Option<(u32, Duration)>,
    /// How urgent it is: 0 (the default, the most urgent) to [`PRIORITY_MAX`] (the least). A
    /// ready job of priority p is claimed before every priority-0 job made ready more than
    /// p × the queue's priority aging after it ([`PRIORITY_AGING_DEFAULT`]; aging 0 is strict:
    /// no job runs while a more urgent one waits); within one priority, first in first out.
    /// Stored on the row only when above 0.
    pub priority: Option<u8>,
    /// This job's own retry curve, used instead of the consumer's; stored on its row (a function
    /// cannot be: [`RetryPolicy::is_storable`](crate::RetryPolicy::is_storable)).
    pub retry: Option<crate::RetryPolicy>,
    /// A dedup key: enqueues of one key are one job while it holds ([`crate::dedup::DedupMode`]);
    /// the reply names the job that holds it.
    pub dedup: Option<crate::dedup::Dedup>,
}

/// The least urgent priority (0 is the most urgent, and the default).
pub const PRIORITY_MAX: u8 = 9;

/// A queue's priority aging when none is set: a job of priority p waits at most p × 60 s behind
/// priority-0 jobs that keep arriving.
pub const PRIORITY_AGING_DEFAULT: Duration = Duration::from_secs(60);

/// The longest priority aging a queue takes (365 days).
pub const PRIORITY_AGING_MAX: Duration = Duration::from_secs(365 * 24 * 3600);

/// The longest job kind, in bytes.
pub const KIND_MAX: usize = 128;

impl NewJob {
    /// A job with this payload and no options.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        Self {
            payload: payload.into(),
            ..Self::default()
        }
    }

    /// Sets a caller-given id.
    pub fn with_id(mut self, id: JobId) -> Self {
        self.id = Some(id);
        self
    }

    /// Sets a delay.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Sets the replicas the enqueue waits for ([`NewJob::wait_replicas`]).
    pub fn with_wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        self.wait_replicas = Some((replicas, timeout));
        self
    }

    /// Sets the attempt budget.
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = Some(max_attempts);
        self
    }

    /// Sets the priority: 0 (the most urgent, the default) to [`PRIORITY_MAX`].
    pub fn with_priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// Sets this job's own retry curve.
    pub fn with_retry(mut self, retry: crate::RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// Sets the kind.
    pub fn with_kind(mut self, kind: impl Into<String>) -> Self {
        self.kind = Some(kind.into());
        self
    }

    /// Sets a dedup key and its mode.
    pub fn with_dedup(mut self, dedup: crate::dedup::Dedup) -> Self {
        self.dedup = Some(dedup);
        self
    }
}

/// A job handed out by claim: the holder's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimedJob {
    /// The job's id.
    pub id: JobId,
    /// The payload (the last checkpoint's, if any).
    pub payload: Vec<u8>,
    /// The fencing token of this claim, which every holder verb takes: the row's attempts after it
    /// (raised by 1 by every claim, never lowered).
    pub token: u64,
    /// The attempts the job has used with this one (1 on its first): its claims less those that
    /// used no attempt (a release), as its budget counts them.
    pub attempts: u64,
    /// The job's group, for a lane job.
    pub group: Option<GroupName>,
    /// The job's kind; `None` for a raw job.
    pub kind: Option<String>,
    /// The job's attempt budget: its own, else the claim's default.
    pub max_attempts: u64,
    /// The job's own retry policy, used instead of the consumer's when it fails.
    pub retry: Option<crate::RetryPolicy>,
    /// How long it waited ready before this claim, on the store's clock: since it was enqueued
    /// ready, promoted when due, retried or released — read back from its place in the claim order
    /// (`None` when that tells no time: a job recovered from a lapsed lease goes first, whatever its
    /// age).
    pub wait: Option<std::time::Duration>,
}

/// A job's row as an operator reads it (`get`).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct JobRow {
    /// The job's id.
    pub id: JobId,
    /// Where it is.
    pub state: JobState,
    /// The payload bytes.
    pub payload: Vec<u8>,
    /// The attempts it has used (0 before its first claim): its claims less those that used none.
    pub attempts: u64,
    /// Its claims that used no attempt (each a release); its last claim's fencing token is
    /// `attempts + free`.
    pub free: u64,
    /// Its own attempt budget, if it has one.
    pub max_attempts: Option<u64>,
    /// Its group, for a lane job.
    pub group: Option<GroupName>,
    /// Its kind; `None` for a raw job.
    pub kind: Option<String>,
    /// How urgent it is: 0 (the most urgent, the default) to 9.
    pub priority: u8,
    /// Its own retry policy, in the text form (`exp:1s,x2,max=10m,jitter=full`), if it has one.
    pub retry: Option<String>,
    /// Due time (ms since the epoch, store clock) while scheduled.
    pub run_at: Option<u64>,
    /// Times recovery found its lease lapsed and counted it: the stalled sweep, and reap under a
    /// redelivery budget ([`crate::store::RedeliveryPolicy`]); cleared by redrive.
    pub stalled: u64,
    /// The last error recorded (a retry's reason, `stalled`, a malformed-row defect, …).
    pub last_error: Option<String>,
    /// A pending cancel request's reason (empty when none was given).
    pub cancel: Option<String>,
    /// The output of a kept completed job.
    pub output: Option<Vec<u8>>,
    /// The size in bytes of an output the queue's retention did not keep (over its
    /// [`max_output`](crate::store::Retention::max_output)).
    pub output_dropped: Option<u64>,
    /// When a kept job finished (ms since the epoch).
    pub finished_at: Option<u64>,
    /// Lease deadline (ms since the epoch) while active; time of death while dead.
    pub score: Option<u64>,
}
