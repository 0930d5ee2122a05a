//! Hand-offs ([`crate::store::Store::park_with_handoff`]): a consumer of this process parks with a
//! claim request, and the transaction that makes work claimable for its queue claims for it — the
//! claim twin, in that same transaction, under a savepoint so a failing claim never fails the verb
//! that woke it. The jobs are handed over once that transaction has committed; a rollback hands
//! nothing and drops the offer. Same replies as a claim right after the commit, one durable
//! transaction fewer.
//!
//! An enqueue goes further ([`direct`]): when nothing else of its queue is claimable, the first
//! parked offer takes the new jobs as they are written — each row's one update of the claim, with
//! no ring, pending or claim bookkeeping written only to be undone in the same transaction.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use super::db::Db;
use super::{claim, settle_arg, Wake, Wakes};
use crate::error::Result;
use crate::job::ClaimedJob;
use crate::store::{ClaimRequest, Handoff, BATCH_MAX};

/// One parked consumer's offer.
struct Offer {
    id: u64,
    claim: ClaimRequest,
    handoff: Handoff,
}

/// The offers of one queue, in the order their consumers parked.
#[derive(Default)]
pub(super) struct Offers {
    next: AtomicU64,
    list: Mutex<Vec<Offer>>,
}

/// An offer in the registry: withdrawn when dropped, unless a transaction took it first.
pub(super) struct Registered {
    wake: Arc<Wake>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        let mut list = self.wake.offers.list.lock().unwrap_or_else(PoisonError::into_inner);
        list.retain(|o| o.id != self.id);
    }
}

/// Registers an offer of `claim` on `wake`'s queue until the returned guard drops.
pub(super) fn register(wake: Arc<Wake>, claim: ClaimRequest, handoff: Handoff) -> Registered {
    let id = wake.offers.next.fetch_add(1, Ordering::Relaxed);
    wake.offers
        .list
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Offer { id, claim, handoff });
    Registered { wake, id }
}

/// What one transaction may serve as it writes: its queue's offers, when a consumer of this
/// process parked offering a claim, and the offer an enqueue served ([`direct`]).
#[derive(Default)]
pub(crate) struct Direct {
    wake: Option<Arc<Wake>>,
    served: RefCell<Option<(Offer, Vec<ClaimedJob>)>>,
}

impl Direct {
    /// The offers of `queue` in this process, if any are registered now.
    pub(super) fn of(wakes: &Wakes, queue: &str) -> Self {
        let wakes = wakes.lock().unwrap_or_else(PoisonError::into_inner);
        let wake = wakes.get(queue).filter(|w| !w.offers.is_empty()).cloned();
        Direct {
            wake,
            served: RefCell::default(),
        }
    }
}

impl Offers {
    fn is_empty(&self) -> bool {
        self.list.lock().unwrap_or_else(PoisonError::into_inner).is_empty()
    }
}

/// The offer an enqueue serves as it writes ([`direct`]): how many of its first ready flat jobs
/// the offer takes, and their lease deadline.
pub(crate) struct Taken {
    offer: Offer,
    /// How many jobs it takes at most (fewer when the byte bound stops it first).
    pub(crate) n: usize,
    /// The lease deadline their rows are written with.
    pub(crate) deadline: i64,
    /// The attempt budget of a job without its own.
    pub(crate) max_attempts: u32,
}

