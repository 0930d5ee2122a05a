//! `emq dashboard` over real HTTP on loopback, on both stores: every page and action, bad input
//! (an unknown queue or job is a 404, a POST without the CSRF token is refused), escaping, the
//! read-only mode, and the authentication a non-loopback bind needs. Then in a real browser
//! (Debian's `chromium`, driven by `chromedriver` over WebDriver): the live overview, a dead job
//! retried to completed, a running job cancelled, a hostile payload shown as text.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{assert_exit, on_both_stores, queue_named, stderr, wait_until, Backend};
use echomq::store::SettleOptions;
use echomq::{JobState, NewJob};

/// A running `emq dashboard` on a free loopback port; killed when dropped.
struct Dashboard {
    child: Child,
    addr: SocketAddr,
}

impl Dashboard {
    fn start(b: &Backend, extra: &[&str]) -> Dashboard {
        let mut args = vec!["dashboard", "--bind", "127.0.0.1:0"];
        args.extend_from_slice(extra);
        let mut cmd = b.cmd(&args);
        cmd.stdout(Stdio::null());
        let mut child = cmd.spawn().unwrap();
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().unwrap();
        // the first line says where it serves; the rest is drained so a chatty server never stalls
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                if !sent {
                    if let Some(at) = line.split("on http://").nth(1) {
                        let addr: SocketAddr = at.split('/').next().unwrap().parse().unwrap();
                        let _ = tx.send(addr);
                        sent = true;
                    }
                }
            }
        });
        let addr = rx
            .recv_timeout(Duration::from_secs(20))
            .expect("emq dashboard said where it serves within 20 s");
        Dashboard { child, addr }
    }

    fn get(&self, path: &str) -> Reply {
        self.request("GET", path, &[], None)
    }

    fn post(&self, path: &str, form: &str) -> Reply {
        self.request("POST", path, &[], Some(form))
    }

    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], form: Option<&str>) -> Reply {
        http(self.addr, method, path, headers, form)
    }

    /// The CSRF token the pages' forms carry.
    fn csrf(&self, page: &str) -> String {
        let body = self.get(page).body;
        let at = body.find("name=\"csrf\" value=\"").expect("a form with the CSRF token") + 19;
        body[at..at + 64].to_string()
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An HTTP reply: its status, headers (names lowercased) and body.
struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Reply {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

/// One HTTP/1.1 request on a connection of its own (`Connection: close`), a form body if given.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], form: Option<&str>) -> Reply {
    let mut all = headers.to_vec();
    if form.is_some() {
        all.push(("Content-Type", "application/x-www-form-urlencoded"));
    }
    exchange(addr, method, path, &all, form.unwrap_or(""))
}

/// Sends one request and reads its reply whole: by its Content-Length, else its chunks, else to
/// the connection's end (a server may keep a connection open past its reply).
fn exchange(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        req.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 16384];
    let complete = |raw: &[u8]| -> bool {
        let text = String::from_utf8_lossy(raw);
        let Some((head, body)) = text.split_once("\r\n\r\n") else {
            return false;
        };
        let head = head.to_ascii_lowercase();
        if let Some(len) = head.lines().find_map(|l| l.strip_prefix("content-length:")) {
            return body.len() >= len.trim().parse::<usize>().unwrap();
        }
        head.contains("transfer-encoding: chunked") && body.ends_with("0\r\n\r\n")
    };
    while !complete(&raw) {
        let n = s.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    let chunked = headers
        .iter()
        .any(|(k, v)| k == "transfer-encoding" && v.eq_ignore_ascii_case("chunked"));
    let body = if chunked { unchunk(body) } else { body.to_string() };
    Reply { status, headers, body }
}

/// A chunked body's bytes, joined (sizes in hex, each chunk followed by CRLF, a 0 chunk last).
fn unchunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.split(';').next().unwrap().trim(), 16).unwrap();
        if n == 0 {
            break;
        }
        out.push_str(&after[..n]);
        rest = &after[n + 2..];
    }
    out
}

/// A nightly cron schedule in Berlin, added with `emq schedule add`.
fn add_nightly(b: &Backend, q: &str) {
    let add = [
        "schedule",
        "add",
        q,
        "nightly",
        "--cron",
        "30 2 * * *",
        "--tz",
        "Europe/Berlin",
    ];
    assert_exit(&b.emq(&add), 0);
}

fn queue(name: &str) -> String {
    queue_named("dash", name)
}

/// The count a page's overview cell shows for queue `q` and state `k`.
fn cell(body: &str, q: &str, k: &str) -> u64 {
    let key = format!("data-q=\"{q}\" data-k=\"{k}\">");
    let at = body.find(&key).unwrap_or_else(|| panic!("a cell {k} of {q}")) + key.len();
    body[at..].split('<').next().unwrap().parse().unwrap()
}

on_both_stores!(every_page_and_action_works_and_bad_input_is_refused);

