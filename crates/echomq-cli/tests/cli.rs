//! End-to-end tests of the `emq` binary against a real `redis-server`: enqueue (one, stdin, file,
//! duplicates), stats, `work --exec` (verdicts by exit status, environment, payload on stdin,
//! stderr tail, output, timeout, cancel, lease renewal, graceful and forced stop; its idle traffic
//! against the library consumer's; a store down at its start waited out), `bench` (one JSON line
//! per run, the peers' fields), and the exit statuses and error lines of the global rules (an
//! unreachable store; a store that refuses for good — a password missing or refused, a server that
//! does not speak Redis — ending every command, `work` too, at once). The tests under
//! `on_both_stores!` run on a fresh embedded store too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{
    alive, assert_error_naming, assert_exit, emq, emq_cmd, enqueue, jid, lib, on_both_stores, qn, queue_named, read,
    scratch, stderr, stdout, url, wait_until, Backend, Lib, Worker,
};
use std::process::Output;
use std::time::{Duration, Instant};

use echomq::JobState;
use std::collections::BTreeMap;

/// A queue name of this test's own.
fn queue(name: &str) -> String {
    queue_named("cli", name)
}

/// Runs `emq ARGS` against the test Redis with `input` on its stdin.
fn emq_with_stdin(args: &[&str], input: &[u8]) -> Output {
    Backend::redis().emq_with_stdin(args, input)
}

/// Starts `emq work` against the test Redis.
fn work(q: &str, exec: &str, extra: &[&str]) -> Worker {
    Backend::redis().work(q, exec, extra)
}

impl Lib {
    fn pending_payloads(&self, q: &str) -> Vec<String> {
        let ids = self
            .rt
            .block_on(self.store.list(&qn(q), JobState::Pending, None, 10_000))
            .unwrap()
            .ids;
        ids.iter()
            .map(|id| String::from_utf8(self.job(q, id.as_str()).unwrap().payload).unwrap())
            .collect()
    }

    fn cancel(&self, q: &str, id: &str, reason: &str) {
        self.rt
            .block_on(self.store.cancel(&qn(q), &jid(id), Some(reason), Default::default()))
            .unwrap();
    }
}

