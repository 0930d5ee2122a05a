//! The conformance suite: every case runs against every store (see `harness.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;

mod admin;
mod claim;
mod enqueue;
mod inputs;
mod promote;
mod recovery;
mod settle;

/// Every verb of the closed list has at least one case whose name starts with the verb.
#[test]
fn every_verb_has_a_case() {
    let cases: Vec<&str> = [
        enqueue::CASES,
        claim::CASES,
        promote::CASES,
        settle::CASES,
        recovery::CASES,
        admin::CASES,
        inputs::CASES,
    ]
    .concat();
    let missing: Vec<&&str> = echomq::store::redis::VERBS
        .iter()
        .filter(|v| !cases.iter().any(|c| c.starts_with(&format!("{v}_"))))
        .collect();
    assert!(missing.is_empty(), "verbs with no conformance case: {missing:?}");
}