fn every_page_and_action_works_and_bad_input_is_refused(b: &Backend) {
    let q = queue("pages");
    let a = b.enqueue(&q, "a", &[]);
    b.enqueue(&q, "<script>alert(1)</script>", &["--id", "hostile"]);
    b.enqueue(&q, r#"{"to":"x@example.com","n":[1,2]}"#, &["--id", "json-job"]);
    b.enqueue(&q, "later", &["--id", "later", "--delay", "1h"]);
    // one dead job: claimed and discarded through the library
    b.enqueue(&q, "d", &["--id", "doomed", "--priority", "9"]);
    let l = b.lib();
    let qn = common::qn(&q);
    l.rt.block_on(async {
        let claimed = l
            .store
            .claim(
                &qn,
                echomq::store::ClaimRequest::new(10, Duration::from_secs(30)).max_attempts(3),
            )
            .await
            .unwrap();
        let doomed = claimed.iter().find(|j| j.id.as_str() == "doomed").unwrap();
        l.store
            .discard(
                &qn,
                &doomed.id,
                doomed.token,
                &echomq::store::DiscardRequest::new("broken"),
            )
            .await
            .unwrap();
        for j in claimed.iter().filter(|j| j.id.as_str() != "doomed") {
            l.store.release(&qn, &j.id, j.token, Duration::ZERO).await.unwrap();
        }
    });
    let d = Dashboard::start(b, &[]);

    // the overview: the queue's counts, live from the JSON beside it
    let home = d.get("/");
    assert_eq!(home.status, 200, "{}", home.body);
    assert_eq!(
        home.header("x-frame-options"),
        Some("DENY"),
        "never framed by another site"
    );
    // served to loopback names only: a name rebound to 127.0.0.1 gets nothing
    let rebound = d.request("GET", "/", &[("Host", "evil.example")], None);
    assert_eq!(rebound.status, 403);
    assert!(!rebound.body.contains("name=\"csrf\""));
    assert_eq!(d.request("GET", "/", &[("Host", "localhost:7070")], None).status, 200);
    assert_eq!(cell(&home.body, &q, "pending"), 3);
    assert_eq!(cell(&home.body, &q, "scheduled"), 1);
    assert_eq!(cell(&home.body, &q, "dead"), 1);
    assert!(
        home.body.contains("last hour: 0 completed, 1 dead-lettered"),
        "the hour's chart: {}",
        home.body
    );
    let api = d.get("/api/overview");
    assert_eq!(api.status, 200);
    let json: serde_json::Value = serde_json::from_str(&api.body).unwrap();
    let mine = json["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == q.as_str())
        .unwrap();
    assert_eq!(mine["counts"]["pending"], 3);
    assert_eq!(mine["counts"]["dead"], 1);
    // the three pending jobs were released to the front of the queue: no age is counted for them
    assert!(home.body.contains("oldest pending"));
    assert_eq!(mine["counts"]["oldest"], "-");
    assert!(mine.get("history").is_none(), "the hour only when asked");
    let api: serde_json::Value = serde_json::from_str(&d.get("/api/overview?history=1").body).unwrap();
    let mine = api["queues"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == q.as_str())
        .unwrap();
    let minutes = |k: &str| {
        mine["history"][k]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap())
            .collect::<Vec<_>>()
    };
    assert_eq!((minutes("completed").len(), minutes("failed").len()), (60, 60));
    assert_eq!(
        (
            minutes("completed").iter().sum::<u64>(),
            minutes("failed").iter().sum::<u64>()
        ),
        (0, 1)
    );

    // a queue's tabs; a job's fields, escaped; JSON pretty-printed
    let dead = d.get(&format!("/queues/{q}?state=dead"));
    assert_eq!(dead.status, 200);
    assert!(
        dead.body.contains("doomed") && dead.body.contains("broken"),
        "{}",
        dead.body
    );
    assert!(
        !dead.body.contains(&format!("/jobs/{a}\"")),
        "a pending job is not on the dead tab"
    );
    assert!(
        d.get(&format!("/queues/{q}")).body.contains(&format!("/jobs/{a}\"")),
        "it is on the pending tab"
    );
    let hostile = d.get(&format!("/queues/{q}/jobs/hostile"));
    assert_eq!(hostile.status, 200);
    assert!(
        hostile.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{}",
        hostile.body
    );
    assert!(
        !hostile.body.contains("<script>alert(1)"),
        "the payload is text, never markup"
    );
    let pretty = d.get(&format!("/queues/{q}/jobs/json-job")).body;
    assert!(
        pretty.contains("  &quot;to&quot;: &quot;x@example.com&quot;"),
        "{pretty}"
    );
    let found = d.get(&format!("/queues/{q}?find=hostile"));
    assert_eq!(
        (found.status, found.header("location")),
        (303, Some(&*format!("/queues/{q}/jobs/hostile")))
    );

    // bad input: unknown queue, job, state or action
    assert_eq!(d.get("/queues/no-such-queue").status, 404);
    assert_eq!(d.get("/queues/bad%20name").status, 404);
    assert_eq!(d.get(&format!("/queues/{q}/jobs/nope")).status, 404);
    assert_eq!(d.get(&format!("/queues/{q}?state=sleeping")).status, 400);
    assert_eq!(d.get("/no/such/page").status, 404);
    assert_eq!(
        d.get(&format!("/queues/{q}?find=a%0D%0ASet-Cookie:x")).status,
        404,
        "no header from input"
    );

    // an action without the page's CSRF token is refused and changes nothing
    let forged = d.post(&format!("/queues/{q}/jobs/doomed/retry"), "");
    assert_eq!(forged.status, 403);
    let wrong = d.post(
        &format!("/queues/{q}/jobs/doomed/retry"),
        &format!("csrf={}", "0".repeat(64)),
    );
    assert_eq!(wrong.status, 403);
    assert_eq!(l.job(&q, "doomed").unwrap().state, JobState::Dead);
    let csrf = d.csrf(&format!("/queues/{q}"));
    let token = format!("csrf={csrf}");
    assert_eq!(d.post(&format!("/queues/{q}/jobs/nope/retry"), &token).status, 404);

    // the job actions
    let retried = d.post(&format!("/queues/{q}/jobs/doomed/retry"), &token);
    assert_eq!(retried.status, 303);
    assert!(
        retried.header("location").unwrap().contains("msg=back+to+ready"),
        "{:?}",
        retried.headers
    );
    assert_eq!(l.job(&q, "doomed").unwrap().state, JobState::Pending);
    assert_eq!(d.post(&format!("/queues/{q}/jobs/later/promote"), &token).status, 303);
    assert_eq!(l.job(&q, "later").unwrap().state, JobState::Pending);
    assert_eq!(d.post(&format!("/queues/{q}/jobs/{a}/cancel"), &token).status, 303);
    assert!(l.job(&q, &a).is_none_or(|j| j.state == JobState::Cancelled));
    assert_eq!(d.post(&format!("/queues/{q}/jobs/json-job/remove"), &token).status, 303);
    assert!(l.job(&q, "json-job").is_none());

    // the groups: waiting and running jobs, the limit set in place
    b.enqueue(&q, "g", &["--group", "tenant-a"]);
    let groups = d.get(&format!("/queues/{q}/groups"));
    assert_eq!(groups.status, 200);
    assert!(
        groups.body.contains("tenant-a") && groups.body.contains("0 / 1 (default)"),
        "{}",
        groups.body
    );
    let set = d.post(
        &format!("/queues/{q}/groups/tenant-a/limit"),
        &format!("{token}&limit=5"),
    );
    assert_eq!(set.status, 303);
    assert!(d.get(&format!("/queues/{q}/groups")).body.contains("0 / 5<"));
    let zero = d.post(
        &format!("/queues/{q}/groups/tenant-a/limit"),
        &format!("{token}&limit=0"),
    );
    assert_eq!(zero.status, 400);

    // the queue actions
    assert_eq!(d.post(&format!("/queues/{q}/pause"), &token).status, 303);
    assert!(l.counts(&q).paused);
    assert!(d.get("/").body.contains("paused"));
    assert_eq!(d.post(&format!("/queues/{q}/resume"), &token).status, 303);
    assert!(!l.counts(&q).paused);
    b.enqueue(&q, "soon", &["--delay", "1h"]);
    let promoted = d.post(&format!("/queues/{q}/promote-scheduled"), &token);
    assert!(
        promoted.header("location").unwrap().contains("1+scheduled+job"),
        "{:?}",
        promoted.headers
    );
    assert_eq!(l.counts(&q).scheduled, 0);
    let drained = d.post(&format!("/queues/{q}/drain"), &token);
    assert_eq!(drained.status, 303);
    assert_eq!(l.counts(&q).pending, 0);

    // schedules: listed, triggered, paused, removed
    add_nightly(b, &q);
    let s = d.get(&format!("/queues/{q}/schedules"));
    assert_eq!(s.status, 200);
    assert!(
        s.body.contains("nightly") && s.body.contains("Europe/Berlin"),
        "{}",
        s.body
    );
    assert_eq!(
        d.post(&format!("/queues/{q}/schedules/nightly/trigger"), &token).status,
        303
    );
    assert_eq!(l.counts(&q).pending, 1, "the trigger's job");
    assert_eq!(
        d.post(&format!("/queues/{q}/schedules/nightly/pause"), &token).status,
        303
    );
    assert!(d.get(&format!("/queues/{q}/schedules")).body.contains("paused"));
    assert_eq!(
        d.post(&format!("/queues/{q}/schedules/nightly/remove"), &token).status,
        303
    );
    assert_eq!(
        d.post(&format!("/queues/{q}/schedules/nightly/remove"), &token).status,
        404
    );
    // a name of dots only is no path segment: listed, with no action that would reach the queue's
    assert_exit(&b.emq(&["schedule", "add", &q, "..", "--every", "1h"]), 0);
    let dots = d.get(&format!("/queues/{q}/schedules")).body;
    assert!(dots.contains("every 1h") && !dots.contains("/schedules/../"), "{dots}");
    assert_exit(&b.emq(&["schedule", "remove", &q, ".."]), 0);

    // obliterate asks for the queue's name typed again
    let unconfirmed = d.post(&format!("/queues/{q}/obliterate"), &format!("{token}&confirm=other"));
    assert_eq!(unconfirmed.status, 400);
    assert_eq!(l.counts(&q).pending, 1, "nothing deleted");
    let gone = d.post(&format!("/queues/{q}/obliterate"), &format!("{token}&confirm={q}"));
    assert_eq!(
        (gone.status, gone.header("location").map(|l| l.starts_with("/?msg="))),
        (303, Some(true))
    );
    assert_eq!(d.get(&format!("/queues/{q}")).status, 404, "the queue is gone");

    // read-only: no action offered, every POST refused
    b.enqueue(&q, "x", &["--id", "kept"]);
    let ro = Dashboard::start(b, &["--read-only"]);
    let page = ro.get(&format!("/queues/{q}/jobs/kept"));
    assert_eq!(page.status, 200);
    assert!(
        !page.body.contains("method=\"post\""),
        "no action offered: {}",
        page.body
    );
    assert_eq!(ro.post(&format!("/queues/{q}/jobs/kept/remove"), &token).status, 403);
    assert!(l.job(&q, "kept").is_some());
}

on_both_stores!(metrics_equal_the_stats_and_a_worker_exports_its_run_times);

/// Prometheus text parsed: every sample line `name{labels} value` (a malformed line fails), by
/// its name and labels as written.
fn samples(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| !l.is_empty()) {
        if let Some(comment) = line.strip_prefix('#') {
            let mut words = comment.split_whitespace();
            let kind = words.next().unwrap();
            assert!(kind == "HELP" || kind == "TYPE", "a comment line: {line}");
            continue;
        }
        let (series, value) = line.rsplit_once(' ').unwrap_or_else(|| panic!("a sample line: {line}"));
        let name = series.split('{').next().unwrap();
        assert!(
            !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':'),
            "a metric name: {line}"
        );
        if let Some(labels) = series.strip_prefix(name) {
            assert!(
                labels.is_empty() || (labels.starts_with('{') && labels.ends_with('}')),
                "labels: {line}"
            );
        }
        let v = match value {
            "+Inf" => f64::INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("a value: {line}")),
        };
        out.insert(series.to_string(), v);
    }
    out
}