/// The completion records of `q` (`--record`): each entry's fields as (name, value) pairs.
fn completion_records(q: &str) -> Vec<Vec<(String, Vec<u8>)>> {
    let client = redis::Client::open(url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let entries: Vec<(String, Vec<Vec<u8>>)> = redis::cmd("XRANGE")
        .arg(format!("emq:{{{q}}}:completions"))
        .arg("-")
        .arg("+")
        .query(&mut con)
        .unwrap();
    entries
        .into_iter()
        .map(|(_, flat)| {
            flat.chunks(2)
                .map(|kv| (String::from_utf8_lossy(&kv[0]).into_owned(), kv[1].clone()))
                .collect()
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// enqueue

#[test]
fn enqueue_prints_the_id_alone_on_stdout() {
    let q = queue("enq-id");
    let o = emq(&["enqueue", &q, "hello"]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    assert!(out.ends_with('\n') && out.lines().count() == 1, "{out:?}");
    let id = out.trim_end();
    assert!(!id.is_empty() && id.bytes().all(|b| b.is_ascii_digit()), "{out:?}");
    let job = lib().job(&q, id).expect("the job exists");
    assert_eq!(job.payload, b"hello");
    assert_eq!(job.state, JobState::Pending);
}

#[test]
fn enqueue_applies_group_delay_and_max_attempts() {
    let q = queue("enq-opts");
    let id = enqueue(&q, "p", &["--group", "g1", "--delay", "1h", "--max-attempts", "7"]);
    let job = lib().job(&q, &id).unwrap();
    assert_eq!(job.state, JobState::Scheduled);
    assert_eq!(job.group.as_ref().map(|g| g.as_str()), Some("g1"));
    assert_eq!(job.max_attempts, Some(7));
}

#[test]
fn a_duplicate_caller_id_prints_the_existing_id_and_duplicate_on_stderr() {
    let q = queue("enq-dup");
    let first = emq(&["enqueue", &q, "one", "--id", "order-17"]);
    assert_exit(&first, 0);
    assert_eq!(stdout(&first), "order-17\n");
    assert!(!stderr(&first).contains("duplicate"), "{}", stderr(&first));
    let again = emq(&["enqueue", &q, "two", "--id", "order-17"]);
    assert_exit(&again, 0);
    assert_eq!(stdout(&again), "order-17\n");
    assert!(stderr(&again).contains("duplicate"), "{}", stderr(&again));
    let l = lib();
    assert_eq!(l.counts(&q).pending, 1);
    assert_eq!(l.job(&q, "order-17").unwrap().payload, b"one");
}

on_both_stores!(a_dedup_key_answers_with_its_holder_by_each_mode);

fn a_dedup_key_answers_with_its_holder_by_each_mode(b: &Backend) {
    let q = queue("enq-dedup");
    let first = b.enqueue(&q, "one", &["--dedup", "order-17"]);
    let again = b.emq(&["enqueue", &q, "two", "--dedup", "order-17"]);
    assert_exit(&again, 0);
    assert_eq!(stdout(&again), format!("{first}\n"), "the holder's id");
    assert!(stderr(&again).contains("deduplicated"), "{}", stderr(&again));
    let l = b.lib();
    assert_eq!(l.counts(&q).pending, 1, "nothing enqueued");
    assert_eq!(l.job(&q, &first).unwrap().payload, b"one");
    // debounce: the waiting job takes the last payload
    let d = b.enqueue(&q, "v1", &["--dedup", "d", "--dedup-mode", "debounce:1h"]);
    let o = b.emq(&["enqueue", &q, "v2", "--dedup", "d", "--dedup-mode", "debounce:1h"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), format!("{d}\n"));
    assert!(stderr(&o).contains("debounced"), "{}", stderr(&o));
    let row = l.job(&q, &d).unwrap();
    assert_eq!((row.state, row.payload), (JobState::Scheduled, b"v2".to_vec()));
    // a window: the key holds whatever its job does
    let w = b.enqueue(&q, "w", &["--dedup", "w", "--dedup-mode", "for:1h"]);
    assert_eq!(b.enqueue(&q, "w2", &["--dedup", "w", "--dedup-mode", "for(1h)"]), w);
    // a bad mode is a usage error, a bad key the library's refusal naming it
    b.assert_usage_error(&["enqueue", &q, "x", "--dedup", "k", "--dedup-mode", "later"]);
    b.assert_usage_error(&["enqueue", &q, "x", "--dedup-mode", "for:1s"]);
    let bad = b.emq(&["enqueue", &q, "x", "--dedup", "a b"]);
    assert_exit(&bad, 1);
    assert_error_naming(&bad, "a b");
}

#[test]
fn payload_dash_reads_one_payload_from_stdin_byte_for_byte() {
    let q = queue("enq-stdin");
    let o = emq_with_stdin(&["enqueue", &q, "-"], b"line one\nline two\n");
    assert_exit(&o, 0);
    let job = lib().job(&q, stdout(&o).trim_end()).unwrap();
    assert_eq!(job.payload, b"line one\nline two\n");
}

#[test]
fn file_enqueues_one_job_per_line_skipping_empty_lines_and_stripping_cr() {
    let q = queue("enq-file");
    let dir = scratch("enq-file");
    let path = dir.join("jobs.txt");
    std::fs::write(&path, b"alpha\r\n\n\r\nbeta\n\ngamma").unwrap();
    let o = emq(&["enqueue", &q, "--file", path.to_str().unwrap()]);
    assert_exit(&o, 0);
    assert!(o.stdout.is_empty(), "{}", stdout(&o));
    assert!(stderr(&o).contains("enqueued 3 jobs"), "{}", stderr(&o));
    assert!(stderr(&o).contains("jobs/s"), "{}", stderr(&o));
    assert_eq!(lib().pending_payloads(&q), ["alpha", "beta", "gamma"]);
}

on_both_stores!(
    skip_skips_the_first_n_lines_of_the_input,
    a_file_failing_part_way_names_the_jobs_done_and_a_resume_command_that_enqueues_exactly_the_rest,
);

fn skip_skips_the_first_n_lines_of_the_input(b: &Backend) {
    let q = queue("enq-skip");
    let dir = scratch("enq-skip");
    let path = dir.join("jobs.txt");
    let file = path.to_str().unwrap();
    // the empty line counts as a line
    std::fs::write(&path, b"a\n\nb\r\nc\nd").unwrap();
    let o = b.emq(&["enqueue", &q, "--file", file, "--skip", "2"]);
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("enqueued 3 jobs"), "{}", stderr(&o));
    assert_eq!(b.lib().pending_payloads(&q), ["b", "c", "d"]);
    // past the end: nothing
    let o = b.emq(&["enqueue", &q, "--file", file, "--skip", "9"]);
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("enqueued 0 jobs"), "{}", stderr(&o));
    let o = b.emq_with_stdin(&["enqueue", &q, "--file", "-", "--skip", "4"], b"a\nb\nc\nd\ne\n");
    assert_exit(&o, 0);
    assert_eq!(b.lib().pending_payloads(&q), ["b", "c", "d", "e"]);
    b.assert_usage_error(&["enqueue", &q, "x", "--skip", "1"]);
    b.assert_usage_error(&["enqueue", &q, "--file", file, "--skip", "-1"]);
}

/// The resume command a failed `--file` run printed (the line after `resume after them with: `),
/// run by a shell as a user would, its `emq` this build's; `credentials` given back in its URL.
fn run_resume(b: &Backend, err: &str, credentials: Option<&str>) -> Output {
    let cmd = err
        .lines()
        .find_map(|l| l.strip_prefix("resume after them with: "))
        .unwrap_or_else(|| panic!("no resume command: {err}"));
    let rest = cmd
        .strip_prefix("emq ")
        .unwrap_or_else(|| panic!("not an emq command: {cmd}"));
    let mut line = format!("'{}' {rest}", env!("CARGO_BIN_EXE_emq"));
    if let Some(c) = credentials {
        line = line.replace("redis://…@", &format!("redis://{c}@"));
    }
    let emq = b.cmd(&[]);
    let mut sh = std::process::Command::new("sh");
    sh.args(["-c", &line]);
    // the environment `emq` gets from the backend
    for (k, v) in emq.get_envs() {
        match v {
            Some(v) => sh.env(k, v),
            None => sh.env_remove(k),
        };
    }
    sh.output().unwrap()
}

/// A line over the store's payload limit fails its batch: the lines before it are enqueued in
/// batches bounded in bytes, so every one of them lands; the error names them and the resume
/// command; once the line is mended, that command enqueues exactly the rest.
fn a_file_failing_part_way_names_the_jobs_done_and_a_resume_command_that_enqueues_exactly_the_rest(b: &Backend) {
    let q = queue("enq-resume");
    let dir = scratch("enq-resume");
    let path = dir.join("my jobs.txt");
    let file = path.to_str().unwrap();
    let big = echomq::store::PAYLOAD_LIMIT_DEFAULT + 1;
    // lines 1..=1500 small (two batches: 1000 jobs, then 500 cut short by the big line's bytes),
    // line 1501 over the limit, then 99 more
    let mut lines: Vec<String> = (1..=1600).map(|i| format!("job-{i}")).collect();
    lines[1500] = "x".repeat(big);
    lines[200] = String::new(); // an empty line is a line, no job
    std::fs::write(&path, lines.join("\n")).unwrap();
    let o = b.emq(&["enqueue", &q, "--file", file, "--group", "g", "--max-attempts", "4"]);
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(
        err.starts_with(&format!(
            "error: enqueued 1499 jobs to queue {q} (through line 1500 of {file}), then failed: "
        )),
        "{err}"
    );
    assert!(err.contains(&big.to_string()), "the cause: {err}");
    let quoted = format!("'{file}'");
    assert!(
        err.contains(&format!(
            "resume after them with: emq enqueue {q} --file {quoted} --group g --max-attempts 4 --skip 1500"
        )),
        "{err}"
    );
    assert_eq!(b.lib().counts(&q).pending, 1499);

    lines[1500] = "mended".into();
    std::fs::write(&path, lines.join("\n")).unwrap();
    let o = run_resume(b, &err, None);
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("enqueued 100 jobs"), "{}", stderr(&o));
    let mut want: Vec<String> = lines.iter().filter(|l| !l.is_empty()).cloned().collect();
    let mut got = b.lib().pending_payloads(&q);
    assert_eq!(got.len(), 1599, "none twice, none missing");
    want.sort();
    got.sort();
    assert_eq!(got, want);
    let row = b.lib().job(&q, "1599").unwrap();
    assert_eq!(row.payload, b"job-1600", "the last job is the last line's");
    assert_eq!(
        (row.group.as_ref().map(|g| g.as_str()), row.max_attempts),
        (Some("g"), Some(4))
    );
}

/// An enqueue refused while the queue is being obliterated registers nothing: no tool lists the
/// queue. The error prints the resume command with the URL's credentials left out, and the
/// password nowhere; with them given back it enqueues every line once the obliterate is over.
#[test]
fn a_file_refused_while_obliterating_lists_no_queue_and_shows_no_password() {
    let q = queue("enq-obliterating");
    let dir = scratch("enq-obliterating");
    let path = dir.join("jobs.txt");
    let file = path.to_str().unwrap();
    std::fs::write(&path, "a\nb\nc\n").unwrap();
    let client = redis::Client::open(url()).unwrap();
    let mut con = client.get_connection().unwrap();
    let mark = format!("emq:{{{q}}}:obliterating");
    let _: () = redis::cmd("SET").arg(&mark).arg(1).query(&mut con).unwrap();
    // the default user takes any password on a server that asks none
    let secret = url().replace("redis://", "redis://default:s3cret-pw@");
    let o = emq_cmd(&["--url", &secret, "enqueue", &q, "--file", file])
        .env_remove("EMQ_URL")
        .output()
        .unwrap();
    assert_exit(&o, 1);
    let err = stderr(&o);
    assert!(!err.contains("s3cret-pw"), "the password shown: {err}");
    assert!(err.contains("enqueued 0 jobs") && err.contains("obliterat"), "{err}");
    assert!(
        err.contains("resume after them with: emq --url 'redis://…@127.0.0.1:"),
        "{err}"
    );
    assert!(err.contains(&format!("enqueue {q} --file {file} --skip 0")), "{err}");
    assert!(err.contains("credentials are left out"), "{err}");
    let l = lib();
    let listed = l.rt.block_on(l.store.queues()).unwrap();
    assert!(!listed.contains(&qn(&q)), "a refused enqueue listed the queue");
    let o = emq(&["stats", "--json"]);
    assert_exit(&o, 0);
    assert!(!stdout(&o).contains(&q), "emq stats lists it: {}", stdout(&o));

    let _: () = redis::cmd("DEL").arg(&mark).query(&mut con).unwrap();
    let o = run_resume(&Backend::redis(), &err, Some("default:s3cret-pw"));
    assert_exit(&o, 0);
    assert_eq!(l.pending_payloads(&q), ["a", "b", "c"]);
    let listed = l.rt.block_on(l.store.queues()).unwrap();
    assert!(listed.contains(&qn(&q)));
}

#[test]
fn file_dash_reads_stdin_in_batches_with_the_options_on_each_job() {
    let q = queue("enq-file-stdin");
    let input: String = (0..2500).map(|i| format!("job-{i}\n")).collect();
    let o = emq_with_stdin(&["enqueue", &q, "--file", "-", "--delay", "1h"], input.as_bytes());
    assert_exit(&o, 0);
    assert!(stderr(&o).contains("enqueued 2500 jobs"), "{}", stderr(&o));
    let c = lib().counts(&q);
    assert_eq!((c.pending, c.scheduled), (0, 2500));
}

#[test]
fn file_shows_a_progress_bar_only_when_stderr_is_a_terminal() {
    let q = queue("enq-bar");
    let dir = scratch("enq-bar");
    let path = dir.join("jobs.txt");
    std::fs::write(&path, (0..3000).map(|i| format!("job-{i}\n")).collect::<String>()).unwrap();
    let file = path.to_str().unwrap();
    let b = Backend::redis();

    // a file on a terminal: a bar over its bytes (with a percentage), then the report
    let (code, shown) = b.emq_on_a_terminal(&["enqueue", &q, "--file", file], "", "");
    assert_eq!(code, Some(0), "{shown}");
    assert!(shown.contains("enqueueing ") && shown.contains('%'), "a bar: {shown:?}");
    assert!(shown.contains("enqueued 3000 jobs to queue"), "{shown:?}");
    // stdin of unknown length, stderr a terminal: a spinner with the count, no percentage
    let (code, shown) = b.emq_on_a_terminal(&["enqueue", &q, "--file", "-"], &format!(" < '{file}'"), "");
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.contains("enqueueing ") && shown.contains(" jobs") && !shown.contains('%'),
        "a spinner: {shown:?}"
    );
    assert!(shown.contains("enqueued 3000 jobs to queue"), "{shown:?}");
    // no terminal: the report alone, one plain line
    let o = emq(&["enqueue", &q, "--file", file]);
    assert_exit(&o, 0);
    let report = stderr(&o);
    assert!(
        report.starts_with(&format!("enqueued 3000 jobs to queue {q} in "))
            && report.ends_with(" jobs/s)\n")
            && report.lines().count() == 1
            && !report.contains(['\r', '\x1b']),
        "{report:?}"
    );
    assert_eq!(lib().counts(&q).pending, 9000);
}

on_both_stores!(
    id_with_file_is_a_usage_error,
    payload_and_file_together_or_neither_are_usage_errors,
    invalid_queue_group_or_id_exits_1_naming_the_value,
    max_attempts_zero_is_refused_by_the_library_with_exit_1,
);

fn id_with_file_is_a_usage_error(b: &Backend) {
    b.assert_usage_error(&["enqueue", "q", "--file", "-", "--id", "abc"]);
}

fn payload_and_file_together_or_neither_are_usage_errors(b: &Backend) {
    b.assert_usage_error(&["enqueue", "q", "x", "--file", "-"]);
    b.assert_usage_error(&["enqueue", "q"]);
}

fn invalid_queue_group_or_id_exits_1_naming_the_value(b: &Backend) {
    assert_error_naming(&b.emq(&["enqueue", "bad queue!", "x"]), "bad queue!");
    assert_error_naming(&b.emq(&["enqueue", "q", "x", "--group", "bad/group"]), "bad/group");
    assert_error_naming(&b.emq(&["enqueue", "q", "x", "--id", "12345"]), "12345");
    assert_error_naming(&b.emq(&["stats", "bad queue!"]), "bad queue!");
    assert_error_naming(&b.emq(&["work", "bad queue!", "--exec", "true"]), "bad queue!");
}

fn max_attempts_zero_is_refused_by_the_library_with_exit_1(b: &Backend) {
    assert_error_naming(
        &b.emq(&["enqueue", &queue("enq-max0"), "x", "--max-attempts", "0"]),
        "max_attempts",
    );
}

// ---------------------------------------------------------------------------------------------
// global rules

on_both_stores!(
    unknown_subcommands_flags_and_bad_values_exit_2,
    values_the_library_refuses_exit_1_naming_the_option,
);

fn unknown_subcommands_flags_and_bad_values_exit_2(b: &Backend) {
    b.assert_usage_error(&["frobnicate"]);
    b.assert_usage_error(&["enqueue", "q", "x", "--frob"]);
    b.assert_usage_error(&["stats", "--frob"]);
    b.assert_usage_error(&["work", "q"]);
    b.assert_usage_error(&["work", "q", "--exec", "true", "--recovery", "bogus"]);
    b.assert_usage_error(&["work", "q", "--exec", "true", "--lease", "abc"]);
    b.assert_usage_error(&["work", "q", "--exec", "true", "--concurrency", "many"]);
    b.assert_usage_error(&["work", "q", "--exec", "true", "--max-stalled", "2"]);
    // a redelivery budget is reap's: the other recoveries count lapses their own way, or not at all
    for recovery in ["stalled", "off"] {
        b.assert_usage_error(&[
            "work",
            "q",
            "--exec",
            "true",
            "--recovery",
            recovery,
            "--max-redeliveries",
            "2",
        ]);
    }
    b.assert_usage_error(&["work", "q", "--exec", "true", "--max-redeliveries", "many"]);
    b.assert_usage_error(&["enqueue", "q", "x", "--delay", "soon"]);
    // a benchmark of nothing measures nothing; --jobs belongs to the workloads that take it
    b.assert_usage_error(&["bench", "enqueue", "--jobs", "0"]);
    b.assert_usage_error(&["bench", "process", "10", "--jobs", "0"]);
    b.assert_usage_error(&["bench", "latency", "--count", "0"]);
    b.assert_usage_error(&["bench", "latency", "--rate", "0"]);
    b.assert_usage_error(&["bench", "idle", "0"]);
    b.assert_usage_error(&["bench", "latency", "--jobs", "10"]);
}

fn values_the_library_refuses_exit_1_naming_the_option(b: &Backend) {
    assert_error_naming(&b.emq(&["work", "q", "--exec", "true", "--lease", "0s"]), "lease");
    assert_error_naming(
        &b.emq(&["work", "q", "--exec", "true", "--concurrency", "0"]),
        "concurrency",
    );
    assert_error_naming(&b.emq(&["work", "q", "--exec", "true", "--beat", "0s"]), "beat");
    assert_error_naming(&b.emq(&["work", "q", "--exec", "true", "--timeout", "0s"]), "timeout");
    assert_error_naming(
        &b.emq(&["work", "q", "--exec", "true", "--max-redeliveries", "0"]),
        "max_redeliveries",
    );
    // a budget of 1 or more runs
    let budgeted = b.emq(&[
        "work",
        "q",
        "--exec",
        "true",
        "--max-redeliveries",
        "2",
        "--ttl",
        "200ms",
    ]);
    assert_exit(&budgeted, 0);
    // a renewed lease renewal cannot keep: a renewal runs every third of it
    let short = b.emq(&["work", "q", "--exec", "true", "--lease", "1ms"]);
    assert_error_naming(&short, "lease");
    assert_error_naming(&short, "at least 1s while leases are renewed");
    // without renewal nothing has to keep it: a short lease runs
    let unrenewed = b.emq(&[
        "work",
        "q",
        "--exec",
        "true",
        "--lease",
        "1ms",
        "--no-locks",
        "--ttl",
        "200ms",
    ]);
    assert_exit(&unrenewed, 0);
}

#[test]
fn an_unreachable_store_exits_1_within_5_s_naming_the_address() {
    // `emq work` waits for the store instead (below)
    for args in [&["enqueue", "q", "x"][..], &["stats", "--json"][..]] {
        let started = Instant::now();
        let o = emq_cmd(args).env("EMQ_URL", "redis://127.0.0.1:1").output().unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(6),
            "{args:?} took {:?}",
            started.elapsed()
        );
        assert_error_naming(&o, "127.0.0.1:1");
    }
    // the flag wins over the environment, after the subcommand too
    let o = emq(&["stats", "--url", "redis://127.0.0.1:1"]);
    assert_error_naming(&o, "127.0.0.1:1");
}

