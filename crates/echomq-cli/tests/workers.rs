//! Several `emq work` processes, or one running many commands at once, on each store:
//!
//! * three workers on one queue of 3,000 jobs, one SIGKILLed half-way while it runs a command and
//!   started again: every job completes, none is dead, and `emq stats` agrees;
//! * groups with limit 1 never run two jobs of one group at once, while different groups run side
//!   by side;
//! * at concurrency 1 the jobs run in the store's pinned order, round after round: each next claim
//!   reaches the store behind the settle of the job before it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, HashSet};
use std::path::Path;
use std::time::{Duration, Instant};

use common::{
    assert_all_completed, assert_exit, on_both_stores, queue_named, read, scratch, wait_until, Backend, Lib, Worker,
};
use echomq::store::Counts;

/// The bound of every wait: a hang fails the test, it is not a speed test.
const WITHIN: Duration = Duration::from_secs(120);

/// A queue name of this test's own.
fn queue(name: &str) -> String {
    queue_named("workers", name)
}

/// Polls the queue's counts until `done` holds and returns them; fails after [`WITHIN`] showing
/// the last counts.
#[track_caller]
fn wait_for_counts(l: &Lib, q: &str, what: &str, done: impl Fn(&Counts) -> bool) -> Counts {
    let deadline = Instant::now() + WITHIN;
    loop {
        let c = l.counts(q);
        if done(&c) {
            return c;
        }
        assert!(
            Instant::now() < deadline,
            "timed out after {WITHIN:?} waiting for: {what}; counts now {c:?}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// How many processes have `pid` as their parent (Linux: the 4th field of `/proc/*/stat`).
fn children_of(pid: u32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return 0;
    };
    entries
        .flatten()
        .filter(|e| {
            let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
                return false;
            };
            // `pid (comm) state ppid …`: comm may hold spaces and parentheses
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1))
                .and_then(|p| p.parse::<u32>().ok());
            ppid == Some(pid)
        })
        .count()
}

/// Writes a file of `n` payloads, one per line, for `emq enqueue --file`; returns its path.
fn jobs_file(dir: &Path, n: u64) -> String {
    let path = dir.join("jobs.txt");
    let lines: String = (0..n).map(|i| format!("payload {i}\n")).collect();
    std::fs::write(&path, lines).unwrap();
    path.to_str().unwrap().to_string()
}

// ---------------------------------------------------------------------------------------------
// SIGKILL half-way

const JOBS: u64 = 3_000;

on_both_stores!(a_worker_killed_half_way_and_started_again_loses_no_job);

