//! The embedded store under several processes and under `kill -9`, through the built binaries:
//!
//! * three `emq work` processes on one database file complete 10,000 jobs, each exactly once;
//! * a process enqueuing and settling is `kill -9`ed mid-flight, again and again: every write it
//!   saw acknowledged is in the file, and the file passes `PRAGMA integrity_check`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::print_stderr)]

mod common;

use std::collections::HashSet;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::store::embedded::EmbeddedStore;
use echomq::{JobId, JobState, QueueName, Store};

use common::{assert_all_completed, scratch, Backend, Worker};

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[track_caller]
fn assert_ok(o: &Output, what: &str) {
    assert_eq!(
        o.status.code(),
        Some(0),
        "{what}\nstdout: {}\nstderr: {}",
        text(&o.stdout),
        text(&o.stderr)
    );
}

// ---------------------------------------------------------------------------------------------
// several processes on one file

const JOBS: u64 = 10_000;

#[test]
fn three_emq_work_processes_on_one_file_complete_10000_jobs_each_exactly_once() {
    let b = Backend::embedded();
    let dir = scratch("three-workers");
    let input = dir.join("jobs.txt");
    let mut f = std::io::BufWriter::new(std::fs::File::create(&input).unwrap());
    for i in 0..JOBS {
        writeln!(f, "payload {i}").unwrap();
    }
    f.into_inner().unwrap().sync_all().unwrap();

    let began = Instant::now();
    // The workers start first, on a file none of them has created yet: they open it (and create
    // its schema) at once, then find the jobs as they arrive from another process.
    // `>>` appends with O_APPEND: each job's line is one write, never interleaved with another's.
    // each worker its own file, to show all three took part
    let done_by = |w: usize| dir.join(format!("done-{w}.txt"));
    let workers: Vec<Worker> = (0..3)
        .map(|w| {
            let exec = format!("echo \"$EMQ_JOB_ID\" >> '{}'", done_by(w).display());
            let args = [
                "work",
                "q",
                "--exec",
                &exec,
                "--concurrency",
                "8",
                "--lease",
                "10m",
                "--beat",
                "200ms",
            ];
            Worker::spawn(b.cmd(&args))
        })
        .collect();
    let o = b.emq(&["enqueue", "q", "--file", input.to_str().unwrap()]);
    assert_ok(&o, "emq enqueue --file");
    assert!(o.stdout.is_empty(), "enqueue --file prints no ids: {}", text(&o.stdout));
    let enqueued = began.elapsed();

    // Each job execs its supervisor (`emq supervise`, this debug build: ~5 ms of CPU) and one `sh`
    // (~1 ms): some 60 s on an idle 2-core machine. The bound is for a hang, not a speed test.
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        let s = b.stats("q");
        if s["completed"] == JOBS {
            break;
        }
        assert!(Instant::now() < deadline, "not done within 240 s: {s}");
        std::thread::sleep(Duration::from_millis(250));
    }
    let processed = began.elapsed();
    for w in &workers {
        w.signal("TERM");
    }
    for w in workers {
        let o = w.wait(Duration::from_secs(20));
        assert_ok(&o, "emq work after SIGTERM");
    }
    eprintln!(
        "3 workers: {JOBS} jobs enqueued after {enqueued:?}, all completed after {processed:?} ({:.0} jobs/s)",
        JOBS as f64 / processed.as_secs_f64()
    );

    // every id exactly once: none lost, none run twice
    let mut seen = vec![0u32; JOBS as usize + 1];
    let mut ran = String::new();
    for w in 0..3 {
        let mine = std::fs::read_to_string(done_by(w)).unwrap_or_default();
        assert!(!mine.is_empty(), "worker {w} ran no job");
        ran.push_str(&mine);
    }
    for line in ran.lines() {
        let id: usize = line.parse().unwrap_or_else(|_| panic!("not an id: {line:?}"));
        assert!((1..=JOBS as usize).contains(&id), "an id outside 1..={JOBS}: {id}");
        seen[id] += 1;
    }
    let twice: Vec<usize> = (1..seen.len()).filter(|&i| seen[i] > 1).collect();
    let never: Vec<usize> = (1..seen.len()).filter(|&i| seen[i] == 0).collect();
    assert!(
        twice.is_empty(),
        "{} jobs ran more than once, e.g. {:?}",
        twice.len(),
        &twice[..twice.len().min(10)]
    );
    assert!(
        never.is_empty(),
        "{} jobs never ran, e.g. {:?}",
        never.len(),
        &never[..never.len().min(10)]
    );
    assert_eq!(ran.lines().count() as u64, JOBS);

    // and the stats agree: everything completed, nothing left anywhere else
    assert_all_completed(&b.stats("q"), JOBS);
}

// ---------------------------------------------------------------------------------------------
// the default store

