//! End-to-end tests of the operator subcommands of `emq` against a real `redis-server`: job, list,
//! pause, resume, drain, obliterate, retry, remove, promote, cancel, group-limit and
//! `stats --watch` — their output, and every refusal's exit status and error line. Each test has a
//! queue of its own; jobs are put in the states a test needs through the library. The tests under
//! `on_both_stores!` (the refusals and unknown jobs) run on a fresh embedded store too.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::{
    assert_error_naming, assert_exit, emq, emq_cmd, enqueue, jid, lib, on_both_stores, qn, queue_named, stderr, stdout,
    url, Backend, Lib,
};
use std::io::{BufRead, BufReader};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use echomq::store::{Counts, SettleOptions};
use echomq::{ClaimedJob, GroupName, JobState, NewJob};
use serde_json::Value;

/// A queue name of this test's own.
fn queue(name: &str) -> String {
    queue_named("ops", name)
}

/// Success with nothing on stdout and `note` in what stderr says was done.
#[track_caller]
fn assert_done(o: &Output, note: &str) {
    assert_exit(o, 0);
    assert!(o.stdout.is_empty(), "machine output only: {}", stdout(o));
    assert!(stderr(o).contains(note), "stderr says {note:?}: {}", stderr(o));
}

/// stdout's lines.
fn lines(o: &Output) -> Vec<String> {
    stdout(o).lines().map(str::to_string).collect()
}

impl Lib {
    fn enqueue(&self, q: &str, job: NewJob) -> String {
        let replies = self.rt.block_on(self.store.enqueue(&qn(q), &[job])).unwrap();
        replies[0].id().to_string()
    }

    fn genqueue(&self, q: &str, group: &str, n: usize) {
        let jobs: Vec<NewJob> = (0..n).map(|i| NewJob::new(format!("g{i}"))).collect();
        let g = GroupName::new(group).unwrap();
        self.rt.block_on(self.store.genqueue(&qn(q), &g, &jobs)).unwrap();
    }

    fn claim(&self, q: &str, n: u32, lease: Duration) -> Vec<ClaimedJob> {
        self.rt
            .block_on(
                self.store
                    .claim(&qn(q), echomq::store::ClaimRequest::new(n, lease).max_attempts(25)),
            )
            .unwrap()
            .jobs
    }

    fn claim_one(&self, q: &str, lease: Duration) -> ClaimedJob {
        let mut jobs = self.claim(q, 1, lease);
        assert_eq!(jobs.len(), 1, "one job claimed");
        jobs.remove(0)
    }

    /// Completes a claimed job, keeping its row.
    fn complete(&self, q: &str, job: &ClaimedJob, output: Option<&[u8]>) {
        self.rt
            .block_on(self.store.complete(
                &qn(q),
                &echomq::store::Completion::new(job.id.clone(), job.attempts).output(output),
                SettleOptions::default(),
            ))
            .unwrap();
    }

    /// Claims the next job and dead-letters it with `error`; returns its id.
    fn kill_next(&self, q: &str, error: &str) -> String {
        let job = self.claim_one(q, Duration::from_secs(60));
        self.rt
            .block_on(self.store.discard(
                &qn(q),
                &job.id,
                job.attempts,
                &echomq::store::DiscardRequest::new(error),
            ))
            .unwrap();
        job.id.to_string()
    }

    fn cancel_retained(&self, q: &str, id: &str) {
        self.rt
            .block_on(
                self.store
                    .cancel(&qn(q), &jid(id), Some("no longer needed"), SettleOptions::default()),
            )
            .unwrap();
    }
}

/// ms since the epoch, local clock (the store's is the same machine's).
fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// ---------------------------------------------------------------------------------------------
// job

#[test]
fn job_json_prints_every_documented_field_with_times_in_ms() {
    let q = queue("job-json");
    let before = now_ms();
    let id = enqueue(
        &q,
        "hello",
        &[
            "--group",
            "g1",
            "--delay",
            "1h",
            "--max-attempts",
            "7",
            "--kind",
            "send_email",
        ],
    );
    let o = emq(&["job", &q, &id, "--json"]);
    assert_exit(&o, 0);
    assert_eq!(lines(&o).len(), 1, "one line: {}", stdout(&o));
    let v: Value = serde_json::from_str(stdout(&o).trim_end()).unwrap();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    for key in [
        "id",
        "queue",
        "state",
        "attempts",
        "max_attempts",
        "group",
        "kind",
        "payload",
        "run_at",
        "last_error",
        "output",
    ] {
        assert!(keys.contains(&key), "{key} in {v}");
    }
    assert_eq!(v["id"], id.as_str());
    assert_eq!(v["queue"], q.as_str());
    assert_eq!(v["state"], "scheduled");
    assert_eq!(v["attempts"], 0);
    assert_eq!(v["max_attempts"], 7);
    assert_eq!(v["group"], "g1");
    assert_eq!(v["kind"], "send_email");
    assert_eq!(v["payload"], "hello");
    assert_eq!(v["last_error"], Value::Null);
    assert_eq!(v["output"], Value::Null);
    let run_at = v["run_at"].as_u64().unwrap();
    assert!(
        run_at >= before + 3_590_000 && run_at <= now_ms() + 3_610_000,
        "run_at {run_at} is an hour from now in ms"
    );
}

