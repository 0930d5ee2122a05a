//! The consumer's options, their documented defaults, and their validation.

use std::time::Duration;

use crate::error::Error;
use crate::retry::RetryPolicy;

/// Default beat: the longest park, and the longest a drain leg runs before recover and promote run
/// again. Work never waits for it: an enqueue, a retry or a delayed job due wakes the park (a
/// lapsed lease is found within a beat of its lapse); an idle consumer sends about 2 commands a
/// second at this beat.
pub const BEAT_DEFAULT: Duration = Duration::from_millis(5000);
/// Default lease of a claimed job.
pub const LEASE_DEFAULT: Duration = Duration::from_millis(30_000);
/// Default number of due jobs one promote moves.
pub const PUMP_BATCH_DEFAULT: u32 = 100;
/// Default attempt budget of a job without its own.
pub const MAX_ATTEMPTS_DEFAULT: u32 = 3;
pub use crate::retry::RETRY_DELAY_DEFAULT;
/// Default handlers at once (1: one job at a time).
pub const CONCURRENCY_DEFAULT: usize = 1;
/// Default timeout of [`Consumer::stop`](super::Consumer::stop) (5 000 ms).
pub const STOP_TIMEOUT_DEFAULT: Duration = Duration::from_millis(5000);
/// The longest first wait after a degraded beat: the back-off starts at the beat, up to this.
pub const DEGRADED_FIRST: Duration = Duration::from_secs(1);
/// The cap of the degraded back-off, unless the beat is longer.
pub const DEGRADED_CAP: Duration = Duration::from_secs(30);
/// The shortest lease a consumer takes while it renews leases ([`ConsumerOptions::locks`]).
/// Renewal runs every third of a lease, which leaves each renewal two thirds of the lease to reach
/// the store and be answered: 1 s gives it 666 ms, what a loaded machine's timers and a busy
/// store's queue can take (300 ms leases were seen reaped under renewal on a loaded 2-core
/// machine, and a 1 ms lease lapses before any renewal can run). Without renewal a lease of any
/// length is allowed: nothing has to keep it.
pub const LEASE_RENEWED_MIN: Duration = Duration::from_secs(1);

pub use crate::store::{Kinds, Recovery};

/// How a consumer runs. Build with [`ConsumerOptions::default`] and the `with_` setters;
/// [`validate`](Self::validate) (called by `Consumer::start`) refuses zero durations and counts.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct ConsumerOptions {
    /// The beat ([`BEAT_DEFAULT`]).
    pub beat: Duration,
    /// The lease of each claimed job ([`LEASE_DEFAULT`]); at least [`LEASE_RENEWED_MIN`] while
    /// `locks` renews it.
    pub lease: Duration,
    /// Due jobs per promote ([`PUMP_BATCH_DEFAULT`]).
    pub pump_batch: u32,
    /// The recovery leg ([`Recovery::Reap`]: a lapsed lease has used the attempt its claim took;
    /// [`Recovery::Redeliver`] gives lapses a budget of their own).
    pub recovery: Recovery,
    /// Attempt budget for jobs without their own ([`MAX_ATTEMPTS_DEFAULT`]).
    pub max_attempts: u32,
    /// How long a failed job waits before it runs again, for jobs without a policy of their own
    /// (by default a fixed [`RETRY_DELAY_DEFAULT`]; a curve or a function: [`RetryPolicy`]).
    pub retry: RetryPolicy,
    /// Handlers at once ([`CONCURRENCY_DEFAULT`]; at most [`CONCURRENCY_MAX`]).
    pub concurrency: usize,
    /// Exit cleanly at the first settle boundary after this long (none by default).
    pub ttl: Option<Duration>,
    /// Write completion records from the settling scripts (off).
    pub record: bool,
    /// Renew the leases of in-flight jobs a third of a lease before they lapse (on): a handler
    /// that runs longer than its lease is not run a second time beside itself. Off, a job whose
    /// handler outlives its lease is recovered and may run again while the first run goes on.
    pub locks: bool,
    /// Route cancel requests to the running jobs' tokens (on). Off, a cancel of a running job is
    /// recorded on its row but no handler hears of it.
    pub cancel: bool,
    /// The longest one run of a handler may take (none by default): past it the handler is
    /// dropped and the attempt fails with `timed out after …` (retried, or dead on its last
    /// attempt). Separate from the lease, which only says how long a silent consumer keeps a job.
    pub timeout: Option<Duration>,
    /// The kinds of job it runs ([`Kinds::all`] by default): a consumer of some kinds claims only
    /// their jobs and is woken only for them; the jobs of a kind no live consumer runs wait.
    pub kinds: Kinds,
    /// How many claimed jobs it may hold beyond its free slots (0, the default: it claims only
    /// for free slots). A held job is leased, renewed and cancellable from its claim (a cancel
    /// settles it cancelled at once, unrun), and starts
    /// the moment a slot frees, before that slot's settle lands; a stop, an abort or the ttl gives
    /// it back at once, its attempt unused. A job on its last attempt is never held, nor is a job
    /// claimed to be held under a rate limit. For many short jobs: a consumer whose jobs take a
    /// round trip or less runs them one after another without waiting for the store between them.
    /// A consumer killed while holding jobs leaves them to their leases (each has then used an
    /// attempt, as a running job would). At most [`PREFETCH_MAX`]; needs lease renewal on.
    pub prefetch: usize,
}

