//! Schedules end to end, `emq schedule` and `emq work` processes on real clocks, on each store:
//!
//! * an `every 1s` schedule, 4 workers, 60 s, one of them SIGKILLed (and started again) every 5 s:
//!   one job per slot — no slot fired twice, none skipped while a worker is up;
//! * every worker down for 10 s, then back: `skip` fires nothing for the gap, `once` one job,
//!   `all` one per missed slot, and the missed count says so;
//! * remove then add again, and add again while a slot is due, over and over under a running
//!   worker: never two jobs for one slot, and while it is only added again, no slot lost;
//! * a minute-level cron schedule in a zone with daylight saving fires at the minute.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{assert_exit, queue_named, read, scratch, stdout, wait_until, Backend, Worker};

/// The bound of every wait: a hang fails the test, it is not a speed test.
const WITHIN: Duration = Duration::from_secs(120);

fn queue(name: &str) -> String {
    queue_named("schedules", name)
}

type Scenario = fn(&Backend);

/// Every scenario on both stores, side by side: they wait on real clocks (the longest a minute),
/// so they run at once rather than in turn. Each failure is reported by its scenario and store.
#[test]
fn schedules_on_both_stores() {
    let scenarios: [(&str, Scenario); 4] = [
        (
            "an_every_second_schedule_fires_each_slot_once_while_its_workers_are_killed",
            an_every_second_schedule_fires_each_slot_once_while_its_workers_are_killed,
        ),
        (
            "every_worker_down_for_10_s_misses_slots_by_each_schedules_policy",
            every_worker_down_for_10_s_misses_slots_by_each_schedules_policy,
        ),
        (
            "removing_adding_and_changing_a_schedule_under_a_worker_never_fires_a_slot_twice",
            removing_adding_and_changing_a_schedule_under_a_worker_never_fires_a_slot_twice,
        ),
        (
            "a_minute_level_cron_schedule_in_new_york_fires_at_the_minute",
            a_minute_level_cron_schedule_in_new_york_fires_at_the_minute,
        ),
    ];
    let failed: Vec<String> = std::thread::scope(|s| {
        let runs: Vec<_> = scenarios
            .iter()
            .flat_map(|(name, f)| {
                [
                    ("redis", Backend::redis as fn() -> Backend),
                    ("embedded", Backend::embedded),
                ]
                .map(|(store, open)| {
                    let label = format!("{name} on {store}");
                    (label, s.spawn(move || f(&open())))
                })
            })
            .collect();
        runs.into_iter()
            .filter_map(|(label, run)| run.join().is_err().then_some(label))
            .collect()
    });
    assert!(failed.is_empty(), "failed (their panics are printed above): {failed:?}");
}

/// The command each job runs: its id and attempt appended to `runs` (one short `>>` write).
fn recorder(runs: &Path) -> String {
    format!("echo \"$EMQ_JOB_ID $EMQ_ATTEMPTS\" >> '{}'", runs.display())
}

/// The runs recorded: per job id, its attempts in the order they ran.
fn runs(path: &Path) -> BTreeMap<String, Vec<u32>> {
    let mut out: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for line in read(path).lines() {
        let (id, attempt) = line.split_once(' ').unwrap_or_else(|| panic!("a run line: {line:?}"));
        out.entry(id.to_string()).or_default().push(attempt.parse().unwrap());
    }
    out
}

/// The slot (Unix ms) of a fired job's id `sched:<name>:<slot>`, if it is one of `name`'s.
fn slot_of(id: &str, name: &str) -> Option<i64> {
    id.strip_prefix(&format!("sched:{name}:"))?.parse().ok()
}

/// The slots of `name` whose jobs ran, ascending.
fn slots(runs: &BTreeMap<String, Vec<u32>>, name: &str) -> Vec<i64> {
    let mut s: Vec<i64> = runs.keys().filter_map(|id| slot_of(id, name)).collect();
    s.sort_unstable();
    s
}

/// Each job ran as one job: its first attempt at most once (a second job for a slot would start
/// from attempt 1 again; a job run again after its worker died runs a later attempt).
#[track_caller]
fn one_job_per_slot(runs: &BTreeMap<String, Vec<u32>>) {
    for (id, attempts) in runs {
        let firsts = attempts.iter().filter(|a| **a == 1).count();
        assert!(firsts <= 1, "{id} ran as {firsts} jobs: attempts {attempts:?}");
    }
}

