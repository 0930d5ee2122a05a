//! Bad input (DESIGN §2, §7): every invalid name, option and payload is refused with a typed error
//! naming the value, before anything is written; a script that fails validation writes nothing;
//! and every key a script builds uses a suffix the keyspace lists.

use std::time::Duration;

use echomq::error::NameKind;
use echomq::keyspace::{METRIC_EVENTS, SUFFIXES};
use echomq::store::redis::RedisStore;
use echomq::store::{LimitTarget, SettleOptions, Settled, StalledPolicy, Store};
use echomq::{Error, GroupName, JobId, JobState, NewJob, QueueName};

use crate::admin::{group, id, jobs, queue_keys, sizes};
use crate::harness::Ctx;

const LEASE: Duration = Duration::from_secs(30);
const PLAIN: SettleOptions = SettleOptions {
    retain: 0,
    record: false,
};

/// Names refused as queue names, group names and job ids alike.
fn bad_names() -> Vec<String> {
    [
        String::new(),
        "x".repeat(129),
        "a b".into(),
        " lead".into(),
        "a{b".into(),
        "q}".into(),
        "{q}".into(),
        "é".into(),
        "naïve".into(),
        "tab\t".into(),
        "new\nline".into(),
        "a/b".into(),
        "a*".into(),
    ]
    .into()
}

/// Every key of the queue with its serialized value (`DUMP`): equal snapshots mean nothing was
/// written (a counter, a flag, a wake token included).
async fn snapshot(ctx: &Ctx) -> Vec<(String, Vec<u8>)> {
    let (mut conn, _, _) = ctx.probe.redis();
    let mut out = Vec::new();
    for key in queue_keys(ctx).await {
        let dump: Vec<u8> = redis::cmd("DUMP").arg(&key).query_async(&mut conn).await.unwrap();
        out.push((key, dump));
    }
    out
}

/// A store of the case's kind that accepts payloads of at most 16 bytes.
async fn small_store(ctx: &Ctx) -> RedisStore {
    let (_, _, url) = ctx.probe.redis();
    RedisStore::open(url).await.unwrap().with_payload_limit(16)
}

fn assert_invalid_name(err: &Error, want_kind: NameKind, bad: &str) {
    match err {
        Error::InvalidName { kind, value, .. } => {
            assert_eq!(*kind, want_kind, "{err}");
            assert_eq!(value, bad, "the error names the value");
        }
        other => panic!("{bad:?}: expected InvalidName, got {other:?}"),
    }
    assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
}

