//! The store benchmark on Redis: batch enqueue, claim + complete_many, single
//! completes, and the same for grouped jobs; then `c_floor_row_calls`, the Redis CPU per job of the
//! three row calls claim + complete cannot do without, bare (this Redis's floor, to judge ours by),
//! and `c_floor_enqueue`, the same for a bulk enqueue's row and set writes (with the enqueue rate
//! this Redis's CPU allows at that cost, `ceiling_jobs_per_s`).
//! Prints one JSON line per run and a median line per
//! workload. Redis counts come from `INFO commandstats` / `INFO cpu` / `INFO memory` deltas around
//! the measured part, so commands run inside scripts are counted. The claim workloads also print
//! `redis_sys_us_per_job`, the kernel's share of Redis's CPU (its network system calls).
//!
//!     cargo bench -p echomq --bench redis_store [-- --runs 5 --jobs 100000 --workers 4 --only NAME]
//!
//! Uses `EMQ_BENCH_REDIS_URL` when set (the queue `bench` is obliterated first), else starts a
//! `redis-server` of its own on a free loopback port.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stdout,
    clippy::print_stderr,
    missing_docs
)]

#[path = "../tests/support/redis_server.rs"]
mod redis_server;
mod support {
    pub mod args;
}

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::store::redis::RedisStore;
use echomq::store::{Completion, LimitTarget, SettleOptions, Store};
use echomq::{GroupName, NewJob, QueueName};
use serde_json::json;

const LEASE: Duration = Duration::from_secs(60);

struct Server {
    conn: redis::aio::MultiplexedConnection,
}

#[derive(Clone, Copy)]
struct Sample {
    cmds: u64,
    cpu_s: f64,
    sys_s: f64,
    mem: i64,
}

impl Server {
    async fn info(&self, section: &str) -> HashMap<String, String> {
        let text: String = redis::cmd("INFO")
            .arg(section)
            .query_async(&mut self.conn.clone())
            .await
            .unwrap();
        text.lines()
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.to_string(), v.trim().to_string()))
            .collect()
    }

    async fn sample(&self) -> Sample {
        let stats = self.info("commandstats").await;
        // cmdstat_x:calls=N,usec=…; INFO itself is not in the delta of interest but counts 1
        let cmds = stats
            .values()
            .filter_map(|v| v.split(',').next()?.strip_prefix("calls=")?.parse::<u64>().ok())
            .sum();
        let cpu = self.info("cpu").await;
        let f = |k: &str| cpu.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
        let mem = self.info("memory").await;
        Sample {
            cmds,
            cpu_s: f("used_cpu_sys") + f("used_cpu_user"),
            sys_s: f("used_cpu_sys"),
            mem: mem.get("used_memory").and_then(|v| v.parse().ok()).unwrap_or(0),
        }
    }
}

struct Delta {
    secs: f64,
    cmds: u64,
    cpu_s: f64,
    sys_s: f64,
    mem: i64,
}

async fn measure<F, Fut>(server: &Server, f: F) -> Delta
where
    F: FnOnce() -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let a = server.sample().await;
    let t = Instant::now();
    f().await;
    let secs = t.elapsed().as_secs_f64();
    let b = server.sample().await;
    Delta {
        secs,
        // the three INFO calls of the first sample are inside the window
        cmds: b.cmds - a.cmds - 3,
        cpu_s: b.cpu_s - a.cpu_s,
        sys_s: b.sys_s - a.sys_s,
        mem: b.mem - a.mem,
    }
}

fn payloads(n: usize) -> Vec<NewJob> {
    (0..n).map(|i| NewJob::new(format!("{{\"n\":{i}}}"))).collect()
}

async fn reset(store: &RedisStore, q: &QueueName) {
    store.obliterate(q, true).await.unwrap();
}

