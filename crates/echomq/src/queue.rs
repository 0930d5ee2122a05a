//! The [`Queue`] handle: push typed or raw jobs (each option on a builder), cancel and read them,
//! wait for their outcome ([`JobHandle::wait`]); schedules firing typed or raw jobs; and the
//! queue's settings: what it keeps of finished jobs, its rate limits, its group limits and its
//! priority aging.

use std::future::{Future, IntoFuture};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::error::{Error, Result};
use crate::job::{Job, JobRow, NewJob};
use crate::keyspace::{GroupName, JobId, QueueName};
use crate::outcome::Outcome;
use crate::rate::{RateLimit, RateLimits, RateTarget};
use crate::schedule::{JobTemplate, Misfire, Overlap, Schedule, ScheduleInfo, ScheduleName, Timing};
use crate::store::{CancelOutcome, Enqueued, LimitTarget, Retention, SettleOptions, Store, Waited};

/// One queue of a store: where jobs are pushed, cancelled and looked up.
#[derive(Clone)]
pub struct Queue {
    store: Arc<dyn Store>,
    name: QueueName,
}

impl std::fmt::Debug for Queue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Queue")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl Queue {
    /// The queue `name` of `store` (1–128 bytes of `[A-Za-z0-9._:-]`). Nothing is written until
    /// the first push.
    pub fn new(store: Arc<dyn Store>, name: &str) -> Result<Queue> {
        Ok(Queue {
            store,
            name: QueueName::new(name)?,
        })
    }

    /// The queue's name.
    pub fn name(&self) -> &QueueName {
        &self.name
    }

    /// The store it lives in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// Pushes a typed job: its JSON as the payload, `J::KIND` as its kind. Set options on the
    /// builder, then `.await` it for the job's [`JobHandle`].
    pub fn push<J: Job>(&self, job: J) -> Push<'_> {
        let payload = serde_json::to_vec(&job).map_err(|e| Error::Serialize {
            kind: J::KIND,
            reason: e.to_string(),
        });
        Push::new(self, payload, Some(J::KIND))
    }

    /// Pushes a raw job: these bytes, no kind (a worker's `on_raw` handler runs it, as does
    /// `emq work --exec`).
    pub fn push_raw(&self, payload: impl Into<Vec<u8>>) -> Push<'_> {
        Push::new(self, Ok(payload.into()), None)
    }

    /// Pushes many typed jobs of one kind in one batch (one round trip per 1,000 jobs or 8 MiB),
    /// each with no other option; their handles in order.
    pub async fn push_many<J: Job>(&self, jobs: impl IntoIterator<Item = J>) -> Result<Vec<JobHandle>> {
        let jobs = jobs
            .into_iter()
            .map(|job| {
                let payload = serde_json::to_vec(&job).map_err(|e| Error::Serialize {
                    kind: J::KIND,
                    reason: e.to_string(),
                })?;
                Ok(NewJob::new(payload).with_kind(J::KIND))
            })
            .collect::<Result<Vec<_>>>()?;
        let replies = self.store.enqueue(&self.name, &jobs).await?;
        Ok(replies.into_iter().map(|r| self.pushed(r)).collect())
    }

    /// Cancels a job: one waiting is cancelled at once; a running one is asked to stop (its
    /// handler's cancel token fires).
    pub async fn cancel(&self, id: &JobId) -> Result<CancelOutcome> {
        self.store.cancel(&self.name, id, None, SettleOptions::default()).await
    }

    /// Cancels a job, giving a reason its handler and its row see.
    pub async fn cancel_with_reason(&self, id: &JobId, reason: &str) -> Result<CancelOutcome> {
        self.store
            .cancel(&self.name, id, Some(reason), SettleOptions::default())
            .await
    }

    /// The job's row, or `None` when there is no such job (never pushed, or finished and past
    /// the queue's [`Retention`]).
    pub async fn get(&self, id: &JobId) -> Result<Option<JobRow>> {
        self.store.get(&self.name, id).await
    }

    /// A handle on a job pushed earlier, by its id (one kept from a push, perhaps by another
    /// process): to wait on it, read or cancel it.
    pub fn handle(&self, id: JobId) -> JobHandle {
        JobHandle {
            queue: self.clone(),
            id,
            duplicate: false,
            pushed: false,
        }
    }

    /// Sets what the queue keeps of its finished jobs, for every worker and producer of it: a
    /// setting stored in the store, read by every verb that finishes a job. A queue that never set
    /// one keeps [`Retention::default`] (10,000 rows for 24 hours, outputs up to 64 KiB).
    pub async fn set_retention(&self, retention: Retention) -> Result<()> {
        self.store.set_retention(&self.name, &retention).await
    }

    /// What the queue keeps of its finished jobs.
    pub async fn retention(&self) -> Result<Retention> {
        self.store.retention(&self.name).await
    }

    /// Sets a rate limit (`None` removes it) for the whole queue ([`RateTarget::Queue`]), one
    /// group, or every group without its own: at most `limit.max()` starts in any window of
    /// `limit.per()` (see [`RateLimit`] for bursts and exact windows), enforced by every claim of
    /// every worker on the store's clock. A change starts the limit afresh.
    pub async fn set_rate_limit(&self, target: RateTarget, limit: Option<RateLimit>) -> Result<()> {
        self.store.set_rate_limit(&self.name, &target, limit).await
    }

    /// The queue's rate limits and when each admits its next start.
    pub async fn rate_limits(&self) -> Result<RateLimits> {
        self.store.rate_limits(&self.name).await
    }

    /// Sets how many jobs of one group run at once (`limit` ≥ 1), across every worker: a group's
    /// own limit, or the default of groups without one ([`LimitTarget::Default`], 1 unless set).
    pub async fn set_group_limit(&self, target: LimitTarget, limit: u32) -> Result<()> {
        self.store.set_group_limit(&self.name, &target, limit).await
    }

    /// Sets how long a lower priority waits behind a higher one: a ready job of priority p is
    /// claimed before every priority-0 job made ready more than p × `aging` after it; zero is
    /// strict. Jobs already ready keep their place.
    pub async fn set_priority_aging(&self, aging: Duration) -> Result<()> {
        self.store.set_priority_aging(&self.name, aging).await
    }

    /// The queue's priority aging (the default when never set).
    pub async fn priority_aging(&self) -> Result<Duration> {
        self.store.priority_aging(&self.name).await
    }

    /// Creates the schedule `name` (or replaces it in place: no slot fires twice, its counts and
    /// pause kept) firing a typed job: `job`'s JSON as each fired job's payload, `J::KIND` as its
    /// kind, so the worker's handler for `J` runs it. Set its policies and the fired jobs' options
    /// on the builder, then `.await` it. The queue's consumers fire its slots, each slot once.
    ///
    /// ```no_run
    /// # use std::time::Duration;
    /// # use echomq::schedule::{Misfire, Timing};
    /// # #[derive(serde::Serialize, serde::Deserialize)] struct Report { full: bool }
    /// # impl echomq::Job for Report { const KIND: &'static str = "report"; }
    /// # async fn run(queue: echomq::Queue) -> echomq::Result<()> {
    /// queue
    ///     .schedule("nightly", Timing::cron("30 2 * * *", Some("Europe/Berlin"))?, Report { full: true })
    ///     .misfire(Misfire::Skip)
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub fn schedule<J: Job>(&self, name: &str, timing: Timing, job: J) -> ScheduleBuilder<'_> {
        let payload = serde_json::to_vec(&job).map_err(|e| Error::Serialize {
            kind: J::KIND,
            reason: e.to_string(),
        });
        ScheduleBuilder::new(self, name, timing, payload, Some(J::KIND))
    }

    /// Creates or replaces the schedule `name` firing a raw job: these bytes, no kind (a worker's
    /// `on_raw` handler runs it, as does `emq work --exec`).
    pub fn schedule_raw(&self, name: &str, timing: Timing, payload: impl Into<Vec<u8>>) -> ScheduleBuilder<'_> {
        ScheduleBuilder::new(self, name, timing, Ok(payload.into()), None)
    }

    /// Deletes the schedule `name` (the jobs it fired stay); false when there was none.
    pub async fn remove_schedule(&self, name: &str) -> Result<bool> {
        self.store.remove_schedule(&self.name, &ScheduleName::new(name)?).await
    }

    /// Pauses the schedule `name`: it fires, and misses, nothing until resumed; false when there
    /// is none.
    pub async fn pause_schedule(&self, name: &str) -> Result<bool> {
        self.store.pause_schedule(&self.name, &ScheduleName::new(name)?).await
    }

    /// Resumes the schedule `name` from its next slot after now (the slots while it was paused
    /// are neither fired nor missed); false when there is none.
    pub async fn resume_schedule(&self, name: &str) -> Result<bool> {
        self.store.resume_schedule(&self.name, &ScheduleName::new(name)?).await
    }

    /// Fires one job of the schedule `name` now, outside its slots; `None` when there is none.
    pub async fn trigger_schedule(&self, name: &str) -> Result<Option<JobHandle>> {
        let id = self
            .store
            .trigger_schedule(&self.name, &ScheduleName::new(name)?)
            .await?;
        Ok(id.map(|id| self.handle(id)))
    }

    /// The queue's schedules, by name, each with its state (next and last slot, counts, pause).
    pub async fn schedules(&self) -> Result<Vec<ScheduleInfo>> {
        self.store.list_schedules(&self.name).await
    }

    fn pushed(&self, reply: Enqueued) -> JobHandle {
        let duplicate = !matches!(reply, Enqueued::New(_));
        let id = match reply {
            Enqueued::New(id) | Enqueued::Duplicate(id) | Enqueued::Deduplicated(id) | Enqueued::Debounced(id) => id,
        };
        JobHandle {
            queue: self.clone(),
            id,
            duplicate,
            pushed: true,
        }
    }
}