#[test]
fn emq_work_started_while_redis_is_down_waits_for_it_and_then_works() {
    let mut server = common::redis_server::OwnedServer::start(&["--appendonly", "no"]);
    let b = Backend::at(server.url());
    server.kill9();
    let q = queue("startup");
    let mut w = b.work(&q, "cat >/dev/null", &[]);
    // the first rounds fail and back off; the worker stays up through them
    std::thread::sleep(Duration::from_secs(2));
    assert!(!w.exited(), "emq work must wait for a store that is down at start-up");
    server.restart();
    for i in 0..3 {
        b.enqueue(&q, &format!("{i}"), &[]);
    }
    let l = b.lib();
    // the back-off is a few seconds at most by now; generous for a loaded machine
    wait_until(Duration::from_secs(60), "the jobs ran once Redis came up", || {
        l.counts(&q).completed == 3
    });
    let o = w.stop();
    assert!(
        stderr(&o).contains("store unreachable; waiting for it"),
        "it logged that it waits for the store: {}",
        stderr(&o)
    );
}

/// Every command, `emq work` too, ends at once with exit 1 and an error line naming `cause` when
/// the store at `url` refuses it in a way no retry mends.
#[track_caller]
fn every_command_ends_at_once_naming(url: &str, cause: &str) {
    let b = Backend::at(url.to_string());
    for args in [&["enqueue", "q", "x"][..], &["stats", "--json"], &["job", "q", "1"]] {
        let started = Instant::now();
        let o = b.emq(args);
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "{args:?} took {:?}",
            started.elapsed()
        );
        assert_error_naming(&o, cause);
    }
    // a worker's log lines come first; its last line is the error
    let o = Worker::spawn(b.cmd(&["work", "q", "--exec", "true"])).wait(Duration::from_secs(20));
    assert_exit(&o, 1);
    let err = stderr(&o);
    let last = err.trim_end().lines().last().unwrap_or_default();
    assert!(
        last.starts_with("error: ") && last.contains(cause),
        "the error names {cause:?}: {err}"
    );
    assert!(!err.contains("s3cret"), "no password in the output: {err}");
}

