//! Rate limits: at most `max` job starts per `per`, at most `burst` of them at once, for a whole
//! queue, for one group, or as the default of every group without its own.
//!
//! The claim enforces them, atomically, on the store's clock, as a smooth limit (GCRA, not fixed
//! windows, which let twice the rate through at a window's edge): with the interval `t = per/max`,
//! a start is admitted while the limit's theoretical arrival time is at most `(burst − 1) × t`
//! ahead of now, and each start moves it `t` later. So `burst` starts may come at once, then one
//! every `t`: any window of length `per` holds at most `max` starts with the default burst of 1,
//! and at most `max + burst − 1` with a burst. A limit made with [`RateLimit::exact_window`] also
//! keeps a log of its last `max` starts and admits a start only while fewer than `max` lie within
//! `per` of now, so every window holds at most `max`, whatever the burst.
//!
//! Every claim counts: a retry, a release and a redelivery each start the job again and each takes
//! a start from the limit.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::keyspace::GroupName;
use crate::retry::{duration_text, parse_duration};

/// The most starts a limit's `max` or `burst` allows.
pub const RATE_COUNT_MAX: u32 = 1_000_000;

/// The most starts an exact-window limit's `max` allows (its log keeps that many start times).
pub const EXACT_WINDOW_MAX: u32 = 10_000;

/// The longest `per` of a limit: 365 days.
pub const RATE_PER_MAX: Duration = Duration::from_secs(365 * 86_400);

/// At most `max` job starts in any window of length `per`, `burst` of them at once (1 unless set;
/// with a burst `B`, at most `max + B − 1` in a window unless the limit is
/// [exact](RateLimit::exact_window)).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RateLimit {
    max: u32,
    per: Duration,
    burst: u32,
    exact: bool,
}

fn refuse(value: impl fmt::Display, reason: &'static str) -> Error {
    Error::InvalidOption {
        field: "rate_limit",
        value: value.to_string(),
        reason,
    }
}

impl RateLimit {
    /// `max` starts per `per`, one at a time. `max` from 1 to [`RATE_COUNT_MAX`]; `per` whole
    /// milliseconds, from 1 ms to [`RATE_PER_MAX`].
    pub fn new(max: u32, per: Duration) -> Result<RateLimit> {
        if max == 0 || max > RATE_COUNT_MAX {
            return Err(refuse(max, "max must be from 1 to 1000000"));
        }
        if per < Duration::from_millis(1) || per > RATE_PER_MAX || !per.subsec_nanos().is_multiple_of(1_000_000) {
            return Err(refuse(format!("{per:?}"), "per must be whole ms, from 1ms to 365 days"));
        }
        Ok(RateLimit {
            max,
            per,
            burst: 1,
            exact: false,
        })
    }

    /// The same limit letting up to `burst` starts through at once (from 1 to [`RATE_COUNT_MAX`]).
    pub fn with_burst(self, burst: u32) -> Result<RateLimit> {
        if burst == 0 || burst > RATE_COUNT_MAX {
            return Err(refuse(burst, "burst must be from 1 to 1000000"));
        }
        Ok(RateLimit { burst, ..self })
    }

    /// The same limit holding every window of length `per` to at most `max` starts, whatever the
    /// burst: the store keeps a log of the last `max` start times (so `max` at most
    /// [`EXACT_WINDOW_MAX`]). Without it, a burst `B` lets up to `max + B − 1` starts into a window.
    pub fn exact_window(self) -> Result<RateLimit> {
        if self.max > EXACT_WINDOW_MAX {
            return Err(refuse(self.max, "an exact window allows a max of at most 10000"));
        }
        Ok(RateLimit { exact: true, ..self })
    }

    /// Whether every window holds at most `max` starts ([`RateLimit::exact_window`]).
    pub fn is_exact(&self) -> bool {
        self.exact
    }

    /// The most starts any window of length [`RateLimit::per`] may hold: `max`, or with a burst
    /// and no exact window `max + burst − 1`.
    pub fn window_bound(&self) -> u64 {
        if self.exact {
            u64::from(self.max)
        } else {
            u64::from(self.max) + u64::from(self.burst) - 1
        }
    }

    /// The starts allowed per [`RateLimit::per`].
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The period of [`RateLimit::max`].
    pub fn per(&self) -> Duration {
        self.per
    }

    /// The starts allowed at once.
    pub fn burst(&self) -> u32 {
        self.burst
    }

    /// The form the store keeps: `max/per ms/burst`, with `/exact` for an exact window.
    pub(crate) fn spec(&self) -> String {
        let exact = if self.exact { EXACT_SUFFIX } else { "" };
        format!("{}/{}/{}{exact}", self.max, self.per.as_millis(), self.burst)
    }

