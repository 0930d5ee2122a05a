//! The registry of live consumers (the dashboard's workers page): each running consumer writes its
//! entry — host, pid, concurrency, jobs in hand, when it started — at most once per beat, with a
//! time to live of a few beats; it removes the entry when it stops, and an entry whose consumer
//! missed its beats (killed, frozen, cut off) is past its deadline: no listing shows it, and later
//! registrations delete it.
//!
//! The registry sits outside what parked consumers watch: on Redis it has keys of its own (no wake
//! list, no channel), and the embedded store keeps it in a second file beside the store's
//! (`PATH-consumers`), so an entry written once a beat never ends another process's park.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::store::Kinds;

/// The most entries [`crate::Store::consumers`] lists for one queue.
pub const CONSUMERS_LISTED_MAX: usize = 1000;

/// The longest time to live of an entry.
pub const CONSUMER_TTL_MAX: Duration = Duration::from_secs(24 * 3600);

/// The longest consumer id and host name the registry takes, in bytes.
pub const CONSUMER_TEXT_MAX: usize = 255;

/// A consumer as the registry shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct ConsumerEntry {
    /// Unique among the consumers of its queue: `host:pid:n` for the consumers this library runs.
    pub id: String,
    /// The host it runs on.
    pub host: String,
    /// Its process id.
    pub pid: u32,
    /// The jobs it may run at once.
    pub concurrency: u32,
    /// The jobs it held at its last beat.
    pub in_hand: u32,
    /// When it started: Unix ms, on its own clock.
    pub started_ms: i64,
    /// Its last beat: Unix ms, on the store's clock, as the store answered its last registration;
    /// 0 before its first (a first registration also clears lapsed entries of other consumers).
    pub beat_ms: i64,
    /// How long the entry outlives its last beat unless the consumer beats again.
    pub ttl: Duration,
    /// The kinds it runs (every kind unless it said otherwise).
    pub kinds: Kinds,
}

impl ConsumerEntry {
    /// An entry of a consumer of this process on this host, named `host:pid:n` (n counts the
    /// entries this process made), started now, holding no job yet.
    pub fn for_this_process(concurrency: u32, ttl: Duration) -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        let host = host_name();
        let pid = std::process::id();
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        ConsumerEntry {
            id: format!("{host}:{pid}:{n}"),
            host,
            pid,
            concurrency,
            in_hand: 0,
            started_ms: unix_ms(),
            beat_ms: 0,
            ttl,
            kinds: Kinds::all(),
        }
    }

    /// When the entry lapses unless the consumer beats again: Unix ms on the store's clock.
    pub fn deadline_ms(&self) -> i64 {
        self.beat_ms.saturating_add(ttl_ms(self.ttl))
    }
}

/// The part of an entry a store keeps as text (all but the id, the beat and the ttl, which the
/// store keeps as the entry's deadline).
#[derive(Serialize, Deserialize)]
struct Stored {
    host: String,
    pid: u32,
    concurrency: u32,
    in_hand: u32,
    started_ms: i64,
    ttl_ms: i64,
    /// Absent: every kind; else the kinds run ("" for raw jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    kinds: Option<Vec<String>>,
}

/// Refuses an entry a store cannot keep: an empty id, an id or host over
/// [`CONSUMER_TEXT_MAX`] bytes or holding a control character, a ttl of zero or over
/// [`CONSUMER_TTL_MAX`].
pub(crate) fn check(entry: &ConsumerEntry) -> Result<()> {
    check_id(&entry.id)?;
    check_text("host", &entry.host)?;
    if entry.ttl.as_millis() == 0 || entry.ttl > CONSUMER_TTL_MAX {
        return Err(Error::InvalidOption {
            field: "consumer ttl",
            value: format!("{:?}", entry.ttl),
            reason: "from 1 ms to 24 h",
        });
    }
    Ok(())
}

/// Refuses an id [`check`] would.
pub(crate) fn check_id(id: &str) -> Result<()> {
    if id.is_empty() {
        return Err(Error::InvalidOption {
            field: "consumer id",
            value: String::new(),
            reason: "not empty",
        });
    }
    check_text("consumer id", id)
}

fn check_text(field: &'static str, text: &str) -> Result<()> {
    if text.len() > CONSUMER_TEXT_MAX || text.chars().any(char::is_control) {
        return Err(Error::InvalidOption {
            field,
            value: text.chars().take(64).collect(),
            reason: "at most 255 bytes, with no control character",
        });
    }
    Ok(())
}