#[test]
fn a_server_that_refuses_the_credentials_ends_every_command_at_once_naming_the_cause() {
    let server = common::redis_server::OwnedServer::start(&["--appendonly", "no", "--requirepass", "s3cret"]);
    every_command_ends_at_once_naming(&server.url(), "NOAUTH");
    every_command_ends_at_once_naming(&format!("redis://:wrong@127.0.0.1:{}", server.port), "WRONGPASS");
}

#[test]
fn a_server_that_does_not_speak_redis_ends_every_command_at_once_naming_the_cause() {
    let url = format!("redis://127.0.0.1:{}", common::redis_server::http_server());
    every_command_ends_at_once_naming(&url, "does not speak the Redis protocol");
}

#[test]
fn an_unsupported_url_scheme_exits_1_naming_it() {
    let o = emq(&["--url", "nonsense://x", "stats"]);
    assert_error_naming(&o, "nonsense");
}

#[test]
fn an_embedded_store_that_cannot_be_opened_exits_1_naming_its_path() {
    let dir = scratch("bad-store");
    let path = dir.join("no-such-dir").join("q.db");
    let path = path.to_str().unwrap();
    for url in [format!("sqlite:{path}"), path.to_string()] {
        for args in [
            &["enqueue", "q", "x"][..],
            &["stats", "--json"][..],
            &["work", "q", "--exec", "true"][..],
        ] {
            let o = emq_cmd(args).env("EMQ_URL", &url).output().unwrap();
            assert_error_naming(&o, path);
        }
    }
    // a file that is not a database: refused, named, left as it was
    let text = dir.join("notes.txt");
    std::fs::write(&text, "not a database, and long enough to be read as one's header\n").unwrap();
    let text = text.to_str().unwrap();
    let o = emq(&["--url", text, "stats"]);
    assert_error_naming(&o, text);
    assert_eq!(
        read(std::path::Path::new(text)),
        "not a database, and long enough to be read as one's header\n"
    );
}

#[test]
fn an_embedded_url_takes_synchronous_full_and_refuses_other_options_naming_the_url() {
    let dir = scratch("sync-full");
    let path = dir.join("q.db");
    let path = path.to_str().unwrap();
    let full = format!("sqlite:{path}?synchronous=full");
    let o = emq_cmd(&["enqueue", "q", "x"]).env("EMQ_URL", &full).output().unwrap();
    assert_exit(&o, 0);
    let o = emq_cmd(&["stats", "q", "--json"])
        .env("EMQ_URL", &full)
        .output()
        .unwrap();
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("\"pending\":1"), "{}", stdout(&o));
    for (url, names) in [
        (format!("sqlite:{path}?synchronous=off"), "synchronous=off"),
        (format!("sqlite:{path}?cache=shared"), "cache=shared"),
    ] {
        let o = emq_cmd(&["stats"]).env("EMQ_URL", &url).output().unwrap();
        assert_error_naming(&o, names);
        assert!(stderr(&o).contains(&url), "the URL as given: {}", stderr(&o));
    }
}