fn metrics_equal_the_stats_and_a_worker_exports_its_run_times(b: &Backend) {
    let q = queue("metrics");
    for _ in 0..5 {
        b.enqueue(&q, "ok", &[]);
    }
    b.enqueue(&q, "fail", &["--max-attempts", "1"]);
    b.enqueue(&q, "later", &["--delay", "1h"]);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let bind = format!("127.0.0.1:{port}");
    let worker = b.work(&q, r#"test "$(cat)" != fail"#, &["--metrics-bind", &bind]);
    let l = b.lib();
    wait_until(Duration::from_secs(30), "the worker ran the ready jobs", || {
        let c = l.counts(&q);
        c.completed == 5 && c.dead == 1
    });
    let addr: SocketAddr = bind.parse().unwrap();
    let scraped = http(addr, "GET", "/metrics", &[], None);
    assert_eq!(scraped.status, 200);
    assert!(scraped.header("content-type").unwrap().starts_with("text/plain"));
    let m = samples(&scraped.body);
    // a histogram's sample of this queue and outcome (a bucket: the +Inf one)
    let sample = |metric: &str, outcome: &str, suffix: &str| {
        m.iter()
            .find(|(k, _)| {
                k.starts_with(&format!("{metric}{suffix}{{"))
                    && k.contains(&format!("queue=\"{q}\""))
                    && k.contains(&format!("outcome=\"{outcome}\""))
                    && (suffix != "_bucket" || k.contains("le=\"+Inf\""))
            })
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{metric}{suffix} of {outcome} in {}", scraped.body))
    };
    let run = |outcome: &str, suffix: &str| sample("emq_job_duration_seconds", outcome, suffix);
    assert_eq!(run("completed", "_count"), 5.0);
    assert_eq!(run("completed", "_bucket"), 5.0);
    assert_eq!(run("failed", "_count"), 1.0);
    assert!(run("completed", "_sum") > 0.0);
    // each job's wait before its claim, beside its run: the jobs waited for the worker to start
    let wait = |outcome: &str, suffix: &str| sample("emq_job_wait_seconds", outcome, suffix);
    assert_eq!(wait("completed", "_count"), 5.0);
    assert_eq!(wait("failed", "_count"), 1.0);
    assert!(wait("completed", "_sum") > 0.0, "{}", scraped.body);
    assert_eq!(m[&format!("emq_jobs{{queue=\"{q}\",state=\"scheduled\"}}")], 1.0);
    assert_eq!(m[&format!("emq_consumers{{queue=\"{q}\"}}")], 1.0, "the worker itself");
    worker.stop();

    // the minutes the worker ran, from `emq stats --history`
    let text = b.emq(&["stats", &q, "--history"]);
    assert_exit(&text, 0);
    let lines: Vec<String> = common::stdout(&text).lines().map(str::to_string).collect();
    assert_eq!(lines.len(), 60, "a line a minute of the last hour");
    let sum = |key: &str| -> u64 {
        lines
            .iter()
            .map(|l| {
                let field = l.split(' ').find_map(|w| w.strip_prefix(key)).unwrap();
                field.parse::<u64>().unwrap()
            })
            .sum()
    };
    assert_eq!((sum("completed="), sum("failed=")), (5, 1), "{lines:?}");
    let json = b.emq(&["stats", &q, "--history", "5", "--json"]);
    assert_exit(&json, 0);
    let minutes: Vec<serde_json::Value> = common::stdout(&json)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(minutes.len(), 5);
    assert_eq!(minutes.iter().map(|m| m["completed"].as_u64().unwrap()).sum::<u64>(), 5);
    assert!(minutes
        .windows(2)
        .all(|w| w[1]["minute"].as_u64() == w[0]["minute"].as_u64().map(|m| m + 1)));
    b.assert_usage_error(&["stats", "--history"]);
    let refused = b.emq(&["stats", &q, "--history", "0"]);
    assert_exit(&refused, 1);

    // the dashboard's scrape equals `emq stats`, a job left pending a second included
    b.enqueue(&q, "waits", &[]);
    std::thread::sleep(Duration::from_millis(1_100));
    let d = Dashboard::start(b, &[]);
    let scraped = d.get("/metrics");
    assert_eq!(scraped.status, 200);
    let m = samples(&scraped.body);
    let stats = b.stats(&q);
    let scraped_age = m[&format!("emq_oldest_pending_age_seconds{{queue=\"{q}\"}}")];
    let stats_age = stats["oldest_pending_age_ms"].as_f64().unwrap() / 1000.0;
    assert!(
        scraped_age >= 1.0 && stats_age >= scraped_age && stats_age - scraped_age < 10.0,
        "the oldest pending job's age: scraped {scraped_age} s, stats {stats_age} s"
    );
    for state in ["pending", "scheduled", "active", "dead"] {
        let series = format!("emq_jobs{{queue=\"{q}\",state=\"{state}\"}}");
        assert_eq!(m[&series], stats[state].as_f64().unwrap(), "{series}");
    }
    for event in ["completed", "cancelled"] {
        let series = format!("emq_events_total{{queue=\"{q}\",event=\"{event}\"}}");
        assert_eq!(m[&series], stats[event].as_f64().unwrap(), "{series}");
    }
    assert_eq!(m[&format!("emq_events_total{{queue=\"{q}\",event=\"failed\"}}")], 1.0);
    assert_eq!(m[&format!("emq_queue_paused{{queue=\"{q}\"}}")], 0.0);
    assert_eq!(m[&format!("emq_consumers{{queue=\"{q}\"}}")], 0.0, "the worker stopped");
    assert!(scraped.body.contains("# TYPE emq_jobs gauge"));
    assert!(scraped.body.contains("# TYPE emq_events_total counter"));
}

/// The page lists every consumer of the store, and says when there is none: on Redis a server of
/// the test's own, as the shared one runs other tests' workers at the same time.
mod the_workers_page_lists_the_consumers_alive_now {
    use crate::common::{redis_server::OwnedServer, Backend};

    #[test]
    fn redis() {
        let server = OwnedServer::start(&["--appendonly", "no"]);
        super::the_workers_page_lists_the_consumers_alive_now(&Backend::at(server.url()));
    }

    #[test]
    fn embedded() {
        super::the_workers_page_lists_the_consumers_alive_now(&Backend::embedded());
    }
}
fn the_workers_page_lists_the_consumers_alive_now(b: &Backend) {
    let q = queue("workers");
    b.enqueue(&q, "x", &[]);
    let d = Dashboard::start(b, &[]);
    let empty = d.get("/workers");
    assert_eq!(empty.status, 200);
    assert!(empty.body.contains("No consumer is running"), "{}", empty.body);
    let calm = b.work(&q, "cat >/dev/null", &["--concurrency", "4"]);
    let killed = b.work(&q, "cat >/dev/null", &["--kind", "resize"]);
    let row = |pid: u32| format!("<td class=\"n\">{pid}</td>");
    wait_until(Duration::from_secs(20), "both workers listed", || {
        let body = d.get("/workers").body;
        body.contains(&row(calm.pid())) && body.contains(&row(killed.pid()))
    });
    let body = d.get("/workers").body;
    assert!(body.contains(&format!(">{q}</a>")), "each line links its queue");
    assert!(body.contains("<td class=\"n\">4</td>"), "the concurrency shows: {body}");
    assert!(
        body.contains("data-k=\"kinds\">every kind<"),
        "a worker of every kind: {body}"
    );
    assert!(body.contains("data-k=\"kinds\">resize<"), "a pool's kinds: {body}");
    // a worker that stops leaves at once; one killed, once it has missed its beats
    let (calm_pid, killed_pid) = (calm.pid(), killed.pid());
    calm.stop();
    assert!(
        !d.get("/workers").body.contains(&row(calm_pid)),
        "a stopped worker leaves at once"
    );
    // a job of a kind only the stopped worker ran waits, named on the queue page and in /metrics
    b.enqueue(&q, "y", &["--kind", "email"]);
    let page = d.get(&format!("/queues/{q}")).body;
    assert!(page.contains("Kinds with no live consumer: email"), "{page}");
    let metrics = d.get("/metrics").body;
    let line = format!("emq_ready_jobs_no_consumer{{queue=\"{q}\",kind=\"email\"}} 1");
    assert!(metrics.contains(&line), "{metrics}");
    killed.kill();
    wait_until(Duration::from_secs(10), "the killed worker lapsed", || {
        !d.get("/workers").body.contains(&row(killed_pid))
    });
}

on_both_stores!(the_queue_page_pages_by_cursor_through_every_job);

/// Follows a queue tab's `next →` links from its first page: the ids of each page, in order.
fn follow_pages(d: &Dashboard, q: &str, state: &str) -> Vec<Vec<String>> {
    let mut path = format!("/queues/{q}?state={state}");
    let mut pages = Vec::new();
    loop {
        let page = d.get(&path);
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        let prefix = format!("href=\"/queues/{q}/jobs/");
        let ids: Vec<String> = page
            .body
            .split(&prefix)
            .skip(1)
            .map(|rest| rest[..rest.find('"').unwrap()].to_string())
            .collect();
        assert_eq!(
            page.body.contains("first page"),
            !pages.is_empty(),
            "a later page, and only a later one, links back to the first"
        );
        pages.push(ids);
        assert!(pages.len() <= 10, "a tab that never ends: {pages:?}");
        let next = format!("href=\"/queues/{q}?state={state}&amp;cursor=");
        match page.body.split(&next).nth(1) {
            Some(rest) => {
                let cursor = &rest[..rest.find('"').unwrap()];
                path = format!("/queues/{q}?state={state}&cursor={cursor}");
            }
            None => return pages,
        }
    }
}

fn the_queue_page_pages_by_cursor_through_every_job(b: &Backend) {
    let q = queue("paged");
    let l = b.lib();
    let qn = common::qn(&q);
    // 70 flat jobs, then 40 in each of two groups: pages of 50 cross from the flat set into the
    // lanes and from one lane into the next
    l.rt.block_on(async {
        let batch: Vec<NewJob> = (0..70).map(|i| NewJob::new(format!("{i}"))).collect();
        l.store.enqueue(&qn, &batch).await.unwrap();
        for g in ["ga", "gb"] {
            let batch: Vec<NewJob> = (0..40).map(|i| NewJob::new(format!("{g}{i}"))).collect();
            l.store
                .genqueue(&qn, &echomq::GroupName::new(g).unwrap(), &batch)
                .await
                .unwrap();
        }
    });
    let d = Dashboard::start(b, &[]);
    let pages = follow_pages(&d, &q, "pending");
    let sizes: Vec<usize> = pages.iter().map(Vec::len).collect();
    assert_eq!(sizes, [50, 50, 50], "{pages:?}");
    let all: Vec<String> = pages.concat();
    let want: Vec<String> = (1..=150).map(|i| i.to_string()).collect();
    assert_eq!(all, want, "every waiting job once, flat jobs first, then lane by lane");
    // a cursor that does not parse is a 400 page, not a store error
    let bad = d.get(&format!("/queues/{q}?state=pending&cursor=nonsense"));
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("cursor"), "{}", bad.body);
}

