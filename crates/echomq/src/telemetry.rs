//! The metrics a consumer records, through the [`metrics`] facade: an application exports them
//! with the recorder of its choice (Prometheus, StatsD, …), installed before its workers start;
//! with none installed, recording costs next to nothing. `emq work --metrics-bind` exports them,
//! with the store's gauges of its queues, as Prometheus text.
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | [`JOB_DURATION`] `emq_job_duration_seconds` | histogram | `queue`, `outcome` | a handler's run, claim to verdict |
//! | [`JOB_WAIT`] `emq_job_wait_seconds` | histogram | `queue`, `outcome` | how long a job waited ready before its claim (enqueue, due time or retry to start), on the store's clock |
//! | [`JOB_HELD`] `emq_job_held_seconds` | histogram | `queue` | how long a job a consumer claimed beyond its free slots (prefetch) waited held for one, claim to handler start |
//!
//! A job's wait is recorded with its run, under its verdict's outcome; a job whose wait the store
//! cannot tell (one recovered from a lapsed lease) records its run only.
//!
//! `outcome` is one of [`OUTCOMES`]: `completed`, `failed`, `discarded`, `retry_later`,
//! `cancelled`, `released`.

use metrics::Histogram;

use crate::consumer::Verdict;
use crate::keyspace::QueueName;

/// The histogram of handler run times, in seconds, by queue and outcome.
pub const JOB_DURATION: &str = "emq_job_duration_seconds";

/// The histogram of the time jobs waited ready before their claim, in seconds, by queue and
/// outcome.
pub const JOB_WAIT: &str = "emq_job_wait_seconds";

/// The histogram of the time prefetched jobs waited held in their consumer, in seconds, by queue.
pub const JOB_HELD: &str = "emq_job_held_seconds";

/// Every `outcome` label value, in the order of [`Verdict`]'s kinds.
pub const OUTCOMES: [&str; 6] = [
    "completed",
    "failed",
    "discarded",
    "retry_later",
    "cancelled",
    "released",
];

/// The outcome label of a verdict.
pub(crate) fn outcome(verdict: &Verdict) -> usize {
    match verdict {
        Verdict::Done | Verdict::DoneWith(_) => 0,
        Verdict::Error(_) => 1,
        Verdict::Discard(_) => 2,
        Verdict::RetryAfter(_) => 3,
        Verdict::Cancel(_) => 4,
        Verdict::Release(_) => 5,
    }
}

/// One consumer's histograms — run time and wait, one of each per outcome — registered when it
/// starts (with the recorder installed then): a job's record is then two calls, no label built
/// per job.
pub(crate) struct JobTimings {
    /// (run time, wait) per outcome, in the order of [`OUTCOMES`].
    by_outcome: Vec<(Histogram, Histogram)>,
    /// The time held of prefetched jobs.
    held: Histogram,
}

impl JobTimings {
    pub(crate) fn new(queue: &QueueName) -> Self {
        let by_outcome = OUTCOMES
            .iter()
            .map(|o| {
                let q = queue.as_str().to_string();
                (
                    metrics::histogram!(JOB_DURATION, "queue" => q.clone(), "outcome" => *o),
                    metrics::histogram!(JOB_WAIT, "queue" => q, "outcome" => *o),
                )
            })
            .collect();
        let held = metrics::histogram!(JOB_HELD, "queue" => queue.as_str().to_string());
        Self { by_outcome, held }
    }

    /// Records how long a prefetched job waited held before its handler started.
    pub(crate) fn record_held(&self, held: std::time::Duration) {
        self.held.record(held.as_secs_f64());
    }

    /// Records a handler's run time, and the job's wait before its claim when the store told it,
    /// under its verdict's outcome.
    pub(crate) fn record(&self, verdict: &Verdict, took: std::time::Duration, waited: Option<std::time::Duration>) {
        if let Some((run, wait)) = self.by_outcome.get(outcome(verdict)) {
            run.record(took.as_secs_f64());
            if let Some(w) = waited {
                wait.record(w.as_secs_f64());
            }
        }
    }
}