#[test]
fn job_json_prints_payload_base64_when_the_payload_is_not_utf8() {
    let q = queue("job-b64");
    let l = lib();
    let id = l.enqueue(&q, NewJob::new(vec![0xff, 0x00, 0x01, 0xfe]));
    let o = emq(&["job", &q, &id, "--json"]);
    assert_exit(&o, 0);
    let v: Value = serde_json::from_str(stdout(&o).trim_end()).unwrap();
    assert_eq!(v["payload_base64"], "/wAB/g==");
    assert!(v.get("payload").is_none(), "payload_base64 replaces payload: {v}");
    // the readable listing says the same
    let o = emq(&["job", &q, &id]);
    assert_exit(&o, 0);
    assert!(stdout(&o).contains("payload_base64: /wAB/g=="), "{}", stdout(&o));
}

#[test]
fn job_json_shows_a_retained_jobs_output_and_a_dead_jobs_last_error() {
    let q = queue("job-out");
    let l = lib();
    let done = l.enqueue(&q, NewJob::new("a"));
    let job = l.claim_one(&q, Duration::from_secs(60));
    l.complete(&q, &job, Some(b"the result"));
    let dead = l.enqueue(&q, NewJob::new("b"));
    l.kill_next(&q, "boom: it broke");

    let v: Value = serde_json::from_str(stdout(&emq(&["job", &q, &done, "--json"])).trim_end()).unwrap();
    assert_eq!(
        (v["state"].clone(), v["output"].clone()),
        ("completed".into(), "the result".into())
    );
    assert_eq!(v["attempts"], 1);
    let v: Value = serde_json::from_str(stdout(&emq(&["job", &q, &dead, "--json"])).trim_end()).unwrap();
    assert_eq!(v["state"], "dead");
    assert_eq!(v["last_error"], "boom: it broke");
    assert_eq!(v["output"], Value::Null);
}

#[test]
fn job_without_json_prints_one_key_value_line_per_field() {
    let q = queue("job-text");
    let id = enqueue(&q, "line one\nline two", &[]);
    let o = emq(&["job", &q, &id]);
    assert_exit(&o, 0);
    let out = stdout(&o);
    let get = |key: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(&format!("{key}:")).map(|v| v.trim().to_string()))
            .unwrap_or_else(|| panic!("no {key}: line in\n{out}"))
    };
    assert_eq!(get("id"), id);
    assert_eq!(get("queue"), q);
    assert_eq!(get("state"), "pending");
    assert_eq!(get("attempts"), "0");
    assert_eq!(get("group"), "-");
    assert_eq!(get("payload"), "line one\\nline two", "control characters escaped");
    assert_eq!(get("output"), "-");
}

on_both_stores!(job_of_an_unknown_id_exits_1_with_the_documented_line);

fn job_of_an_unknown_id_exits_1_with_the_documented_line(b: &Backend) {
    let q = queue("job-unknown");
    let o = b.emq(&["job", &q, "99999"]);
    assert_exit(&o, 1);
    assert_eq!(stderr(&o), format!("error: job 99999 not found in queue {q}\n"));
    assert!(o.stdout.is_empty());
    assert_error_naming(&b.emq(&["job", &q, "99999", "--json"]), "job 99999 not found");
}

// ---------------------------------------------------------------------------------------------
// list

#[test]
fn list_prints_pending_ids_in_claim_order_up_to_the_limit() {
    let q = queue("list-pending");
    let ids: Vec<String> = (0..5).map(|i| enqueue(&q, &format!("p{i}"), &[])).collect();
    let o = emq(&["list", &q, "--state", "pending"]);
    assert_exit(&o, 0);
    assert_eq!(lines(&o), ids);
    let o = emq(&["list", &q, "--state", "pending", "--limit", "2"]);
    assert_exit(&o, 0);
    assert_eq!(lines(&o), ids[..2]);
    // the claim takes them in the order listed
    let claimed: Vec<String> = lib()
        .claim(&q, 5, Duration::from_secs(60))
        .iter()
        .map(|j| j.id.to_string())
        .collect();
    assert_eq!(claimed, ids);
}