/// A push being built: set its options, then `.await` it.
#[must_use = "a push does nothing until it is awaited"]
pub struct Push<'q> {
    queue: &'q Queue,
    payload: Result<Vec<u8>>,
    kind: Option<&'static str>,
    group: Option<Result<GroupName>>,
    id: Option<Result<JobId>>,
    delay: Option<Duration>,
    max_attempts: Option<u32>,
    priority: Option<u8>,
    retry: Option<crate::RetryPolicy>,
    dedup: Option<Result<crate::dedup::Dedup>>,
}

impl<'q> Push<'q> {
    fn new(queue: &'q Queue, payload: Result<Vec<u8>>, kind: Option<&'static str>) -> Self {
        Push {
            queue,
            payload,
            kind,
            group: None,
            id: None,
            delay: None,
            max_attempts: None,
            priority: None,
            retry: None,
            dedup: None,
        }
    }

    /// Runs no earlier than `delay` from now (the store's clock).
    pub fn delay(mut self, delay: Duration) -> Self {
        self.delay = Some(delay);
        self
    }

    /// Puts the job in `group`'s lane: a group's jobs run in push order, at most its limit at
    /// once (1 unless set with `emq group-limit` or [`Queue::set_group_limit`]), while other groups run beside them.
    pub fn group(mut self, group: &str) -> Self {
        self.group = Some(GroupName::new(group));
        self
    }

