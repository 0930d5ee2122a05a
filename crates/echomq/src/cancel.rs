//! Cooperative cancellation: a token per job, fired by a remote cancel request, a lost lease or the
//! consumer's own abort, and checked by the handler where it is safe to stop. A message, never a
//! kill: nothing interrupts a handler that does not look.

use std::sync::{Arc, OnceLock};

use tokio_util::sync::CancellationToken;

/// The reason a lost lease fires the token with.
pub const LEASE_LOST: &str = "lease lost";

/// A job's cancellation token. Clones share one state; only this job's cancel fires it.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    token: CancellationToken,
    reason: OnceLock<Option<String>>,
}

/// Returned by [`CancelToken::check`] when the job was cancelled: a `?` in a handler that
/// returns `Result<_, Cancelled>` stops it there.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("cancelled{}", .reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default())]
pub struct Cancelled {
    /// The reason given with the cancel, if any.
    pub reason: Option<String>,
}

impl CancelToken {
    /// A fresh token, not fired.
    pub fn new() -> Self {
        Self::default()
    }

    /// Fires the token. The first reason wins; later calls change nothing.
    pub fn cancel(&self, reason: Option<String>) {
        let _ = self.inner.reason.set(reason);
        self.inner.token.cancel();
    }

    /// O(1): `Ok(())` while the job may go on, `Err(Cancelled)` once it was cancelled — so
    /// `token.check()?` stops a handler at a safe point.
    pub fn check(&self) -> Result<(), Cancelled> {
        if self.inner.token.is_cancelled() {
            Err(Cancelled {
                reason: self.inner.reason.get().cloned().flatten(),
            })
        } else {
            Ok(())
        }
    }

    /// True once fired.
    pub fn is_cancelled(&self) -> bool {
        self.inner.token.is_cancelled()
    }

    /// Resolves when the token fires — for `tokio::select!` beside the handler's own work.
    pub async fn cancelled(&self) -> Cancelled {
        self.inner.token.cancelled().await;
        Cancelled {
            reason: self.inner.reason.get().cloned().flatten(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_fires_once_with_its_first_reason() {
        let t = CancelToken::new();
        assert!(t.check().is_ok());
        t.cancel(Some("operator".into()));
        t.cancel(Some("later".into()));
        assert_eq!(
            t.check(),
            Err(Cancelled {
                reason: Some("operator".into())
            })
        );
        assert_eq!(t.check().unwrap_err().to_string(), "cancelled: operator");
    }

    #[test]
    fn tokens_are_independent() {
        let (a, b) = (CancelToken::new(), CancelToken::new());
        a.cancel(None);
        assert!(a.is_cancelled());
        assert!(b.check().is_ok());
    }
}
