//! Typed errors. Every failure a caller can see is one variant here; nothing above the store sees a
//! raw Redis reply.

use std::fmt;

/// What kind of name a [`Error::InvalidName`] is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    /// A queue name.
    Queue,
    /// A group name.
    Group,
    /// A caller-given job id.
    JobId,
    /// A job kind.
    JobKind,
    /// A schedule name.
    Schedule,
    /// A dedup key.
    DedupKey,
}

impl fmt::Display for NameKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            NameKind::Queue => "queue name",
            NameKind::Group => "group name",
            NameKind::JobId => "job id",
            NameKind::JobKind => "job kind",
            NameKind::Schedule => "schedule name",
            NameKind::DedupKey => "dedup key",
        })
    }
}

/// Every error EchoMQ returns.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A queue name, group name or job id that is not 1–128 bytes of `[A-Za-z0-9._:-]` (a caller id
    /// must also hold a non-digit: digits-only ids are the generated ones).
    #[error("invalid {kind} {value:?}: {reason}")]
    InvalidName {
        /// Which kind of name.
        kind: NameKind,
        /// The value refused (lossy UTF-8 when it was not UTF-8).
        value: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// An option or argument out of its range (a zero lease, an empty batch, a limit of 0, …).
    #[error("invalid option {field} = {value}: {reason}")]
    InvalidOption {
        /// The option's name.
        field: &'static str,
        /// The value refused, as text.
        value: String,
        /// What the option accepts.
        reason: &'static str,
    },
    /// A payload (or output) larger than the store's configured limit.
    #[error("payload of {size} bytes exceeds the limit of {limit} bytes")]
    PayloadTooLarge {
        /// The payload's size in bytes.
        size: usize,
        /// The configured limit in bytes.
        limit: usize,
    },
    /// A store URL this build cannot open.
    #[error("unsupported store URL scheme '{scheme}'")]
    UnsupportedScheme {
        /// The scheme found before `://`.
        scheme: String,
    },
    /// A store URL that does not parse.
    #[error("invalid store URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL as given (credentials redacted).
        url: String,
        /// Why it was refused.
        reason: String,
    },
    /// The store could not be reached or the connection broke. Consumers degrade and retry on it;
    /// producers see it.
    #[error("store unreachable at {addr}: {reason}")]
    Unreachable {
        /// The address tried.
        addr: String,
        /// What went wrong.
        reason: String,
    },
    /// The store refused this client in a way no retry can mend: a password missing (`NOAUTH`) or
    /// refused (`WRONGPASS`), a permission the user lacks (`NOPERM`), a TLS certificate no trusted
    /// root vouches for, a server that does not speak the store's protocol, a file that is not a
    /// database. Producers, consumers and every CLI command end on it at once; the `reason` names
    /// the cause and what to change.
    #[error("cannot use the store at {addr} (retrying will not help): {reason}")]
    Misconfigured {
        /// The address (credentials redacted) or the file.
        addr: String,
        /// The cause in plain words, with what to change.
        reason: String,
    },
    /// The store answered with an error that is not one of the verb's documented replies.
    #[error("store error in {verb}: {reason}")]
    Store {
        /// The verb that failed.
        verb: &'static str,
        /// The store's message.
        reason: String,
    },
    /// The store answered with a reply the verb does not document (a corrupted keyspace, a script
    /// of another version).
    #[error("unexpected reply from {verb}: {reply}")]
    Protocol {
        /// The verb.
        verb: &'static str,
        /// The reply, abbreviated.
        reply: String,
    },
    /// A wait that did not end in time (a consumer's stop, a job's wait).
    #[error("{what} did not finish within {after:?}")]
    Timeout {
        /// What was waited for.
        what: &'static str,
        /// How long.
        after: std::time::Duration,
    },
    /// A write the server made but its replicas did not confirm in time (a store opened with
    /// `wait_replicas`, or `?wait=N` in its URL): the write stands on the master, yet a failover
    /// before a replica gets it would undo it. Retry an enqueue with caller-given ids (the retry
    /// of a job that did land is reported a duplicate); a claim's jobs return when their lease
    /// lapses.
    #[error("{verb}: {acked} of {wanted} replicas confirmed the write within {timeout:?}")]
    NotReplicated {
        /// The verb whose write is unconfirmed.
        verb: &'static str,
        /// How many replicas confirmed it.
        acked: u64,
        /// How many were asked for.
        wanted: u32,
        /// How long the server waited.
        timeout: std::time::Duration,
    },
    /// The queue is being obliterated: enqueues are refused until it is gone.
    #[error("queue {queue} is being obliterated; enqueues are refused")]
    Obliterating {
        /// The queue.
        queue: String,
    },
    /// No job with this id in the queue: a generated id the queue never handed out, or a caller's
    /// id with no row (never pushed, or finished and past retention: a caller's id cannot tell).
    #[error("no job {id} in queue {queue}")]
    NoSuchJob {
        /// The queue.
        queue: String,
        /// The id asked for.
        id: String,
    },
    /// A completed job's output the queue's retention did not keep (over its `max_output`).
    #[error("the job's output of {size} bytes was not kept (over the queue's retention cap)")]
    OutputDropped {
        /// The output's size in bytes.
        size: u64,
    },
    /// Bytes that do not decode as the type asked for (a job's output read as JSON).
    #[error("{what} does not decode: {reason}")]
    Deserialize {
        /// What was decoded.
        what: &'static str,
        /// serde's message.
        reason: String,
    },
    /// A typed job that does not serialize to JSON (a map with non-string keys, a failing
    /// `Serialize` impl): nothing was pushed.
    #[error("job of kind {kind} does not serialize: {reason}")]
    Serialize {
        /// The job's kind.
        kind: &'static str,
        /// serde's message.
        reason: String,
    },
}

impl Error {
    /// True when the error is a connection failure or timeout — the kind a consumer rides out by
    /// backing off, as opposed to a refusal that would repeat.
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Unreachable { .. })
    }

    /// True when the error is a refusal no retry can mend ([`Error::Misconfigured`]): a consumer
    /// ends on it instead of backing off for ever.
    pub fn is_misconfigured(&self) -> bool {
        matches!(self, Error::Misconfigured { .. })
    }
}

/// The result type of every fallible EchoMQ call.
pub type Result<T> = std::result::Result<T, Error>;