#[test]
fn work_help_documents_the_exit_status_table() {
    let o = emq(&["work", "--help"]);
    assert_exit(&o, 0);
    let help = stdout(&o);
    for needle in ["65", "75", "79", "discard", "retry", "cancel", "EMQ_JOB_ID", "130"] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn work_help_says_a_lapsed_lease_uses_an_attempt_and_offers_a_redelivery_budget() {
    let o = emq(&["work", "--help"]);
    assert_exit(&o, 0);
    let help = stdout(&o);
    assert!(
        !help.contains("uncounted"),
        "a lapse is counted against the attempts:\n{help}"
    );
    for needle in [
        "lease expired on the last attempt",
        "cannot loop for ever",
        "--max-redeliveries <N>",
        "lease lapsed N+1 times",
    ] {
        assert!(help.contains(needle), "help lacks {needle:?}:\n{help}");
    }
}

// ---------------------------------------------------------------------------------------------
// stats

#[test]
fn stats_of_a_never_used_queue_prints_zeros_and_exits_0() {
    let q = queue("stats-never");
    let o = emq(&["stats", &q, "--json"]);
    assert_exit(&o, 0);
    let v: serde_json::Value = serde_json::from_str(stdout(&o).trim_end()).unwrap();
    assert_eq!(
        v,
        serde_json::json!({"queue": q, "pending": 0, "scheduled": 0, "active": 0, "dead": 0,
            "completed": 0, "cancelled": 0, "paused": false, "oldest_pending_age_ms": null,
            "ready_by_kind": {}, "kinds_with_no_live_consumer": [], "consumers": []})
    );
}

#[test]
fn stats_without_a_queue_lists_every_queue_one_json_line_each() {
    let (a, b) = (queue("stats-all-a"), queue("stats-all-b"));
    enqueue(&a, "x", &[]);
    enqueue(&b, "x", &[]);
    enqueue(&b, "y", &["--delay", "1h"]);
    let o = emq(&["stats", "--json"]);
    assert_exit(&o, 0);
    let lines: Vec<serde_json::Value> = stdout(&o).lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let find = |q: &str| lines.iter().find(|v| v["queue"] == q).cloned().unwrap();
    assert_eq!(find(&a)["pending"], 1);
    assert_eq!(
        (find(&b)["pending"].clone(), find(&b)["scheduled"].clone()),
        (1.into(), 1.into())
    );
}

#[test]
fn stats_without_json_prints_an_aligned_table() {
    let q = queue("stats-table");
    enqueue(&q, "x", &[]);
    let o = emq(&["stats", &q]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 6, "{out}");
    assert_eq!(lines[2], "priority_aging=1m", "the queue's settings under its table");
    assert_eq!(lines[3], "rate_limit=none", "then its rate limits");
    assert_eq!(lines[4], "ready_kind[(raw)]=1", "then its ready jobs by kind");
    assert_eq!(
        lines[5], "kinds_with_no_live_consumer=(raw)",
        "and those no worker runs"
    );
    assert!(lines[0].starts_with("QUEUE") && lines[0].contains("PENDING"), "{out}");
    assert!(lines[1].starts_with(&q), "{out}");
    // the numbers line up under their headings
    let col = lines[0].find("PENDING").unwrap() + "PENDING".len();
    assert_eq!(&lines[1][col - 1..col], "1", "{out}");
}

// ---------------------------------------------------------------------------------------------
// work

on_both_stores!(enqueue_then_work_then_stats_shows_completed);

fn enqueue_then_work_then_stats_shows_completed(b: &Backend) {
    let q = queue("work-e2e");
    for i in 0..5 {
        b.enqueue(&q, &format!("p{i}"), &[]);
    }
    let w = b.work(&q, "cat >/dev/null", &["--concurrency", "2"]);
    let l = b.lib();
    wait_until(Duration::from_secs(10), "5 completed", || l.counts(&q).completed == 5);
    w.stop();
    let v = b.stats(&q);
    assert_eq!(v["completed"], 5);
    assert_eq!((v["pending"].clone(), v["active"].clone()), (0.into(), 0.into()));
}

on_both_stores!(work_takes_several_queues_and_runs_each_job_once_with_its_queue_in_the_env);

fn work_takes_several_queues_and_runs_each_job_once_with_its_queue_in_the_env(b: &Backend) {
    let dir = scratch("work-queues");
    let log = dir.join("ran");
    let queues: Vec<String> = (0..3).map(|i| queue(&format!("several-{i}"))).collect();
    for q in &queues {
        for i in 0..4 {
            b.enqueue(q, &format!("p{i}"), &[]);
        }
    }
    let exec = format!("echo \"$EMQ_QUEUE $EMQ_JOB_ID\" >> '{}'", log.display());
    let mut args = vec!["work"];
    args.extend(queues.iter().map(String::as_str));
    args.extend(["--exec", &exec, "--beat", "100ms", "--concurrency", "2"]);
    let w = Worker::spawn(b.cmd(&args));
    let l = b.lib();
    wait_until(Duration::from_secs(20), "every queue's 4 jobs completed", || {
        queues.iter().all(|q| l.counts(q).completed == 4)
    });
    w.stop();
    let mut ran: Vec<String> = read(&log).lines().map(str::to_string).collect();
    ran.sort();
    let mut expected: Vec<String> = queues
        .iter()
        .flat_map(|q| (1..=4).map(move |i| format!("{q} {i}")))
        .collect();
    expected.sort();
    assert_eq!(ran, expected, "each job once, under its own queue");
    // a queue named twice is refused before anything runs
    let o = b.emq(&["work", &queues[0], &queues[0], "--exec", "true"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("named twice"), "{}", stderr(&o));
}

#[test]
fn the_command_gets_the_payload_on_stdin_and_its_env_never_the_payload_on_its_command_line() {
    let q = queue("work-env");
    let dir = scratch("work-env");
    let evil = format!("'; touch {0}/pwned; echo \"$(touch {0}/pwned2)\"", dir.display());
    let flat = enqueue(&q, &evil, &[]);
    let grouped = enqueue(&q, "grouped payload", &["--group", "g7"]);
    let exec = format!(
        "{{ echo \"$EMQ_QUEUE|$EMQ_JOB_ID|$EMQ_ATTEMPTS|${{EMQ_GROUP-unset}}\"; cat; }} > {}/$EMQ_JOB_ID.out",
        dir.display()
    );
    // a stray EMQ_GROUP in emq's own environment never reaches a flat job
    let w = Backend::redis().work_with_env(&q, &exec, &[], &[("EMQ_GROUP", "stray")]);
    let l = lib();
    wait_until(Duration::from_secs(10), "2 completed", || l.counts(&q).completed == 2);
    w.stop();
    assert_eq!(
        read(&dir.join(format!("{flat}.out"))),
        format!("{q}|{flat}|1|unset\n{evil}")
    );
    assert_eq!(
        read(&dir.join(format!("{grouped}.out"))),
        format!("{q}|{grouped}|1|g7\ngrouped payload")
    );
    assert!(!dir.join("pwned").exists() && !dir.join("pwned2").exists());
}

#[test]
fn exit_0_completes_with_the_first_64_kib_of_stdout_as_output() {
    let q = queue("work-output");
    enqueue(&q, "small", &[]);
    enqueue(&q, "big", &[]);
    let exec = r#"if [ "$(cat)" = small ]; then printf 'result!'; else head -c 100000 /dev/zero | tr '\0' y; fi"#;
    let w = work(&q, exec, &["--record"]);
    let l = lib();
    wait_until(Duration::from_secs(10), "2 completed", || l.counts(&q).completed == 2);
    w.stop();
    let mut outputs: Vec<Vec<u8>> = completion_records(&q)
        .into_iter()
        .map(|rec| {
            assert!(rec.iter().any(|(k, v)| k == "status" && v == b"completed"), "{rec:?}");
            rec.into_iter().find(|(k, _)| k == "output").map(|(_, v)| v).unwrap()
        })
        .collect();
    outputs.sort_by_key(|o| o.len());
    assert_eq!(outputs[0], b"result!");
    assert_eq!(outputs[1].len(), 64 * 1024);
    assert!(outputs[1].iter().all(|b| *b == b'y'));
}

#[test]
fn a_failing_command_is_retried_then_dead_with_its_stderr_tail_as_last_error() {
    let q = queue("work-fail");
    let id = enqueue(&q, "x", &["--max-attempts", "2"]);
    let dir = scratch("work-fail");
    let exec = format!(
        "echo run >> {}/runs; echo \"noise\"; echo \"boom on attempt $EMQ_ATTEMPTS\" >&2; exit 3",
        dir.display()
    );
    let w = work(&q, &exec, &[]);
    let l = lib();
    wait_until(Duration::from_secs(10), "the job dead", || l.counts(&q).dead == 1);
    w.stop();
    let job = l.job(&q, &id).unwrap();
    assert_eq!(job.state, JobState::Dead);
    assert_eq!(job.attempts, 2);
    assert_eq!(job.last_error.as_deref(), Some("boom on attempt 2"));
    assert_eq!(read(&dir.join("runs")).lines().count(), 2);
}

#[test]
fn the_error_is_the_last_4_kib_of_stderr_or_the_exit_status_when_stderr_is_empty() {
    let q = queue("work-tail");
    let long = enqueue(&q, "long", &["--max-attempts", "1"]);
    let silent = enqueue(&q, "silent", &["--max-attempts", "1"]);
    let exec = r#"if [ "$(cat)" = long ]; then head -c 10000 /dev/zero | tr '\0' x >&2; echo END >&2; exit 1; else exit 4; fi"#;
    let w = work(&q, exec, &[]);
    let l = lib();
    wait_until(Duration::from_secs(10), "2 dead", || l.counts(&q).dead == 2);
    w.stop();
    let err = l.job(&q, &long).unwrap().last_error.unwrap();
    assert!(err.ends_with("xxxEND"), "{}", &err[err.len().saturating_sub(20)..]);
    assert!(err.len() <= 4096 && err.len() > 4000, "{}", err.len());
    assert_eq!(l.job(&q, &silent).unwrap().last_error.as_deref(), Some("exit status 4"));
}

#[test]
fn exit_statuses_choose_the_verdict() {
    let q = queue("work-verdicts");
    let done = enqueue(&q, "0", &[]);
    let discard = enqueue(&q, "65", &[]);
    let later = enqueue(&q, "75", &[]);
    let cancel = enqueue(&q, "79", &[]);
    // 75 reads its delay from the last line of stdout
    let exec = r#"code=$(cat); echo "why $code" >&2; [ "$code" = 75 ] && echo 1h; exit $code"#;
    let w = work(&q, exec, &["--concurrency", "4", "--max-attempts", "5"]);
    let l = lib();
    wait_until(Duration::from_secs(10), "every verdict settled", || {
        let c = l.counts(&q);
        c.completed == 1 && c.dead == 1 && c.scheduled == 1 && c.cancelled == 1
    });
    w.stop();
    assert_eq!(
        l.job(&q, &done).map(|j| j.state),
        Some(JobState::Completed),
        "a completed row is kept (the queue's default retention)"
    );
    let d = l.job(&q, &discard).unwrap();
    assert_eq!((d.state, d.attempts), (JobState::Dead, 1), "discard: dead at once");
    assert_eq!(d.last_error.as_deref(), Some("why 65"));
    let r = l.job(&q, &later).unwrap();
    assert_eq!((r.state, r.attempts), (JobState::Scheduled, 1));
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let due_in = r.run_at.unwrap().saturating_sub(now_ms);
    assert!(due_in > 3_500_000 && due_in <= 3_600_000, "due in {due_in} ms");
    let c = l.job(&q, &cancel).expect("a cancelled row is kept");
    assert_eq!(
        (c.state, c.last_error.as_deref()),
        (JobState::Cancelled, Some("why 79"))
    );
}

#[test]
fn retry_after_without_a_delay_on_stdout_uses_the_retry_policy() {
    let q = queue("work-75");
    let id = enqueue(&q, "x", &["--max-attempts", "3"]);
    let w = work(&q, "exit 75", &[]);
    let l = lib();
    wait_until(Duration::from_secs(10), "dead after 3 attempts", || {
        l.counts(&q).dead == 1
    });
    w.stop();
    assert_eq!(l.job(&q, &id).unwrap().attempts, 3);
}

#[test]
fn exit_76_snoozes_the_job_without_using_an_attempt() {
    let q = queue("work-76");
    let dir = scratch("work-76");
    let id = enqueue(&q, "x", &["--max-attempts", "1"]);
    // snoozes twice (the delay on stdout's last line), then completes: its one attempt is enough
    let exec = format!(
        "n=$(cat {0}/runs 2>/dev/null || echo 0); n=$((n+1)); echo $n > {0}/runs; \
         if [ $n -le 2 ]; then echo 20ms; exit 76; fi; exit 0",
        dir.display()
    );
    let w = work(&q, &exec, &[]);
    let l = lib();
    wait_until(Duration::from_secs(10), "completed after two snoozes", || {
        l.counts(&q).completed == 1
    });
    w.stop();
    assert_eq!(std::fs::read_to_string(dir.join("runs")).unwrap().trim(), "3");
    assert!(l.job(&q, &id).is_none_or(|j| j.state == JobState::Completed));
}

#[test]
fn work_retries_on_the_retry_policy_it_is_given_and_a_job_keeps_its_own() {
    let q = queue("work-retry-policy");
    let l = lib();
    // the worker's curve: 10 ms, 20 ms, … — dead after 3 attempts quickly
    let own = enqueue(&q, "own", &["--max-attempts", "2", "--retry", "fixed:1h"]);
    let plain = enqueue(&q, "plain", &["--max-attempts", "3"]);
    assert_eq!(l.job(&q, &own).unwrap().retry.as_deref(), Some("fixed:1h"));
    let w = work(&q, "exit 1", &["--retry", "exp:10ms,x2,max=1s,jitter=equal"]);
    wait_until(
        Duration::from_secs(10),
        "the plain job dead after its 3 attempts",
        || l.job(&q, &plain).is_some_and(|j| j.state == JobState::Dead),
    );
    w.stop();
    let own = l.job(&q, &own).unwrap();
    assert_eq!(
        (own.state, own.attempts),
        (JobState::Scheduled, 1),
        "its own policy: an hour's wait"
    );
    let bad = emq(&["work", &q, "--exec", "true", "--retry", "exp:1s,x0.5"]);
    assert!(!bad.status.success());
    assert!(stderr(&bad).contains("retry"), "{}", stderr(&bad));
}

#[test]
fn enqueue_priority_orders_the_queue_and_priority_aging_shows_and_sets_its_aging() {
    let q = queue("priority");
    let dir = scratch("priority");
    for (p, prio) in [("low", "9"), ("mid", "5"), ("high", "0")] {
        enqueue(&q, p, &["--priority", prio]);
    }
    enqueue(&q, "plain", &[]);
    let bad = emq(&["enqueue", &q, "x", "--priority", "10"]);
    assert!(!bad.status.success(), "priority 10 is refused");
    let shown = emq(&["priority-aging", &q]);
    assert_eq!(stdout(&shown).trim(), "priority_aging=1m");
    let set = emq(&["priority-aging", &q, "0"]);
    assert_eq!(stdout(&set).trim(), "priority_aging=strict");
    let stats = emq(&["stats", &q]);
    assert!(stdout(&stats).contains("priority_aging=strict"), "{}", stdout(&stats));
    let w = work(
        &q,
        &format!("cat >> {}/order; echo >> {}/order", dir.display(), dir.display()),
        &[],
    );
    let l = lib();
    wait_until(Duration::from_secs(10), "all four ran", || l.counts(&q).completed == 4);
    w.stop();
    let order = std::fs::read_to_string(dir.join("order")).unwrap();
    assert_eq!(order.lines().collect::<Vec<_>>(), ["high", "plain", "mid", "low"]);
}

#[test]
fn rate_limit_shows_sets_and_removes_limits_and_a_worker_keeps_to_them() {
    let q = queue("rate-limit");
    let dir = scratch("rate-limit");
    assert_eq!(stdout(&emq(&["rate-limit", &q])).trim(), "rate_limit=none");
    let set = emq(&["rate-limit", &q, "1000/1s", "--burst", "50"]);
    assert!(set.status.success(), "{}", stderr(&set));
    assert_eq!(stdout(&set).trim(), "rate_limit=1000/1s burst 50 next=now");
    emq(&["rate-limit", &q, "--group-default", "100/1m"]);
    // one start per 200 ms for the group g
    let g = emq(&["rate-limit", &q, "--group", "g", "5/s"]);
    assert!(
        stdout(&g).contains("rate_limit_group[g]=5/1s next=now"),
        "{}",
        stdout(&g)
    );
    let stats = stdout(&emq(&["stats", &q]));
    for line in [
        "rate_limit=1000/1s burst 50",
        "rate_limit_group_default=100/1m",
        "rate_limit_group[g]=5/1s",
    ] {
        assert!(stats.contains(line), "{line} in {stats}");
    }
    for bad in [vec!["0/1s"], vec!["200/1x"], vec!["--burst", "2"], vec!["--group", "g"]] {
        let o = emq(&[&["rate-limit", q.as_str()], bad.as_slice()].concat());
        assert!(!o.status.success(), "{bad:?} is refused");
    }
    for i in 0..4 {
        enqueue(&q, &format!("g{i}"), &["--group", "g"]);
    }
    let w = work(
        &q,
        &format!("date +%s%N >> {}/starts", dir.display()),
        &["--concurrency", "4"],
    );
    let l = lib();
    wait_until(Duration::from_secs(10), "the four jobs ran", || {
        l.counts(&q).completed == 4
    });
    w.stop();
    let starts: Vec<u128> = std::fs::read_to_string(dir.join("starts"))
        .unwrap()
        .lines()
        .map(|t| t.parse().unwrap())
        .collect();
    for pair in starts.windows(2) {
        let gap_ms = (pair[1] - pair[0]) / 1_000_000;
        // an interval less the 10 ms a claim may come early, and the commands' own start-up jitter
        // (unlimited, one job at a time, they start a few ms apart)
        assert!(gap_ms >= 150, "starts of g {gap_ms} ms apart: {starts:?}");
    }
    let off = emq(&["rate-limit", &q, "--group", "g", "--off"]);
    assert!(!stdout(&off).contains("rate_limit_group[g]"), "{}", stdout(&off));
    emq(&["rate-limit", &q, "--group-default", "--off"]);
    emq(&["rate-limit", &q, "--off"]);
    assert_eq!(stdout(&emq(&["rate-limit", &q])).trim(), "rate_limit=none");
}

on_both_stores!(sigterm_lets_a_running_job_finish_then_exits_0);

fn sigterm_lets_a_running_job_finish_then_exits_0(b: &Backend) {
    let q = queue("work-sigterm");
    let dir = scratch("work-sigterm");
    b.enqueue(&q, "first", &[]);
    b.enqueue(&q, "second", &[]);
    let exec = format!("touch {0}/started; sleep 1; cat >> {0}/done", dir.display());
    let w = b.work(&q, &exec, &[]);
    wait_until(Duration::from_secs(10), "the command started", || {
        dir.join("started").exists()
    });
    let o = w.stop();
    assert!(stderr(&o).contains("stopping"), "{}", stderr(&o));
    let l = b.lib();
    let c = l.counts(&q);
    assert_eq!(
        (c.completed, c.active, c.pending),
        (1, 0, 1),
        "the running job finished; no new claim"
    );
    assert_eq!(read(&dir.join("done")), "first");
}

#[test]
fn a_second_signal_kills_the_running_commands_and_exits_130() {
    let q = queue("work-sigkill");
    let dir = scratch("work-sigkill");
    enqueue(&q, "x", &[]);
    let exec = format!("sleep 30 & echo $! > {0}/pid; wait", dir.display());
    let w = work(&q, &exec, &[]);
    wait_until(Duration::from_secs(10), "the command started", || {
        read(&dir.join("pid")).ends_with('\n')
    });
    let sleeper: u32 = read(&dir.join("pid")).trim().parse().unwrap();
    w.signal("TERM");
    std::thread::sleep(Duration::from_millis(200));
    assert!(alive(sleeper), "the first signal lets the command run");
    w.signal("INT");
    let o = w.wait(Duration::from_secs(5));
    assert_exit(&o, 130);
    wait_until(Duration::from_secs(5), "the command's group killed", || !alive(sleeper));
    assert_eq!(lib().counts(&q).active, 1, "left unsettled");
}

#[test]
fn timeout_kills_a_hanging_command_and_the_job_errs() {
    let q = queue("work-timeout");
    let id = enqueue(&q, "x", &["--max-attempts", "1"]);
    let started = Instant::now();
    let w = work(&q, "echo waiting >&2; sleep 30", &["--timeout", "300ms"]);
    let l = lib();
    wait_until(Duration::from_secs(10), "the job dead", || l.counts(&q).dead == 1);
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "SIGTERM ended it: {:?}",
        started.elapsed()
    );
    w.stop();
    let err = l.job(&q, &id).unwrap().last_error.unwrap();
    assert_eq!(err, "timed out after 300ms\nwaiting");
}

#[test]
fn timeout_sigkills_a_command_that_ignores_sigterm_5_s_later() {
    let q = queue("work-timeout-kill");
    let id = enqueue(&q, "x", &["--max-attempts", "1"]);
    let started = Instant::now();
    let w = work(&q, "trap '' TERM; sleep 30", &["--timeout", "200ms"]);
    let l = lib();
    wait_until(Duration::from_secs(15), "the job dead", || l.counts(&q).dead == 1);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(10),
        "{took:?}"
    );
    w.stop();
    assert!(l
        .job(&q, &id)
        .unwrap()
        .last_error
        .unwrap()
        .starts_with("timed out after 200ms"));
}

