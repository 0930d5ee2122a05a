//! What the `emq` end-to-end tests share: the stores they run against (the test Redis, or a fresh
//! embedded database file), queue names, running `emq` and `emq work`, the checks of exit statuses
//! and error lines, the library's view of a store, and scratch directories that clean up.
#![allow(dead_code)] // each test binary uses a part of it

#[path = "../../../echomq/tests/support/redis_server.rs"]
pub mod redis_server;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use echomq::store::Counts;
use echomq::{JobId, JobRow, QueueName, Store};

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

/// A scratch directory of a test's own, deleted (with all in it) when dropped; it derefs to its
/// path.
pub struct Scratch(tempfile::TempDir);

impl std::ops::Deref for Scratch {
    type Target = Path;

    fn deref(&self) -> &Path {
        self.0.path()
    }
}

/// A fresh scratch directory, `emq-cli-<name>-…` in the temp dir.
pub fn scratch(name: &str) -> Scratch {
    Scratch(
        tempfile::Builder::new()
            .prefix(&format!("emq-cli-{name}-"))
            .tempdir()
            .unwrap(),
    )
}

/// Runs a test body `fn NAME(b: &Backend)` once on each store, as the tests `NAME::redis` and
/// `NAME::embedded`.
#[allow(unused_macros)] // not every test binary has such tests
macro_rules! on_both_stores {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn redis() {
                super::$name(&crate::common::Backend::redis());
            }

            #[test]
            fn embedded() {
                super::$name(&crate::common::Backend::embedded());
            }
        }
    )+};
}
#[allow(unused_imports)]
pub(crate) use on_both_stores;

/// The store a test runs `emq` against: the test Redis, or an embedded database file of the
/// test's own (in a scratch directory deleted with the backend).
pub struct Backend {
    url: String,
    dir: Option<Scratch>,
}

impl Backend {
    /// The test Redis.
    pub fn redis() -> Backend {
        Backend { url: url(), dir: None }
    }

    /// The store at `url` (a server a test started for itself, say).
    pub fn at(url: String) -> Backend {
        Backend { url, dir: None }
    }

    /// A fresh embedded store: `sqlite:` a new file in a scratch directory.
    pub fn embedded() -> Backend {
        let dir = scratch("db");
        let url = format!("sqlite:{}", dir.join("emq.db").display());
        Backend { url, dir: Some(dir) }
    }

    /// The store's URL, as `--url` takes it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// `emq ARGS` against this store (through `EMQ_URL`), stdin not a terminal, output captured.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_emq"));
        c.args(args)
            .env("EMQ_URL", &self.url)
            .env_remove("EMQ_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        c
    }

    /// Runs `emq ARGS` to completion.
    pub fn emq(&self, args: &[&str]) -> Output {
        self.cmd(args).output().unwrap()
    }