    /// This job's attempt budget (else the worker's).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// How urgent the job is: 0 (the default, the most urgent) to 9 (the least). Lower
    /// priorities wait behind higher ones only so long: see [`NewJob::priority`].
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = Some(priority);
        self
    }

    /// This job's own retry curve, instead of the worker's.
    pub fn retry(mut self, retry: crate::RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    /// A caller-given id (it must hold a non-digit): pushing it again while the job exists
    /// writes nothing and answers the existing job ([`JobHandle::is_duplicate`]).
    pub fn id(mut self, id: &str) -> Self {
        self.id = Some(JobId::new(id));
        self
    }

    /// A dedup key and its mode: pushes of one key are one job while it holds (see
    /// [`crate::dedup::DedupMode`]); a push the key answered writes nothing (or, debounced, only
    /// the waiting job's payload) and its handle is that job's ([`JobHandle::is_duplicate`]).
    pub fn dedup(mut self, key: &str, mode: crate::dedup::DedupMode) -> Self {
        self.dedup = Some(crate::keyspace::DedupKey::new(key).and_then(|k| crate::dedup::Dedup::new(k, mode)));
        self
    }

    async fn send(self) -> Result<JobHandle> {
        let mut job = NewJob::new(self.payload?);
        job.kind = self.kind.map(str::to_string);
        job.id = self.id.transpose()?;
        job.delay = self.delay;
        job.max_attempts = self.max_attempts;
        job.priority = self.priority;
        job.retry = self.retry;
        job.dedup = self.dedup.transpose()?;
        let store = &self.queue.store;
        let replies = match self.group.transpose()? {
            Some(g) => store.genqueue(&self.queue.name, &g, &[job]).await?,
            None => store.enqueue(&self.queue.name, &[job]).await?,
        };
        let reply = replies.into_iter().next().ok_or(Error::Protocol {
            verb: "enqueue",
            reply: "no reply for the job pushed".into(),
        })?;
        Ok(self.queue.pushed(reply))
    }
}

