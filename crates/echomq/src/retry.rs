//! Retry curves: how long a failed job waits before it runs again. The policy is decided here, in
//! Rust, from the attempt that failed and its error; the store only schedules the job at the delay
//! it is given.
//!
//! A consumer has one policy ([`ConsumerOptions::retry`](crate::ConsumerOptions::retry), by default
//! [`RetryPolicy::fixed`] of 1 s); a job may carry its own ([`NewJob::with_retry`](crate::NewJob::with_retry)),
//! stored on its row in the text form [`RetryPolicy`]'s `Display` writes and `FromStr` reads:
//! `fixed:1s`, `exp:200ms,x2,max=10m,jitter=full`. A delay a handler asks for itself
//! (`JobError::retry_after`, a `Retry-After`) is used as it is, whatever the policy.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use crate::error::{Error, Result};

/// The default retry policy: a fixed wait of this long.
pub const RETRY_DELAY_DEFAULT: Duration = Duration::from_millis(1000);

/// The longest delay a policy may name (30 days): a longer one is refused when the policy is
/// built or parsed, so no curve can schedule a retry past what the stores take.
pub const RETRY_DELAY_MAX: Duration = Duration::from_secs(30 * 24 * 3600);

/// How a delay is spread so that jobs failing together do not retry together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Jitter {
    /// The curve's delay as it is.
    #[default]
    None,
    /// Uniform between zero and the curve's delay: the widest spread.
    Full,
    /// Half the curve's delay, plus uniform up to the other half: never shorter than half.
    Equal,
}

/// A function deciding the delay from the attempt that failed (1 for the first) and its error.
pub type RetryFn = dyn Fn(u64, &str) -> Duration + Send + Sync;

/// How long a failed job waits before its next attempt.
#[derive(Clone)]
pub struct RetryPolicy(Curve);

#[derive(Clone)]
enum Curve {
    Fixed(Duration),
    Exponential {
        base: Duration,
        factor: f64,
        max: Duration,
        jitter: Jitter,
    },
    Function(Arc<RetryFn>),
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self(Curve::Fixed(RETRY_DELAY_DEFAULT))
    }
}

fn refuse(value: impl fmt::Display, reason: &'static str) -> Error {
    Error::InvalidOption {
        field: "retry",
        value: value.to_string(),
        reason,
    }
}

impl RetryPolicy {
    /// The same wait after every failure (a delay over [`RETRY_DELAY_MAX`] waits that long).
    pub fn fixed(delay: Duration) -> Self {
        Self(Curve::Fixed(delay.min(RETRY_DELAY_MAX)))
    }

    /// `base × factor^(attempt−1)`, never more than `max`, spread by `jitter`. `factor` is at
    /// least 1 (a curve that shrinks is no back-off), `base` at most `max`, `max` at most
    /// [`RETRY_DELAY_MAX`].
    pub fn exponential(base: Duration, factor: f64, max: Duration, jitter: Jitter) -> Result<Self> {
        if !(1.0..=1000.0).contains(&factor) {
            return Err(refuse(factor, "a factor from 1 to 1000"));
        }
        if max > RETRY_DELAY_MAX {
            return Err(refuse(format!("max {max:?}"), "a max of at most 30 days"));
        }
        if base > max {
            return Err(refuse(
                format!("base {base:?} over max {max:?}"),
                "a base of at most max",
            ));
        }
        Ok(Self(Curve::Exponential {
            base,
            factor,
            max,
            jitter,
        }))
    }

    /// A function of the attempt that failed (1 for the first) and its error; its delay is capped
    /// at [`RETRY_DELAY_MAX`]. A function lives in the process: it can be a worker's policy, not
    /// a job's own (a job's policy is stored on its row).
    pub fn function(f: impl Fn(u64, &str) -> Duration + Send + Sync + 'static) -> Self {
        Self(Curve::Function(Arc::new(f)))
    }

    /// Whether the policy can be stored on a job's row (every policy but a function).
    pub fn is_storable(&self) -> bool {
        !matches!(self.0, Curve::Function(_))
    }

    /// The wait after attempt `attempt` (1 for the first) failed with `error`: never more than the
    /// policy's max (for a curve) or [`RETRY_DELAY_MAX`].
    pub fn delay(&self, attempt: u64, error: &str) -> Duration {
        match &self.0 {
            Curve::Fixed(d) => *d,
            Curve::Exponential {
                base,
                factor,
                max,
                jitter,
            } => {
                let steps = attempt.saturating_sub(1).min(i32::MAX as u64) as i32;
                let raw = base.as_secs_f64() * factor.powi(steps);
                let curve = if raw.is_finite() && raw < max.as_secs_f64() {
                    Duration::from_secs_f64(raw)
                } else {
                    *max
                };
                spread(curve, *jitter)
            }
            Curve::Function(f) => f(attempt, error).min(RETRY_DELAY_MAX),
        }
    }
}