    /// Runs `emq ARGS` with `input` on its stdin.
    pub fn emq_with_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self.cmd(args).stdin(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Runs the shell command line `emq ARGS…REST` on a pseudo-terminal (util-linux `script`)
    /// with `input` typed on it; `rest` is shell text put after the quoted arguments (e.g. a
    /// redirection). Returns the exit status and everything the terminal showed.
    pub fn emq_on_a_terminal(&self, args: &[&str], rest: &str, input: &str) -> (Option<i32>, String) {
        let mut line = String::from(env!("CARGO_BIN_EXE_emq"));
        for a in args {
            line.push_str(&format!(" '{a}'"));
        }
        line.push_str(rest);
        let mut child = Command::new("script")
            .args(["-q", "-e", "-c", &line, "/dev/null"])
            .env("EMQ_URL", &self.url)
            .env_remove("EMQ_LOG")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("util-linux `script` runs a command on a pseudo-terminal (apt-get install -y util-linux)");
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(input.as_bytes()).unwrap();
        drop(stdin);
        let o = child.wait_with_output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// Enqueues one job with `emq enqueue` and returns its id.
    #[track_caller]
    pub fn enqueue(&self, q: &str, payload: &str, extra: &[&str]) -> String {
        let mut args = vec!["enqueue", q, payload];
        args.extend_from_slice(extra);
        let o = self.emq(&args);
        assert_exit(&o, 0);
        stdout(&o).trim_end().to_string()
    }

    /// `emq stats QUEUE --json`, parsed.
    #[track_caller]
    pub fn stats(&self, q: &str) -> serde_json::Value {
        let o = self.emq(&["stats", q, "--json"]);
        assert_exit(&o, 0);
        serde_json::from_str(stdout(&o).trim_end()).unwrap()
    }

    /// A usage error: exit 2 and clap's `error:` line on stderr, nothing on stdout.
    #[track_caller]
    pub fn assert_usage_error(&self, args: &[&str]) {
        let o = self.emq(args);
        assert_exit(&o, 2);
        assert!(stderr(&o).starts_with("error:"), "{args:?}: {}", stderr(&o));
        assert!(o.stdout.is_empty(), "{args:?}: {}", stdout(&o));
    }

    /// Starts `emq work QUEUE --exec EXEC --beat 100ms --retry fixed:10ms EXTRA`.
    pub fn work(&self, q: &str, exec: &str, extra: &[&str]) -> Worker {
        self.work_with_env(q, exec, extra, &[])
    }

    /// [`Backend::work`] with `env` added to emq's environment.
    pub fn work_with_env(&self, q: &str, exec: &str, extra: &[&str], env: &[(&str, &str)]) -> Worker {
        let mut args = vec!["work", q, "--exec", exec, "--beat", "100ms", "--retry", "fixed:10ms"];
        args.extend_from_slice(extra);
        let mut cmd = self.cmd(&args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Worker::spawn(cmd)
    }

    /// The library's view of this store.
    pub fn lib(&self) -> Lib {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let store = rt.block_on(echomq::store::open(&self.url)).unwrap();
        Lib {
            rt,
            store: Arc::from(store),
        }
    }
}

/// `emq ARGS` against the test Redis, stdin not a terminal, output captured.
pub fn emq_cmd(args: &[&str]) -> Command {
    Backend::redis().cmd(args)
}

/// Runs `emq ARGS` against the test Redis to completion.
pub fn emq(args: &[&str]) -> Output {
    Backend::redis().emq(args)
}

/// Enqueues one job on the test Redis and returns its id.
#[track_caller]
pub fn enqueue(q: &str, payload: &str, extra: &[&str]) -> String {
    Backend::redis().enqueue(q, payload, extra)
}

/// The library's view of the test Redis.
pub fn lib() -> Lib {
    Backend::redis().lib()
}

/// The stdout of a run, as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The stderr of a run, as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[track_caller]
pub fn assert_exit(o: &Output, code: i32) {
    assert_eq!(
        o.status.code(),
        Some(code),
        "exit status\nstdout: {}\nstderr: {}",
        stdout(o),
        stderr(o)
    );
}

/// Any other error: exit 1 and one `error: …` line on stderr naming `names`, nothing on stdout.
#[track_caller]
pub fn assert_error_naming(o: &Output, names: &str) {
    assert_exit(o, 1);
    let err = stderr(o);
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.contains(names), "the error names {names:?}: {err}");
    assert!(o.stdout.is_empty(), "{}", stdout(o));
}

/// `emq stats --json` of a queue whose `n` jobs all completed: nothing is left waiting, running,
/// dead or cancelled.
#[track_caller]
pub fn assert_all_completed(stats: &serde_json::Value, n: u64) {
    for (field, want) in [
        ("completed", n),
        ("pending", 0),
        ("scheduled", 0),
        ("active", 0),
        ("dead", 0),
        ("cancelled", 0),
    ] {
        assert_eq!(stats[field], want, "{field}: {stats}");
    }
}

/// The library's view of a store: puts jobs in the states a test needs, and reads rows. Test files
/// add the methods they need.
pub struct Lib {
    pub rt: tokio::runtime::Runtime,
    pub store: Arc<dyn Store>,
}

pub fn qn(q: &str) -> QueueName {
    QueueName::new(q).unwrap()
}

pub fn jid(id: &str) -> JobId {
    JobId::parse(id).unwrap()
}

impl Lib {
    pub fn counts(&self, q: &str) -> Counts {
        self.rt.block_on(self.store.counts(&qn(q))).unwrap()
    }

    pub fn job(&self, q: &str, id: &str) -> Option<JobRow> {
        self.rt.block_on(self.store.get(&qn(q), &jid(id))).unwrap()
    }
}

/// Polls `f` until it holds, failing after `within`.
#[track_caller]
pub fn wait_until(within: Duration, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !f() {
        assert!(
            Instant::now() < deadline,
            "timed out after {within:?} waiting for: {what}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `sig` (`TERM`, `INT`, …) to the process `pid` with the `kill` utility.
pub fn signal(pid: u32, sig: &str) {
    let ok = Command::new("kill")
        .arg(format!("-{sig}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok, "kill -{sig} {pid}");
}

/// Whether the process `pid` exists.
pub fn alive(pid: u32) -> bool {
    Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success()
}

/// A file's text, empty when it does not exist.
pub fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// A running `emq work`; killed (SIGKILL) if the test ends without stopping it. Its piped output
/// is drained as it comes (a full pipe would stall a chatty worker), and handed back by
/// [`Worker::wait`].
pub struct Worker {
    child: Option<Child>,
    drains: Vec<std::thread::JoinHandle<Vec<u8>>>,
}

/// Reads `pipe` to its end on a thread of its own.
fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        if let Some(mut pipe) = pipe {
            let _ = pipe.read_to_end(&mut bytes);
        }
        bytes
    })
}

impl Worker {
    /// Starts `cmd` (an `emq work`, or any process the test must not leave behind).
    pub fn spawn(mut cmd: Command) -> Worker {
        let mut child = cmd.spawn().unwrap();
        let drains = vec![drain(child.stdout.take()), drain(child.stderr.take())];
        Worker {
            child: Some(child),
            drains,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn signal(&self, sig: &str) {
        signal(self.pid(), sig);
    }

    /// Whether it has exited (reaped here: `kill -0` still finds an unreaped zombie).
    pub fn exited(&mut self) -> bool {
        self.child.as_mut().unwrap().try_wait().unwrap().is_some()
    }

    /// Waits for the worker to exit (at most `within`) and returns its output.
    pub fn wait(mut self, within: Duration) -> Output {
        let deadline = Instant::now() + within;
        let child = self.child.as_mut().unwrap();
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "emq work did not exit within {within:?}");
            std::thread::sleep(Duration::from_millis(10));
        };
        self.child = None;
        let mut drains = std::mem::take(&mut self.drains).into_iter().map(|d| d.join().unwrap());
        Output {
            status,
            stdout: drains.next().unwrap_or_default(),
            stderr: drains.next().unwrap_or_default(),
        }
    }

    /// SIGTERM, then the exit status must be 0.
    pub fn stop(self) -> Output {
        self.signal("TERM");
        let o = self.wait(Duration::from_secs(10));
        assert_exit(&o, 0);
        o
    }

    /// SIGKILL, and reap it.
    pub fn kill(mut self) {
        let mut child = self.child.take().unwrap();
        child.kill().unwrap();
        let status = child.wait().unwrap();
        assert!(!status.success(), "killed, not exited: {status}");
    }
}

impl Drop for Worker {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}