#[test]
fn list_pages_past_one_call_for_a_large_limit() {
    let q = queue("list-pages");
    let l = lib();
    let jobs: Vec<NewJob> = (0..2500).map(|i| NewJob::new(format!("p{i}"))).collect();
    l.rt.block_on(l.store.enqueue(&qn(&q), &jobs)).unwrap();
    let o = emq(&["list", &q, "--state", "pending", "--limit", "2400"]);
    assert_exit(&o, 0);
    let got = lines(&o);
    assert_eq!(got.len(), 2400);
    let want: Vec<String> = (1..=2400).map(|i| i.to_string()).collect();
    assert_eq!(got, want, "in order, no id twice");
    let o = emq(&["list", &q, "--state", "pending", "--limit", "100000"]);
    assert_eq!(lines(&o).len(), 2500);
}

#[test]
fn list_orders_scheduled_jobs_by_due_time() {
    let q = queue("list-scheduled");
    let late = enqueue(&q, "a", &["--delay", "3h"]);
    let soon = enqueue(&q, "b", &["--delay", "1h"]);
    let mid = enqueue(&q, "c", &["--delay", "2h"]);
    enqueue(&q, "ready", &[]);
    let o = emq(&["list", &q, "--state", "scheduled"]);
    assert_exit(&o, 0);
    assert_eq!(lines(&o), [soon, mid, late]);
}

#[test]
fn list_orders_active_jobs_by_lease_deadline() {
    let q = queue("list-active");
    let l = lib();
    for p in ["a", "b", "c"] {
        l.enqueue(&q, NewJob::new(p));
    }
    let long = l.claim_one(&q, Duration::from_secs(300));
    let short = l.claim_one(&q, Duration::from_secs(60));
    let mid = l.claim_one(&q, Duration::from_secs(120));
    let o = emq(&["list", &q, "--state", "active"]);
    assert_exit(&o, 0);
    assert_eq!(
        lines(&o),
        [short.id.to_string(), mid.id.to_string(), long.id.to_string()]
    );
}

#[test]
fn list_orders_dead_jobs_newest_first() {
    let q = queue("list-dead");
    let l = lib();
    for p in ["a", "b", "c"] {
        l.enqueue(&q, NewJob::new(p));
    }
    let mut died = Vec::new();
    for _ in 0..3 {
        died.push(l.kill_next(&q, "boom"));
        // distinct times of death (the dead set is scored in ms)
        std::thread::sleep(Duration::from_millis(3));
    }
    died.reverse();
    let o = emq(&["list", &q, "--state", "dead"]);
    assert_exit(&o, 0);
    assert_eq!(lines(&o), died);
}

#[test]
fn list_shows_retained_completed_and_cancelled_rows_only() {
    let q = queue("list-retained");
    let l = lib();
    for p in ["a", "b", "c", "d"] {
        l.enqueue(&q, NewJob::new(p));
    }
    let first = l.claim_one(&q, Duration::from_secs(60));
    l.complete(&q, &first, None);
    std::thread::sleep(Duration::from_millis(3));
    let second = l.claim_one(&q, Duration::from_secs(60));
    l.complete(&q, &second, None);
    // a completion while the queue keeps no row is not listed
    let unretained = l.claim_one(&q, Duration::from_secs(60));
    let set = |r: echomq::Retention| l.rt.block_on(l.store.set_retention(&qn(&q), &r)).unwrap();
    set(echomq::Retention::off());
    l.rt.block_on(l.store.complete(
        &qn(&q),
        &echomq::store::Completion::new(unretained.id.clone(), unretained.attempts),
        SettleOptions::default(),
    ))
    .unwrap();
    set(echomq::Retention::default());
    let waiting = lines(&emq(&["list", &q, "--state", "pending"]));
    assert_eq!(waiting.len(), 1);
    l.cancel_retained(&q, &waiting[0]);

    let o = emq(&["list", &q, "--state", "completed"]);
    assert_exit(&o, 0);
    assert_eq!(lines(&o), [second.id.to_string(), first.id.to_string()]);
    let o = emq(&["list", &q, "--state", "cancelled"]);
    assert_exit(&o, 0);
    assert_eq!(lines(&o), waiting);
    assert_eq!(l.counts(&q).completed, 3, "three completions counted, two rows kept");
}

#[test]
fn list_json_prints_one_job_object_per_line_as_job_json_does() {
    let q = queue("list-json");
    let a = enqueue(&q, "first", &[]);
    let b = enqueue(&q, "second", &["--group", "g"]);
    let o = emq(&["list", &q, "--state", "pending", "--json"]);
    assert_exit(&o, 0);
    let got = lines(&o);
    assert_eq!(got.len(), 2, "{got:?}");
    for (line, id) in got.iter().zip([&a, &b]) {
        let job = emq(&["job", &q, id, "--json"]);
        assert_eq!(line, stdout(&job).trim_end(), "the same object as `emq job --json`");
    }
    let v: Value = serde_json::from_str(&got[1]).unwrap();
    assert_eq!(
        (v["payload"].clone(), v["group"].clone()),
        ("second".into(), "g".into())
    );
}

