//! The Lua scripts, one per verb (`scripts/<verb>.lua`), loaded by SHA. Every script but the
//! self-contained `extend_lock` and `sweep_stalled` gets `scripts/_lib.lua` prepended.

/// One verb's script: its name, the body sent with `SCRIPT LOAD`, and that body's SHA-1.
#[derive(Debug)]
pub(crate) struct Script {
    pub(crate) name: &'static str,
    pub(crate) body: String,
    pub(crate) sha: String,
}

const LIB: &str = include_str!("../../../scripts/_lib.lua");

impl Script {
    fn new(name: &'static str, source: &str, with_lib: bool) -> Self {
        let body = if with_lib {
            format!("{LIB}\n{source}")
        } else {
            source.to_string()
        };
        let sha = sha1_smol::Sha1::from(body.as_bytes()).digest().to_string();
        Self { name, body, sha }
    }
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
                        include_str!(concat!("../../../scripts/", stringify!($field), ".lua")),
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

        /// The verb names with a script, in the order of DESIGN §3's closed list.
        pub const VERBS: &[&str] = &[$(stringify!($field)),*];
    };
}

scripts! {
    enqueue: true,
    genqueue: true,
    claim: true,
    complete: true,
    complete_many: true,
    complete_cancelled: true,
    retry: true,
    discard: true,
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
    counts: true,
    list: true,
    queues: true,
}
