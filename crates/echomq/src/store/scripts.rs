//! The Lua scripts, one per verb (`scripts/<verb>.lua`), loaded by SHA. Every script but the
//! self-contained `extend_lock` and `sweep_stalled` gets the library's helpers it uses prepended —
//! only those (and what they use in turn): each `local function` builds its closure on every call,
//! so a script must carry no helper it never calls (see `docs/performance.md`).
//!
//! The library is the files of `scripts/lib/`, one concern each ([`LIB`], in a fixed order): each
//! opens with a header comment (up to its first blank line) stating what it holds, then its
//! helpers, each a `local function emq_…` (or a `local emq_…` value the helpers keep for one
//! script call, as the clock's reading) with the comment above it. A helper calls only helpers
//! declared before it, in its own file or an earlier one (Lua resolves a `local` where it is
//! declared), so the helpers sent keep the library's order.
//!
//! `extend_lock.lua` and `sweep_stalled.lua` are run by a raw `EVAL` of the file too, so each file
//! holds the helpers it uses itself: it is generated from its template (`scripts/src/<verb>.lua`)
//! and the library, and a unit test fails while the file differs from its generation.

/// One verb's script: its name, the body sent with `SCRIPT LOAD` and that body's SHA-1, in two
/// flavours: for a standalone server, and for a Redis Cluster, where the script publishes to shard
/// channels (`SPUBLISH`: the message stays on the master of the queue's slot, where its
/// subscribers listen, instead of crossing the whole cluster's bus; Redis 7.0 and later, which a
/// cluster must run, while a standalone server may be 6.2).
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) name: &'static str,
    body: String,
    #[cfg(feature = "redis")]
    sha: String,
    cluster_body: String,
    #[cfg(feature = "redis")]
    cluster_sha: String,
    /// Whether the script may write (a store that waits for replicas waits after it).
    #[cfg(feature = "redis")]
    pub(crate) writes: bool,
}

/// The verbs whose scripts only read.
#[cfg(feature = "redis")]
const READS: &[&str] = &[
    "get",
    "counts",
    "list",
    "queues",
    "retention",
    "priority_aging",
    "rate_limits",
    "list_schedules",
    "history",
    "groups",
    "consumers",
];

/// How a script publishes, and how it publishes on a cluster.
const PUBLISH: &str = "redis.call('PUBLISH',";
const SPUBLISH: &str = "redis.call('SPUBLISH',";

/// The library's files, in the order their helpers are declared and sent.
const LIB: [(&str, &str); 18] = [
    ("clock", include_str!("../../scripts/lib/clock.lua")),
    ("args", include_str!("../../scripts/lib/args.lua")),
    ("keys", include_str!("../../scripts/lib/keys.lua")),
    ("rate", include_str!("../../scripts/lib/rate.lua")),
    ("wake", include_str!("../../scripts/lib/wake.lua")),
    ("migrations", include_str!("../../scripts/lib/migrations.lua")),
    ("rank", include_str!("../../scripts/lib/rank.lua")),
    ("ring", include_str!("../../scripts/lib/ring.lua")),
    ("fence", include_str!("../../scripts/lib/fence.lua")),
    ("rows", include_str!("../../scripts/lib/rows.lua")),
    ("events", include_str!("../../scripts/lib/events.lua")),
    ("retention", include_str!("../../scripts/lib/retention.lua")),
    ("settle", include_str!("../../scripts/lib/settle.lua")),
    ("waiting", include_str!("../../scripts/lib/waiting.lua")),
    ("dedup", include_str!("../../scripts/lib/dedup.lua")),
    ("new_jobs", include_str!("../../scripts/lib/new_jobs.lua")),
    ("purge", include_str!("../../scripts/lib/purge.lua")),
    ("schedules", include_str!("../../scripts/lib/schedules.lua")),
];

/// A library file's header: its leading comment, up to and with its first blank line.
fn header(file: &str) -> &str {
    let mut end = 0;
    for line in file.split_inclusive('\n') {
        end += line.len();
        if line.trim().is_empty() {
            break;
        }
    }
    &file[..end]
}

/// The library cut into its helpers: (name, text with its leading comment), in library order.
fn helpers() -> Vec<(&'static str, &'static str)> {
    let mut out = Vec::new();
    for (_, file) in LIB {
        cut(file, header(file).len(), &mut out);
    }
    out
}