#[test]
fn list_of_an_empty_state_prints_nothing_and_exits_0() {
    let q = queue("list-empty");
    let o = emq(&["list", &q, "--state", "dead"]);
    assert_exit(&o, 0);
    assert!(
        o.stdout.is_empty() && o.stderr.is_empty(),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
}

on_both_stores!(list_refuses_a_bad_state_or_limit);

fn list_refuses_a_bad_state_or_limit(b: &Backend) {
    b.assert_usage_error(&["list", "q", "--state", "bogus"]);
    b.assert_usage_error(&["list", "q"]);
    b.assert_usage_error(&["list", "q", "--state", "dead", "--limit", "abc"]);
    b.assert_usage_error(&["list", "q", "--state", "dead", "--limit", "-1"]);
    assert_error_naming(&b.emq(&["list", "q", "--state", "dead", "--limit", "0"]), "limit");
}

// ---------------------------------------------------------------------------------------------
// pause, resume, drain

#[test]
fn pause_stops_claims_and_resume_restarts_them() {
    let q = queue("pause");
    let l = lib();
    enqueue(&q, "x", &[]);
    assert_done(&emq(&["pause", &q]), &format!("paused queue {q}"));
    assert!(l.counts(&q).paused);
    assert!(
        l.claim(&q, 1, Duration::from_secs(60)).is_empty(),
        "a paused queue gives nothing"
    );
    assert_done(&emq(&["resume", &q]), &format!("resumed queue {q}"));
    assert!(!l.counts(&q).paused);
    assert_eq!(l.claim(&q, 1, Duration::from_secs(60)).len(), 1);
}

#[test]
fn drain_drops_ready_and_scheduled_jobs_and_says_how_many() {
    let q = queue("drain");
    let l = lib();
    for i in 0..3 {
        enqueue(&q, &format!("p{i}"), &[]);
    }
    enqueue(&q, "later", &["--delay", "1h"]);
    enqueue(&q, "grouped", &["--group", "g"]);
    let running = l.claim_one(&q, Duration::from_secs(60));
    let o = emq(&["drain", &q]);
    assert_done(&o, &format!("drained 4 jobs from {q}"));
    let c = l.counts(&q);
    assert_eq!((c.pending, c.scheduled, c.active), (0, 0, 1), "the running job stays");
    assert!(l.job(&q, running.id.as_str()).is_some());
}

// ---------------------------------------------------------------------------------------------
// obliterate

#[test]
fn obliterate_refuses_when_stdin_is_not_a_terminal_and_yes_is_absent() {
    let q = queue("obl-refuse");
    let id = enqueue(&q, "x", &[]);
    let o = emq(&["obliterate", &q]);
    assert_error_naming(&o, &q);
    assert!(stderr(&o).contains("--yes"), "says how: {}", stderr(&o));
    assert!(lib().job(&q, &id).is_some(), "nothing deleted");
    let o = emq(&["obliterate", &q, "--force"]);
    assert_error_naming(&o, "--yes");
    assert!(lib().job(&q, &id).is_some(), "nothing deleted");
}

#[test]
fn obliterate_with_yes_deletes_every_job_and_counter() {
    let q = queue("obl-yes");
    let l = lib();
    let ids = [
        enqueue(&q, "a", &[]),
        enqueue(&q, "b", &["--delay", "1h"]),
        enqueue(&q, "c", &[]),
    ];
    l.kill_next(&q, "boom");
    enqueue(&q, "paused", &[]);
    assert_exit(&emq(&["pause", &q]), 0);
    let o = emq(&["obliterate", &q, "--yes"]);
    assert_done(&o, &format!("obliterated queue {q}: 4 jobs deleted"));
    for id in &ids {
        assert!(l.job(&q, id).is_none());
    }
    assert_eq!(l.counts(&q), Counts::default());
    assert!(!l.rt.block_on(l.store.queues()).unwrap().contains(&qn(&q)));
}

#[test]
fn obliterate_with_active_jobs_needs_force_and_names_the_count() {
    let q = queue("obl-active");
    let l = lib();
    for p in ["a", "b", "c"] {
        enqueue(&q, p, &[]);
    }
    l.claim(&q, 2, Duration::from_secs(60));
    let o = emq(&["obliterate", &q, "--yes"]);
    assert_error_naming(&o, "2 active jobs");
    assert!(
        stderr(&o).contains(&q) && stderr(&o).contains("--force"),
        "{}",
        stderr(&o)
    );
    assert_eq!(l.counts(&q).pending, 1, "nothing deleted");
    let o = emq(&["obliterate", &q, "--yes", "--force"]);
    assert_done(&o, &format!("obliterated queue {q}: 3 jobs deleted"));
    assert_eq!(l.counts(&q), Counts::default());
}

/// Runs `emq ARGS` against the test Redis on a pseudo-terminal with `input` typed on it.
fn emq_on_a_terminal(args: &[&str], input: &str) -> (Option<i32>, String) {
    Backend::redis().emq_on_a_terminal(args, "", input)
}

#[test]
fn obliterate_on_a_terminal_shows_the_sizes_and_asks_for_the_queue_name() {
    let q = queue("obl-tty");
    let l = lib();
    let id = enqueue(&q, "a", &[]);
    enqueue(&q, "b", &["--delay", "1h"]);

    let (code, shown) = emq_on_a_terminal(&["obliterate", &q], "no\n");
    assert_eq!(code, Some(1), "{shown}");
    assert!(shown.contains("1 pending, 1 scheduled, 0 active, 0 dead"), "{shown}");
    assert!(shown.contains("not confirmed"), "{shown}");
    assert!(l.job(&q, &id).is_some(), "nothing deleted");

    let (code, shown) = emq_on_a_terminal(&["obliterate", &q], &format!("{q}\n"));
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown.contains(&format!("obliterated queue {q}: 2 jobs deleted")),
        "{shown}"
    );
    assert!(l.job(&q, &id).is_none());
}

