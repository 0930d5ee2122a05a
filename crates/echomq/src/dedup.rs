//! Deduplication beyond caller ids: a `dedup` key on enqueue makes every enqueue of that key one
//! job while the key holds, by one of three modes ([`DedupMode`]). The reply names the job that
//! holds the key ([`crate::store::Enqueued::Deduplicated`], [`crate::store::Enqueued::Debounced`]).
//!
//! The store keeps each key held in the hash `emq:{q}:dedup`: the holder's id, and for a window its end. A key is looked at when the next
//! enqueue of it arrives: an `until_finished` key whose holder has finished (or is gone), or a
//! window that has ended, is taken by that enqueue's new job. Keys used once would stay forever:
//! each enqueue that takes a key also sweeps up to 20 + twice as many keys as it takes, those due
//! for a look (a minute after they were taken or when their window ends, then 1, 2, 4… minutes
//! after each look that finds them held), and deletes those whose holder finished and whose
//! window ended.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::keyspace::DedupKey;
use crate::retry::{duration_text, parse_duration};

/// The longest window of [`DedupMode::For`] and [`DedupMode::Debounce`]: 100 years. A store keeps
/// a window's end in ms beside its sweep's schedule, both well within a double's exact integers.
pub const WINDOW_MAX: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// How long a dedup key holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedupMode {
    /// While the job that took the key waits (pending or scheduled) or runs: an enqueue of the key
    /// meanwhile writes nothing and names that job.
    UntilFinished,
    /// For a window after the job that took the key was enqueued, even once it has finished
    /// (throttling): an enqueue of the key within it writes nothing and names that job.
    For(Duration),
    /// While the job that took the key still waits: an enqueue of the key within the window after
    /// the last one replaces that job's payload and pushes its start back to a window from now,
    /// so a burst of enqueues runs once, with the last payload. The job waits the window (or its
    /// own delay, if longer) before it starts.
    Debounce(Duration),
}

/// A job's dedup key and mode ([`crate::NewJob::with_dedup`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Dedup {
    /// The key: enqueues with the same key in one queue are one job while it holds.
    pub key: DedupKey,
    /// How long it holds.
    pub mode: DedupMode,
}

impl Dedup {
    /// A key and its mode; a window must be at least 1 ms and at most [`WINDOW_MAX`].
    pub fn new(key: DedupKey, mode: DedupMode) -> Result<Self> {
        let dedup = Self { key, mode };
        dedup.check()?;
        Ok(dedup)
    }

    /// Refuses a window under 1 ms or over [`WINDOW_MAX`] (the fields are public, so an enqueue
    /// checks again what [`Dedup::new`] checked).
    pub(crate) fn check(&self) -> Result<()> {
        if let DedupMode::For(d) | DedupMode::Debounce(d) = self.mode {
            if d.as_millis() == 0 || d > WINDOW_MAX {
                return Err(Error::InvalidOption {
                    field: "dedup",
                    value: self.mode.to_string(),
                    reason: "a window of at least 1ms and at most 100 years",
                });
            }
        }
        Ok(())
    }

    /// The store's argument: `u:<key>`, `f<ms>:<key>` or `d<ms>:<key>`.
    #[cfg_attr(not(feature = "redis"), allow(dead_code))] // the Redis store's argument only
    pub(crate) fn arg(&self) -> String {
        match self.mode {
            DedupMode::UntilFinished => format!("u:{}", self.key),
            DedupMode::For(d) => format!("f{}:{}", d.as_millis(), self.key),
            DedupMode::Debounce(d) => format!("d{}:{}", d.as_millis(), self.key),
        }
    }
}

impl fmt::Display for DedupMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DedupMode::UntilFinished => f.write_str("until_finished"),
            DedupMode::For(d) => write!(f, "for:{}", duration_text(*d)),
            DedupMode::Debounce(d) => write!(f, "debounce:{}", duration_text(*d)),
        }
    }
}

impl FromStr for DedupMode {
    type Err = Error;

    /// `until_finished`, `for:TTL` or `debounce:TTL` (`for(30s)` and `debounce(500ms)` too).
    fn from_str(s: &str) -> Result<Self> {
        let bad = || Error::InvalidOption {
            field: "dedup_mode",
            value: s.to_string(),
            reason: "until_finished, for:TTL or debounce:TTL (e.g. for:30s)",
        };
        if s == "until_finished" {
            return Ok(DedupMode::UntilFinished);
        }
        let (mode, ttl) = s
            .split_once(':')
            .or_else(|| s.strip_suffix(')').and_then(|r| r.split_once('(')))
            .ok_or_else(bad)?;
        let ttl = parse_duration(ttl).filter(|d| !d.is_zero()).ok_or_else(bad)?;
        match mode {
            "for" => Ok(DedupMode::For(ttl)),
            "debounce" => Ok(DedupMode::Debounce(ttl)),
            _ => Err(bad()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_read_and_print_in_both_spellings() {
        assert_eq!("until_finished".parse::<DedupMode>().unwrap(), DedupMode::UntilFinished);
        assert_eq!(
            "for:30s".parse::<DedupMode>().unwrap(),
            DedupMode::For(Duration::from_secs(30))
        );
        assert_eq!(
            "debounce(500ms)".parse::<DedupMode>().unwrap(),
            DedupMode::Debounce(Duration::from_millis(500))
        );
        assert_eq!(DedupMode::For(Duration::from_secs(30)).to_string(), "for:30s");
        for bad in ["", "for", "for:", "for:0s", "later:1s", "debounce:x"] {
            assert!(bad.parse::<DedupMode>().is_err(), "{bad:?}");
        }
        let key = DedupKey::new("k").unwrap();
        assert_eq!(Dedup::new(key.clone(), DedupMode::UntilFinished).unwrap().arg(), "u:k");
        assert_eq!(
            Dedup::new(key.clone(), DedupMode::Debounce(Duration::from_millis(250)))
                .unwrap()
                .arg(),
            "d250:k"
        );
        assert!(Dedup::new(key, DedupMode::For(Duration::from_micros(10))).is_err());
    }
}
