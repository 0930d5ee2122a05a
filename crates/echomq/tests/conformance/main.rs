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
mod kinds;
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
mod spans;

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
        kinds::CASES,
        pending_age::CASES,
        spans::CASES,
    ]
    .concat();
    let missing: Vec<&&str> = echomq::store::redis::VERBS
        .iter()
        .filter(|v| !cases.iter().any(|c| c.starts_with(&format!("{v}_"))))
        .collect();
    assert!(missing.is_empty(), "verbs with no conformance case: {missing:?}");
}

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

/// The embedded store runs the scripts themselves: no Rust file under it is named after a script
/// (a verb restated in Rust beside its script would be a second implementation to keep equal).
#[test]
fn no_embedded_file_restates_a_script() {
    // the verbs' scripts (the library's files are in scripts/lib, the templates in scripts/src)
    let scripts: std::collections::BTreeSet<String> = stems("scripts", "lua");
    assert!(
        scripts.len() >= echomq::store::redis::VERBS.len(),
        "found only {} scripts: is the test reading scripts/?",
        scripts.len()
    );
    for dir in ["src/store/embedded", "src/store/embedded/engine"] {
        let named: Vec<String> = stems(dir, "rs").intersection(&scripts).cloned().collect();
        assert!(named.is_empty(), "{dir} has files named after scripts: {named:?}");
    }
}
