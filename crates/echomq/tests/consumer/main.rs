//! The consumer's behaviour suite: every case is written once, generic over the store, and runs
//! against every store (`consumer_cases!` in `harness.rs`: a test per case on Redis, Redis Cluster,
//! Valkey, Valkey Cluster and the embedded store). What holds on one store only is apart, in files named for it.
//!
//! - `processing.rs`: every job once, lanes, a free slot, panics, a refused
//!   completion, records, refused options;
//! - `wake.rs`: a parked consumer woken by an enqueue (this handle's or another's), one wake token
//!   per parked consumer;
//! - `stop.rs`: stop, its timeout, a stop racing an enqueue, abort, ttl and the supervisor, a start
//!   outside a runtime;
//! - `cancel.rs`: a remote cancel, a cancel nobody listened to, a request meant for an earlier job,
//!   a stale settle that must not untrack the next attempt;
//! - `recovery.rs`: recover and promote under a backlog, checkpoints, the stalled sweep, the locks
//!   plane, recovery off;
//! - `worker.rs`: the front door — typed jobs through a `Queue`, a `Worker` routing by kind,
//!   `JobError` and `?`, panics, unknown kinds in a rolling deploy, a stop that releases, the
//!   lease renewed by default;
//! - `embedded_only.rs`: the embedded store's direct hand-off, SQLite's storage classes, a failed
//!   write inside a round, the cancel-requests table;
//! - `cluster_only.rs`: a Redis Cluster of the test's own (a master failed over under load, the
//!   queue's slot migrated under load and in the middle of a claim, a cancel sent during a
//!   failover, writes waiting for a replica);
//! - `redis_only.rs`: a Redis of the test's own (killed, restarted, down at the consumer's start,
//!   password-protected, an ACL user), a server that is not Redis, the idle command rate.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;

mod cancel;
mod cluster_only;
mod embedded_only;
mod prefetch;
mod priority;
mod processing;
mod rate;
mod recovery;
mod redis_only;
mod stop;
mod wake;
mod worker;