/// `emq schedule list QUEUE --json`, by schedule name.
fn listed(b: &Backend, q: &str) -> BTreeMap<String, serde_json::Value> {
    let o = b.emq(&["schedule", "list", q, "--json"]);
    assert_exit(&o, 0);
    stdout(&o)
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (v["name"].as_str().unwrap().to_string(), v)
        })
        .collect()
}

fn work(b: &Backend, q: &str, runs: &Path) -> Worker {
    b.work(q, &recorder(runs), &["--concurrency", "4", "--lease", "2s"])
}

// ---------------------------------------------------------------------------------------------
// workers killed

#[allow(clippy::print_stderr)] // the victims' seed, printed for a rerun of a failure
fn an_every_second_schedule_fires_each_slot_once_while_its_workers_are_killed(b: &Backend) {
    let q = queue("kill");
    let dir = scratch("schedule-kill");
    let file = dir.join("runs");
    assert_exit(
        &b.emq(&["schedule", "add", &q, "tick", "--every", "1s", "--payload", "t"]),
        0,
    );
    let mut workers: Vec<Worker> = (0..4).map(|_| work(b, &q, &file)).collect();
    let began = Instant::now();
    let mut kills = 0;
    // a random victim each time (xorshift from the clock; its start value printed for a rerun)
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(1, |d| d.as_nanos() as u64)
        | 1;
    eprintln!("schedule kill test: victim seed {seed}");
    while began.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_secs(5));
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let victim = workers.remove((seed % workers.len() as u64) as usize);
        victim.kill();
        kills += 1;
        workers.push(work(b, &q, &file));
    }
    // the slots of the last seconds run, then the workers stop
    let end = listed(b, &q)["tick"]["next_fire_ms"].as_i64().unwrap();
    wait_until(WITHIN, "the last slot's job ran", || {
        slots(&runs(&file), "tick").last().is_some_and(|s| *s >= end - 1000)
    });
    for w in workers {
        w.stop();
    }
    let ran = runs(&file);
    one_job_per_slot(&ran);
    let s = slots(&ran, "tick");
    assert!(s.len() >= 55, "a job a second for 60 s: {} slots ran", s.len());
    for pair in s.windows(2) {
        assert_eq!(
            pair[1] - pair[0],
            1000,
            "no slot missing between {} and {}",
            pair[0],
            pair[1]
        );
    }
    let info = &listed(b, &q)["tick"];
    assert_eq!(info["missed"], 0, "a worker was always up: {info}");
    assert_eq!(info["fired"].as_u64().unwrap(), s.len() as u64, "{info}");
    assert!(kills >= 11, "{kills} kills");
}

// ---------------------------------------------------------------------------------------------
// every worker down

fn every_worker_down_for_10_s_misses_slots_by_each_schedules_policy(b: &Backend) {
    let q = queue("outage");
    let dir = scratch("schedule-outage");
    let file = dir.join("runs");
    for policy in ["skip", "once", "all"] {
        let add = [
            "schedule",
            "add",
            &q,
            policy,
            "--every",
            "1s",
            "--misfire",
            policy,
            "--grace",
            "500ms",
        ];
        assert_exit(&b.emq(&add), 0);
    }
    let fired = |n: usize| {
        let ran = runs(&file);
        ["skip", "once", "all"].iter().all(|p| slots(&ran, p).len() >= n)
    };
    let w = work(b, &q, &file);
    wait_until(WITHIN, "3 slots of each schedule ran", || fired(3));
    let down = Instant::now();
    w.stop();
    let before = runs(&file);
    // what was missed before the outage: the slots due before the first worker was up (a slow
    // start under load), counted when it fired its first; no worker moves these counts now
    let missed_before = listed(b, &q);
    std::thread::sleep(Duration::from_secs(10));
    let w = work(b, &q, &file);
    let after = |ran: &BTreeMap<String, Vec<u32>>| {
        ["skip", "once", "all"]
            .iter()
            .all(|p| slots(ran, p).len() >= slots(&before, p).len() + 3)
    };
    wait_until(WITHIN, "3 more slots of each schedule ran", || after(&runs(&file)));
    // no more slots can have been missed than whole seconds passed since the stop
    let most = down.elapsed().as_secs() + 1;
    w.stop();
    let ran = runs(&file);
    one_job_per_slot(&ran);
    let info = listed(b, &q);
    for policy in ["skip", "once", "all"] {
        let s = slots(&ran, policy);
        // the outage: from the last slot run before the stop to the last run after it
        let gap = slots(&before, policy).last().copied().unwrap();
        let late: Vec<i64> = s.iter().filter(|x| **x > gap).copied().collect();
        let last = late[late.len() - 1];
        let missing = ((last - gap) / 1000) as u64 - late.len() as u64;
        let counted = |v: &BTreeMap<String, serde_json::Value>| v[policy]["missed"].as_u64().unwrap();
        let missed = counted(&info) - counted(&missed_before);
        match policy {
            // nothing for the past: every slot missed has no job
            "skip" => assert_eq!(missed, missing, "skip: {s:?} {}", info[policy]),
            // one catch-up job: every slot missed but that one has no job
            "once" => {
                assert_eq!(missed, missing + 1, "once: {s:?} {}", info[policy]);
                assert!(late.len() >= 3, "{late:?}");
            }
            // each missed slot: no gap at all
            _ => assert_eq!(missing, 0, "all: every slot has a job: {s:?}"),
        }
        // 10 s down with a grace of 500 ms: at least the 8 slots wholly inside the outage
        assert!(
            (8..=most).contains(&missed),
            "{policy}: about 10 missed (at most {most}): {} then {}",
            missed_before[policy],
            info[policy]
        );
    }
}