/// `d` spread by `jitter`, from a fresh random number per call.
fn spread(d: Duration, jitter: Jitter) -> Duration {
    let unit = || {
        use std::hash::{BuildHasher, Hasher};
        // a fresh random SipHash key per call: uniform enough to spread retries, no dependency
        let bits = std::collections::hash_map::RandomState::new().build_hasher().finish();
        (bits >> 11) as f64 / (1u64 << 53) as f64
    };
    match jitter {
        Jitter::None => d,
        Jitter::Full => d.mul_f64(unit()),
        Jitter::Equal => d / 2 + (d / 2).mul_f64(unit()),
    }
}

impl PartialEq for RetryPolicy {
    fn eq(&self, other: &Self) -> bool {
        match (&self.0, &other.0) {
            (Curve::Fixed(a), Curve::Fixed(b)) => a == b,
            (
                Curve::Exponential {
                    base: a,
                    factor: f,
                    max: m,
                    jitter: j,
                },
                Curve::Exponential {
                    base: b,
                    factor: g,
                    max: n,
                    jitter: k,
                },
            ) => a == b && f.to_bits() == g.to_bits() && m == n && j == k,
            (Curve::Function(a), Curve::Function(b)) => Arc::ptr_eq(a, b),
            _ => false,
        }
    }
}

impl Eq for RetryPolicy {}

impl fmt::Debug for RetryPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Curve::Function(_) => f.write_str("RetryPolicy(function)"),
            _ => write!(f, "RetryPolicy({self})"),
        }
    }
}

/// A duration as the policy's text writes it: the largest of d, h, m, s, ms that divides it
/// (`1500ms`, `10m`).
pub(crate) fn duration_text(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000)] {
        if ms > 0 && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// A duration of the policy's text: a whole number and a unit (`ms`, `s`, `m`, `h`, `d`).
pub(crate) fn parse_duration(text: &str) -> Option<Duration> {
    let split = text.find(|c: char| !c.is_ascii_digit())?;
    let (n, unit) = text.split_at(split);
    let n: u64 = n.parse().ok()?;
    let ms = match unit {
        "ms" => 1,
        "s" => 1000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(Duration::from_millis(n.checked_mul(ms)?))
}

impl fmt::Display for RetryPolicy {
    /// The text form: `fixed:1s`, `exp:200ms,x2,max=10m,jitter=full` (a function: `function`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Curve::Fixed(d) => write!(f, "fixed:{}", duration_text(*d)),
            Curve::Exponential {
                base,
                factor,
                max,
                jitter,
            } => {
                let jitter = match jitter {
                    Jitter::None => "none",
                    Jitter::Full => "full",
                    Jitter::Equal => "equal",
                };
                write!(
                    f,
                    "exp:{},x{factor},max={},jitter={jitter}",
                    duration_text(*base),
                    duration_text(*max)
                )
            }
            Curve::Function(_) => f.write_str("function"),
        }
    }
}

impl FromStr for RetryPolicy {
    type Err = Error;

    /// Reads `fixed:D` or `exp:BASE[,xFACTOR][,max=D][,jitter=none|full|equal]` (durations a whole
    /// number and `ms`, `s`, `m`, `h` or `d`; factor 2, max 1h and jitter none when left out).
    fn from_str(text: &str) -> Result<Self> {
        let bad = |reason| refuse(text, reason);
        if let Some(d) = text.strip_prefix("fixed:") {
            let d = parse_duration(d).ok_or_else(|| bad("fixed:D, D such as 500ms, 1s, 10m"))?;
            if d > RETRY_DELAY_MAX {
                return Err(bad("a delay of at most 30 days"));
            }
            return Ok(Self::fixed(d));
        }
        let Some(rest) = text.strip_prefix("exp:") else {
            return Err(bad("fixed:D or exp:BASE,xFACTOR,max=D,jitter=none|full|equal"));
        };
        let mut parts = rest.split(',');
        let base = parts
            .next()
            .and_then(parse_duration)
            .ok_or_else(|| bad("exp:BASE first, BASE such as 200ms or 1s"))?;
        let (mut factor, mut max, mut jitter) = (2.0, Duration::from_secs(3600), Jitter::None);
        for part in parts {
            if let Some(x) = part.strip_prefix('x') {
                factor = x.parse().map_err(|_| bad("a factor such as x2 or x1.5"))?;
            } else if let Some(m) = part.strip_prefix("max=") {
                max = parse_duration(m).ok_or_else(|| bad("max=D, D such as 10m"))?;
            } else if let Some(j) = part.strip_prefix("jitter=") {
                jitter = match j {
                    "none" => Jitter::None,
                    "full" => Jitter::Full,
                    "equal" => Jitter::Equal,
                    _ => return Err(bad("jitter=none, jitter=full or jitter=equal")),
                };
            } else {
                return Err(bad("parts xFACTOR, max=D, jitter=… after the base"));
            }
        }
        Self::exponential(base, factor, max, jitter)
    }
}

