//! The locks plane (on by default): renews the lease of every in-flight job a third of a lease before it
//! lapses, so a handler that runs many leases long is never reaped. A renewal answered stale or gone
//! means someone else may hold the job now: its cancel token fires with reason `lease lost`.

use std::sync::Arc;
use std::time::Duration;

use super::{lock, Shared};
use crate::cancel::LEASE_LOST;
use crate::store::Extended;

pub(crate) async fn renew(shared: Arc<Shared>) {
    let lease = shared.opts.lease;
    let every = (lease / 3).max(Duration::from_millis(5));
    loop {
        // in-flight jobs still finish after a stop (and jobs still handed over start): the leases
        // are kept until the loop has ended
        tokio::select! {
            _ = tokio::time::sleep(every) => {}
            _ = shared.ended.cancelled() => return,
        }
        let jobs: Vec<_> = lock(&shared.inflight)
            .iter()
            .map(|(id, t)| (id.clone(), t.clone()))
            .collect();
        let shared_ref = &shared;
        let renewals = jobs.iter().map(|(id, t)| async move {
            let r = shared_ref
                .store
                .extend_lock(&shared_ref.queue, id, t.token, lease)
                .await;
            (id, t, r)
        });
        for (id, t, r) in futures::future::join_all(renewals).await {
            match r {
                Ok(Extended::Ok) => {}
                Ok(Extended::Stale | Extended::Gone) => {
                    // the job's own settle landing first is not a loss (it is untracked only once
                    // the settle's reply is read): only a job whose handler still runs lost it
                    let running = lock(&shared.inflight)
                        .get(id)
                        .is_some_and(|cur| cur.token == t.token && !cur.settling);
                    if running {
                        tracing::warn!(queue = %shared.queue, %id, token = t.token, "lease lost; cancelling the handler");
                        t.cancel.cancel(Some(LEASE_LOST.to_string()));
                    }
                }
                Err(e) => {
                    tracing::debug!(queue = %shared.queue, %id, error = %e, "lease renewal failed; retrying next round")
                }
            }
        }
    }
}