// ---------------------------------------------------------------------------------------------
// edits under a running worker

fn removing_adding_and_changing_a_schedule_under_a_worker_never_fires_a_slot_twice(b: &Backend) {
    let q = queue("edits");
    let dir = scratch("schedule-edits");
    let file = dir.join("runs");
    let add = |payload: &str| {
        assert_exit(
            &b.emq(&["schedule", "add", &q, "e", "--every", "1s", "--payload", payload]),
            0,
        );
    };
    add("0");
    let w = work(b, &q, &file);
    let began = Instant::now();
    let mut i = 0;
    while began.elapsed() < Duration::from_secs(8) {
        i += 1;
        if i % 3 == 0 {
            assert_exit(&b.emq(&["schedule", "remove", &q, "e"]), 0);
        }
        // an upsert (or a fresh add) while a slot is due or about to be
        add(&i.to_string());
        std::thread::sleep(Duration::from_millis(150));
    }
    // then upserts alone: each keeps the slots due and not yet fired, so none is lost
    let wall = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as i64
    };
    let (from, edits) = (wall(), Instant::now());
    while edits.elapsed() < Duration::from_secs(6) {
        i += 1;
        add(&i.to_string());
        std::thread::sleep(Duration::from_millis(150));
    }
    let to = wall();
    std::thread::sleep(Duration::from_secs(2));
    w.stop();
    let ran = runs(&file);
    one_job_per_slot(&ran);
    assert!(slots(&ran, "e").len() >= 5, "the schedule kept firing: {ran:?}");
    let upserted: Vec<i64> = slots(&ran, "e")
        .into_iter()
        .filter(|s| *s > from + 1000 && *s < to - 1000)
        .collect();
    assert!(upserted.len() >= 3, "slots while upserting: {upserted:?}");
    for pair in upserted.windows(2) {
        assert_eq!(pair[1] - pair[0], 1000, "no slot lost to an upsert: {upserted:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// a minute-level cron schedule in a zone with daylight saving

fn a_minute_level_cron_schedule_in_new_york_fires_at_the_minute(b: &Backend) {
    let q = queue("cron");
    let dir = scratch("schedule-cron");
    let file = dir.join("runs");
    let add = [
        "schedule",
        "add",
        &q,
        "m",
        "--cron",
        "* * * * *",
        "--tz",
        "America/New_York",
    ];
    assert_exit(&b.emq(&add), 0);
    let next = &listed(b, &q)["m"];
    let zoned = next["next_fire"].as_str().unwrap();
    assert!(
        zoned.ends_with(" EST") || zoned.ends_with(" EDT"),
        "shown in its zone: {next}"
    );
    assert!(
        next["next_fire_utc"].as_str().unwrap().ends_with(" UTC"),
        "and in UTC: {next}"
    );
    let w = work(b, &q, &file);
    wait_until(WITHIN, "the first minute's job ran", || {
        !slots(&runs(&file), "m").is_empty()
    });
    w.stop();
    let s = slots(&runs(&file), "m");
    assert_eq!(s[0] % 60_000, 0, "fired for a minute's slot: {s:?}");
    assert_eq!(s[0], next["next_fire_ms"].as_i64().unwrap(), "the slot listed next");
}