/// The most jobs a consumer may hold beyond its free slots ([`ConsumerOptions::prefetch`]).
pub const PREFETCH_MAX: usize = 10_000;

impl Default for ConsumerOptions {
    fn default() -> Self {
        Self {
            beat: BEAT_DEFAULT,
            lease: LEASE_DEFAULT,
            pump_batch: PUMP_BATCH_DEFAULT,
            recovery: Recovery::Reap,
            max_attempts: MAX_ATTEMPTS_DEFAULT,
            retry: RetryPolicy::default(),
            concurrency: CONCURRENCY_DEFAULT,
            ttl: None,
            record: false,
            locks: true,
            cancel: true,
            timeout: None,
            kinds: Kinds::all(),
            prefetch: 0,
        }
    }
}

setters! { ConsumerOptions {
    /// Sets the beat.
    with_beat: beat: Duration;
    /// Sets the lease.
    with_lease: lease: Duration;
    /// Sets the promote batch.
    with_pump_batch: pump_batch: u32;
    /// Sets the recovery leg.
    with_recovery: recovery: Recovery;
    /// Sets the default attempt budget.
    with_max_attempts: max_attempts: u32;
    /// Sets the retry policy.
    with_retry: retry: RetryPolicy;
    /// Sets the concurrency.
    with_concurrency: concurrency: usize;
    /// Sets the time to live.
    with_ttl: ttl: Option<Duration>;
    /// Turns completion records on or off.
    with_record: record: bool;
    /// Turns the locks plane on or off.
    with_locks: locks: bool;
    /// Turns cancel routing on or off.
    with_cancel: cancel: bool;
    /// Sets the run-time cap of one handler run.
    with_timeout: timeout: Option<Duration>;
    /// Sets how many claimed jobs it may hold beyond its free slots.
    with_prefetch: prefetch: usize;
}}

impl ConsumerOptions {
    /// Runs only these kinds: `with_kinds(["resize", "thumbnail"])`, or a [`Kinds`]
    /// (`Kinds::only([...]).with_raw()` adds raw jobs). Unset, it runs every kind.
    pub fn with_kinds(mut self, kinds: impl Into<Kinds>) -> Self {
        self.kinds = kinds.into();
        self
    }
}

/// The most handlers one consumer runs at once.
pub const CONCURRENCY_MAX: usize = 100_000;

