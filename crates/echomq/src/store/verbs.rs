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
