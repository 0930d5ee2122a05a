//! The conformance suite: every case runs against every store, Redis and embedded (see
//! `harness.rs`); what is about the Lua scripts themselves is in `tests/redis_scripts.rs`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod harness;
mod steps;

mod admin;
mod claim;
mod dedup;
mod enqueue;
mod groups;
mod history;
mod inputs;
mod pending_age;
mod priority;
mod promote;
mod rate;
mod recovery;
mod registry;
mod release;
mod results;
mod schedules;
mod settle;

/// Every verb of the closed list has at least one case whose name starts with the verb.
#[test]
fn every_verb_has_a_case() {
    let cases: Vec<&str> = [
        enqueue::CASES,
        dedup::CASES,
        claim::CASES,
        promote::CASES,
        priority::CASES,
        rate::CASES,
        settle::CASES,
        recovery::CASES,
        release::CASES,
        results::CASES,
        schedules::CASES,
        admin::CASES,
        history::CASES,
        groups::CASES,
        registry::CASES,
        inputs::CASES,
        pending_age::CASES,
    ]
    .concat();
    let missing: Vec<&&str> = echomq::store::redis::VERBS
        .iter()
        .filter(|v| !cases.iter().any(|c| c.starts_with(&format!("{v}_"))))
        .collect();
    assert!(missing.is_empty(), "verbs with no conformance case: {missing:?}");
}

/// The embedded store's modules that twin no script (its plumbing). Any other file under
/// `src/store/embedded/` is a verb's twin and must have a script of its name.
const EMBEDDED_SUPPORT: &[&str] = &[
    "checkpoint",
    "common",
    "db",
    "engine",
    "handoff",
    "rate",
    "registry",
    "schedule_common",
    "schema",
    "txn",
];

/// The stems of the files in `dir` (relative to the crate) with extension `ext`.
fn stems(dir: &str, ext: &str) -> std::collections::BTreeSet<String> {
    let dir = format!("{}/{dir}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("read {dir}: {e}"))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == ext))
        .map(|p| p.file_stem().unwrap().to_string_lossy().into_owned())
        .collect()
}

/// Every script has its embedded twin `src/store/embedded/<verb>.rs`, and every twin its script
/// `scripts/<verb>.lua`: one verb keeps one name in every layer.
#[test]
fn every_script_has_an_embedded_twin_and_every_twin_a_script() {
    let scripts: std::collections::BTreeSet<String> =
        stems("scripts", "lua").into_iter().filter(|s| s != "_lib").collect();
    let twins: std::collections::BTreeSet<String> = stems("src/store/embedded", "rs")
        .into_iter()
        .filter(|s| !EMBEDDED_SUPPORT.contains(&s.as_str()))
        .collect();
    assert!(
        scripts.len() >= echomq::store::redis::VERBS.len(),
        "found only {} scripts: is the test reading scripts/?",
        scripts.len()
    );
    let no_twin: Vec<&String> = scripts.difference(&twins).collect();
    let no_script: Vec<&String> = twins.difference(&scripts).collect();
    assert!(
        no_twin.is_empty() && no_script.is_empty(),
        "scripts with no embedded twin (src/store/embedded/<verb>.rs): {no_twin:?}; \
         twins with no script (scripts/<verb>.lua): {no_script:?}"
    );
}