    /// A limit of the store's form, or `None` when the text is not one a store wrote.
    pub(crate) fn from_spec(spec: &str) -> Option<RateLimit> {
        let (spec, exact) = match spec.strip_suffix(EXACT_SUFFIX) {
            Some(rest) => (rest, true),
            None => (spec, false),
        };
        let [max, per, burst] = spec_parts(spec)?;
        let limit = RateLimit::new(max.parse().ok()?, Duration::from_millis(per.parse().ok()?)).ok()?;
        let limit = limit.with_burst(burst.parse().ok()?).ok()?;
        if exact {
            limit.exact_window().ok()
        } else {
            Some(limit)
        }
    }
}

/// How the store's form marks an exact window.
const EXACT_SUFFIX: &str = "/exact";

/// The three runs of digits of a limit as the store keeps it (`max/per ms/burst`, the scripts'
/// pattern `^(%d+)/(%d+)/(%d+)$`), or `None` for any other text.
pub(crate) fn spec_parts(spec: &str) -> Option<[&str; 3]> {
    let mut parts = spec.split('/');
    let out = [parts.next()?, parts.next()?, parts.next()?];
    let digits = |s: &&str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (parts.next().is_none() && out.iter().all(digits)).then_some(out)
}

impl fmt::Display for RateLimit {
    /// `200/1s`, with ` burst N` when the burst is not 1 and ` exact` for an exact window.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.max, duration_text(self.per))?;
        if self.burst != 1 {
            write!(f, " burst {}", self.burst)?;
        }
        if self.exact {
            write!(f, " exact")?;
        }
        Ok(())
    }
}

impl FromStr for RateLimit {
    type Err = Error;

    /// `MAX/PER`: `200/1s`, `1000/1m`, `5/1500ms` (units `ms`, `s`, `m`, `h`, `d`; a bare unit is
    /// one of it: `200/s`). The burst is 1; see [`RateLimit::with_burst`].
    fn from_str(text: &str) -> Result<RateLimit> {
        let malformed = || refuse(text, "expected MAX/PER, such as 200/1s");
        let (max, per) = text.split_once('/').ok_or_else(malformed)?;
        let max: u32 = max.parse().map_err(|_| malformed())?;
        let per = match per.chars().next() {
            Some(c) if c.is_ascii_digit() => parse_duration(per),
            _ => parse_duration(&format!("1{per}")),
        }
        .ok_or_else(malformed)?;
        RateLimit::new(max, per)
    }
}

/// What a rate limit applies to.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum RateTarget {
    /// Every start of the queue, flat and lane jobs alike, on every consumer.
    Queue,
    /// The starts of one group's jobs.
    Group(GroupName),
    /// The starts of each group without a limit of its own (each group its own budget).
    GroupDefault,
    /// The starts of one kind's jobs, flat and in lanes, on every consumer: "at most 5 a second
    /// of this API call" without a queue or group of its own. While it admits none, the kind's
    /// jobs wait in their set by kind (a lane headed by one is passed over) and the queue's other
    /// kinds go on.
    Kind(String),
}

/// A limit and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateState {
    /// The limit.
    pub limit: RateLimit,
    /// How long until it admits a start; zero when it admits one now.
    pub wait: Duration,
}

/// One group's own limit and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupRate {
    /// The group.
    pub group: GroupName,
    /// Its limit and state.
    pub state: RateState,
}

/// One kind's own limit and its state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KindRate {
    /// The kind.
    pub kind: String,
    /// Its limit and state.
    pub state: RateState,
}

/// A queue's rate limits, as `rate_limits` reads them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RateLimits {
    /// The queue's own limit.
    pub queue: Option<RateState>,
    /// The default of groups without their own.
    pub group_default: Option<RateLimit>,
    /// Every group with a limit of its own, by name.
    pub groups: Vec<GroupRate>,
    /// Every kind with a limit of its own, by name.
    pub kinds: Vec<KindRate>,
    /// How many groups wait for their limit to admit their next start (off the ring meanwhile).
    pub throttled: u64,
    /// How long until the first of them may run again.
    pub next_admission: Option<Duration>,
}

/// The part of a [`RateTarget`] a store's verb takes: the target's name (`queue`, `default`,
/// `group`) and the group ('' for the others).
pub(crate) fn target_parts(target: &RateTarget) -> (&'static str, &str) {
    match target {
        RateTarget::Queue => ("queue", ""),
        RateTarget::GroupDefault => ("default", ""),
        RateTarget::Group(g) => ("group", g.as_str()),
        RateTarget::Kind(k) => ("kind", k.as_str()),
    }
}