// ---------------------------------------------------------------------------------------------
// retry (re-drive)

#[test]
fn retry_redrives_one_dead_job_with_extra_attempts() {
    let q = queue("retry-one");
    let l = lib();
    let id = l.enqueue(&q, NewJob::new("x"));
    l.kill_next(&q, "boom");
    let o = emq(&["retry", &q, &id]);
    assert_done(&o, &format!("job {id}"));
    let job = l.job(&q, &id).unwrap();
    assert_eq!(job.state, JobState::Pending);
    assert_eq!(
        (job.attempts, job.max_attempts),
        (1, Some(4)),
        "attempts kept, 3 more granted"
    );

    l.kill_next(&q, "boom again");
    assert_exit(&emq(&["retry", &q, &id, "--extra", "10"]), 0);
    let job = l.job(&q, &id).unwrap();
    assert_eq!((job.attempts, job.max_attempts), (2, Some(12)));
}

#[test]
fn retry_all_dead_redrives_every_dead_job() {
    let q = queue("retry-all");
    let l = lib();
    for p in ["a", "b", "c", "d"] {
        l.enqueue(&q, NewJob::new(p));
    }
    for _ in 0..3 {
        l.kill_next(&q, "boom");
    }
    let o = emq(&["retry", &q, "--all-dead"]);
    assert_done(&o, &format!("re-drove 3 dead jobs of queue {q}"));
    let c = l.counts(&q);
    assert_eq!((c.dead, c.pending), (0, 4));
    // none left: still a success
    assert_done(&emq(&["retry", &q, "--all-dead"]), "re-drove 0 dead jobs");
}

on_both_stores!(retry_refuses_a_job_that_is_not_dead_an_unknown_job_and_zero_extra);

fn retry_refuses_a_job_that_is_not_dead_an_unknown_job_and_zero_extra(b: &Backend) {
    let q = queue("retry-refuse");
    let id = b.enqueue(&q, "x", &[]);
    let o = b.emq(&["retry", &q, &id]);
    assert_error_naming(&o, &format!("job {id} in queue {q} is not dead (it is pending)"));
    assert_error_naming(
        &b.emq(&["retry", &q, "777"]),
        &format!("job 777 not found in queue {q}"),
    );
    assert_error_naming(&b.emq(&["retry", &q, "--all-dead", "--extra", "0"]), "extra");
    b.assert_usage_error(&["retry", &q]);
    b.assert_usage_error(&["retry", &q, &id, "--all-dead"]);
    b.assert_usage_error(&["retry", &q, &id, "--extra", "many"]);
}

// ---------------------------------------------------------------------------------------------
// remove, promote

on_both_stores!(remove_deletes_a_job_and_a_running_one_only_with_force);

