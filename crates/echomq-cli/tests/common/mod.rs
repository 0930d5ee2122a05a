//! What the `emq` end-to-end tests against Redis share: the server, queue names, running `emq`.
#![allow(dead_code)] // each test binary uses a part of it

#[path = "../../../echomq/tests/support/redis_server.rs"]
mod redis_server;

use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

static URL: OnceLock<String> = OnceLock::new();
/// A counter that makes each test's names its own.
pub static SEQ: AtomicU32 = AtomicU32::new(0);

/// The Redis the tests run against (`EMQ_TEST_REDIS_URL`, else one started for this process).
pub fn url() -> String {
    URL.get_or_init(|| redis_server::url_from_env_or_start("EMQ_TEST_REDIS_URL"))
        .clone()
}

/// A queue name of this test's own, `<prefix>-<name>-<pid>-<n>`.
pub fn queue_named(prefix: &str, name: &str) -> String {
    format!(
        "{prefix}-{name}-{}-{}",
        std::process::id(),
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// `emq ARGS` against the test Redis, stdin not a terminal, output captured.
pub fn emq_cmd(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_emq"));
    c.args(args)
        .env("EMQ_URL", url())
        .env_remove("EMQ_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// Runs `emq ARGS` to completion.
pub fn emq(args: &[&str]) -> Output {
    emq_cmd(args).output().unwrap()
}

/// The stdout of a run, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The stderr of a run, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}
