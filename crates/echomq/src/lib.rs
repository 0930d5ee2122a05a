//! EchoMQ: a background-job queue for Rust.
//!
//! Jobs live in a [`Store`](store::Store) — Redis/Valkey for production and many machines, where
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
pub use store::{Retention, Store};
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