fn remove_deletes_a_job_and_a_running_one_only_with_force(b: &Backend) {
    let q = queue("remove");
    let l = b.lib();
    let waiting = b.enqueue(&q, "a", &[]);
    assert_done(
        &b.emq(&["remove", &q, &waiting]),
        &format!("removed job {waiting} from queue {q}"),
    );
    assert!(l.job(&q, &waiting).is_none());

    let running = b.enqueue(&q, "b", &[]);
    l.claim_one(&q, Duration::from_secs(60));
    let o = b.emq(&["remove", &q, &running]);
    assert_error_naming(&o, &format!("job {running} in queue {q} is active"));
    assert!(stderr(&o).contains("--force"));
    assert!(l.job(&q, &running).is_some());
    assert_exit(&b.emq(&["remove", &q, &running, "--force"]), 0);
    assert!(l.job(&q, &running).is_none());
    assert_eq!(l.counts(&q).active, 0);

    assert_error_naming(
        &b.emq(&["remove", &q, &running]),
        &format!("job {running} not found in queue {q}"),
    );
}

on_both_stores!(promote_makes_a_scheduled_job_ready_now);

fn promote_makes_a_scheduled_job_ready_now(b: &Backend) {
    let q = queue("promote");
    let l = b.lib();
    let id = b.enqueue(&q, "later", &["--delay", "1h"]);
    assert_done(&b.emq(&["promote", &q, &id]), &format!("promoted job {id}"));
    assert_eq!(l.job(&q, &id).unwrap().state, JobState::Pending);
    assert_eq!(l.claim_one(&q, Duration::from_secs(60)).id.as_str(), id);

    let ready = b.enqueue(&q, "now", &[]);
    assert_error_naming(
        &b.emq(&["promote", &q, &ready]),
        &format!("job {ready} in queue {q} is not scheduled (it is pending)"),
    );
    assert_error_naming(
        &b.emq(&["promote", &q, "424242"]),
        &format!("job 424242 not found in queue {q}"),
    );
}

// ---------------------------------------------------------------------------------------------
// cancel

#[test]
fn cancel_of_a_waiting_job_prints_cancelled() {
    let q = queue("cancel-waiting");
    let l = lib();
    let id = enqueue(&q, "x", &[]);
    let later = enqueue(&q, "y", &["--delay", "1h"]);
    for id in [&id, &later] {
        let o = emq(&["cancel", &q, id, "--reason", "not needed"]);
        assert_exit(&o, 0);
        assert_eq!(stdout(&o), "cancelled\n");
    }
    let c = l.counts(&q);
    assert_eq!((c.pending, c.scheduled, c.cancelled), (0, 0, 2));
}

#[test]
fn cancel_of_a_running_job_prints_requested_and_marks_the_row() {
    let q = queue("cancel-running");
    let l = lib();
    let id = enqueue(&q, "x", &[]);
    l.claim_one(&q, Duration::from_secs(60));
    let o = emq(&["cancel", &q, &id, "--reason", "operator said so"]);
    assert_exit(&o, 0);
    assert_eq!(stdout(&o), "requested\n");
    let job = l.job(&q, &id).unwrap();
    assert_eq!(job.state, JobState::Active, "its consumer stops it");
    assert_eq!(job.cancel.as_deref(), Some("operator said so"));
    let v: Value = serde_json::from_str(stdout(&emq(&["job", &q, &id, "--json"])).trim_end()).unwrap();
    assert_eq!(v["cancel"], "operator said so");
}

on_both_stores!(cancel_of_an_unknown_or_finished_job_exits_1_naming_it);

fn cancel_of_an_unknown_or_finished_job_exits_1_naming_it(b: &Backend) {
    let q = queue("cancel-refuse");
    let l = b.lib();
    assert_error_naming(
        &b.emq(&["cancel", &q, "31337"]),
        &format!("job 31337 not found in queue {q}"),
    );
    let dead = l.enqueue(&q, NewJob::new("x"));
    l.kill_next(&q, "boom");
    assert_error_naming(
        &b.emq(&["cancel", &q, &dead]),
        &format!("job {dead} in queue {q} already finished (it is dead)"),
    );
}

// ---------------------------------------------------------------------------------------------
// group-limit

#[test]
fn group_limit_caps_how_many_jobs_of_one_group_run_at_once() {
    let q = queue("glimit");
    let l = lib();
    l.genqueue(&q, "g", 5);
    assert_done(&emq(&["group-limit", &q, "g", "3"]), "group g");
    assert_eq!(l.claim(&q, 10, Duration::from_secs(60)).len(), 3);
}

#[test]
fn group_limit_default_applies_to_groups_without_their_own() {
    let q = queue("glimit-default");
    let l = lib();
    assert_done(&emq(&["group-limit", &q, "--default", "2"]), "at most 2");
    assert_exit(&emq(&["group-limit", &q, "own", "4"]), 0);
    l.genqueue(&q, "a", 5);
    l.genqueue(&q, "b", 5);
    l.genqueue(&q, "own", 5);
    let claimed = l.claim(&q, 20, Duration::from_secs(60));
    let of = |g: &str| {
        claimed
            .iter()
            .filter(|j| j.group.as_ref().map(|x| x.as_str()) == Some(g))
            .count()
    };
    assert_eq!((of("a"), of("b"), of("own")), (2, 2, 4));
}

