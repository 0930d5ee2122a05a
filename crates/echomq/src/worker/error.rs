//! [`JobError`]: what a handler returns when its job did not simply succeed — a failure (any error,
//! through `?`) or one of the other verdicts: discard, retry after a delay, cancel, snooze.

use std::fmt;
use std::time::Duration;

use crate::cancel::Cancelled;
use crate::consumer::Verdict;

/// The error side of a handler's `Result<O, JobError>`.
///
/// `?` converts any `E: Into<anyhow::Error>` — every `std::error::Error + Send + Sync + 'static`,
/// `anyhow::Error` itself — into a failure: the job is retried after the worker's retry delay, and
/// goes dead with the error's text once its attempts are spent. (Like `anyhow::Error`, `JobError`
/// is not itself a `std::error::Error`: that is what lets the conversion cover every error.) A
/// [`Cancelled`] from `ctx.cancel_token().check()?` ends the job cancelled instead.
///
/// The other verdicts are built by name: [`discard`](Self::discard),
/// [`retry_after`](Self::retry_after), [`cancel`](Self::cancel), [`snooze`](Self::snooze).
pub struct JobError {
    verdict: Inner,
}

enum Inner {
    Failed(anyhow::Error),
    Discard(String),
    RetryAfter(Duration),
    Cancel(String),
    Snooze(Duration),
}

impl JobError {
    /// A failure with this message (retried, then dead).
    pub fn msg(message: impl fmt::Display) -> Self {
        Self {
            verdict: Inner::Failed(anyhow::Error::msg(message.to_string())),
        }
    }

    /// Give up now, whatever attempts are left: the job goes dead with this reason.
    pub fn discard(reason: impl fmt::Display) -> Self {
        Self {
            verdict: Inner::Discard(reason.to_string()),
        }
    }

    /// Run again after `delay`; this attempt counts (dead once the budget is spent).
    pub fn retry_after(delay: Duration) -> Self {
        Self {
            verdict: Inner::RetryAfter(delay),
        }
    }

    /// Stop: the job ends cancelled, with this reason.
    pub fn cancel(reason: impl fmt::Display) -> Self {
        Self {
            verdict: Inner::Cancel(reason.to_string()),
        }
    }

    /// Not now: give the job back, ready again after `delay`, with this attempt unused.
    pub fn snooze(delay: Duration) -> Self {
        Self {
            verdict: Inner::Snooze(delay),
        }
    }

    /// What the consumer does with the job.
    pub(crate) fn into_verdict(self) -> Verdict {
        match self.verdict {
            Inner::Failed(e) => match e.downcast_ref::<Cancelled>() {
                Some(c) => Verdict::Cancel(c.reason.clone().unwrap_or_else(|| "cancelled".into())),
                // the error and its causes, on one line
                None => Verdict::Error(format!("{e:#}")),
            },
            Inner::Discard(reason) => Verdict::Discard(reason),
            Inner::RetryAfter(delay) => Verdict::RetryAfter(delay),
            Inner::Cancel(reason) => Verdict::Cancel(reason),
            Inner::Snooze(delay) => Verdict::Release(delay),
        }
    }
}

impl<E: Into<anyhow::Error>> From<E> for JobError {
    fn from(e: E) -> Self {
        Self {
            verdict: Inner::Failed(e.into()),
        }
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Inner::Failed(e) => write!(f, "JobError::Failed({e:?})"),
            Inner::Discard(r) => write!(f, "JobError::Discard({r:?})"),
            Inner::RetryAfter(d) => write!(f, "JobError::RetryAfter({d:?})"),
            Inner::Cancel(r) => write!(f, "JobError::Cancel({r:?})"),
            Inner::Snooze(d) => write!(f, "JobError::Snooze({d:?})"),
        }
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.verdict {
            Inner::Failed(e) => write!(f, "{e:#}"),
            Inner::Discard(r) => write!(f, "discarded: {r}"),
            Inner::RetryAfter(d) => write!(f, "retry after {d:?}"),
            Inner::Cancel(r) => write!(f, "cancelled: {r}"),
            Inner::Snooze(d) => write!(f, "snoozed for {d:?}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> std::io::Result<()> {
        Err(std::io::Error::new(std::io::ErrorKind::NotFound, "no such file"))
    }

    fn handler_io() -> Result<(), JobError> {
        io()?;
        Ok(())
    }

    fn handler_anyhow() -> Result<(), JobError> {
        Err(anyhow::anyhow!("root cause")).map_err(|e: anyhow::Error| e.context("sending"))?;
        Ok(())
    }

    fn handler_cancel_check() -> Result<(), JobError> {
        let token = crate::CancelToken::new();
        token.cancel(Some("operator".into()));
        token.check()?;
        Ok(())
    }

    #[test]
    fn question_mark_turns_any_error_into_a_failure_and_a_cancel_check_into_a_cancel() {
        assert_eq!(
            handler_io().unwrap_err().into_verdict(),
            Verdict::Error("no such file".into())
        );
        assert_eq!(
            handler_anyhow().unwrap_err().into_verdict(),
            Verdict::Error("sending: root cause".into())
        );
        assert_eq!(
            handler_cancel_check().unwrap_err().into_verdict(),
            Verdict::Cancel("operator".into())
        );
    }

    #[test]
    fn the_named_verdicts_map_to_their_settles() {
        let d = Duration::from_secs(3);
        assert_eq!(JobError::discard("bad").into_verdict(), Verdict::Discard("bad".into()));
        assert_eq!(JobError::retry_after(d).into_verdict(), Verdict::RetryAfter(d));
        assert_eq!(JobError::cancel("no").into_verdict(), Verdict::Cancel("no".into()));
        assert_eq!(JobError::snooze(d).into_verdict(), Verdict::Release(d));
        assert_eq!(JobError::msg("plain").into_verdict(), Verdict::Error("plain".into()));
    }
}