#[test]
fn the_demo_then_the_dashboard_shows_its_queue_at_once() {
    let b = Backend::embedded();
    let demo = b.emq(&["demo", "--jobs", "2000"]);
    assert_exit(&demo, 0);
    let said = common::stdout(&demo);
    assert!(
        said.contains("look further") && said.contains("emq dashboard"),
        "{said}"
    );
    let d = Dashboard::start(&b, &[]);
    let home = d.get("/");
    assert_eq!(home.status, 200);
    assert!(cell(&home.body, "demo", "completed") > 0, "{}", home.body);
    assert!(cell(&home.body, "demo", "dead") > 0, "the demo's dead jobs show");
    assert!(
        !home.body.contains("last hour: 0 completed"),
        "the hour's chart has the demo's jobs"
    );
}

#[test]
fn a_bind_other_machines_reach_needs_authentication_and_gets_it() {
    let b = Backend::embedded();
    let open = b.emq(&["dashboard", "--bind", "0.0.0.0:0"]);
    assert_exit(&open, 1);
    assert!(stderr(&open).contains("without authentication"), "{}", stderr(&open));

    let d = Dashboard::start(&b, &["--auth-token", "s3cret"]);
    assert_eq!(d.get("/").status, 401);
    assert_eq!(
        d.request("GET", "/", &[("Authorization", "Bearer nope")], None).status,
        401
    );
    assert_eq!(
        d.request("GET", "/", &[("Authorization", "Bearer s3cret")], None)
            .status,
        200
    );
    let login = d.get("/?token=s3cret");
    assert_eq!((login.status, login.header("location")), (303, Some("/")));
    let cookie = login.header("set-cookie").unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"),
        "{cookie}"
    );
    let kept = cookie.split(';').next().unwrap();
    assert!(d.get("/").header("www-authenticate").unwrap().starts_with("Bearer"));
    let deep = d.get("/queues/x?state=dead&token=s3cret");
    assert_eq!(
        deep.header("location"),
        Some("/queues/x?state=dead"),
        "the page kept, the token dropped"
    );
    assert_eq!(
        d.get("//evil.example/?token=s3cret").header("location"),
        Some("/"),
        "never off the site"
    );
    assert_eq!(d.request("GET", "/", &[("Cookie", kept)], None).status, 200);
    assert_eq!(
        d.post("/queues/x/pause", "").status,
        401,
        "no action before authentication"
    );

    let basic = Dashboard::start(&b, &["--auth-user", "u", "--auth-password", "p"]);
    let challenge = basic.get("/");
    assert_eq!(challenge.status, 401);
    assert!(challenge.header("www-authenticate").unwrap().starts_with("Basic"));
    assert_eq!(
        basic
            .request("GET", "/", &[("Authorization", "Basic dTpw")], None)
            .status,
        200
    );
    assert_eq!(
        basic
            .request("GET", "/", &[("Authorization", "Basic dTpx")], None)
            .status,
        401
    );
}