on_both_stores!(group_limit_refuses_zero_and_bad_shapes);

fn group_limit_refuses_zero_and_bad_shapes(b: &Backend) {
    let q = queue("glimit-refuse");
    // N >= 1: 0 is refused by the store (exit 1), not by the parser
    assert_error_naming(&b.emq(&["group-limit", &q, "g", "0"]), "limit");
    assert_error_naming(&b.emq(&["group-limit", &q, "--default", "0"]), "limit");
    assert_error_naming(&b.emq(&["group-limit", &q, "bad/group", "2"]), "bad/group");
    b.assert_usage_error(&["group-limit", &q]);
    b.assert_usage_error(&["group-limit", &q, "g"]);
    b.assert_usage_error(&["group-limit", &q, "g", "-1"]);
    b.assert_usage_error(&["group-limit", &q, "g", "two"]);
    b.assert_usage_error(&["group-limit", &q, "g", "2", "--default", "3"]);
}

// ---------------------------------------------------------------------------------------------
// every subcommand: names, unreachable store

on_both_stores!(bad_queue_names_and_job_ids_exit_1_naming_the_value);

fn bad_queue_names_and_job_ids_exit_1_naming_the_value(b: &Backend) {
    for args in [
        &["job", "bad queue!", "1"][..],
        &["list", "bad queue!", "--state", "dead"],
        &["pause", "bad queue!"],
        &["resume", "bad queue!"],
        &["drain", "bad queue!"],
        &["obliterate", "bad queue!", "--yes"],
        &["retry", "bad queue!", "--all-dead"],
        &["remove", "bad queue!", "1"],
        &["promote", "bad queue!", "1"],
        &["cancel", "bad queue!", "1"],
        &["group-limit", "bad queue!", "--default", "2"],
        &["stats", "bad queue!", "--watch"],
    ] {
        assert_error_naming(&b.emq(args), "bad queue!");
    }
    for verb in ["job", "retry", "remove", "promote", "cancel"] {
        assert_error_naming(&b.emq(&[verb, "q", "bad id!"]), "bad id!");
    }
}

#[test]
fn an_unreachable_store_exits_1_within_5_s_naming_the_address() {
    for args in [
        &["job", "q", "1"][..],
        &["list", "q", "--state", "pending"],
        &["pause", "q"],
        &["obliterate", "q", "--yes"],
        &["cancel", "q", "1"],
        &["stats", "--watch"],
    ] {
        let started = Instant::now();
        let o = emq_cmd(args).env("EMQ_URL", "redis://127.0.0.1:1").output().unwrap();
        assert!(started.elapsed() < Duration::from_secs(6), "{args:?}");
        assert_error_naming(&o, "127.0.0.1:1");
    }
}

on_both_stores!(missing_arguments_and_unknown_flags_exit_2);

fn missing_arguments_and_unknown_flags_exit_2(b: &Backend) {
    for args in [
        &["job", "q"][..],
        &["job", "q", "1", "--frob"],
        &["pause"],
        &["drain", "q", "extra"],
        &["obliterate"],
        &["remove", "q"],
        &["promote", "q"],
        &["cancel", "q"],
        &["cancel", "q", "1", "--reason"],
    ] {
        b.assert_usage_error(args);
    }
}

// ---------------------------------------------------------------------------------------------
// stats --watch

/// A running `emq stats --watch` whose stdout lines arrive on a channel; killed if not stopped.
struct Watch {
    child: std::process::Child,
    lines: mpsc::Receiver<String>,
}

fn watch(args: &[&str]) -> Watch {
    let mut child = emq_cmd(args).spawn().unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, lines) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    Watch { child, lines }
}

impl Watch {
    #[track_caller]
    fn next_line(&self) -> String {
        self.lines
            .recv_timeout(Duration::from_secs(5))
            .expect("a line within 5 s")
    }

