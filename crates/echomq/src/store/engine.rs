//! What an engine provides to the store layer above it ([`crate::store::verbs`]): run a named
//! script with KEYS and ARGV, several in one round trip, and the few plain commands a client sends
//! (the queue registration's `SADD` and `ZADD XX`, obliterate's set updates). Redis (one server or
//! a Cluster) implements it. Unstable: the store's own machinery, not an extension point.

use std::time::Duration;

use async_trait::async_trait;

use crate::error::Result;
use crate::store::reply::Reply;
use crate::store::scripts::{Script, Scripts};

/// One script call: the script, its KEYS and its ARGV.
pub(crate) struct Call<'a> {
    pub(crate) script: &'a Script,
    pub(crate) keys: Vec<String>,
    pub(crate) args: Vec<Vec<u8>>,
}

/// An engine that runs the verbs' scripts.
#[async_trait]
pub(crate) trait Engine: Send + Sync {
    /// Every verb's script.
    fn scripts(&self) -> &Scripts;

    /// The largest payload (and output) accepted, in bytes.
    fn payload_limit(&self) -> usize;

    /// The store's kind, as its `emq.store` spans name it (`redis`, `embedded`).
    fn kind(&self) -> &'static str;

    /// Runs one script; an error reply is the store's error.
    async fn run(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply>;

    /// Runs one script; an error reply comes back as [`Reply::Error`] (code first) for the verb
    /// to read. Errs when the script could not run.
    async fn run_raw(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply>;

    /// Runs the calls in one round trip (one transaction); each call's reply or error is its own.
    /// `wait`: the writes also wait for this many replicas, this long (an engine without replicas
    /// ignores it).
    async fn run_calls_waiting(
        &self,
        calls: Vec<Call<'_>>,
        wait: Option<(u32, Duration)>,
    ) -> Result<Vec<Result<Reply>>>;

    /// [`Engine::run_calls_waiting`] with no wait asked.
    async fn run_calls(&self, calls: Vec<Call<'_>>) -> Result<Vec<Result<Reply>>> {
        self.run_calls_waiting(calls, None).await
    }

    /// Plain commands (each its words, name first) for `verb` in one round trip to where
    /// `route_key` lives (every key they name shares its slot); each command's reply is its own.
    async fn commands(
        &self,
        verb: &'static str,
        route_key: &str,
        cmds: Vec<Vec<Vec<u8>>>,
    ) -> Result<Vec<Result<Reply>>>;
}
