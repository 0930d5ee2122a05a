//! EchoMQ: a background-job queue for Rust.
//!
//! Jobs live in a [`Store`] — Redis/Valkey for production and many machines, where
//! every state transition is one Lua script and all keys of a queue share one Cluster hash tag
//! (`emq:{q}:…`), or the embedded durable store (SQLite, one file; the default when no Redis URL
//! is given), with the same verbs and replies — and consumers claim them under a lease fenced by
//! the row's attempts count. See `docs/` for the keyspace and the state machine.
#![warn(missing_docs)]
// built with neither store feature, the checks and helpers the stores share have no caller: the
// contract and the consumer still build, for a store of the user's own
#![cfg_attr(not(any(feature = "redis", feature = "embedded")), allow(dead_code))]
#![doc = ""]
#![doc = include_str!("../README.md")]

pub mod guide {
    //! The user guide, a chapter a task, in the order a newcomer reads it (each chapter's code
    //! samples compile, and those that need no server run, as this crate's tests):
    //!
    //! 1. [Install](crate::guide::install)
    //! 2. [Your first job](crate::guide::first_job)
    //! 3. [Typed jobs and kinds](crate::guide::typed_jobs)
    //! 4. [Workers and pools](crate::guide::worker_pools)
    //! 5. [Retries and dead jobs](crate::guide::retries)
    //! 6. [Delays and schedules](crate::guide::delays_and_schedules)
    //! 7. [Groups](crate::guide::groups)
    //! 8. [Priorities](crate::guide::priorities)
    //! 9. [Rate limits](crate::guide::rate_limits)
    //! 10. [Deduplication](crate::guide::dedup)
    //! 11. [Cancel](crate::guide::cancel)
    //! 12. [Results and `wait`](crate::guide::results)
    //! 13. [Shutdown and deploys](crate::guide::shutdown_and_deploys)
    //! 14. [Redis and Redis Cluster](crate::guide::redis)
    //! 15. [The embedded store](crate::guide::embedded)
    //! 16. [The command line: `emq`](crate::guide::cli)
    //! 17. [The dashboard and metrics](crate::guide::dashboard)
    //! 18. [Running in production](crate::guide::production)

    #[doc = include_str!("../guide/01-install.md")]
    pub mod install {}
    #[doc = include_str!("../guide/02-first-job.md")]
    pub mod first_job {}
    #[doc = include_str!("../guide/03-typed-jobs.md")]
    pub mod typed_jobs {}
    #[doc = include_str!("../guide/04-worker-pools.md")]
    pub mod worker_pools {}
    #[doc = include_str!("../guide/05-retries.md")]
    pub mod retries {}
    #[doc = include_str!("../guide/06-delays-and-schedules.md")]
    pub mod delays_and_schedules {}
    #[doc = include_str!("../guide/07-groups.md")]
    pub mod groups {}
    #[doc = include_str!("../guide/08-priorities.md")]
    pub mod priorities {}
    #[doc = include_str!("../guide/09-rate-limits.md")]
    pub mod rate_limits {}
    #[doc = include_str!("../guide/10-dedup.md")]
    pub mod dedup {}
    #[doc = include_str!("../guide/11-cancel.md")]
    pub mod cancel {}
    #[doc = include_str!("../guide/12-results.md")]
    pub mod results {}
    #[doc = include_str!("../guide/13-shutdown-and-deploys.md")]
    pub mod shutdown_and_deploys {}
    #[doc = include_str!("../guide/14-redis.md")]
    pub mod redis {}
    #[doc = include_str!("../guide/15-embedded.md")]
    pub mod embedded {}
    #[doc = include_str!("../guide/16-cli.md")]
    pub mod cli {}
    #[doc = include_str!("../guide/17-dashboard.md")]
    pub mod dashboard {}
    #[doc = include_str!("../guide/18-production.md")]
    pub mod production {}
}

/// Builder setters of a plain value type: each `name: field: Type;` becomes
/// `pub fn name(mut self, v: Type) -> Self`, setting `field` (its doc comments kept).
macro_rules! setters {
    ($ty:ty { $($(#[$doc:meta])* $name:ident: $field:ident: $fty:ty;)* }) => {
        impl $ty {
            $($(#[$doc])* pub fn $name(mut self, v: $fty) -> Self {
                self.$field = v;
                self
            })*
        }
    };
}

pub mod cancel;
pub mod consumer;
pub mod dedup;
pub mod error;
pub mod job;
pub mod keyspace;
pub mod outcome;
pub mod queue;
pub mod rate;
pub mod registry;
pub mod retry;
pub mod schedule;
pub mod store;
pub mod telemetry;
pub mod worker;

pub use cancel::{CancelToken, Cancelled};
pub use consumer::{Consumer, ConsumerOptions, Handler, JobContext, Verdict};
pub use dedup::{Dedup, DedupMode};
pub use error::{Error, Result};
pub use job::{ClaimedJob, Job, JobRow, JobState, NewJob};
pub use keyspace::{DedupKey, GroupName, JobId, QueueName};
pub use outcome::{Outcome, Output};
pub use queue::{JobHandle, Push, Queue, ScheduleBuilder};
pub use rate::{RateLimit, RateTarget};
pub use retry::{Jitter, RetryPolicy};
pub use schedule::{JobTemplate, Misfire, Overlap, Schedule, ScheduleInfo, ScheduleName, Timing};
pub use store::{Kinds, Retention, Store};
pub use worker::{JobError, JobHandler, Worker, WorkerHandle};

/// Opens a store from a URL, shared (`Arc`) so a [`Queue`] and a [`Worker`] can use it at once:
/// `""` is the embedded default (the file `echomq.db` in the working directory); `sqlite:PATH` (or
/// a plain path) an embedded store on that file; `redis://…` or `rediss://…` Redis or Valkey.
/// See [`store::open`] for the options each takes.
pub async fn open(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    let store = if url.is_empty() {
        store::open_default().await?
    } else {
        store::open(url).await?
    };
    Ok(std::sync::Arc::from(store))
}

/// [`open`] for a worker: a Redis store connects at its first verb instead of now, so a
/// [`Worker`] (or [`Consumer`]) started while the server is down waits it out, backing off as
/// through any outage, and starts working once it is up. A refusal no retry mends (a password
/// missing or refused, an ACL denial, a server that does not speak Redis:
/// [`Error::Misconfigured`]) still ends the worker at once. See [`store::open_lazy`].
pub async fn open_lazy(url: &str) -> Result<std::sync::Arc<dyn Store>> {
    let store = if url.is_empty() {
        store::open_default().await?
    } else {
        store::open_lazy(url).await?
    };
    Ok(std::sync::Arc::from(store))
}