    /// SIGINT (Ctrl-C): exit 0 within a few seconds.
    #[track_caller]
    fn interrupt(mut self) {
        let ok = Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert_eq!(status.code(), Some(0), "Ctrl-C ends the watch with exit 0");
                return;
            }
            assert!(Instant::now() < deadline, "the watch did not stop on Ctrl-C");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn stats_watch_json_prints_lines_every_second_with_rates_and_stops_on_ctrl_c() {
    let q = queue("watch-json");
    let l = lib();
    for p in ["a", "b", "c"] {
        l.enqueue(&q, NewJob::new(p));
    }
    let w = watch(&["stats", &q, "--watch", "--json"]);
    let first: Value = serde_json::from_str(&w.next_line()).unwrap();
    assert_eq!(
        (first["queue"].clone(), first["pending"].clone()),
        (q.as_str().into(), 3.into())
    );
    assert_eq!(first["completed_per_s"], Value::Null, "no rate before the second draw");
    for job in l.claim(&q, 2, Duration::from_secs(60)) {
        l.complete(&q, &job, None);
    }
    // the draw that first sees the two completions shows a rate for them
    let seen = loop {
        let v: Value = serde_json::from_str(&w.next_line()).unwrap();
        if v["completed"] == 2 {
            break v;
        }
        // the two completes are two calls: a draw may fall between them
        if v["completed"] == 0 {
            assert_eq!(v["completed_per_s"], 0.0, "{v}");
        }
    };
    let rate = seen["completed_per_s"].as_f64().unwrap();
    assert!(rate > 0.5 && rate <= 2.5, "2 completions in about a second: {seen}");
    let next: Value = serde_json::from_str(&w.next_line()).unwrap();
    let gap = next["at"].as_u64().unwrap() - seen["at"].as_u64().unwrap();
    assert!((500..=2000).contains(&gap), "one draw per second: {gap} ms");
    w.interrupt();
}

#[test]
fn stats_watch_prints_a_table_block_per_second_when_stdout_is_not_a_terminal() {
    let q = queue("watch-table");
    enqueue(&q, "x", &[]);
    let w = watch(&["stats", &q, "--watch"]);
    for draw in 0..2 {
        let _time = w.next_line();
        let head = w.next_line();
        assert!(head.starts_with("QUEUE") && head.contains("COMPLETED/S"), "{head}");
        let row = w.next_line();
        assert!(row.starts_with(&q), "{row}");
        // the pending job's age (OLDEST), then the first rate
        let age = row.split_whitespace().nth(7).unwrap();
        assert!(
            age.ends_with('s') && age[..age.len() - 1].parse::<u64>().is_ok(),
            "{row}"
        );
        let rate = row.split_whitespace().nth(8).unwrap().to_string();
        if draw == 0 {
            assert_eq!(rate, "-", "no rate before the second draw: {row}");
        } else {
            assert_eq!(rate, "0.0", "{row}");
        }
        assert_eq!(w.next_line(), "", "blocks are separated by an empty line");
    }
    w.interrupt();
}

#[test]
fn stats_watch_on_a_terminal_redraws_in_place() {
    let q = queue("watch-tty");
    enqueue(&q, "x", &[]);
    let mut line = String::from(env!("CARGO_BIN_EXE_emq"));
    line.push_str(&format!(" stats '{q}' --watch"));
    let child = Command::new("timeout")
        .args(["-s", "INT", "3.5", "script", "-q", "-e", "-c", &line, "/dev/null"])
        .env("EMQ_URL", url())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let o = child.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&o.stdout);
    let draws = shown.matches("\x1b[H").count();
    // 3.5 s, less the start of a debug build on a loaded machine: 2 to 4 draws
    assert!(
        (2..=4).contains(&draws),
        "a draw a second, each from the top: {shown:?}"
    );
    assert_eq!(
        shown.matches("\x1b[2J").count(),
        1,
        "the screen is cleared once: {shown:?}"
    );
    assert!(shown.contains("Ctrl-C"), "{shown:?}");
}

on_both_stores!(retention_shows_the_default_and_sets_what_a_queue_keeps);

fn retention_shows_the_default_and_sets_what_a_queue_keeps(b: &Backend) {
    let q = queue("retention");
    let shown = b.emq(&["retention", &q]);
    assert_exit(&shown, 0);
    assert_eq!(stdout(&shown).trim(), "keep=10000 max_age=1day max_output=65536");
    let set = b.emq(&["retention", &q, "--keep", "5", "--max-age", "90s"]);
    assert_done_with_output(&set, "retention set");
    assert_eq!(stdout(&set).trim(), "keep=5 max_age=1m30s max_output=65536");
    let off = b.emq(&["retention", &q, "--off"]);
    assert_eq!(stdout(&off).trim(), "keep=0 max_age=1m30s max_output=65536");
    assert_eq!(
        stdout(&b.emq(&["retention", &q])).trim(),
        "keep=0 max_age=1m30s max_output=65536",
        "stored in the store, not in the process"
    );
    assert_error_naming(&b.emq(&["retention", &q, "--max-age", "0s"]), "max_age");
    b.assert_usage_error(&["retention", &q, "--keep", "-1"]);
    b.assert_usage_error(&["retention", &q, "--keep", "3", "--off"]);
}

/// Exit 0, `note` on stderr (stdout is checked by the caller).
fn assert_done_with_output(o: &Output, note: &str) {
    assert_exit(o, 0);
    assert!(stderr(o).contains(note), "stderr says {note:?}: {}", stderr(o));
}