/// A limit as a store keeps it, read back ('' = none); one no store wrote fails the read.
fn stored(verb: &'static str, whose: &str, spec: &str) -> Result<Option<RateLimit>> {
    if spec.is_empty() {
        return Ok(None);
    }
    RateLimit::from_spec(spec).map(Some).ok_or_else(|| Error::Protocol {
        verb,
        reply: format!("malformed rate limit {spec:?} of {whose}"),
    })
}

/// The raw reply of a store's `rate_limits`, read into [`RateLimits`]: the queue's limit and its
/// wait (µs), the default, the throttled groups' count and the first one's wait (µs), then each
/// group with its own limit: (group, limit, wait µs). Waits of 0 are none.
pub(crate) struct RateParts {
    pub(crate) queue: String,
    pub(crate) queue_wait_us: u64,
    pub(crate) group_default: String,
    pub(crate) throttled: u64,
    pub(crate) first_wait_us: u64,
    pub(crate) groups: Vec<(String, String, u64)>,
    pub(crate) kinds: Vec<(String, String, u64)>,
}

impl RateParts {
    pub(crate) fn read(self, verb: &'static str) -> Result<RateLimits> {
        let state = |limit, us| RateState {
            limit,
            wait: Duration::from_micros(us),
        };
        let mut groups = Vec::with_capacity(self.groups.len());
        for (g, spec, us) in self.groups {
            let group = GroupName::new(&g).map_err(|_| Error::Protocol {
                verb,
                reply: format!("rate limit of an invalid group name {g:?}"),
            })?;
            if let Some(limit) = stored(verb, &format!("group {g}"), &spec)? {
                groups.push(GroupRate {
                    group,
                    state: state(limit, us),
                });
            }
        }
        groups.sort_by(|a, b| a.group.as_str().cmp(b.group.as_str()));
        let mut kinds = Vec::with_capacity(self.kinds.len());
        for (kind, spec, us) in self.kinds {
            if let Some(limit) = stored(verb, &format!("kind {kind}"), &spec)? {
                kinds.push(KindRate {
                    kind,
                    state: state(limit, us),
                });
            }
        }
        kinds.sort_by(|a, b| a.kind.cmp(&b.kind));
        Ok(RateLimits {
            queue: stored(verb, "the queue", &self.queue)?.map(|l| state(l, self.queue_wait_us)),
            group_default: stored(verb, "the group default", &self.group_default)?,
            groups,
            kinds,
            throttled: self.throttled,
            next_admission: (self.throttled > 0).then(|| Duration::from_micros(self.first_wait_us)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_reads_back_and_the_store_form_round_trips() {
        let l: RateLimit = "200/1s".parse().unwrap();
        assert_eq!((l.max(), l.per(), l.burst()), (200, Duration::from_secs(1), 1));
        assert_eq!(l.to_string(), "200/1s");
        assert_eq!("200/s".parse::<RateLimit>().unwrap(), l);
        let b = "5/1500ms".parse::<RateLimit>().unwrap().with_burst(3).unwrap();
        assert_eq!(b.to_string(), "5/1500ms burst 3");
        assert_eq!(b.spec(), "5/1500/3");
        assert_eq!(RateLimit::from_spec(&b.spec()), Some(b));
        let x = b.exact_window().unwrap();
        assert_eq!(x.to_string(), "5/1500ms burst 3 exact");
        assert_eq!(x.spec(), "5/1500/3/exact");
        assert_eq!(RateLimit::from_spec(&x.spec()), Some(x));
        assert_eq!((b.window_bound(), x.window_bound(), l.window_bound()), (7, 5, 200));
    }

    #[test]
    fn malformed_limits_are_refused_naming_the_option() {
        for bad in [
            "",
            "200",
            "0/1s",
            "200/0s",
            "200/1x",
            "x/1s",
            "1000001/1s",
            "200/366d",
            "-1/1s",
        ] {
            match bad.parse::<RateLimit>() {
                Err(Error::InvalidOption {
                    field: "rate_limit", ..
                }) => {}
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        assert!(RateLimit::new(1, Duration::from_micros(1500)).is_err());
        assert!(RateLimit::new(1, Duration::from_secs(1))
            .unwrap()
            .with_burst(0)
            .is_err());
        assert!("10001/1s".parse::<RateLimit>().unwrap().exact_window().is_err());
        for bad in [
            "",
            "1/2",
            "1/2/3/4",
            "a/1/1",
            "0/1/1",
            "1/0/1",
            "1/1/0",
            "1/+1/1",
            "1/1/1/x",
            "10001/1/1/exact",
        ] {
            assert_eq!(RateLimit::from_spec(bad), None, "{bad:?}");
        }
    }
}