fn assert_invalid_option(err: &Error, want_field: &str, want_value: &str) {
    match err {
        Error::InvalidOption { field, value, .. } => {
            assert_eq!(*field, want_field, "{err}");
            assert_eq!(value, want_value, "{err}");
        }
        other => panic!("expected InvalidOption {want_field}, got {other:?}"),
    }
    assert!(
        err.to_string().contains(&format!("{want_field} = {want_value}")),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// names: a store takes only validated names, so an invalid one never reaches it

pub async fn enqueue_refuses_invalid_queue_names(ctx: &Ctx) {
    for bad in bad_names() {
        let err = QueueName::new(bad.clone()).unwrap_err();
        assert_invalid_name(&err, NameKind::Queue, &bad);
        assert!(bad.parse::<QueueName>().is_err());
    }
    assert!(
        QueueName::new("x".repeat(128)).is_ok(),
        "128 bytes is the limit, inclusive"
    );
    assert!(QueueName::new("a.b_c:d-E9").is_ok());
    assert_eq!(sizes(ctx).await, (0, 0, 0, 0));
}

pub async fn genqueue_refuses_invalid_group_names(ctx: &Ctx) {
    for bad in bad_names() {
        let err = GroupName::new(bad.clone()).unwrap_err();
        assert_invalid_name(&err, NameKind::Group, &bad);
    }
    assert!(GroupName::new("x".repeat(128)).is_ok());
    // digits-only group names are fine (only caller ids reserve them)
    let g = GroupName::new("42").unwrap();
    ctx.store.genqueue(&ctx.q, &g, &jobs(1)).await.unwrap();
    assert_eq!(sizes(ctx).await, (1, 0, 0, 0));
}

pub async fn enqueue_refuses_invalid_caller_ids(ctx: &Ctx) {
    for bad in bad_names() {
        assert_invalid_name(&JobId::new(bad.clone()).unwrap_err(), NameKind::JobId, &bad);
        assert_invalid_name(&JobId::parse(bad.clone()).unwrap_err(), NameKind::JobId, &bad);
    }
    for digits in ["1", "123", "0007"] {
        let err = JobId::new(digits).unwrap_err();
        assert_invalid_name(&err, NameKind::JobId, digits);
        assert!(err.to_string().contains("digits-only"), "{err}");
        // a reference to an existing (generated) id is fine
        assert!(JobId::parse(digits).is_ok());
    }
    assert!(JobId::new("x".repeat(128)).is_ok());
    assert!(JobId::new("order-17").is_ok());
    assert!(JobId::new("1e3").is_ok(), "one non-digit is enough");
    assert!(queue_keys(ctx).await.is_empty());
}

// ---------------------------------------------------------------------------------------------
// payloads

pub async fn enqueue_refuses_an_oversized_payload_and_writes_nothing(ctx: &Ctx) {
    let small = small_store(ctx).await;
    let batch = [
        NewJob::new(vec![b'a'; 16]),
        NewJob::new(vec![b'b'; 17]),
        NewJob::new("c"),
    ];
    let err = small.enqueue(&ctx.q, &batch).await.unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    assert!(
        err.to_string().contains("17") && err.to_string().contains("16"),
        "{err}"
    );
    let err = small.genqueue(&ctx.q, &group("g"), &batch).await.unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    assert!(queue_keys(ctx).await.is_empty(), "nothing written");
    assert!(
        !ctx.store.queues().await.unwrap().contains(&ctx.q),
        "not even the registration"
    );

    let ok = small.enqueue(&ctx.q, &batch[..1]).await.unwrap();
    assert_eq!(ok[0].id().as_str(), "1", "a payload at the limit is accepted");
}

pub async fn complete_refuses_an_oversized_output(ctx: &Ctx) {
    let small = small_store(ctx).await;
    small.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = small.claim(&ctx.q, 1, LEASE, 3, PLAIN).await.unwrap().remove(0);
    let before = snapshot(ctx).await;
    let retain = SettleOptions {
        retain: 10,
        record: true,
    };
    let err = small
        .complete(&ctx.q, &c.id, c.attempts, Some(&[b'o'; 17]), retain)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    let many = [echomq::store::Completion {
        id: c.id.clone(),
        token: c.attempts,
        output: Some(vec![b'o'; 17]),
    }];
    let err = small.complete_many(&ctx.q, &many, retain).await.unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    let done = small
        .complete(&ctx.q, &c.id, c.attempts, Some(&[b'o'; 16]), retain)
        .await;
    assert_eq!(done.unwrap(), Settled::Ok);
}

pub async fn update_data_refuses_an_oversized_payload(ctx: &Ctx) {
    let small = small_store(ctx).await;
    small.enqueue(&ctx.q, &[NewJob::new("first")]).await.unwrap();
    let c = small.claim(&ctx.q, 1, LEASE, 3, PLAIN).await.unwrap().remove(0);
    let before = snapshot(ctx).await;
    let err = small
        .update_data(&ctx.q, &c.id, c.attempts, &[b'p'; 17])
        .await
        .unwrap_err();
    assert!(matches!(err, Error::PayloadTooLarge { size: 17, limit: 16 }), "{err:?}");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    assert_eq!(ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap().payload, b"first");
}

// ---------------------------------------------------------------------------------------------
// options

pub async fn enqueue_refuses_max_attempts_zero_and_writes_nothing(ctx: &Ctx) {
    let batch = [
        NewJob::new("a"),
        NewJob::new("b").with_max_attempts(0),
        NewJob::new("c"),
    ];
    let err = ctx.store.enqueue(&ctx.q, &batch).await.unwrap_err();
    assert_invalid_option(&err, "max_attempts", "0");
    let err = ctx.store.genqueue(&ctx.q, &group("g"), &batch).await.unwrap_err();
    assert_invalid_option(&err, "max_attempts", "0");
    assert!(queue_keys(ctx).await.is_empty(), "nothing written");
    let ok = ctx.store.enqueue(&ctx.q, &batch[..1]).await.unwrap();
    assert_eq!(ok[0].id().as_str(), "1");
}

pub async fn claim_refuses_n_zero_a_zero_lease_and_max_attempts_zero(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(2)).await.unwrap();
    let before = snapshot(ctx).await;
    let err = ctx.store.claim(&ctx.q, 0, LEASE, 3, PLAIN).await.unwrap_err();
    assert_invalid_option(&err, "n", "0");
    let err = ctx.store.claim(&ctx.q, 1, Duration::ZERO, 3, PLAIN).await.unwrap_err();
    assert_invalid_option(&err, "lease", "0");
    let err = ctx.store.claim(&ctx.q, 1, LEASE, 0, PLAIN).await.unwrap_err();
    assert_invalid_option(&err, "max_attempts", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    assert_eq!(ctx.store.get(&ctx.q, &id("1")).await.unwrap().unwrap().attempts, 0);
}

pub async fn extend_lock_refuses_a_zero_lease(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = ctx.store.claim(&ctx.q, 1, LEASE, 3, PLAIN).await.unwrap().remove(0);
    let before = snapshot(ctx).await;
    let err = ctx
        .store
        .extend_lock(&ctx.q, &c.id, c.attempts, Duration::ZERO)
        .await
        .unwrap_err();
    assert_invalid_option(&err, "lease", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
}

pub async fn retry_refuses_max_attempts_zero(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = ctx.store.claim(&ctx.q, 1, LEASE, 3, PLAIN).await.unwrap().remove(0);
    let before = snapshot(ctx).await;
    let err = ctx
        .store
        .retry(&ctx.q, &c.id, c.attempts, Duration::ZERO, 0, "e", PLAIN)
        .await
        .unwrap_err();
    assert_invalid_option(&err, "max_attempts", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
    assert_eq!(
        ctx.store.get(&ctx.q, &c.id).await.unwrap().unwrap().state,
        JobState::Active
    );
}

pub async fn list_refuses_a_zero_limit(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    for state in [JobState::Pending, JobState::Dead] {
        let err = ctx.store.list(&ctx.q, state, 0, 0).await.unwrap_err();
        assert_invalid_option(&err, "limit", "0");
    }
    let err = ctx.store.list(&ctx.q, JobState::Pending, 0, 10_001).await.unwrap_err();
    assert_invalid_option(&err, "limit", "10001");
    assert_eq!(
        ctx.store
            .list(&ctx.q, JobState::Pending, 0, 10_000)
            .await
            .unwrap()
            .len(),
        1
    );
}

pub async fn set_group_limit_refuses_zero(ctx: &Ctx) {
    ctx.store.genqueue(&ctx.q, &group("g"), &jobs(2)).await.unwrap();
    let before = snapshot(ctx).await;
    for target in [LimitTarget::Group(group("g")), LimitTarget::Default] {
        let err = ctx.store.set_group_limit(&ctx.q, &target, 0).await.unwrap_err();
        assert_invalid_option(&err, "limit", "0");
    }
    assert_eq!(snapshot(ctx).await, before, "nothing written");
}

pub async fn redrive_refuses_zero_extra_attempts(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let c = ctx.store.claim(&ctx.q, 1, LEASE, 3, PLAIN).await.unwrap().remove(0);
    ctx.store.discard(&ctx.q, &c.id, c.attempts, "x", PLAIN).await.unwrap();
    let before = snapshot(ctx).await;
    let err = ctx.store.redrive(&ctx.q, &c.id, 0).await.unwrap_err();
    assert_invalid_option(&err, "extra", "0");
    let err = ctx.store.redrive_all(&ctx.q, 0).await.unwrap_err();
    assert_invalid_option(&err, "extra", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
}

pub async fn reap_promote_and_sweep_stalled_refuse_zero_limits(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    let later = [NewJob::new("later").with_delay(Duration::from_millis(1))];
    ctx.store.enqueue(&ctx.q, &later).await.unwrap();
    ctx.store
        .claim(&ctx.q, 1, Duration::from_millis(1), 3, PLAIN)
        .await
        .unwrap();
    let before = snapshot(ctx).await;
    assert_invalid_option(&ctx.store.reap(&ctx.q, 0).await.unwrap_err(), "limit", "0");
    assert_invalid_option(&ctx.store.promote(&ctx.q, 0).await.unwrap_err(), "limit", "0");
    let zero_limit = StalledPolicy {
        max_stalled: 1,
        limit: 0,
    };
    let err = ctx.store.sweep_stalled(&ctx.q, zero_limit).await.unwrap_err();
    assert_invalid_option(&err, "limit", "0");
    let zero_stalls = StalledPolicy {
        max_stalled: 0,
        limit: 10,
    };
    let err = ctx.store.sweep_stalled(&ctx.q, zero_stalls).await.unwrap_err();
    assert_invalid_option(&err, "max_stalled", "0");
    assert_eq!(snapshot(ctx).await, before, "nothing written");
}

// ---------------------------------------------------------------------------------------------
// a script that fails validation writes nothing

fn script_body(verb: &str) -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/");
    let lib = std::fs::read_to_string(format!("{dir}_lib.lua")).unwrap();
    let own = std::fs::read_to_string(format!("{dir}{verb}.lua")).unwrap();
    format!("{lib}\n{own}")
}

/// Runs the enqueue (group `None`) or genqueue script raw with these per-job ARGV quadruples,
/// declaring `n` jobs.
async fn eval_new_jobs(
    ctx: &Ctx,
    group: Option<&str>,
    n: &str,
    jobs: &[[&str; 4]],
) -> redis::RedisResult<redis::Value> {
    let (mut conn, base, _) = ctx.probe.redis();
    let verb = if group.is_some() { "genqueue" } else { "enqueue" };
    let second = match group {
        Some(g) => format!("{base}lane:{g}"),
        None => format!("{base}pending"),
    };
    let mut cmd = redis::cmd("EVAL");
    cmd.arg(script_body(verb)).arg(7);
    for suffix in ["id", "", "scheduled", "ring", "groups", "wake", "obliterating"] {
        if suffix.is_empty() {
            cmd.arg(&second);
        } else {
            cmd.arg(format!("{base}{suffix}"));
        }
    }
    cmd.arg(base);
    if let Some(g) = group {
        cmd.arg(g);
    }
    cmd.arg(n);
    for job in jobs {
        for a in job {
            cmd.arg(*a);
        }
    }
    cmd.query_async(&mut conn).await
}

pub async fn enqueue_script_that_fails_validation_writes_nothing(ctx: &Ctx) {
    ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap(); // id 1: the counter exists
    ctx.store.genqueue(&ctx.q, &group("g"), &jobs(1)).await.unwrap(); // 2
    ctx.store
        .enqueue(&ctx.q, &[NewJob::new("x").with_id(JobId::new("taken").unwrap())])
        .await
        .unwrap(); // 3
    let before = snapshot(ctx).await;

    let ok = ["", "0", "", "a"];
    let fresh = ["fresh-id", "0", "", "b"];
    let bad_delay = ["", "abc", "", "b"];
    let negative_delay = ["", "-5", "", "b"];
    let fractional_delay = ["", "1.5", "", "b"];
    let bad_max = ["", "0", "0", "b"];
    let text_max = ["", "0", "many", "b"];
    let dup = ["taken", "0", "", "b"];
    // (the refusal's text, the group for genqueue, the declared n, the per-job ARGV)
    type Case<'a> = (&'a str, Option<&'a str>, &'a str, Vec<[&'a str; 4]>);
    let malformed: Vec<Case> = vec![
        ("delay of job 2", None, "3", vec![ok, bad_delay, ok]),
        ("delay of job 2", Some("g"), "3", vec![fresh, bad_delay, ok]),
        ("delay of job 3", None, "3", vec![ok, dup, negative_delay]),
        ("delay of job 2", None, "2", vec![ok, fractional_delay]),
        ("max_attempts of job 2", None, "3", vec![fresh, bad_max, ok]),
        ("max_attempts of job 3", Some("g"), "3", vec![ok, ok, text_max]),
        ("batch shape", None, "3", vec![ok, ok]),
        ("batch shape", None, "0", vec![]),
        ("batch shape", None, "x", vec![ok]),
        ("batch shape", None, "1001", vec![ok]),
    ];
    for (what, group, n, batch) in malformed {
        let err = eval_new_jobs(ctx, group, n, &batch).await.unwrap_err();
        assert_eq!(err.code(), Some("EMQARGS"), "{what}: {err}");
        assert!(err.to_string().contains(what), "{what}: {err}");
        assert_eq!(snapshot(ctx).await, before, "{what}: the failed script wrote nothing");
    }
    assert!(ctx.store.get(&ctx.q, &id("fresh-id")).await.unwrap().is_none());

    // the same script with well-formed arguments does write (the refusals above were not vacuous)
    eval_new_jobs(ctx, None, "2", &[ok, fresh]).await.unwrap();
    assert_eq!(sizes(ctx).await, (5, 0, 0, 0));
    let next = ctx.store.enqueue(&ctx.q, &jobs(1)).await.unwrap();
    assert_eq!(
        next[0].id().as_str(),
        "6",
        "the id counter moved only for the jobs written"
    );
}

// ---------------------------------------------------------------------------------------------
// the keyspace: every key a script builds is the base plus a listed suffix

/// True when `suffix` (what follows `emq:{q}:`) is listed: exactly, or as a listed prefix ending in
/// `:` followed by a name (a metrics event must be one of the counted events).
fn suffix_is_listed(suffix: &str) -> bool {
    SUFFIXES.iter().any(|s| {
        if suffix == *s {
            return true;
        }
        match suffix.strip_prefix(s) {
            Some(rest) if s.ends_with(':') && !rest.is_empty() => {
                *s != "metrics:" || rest.starts_with('<') || METRIC_EVENTS.contains(&rest)
            }
            _ => false,
        }
    })
}

/// `(identifier, literal)` for every `identifier .. 'literal'` (or "literal") in a line of Lua code.
fn concatenations(code: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("..") {
        let left = rest[..at].trim_end();
        let ident: String = left
            .chars()
            .rev()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '[' | ']'))
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        let right = rest[at + 2..].trim_start();
        if let Some(q) = right.chars().next().filter(|c| *c == '\'' || *c == '"') {
            if let Some(end) = right[1..].find(q) {
                out.push((ident, right[1..=end].to_string()));
            }
        }
        rest = &rest[at + 2..];
    }
    out
}

#[test]
fn every_key_suffix_a_script_builds_is_in_the_keyspace() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts");
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "lua"))
        .collect();
    files.sort();
    assert!(
        files.len() >= 27,
        "every verb's script and _lib.lua: found {}",
        files.len()
    );
    let looks_like_a_key =
        |lit: &str| !lit.is_empty() && lit.chars().all(|c| c.is_ascii_lowercase() || matches!(c, '_' | ':'));
    let (mut built, mut documented) = (0, 0);
    let mut unlisted = Vec::new();
    for path in &files {
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        let text = std::fs::read_to_string(path).unwrap();
        // names a script binds to the queue base ARGV[1] (besides the conventional base / p)
        let mut bases = vec!["base".to_string(), "p".to_string(), "ARGV[1]".to_string()];
        for line in text.lines() {
            if let Some((lhs, rhs)) = line.trim().strip_prefix("local ").and_then(|l| l.split_once('=')) {
                if rhs.trim().starts_with("ARGV[1]") {
                    bases.push(lhs.split(',').next().unwrap().trim().to_string());
                }
            }
        }
        for (n, line) in text.lines().enumerate() {
            let (code, comment) = line.split_once("--").unwrap_or((line, ""));
            for (ident, lit) in concatenations(code) {
                if !looks_like_a_key(&lit) {
                    continue; // a message ("' in active'", "': '"), not a key
                }
                if !bases.contains(&ident) {
                    unlisted.push(format!(
                        "{name}:{}: `{ident} .. '{lit}'` builds a key from something not the queue base",
                        n + 1
                    ));
                    continue;
                }
                built += 1;
                if !suffix_is_listed(&lit) {
                    unlisted.push(format!("{name}:{}: suffix '{lit}'", n + 1));
                }
            }
            // the header contract names keys as emq:{q}:<suffix>
            let mut rest = comment;
            while let Some(at) = rest.find("emq:{q}:") {
                rest = &rest[at + "emq:{q}:".len()..];
                let suffix: String = rest
                    .chars()
                    .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | ':' | '<' | '>'))
                    .collect();
                if suffix.is_empty() {
                    continue; // the base itself
                }
                documented += 1;
                if !suffix_is_listed(&suffix) {
                    unlisted.push(format!("{name}:{}: documented key emq:{{q}}:{suffix}", n + 1));
                }
            }
        }
    }
    assert!(
        built >= 50,
        "the scan found only {built} key builds: is it still reading the scripts?"
    );
    assert!(documented >= 50, "the scan found only {documented} documented keys");
    assert!(
        unlisted.is_empty(),
        "keys not in keyspace::SUFFIXES:\n{}",
        unlisted.join("\n")
    );
}

crate::conformance!(
    enqueue_refuses_invalid_queue_names,
    genqueue_refuses_invalid_group_names,
    enqueue_refuses_invalid_caller_ids,
    enqueue_refuses_an_oversized_payload_and_writes_nothing,
    complete_refuses_an_oversized_output,
    update_data_refuses_an_oversized_payload,
    enqueue_refuses_max_attempts_zero_and_writes_nothing,
    claim_refuses_n_zero_a_zero_lease_and_max_attempts_zero,
    extend_lock_refuses_a_zero_lease,
    retry_refuses_max_attempts_zero,
    list_refuses_a_zero_limit,
    set_group_limit_refuses_zero,
    redrive_refuses_zero_extra_attempts,
    reap_promote_and_sweep_stalled_refuse_zero_limits,
    enqueue_script_that_fails_validation_writes_nothing,
);