impl<'q> IntoFuture for Push<'q> {
    type Output = Result<JobHandle>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<JobHandle>> + Send + 'q>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// A schedule being created or replaced ([`Queue::schedule`]): set its policies and its jobs'
/// options, then `.await` it.
#[must_use = "a schedule is written only when awaited"]
pub struct ScheduleBuilder<'q> {
    queue: &'q Queue,
    name: Result<ScheduleName>,
    timing: Timing,
    payload: Result<Vec<u8>>,
    kind: Option<&'static str>,
    group: Option<Result<GroupName>>,
    misfire: Misfire,
    overlap: Overlap,
    grace: Option<Duration>,
    priority: u8,
    max_attempts: Option<u32>,
    retry: Option<crate::RetryPolicy>,
}

impl<'q> ScheduleBuilder<'q> {
    fn new(queue: &'q Queue, name: &str, timing: Timing, payload: Result<Vec<u8>>, kind: Option<&'static str>) -> Self {
        ScheduleBuilder {
            queue,
            name: ScheduleName::new(name),
            timing,
            payload,
            kind,
            group: None,
            misfire: Misfire::default(),
            overlap: Overlap::default(),
            grace: None,
            priority: 0,
            max_attempts: None,
            retry: None,
        }
    }

    /// What it does with slots missed by more than the grace (every consumer down): see
    /// [`Misfire`] (one catch-up job unless set).
    pub fn misfire(mut self, misfire: Misfire) -> Self {
        self.misfire = misfire;
        self
    }

    /// Whether a slot fires while the previous job still waits or runs (it does unless set).
    pub fn overlap(mut self, overlap: Overlap) -> Self {
        self.overlap = overlap;
        self
    }

    /// How late a fire may be and still be on time (else the firing consumer's default).
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = Some(grace);
        self
    }

    /// Fires each job into `group`'s lane.
    pub fn group(mut self, group: &str) -> Self {
        self.group = Some(GroupName::new(group));
        self
    }

    /// The fired jobs' priority: 0 (the default, the most urgent) to 9.
    pub fn priority(mut self, priority: u8) -> Self {
        self.priority = priority;
        self
    }

    /// The fired jobs' attempt budget (else the worker's).
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = Some(n);
        self
    }

    /// The fired jobs' own retry curve (a storable one), instead of the worker's.
    pub fn retry(mut self, retry: crate::RetryPolicy) -> Self {
        self.retry = Some(retry);
        self
    }

    async fn send(self) -> Result<()> {
        let template = JobTemplate {
            payload: self.payload?,
            group: self.group.transpose()?,
            priority: self.priority,
            max_attempts: self.max_attempts,
            retry: self.retry,
            kind: self.kind.map(str::to_string),
        };
        let mut schedule = Schedule::new(self.name?, self.timing, template);
        schedule.misfire = self.misfire;
        schedule.overlap = self.overlap;
        schedule.grace = self.grace;
        self.queue.store.upsert_schedule(&self.queue.name, &schedule).await?;
        Ok(())
    }
}

