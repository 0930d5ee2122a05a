//! Every verb written once above the engines: its arguments checked, its batch split by count and
//! bytes, its KEYS and ARGV built, its script run by the engine ([`Engine`]), and its reply read
//! into the verb's typed answer. One module a verb (or a family of verbs), named after it.

pub(crate) use crate::store::engine::{Call, Engine};

mod args;
pub(crate) mod cancel;
pub(crate) mod claim;
pub(crate) mod complete;
pub(crate) mod complete_cancelled;
pub(crate) mod complete_many;
pub(crate) mod counts;
pub(crate) mod discard;
pub(crate) mod drain;
pub(crate) mod enqueue;
pub(crate) mod extend_lock;
pub(crate) mod genqueue;
pub(crate) mod get;
pub(crate) mod groups;
pub(crate) mod history;
pub(crate) mod list;
pub(crate) mod mark_waited;
pub(crate) mod obliterate;
pub(crate) mod pause;
pub(crate) mod priority_aging;
pub(crate) mod promote;
pub(crate) mod promote_job;
pub(crate) mod queues;
pub(crate) mod rate_limits;
pub(crate) mod reap;
pub(crate) mod redrive;
pub(crate) mod registry;
pub(crate) mod release;
pub(crate) mod remove;
pub(crate) mod reply;
pub(crate) mod resume;
pub(crate) mod retention;
pub(crate) mod retry;
pub(crate) mod round;
pub(crate) mod schedules;
pub(crate) mod set_group_limit;
pub(crate) mod sweep_stalled;
pub(crate) mod update_data;

/// The span of one verb on a store (trace level): its name, its queue, how many jobs it carries,
/// the store's kind (`redis`, `embedded`). Both stores open it, around everything the verb sends.
pub(crate) fn span(
    store: &(impl Engine + ?Sized),
    verb: &'static str,
    queue: Option<&crate::keyspace::QueueName>,
    batch: usize,
) -> tracing::Span {
    tracing::trace_span!(
        "emq.store",
        verb,
        queue = queue.map(|q| q.as_str()),
        batch,
        store = store.kind()
    )
}

/// The names the [`script_store`] impl reads.
pub(crate) mod prelude {
    pub(crate) use super::{
        cancel, claim, complete, complete_cancelled, complete_many, counts, discard, drain, enqueue, extend_lock,
        genqueue, get, groups, history, list, mark_waited, obliterate, pause, priority_aging, promote, promote_job,
        queues, rate_limits, reap, redrive, registry, release, remove, resume, retention, retry, round, schedules,
        set_group_limit, sweep_stalled, update_data,
    };
    pub(crate) use crate::error::Result;
    pub(crate) use crate::job::{JobRow, JobState, NewJob};
    pub(crate) use crate::keyspace::{GroupName, JobId, QueueName};
    pub(crate) use crate::rate::{RateLimit, RateLimits, RateTarget};
    pub(crate) use crate::registry::ConsumerEntry;
    pub(crate) use crate::schedule::{Refill, RefillRequest, Schedule, ScheduleInfo, ScheduleName};
    pub(crate) use crate::store::{
        CancelOutcome, CancelledRequest, ClaimRequest, Claimed, CompletedThenClaimed, Completion, Counts,
        DiscardRequest, Discarded, Enqueued, Extended, GroupsPage, History, JobsPage, LimitTarget, Obliterated,
        Promoted, PromotedJob, Redriven, Removed, Retention, Retried, RetryRequest, Round, RoundRequest, SettleOptions,
        Settled, StalledPolicy, Store, Swept, Waited,
    };
    pub(crate) use std::time::Duration;
}