fn refuse(field: &'static str, value: impl std::fmt::Debug, reason: &'static str) -> Error {
    Error::InvalidOption {
        field,
        value: format!("{value:?}"),
        reason,
    }
}

impl ConsumerOptions {
    /// Refuses options a consumer cannot run with, naming the field.
    pub fn validate(&self) -> crate::Result<()> {
        if self.beat.is_zero() {
            return Err(refuse("beat", self.beat, "must be greater than zero"));
        }
        crate::store::millis("beat", self.beat)?;
        if self.lease.as_millis() == 0 {
            return Err(refuse("lease", self.lease, "must be at least 1 ms"));
        }
        crate::store::millis("lease", self.lease)?;
        if self.locks && self.lease < LEASE_RENEWED_MIN {
            return Err(refuse(
                "lease",
                self.lease,
                "must be at least 1s while leases are renewed (a renewal runs every third of a lease \
                 and needs the rest to reach the store); turn renewal off for a shorter lease",
            ));
        }
        if self.concurrency == 0 || self.concurrency > CONCURRENCY_MAX {
            return Err(refuse("concurrency", self.concurrency, "must be 1..=100000"));
        }
        if self.pump_batch == 0 {
            return Err(refuse("pump_batch", self.pump_batch, "must be at least 1"));
        }
        if self.max_attempts == 0 {
            return Err(refuse("max_attempts", self.max_attempts, "must be at least 1"));
        }
        self.kinds.check()?;
        if let Recovery::Stalled(p) = self.recovery {
            if p.max_stalled == 0 || p.limit == 0 {
                return Err(refuse(
                    "recovery",
                    self.recovery,
                    "max_stalled and limit must be at least 1",
                ));
            }
        }
        if let Recovery::Redeliver(p) = self.recovery {
            if p.max_redeliveries == 0 || p.limit == 0 {
                return Err(refuse(
                    "recovery",
                    self.recovery,
                    "max_redeliveries and limit must be at least 1",
                ));
            }
        }
        if self.timeout.is_some_and(|t| t.is_zero()) {
            return Err(refuse("timeout", self.timeout, "must be greater than zero when set"));
        }
        if self.ttl.is_some_and(|t| t.is_zero()) {
            return Err(refuse("ttl", self.ttl, "must be greater than zero when set"));
        }
        if self.prefetch > PREFETCH_MAX {
            return Err(refuse("prefetch", self.prefetch, "must be at most 10000"));
        }
        if self.prefetch > 0 && !self.locks {
            return Err(refuse(
                "prefetch",
                self.prefetch,
                "needs lease renewal on: a held job's lease would lapse while it waits for a slot",
            ));
        }
        Ok(())
    }

    /// The grace of the schedules without their own: a slot fired later than this after its time
    /// is missed. max([`crate::schedule::GRACE_MIN`], 2 beats): a slot due just after a beat began
    /// is on time at the next one.
    pub fn schedule_grace(&self) -> Duration {
        crate::schedule::GRACE_MIN.max(self.beat.saturating_mul(2))
    }

    /// The wait after the `streak`-th degraded beat in a row (1 on the first):
    /// min(max(30 s, beat), first × 2^(streak−1)), first the beat up to 1 s
    /// ([`DEGRADED_FIRST`]: a store back after a short outage is used again within a second, however
    /// long the beat).
    pub fn degraded_sleep(&self, streak: u32) -> Duration {
        let cap = DEGRADED_CAP.max(self.beat);
        let first = self.beat.min(DEGRADED_FIRST);
        let factor = 1u32.checked_shl(streak.saturating_sub(1)).unwrap_or(u32::MAX);
        first.checked_mul(factor).map_or(cap, |d| d.min(cap))
    }

    /// Claim when at least this many slots are free (a batch), or before parking.
    pub(crate) fn claim_threshold(&self) -> usize {
        (self.concurrency / 4).max(1)
    }

