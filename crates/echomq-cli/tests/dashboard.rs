//! `emq dashboard` over real HTTP on loopback, on both stores: every page and action, bad input
//! (an unknown queue or job is a 404, a POST without the CSRF token is refused), escaping, the
//! read-only mode, and the authentication a non-loopback bind needs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use common::{assert_exit, on_both_stores, queue_named, stderr, Backend};
use echomq::store::SettleOptions;
use echomq::JobState;

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

/// One HTTP/1.1 request on a connection of its own (`Connection: close`), the reply read whole.
fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], form: Option<&str>) -> Reply {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    let body = form.unwrap_or("");
    if form.is_some() {
        req.push_str("Content-Type: application/x-www-form-urlencoded\r\n");
    }
    req.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    s.write_all(req.as_bytes()).unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let mut lines = head.lines();
    let status = lines.next().unwrap().split(' ').nth(1).unwrap().parse().unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    Reply {
        status,
        headers,
        body: body.to_string(),
    }
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
            .claim(&qn, 10, Duration::from_secs(30), 3, SettleOptions::default())
            .await
            .unwrap();
        let doomed = claimed.iter().find(|j| j.id.as_str() == "doomed").unwrap();
        l.store
            .discard(&qn, &doomed.id, doomed.token, "broken", SettleOptions::default())
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
    assert_eq!(cell(&home.body, &q, "pending"), 3);
    assert_eq!(cell(&home.body, &q, "scheduled"), 1);
    assert_eq!(cell(&home.body, &q, "dead"), 1);
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
    assert_exit(
        &b.emq(&[
            "schedule",
            "add",
            &q,
            "nightly",
            "--cron",
            "30 2 * * *",
            "--tz",
            "Europe/Berlin",
        ]),
        0,
    );
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
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    let kept = cookie.split(';').next().unwrap();
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