/// A job's own policy as a claim reads it from its row (`''`: none). A text no policy reads (only a
/// row edited by hand) is logged and left out: the consumer's policy retries the job.
pub(crate) fn stored(id: &crate::JobId, text: &str) -> Option<RetryPolicy> {
    if text.is_empty() {
        return None;
    }
    match text.parse() {
        Ok(p) => Some(p),
        Err(e) => {
            tracing::warn!(%id, policy = text, error = %e, "a job's retry policy is malformed; the consumer's applies");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn the_text_form_reads_back_to_the_same_policy() {
        for text in [
            "fixed:1s",
            "fixed:250ms",
            "exp:200ms,x2,max=10m,jitter=full",
            "exp:1s,x1.5,max=1h,jitter=equal",
        ] {
            let p: RetryPolicy = text.parse().unwrap();
            assert_eq!(p.to_string(), text);
            assert_eq!(p.to_string().parse::<RetryPolicy>().unwrap(), p);
        }
        let short: RetryPolicy = "exp:1s".parse().unwrap();
        assert_eq!(short.to_string(), "exp:1s,x2,max=1h,jitter=none");
    }

    #[test]
    fn malformed_policies_are_refused_naming_the_option() {
        for text in [
            "",
            "fixed:",
            "fixed:1",
            "fixed:1y",
            "exp:",
            "exp:1s,x0.5",
            "exp:1s,xnan",
            "exp:1s,jitter=half",
            "exp:1s,max=31d",
            "exp:2h,max=1h",
            "exp:1s,y",
            "linear:1s",
        ] {
            match text.parse::<RetryPolicy>() {
                Err(Error::InvalidOption { field: "retry", .. }) => {}
                other => panic!("{text:?}: {other:?}"),
            }
        }
    }

    #[test]
    fn an_exponential_curve_doubles_up_to_its_max() {
        let p = RetryPolicy::exponential(ms(100), 2.0, ms(1000), Jitter::None).unwrap();
        let delays: Vec<u64> = (1..=6).map(|a| p.delay(a, "e").as_millis() as u64).collect();
        assert_eq!(delays, [100, 200, 400, 800, 1000, 1000]);
        assert_eq!(p.delay(u64::MAX, "e"), ms(1000));
        assert_eq!(RetryPolicy::default().delay(7, "e"), ms(1000));
    }

    #[test]
    fn jitter_stays_within_its_band_and_never_passes_max() {
        let full = RetryPolicy::exponential(ms(1000), 2.0, ms(4000), Jitter::Full).unwrap();
        let equal = RetryPolicy::exponential(ms(1000), 2.0, ms(4000), Jitter::Equal).unwrap();
        let (mut lo, mut hi) = (Duration::MAX, Duration::ZERO);
        for a in 1..2000 {
            let d = full.delay(a % 5 + 1, "e");
            assert!(d <= ms(4000));
            lo = lo.min(d);
            hi = hi.max(d);
            let e = equal.delay(3, "e");
            assert!(e >= ms(2000) && e <= ms(4000), "{e:?}");
        }
        assert!(lo < ms(200) && hi > ms(3000), "full jitter spreads: {lo:?}..{hi:?}");
    }

    #[test]
    fn full_jitter_spreads_ten_thousand_failures_over_their_window() {
        // 10,000 jobs failing together at their third attempt: no 1-second bucket of their retries
        // holds more than 3× the mean over every bucket from the first retry to the last
        let p: RetryPolicy = "exp:5s,x2,max=10m,jitter=full".parse().unwrap();
        let secs: Vec<u64> = (0..10_000).map(|_| p.delay(3, "e").as_secs()).collect();
        let (first, last) = (*secs.iter().min().unwrap(), *secs.iter().max().unwrap());
        let mut buckets = vec![0u32; (last - first + 1) as usize];
        for s in &secs {
            buckets[(s - first) as usize] += 1;
        }
        let mean = 10_000.0 / buckets.len() as f64;
        let most = *buckets.iter().max().unwrap() as f64;
        assert!(most <= 3.0 * mean, "{most} in one second against a mean of {mean}");
    }

    #[test]
    fn a_function_decides_from_the_attempt_and_the_error_and_is_capped() {
        let p = RetryPolicy::function(|attempt, error| {
            if error.contains("429") {
                Duration::from_secs(60)
            } else {
                Duration::from_millis(10 * attempt)
            }
        });
        assert_eq!(p.delay(3, "boom"), ms(30));
        assert_eq!(p.delay(1, "HTTP 429"), Duration::from_secs(60));
        assert!(!p.is_storable());
        let huge = RetryPolicy::function(|_, _| Duration::MAX);
        assert_eq!(huge.delay(1, ""), RETRY_DELAY_MAX);
    }
}