#[test]
fn a_cancel_request_stops_the_running_command_and_the_job_ends_cancelled() {
    let q = queue("work-cancel");
    let dir = scratch("work-cancel");
    let id = enqueue(&q, "x", &[]);
    let exec = format!("touch {}/started; sleep 30", dir.display());
    let w = work(&q, &exec, &[]);
    wait_until(Duration::from_secs(10), "the command started", || {
        dir.join("started").exists()
    });
    let l = lib();
    let started = Instant::now();
    l.cancel(&q, &id, "operator");
    wait_until(Duration::from_secs(5), "the job cancelled", || {
        l.counts(&q).cancelled == 1
    });
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    w.stop();
}

#[test]
fn leases_are_renewed_while_a_command_runs_longer_than_its_lease() {
    let q = queue("work-locks");
    let dir = scratch("work-locks");
    enqueue(&q, "x", &[]);
    let exec = format!("echo run >> {}/runs; sleep 3", dir.display());
    // a second worker would take the job over if its lease lapsed (three leases long: a lease of
    // 1 s leaves a loaded machine room for each renewal)
    let a = work(&q, &exec, &["--lease", "1s"]);
    let b = work(&q, &exec, &["--lease", "1s"]);
    let l = lib();
    wait_until(Duration::from_secs(10), "completed", || l.counts(&q).completed == 1);
    a.stop();
    b.stop();
    assert_eq!(read(&dir.join("runs")).lines().count(), 1, "ran once");
    assert_eq!(l.counts(&q).dead, 0);
}