impl<'q> IntoFuture for ScheduleBuilder<'q> {
    type Output = Result<()>;
    type IntoFuture = Pin<Box<dyn Future<Output = Result<()>> + Send + 'q>>;

    fn into_future(self) -> Self::IntoFuture {
        Box::pin(self.send())
    }
}

/// A pushed job: its id, and the queue it is in.
#[derive(Debug, Clone)]
pub struct JobHandle {
    queue: Queue,
    id: JobId,
    duplicate: bool,
    /// Made by a push, so the job existed (a missing row is past retention, not unknown).
    pushed: bool,
}

impl JobHandle {
    /// The job's id.
    pub fn id(&self) -> &JobId {
        &self.id
    }

    /// The queue it was pushed to.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// True when the push made no job of its own: a job with its caller-given id already existed,
    /// or its dedup key was held (the handle is that job's; a debounced push gave it its payload).
    pub fn is_duplicate(&self) -> bool {
        self.duplicate
    }

    /// The job's row now, or `None` once it is gone.
    pub async fn get(&self) -> Result<Option<JobRow>> {
        self.queue.get(&self.id).await
    }

    /// Cancels the job (see [`Queue::cancel`]).
    pub async fn cancel(&self) -> Result<CancelOutcome> {
        self.queue.cancel(&self.id).await
    }

    /// Waits until the job completes, dies or is cancelled, and answers how it ended — for at
    /// most `timeout` ([`Error::Timeout`] past it; the job goes on).
    ///
    /// The row is not polled: the wait subscribes to the queue's finish notices (Redis: the pub/sub
    /// channel `emq:{q}:finished`, one connection per queue shared by every wait of the store;
    /// embedded: in memory, and another process's commits noticed within half a second by the
    /// file's data version, the row read again only when it moved), then marks the
    /// job's row as waited on — one write. The verb that finishes a job reads the mark with the
    /// fields it reads anyway and publishes only for a marked job, so a job nobody waits on costs
    /// no command. A job that finished before the wait is answered from its kept row.
    ///
    /// A job whose row is gone answers [`Outcome::Expired`] when it is known to have existed: this
    /// handle pushed it, or its generated id is one the queue has handed out. A handle made by
    /// [`Queue::handle`] for a caller's id with no row answers [`Error::NoSuchJob`] (a caller's id
    /// cannot tell "never pushed" from "past retention"), as does a generated id never handed out
    /// (or one of a queue obliterated since, which forgets its sequence).
    pub async fn wait(&self, timeout: Duration) -> Result<Outcome> {
        let store = self.queue.store();
        let queue = self.queue.name();
        let waiting = async {
            let mut notices = store.finished_waits(queue).await?;
            loop {
                match store.mark_waited(queue, &self.id).await? {
                    Waited::Finished(row) => {
                        if let Some(outcome) = Outcome::of(*row) {
                            return Ok(outcome);
                        }
                    }
                    Waited::Gone { sequence } => return self.gone(sequence),
                    Waited::Waiting => {}
                }
                // until this job's notice, or one to look at every waited job again
                loop {
                    match notices.next().await {
                        Some(Some(id)) if id != self.id => continue,
                        Some(_) => break,
                        None => {
                            return Err(Error::Store {
                                verb: "wait",
                                reason: "the store's finish notices ended".into(),
                            })
                        }
                    }
                }
            }
        };
        match tokio::time::timeout(timeout, waiting).await {
            Ok(outcome) => outcome,
            Err(_) => Err(Error::Timeout {
                what: "wait",
                after: timeout,
            }),
        }
    }

    /// The answer for a job with no row: expired when it is known to have existed.
    fn gone(&self, sequence: u64) -> Result<Outcome> {
        let handed_out = self.id.is_generated() && self.id.as_str().parse::<u64>().is_ok_and(|n| n <= sequence);
        if self.pushed || handed_out {
            return Ok(Outcome::Expired);
        }
        Err(Error::NoSuchJob {
            queue: self.queue.name().to_string(),
            id: self.id.to_string(),
        })
    }
}