/// The helpers of one library file from `from` on (past its header), appended to `out`.
fn cut(file: &'static str, from: usize, out: &mut Vec<(&'static str, &'static str)>) {
    let mut start = from;
    let mut name = "";
    let mut comment_start = None;
    let mut offset = from;
    for line in file[from..].split_inclusive('\n') {
        if line.starts_with("--") {
            comment_start.get_or_insert(offset);
        } else if let Some(rest) = line
            .strip_prefix("local function ")
            .or_else(|| line.strip_prefix("local ").filter(|r| r.starts_with("emq_")))
        {
            let begin = comment_start.unwrap_or(offset);
            if !name.is_empty() {
                out.push((name, &file[start..begin]));
            }
            start = begin;
            name = rest.split(['(', ' ', '=']).next().unwrap_or("").trim();
            comment_start = None;
        } else if !line.trim().is_empty() {
            comment_start = None;
        }
        offset += line.len();
    }
    if !name.is_empty() {
        out.push((name, &file[start..]));
    }
}

/// How to write the self-contained scripts again from their templates and the library.
#[cfg(test)]
const REGENERATE: &str = "EMQ_REGENERATE=1 cargo test -p echomq --lib scripts";

/// A self-contained script's file (`scripts/<name>.lua`) from its template (`scripts/src/<name>.lua`:
/// its header comment, a blank line, its body): the header, how the file is made, the library's
/// helpers the body uses, then the body.
#[cfg(test)]
fn generate(name: &str, template: &str) -> String {
    let (head, body) = template.split_once("\n\n").unwrap_or(("", template));
    format!(
        "{head}\n--\n-- Generated from scripts/src/{name}.lua and the library (scripts/lib/): edit those, then\n\
         -- run {REGENERATE}\n\n{}\n{body}",
        needed(body)
    )
}