// ---------------------------------------------------------------------------------------------
// a real browser: Debian's chromium, driven over WebDriver by Debian's chromedriver

/// The WebDriver element reference's key.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// A headless Chromium session through a chromedriver of its own; both stopped when dropped.
struct Browser {
    driver: std::process::Child,
    addr: SocketAddr,
    session: String,
    _profile: tempfile::TempDir,
}

impl Browser {
    fn start() -> Browser {
        let driver_bin = std::env::var("EMQ_TEST_CHROMEDRIVER").unwrap_or_else(|_| "/usr/bin/chromedriver".into());
        let chromium = std::env::var("EMQ_TEST_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        for bin in [&driver_bin, &chromium] {
            assert!(
                std::path::Path::new(bin).exists(),
                "no {bin}: the browser tests need Debian's chromium and chromium-driver \
                 (apt-get install chromium chromium-driver; tools/test.sh installs them)"
            );
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let driver = std::process::Command::new(&driver_bin)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
        wait_until(Duration::from_secs(20), "chromedriver answers", || {
            TcpStream::connect(addr).is_ok() && http(addr, "GET", "/status", &[], None).status == 200
        });
        let profile = tempfile::tempdir().unwrap();
        let args = [
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--disable-dev-shm-usage",
            "--window-size=1280,900",
        ];
        let mut args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        args.push(format!("--user-data-dir={}", profile.path().display()));
        let caps = serde_json::json!({ "capabilities": { "alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": { "binary": chromium, "args": args },
        } } });
        let mut b = Browser {
            driver,
            addr,
            session: String::new(),
            _profile: profile,
        };
        let created = b.call("POST", "/session", Some(caps));
        b.session = created["sessionId"].as_str().expect("a WebDriver session").to_string();
        b
    }