/// `impl Store for $ty`, a store whose verbs are the scripts its engine runs ([`Engine`]): each
/// verb handed to its module here, once for every such store; `$extra` are the methods the store
/// provides itself (its park, its subscriptions, its settle round trips).
macro_rules! script_store {
    ($ty:ty, { $($extra:tt)* }) => {
        const _: () = {
            use $crate::store::verbs::prelude::*;
            use tracing::Instrument;

            #[async_trait::async_trait]
            impl Store for $ty {
                    async fn enqueue(&self, queue: &QueueName, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
                        enqueue::enqueue(self, queue, jobs)
                            .instrument($crate::store::verbs::span(self, "enqueue", Some(queue), jobs.len()))
                            .await
                    }

                    async fn genqueue(&self, queue: &QueueName, group: &GroupName, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
                        genqueue::genqueue(self, queue, group, jobs)
                            .instrument($crate::store::verbs::span(self, "genqueue", Some(queue), jobs.len()))
                            .await
                    }

                    async fn claim(&self, queue: &QueueName, request: ClaimRequest) -> Result<Claimed> {
                        let n = request.n as usize;
                        claim::claim(self, queue, &request)
                            .instrument($crate::store::verbs::span(self, "claim", Some(queue), n))
                            .await
                    }

                    async fn complete(&self, queue: &QueueName, job: &Completion, settle: SettleOptions) -> Result<Settled> {
                        complete::complete(self, queue, &job.id, job.token, job.output.as_deref(), settle)
                            .instrument($crate::store::verbs::span(self, "complete", Some(queue), 1))
                            .await
                    }

                    async fn complete_many(
                        &self,
                        queue: &QueueName,
                        jobs: &[Completion],
                        settle: SettleOptions,
                    ) -> Result<Vec<Settled>> {
                        complete_many::complete_many(self, queue, jobs, settle)
                            .instrument($crate::store::verbs::span(self, "complete_many", Some(queue), jobs.len()))
                            .await
                    }

                    async fn complete_cancelled(
                        &self,
                        queue: &QueueName,
                        id: &JobId,
                        token: u64,
                        request: &CancelledRequest,
                    ) -> Result<Settled> {
                        complete_cancelled::complete_cancelled(self, queue, id, token, request.reason.as_deref(), request.settle)
                            .instrument($crate::store::verbs::span(self, "complete_cancelled", Some(queue), 1))
                            .await
                    }

                    async fn retry(&self, queue: &QueueName, id: &JobId, token: u64, request: &RetryRequest) -> Result<Retried> {
                        retry::retry(self, queue, id, token, request)
                            .instrument($crate::store::verbs::span(self, "retry", Some(queue), 1))
                            .await
                    }

                    async fn release(&self, queue: &QueueName, id: &JobId, token: u64, delay: Duration) -> Result<Settled> {
                        release::release(self, queue, id, token, delay)
                            .instrument($crate::store::verbs::span(self, "release", Some(queue), 1))
                            .await
                    }

                    async fn discard(&self, queue: &QueueName, id: &JobId, token: u64, request: &DiscardRequest) -> Result<Discarded> {
                        discard::discard(self, queue, id, token, &request.error, request.settle)
                            .instrument($crate::store::verbs::span(self, "discard", Some(queue), 1))
                            .await
                    }

                    async fn reap(&self, queue: &QueueName, limit: u32, max_redeliveries: Option<u32>) -> Result<u64> {
                        reap::reap(self, queue, limit, max_redeliveries)
                            .instrument($crate::store::verbs::span(self, "reap", Some(queue), 1))
                            .await
                    }

                    async fn sweep_stalled(&self, queue: &QueueName, policy: StalledPolicy) -> Result<Swept> {
                        sweep_stalled::sweep_stalled(self, queue, policy)
                            .instrument($crate::store::verbs::span(self, "sweep_stalled", Some(queue), 1))
                            .await
                    }

                    async fn promote(&self, queue: &QueueName, limit: u32, grace: Duration) -> Result<Promoted> {
                        promote::promote(self, queue, limit, grace)
                            .instrument($crate::store::verbs::span(self, "promote", Some(queue), 1))
                            .await
                    }

                    async fn upsert_schedule(&self, queue: &QueueName, schedule: &Schedule) -> Result<u64> {
                        schedules::upsert_schedule(self, queue, schedule)
                            .instrument($crate::store::verbs::span(self, "upsert_schedule", Some(queue), 1))
                            .await
                    }

                    async fn remove_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool> {
                        schedules::remove_schedule(self, queue, name)
                            .instrument($crate::store::verbs::span(self, "remove_schedule", Some(queue), 1))
                            .await
                    }

                    async fn pause_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool> {
                        schedules::pause_schedule(self, queue, name)
                            .instrument($crate::store::verbs::span(self, "pause_schedule", Some(queue), 1))
                            .await
                    }

                    async fn resume_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<bool> {
                        schedules::resume_schedule(self, queue, name)
                            .instrument($crate::store::verbs::span(self, "resume_schedule", Some(queue), 1))
                            .await
                    }

                    async fn list_schedules(&self, queue: &QueueName) -> Result<Vec<ScheduleInfo>> {
                        schedules::list_schedules(self, queue)
                            .instrument($crate::store::verbs::span(self, "list_schedules", Some(queue), 1))
                            .await
                    }

                    async fn trigger_schedule(&self, queue: &QueueName, name: &ScheduleName) -> Result<Option<JobId>> {
                        schedules::trigger_schedule(self, queue, name)
                            .instrument($crate::store::verbs::span(self, "trigger_schedule", Some(queue), 1))
                            .await
                    }

                    async fn refill_schedule(&self, queue: &QueueName, request: &RefillRequest, refill: &Refill) -> Result<bool> {
                        schedules::refill_schedule(self, queue, request, refill)
                            .instrument($crate::store::verbs::span(self, "refill_schedule", Some(queue), 1))
                            .await
                    }

                    async fn recover_promote_claim(&self, queue: &QueueName, request: &RoundRequest) -> Result<Round> {
                        round::recover_promote_claim(self, queue, request)
                            .instrument($crate::store::verbs::span(self, "recover_promote_claim", Some(queue), request.claim.n as usize))
                            .await
                    }

                    async fn complete_then_claim(
                        &self,
                        queue: &QueueName,
                        jobs: &[Completion],
                        settle: SettleOptions,
                        claim: ClaimRequest,
                    ) -> Result<CompletedThenClaimed> {
                        round::complete_then_claim(self, queue, jobs, settle, &claim)
                            .instrument($crate::store::verbs::span(self, "complete_then_claim", Some(queue), jobs.len()))
                            .await
                    }

                    async fn extend_lock(&self, queue: &QueueName, id: &JobId, token: u64, lease: Duration) -> Result<Extended> {
                        extend_lock::extend_lock(self, queue, id, token, lease)
                            .instrument($crate::store::verbs::span(self, "extend_lock", Some(queue), 1))
                            .await
                    }

                    async fn update_data(&self, queue: &QueueName, id: &JobId, token: u64, payload: &[u8]) -> Result<Settled> {
                        update_data::update_data(self, queue, id, token, payload)
                            .instrument($crate::store::verbs::span(self, "update_data", Some(queue), 1))
                            .await
                    }

                    async fn pause(&self, queue: &QueueName) -> Result<()> {
                        pause::pause(self, queue)
                            .instrument($crate::store::verbs::span(self, "pause", Some(queue), 1))
                            .await
                    }

                    async fn resume(&self, queue: &QueueName) -> Result<()> {
                        resume::resume(self, queue)
                            .instrument($crate::store::verbs::span(self, "resume", Some(queue), 1))
                            .await
                    }

                    async fn drain(&self, queue: &QueueName) -> Result<u64> {
                        drain::drain(self, queue)
                            .instrument($crate::store::verbs::span(self, "drain", Some(queue), 1))
                            .await
                    }

                    async fn obliterate(&self, queue: &QueueName, force: bool) -> Result<Obliterated> {
                        obliterate::obliterate(self, queue, force)
                            .instrument($crate::store::verbs::span(self, "obliterate", Some(queue), 1))
                            .await
                    }

                    async fn get(&self, queue: &QueueName, id: &JobId) -> Result<Option<JobRow>> {
                        get::get(self, queue, id)
                            .instrument($crate::store::verbs::span(self, "get", Some(queue), 1))
                            .await
                    }

                    async fn remove(&self, queue: &QueueName, id: &JobId, force: bool) -> Result<Removed> {
                        remove::remove(self, queue, id, force)
                            .instrument($crate::store::verbs::span(self, "remove", Some(queue), 1))
                            .await
                    }

                    async fn redrive(&self, queue: &QueueName, id: &JobId, extra: u32) -> Result<Redriven> {
                        redrive::redrive(self, queue, id, extra)
                            .instrument($crate::store::verbs::span(self, "redrive", Some(queue), 1))
                            .await
                    }

                    async fn redrive_all(&self, queue: &QueueName, extra: u32) -> Result<u64> {
                        redrive::redrive_all(self, queue, extra)
                            .instrument($crate::store::verbs::span(self, "redrive_all", Some(queue), 1))
                            .await
                    }

                    async fn promote_job(&self, queue: &QueueName, id: &JobId) -> Result<PromotedJob> {
                        promote_job::promote_job(self, queue, id)
                            .instrument($crate::store::verbs::span(self, "promote_job", Some(queue), 1))
                            .await
                    }

                    async fn cancel(
                        &self,
                        queue: &QueueName,
                        id: &JobId,
                        reason: Option<&str>,
                        settle: SettleOptions,
                    ) -> Result<CancelOutcome> {
                        cancel::cancel(self, queue, id, reason, settle)
                            .instrument($crate::store::verbs::span(self, "cancel", Some(queue), 1))
                            .await
                    }

                    async fn set_retention(&self, queue: &QueueName, retention: &Retention) -> Result<()> {
                        retention::set_retention(self, queue, retention)
                            .instrument($crate::store::verbs::span(self, "set_retention", Some(queue), 1))
                            .await
                    }

                    async fn retention(&self, queue: &QueueName) -> Result<Retention> {
                        retention::retention(self, queue)
                            .instrument($crate::store::verbs::span(self, "retention", Some(queue), 1))
                            .await
                    }

                    async fn set_priority_aging(&self, queue: &QueueName, aging: Duration) -> Result<()> {
                        priority_aging::set_priority_aging(self, queue, aging)
                            .instrument($crate::store::verbs::span(self, "set_priority_aging", Some(queue), 1))
                            .await
                    }

                    async fn priority_aging(&self, queue: &QueueName) -> Result<Duration> {
                        priority_aging::priority_aging(self, queue)
                            .instrument($crate::store::verbs::span(self, "priority_aging", Some(queue), 1))
                            .await
                    }

                    async fn set_rate_limit(&self, queue: &QueueName, target: &RateTarget, limit: Option<RateLimit>) -> Result<()> {
                        rate_limits::set_rate_limit(self, queue, target, limit)
                            .instrument($crate::store::verbs::span(self, "set_rate_limit", Some(queue), 1))
                            .await
                    }

                    async fn rate_limits(&self, queue: &QueueName) -> Result<RateLimits> {
                        rate_limits::rate_limits(self, queue)
                            .instrument($crate::store::verbs::span(self, "rate_limits", Some(queue), 1))
                            .await
                    }

                    async fn mark_waited(&self, queue: &QueueName, id: &JobId) -> Result<Waited> {
                        mark_waited::mark_waited(self, queue, id)
                            .instrument($crate::store::verbs::span(self, "mark_waited", Some(queue), 1))
                            .await
                    }

                    async fn set_group_limit(&self, queue: &QueueName, target: &LimitTarget, limit: u32) -> Result<()> {
                        set_group_limit::set_group_limit(self, queue, target, limit)
                            .instrument($crate::store::verbs::span(self, "set_group_limit", Some(queue), 1))
                            .await
                    }

                    async fn counts(&self, queue: &QueueName) -> Result<Counts> {
                        counts::counts(self, queue)
                            .instrument($crate::store::verbs::span(self, "counts", Some(queue), 1))
                            .await
                    }

                    async fn groups(&self, queue: &QueueName, cursor: Option<&str>) -> Result<GroupsPage> {
                        groups::groups(self, queue, cursor)
                            .instrument($crate::store::verbs::span(self, "groups", Some(queue), 1))
                            .await
                    }

                    async fn register_consumer(&self, queue: &QueueName, entry: &ConsumerEntry) -> Result<i64> {
                        registry::register(self, queue, entry)
                            .instrument($crate::store::verbs::span(self, "register_consumer", Some(queue), 1))
                            .await
                    }

                    async fn unregister_consumer(&self, queue: &QueueName, id: &str) -> Result<bool> {
                        registry::unregister(self, queue, id)
                            .instrument($crate::store::verbs::span(self, "unregister_consumer", Some(queue), 1))
                            .await
                    }

                    async fn consumers(&self, queue: &QueueName) -> Result<Vec<ConsumerEntry>> {
                        registry::consumers(self, queue)
                            .instrument($crate::store::verbs::span(self, "consumers", Some(queue), 1))
                            .await
                    }

                    async fn history(&self, queue: &QueueName, minutes: u32) -> Result<History> {
                        crate::store::check_history_minutes(minutes)?;
                        history::history(self, queue, minutes)
                            .instrument($crate::store::verbs::span(self, "history", Some(queue), 1))
                            .await
                    }

                    async fn list(&self, queue: &QueueName, state: JobState, cursor: Option<&str>, limit: u32) -> Result<JobsPage> {
                        list::list(self, queue, state, cursor, limit)
                            .instrument($crate::store::verbs::span(self, "list", Some(queue), 1))
                            .await
                    }

                    async fn queues(&self) -> Result<Vec<QueueName>> {
                        queues::queues(self)
                            .instrument($crate::store::verbs::span(self, "queues", None, 0))
                            .await
                    }

                $($extra)*
            }
        };
    };
}
pub(crate) use script_store;