#[test]
fn with_no_url_and_no_emq_url_emq_uses_echomq_db_in_the_current_directory() {
    let dir = scratch("default-store");
    let emq = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_emq"))
            .args(args)
            .current_dir(&*dir)
            .env_remove("EMQ_URL")
            .env_remove("EMQ_LOG")
            .stdin(Stdio::null())
            .output()
            .unwrap()
    };
    let o = emq(&["enqueue", "q", "hello"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "1");
    let file = dir.join("echomq.db");
    assert!(file.is_file(), "{} was created", file.display());
    let o = emq(&["stats", "q", "--json"]);
    let stats: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(stats["pending"], 1, "{stats}");
    // and it is the embedded store's file: the library reads the job from it
    let rt = tokio::runtime::Runtime::new().unwrap();
    let job = rt.block_on(async {
        let store = EmbeddedStore::open(file.to_str().unwrap()).await.unwrap();
        let q = QueueName::new("q").unwrap();
        store.get(&q, &JobId::parse("1").unwrap()).await.unwrap().unwrap()
    });
    assert_eq!((job.state, job.payload), (JobState::Pending, b"hello".to_vec()));
}

// ---------------------------------------------------------------------------------------------
// crash safety

/// Builds the `crash_child` example of the echomq crate (the same profile and target directory as
/// this test) and returns its path. Built for the whole workspace, with the features
/// `cargo test --workspace` resolved: after that run it is already built (a build for the echomq
/// package alone resolves fewer tokio features and would compile tokio, redis and echomq again,
/// in the middle of the tests).
fn crash_child() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    // target/<profile>/deps/embedded-<hash>
    let profile_dir = exe.parent().and_then(Path::parent).unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut build = Command::new(cargo);
    build
        .current_dir(&root)
        .args(["build", "-q", "--workspace", "--example", "crash_child", "--target-dir"])
        .arg(target_dir);
    if profile_dir.file_name().is_some_and(|n| n == "release") {
        build.arg("--release");
    }
    let o = build.output().unwrap();
    assert_ok(&o, "cargo build --example crash_child");
    let bin = profile_dir.join("examples").join("crash_child");
    assert!(bin.exists(), "{} was not built", bin.display());
    bin
}

/// What the child saw acknowledged, over every run.
#[derive(Default)]
struct Acked {
    enqueued: HashSet<String>,
    claimed: HashSet<String>,
    completed: HashSet<String>,
    dead: HashSet<String>,
    /// Claimed jobs whose settle committed but was never reported (the kill came between the
    /// commit and the line): found completed (gone) or dead after a kill, and so ever after.
    unreported_completed: HashSet<String>,
    unreported_dead: HashSet<String>,
}

impl Acked {
    fn settled(&self, id: &str) -> bool {
        [
            &self.completed,
            &self.dead,
            &self.unreported_completed,
            &self.unreported_dead,
        ]
        .iter()
        .any(|s| s.contains(id))
    }
}