/// An enqueue's hand-off as it writes, asked before its rows are written: `ready` is how many new
/// ready flat jobs it holds, `idle` whether the queue is not paused and its ring is empty (read by
/// the enqueue with its other checks). When a consumer of this process parked offering a claim and
/// the queue is idle (so nothing else is claimable: these jobs are what a claim right after the
/// commit would take first), the first offer takes the first of them, as many as its claim would
/// (at most its n, and none once their payloads reach [`crate::store::BATCH_BYTES_MAX`]): the
/// enqueue writes each row active under the offer's lease at attempt 1, as the claim would leave it, and
/// reports them with [`served`]; the store hands them over after the commit. Unlike [`serve`]'s
/// claims it runs without a savepoint: it writes nothing the enqueue's own rows do not, and a
/// rollback drops the offer.
pub(crate) fn direct(db: &Db, ready: usize, idle: bool) -> Option<Taken> {
    let wake = db.direct.wake.as_ref()?;
    if ready == 0 || !idle || wake.offers.is_empty() {
        return None;
    }
    // a queue rate limit is the claim's to enforce: the offer is served by the claim twin instead
    // (a failed read too, which that claim then meets)
    if !matches!(db.gget("rate"), Ok(None)) {
        return None;
    }
    let offer = {
        let mut list = wake.offers.list.lock().unwrap_or_else(PoisonError::into_inner);
        if list.is_empty() {
            return None;
        }
        list.remove(0)
    };
    let n = (offer.claim.n as usize).min(BATCH_MAX).min(ready);
    let deadline = db.now() + offer.claim.lease.as_millis() as i64;
    let max_attempts = offer.claim.max_attempts;
    Some(Taken {
        offer,
        n,
        deadline,
        max_attempts,
    })
}

/// The jobs an enqueue wrote for the offer it took ([`direct`]): handed over after the commit, and
/// the transaction then wakes the queue (which serves the other offers when jobs are left).
pub(crate) fn served(db: &Db, taken: Taken, jobs: Vec<ClaimedJob>) {
    *db.direct.served.borrow_mut() = Some((taken.offer, jobs));
    db.woke.set(true);
}

/// Jobs claimed in a transaction for the offers it took, handed over after its commit.
#[derive(Default)]
pub(super) struct Handed {
    list: Vec<(Handoff, Vec<ClaimedJob>)>,
    /// How many of them an enqueue wrote already claimed ([`direct`]): they took no wake token.
    direct: i64,
}

impl Handed {
    /// How many jobs.
    pub(super) fn jobs(&self) -> i64 {
        self.list.iter().map(|(_, jobs)| jobs.len() as i64).sum()
    }

    /// How many wake tokens the transaction pushed for jobs it then handed over: the parks need
    /// them no longer.
    pub(super) fn tokens(&self) -> i64 {
        self.jobs() - self.direct
    }

    /// Hands each consumer its jobs. Only after the commit.
    pub(super) fn deliver(self) {
        for (handoff, jobs) in self.list {
            handoff(jobs);
        }
    }
}

/// Serves the offers of `db`'s queue inside its transaction (one that made work claimable), in the
/// order their consumers parked, until a claim comes back short: nothing more to claim. Each claim
/// is a leg of its own ([`Db::leg`]): a failing one is undone and ends the serving (its consumer
/// claims itself after the commit). The offers it took and did not serve are dropped (their
/// consumers wake with the commit as ever). Errs only when a failed claim could not be undone: the
/// transaction must then fail whole rather than commit a claim nobody is handed.
pub(super) fn serve(db: &Db, wake: &Wake) -> Result<Handed> {
    let mut handed = Handed::default();
    if let Some((offer, jobs)) = db.direct.served.borrow_mut().take() {
        // an enqueue served the first offer as it wrote; short: it took every claimable job
        let short = jobs.len() < (offer.claim.n as usize).min(BATCH_MAX);
        handed.direct = jobs.len() as i64;
        handed.list.push((offer.handoff, jobs));
        if short {
            return Ok(handed);
        }
    }
    let taken = std::mem::take(&mut *wake.offers.list.lock().unwrap_or_else(PoisonError::into_inner));
    for offer in taken {
        let n = (offer.claim.n as usize).min(BATCH_MAX) as i64;
        let recmax = settle_arg(offer.claim.settle);
        let (lease, max_attempts) = (offer.claim.lease.as_millis() as i64, offer.claim.max_attempts as i64);
        match db.leg(|| claim::claim(db, n, lease, max_attempts, recmax))? {
            Ok(claimed) => {
                let jobs = claimed.jobs;
                let short = (jobs.len() as i64) < n;
                if !jobs.is_empty() {
                    handed.list.push((offer.handoff, jobs));
                }
                if short {
                    break;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "hand-off claim failed; the parked consumers claim themselves");
                break;
            }
        }
    }
    Ok(handed)
}
