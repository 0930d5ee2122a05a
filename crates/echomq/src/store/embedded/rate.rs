//! The twin of `_lib.lua`'s rate helpers (`emq_rate_read`, `emq_rate_admits`, `emq_rate_take`,
//! `emq_rate_next`): a rate limit's GCRA state on the store's clock, in µs. A start is admitted
//! while the TAT is at most `tol = (burst − 1) × t + min(t / 2, 10 ms)` past now, and moves it
//! `t = per / max` later.

/// A limit read from its spec (`max/per ms/burst`) and its TAT.
pub(crate) struct Rate {
    t: f64,
    tol: f64,
    /// The theoretical arrival time (µs), never before the read's now.
    pub(crate) tat: f64,
    /// Whether a start moved it (it is written back).
    pub(crate) moved: bool,
}

impl Rate {
    /// `None` for no spec, or one no verb wrote (no limit), as the script's pattern
    /// `^(%d+)/(%d+)/(%d+)$` reads it.
    pub(crate) fn read(spec: Option<&str>, tat: Option<i64>, now_us: i64) -> Option<Rate> {
        let [max, per, burst] = crate::rate::spec_parts(spec?)?.map(|p| p.parse::<f64>().unwrap_or(0.0));
        if max < 1.0 || per < 1.0 || burst < 1.0 {
            return None;
        }
        let t = per * 1000.0 / max;
        let now = now_us as f64;
        let tat = tat.map_or(now, |v| (v as f64).max(now));
        Some(Rate {
            t,
            tol: (burst - 1.0) * t + (t / 2.0).min(10_000.0),
            tat,
            moved: false,
        })
    }

    /// Whether `r` (none: no limit) admits a start at `now_us`.
    pub(crate) fn admits(r: Option<&Rate>, now_us: i64) -> bool {
        r.is_none_or(|r| r.tat - now_us as f64 <= r.tol)
    }

    /// A start under `r` (none: no limit).
    pub(crate) fn take(r: Option<&mut Rate>) {
        if let Some(r) = r {
            r.tat += r.t;
            r.moved = true;
        }
    }

    /// When it admits its next start (µs).
    pub(crate) fn next(&self) -> f64 {
        self.tat - self.tol
    }

    /// The TAT as the store keeps it: whole µs, rounded up.
    pub(crate) fn stored_tat(&self) -> i64 {
        self.tat.ceil() as i64
    }
}