/// The `emq_…` names a piece of Lua's code mentions — not its comments (a helper's comment naming
/// another helper must not send that one too: each helper sent builds its closure on every call).
/// No script's string holds `--`, so a line's code ends at its first `--`.
fn mentions(text: &str) -> impl Iterator<Item = &str> {
    text.lines().flat_map(|line| {
        let code = line.split("--").next().unwrap_or("");
        code.match_indices("emq_").map(move |(i, _)| {
            let end = code[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(code.len(), |e| i + e);
            &code[i..end]
        })
    })
}

/// The helpers `source` uses, with what they use in turn, in library order.
fn needed(source: &str) -> String {
    let all = helpers();
    let mut want: std::collections::HashSet<&str> = mentions(source).collect();
    loop {
        let before = want.len();
        for (name, text) in &all {
            if want.contains(name) {
                want.extend(mentions(text));
            }
        }
        if want.len() == before {
            break;
        }
    }
    all.iter()
        .filter(|(name, _)| want.contains(name))
        .map(|(_, text)| *text)
        .collect()
}

/// The scripts that run another verb's script whole: (verb, the function the other's body is
/// wrapped in ahead of the verb's own file, that body). `complete_then_claim` settles, then runs
/// claim.lua as `emq_claim(KEYS, ARGV)`: one implementation of the claim, one script call a job.
const WRAPS: &[(&str, &str, &str)] = &[(
    "complete_then_claim",
    "emq_claim",
    include_str!("../../scripts/claim.lua"),
)];

impl Script {
    fn new(name: &'static str, source: &str, with_lib: bool) -> Self {
        let source = match WRAPS.iter().find(|(verb, _, _)| *verb == name) {
            Some((_, function, inner)) => format!("local function {function}(KEYS, ARGV)\n{inner}\nend\n{source}"),
            None => source.to_string(),
        };
        let source = source.as_str();
        let body = if with_lib {
            format!("{}\n{source}", needed(source))
        } else {
            source.to_string()
        };
        let cluster_body = body.replace(PUBLISH, SPUBLISH);
        Self {
            name,
            #[cfg(feature = "redis")]
            sha: sha1_smol::Sha1::from(body.as_bytes()).digest().to_string(),
            #[cfg(feature = "redis")]
            cluster_sha: sha1_smol::Sha1::from(cluster_body.as_bytes()).digest().to_string(),
            #[cfg(feature = "redis")]
            writes: !READS.contains(&name),
            body,
            cluster_body,
        }
    }

    /// The body to load on a standalone server (`cluster` false) or a cluster's master.
    pub(crate) fn body(&self, cluster: bool) -> &str {
        if cluster {
            &self.cluster_body
        } else {
            &self.body
        }
    }

    /// The SHA-1 of [`Self::body`].
    #[cfg(feature = "redis")]
    pub(crate) fn sha(&self, cluster: bool) -> &str {
        if cluster {
            &self.cluster_sha
        } else {
            &self.sha
        }
    }
}

/// The body the store loads for `verb` on a standalone server (its script and the library's
/// helpers it uses): for the tests and tools that run a script by a raw `EVAL`.
#[cfg(feature = "redis")]
#[doc(hidden)]
pub fn script_body(verb: &str) -> Option<String> {
    Scripts::load()
        .all()
        .into_iter()
        .find(|s| s.name == verb)
        .map(|s| s.body(false).to_string())
}

macro_rules! scripts {
    ($($field:ident: $lib:expr),* $(,)?) => {
        /// Every verb's script.
        #[derive(Debug)]
        pub(crate) struct Scripts {
            $(pub(crate) $field: Script,)*
        }

        impl Scripts {
            pub(crate) fn load() -> Self {
                Self {
                    $($field: Script::new(
                        stringify!($field),
                        include_str!(concat!("../../scripts/", stringify!($field), ".lua")),
                        $lib,
                    ),)*
                }
            }
        }

        impl Scripts {
            pub(crate) fn all(&self) -> [&Script; VERBS.len()] {
                [$(&self.$field),*]
            }
        }

        /// The verb names with a script, in the order of the Store contract's closed list of verbs.
        pub const VERBS: &[&str] = &[$(stringify!($field)),*];
    };
}

scripts! {
    enqueue: true,
    genqueue: true,
    claim: true,
    complete: true,
    complete_many: true,
    complete_then_claim: true,
    complete_cancelled: true,
    retry: true,
    discard: true,
    release: true,
    reap: true,
    sweep_stalled: false,
    promote: true,
    extend_lock: false,
    update_data: true,
    pause: true,
    resume: true,
    drain: true,
    obliterate: true,
    get: true,
    remove: true,
    redrive: true,
    promote_job: true,
    cancel: true,
    set_group_limit: true,
    set_retention: true,
    retention: true,
    set_priority_aging: true,
    priority_aging: true,
    set_rate_limit: true,
    rate_limits: true,
    upsert_schedule: true,
    remove_schedule: true,
    pause_schedule: true,
    resume_schedule: true,
    list_schedules: true,
    trigger_schedule: true,
    refill_schedule: true,
    mark_waited: true,
    counts: true,
    history: true,
    groups: true,
    register_consumer: true,
    unregister_consumer: false,
    consumers: true,
    list: true,
    queues: true,
}

/// The names a script gives a list's positions: the line after the comment naming `list` (a Rust
/// constant) declares `local A, B, … = 1, 2, …`; the names lowercased, in order (none when the
/// values are not 1, 2, … in order).
#[cfg(test)]
pub(crate) fn lua_positions(script: &str, list: &str) -> Vec<String> {
    let mut lines = script
        .lines()
        .skip_while(|l| !(l.trim_start().starts_with("--") && l.contains(list)));
    let decl = lines
        .find(|l| l.trim_start().starts_with("local "))
        .and_then(|l| l.trim_start().strip_prefix("local "))
        .and_then(|l| l.split_once('='));
    let Some((names, values)) = decl else {
        return Vec::new();
    };
    let names: Vec<String> = names.split(',').map(|n| n.trim().to_lowercase()).collect();
    let values: Vec<&str> = values.split(',').map(str::trim).collect();
    let in_order = values.len() == names.len() && values.iter().enumerate().all(|(i, v)| *v == (i + 1).to_string());
    if in_order {
        names
    } else {
        Vec::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_library_splits_into_every_helper() {
        for (name, file) in LIB {
            let head = header(file);
            assert!(
                head.starts_with(&format!("-- lib/{name}.lua — ")) && !head.contains("local function"),
                "lib/{name}.lua opens with a header comment naming it, then a blank line"
            );
            let mut mine = Vec::new();
            cut(file, head.len(), &mut mine);
            let declared = file
                .lines()
                .filter(|l| l.starts_with("local function ") || l.starts_with("local emq_"))
                .count();
            assert_eq!(mine.len(), declared, "lib/{name}.lua");
            assert_eq!(
                mine.iter().map(|(_, t)| t.len()).sum::<usize>() + head.len(),
                file.len(),
                "lib/{name}.lua: nothing but its header and its helpers"
            );
        }
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/lib");
        let mut on_disk: Vec<String> = std::fs::read_dir(dir)
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        on_disk.sort();
        let mut listed: Vec<String> = LIB.iter().map(|(n, _)| format!("{n}.lua")).collect();
        listed.sort();
        assert_eq!(on_disk, listed, "every file of scripts/lib is in LIB, and only those");
        let names: Vec<&str> = helpers().iter().map(|(n, _)| *n).collect();
        let unique: std::collections::HashSet<&&str> = names.iter().collect();
        assert_eq!(unique.len(), names.len(), "a helper declared twice");
    }

    #[test]
    fn a_helper_calls_only_helpers_declared_before_it() {
        let all = helpers();
        let known: std::collections::HashSet<&str> = all.iter().map(|(n, _)| *n).collect();
        let mut before = std::collections::HashSet::new();
        for (name, text) in &all {
            // the code alone: a comment may name a helper declared later
            let code: String = text
                .lines()
                .map(|l| l.split("--").next().unwrap_or(""))
                .collect::<Vec<_>>()
                .join("\n");
            for used in mentions(&code) {
                assert!(
                    used == *name || !known.contains(used) || before.contains(used),
                    "{name} calls {used}, declared after it: move it to an earlier file or earlier in its file"
                );
            }
            before.insert(*name);
        }
    }

    #[test]
    fn a_script_gets_the_helpers_it_uses_and_what_they_use() {
        let complete = needed(include_str!("../../scripts/complete.lua"));
        for used in [
            "local function emq_settle_finished(",
            "local function emq_fence(",
            "local function emq_lane_leave(",
        ] {
            assert!(complete.contains(used), "complete.lua needs {used}");
        }
        assert!(
            !complete.contains("local function emq_new_jobs"),
            "complete.lua does not need emq_new_jobs"
        );
        assert_eq!(needed("return 1"), "");
        // a helper's helpers come along: emq_lane_leave's ring step, and the eligibility it tests
        let promote = needed(include_str!("../../scripts/promote.lua"));
        for used in [
            "local function emq_lane_step(",
            "local function emq_lane_ring(",
            "local function emq_lane_eligible(",
        ] {
            assert!(promote.contains(used), "promote.lua needs {used}");
        }
    }

    #[test]
    #[cfg(feature = "redis")]
    fn on_a_cluster_every_script_publishes_to_shard_channels_only() {
        let scripts = Scripts::load();
        let mut publishing = 0;
        for s in scripts.all() {
            // every PUBLISH is written the one way the cluster flavour rewrites
            assert_eq!(
                s.body(false).matches("PUBLISH").count(),
                s.body(false).matches(PUBLISH).count(),
                "{}: a PUBLISH not written as {PUBLISH}",
                s.name
            );
            assert!(!s.body(true).contains(PUBLISH), "{}", s.name);
            if s.body(false).contains(PUBLISH) {
                publishing += 1;
                assert_ne!(s.sha(false), s.sha(true));
            } else {
                assert_eq!(s.sha(false), s.sha(true));
            }
        }
        assert!(
            publishing >= 4,
            "the cancel and finished channels' publishers: {publishing}"
        );
    }

    #[test]
    fn the_self_contained_scripts_are_generated_from_their_templates() {
        let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts");
        for (name, template) in [
            ("sweep_stalled", include_str!("../../scripts/src/sweep_stalled.lua")),
            ("extend_lock", include_str!("../../scripts/src/extend_lock.lua")),
        ] {
            let made = generate(name, template);
            let path = format!("{dir}/{name}.lua");
            if std::env::var_os("EMQ_REGENERATE").is_some() {
                std::fs::write(&path, &made).unwrap_or_else(|e| panic!("write {path}: {e}"));
                continue;
            }
            let on_disk = std::fs::read_to_string(&path).unwrap_or_default();
            assert!(
                made == on_disk,
                "scripts/{name}.lua is not what scripts/src/{name}.lua and the library generate: \
                 edit those (never the file), then run {REGENERATE}"
            );
            // self-contained: every helper it calls is declared in it
            let declared: Vec<&str> = on_disk
                .lines()
                .filter_map(|l| {
                    l.strip_prefix("local function ")
                        .or_else(|| l.strip_prefix("local ").filter(|r| r.starts_with("emq_")))
                })
                .map(|l| l.split(['(', ' ']).next().unwrap_or(""))
                .collect();
            for used in mentions(template.split_once("\n\n").map_or(template, |(_, b)| b)) {
                assert!(
                    declared.contains(&used),
                    "scripts/{name}.lua calls {used} without declaring it"
                );
            }
        }
    }

    #[test]
    fn every_helper_has_a_caller() {
        let scripts = Scripts::load();
        for (name, _) in helpers() {
            let (function, value) = (format!("local function {name}("), format!("local {name} ="));
            assert!(
                scripts
                    .all()
                    .iter()
                    .any(|s| s.body(false).contains(&function) || s.body(false).contains(&value)),
                "the library's {name} is prepended to no script: remove it"
            );
        }
    }
}
