//! `emq` against a Redis Cluster (3 masters: `EMQ_TEST_REDIS_CLUSTER_URL`, else one started for
//! this process by `tools/cluster.sh`): queues spread over every master served by `emq work`
//! processes that each take several of them; a plain `redis://` URL to any one node; `--wait`
//! refused typed when the masters have no replica.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;
use std::time::Duration;

use common::{assert_exit, queue_named, read, redis_server, scratch, stderr, stdout, wait_until, Backend, Worker};

fn cluster_url() -> String {
    static URL: OnceLock<String> = OnceLock::new();
    URL.get_or_init(|| redis_server::cluster_url_from_env_or_start("EMQ_TEST_REDIS_CLUSTER_URL", "redis-server", 3, 0))
        .clone()
}

/// The seed nodes' ports of a `redis+cluster://` URL.
fn ports(url: &str) -> Vec<u16> {
    url.trim_start_matches("redis+cluster://")
        .split(',')
        .map(|hp| hp.rsplit(':').next().unwrap().parse().unwrap())
        .collect()
}

/// The master (its `host:port`) that serves `queue`'s slot, as `redis-cli` on `port` tells it.
fn master_of(port: u16, queue: &str) -> String {
    let cli = |args: &[&str]| {
        let o = std::process::Command::new("redis-cli")
            .arg("-p")
            .arg(port.to_string())
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let slot: u16 = cli(&["cluster", "keyslot", &format!("emq:{{{queue}}}:id")])
        .trim()
        .parse()
        .unwrap();
    // CLUSTER SHARDS would do; CLUSTER NODES is on every version: `id addr flags … slots`
    for line in cli(&["cluster", "nodes"]).lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if !fields.get(2).is_some_and(|f| f.contains("master")) {
            continue;
        }
        for range in &fields[8..] {
            let (a, b) = range.split_once('-').unwrap_or((range, range));
            if let (Ok(a), Ok(b)) = (a.parse::<u16>(), b.parse::<u16>()) {
                if (a..=b).contains(&slot) {
                    return fields[1].split('@').next().unwrap().to_string();
                }
            }
        }
    }
    panic!("no master serves slot {slot}");
}

#[test]
fn ten_queues_on_three_masters_served_by_workers_taking_several_queues_run_every_job_once() {
    let url = cluster_url();
    let b = Backend::at(url.clone());
    // a queue's master follows its name's hash slot, and the names carry the process id: ten drawn
    // at random miss a master one run in twenty, so names are drawn until every master holds one
    let (mut queues, mut masters) = (Vec::new(), BTreeSet::new());
    for i in 0..1000 {
        if queues.len() == 10 {
            break;
        }
        let q = queue_named("cluster", &format!("q{i}"));
        let m = master_of(ports(&url)[0], &q);
        if masters.contains(&m) && 10 - queues.len() <= 3 - masters.len() {
            continue;
        }
        masters.insert(m);
        queues.push(q);
    }
    assert_eq!(masters.len(), 3, "the ten queues spread over every master: {masters:?}");
    assert_eq!(queues.len(), 10);
    const PER: usize = 30;
    for q in &queues {
        let lines: String = (0..PER).map(|i| format!("{{\"n\":{i}}}\n")).collect();
        let o = b.emq_with_stdin(&["enqueue", q, "--file", "-"], lines.as_bytes());
        assert_exit(&o, 0);
    }
    let dir = scratch("cluster-queues");
    let log = dir.join("ran");
    let exec = format!("echo \"$EMQ_QUEUE $EMQ_JOB_ID\" >> '{}'", log.display());
    // two workers, overlapping: each takes seven queues, four of them shared
    let worker = |qs: &[String]| {
        let mut args = vec!["work"];
        args.extend(qs.iter().map(String::as_str));
        args.extend(["--exec", &exec, "--beat", "100ms", "--concurrency", "4"]);
        Worker::spawn(b.cmd(&args))
    };
    let w1 = worker(&queues[..7]);
    let w2 = worker(&queues[3..]);
    let l = b.lib();
    wait_until(Duration::from_secs(60), "every queue's jobs completed", || {
        queues.iter().all(|q| l.counts(q).completed == PER as u64)
    });
    w1.stop();
    w2.stop();
    let mut runs: BTreeMap<String, u32> = BTreeMap::new();
    for line in read(&log).lines() {
        *runs.entry(line.to_string()).or_default() += 1;
    }
    assert_eq!(runs.len(), queues.len() * PER, "every job ran");
    let twice: Vec<_> = runs.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "jobs run twice: {twice:?}");
}

#[test]
fn a_plain_redis_url_to_any_one_node_works_for_stats_enqueue_and_work() {
    let url = cluster_url();
    for port in ports(&url) {
        let node = Backend::at(format!("redis://127.0.0.1:{port}"));
        let q = queue_named("cluster-node", &port.to_string());
        // the queue's master may be another node: the store follows the cluster, not the URL
        let id = node.enqueue(&q, "x", &[]);
        assert_eq!(id, "1");
        let w = node.work(&q, "cat >/dev/null", &[]);
        let l = node.lib();
        wait_until(Duration::from_secs(20), "the job completed", || {
            l.counts(&q).completed == 1
        });
        w.stop();
        let o = node.emq(&["stats", &q, "--json"]);
        assert_exit(&o, 0);
        let v: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
        assert_eq!(v["completed"], 1, "{v}");
    }
}

#[test]
fn enqueue_wait_fails_typed_when_no_replica_confirms_and_is_refused_on_the_embedded_store() {
    let b = Backend::at(cluster_url());
    let q = queue_named("cluster", "wait");
    let o = b.emq(&["enqueue", &q, "x", "--wait", "1", "--wait-timeout", "100ms"]);
    assert_exit(&o, 1);
    assert!(
        stderr(&o).contains("0 of 1 replicas confirmed the write within 100ms"),
        "{}",
        stderr(&o)
    );
    // the job stands on the master, unconfirmed
    assert_eq!(b.lib().counts(&q).pending, 1);
    let e = Backend::embedded();
    let o = e.emq(&["enqueue", &q, "x", "--wait", "1"]);
    assert_exit(&o, 1);
    assert!(stderr(&o).contains("--wait needs a Redis store"), "{}", stderr(&o));
}