/// Runs the child on `db` until it printed at least `lines` lines, `kill -9`s it, and adds every
/// complete line it printed to `acked`.
fn run_and_kill(child: &Path, db: &Path, lines: usize, acked: &mut Acked) {
    let mut proc = Command::new(child)
        .arg(db)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = proc.stdout.take().unwrap();
    let count = Arc::new(AtomicUsize::new(0));
    let reader = {
        let count = count.clone();
        std::thread::spawn(move || {
            let mut out = Vec::new();
            let mut r = BufReader::new(stdout);
            let mut line = String::new();
            // a line cut off by the kill (no newline) was never fully reported: not counted
            while r.read_line(&mut line).unwrap_or(0) > 0 && line.ends_with('\n') {
                out.push(line.trim_end().to_string());
                count.fetch_add(1, Ordering::Relaxed);
                line.clear();
            }
            out
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while count.load(Ordering::Relaxed) < lines {
        if let Some(status) = proc.try_wait().unwrap() {
            let mut err = String::new();
            let _ = std::io::Read::read_to_string(proc.stderr.as_mut().unwrap(), &mut err);
            panic!("the child exited on its own ({status}): {err}");
        }
        assert!(Instant::now() < deadline, "the child printed too little within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
    proc.kill().unwrap(); // SIGKILL
    let status = proc.wait().unwrap();
    assert!(!status.success(), "killed, not exited: {status}");
    let printed = reader.join().unwrap();
    let before = acked.enqueued.len();
    let mut new_ids = 0;
    for line in printed {
        let (tag, id) = line.split_once(' ').unwrap_or_else(|| panic!("a bad line: {line:?}"));
        let fresh = match tag {
            "E" => {
                new_ids += 1;
                acked.enqueued.insert(id.to_string())
            }
            "C" => acked.claimed.insert(id.to_string()),
            "S" => acked.completed.insert(id.to_string()),
            "D" => acked.dead.insert(id.to_string()),
            _ => panic!("a bad line: {line:?}"),
        };
        // an id handed out twice would mean an acknowledged enqueue was lost (its sequence reused)
        assert!(fresh, "{line:?} reported twice");
    }
    assert_eq!(acked.enqueued.len(), before + new_ids);
}

#[test]
fn kill_9_mid_flight_loses_no_acknowledged_enqueue_or_settle_and_the_file_stays_intact() {
    let child = crash_child();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("crash.db");
    let mut acked = Acked::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let queue = QueueName::new("crash").unwrap();
    // each run starts on the file the previous one left behind when it was killed
    for (round, lines) in [3_000, 7_000, 1_500, 5_000].into_iter().enumerate() {
        let began = Instant::now();
        run_and_kill(&child, &db, lines, &mut acked);
        let ran = began.elapsed();

        let conn = rusqlite::Connection::open(&db).unwrap();
        let integrity: Vec<String> = conn
            .prepare("PRAGMA integrity_check")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(integrity, ["ok"], "after kill {round}");
        drop(conn);

        rt.block_on(async {
            let store = EmbeddedStore::open(db.to_str().unwrap()).await.unwrap();
            let get = |id: &str| {
                let id = JobId::parse(id).unwrap();
                let (store, queue) = (&store, &queue);
                async move { store.get(queue, &id).await.unwrap() }
            };
            // An acknowledged enqueue is waiting or running — or, for a job the child had
            // claimed, settled by a write the kill kept it from reporting (at most one call's
            // worth: a complete_many of at most 40).
            let mut unreported = 0;
            let waiting: Vec<String> = acked.enqueued.iter().filter(|id| !acked.settled(id)).cloned().collect();
            for id in &waiting {
                let job = get(id).await;
                match job.as_ref().map(|j| j.state) {
                    Some(JobState::Pending | JobState::Active) => continue,
                    Some(JobState::Completed) if acked.claimed.contains(id) => {
                        acked.unreported_completed.insert(id.clone())
                    }
                    Some(JobState::Dead) if acked.claimed.contains(id) => acked.unreported_dead.insert(id.clone()),
                    None => panic!("acknowledged enqueue {id} lost (kill {round})"),
                    Some(other) => panic!("job {id} is {other:?}, never claimed (kill {round})"),
                };
                unreported += 1;
            }
            assert!(
                unreported <= 40,
                "{unreported} settles unreported at one kill (kill {round})"
            );
            for id in acked.completed.iter().chain(&acked.unreported_completed) {
                // the queue keeps its finished rows by default
                assert_eq!(
                    get(id).await.map(|j| j.state),
                    Some(JobState::Completed),
                    "the completion of {id} lost (kill {round})"
                );
            }
            for id in acked.dead.iter().chain(&acked.unreported_dead) {
                let job = get(id)
                    .await
                    .unwrap_or_else(|| panic!("dead job {id} lost (kill {round})"));
                assert_eq!(job.state, JobState::Dead, "job {id} (kill {round})");
                assert_eq!(job.last_error.as_deref(), Some("discarded"));
            }
            // every settle reported was of a job the child had claimed
            for id in acked.completed.iter().chain(&acked.dead) {
                assert!(acked.claimed.contains(id), "{id} settled, never claimed");
            }
            // The counters moved with the rows: at least what was acknowledged, at most what
            // the child had in flight on top at each kill (a claim of at most 40, a batch of 400).
            let c = store.counts(&queue).await.unwrap();
            let kills = round as u64 + 1;
            let (s, d, e) = (
                (acked.completed.len() + acked.unreported_completed.len()) as u64,
                (acked.dead.len() + acked.unreported_dead.len()) as u64,
                acked.enqueued.len() as u64,
            );
            // a settle of a job whose enqueue was never reported is not counted above
            assert!(
                (s..=s + 40 * kills).contains(&c.completed),
                "completed {} vs {s} acked",
                c.completed
            );
            assert!((d..=d + 40 * kills).contains(&c.dead), "dead {} vs {d} acked", c.dead);
            let rows = c.pending + c.active + c.dead + c.completed;
            assert!(
                (e..=e + 400 * kills).contains(&rows),
                "{rows} jobs in all vs {e} acked enqueues"
            );
            eprintln!(
                "kill {round} after {ran:?}: {e} enqueues, {s} completions, {d} discards acknowledged; \
                 counts {c:?}; integrity ok"
            );
        });
    }
}

// ---------------------------------------------------------------------------------------------
// output

#[test]
fn output_to_a_reader_that_went_away_ends_quietly() {
    // `emq list q --state pending | head -1`: the reader closes the pipe; the tool stops as any
    // Unix tool does, with no panic and no backtrace
    let b = Backend::embedded();
    for i in 0..3 {
        assert_ok(&b.emq(&["enqueue", "q", &format!("p{i}")]), "enqueue");
    }
    let mut child = b.cmd(&["list", "q", "--state", "pending"]).spawn().unwrap();
    drop(child.stdout.take()); // the only reader, closed before the tool writes
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(0), "stderr: {}", text(&o.stderr));
    assert!(!text(&o.stderr).contains("panicked"), "{}", text(&o.stderr));
}
