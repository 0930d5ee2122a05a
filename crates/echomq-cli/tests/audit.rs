//! The crash audit (`emq audit`, built with the `audit` feature: a tool for this project, not a
//! command users meet): its refusals, and a short run that accounts for every job. Its longer runs
//! (the worker, Redis and failover kills) run in `tools/test.sh`.
#![cfg(feature = "audit")]
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::process::Output;

use common::{assert_error_naming, assert_exit, stderr, stdout};

/// `emq audit ARGS` with no store named: the audit makes its own.
fn audit(args: &[&str], env_url: Option<&str>) -> Output {
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_emq"));
    c.arg("audit")
        .args(args)
        .env_remove("EMQ_URL")
        .stdin(std::process::Stdio::null());
    if let Some(u) = env_url {
        c.env("EMQ_URL", u);
    }
    c.output().unwrap()
}

#[test]
fn an_audit_refuses_a_store_url_and_redis_kills_on_the_embedded_store() {
    let o = audit(&["--jobs", "1"], Some("redis://user:secret@127.0.0.1:1"));
    assert_error_naming(&o, "runs on a store of its own");
    assert!(!stderr(&o).contains("secret"), "{}", stderr(&o));
    assert_error_naming(
        &audit(&["--redis-kills", "1"], None),
        "--redis-kills needs --store redis",
    );
    assert_error_naming(
        &audit(&["--zombie", "--workers", "1"], None),
        "--zombie needs at least 2 workers",
    );
    for store in ["embedded", "redis"] {
        assert_error_naming(
            &audit(&["--store", store, "--failovers", "1"], None),
            "--failovers needs --store redis-cluster",
        );
        assert_error_naming(
            &audit(&["--store", store, "--wait", "1"], None),
            "--wait needs --store redis-cluster",
        );
    }
    assert_error_naming(
        &audit(&["--store", "redis-cluster", "--redis-kills", "1"], None),
        "--redis-kills needs --store redis",
    );
}

#[test]
fn an_audit_through_a_worker_kill_and_a_frozen_worker_accounts_for_every_job() {
    let o = audit(
        &[
            "--jobs",
            "300",
            "--workers",
            "2",
            "--worker-kills",
            "1",
            "--zombie",
            "--lease",
            "1s",
        ],
        None,
    );
    assert_exit(&o, 0);
    let figures: serde_json::Value = serde_json::from_str(stdout(&o).trim()).unwrap();
    assert_eq!(figures["store"], "embedded");
    assert_eq!(figures["enqueued"], 300);
    assert_eq!(figures["lost"], 0, "{figures}");
    assert_eq!(figures["double_settles"], 0, "{figures}");
    assert_eq!(
        figures["completed"].as_u64().unwrap() + figures["dead"].as_u64().unwrap(),
        300,
        "{figures}"
    );
    assert_eq!(figures["worker_kills"], 1);
    assert_eq!(figures["zombie"], true);
    assert!(stderr(&o).contains("double settles"), "the table: {}", stderr(&o));
}