async fn fill(store: &RedisStore, q: &QueueName, n: usize, groups: usize) {
    if groups == 0 {
        store.enqueue(q, &payloads(n)).await.unwrap();
        return;
    }
    store.set_group_limit(q, &LimitTarget::Default, 1).await.unwrap();
    let per = n / groups;
    for g in 0..groups {
        let group = GroupName::new(format!("g{g}")).unwrap();
        store.genqueue(q, &group, &payloads(per)).await.unwrap();
    }
}

/// Claim batches of 100, each settled by one complete_many, by `workers` loops at once.
async fn claim_complete_many(store: &Arc<RedisStore>, q: &QueueName, n: usize, workers: usize) {
    let mut tasks = Vec::new();
    let done = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    for _ in 0..workers {
        let (store, q, done) = (store.clone(), q.clone(), done.clone());
        tasks.push(tokio::spawn(async move {
            while done.load(std::sync::atomic::Ordering::Relaxed) < n {
                let jobs = store
                    .claim(&q, echomq::store::ClaimRequest::new(100, LEASE).max_attempts(3))
                    .await
                    .unwrap();
                if jobs.is_empty() {
                    tokio::task::yield_now().await;
                    continue;
                }
                let batch: Vec<Completion> = jobs.into_iter().map(|j| Completion::new(j.id, j.attempts)).collect();
                let k = batch.len();
                store.complete_many(&q, &batch, SettleOptions::default()).await.unwrap();
                done.fetch_add(k, std::sync::atomic::Ordering::Relaxed);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

/// Claim batches of 100; each job settled by its own complete, 100 in flight.
async fn claim_complete_single(store: &Arc<RedisStore>, q: &QueueName, n: usize) {
    let mut done = 0;
    while done < n {
        let jobs = store
            .claim(q, echomq::store::ClaimRequest::new(100, LEASE).max_attempts(3))
            .await
            .unwrap();
        let completions: Vec<_> = jobs
            .iter()
            .map(|j| echomq::store::Completion::new(j.id.clone(), j.attempts))
            .collect();
        let settles = completions
            .iter()
            .map(|c| store.complete(q, c, SettleOptions::default()));
        done += futures::future::join_all(settles).await.len();
    }
}

/// (name, groups, settle with complete_many) — groups 0 = flat jobs.
const WORKLOADS: &[(&str, usize, bool)] = &[
    ("a_enqueue_bulk", 0, false),
    ("b_claim_complete_many_flat", 0, true),
    ("b_claim_complete_single_flat", 0, false),
    ("b_claim_complete_many_grouped", 1000, true),
    ("b_claim_complete_single_grouped", 1000, false),
    ("c_floor_row_calls", 0, false),
    ("c_floor_enqueue", 0, false),
];

/// Per job of a call: the waiting row's `HSET` (its two fields) and its pair in one bulk `ZADD`,
/// from the plain layout's arguments (ARGV[1] the call's id prefix, then one payload per job; ids
/// built without a number-to-text printf, as enqueue builds them) — an enqueue with no checks, no
/// id counter, no ring step and no wake.
const FLOOR_ENQUEUE: &str = "
local d, ids = { '0', '1', '2', '3', '4', '5', '6', '7', '8', '9' }, {}
for a = 1, 10 do for b = 1, 10 do for c = 1, 10 do ids[#ids + 1] = ARGV[1] .. d[a] .. d[b] .. d[c] end end end
local pairs = {}
for i = 2, #ARGV do
  local id = ids[i - 1]
  redis.call('HSET', KEYS[1] .. id, 'data', ARGV[i], 'state', 'pending')
  pairs[#pairs + 1] = id
  pairs[#pairs + 1] = id
end
for i = 1, #pairs, 1000 do
  redis.call('ZADD', KEYS[2], unpack(pairs, i, math.min(i + 999, #pairs)))
end
return 1";

/// The floor under a bulk enqueue on this Redis, this hour: the Redis CPU per job of
/// [`FLOOR_ENQUEUE`] run in calls of 1,000 jobs, as `a_enqueue_bulk` runs. Its rows and set are
/// deleted after the window.
async fn floor_enqueue(server: &Server, n: usize) -> Delta {
    let script = redis::Script::new(FLOOR_ENQUEUE);
    let (rows, set) = ("emq:{bench}:floor:e:", "emq:{bench}:floor:pending");
    let payloads: Vec<String> = (0..n).map(|i| format!("{{\"n\":{i}}}")).collect();
    let mut conn = server.conn.clone();
    let d = measure(server, || async {
        for (c, chunk) in payloads.chunks(1000).enumerate() {
            let mut call = script.key(rows);
            call.key(set).arg(c);
            for p in chunk {
                call.arg(p);
            }
            let _: i64 = call.invoke_async(&mut conn).await.unwrap();
        }
    })
    .await;
    let keys: Vec<String> = (0..n).map(|i| format!("{rows}{}{:03}", i / 1000, i % 1000)).collect();
    for chunk in keys.chunks(1000) {
        let _: i64 = redis::cmd("DEL").arg(chunk).query_async(&mut conn).await.unwrap();
    }
    let _: i64 = redis::cmd("DEL").arg(set).query_async(&mut conn).await.unwrap();
    d
}

/// Per job: create and delete a waiting row (`HSET` + `DEL`), nothing else.
const FLOOR_BASE: &str = "
for i = 1, 100 do redis.call('HSET', KEYS[1] .. i, 'data', ARGV[1], 'state', 'pending') end
for i = 1, 100 do redis.call('DEL', KEYS[1] .. i) end
return 1";

/// As [`FLOOR_BASE`], plus the three row calls a claim and a fenced complete cannot do without:
/// claim's `HVALS` + `HSET` and the fence's read of the token (`HGET`: a batch of flat jobs
/// needs no group).
const FLOOR_ROWS: &str = "
for i = 1, 100 do redis.call('HSET', KEYS[1] .. i, 'data', ARGV[1], 'state', 'pending') end
for i = 1, 100 do
  local k = KEYS[1] .. i
  redis.call('HVALS', k)
  redis.call('HSET', k, 'state', 'active', 'attempts', '1')
end
for i = 1, 100 do
  local k = KEYS[1] .. i
  redis.call('HGET', k, 'attempts')
  redis.call('DEL', k)
end
return 1";

/// The floor under claim + complete on this Redis, this hour: the Redis CPU per job of the three
/// row calls alone (no sets, no lists, no checks), as the difference of two scripts run `n / 100`
/// times each by `workers` loops. Our `b_claim_complete_many_flat` compares against it.
async fn floor_row_calls(server: &Server, n: usize, workers: usize) -> Delta {
    let run = |src: &'static str| {
        let conn = server.conn.clone();
        async move {
            let script = redis::Script::new(src);
            let calls = n / 100;
            measure(server, || async move {
                let mut tasks = Vec::new();
                for w in 0..workers {
                    let (script, mut conn) = (script.clone(), conn.clone());
                    tasks.push(tokio::spawn(async move {
                        // each loop its own rows, in the bench queue's hash tag
                        let prefix = format!("emq:{{bench}}:floor:{w}:");
                        for _ in (w..calls).step_by(workers) {
                            let _: i64 = script
                                .key(&prefix)
                                .arg("{\"n\":12345}")
                                .invoke_async(&mut conn)
                                .await
                                .unwrap();
                        }
                    }));
                }
                for t in tasks {
                    t.await.unwrap();
                }
            })
            .await
        }
    };
    let base = run(FLOOR_BASE).await;
    let rows = run(FLOOR_ROWS).await;
    Delta {
        secs: rows.secs - base.secs,
        cmds: rows.cmds - base.cmds,
        cpu_s: rows.cpu_s - base.cpu_s,
        sys_s: rows.sys_s - base.sys_s,
        mem: 0,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

#[tokio::main]
async fn main() {
    let args = support::args::Args::read();
    let runs = args.flag("--runs", if args.smoke { 1 } else { 3 });
    let n = args.flag("--jobs", if args.smoke { 2_000 } else { 100_000 });
    let workers = args.flag("--workers", 4);
    // --only TEXT: the workloads whose name holds TEXT (for profiling one)
    let only = args.text("--only").map(str::to_string);
    let url = redis_server::url_from_env_or_start("EMQ_BENCH_REDIS_URL");
    let store = Arc::new(RedisStore::open(&url).await.unwrap());
    // scripts cached before any window opens, so the memory figure holds jobs only
    store.preload().await.unwrap();
    let client = redis::Client::open(url.as_str()).unwrap();
    let server = Server {
        conn: client.get_multiplexed_async_connection().await.unwrap(),
    };
    let q = QueueName::new("bench").unwrap();
    let mut results: HashMap<&str, Vec<serde_json::Value>> = HashMap::new();

    for run in 0..runs {
        for (name, groups, many) in WORKLOADS {
            if only.as_deref().is_some_and(|o| !name.contains(o)) {
                continue;
            }
            reset(&store, &q).await;
            let mut line = if *name == "a_enqueue_bulk" {
                let jobs = payloads(n);
                let d = measure(&server, || async {
                    store.enqueue(&q, &jobs).await.unwrap();
                })
                .await;
                json!({"n": n, "secs": d.secs, "jobs_per_s": n as f64 / d.secs,
                    "mem_bytes_per_waiting_job": d.mem as f64 / n as f64,
                    "redis_cmds_per_job": d.cmds as f64 / n as f64, "redis_cpu_s": d.cpu_s,
                    "redis_cpu_us_per_job": d.cpu_s * 1e6 / n as f64})
            } else if *name == "c_floor_enqueue" {
                let d = floor_enqueue(&server, n).await;
                json!({"n": n, "secs": d.secs, "redis_cmds_per_job": d.cmds as f64 / n as f64,
                    "redis_cpu_us_per_job": d.cpu_s * 1e6 / n as f64,
                    "ceiling_jobs_per_s": n as f64 / d.cpu_s})
            } else if *name == "c_floor_row_calls" {
                let d = floor_row_calls(&server, n, workers).await;
                json!({"n": n, "redis_cmds_per_job": d.cmds as f64 / n as f64,
                    "redis_cpu_us_per_job": d.cpu_s * 1e6 / n as f64})
            } else {
                fill(&store, &q, n, *groups).await;
                let d = if *many {
                    measure(&server, || claim_complete_many(&store, &q, n, workers)).await
                } else {
                    measure(&server, || claim_complete_single(&store, &q, n)).await
                };
                json!({"n": n, "groups": groups, "workers": if *many { workers } else { 1 }, "secs": d.secs,
                    "jobs_per_s": n as f64 / d.secs, "redis_cmds_per_job": d.cmds as f64 / n as f64,
                    "redis_cpu_us_per_job": d.cpu_s * 1e6 / n as f64,
                    "redis_sys_us_per_job": d.sys_s * 1e6 / n as f64})
            };
            line["lib"] = json!("echomq");
            line["test"] = json!(name);
            line["run"] = json!(run);
            eprintln!("{line}");
            results.entry(name).or_default().push(line);
        }
    }
    reset(&store, &q).await;

    let mut names: Vec<&&str> = results.keys().collect();
    names.sort();
    for name in names {
        let lines = &results[*name];
        let mut out = serde_json::Map::new();
        out.insert("lib".into(), json!("echomq"));
        out.insert("test".into(), json!(name));
        out.insert("median_of".into(), json!(lines.len()));
        for field in [
            "jobs_per_s",
            "redis_cmds_per_job",
            "redis_cpu_us_per_job",
            "mem_bytes_per_waiting_job",
            "ceiling_jobs_per_s",
            "secs",
        ] {
            let vals: Vec<f64> = lines.iter().filter_map(|l| l.get(field)?.as_f64()).collect();
            if !vals.is_empty() {
                out.insert(field.into(), json!((median(vals) * 100.0).round() / 100.0));
            }
        }
        println!("{}", serde_json::Value::Object(out));
    }
}
