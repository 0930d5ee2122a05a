//! The metrics a consumer records, through the [`metrics`] facade: an application exports them
//! with the recorder of its choice (Prometheus, StatsD, …), installed before its workers start;
//! with none installed, recording costs next to nothing. `emq work --metrics-bind` exports them,
//! with the store's gauges of its queues, as Prometheus text.
//!
//! | name | type | labels | what |
//! | --- | --- | --- | --- |
//! | [`JOB_DURATION`] `emq_job_duration_seconds` | histogram | `queue`, `outcome` | a handler's run, claim to verdict |
//!
//! `outcome` is one of [`OUTCOMES`]: `completed`, `failed`, `discarded`, `retry_later`,
//! `cancelled`, `released`.

use metrics::Histogram;

use crate::consumer::Verdict;
use crate::keyspace::QueueName;

/// The histogram of handler run times, in seconds, by queue and outcome.
pub const JOB_DURATION: &str = "emq_job_duration_seconds";

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

/// One consumer's run-time histograms, one per outcome, registered when it starts (with the
/// recorder installed then): a job's record is then one call, no label built per job.
pub(crate) struct JobTimings {
    by_outcome: Vec<Histogram>,
}

impl JobTimings {
    pub(crate) fn new(queue: &QueueName) -> Self {
        let by_outcome = OUTCOMES
            .iter()
            .map(|o| metrics::histogram!(JOB_DURATION, "queue" => queue.as_str().to_string(), "outcome" => *o))
            .collect();
        Self { by_outcome }
    }

    /// Records a handler's run time under its verdict's outcome.
    pub(crate) fn record(&self, verdict: &Verdict, took: std::time::Duration) {
        if let Some(h) = self.by_outcome.get(outcome(verdict)) {
            h.record(took.as_secs_f64());
        }
    }
}
