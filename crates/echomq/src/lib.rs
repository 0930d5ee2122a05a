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
#![doc = include_str!("../../../README.md")]

pub mod cancel;
pub mod consumer;
pub mod error;
pub mod job;
pub mod keyspace;
pub mod store;

pub use cancel::CancelToken;
pub use consumer::{Consumer, ConsumerOptions, Handler, JobContext, Verdict};
pub use error::{Error, Result};
pub use job::{ClaimedJob, Job, JobState, NewJob};
pub use keyspace::{GroupName, JobId, QueueName};
pub use store::Store;