    /// One WebDriver call: its reply's `value` (a WebDriver error fails the test, naming it).
    fn call(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> serde_json::Value {
        let (status, v) = self.try_call(method, path, body);
        assert_eq!(status, 200, "WebDriver {method} {path}: {v}");
        v
    }

    fn try_call(&self, method: &str, path: &str, body: Option<serde_json::Value>) -> (u16, serde_json::Value) {
        let text = body.map(|b| b.to_string()).unwrap_or_default();
        let r = exchange(self.addr, method, path, &[("Content-Type", "application/json")], &text);
        let v: serde_json::Value = serde_json::from_str(&r.body).unwrap_or(serde_json::Value::Null);
        (r.status, v["value"].clone())
    }

    fn path(&self, rest: &str) -> String {
        format!("/session/{}{rest}", self.session)
    }

    fn open(&self, url: &str) {
        self.call("POST", &self.path("/url"), Some(serde_json::json!({ "url": url })));
    }

    /// The element `css` selects, if any.
    fn find(&self, css: &str) -> Option<String> {
        let body = serde_json::json!({ "using": "css selector", "value": css });
        let (status, v) = self.try_call("POST", &self.path("/element"), Some(body));
        (status == 200).then(|| v[ELEMENT].as_str().unwrap().to_string())
    }

    /// The element `css` selects, waited for up to 10 s (a click's page may still be loading).
    #[track_caller]
    fn element(&self, css: &str) -> String {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(e) = self.find(css) {
                return e;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "no element {css} on the page within 10 s"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn text(&self, css: &str) -> String {
        let e = self.element(css);
        self.call("GET", &self.path(&format!("/element/{e}/text")), None)
            .as_str()
            .unwrap()
            .to_string()
    }

    fn click(&self, css: &str) {
        let e = self.element(css);
        self.call(
            "POST",
            &self.path(&format!("/element/{e}/click")),
            Some(serde_json::json!({})),
        );
    }

    fn script(&self, js: &str) -> serde_json::Value {
        let body = serde_json::json!({ "script": js, "args": [] });
        self.call("POST", &self.path("/execute/sync"), Some(body))
    }

    /// Whether a JavaScript dialog (an `alert`) is open.
    fn alert_open(&self) -> bool {
        self.try_call("GET", &self.path("/alert/text"), None).0 == 200
    }

    /// Saves a screenshot of the page as `name`.png under $EMQ_DASHBOARD_SCREENSHOTS, when set
    /// (README's pictures are made so: `EMQ_DASHBOARD_SCREENSHOTS=docs/dashboard`).
    fn screenshot(&self, name: &str) {
        let png = self.call("GET", &self.path("/screenshot"), None);
        let bytes = base64_decode(png.as_str().unwrap());
        assert!(bytes.starts_with(b"\x89PNG"), "a PNG");
        if let Ok(dir) = std::env::var("EMQ_DASHBOARD_SCREENSHOTS") {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").join(dir);
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join(format!("{name}.png")), bytes).unwrap();
        }
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let _ = self.try_call("DELETE", &self.path(""), None);
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let clean: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, c)| n | (u32::from(value(*c)) << (18 - 6 * i)));
        for i in 0..chunk.len() - 1 {
            out.push((n >> (16 - 8 * i)) as u8);
        }
    }
    out
}