    pub(crate) fn settle_options(&self) -> crate::store::SettleOptions {
        crate::store::SettleOptions { record: self.record }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_or_oversized_beat_lease_delay_or_concurrency_is_refused_by_name() {
        for (opts, field) in [
            (ConsumerOptions::default().with_beat(Duration::ZERO), "beat"),
            (ConsumerOptions::default().with_beat(Duration::MAX), "beat"),
            (ConsumerOptions::default().with_lease(Duration::ZERO), "lease"),
            (ConsumerOptions::default().with_lease(Duration::MAX), "lease"),
            (ConsumerOptions::default().with_concurrency(0), "concurrency"),
            (ConsumerOptions::default().with_concurrency(usize::MAX), "concurrency"),
        ] {
            let err = opts.validate().unwrap_err();
            assert!(
                matches!(err, Error::InvalidOption { field: f, .. } if f == field),
                "{err}"
            );
        }
        assert!(ConsumerOptions::default().validate().is_ok());
    }

    #[test]
    fn a_renewed_lease_below_the_floor_is_refused_and_an_unrenewed_one_is_not() {
        let short = ConsumerOptions::default().with_lease(Duration::from_millis(1));
        let err = short.clone().validate().unwrap_err();
        assert!(matches!(&err, Error::InvalidOption { field: "lease", .. }), "{err}");
        assert!(
            err.to_string().contains("at least 1s while leases are renewed"),
            "{err}"
        );
        let just_under = ConsumerOptions::default().with_lease(LEASE_RENEWED_MIN - Duration::from_millis(1));
        assert!(just_under.validate().is_err());
        assert!(ConsumerOptions::default()
            .with_lease(LEASE_RENEWED_MIN)
            .validate()
            .is_ok());
        // without renewal nothing has to keep the lease: tests and short jobs use tens of ms
        assert!(short.with_locks(false).validate().is_ok());
    }

    #[test]
    fn a_redelivery_budget_or_limit_of_zero_is_refused() {
        use crate::store::RedeliveryPolicy;
        for policy in [
            RedeliveryPolicy {
                max_redeliveries: 0,
                ..RedeliveryPolicy::default()
            },
            RedeliveryPolicy {
                limit: 0,
                ..RedeliveryPolicy::default()
            },
        ] {
            let err = ConsumerOptions::default()
                .with_recovery(Recovery::Redeliver(policy))
                .validate()
                .unwrap_err();
            assert!(matches!(&err, Error::InvalidOption { field: "recovery", .. }), "{err}");
            assert!(err.to_string().contains("max_redeliveries"), "{err}");
        }
        let ok = Recovery::Redeliver(RedeliveryPolicy::default());
        assert!(ConsumerOptions::default().with_recovery(ok).validate().is_ok());
        assert_eq!(
            ConsumerOptions::default().recovery,
            Recovery::Reap,
            "the default is unchanged"
        );
    }

    #[test]
    fn degraded_sleep_doubles_from_the_beat_up_to_the_cap() {
        let o = ConsumerOptions::default();
        assert_eq!(o.degraded_sleep(1), Duration::from_secs(1));
        assert_eq!(o.degraded_sleep(2), Duration::from_secs(2));
        assert_eq!(o.degraded_sleep(5), Duration::from_secs(16));
        assert_eq!(o.degraded_sleep(6), Duration::from_secs(30));
        assert_eq!(o.degraded_sleep(60), Duration::from_secs(30));
        let slow = ConsumerOptions::default().with_beat(Duration::from_secs(45));
        assert_eq!(slow.degraded_sleep(3), Duration::from_secs(4));
        assert_eq!(
            slow.degraded_sleep(7),
            Duration::from_secs(45),
            "capped at a beat past 30 s"
        );
        let quick = ConsumerOptions::default().with_beat(Duration::from_millis(200));
        assert_eq!(quick.degraded_sleep(1), Duration::from_millis(200));
    }
}