fn a_worker_killed_half_way_and_started_again_loses_no_job(b: &Backend) {
    let q = queue("sigkill");
    let dir = scratch("sigkill");
    assert_exit(&b.emq(&["enqueue", &q, "--file", &jobs_file(&dir, JOBS)]), 0);
    // each run appends its job's id (`>>`: one short write with O_APPEND, never interleaved)
    let runs = dir.join("runs");
    let exec = format!("echo \"$EMQ_JOB_ID\" >> '{}'", runs.display());
    // a short lease: the jobs the killed worker held are reaped 2 s after it died
    let start = || b.work(&q, &exec, &["--concurrency", "4", "--lease", "2s"]);
    let mut workers: Vec<Worker> = (0..3).map(|_| start()).collect();
    let l = b.lib();
    wait_for_counts(&l, &q, "half the jobs completed", |c| c.completed >= JOBS / 2);

    // killed while it runs a command, so it dies holding at least that job's lease
    let victim = workers.remove(0);
    wait_until(WITHIN, "the worker to kill runs a command", || {
        children_of(victim.pid()) > 0
    });
    victim.kill();
    let at_kill = l.counts(&q);
    assert!(
        at_kill.completed < JOBS,
        "killed half-way, not after the end: {at_kill:?}"
    );
    workers.push(start());

    wait_for_counts(&l, &q, "every job settled", |c| c.completed + c.dead >= JOBS);
    for w in workers {
        w.stop();
    }
    // each job completed once, none dead, nothing left: by `emq stats` and by the counters
    assert_all_completed(&b.stats(&q), JOBS);
    let c = l.counts(&q);
    assert!(c.reaped >= 1, "the killed worker's leases were reaped: {c:?}");

    // every job ran (some twice: the killed worker's, run again after the reap)
    let ran = read(&runs);
    let ids: HashSet<&str> = ran.lines().collect();
    assert_eq!(
        ids.len() as u64,
        JOBS,
        "distinct jobs run ({} runs in all)",
        ran.lines().count()
    );
    assert!(
        ids.iter().all(|id| id.parse::<u64>().is_ok()),
        "every line an id: {ids:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// a killed worker's commands die with it

/// The fields of `/proc/PID/stat` after the command name: state, ppid, pgrp, …; `None` once the
/// process is gone.
fn proc_stat(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // `pid (comm) state ppid pgrp …`: comm may hold spaces and parentheses
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// The live processes of the process group `pgid` (a zombie, dead and not yet reaped, is not).
fn group_members(pgid: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        panic!("/proc is needed to list a process group (Linux)");
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| proc_stat(*pid).is_some_and(|f| f[0] != "Z" && f[2].parse::<u32>().ok() == Some(pgid)))
        .collect()
}

/// SIGKILLs what is left of the group `pgid` (a failed test must not leave sleepers behind).
fn kill_group(pgid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", "--", &format!("-{pgid}")])
        .stderr(std::process::Stdio::null())
        .status();
}

on_both_stores!(a_worker_killed_by_sigkill_takes_its_commands_pipelines_and_background_subshells_with_it);

/// A command with a pipeline and a background subshell, all long sleepers; its worker gets SIGKILL
/// (it runs no code of its own on the way out). Within 5 s nothing of the command's process group
/// is left running: not the shell, the pipeline's members, the subshell nor its child.
fn a_worker_killed_by_sigkill_takes_its_commands_pipelines_and_background_subshells_with_it(b: &Backend) {
    let q = queue("sigkill-group");
    let dir = scratch("sigkill-group");
    assert_exit(&b.emq(&["enqueue", &q, "x"]), 0);
    let shell = dir.join("sh.pid");
    let exec = format!(
        "echo $$ > '{p}'; (sleep 120; echo late >> '{d}/late') & sleep 120 | cat; echo late >> '{d}/late'",
        d = dir.display(),
        p = shell.display()
    );
    let w = b.work(&q, &exec, &[]);
    wait_until(WITHIN, "the command started", || !read(&shell).trim().is_empty());
    let sh: u32 = read(&shell).trim().parse().unwrap();
    let pgid: u32 = proc_stat(sh).unwrap()[2].parse().unwrap();
    // the shell, the subshell and its sleep, the pipeline's sleep and cat
    wait_until(WITHIN, "the pipeline and the subshell running", || {
        group_members(pgid).len() >= 5
    });
    w.kill();
    let deadline = Instant::now() + Duration::from_secs(5);
    while !group_members(pgid).is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let left = group_members(pgid);
    kill_group(pgid);
    assert!(
        left.is_empty(),
        "still running 5 s after the worker's SIGKILL: {left:?}"
    );
    assert_eq!(read(&dir.join("late")), "", "nothing of the command ran on");
}

on_both_stores!(a_command_never_runs_on_a_payload_its_dying_worker_did_not_fully_deliver);

/// An 8 MiB payload, a command that reads it only after a pause: the worker dies (SIGKILL) while
/// the payload is on its way. No command may run on what arrived of it (a cut payload looks like a
/// shorter one, an empty payload like none); the job's next run, by another worker once the lease
/// lapses, reads all of it.
fn a_command_never_runs_on_a_payload_its_dying_worker_did_not_fully_deliver(b: &Backend) {
    const SIZE: usize = 8 << 20;
    let q = queue("cut-payload");
    let dir = scratch("cut-payload");
    let l = b.lib();
    l.rt.block_on(
        l.store
            .enqueue(&common::qn(&q), &[echomq::NewJob::new(vec![b'p'; SIZE])]),
    )
    .unwrap();
    let started = dir.join("started");
    let exec = format!(
        "echo $EMQ_ATTEMPTS >> '{s}'; sleep 1; wc -c | tr -d ' ' >> '{d}/sizes'",
        s = started.display(),
        d = dir.display()
    );
    let w = b.work(&q, &exec, &["--lease", "1s"]);
    wait_until(WITHIN, "the command started", || !read(&started).is_empty());
    w.kill();
    // the killed run's pause is over: a run that survived it has read its stdin by now
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(read(&dir.join("sizes")), "", "a command ran on a cut payload");
    // the default lease: a run of its own that outlived a 1 s lease on a loaded machine (its
    // renewal late) would be taken back and run again, a second full read
    let again = b.work(&q, &exec, &[]);
    wait_for_counts(&l, &q, "the job completed", |c| c.completed == 1);
    again.stop();
    assert_eq!(
        read(&dir.join("sizes")),
        format!("{SIZE}\n"),
        "the next run read all of it"
    );
}

// ---------------------------------------------------------------------------------------------
// groups

const GROUPS: usize = 4;
const PER_GROUP: u64 = 20;

on_both_stores!(groups_with_limit_1_never_run_two_jobs_at_once_but_run_side_by_side);

fn groups_with_limit_1_never_run_two_jobs_at_once_but_run_side_by_side(b: &Backend) {
    let q = queue("groups");
    let dir = scratch("groups");
    let file = jobs_file(&dir, PER_GROUP);
    for g in 0..GROUPS {
        let o = b.emq(&["enqueue", &q, "--file", &file, "--group", &format!("g{g}")]);
        assert_exit(&o, 0);
    }
    // No group limit is set: the default is 1. While a job runs it holds its group's lock, a
    // directory (mkdir fails when it exists: a second job of the group running at once is noted
    // in `overlaps`); as it starts it notes its group and how many groups' locks are held.
    let exec = format!(
        r#"d='{}'
mkdir "$d/lock-$EMQ_GROUP" || echo "$EMQ_GROUP $EMQ_JOB_ID" >> "$d/overlaps"
set -- "$d"/lock-*
echo "$EMQ_GROUP $#" >> "$d/starts"
sleep 0.1
rmdir "$d/lock-$EMQ_GROUP""#,
        dir.display()
    );
    let w = b.work(&q, &exec, &["--concurrency", "8"]);
    let l = b.lib();
    let total = GROUPS as u64 * PER_GROUP;
    wait_for_counts(&l, &q, "every job settled", |c| c.completed + c.dead >= total);
    w.stop();

    assert_eq!(
        read(&dir.join("overlaps")),
        "",
        "two jobs of one group ran at once (group, job id)"
    );
    let starts = read(&dir.join("starts"));
    let mut per_group: BTreeMap<&str, u64> = BTreeMap::new();
    let mut widest = 0;
    for line in starts.lines() {
        let (group, held) = line.split_once(' ').unwrap();
        *per_group.entry(group).or_default() += 1;
        widest = widest.max(held.parse::<usize>().unwrap());
    }
    let want: BTreeMap<String, u64> = (0..GROUPS).map(|g| (format!("g{g}"), PER_GROUP)).collect();
    let got: BTreeMap<String, u64> = per_group.into_iter().map(|(g, n)| (g.to_string(), n)).collect();
    assert_eq!(got, want, "each job ran once, with its group in EMQ_GROUP");
    assert!(
        widest >= 2,
        "groups ran side by side: at most {widest} group(s) ran at once"
    );
    assert_all_completed(&b.stats(&q), total);
}

// ---------------------------------------------------------------------------------------------
// the pinned order at concurrency 1

on_both_stores!(concurrency_1_runs_flat_jobs_and_groups_of_limit_1_in_the_pinned_order);

/// Three flat jobs and three groups of two (limit 1, enqueued after the flat ones) run, at
/// concurrency 1, as `f1 a1 b1 c1 f2 a2 b2 c2 f3`: the ring hands each member one job in turn, and a
/// group is back in the ring only once its job's settle has run. A claim sent before the settle of
/// the job before it would find that group still at its limit and skip it (`… b2 f3 c2`). Three
/// rounds, each a fresh queue and a fresh worker.
fn concurrency_1_runs_flat_jobs_and_groups_of_limit_1_in_the_pinned_order(b: &Backend) {
    for round in 0..3 {
        let q = queue(&format!("pinned-{round}"));
        let dir = scratch(&format!("pinned-{round}"));
        for f in ["f1", "f2", "f3"] {
            assert_exit(&b.emq(&["enqueue", &q, f]), 0);
        }
        for g in ["a", "b", "c"] {
            for n in 1..=2 {
                assert_exit(&b.emq(&["enqueue", &q, &format!("{g}{n}"), "--group", g]), 0);
            }
        }
        let exec = format!(r#"{{ cat; echo; }} >> '{}/order'"#, dir.display());
        let w = b.work(&q, &exec, &["--concurrency", "1"]);
        let l = b.lib();
        wait_for_counts(&l, &q, "all nine jobs completed", |c| c.completed >= 9);
        w.stop();
        let order: Vec<String> = read(&dir.join("order")).lines().map(str::to_string).collect();
        assert_eq!(
            order,
            ["f1", "a1", "b1", "c1", "f2", "a2", "b2", "c2", "f3"],
            "round {round}: the pinned order"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// worker pools by kind

on_both_stores!(work_with_kind_runs_only_its_kinds_and_stats_names_the_kinds_no_worker_runs);

/// `emq work --kind a,''` runs kind `a` and raw jobs only: the `b` job waits untouched (never
/// claimed), counted by kind, and `emq stats` names `b` as a kind no live consumer runs while the
/// worker beats; a worker of `b` then runs it.
fn work_with_kind_runs_only_its_kinds_and_stats_names_the_kinds_no_worker_runs(b: &Backend) {
    let q = queue_named("work", "kinds");
    let a = b.enqueue(&q, "x", &["--kind", "a"]);
    let other = b.enqueue(&q, "y", &["--kind", "b"]);
    let raw = b.enqueue(&q, "z", &[]);
    let w = b.work(&q, "true", &["--kind", "a,"]);
    let l = b.lib();
    wait_for_counts(&l, &q, "a's and the raw job done", |c| c.completed >= 2);
    let table = common::stdout(&b.emq(&["stats", &q]));
    assert!(table.contains("ready_kind[b]=1"), "{table}");
    assert!(table.contains("kinds_with_no_live_consumer=b"), "{table}");
    let json = b.stats(&q);
    assert_eq!(json["ready_by_kind"], serde_json::json!({"b": 1}), "{json}");
    assert_eq!(json["kinds_with_no_live_consumer"], serde_json::json!(["b"]), "{json}");
    assert!(
        table.contains("]=a (raw)\n") || table.contains("]=(raw) a\n"),
        "the worker's kinds: {table}"
    );
    let kinds: Vec<serde_json::Value> = json["consumers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["kinds"].clone())
        .collect();
    assert_eq!(kinds, [serde_json::json!(["", "a"])], "{json}");
    w.stop();
    let waiting = l.job(&q, &other).unwrap();
    assert_eq!(
        (waiting.state, waiting.attempts),
        (echomq::JobState::Pending, 0),
        "never claimed"
    );
    for id in [&a, &raw] {
        assert_eq!(l.job(&q, id).unwrap().state, echomq::JobState::Completed);
    }
    let w = b.work(&q, "true", &["--kind", "b"]);
    wait_for_counts(&l, &q, "b's job done", |c| c.completed >= 3);
    w.stop();
}