/// The entry's text as a store keeps it.
pub(crate) fn encode(entry: &ConsumerEntry) -> String {
    let stored = Stored {
        host: entry.host.clone(),
        pid: entry.pid,
        concurrency: entry.concurrency,
        in_hand: entry.in_hand,
        started_ms: entry.started_ms,
        ttl_ms: ttl_ms(entry.ttl),
        kinds: entry.kinds.store_list().map(<[String]>::to_vec),
    };
    // a struct of strings and integers always serializes
    serde_json::to_string(&stored).unwrap_or_default()
}

/// An entry from its id, its deadline and its stored text; `None` for a text no registration
/// wrote (written by hand, or by a newer version): the listing passes over it.
pub(crate) fn decode(id: String, deadline_ms: i64, text: &str) -> Option<ConsumerEntry> {
    let s: Stored = serde_json::from_str(text).ok()?;
    let ttl_ms = s.ttl_ms.max(0);
    Some(ConsumerEntry {
        id,
        host: s.host,
        pid: s.pid,
        concurrency: s.concurrency,
        in_hand: s.in_hand,
        started_ms: s.started_ms,
        beat_ms: deadline_ms - ttl_ms,
        ttl: Duration::from_millis(ttl_ms as u64),
        kinds: s.kinds.map_or_else(Kinds::all, |list| {
            let raw = list.iter().any(String::is_empty);
            let kinds = Kinds::only(list.into_iter().filter(|k| !k.is_empty()));
            if raw {
                kinds.with_raw()
            } else {
                kinds
            }
        }),
    })
}

/// The ttl in whole ms, at least 1.
/// The kinds of `ready_by_kind` (a queue's [`crate::store::Counts::ready_by_kind`]: `None` for
/// raw jobs) that none of the live `consumers` runs, with their ready jobs: work that waits for a
/// worker that is not there — during a rolling deploy, or for good when a kind is misspelled on
/// one side.
pub fn kinds_without_consumer(
    ready_by_kind: &[(Option<String>, u64)],
    consumers: &[ConsumerEntry],
) -> Vec<(Option<String>, u64)> {
    ready_by_kind
        .iter()
        .filter(|(kind, n)| *n > 0 && !consumers.iter().any(|c| c.kinds.runs(kind.as_deref())))
        .cloned()
        .collect()
}

pub(crate) fn ttl_ms(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_millis()).unwrap_or(i64::MAX).max(1)
}

/// This host's name: the kernel's (Linux), else `HOSTNAME` or `COMPUTERNAME`, else `unknown`.
pub fn host_name() -> String {
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .or_else(|| std::env::var("HOSTNAME").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().chars().filter(|c| !c.is_control()).collect::<String>())
        .filter(|h| !h.is_empty());
    let mut name = name.unwrap_or_else(|| "unknown".into());
    while name.len() > CONSUMER_TEXT_MAX / 2 {
        name.pop();
    }
    name
}

/// The time now in Unix ms on this machine's clock.
pub(crate) fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_round_trips_through_its_text() {
        let mut e = ConsumerEntry::for_this_process(8, Duration::from_secs(3));
        e.in_hand = 5;
        let back = decode(e.id.clone(), 10_000, &encode(&e)).expect("decodes");
        assert_eq!(back.beat_ms, 7_000);
        assert_eq!(back.deadline_ms(), 10_000);
        assert_eq!(
            (back.host, back.pid, back.concurrency, back.in_hand),
            (e.host, e.pid, 8, 5)
        );
        assert!(decode("x".into(), 0, "not json").is_none());
    }

    #[test]
    fn bad_entries_are_refused() {
        let good = ConsumerEntry::for_this_process(1, Duration::from_secs(3));
        assert!(check(&good).is_ok());
        let bads: [fn(&mut ConsumerEntry); 5] = [
            |e| e.id = String::new(),
            |e| e.id = "a\tb".into(),
            |e| e.host = "h".repeat(300),
            |e| e.ttl = Duration::ZERO,
            |e| e.ttl = CONSUMER_TTL_MAX * 2,
        ];
        for spoil in bads {
            let mut bad = good.clone();
            spoil(&mut bad);
            assert!(matches!(check(&bad), Err(Error::InvalidOption { .. })), "{bad:?}");
        }
    }
}