#[test]
fn ttl_ends_the_worker_with_exit_0() {
    let q = queue("work-ttl");
    let w = work(&q, "true", &["--ttl", "300ms"]);
    let o = w.wait(Duration::from_secs(5));
    assert_exit(&o, 0);
}

/// The commands `port`'s Redis ran (by name, those inside scripts included) while `during` ran,
/// less the `INFO` of the first sample, and the window's length.
fn commands_during(port: u16, during: impl FnOnce()) -> (BTreeMap<String, u64>, f64) {
    use common::redis_server::command_calls;
    let (before, t) = (command_calls(port), Instant::now());
    during();
    let secs = t.elapsed().as_secs_f64();
    let mut sent: BTreeMap<String, u64> = command_calls(port)
        .into_iter()
        .map(|(k, n)| {
            let was = before.get(&k).copied().unwrap_or(0);
            (k, n - was)
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    if let Some(info) = sent.get_mut("info") {
        *info -= 1;
    }
    sent.retain(|_, n| *n > 0);
    (sent, secs)
}

#[test]
fn an_idle_emq_work_sends_nothing_beyond_an_idle_library_consumers_traffic() {
    let server = common::redis_server::OwnedServer::start(&["--appendonly", "no"]);
    let b = Backend::at(server.url());
    // `emq work` with its defaults: beat 5 s, lease 30 s, reap, the locks plane and cancels on
    let q = queue("idle-work");
    let w = Worker::spawn(b.cmd(&["work", &q, "--exec", "true"]));
    std::thread::sleep(Duration::from_secs(2));
    let (work, work_secs) = commands_during(server.port, || std::thread::sleep(Duration::from_secs(10)));
    w.signal("TERM");
    assert_exit(&w.wait(Duration::from_secs(10)), 0);

    // the library's consumer with the same options, on the same server
    let rt = tokio::runtime::Runtime::new().unwrap();
    let store: std::sync::Arc<dyn echomq::Store> = rt.block_on(echomq::store::open(&server.url())).unwrap().into();
    let opts = echomq::ConsumerOptions::default()
        .with_beat(echomq::consumer::BEAT_DEFAULT)
        .with_lease(Duration::from_secs(30))
        .with_recovery(echomq::store::Recovery::Reap)
        .with_concurrency(echomq::consumer::CONCURRENCY_DEFAULT)
        .with_max_attempts(echomq::consumer::MAX_ATTEMPTS_DEFAULT)
        .with_locks(true)
        .with_cancel(true);
    let c = rt
        .block_on(async {
            echomq::Consumer::start(
                store,
                qn(&queue("idle-lib")),
                |_j: echomq::JobContext| async { echomq::Verdict::Done },
                opts,
            )
        })
        .unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let (own, own_secs) = commands_during(server.port, || std::thread::sleep(Duration::from_secs(10)));
    rt.block_on(c.stop(Duration::from_secs(5))).unwrap();

    let rate = |m: &BTreeMap<String, u64>, secs: f64| m.values().sum::<u64>() as f64 / secs;
    let (work_rate, own_rate) = (rate(&work, work_secs), rate(&own, own_secs));
    eprintln!("emq work: {work_rate:.2}/s {work:?}; library consumer: {own_rate:.2}/s {own:?}");
    let extra: Vec<&String> = work.keys().filter(|k| !own.contains_key(*k)).collect();
    assert!(
        extra.is_empty(),
        "emq work sent {extra:?}, which the consumer never sends: {work:?}"
    );
    // the same beat on both: a beat's commands (9, and the registry's 4) of slack for the windows'
    // phase
    assert!(
        work_rate <= own_rate + 1.3 && work_rate <= 2.5,
        "emq work sent {work_rate:.1} commands/s where the library consumer sends {own_rate:.1}"
    );
    assert!(
        work_rate >= 0.5,
        "emq work sent only {work_rate:.1} commands/s: is it running?"
    );
}

on_both_stores!(bench_prints_one_json_line_per_run_with_the_peers_field_names);

/// `emq bench WORKLOAD`'s one line on stdout, parsed, after checking exit 0, `lib`, `version` and
/// `test`, and that every field the peers print for it is there (null only for a Redis figure on
/// the embedded store).
#[track_caller]
fn bench_line(b: &Backend, args: &[&str], test: &str, fields: &[&str], redis_fields: &[&str]) -> serde_json::Value {
    let o = b.emq(args);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 1, "{args:?} printed {out:?}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["lib"], "echomq", "{v}");
    assert_eq!(v["test"], test, "{v}");
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"), "{v}");
    for f in fields {
        assert!(v[f].is_number(), "{args:?}: {f} is {} in {v}", v[f]);
    }
    let on_redis = b.url().starts_with("redis");
    for f in redis_fields {
        if on_redis {
            assert!(v[f].is_number(), "{args:?}: {f} is {} in {v}", v[f]);
        } else {
            assert!(v[f].is_null(), "{args:?}: {f} is {} on the embedded store", v[f]);
        }
    }
    v
}

fn bench_prints_one_json_line_per_run_with_the_peers_field_names(b: &Backend) {
    let v = bench_line(
        b,
        &["bench", "enqueue", "--jobs", "2500"],
        "a_enqueue_bulk",
        &["n", "secs", "jobs_per_s"],
        &["mem_bytes_per_waiting_job", "redis_cmds_per_job", "redis_cpu_s"],
    );
    assert_eq!(v["n"], 2500);
    assert_eq!(v["waiting"], 2500, "every job enqueued waits: {v}");
    if b.url().starts_with("redis") {
        // one EVALSHA per batch of 1,000 plus the registration beside it: well under 4 per job
        let cmds = v["redis_cmds_per_job"].as_f64().unwrap();
        assert!(cmds > 0.0 && cmds <= 4.0, "{v}");
    }

    let v = bench_line(
        b,
        &["bench", "process", "10", "--jobs", "2500"],
        "b_process",
        &["concurrency", "n", "secs", "jobs_per_s", "worker_cpu_pct"],
        &[
            "redis_cpu_s",
            "redis_cpu_pct",
            "redis_cmds_per_job",
            "evalsha_per_job",
            "net_in_bytes_per_job",
        ],
    );
    assert_eq!(
        (v["concurrency"].as_u64(), v["n"].as_u64()),
        (Some(10), Some(2500)),
        "{v}"
    );
    assert!(v["jobs_per_s"].as_f64().unwrap() > 0.0, "{v}");

    let v = bench_line(
        b,
        &["bench", "latency", "--count", "40", "--rate", "400"],
        "c_latency",
        &["n", "p50_ms", "p90_ms", "p99_ms", "max_ms"],
        &[],
    );
    assert_eq!((v["n"].as_u64(), v["received"].as_u64()), (Some(40), Some(40)), "{v}");
    let p = |f: &str| v[f].as_f64().unwrap();
    assert!(
        0.0 < p("p50_ms") && p("p50_ms") <= p("p90_ms") && p("p90_ms") <= p("p99_ms") && p("p99_ms") <= p("max_ms"),
        "percentiles out of order: {v}"
    );

    let v = bench_line(
        b,
        &["bench", "idle", "1"],
        "d_idle",
        &["secs", "worker_cpu_pct"],
        &["redis_cmds_per_s", "redis_cpu_pct"],
    );
    assert!(v["secs"].as_f64().unwrap() >= 1.0, "{v}");
}

/// `emq demo`'s terminal is its progress bar and its summary: no log line per failed job on stderr
/// (the log goes to `--log FILE`), and the failures counted in the summary.
#[test]
fn the_demo_keeps_its_log_off_the_terminal_and_counts_failures_in_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("demo.log");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_emq"))
        .args(["demo", "--jobs", "500", "--log"])
        .arg(&log)
        .current_dir(dir.path())
        .env_remove("EMQ_URL")
        .env_remove("EMQ_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_exit(&o, 0);
    let (out, err) = (stdout(&o), stderr(&o));
    // 500 jobs: 5 poison (dead after 2 attempts), 20 flaky (retried once)
    assert!(
        out.contains(
            "completed 495, dead 5 (poison jobs, 2 attempts each); 30 failed attempts in all, 25 of them retried"
        ),
        "{out}"
    );
    assert!(err.lines().count() <= 3, "the terminal: {err}");
    assert!(!err.contains("poison"), "a failed job's line on the terminal: {err}");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(logged.contains("poison"), "the log file holds the failures: {logged}");
}