/// Claims up to `n` jobs through the library and settles the one named `id`: dead with `reason`,
/// else completed (the others claimed stay held).
fn claim_and_settle(l: &common::Lib, qn: &echomq::QueueName, n: u32, id: &str, reason: Option<&str>) {
    l.rt.block_on(async {
        let claimed = l
            .store
            .claim(
                qn,
                echomq::store::ClaimRequest::new(n, Duration::from_secs(30)).max_attempts(3),
            )
            .await
            .unwrap();
        let j = claimed.iter().find(|j| j.id.as_str() == id).expect("the job claimed");
        match reason {
            Some(r) => l
                .store
                .discard(qn, &j.id, j.token, &echomq::store::DiscardRequest::new(r))
                .await
                .map(drop),
            None => l
                .store
                .complete(
                    qn,
                    &echomq::store::Completion::new(j.id.clone(), j.token),
                    SettleOptions::default(),
                )
                .await
                .map(drop),
        }
        .unwrap();
    });
}

#[test]
fn in_a_browser_counts_go_live_a_dead_job_is_retried_a_running_one_cancelled_and_payloads_are_text() {
    let b = Backend::embedded();
    let q = queue("browser");
    // one dead job first: claimed alone and discarded
    b.enqueue(&q, "d", &["--id", "doomed"]);
    let l = b.lib();
    let qn = common::qn(&q);
    claim_and_settle(&l, &qn, 1, "doomed", Some("it broke"));
    // scheduled, so no worker below runs them (a finished row keeps no payload)
    b.enqueue(&q, "<script>alert(1)</script>", &["--id", "hostile", "--delay", "1h"]);
    b.enqueue(
        &q,
        r#"{"report":"daily","pages":[1,2,3]}"#,
        &["--id", "report-7", "--delay", "1h", "--priority", "3"],
    );
    add_nightly(&b, &q);
    let d = Dashboard::start(&b, &[]);
    let web = Browser::start();
    let at = |path: &str| format!("http://{}{path}", d.addr);
    let pending = format!("td[data-q=\"{q}\"][data-k=\"pending\"]");

    // the overview, then a new job shows up in it without a reload
    web.open(&at("/"));
    assert_eq!(web.text(&pending), "0");
    assert_eq!(web.text(&format!("td[data-q=\"{q}\"][data-k=\"dead\"]")), "1");
    web.screenshot("overview");
    web.script("window.__same_page = true;");
    b.enqueue(&q, "one more", &[]);
    wait_until(Duration::from_secs(15), "the overview counts the new job", || {
        web.text(&pending) == "1"
    });
    assert_eq!(web.script("return window.__same_page === true;"), true, "no reload");
    // and its chart takes a job completed meanwhile, still without a reload
    let chart = format!("return document.querySelector('svg.chart[data-q=\"{q}\"]').getAttribute('aria-label');");
    assert!(
        web.script(&chart).as_str().unwrap().contains(" 0 completed"),
        "{}",
        web.script(&chart)
    );
    let next =
        l.rt.block_on(l.store.list(&qn, JobState::Pending, None, 1))
            .unwrap()
            .ids;
    claim_and_settle(&l, &qn, 1, next[0].as_str(), None);
    wait_until(
        Duration::from_secs(30),
        "the overview's chart counts the completed job",
        || web.script(&chart).as_str().is_some_and(|t| t.contains(" 1 completed")),
    );
    assert_eq!(web.script("return window.__same_page === true;"), true, "no reload");

    // the queue's dead tab, the job, Retry: then a worker runs it to completed
    web.open(&at(&format!("/queues/{q}?state=dead")));
    web.screenshot("queue");
    web.click("a[href$=\"/jobs/doomed\"]");
    assert!(web.text("dl").contains("it broke"));
    web.click("form[action$=\"/doomed/retry\"] button");
    assert!(web.text(".msg").contains("back to ready"));
    let worker = b.work(&q, "cat >/dev/null", &[]);
    wait_until(Duration::from_secs(30), "the retried job completed", || {
        web.open(&at(&format!("/queues/{q}/jobs/doomed")));
        web.text("dl").contains("completed")
    });
    worker.stop();

    // a running job cancelled from its page
    b.enqueue(&q, "slow", &["--id", "slow"]);
    let worker = b.work(&q, "sleep 60", &[]);
    wait_until(Duration::from_secs(30), "the slow job runs", || {
        l.job(&q, "slow").is_some_and(|j| j.state == JobState::Active)
    });
    // the worker running it, with the job in hand
    wait_until(
        Duration::from_secs(10),
        "the worker listed with its job in hand",
        || {
            web.open(&at("/workers"));
            // a page loaded before the worker's first registration lists no consumer (no table):
            // load it again rather than wait on that page
            web.find("tbody").is_some()
                && web.text("tbody").contains(&worker.pid().to_string())
                && web.text("td[data-k=\"in_hand\"]") == "1"
        },
    );
    web.screenshot("workers");
    web.open(&at(&format!("/queues/{q}/jobs/slow")));
    assert!(web.text("dl").contains("active"));
    web.screenshot("job");
    web.click("form[action$=\"/slow/cancel\"] button");
    assert!(web.text(".msg").contains("cancel requested"), "{}", web.text(".msg"));
    wait_until(Duration::from_secs(30), "the running job is cancelled", || {
        web.open(&at(&format!("/queues/{q}/jobs/slow")));
        web.text("dl").contains("cancelled")
    });
    worker.stop();

    // a hostile payload is text: shown as typed, run never
    web.open(&at(&format!("/queues/{q}/jobs/hostile")));
    assert_eq!(web.text("pre.payload"), "<script>alert(1)</script>");
    assert!(!web.alert_open(), "no script of the payload ran");
    assert_eq!(web.script("return document.querySelectorAll('main script').length;"), 0);

    // a JSON payload pretty-printed; the schedules
    web.open(&at(&format!("/queues/{q}/jobs/report-7")));
    assert!(web.text("pre.payload").contains("\n  \"report\": \"daily\""));
    web.open(&at(&format!("/queues/{q}/schedules")));
    assert!(web.text("table").contains("nightly"));
    web.screenshot("schedules");
}
