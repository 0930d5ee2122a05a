//! The settler: turns verdicts into fenced settles, and fills the slots they free. A lone finished
//! job settles at once; jobs that finish while settle round trips are out (as many at once as the
//! store keeps busy) go together in the next `complete_many` (the group commit), so settles never
//! wait behind claims or parks and one round trip settles many. The slots of a batch stay taken
//! until its settles are sent: the claim for them rides behind the completions in the same round
//! trip (`complete_then_claim`), or follows the other settles, so a claim never overtakes the
//! settle whose slot it fills (a lane job's slot is free in the store only once its settle has
//! run).

use std::sync::Arc;
use std::time::Duration;

use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit};
use tokio::task::JoinHandle;

use super::run::Launcher;
use super::{Shared, Verdict};
use crate::error::Result;
use crate::job::ClaimedJob;
use crate::keyspace::JobId;
use crate::store::{CancelledRequest, DiscardRequest, RetryRequest, SettleOptions};
use crate::store::{Claimed, Completion, Settled, BATCH_MAX, DURATION_MAX_MS};

/// A job whose handler returned.
#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) id: JobId,
    pub(crate) token: u64,
    pub(crate) verdict: Verdict,
    /// The attempt that ran (1 for the first) and the policy that decides the wait after it
    /// failed (the job's own, else the consumer's).
    pub(crate) attempt: u64,
    pub(crate) retry: crate::RetryPolicy,
    /// The slot the job ran on: held until its settle is sent, then filled by the claim behind it
    /// or freed.
    pub(crate) permit: Option<OwnedSemaphorePermit>,
}

pub(crate) struct Settler;

impl Settler {
    /// Spawns the settler; it ends once every sender is gone and the channel is drained.
    pub(crate) fn spawn(
        shared: Arc<Shared>,
        mut rx: mpsc::UnboundedReceiver<Finished>,
        launcher: Launcher,
    ) -> JoinHandle<()> {
        tokio::spawn(async move {
            // settle round trips in flight at once, as many as the store keeps busy: while they
            // are out, the jobs finishing meanwhile go in the next. Each claims only for its own
            // batch's slots, behind that batch's settles, so a claim still never overtakes the
            // settle whose slot it fills.
            let most = shared.store.settle_round_trips().max(1);
            let mut in_flight = FuturesUnordered::new();
            let mut open = true;
            while open || !in_flight.is_empty() {
                tokio::select! {
                    first = rx.recv(), if open && in_flight.len() < most => match first {
                        Some(first) => {
                            // the jobs one reply started finish together: let those already
                            // woken finish before the batch is taken, so that one round trip
                            // settles them together instead of the first alone
                            tokio::task::yield_now().await;
                            let mut batch = vec![first];
                            while batch.len() < BATCH_MAX {
                                match rx.try_recv() {
                                    Ok(f) => batch.push(f),
                                    Err(_) => break,
                                }
                            }
                            in_flight.push(settle_batch(&shared, &launcher, batch));
                        }
                        None => open = false,
                    },
                    Some(()) = in_flight.next(), if !in_flight.is_empty() => {}
                }
            }
        })
    }
}

async fn settle_batch(shared: &Shared, launcher: &Launcher, mut batch: Vec<Finished>) {
    let permits: Vec<OwnedSemaphorePermit> = batch.iter_mut().filter_map(|f| f.permit.take()).collect();
    let (done, other): (Vec<Finished>, Vec<Finished>) = batch
        .into_iter()
        .partition(|f| matches!(f.verdict, Verdict::Done | Verdict::DoneWith(_)));
    // the other verdicts settle first, each on its own: the claim comes after them all
    let others = futures::future::join_all(other.iter().map(|f| replayed(shared, || settle_one(shared, f)))).await;
    for (f, r) in other.iter().zip(others) {
        report(shared, f, r.map_err(|e| e.to_string()));
    }
    let (want, reserved) = if shared.claiming() {
        let free = permits.len().min(BATCH_MAX);
        // and as many to hold as the prefetch has room for
        (free, launcher.reserve(BATCH_MAX - free))
    } else {
        (0, 0)
    };
    let claimed = complete_then_claim(shared, &done, want, reserved).await;
    // untrack even when the settle failed: the lease will lapse and recovery return the job
    for f in done.iter().chain(other.iter()) {
        shared.untrack(&f.id, f.token);
    }
    // the claimed jobs start on the batch's slots (held jobs first), the rest are held; the slots
    // left over are freed
    let held = launcher.start_all(claimed, permits);
    launcher.unreserve(reserved.saturating_sub(held));
}

/// The completions of `done`, then a claim of `want` jobs to start and `held` more to hold behind
/// them, in one round trip; the jobs it claimed. Each completion's reply is reported here.
async fn complete_then_claim(shared: &Shared, done: &[Finished], want: usize, held: usize) -> Vec<ClaimedJob> {
    let want_all = want + held;
    let request = || shared.claim_request(want_all).held(held as u32);
    let (store, q) = (&shared.store, &shared.queue);
    // a rate limit's wait is the loop's to keep: this claim only fills the slots a settle freed
    let claimed = |r: Result<Claimed>| {
        r.map(|c| c.jobs).unwrap_or_else(|e| {
            tracing::debug!(queue = %q, error = %e, "the claim behind a settle failed; the loop claims next");
            Vec::new()
        })
    };
    if done.is_empty() {
        if want_all == 0 {
            return Vec::new();
        }
        return claimed(store.claim(q, request()).await);
    }
    let jobs = completions(done);
    let settle = shared.opts.settle_options();
    let (completed, jobs) = match store.complete_then_claim(q, &jobs, settle, request()).await {
        // a resend's round trip (after a cluster's redirect, or a script reload) failed: the
        // completions go again as after a failed call (the claim landed: its jobs are kept)
        Ok(r) => match r.completed {
            Err(e) if e.is_unreachable() => (
                replayed(shared, || complete_all(shared, done)).await,
                claimed(r.claimed),
            ),
            completed => (completed, claimed(r.claimed)),
        },
        // nothing known of the round trip: the completions are sent again on their own (fenced:
        // one whose first try landed answers stale) and nothing is claimed
        Err(e) if e.is_unreachable() => (replayed(shared, || complete_all(shared, done)).await, Vec::new()),
        Err(e) => (Err(e), Vec::new()),
    };
    match completed {
        Ok(replies) => {
            for (f, r) in done.iter().zip(replies) {
                report(shared, f, Ok(r));
            }
        }
        // the settles landed, and the replicas asked for did not confirm them in time: settling
        // them again would only be refused (they are finished), so each is reported as it is
        Err(e @ crate::Error::NotReplicated { .. }) => {
            for f in done {
                report(shared, f, Err(e.to_string()));
            }
        }
        // one entry refused the whole call before it wrote (an output over the store's limit,
        // say): each settles alone, so only that one fails
        Err(e) if !e.is_unreachable() => {
            tracing::debug!(queue = %shared.queue, error = %e, "complete_many refused; settling one by one");
            for f in done {
                let r = complete_alone(shared, f).await;
                report(shared, f, r.map_err(|e| e.to_string()));
            }
        }
        Err(e) => {
            for f in done {
                report(shared, f, Err(e.to_string()));
            }
        }
    }
    jobs
}

/// Runs a settle again while the store is unreachable, with a doubling pause (50 ms up to 1 s),
/// for as long as half a lease: a connection reset must not cost a finished job its settle and a
/// second run. The token fences a replay: one whose first try landed answers stale or gone.
async fn replayed<T, F, Fut>(shared: &Shared, mut settle: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T>>,
{
    let began = tokio::time::Instant::now();
    let within = shared.opts.lease / 2;
    let mut pause = Duration::from_millis(50);
    loop {
        match settle().await {
            Err(e) if e.is_unreachable() && began.elapsed() + pause < within => {
                tracing::debug!(queue = %shared.queue, error = %e, ?pause, "settle: store unreachable; trying again");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            r => return r,
        }
    }
}

/// The completions of finished jobs, each with its output.
fn completions(done: &[Finished]) -> Vec<Completion> {
    done.iter()
        .map(|f| Completion {
            id: f.id.clone(),
            token: f.token,
            output: match &f.verdict {
                Verdict::DoneWith(o) => Some(o.clone()),
                _ => None,
            },
        })
        .collect()
}

async fn complete_all(shared: &Shared, done: &[Finished]) -> Result<Vec<Settled>> {
    let settle = shared.opts.settle_options();
    match done {
        [] => Ok(Vec::new()),
        [one] => Ok(vec![complete_alone(shared, one).await?]),
        many => {
            let jobs = completions(many);
            shared.store.complete_many(&shared.queue, &jobs, settle).await
        }
    }
}

/// One completion. When the store refuses it outright (an output over its limit, say), the
/// attempt fails instead, naming the refusal: the job is retried or goes dead with that error
/// rather than lapsing unexplained and running again with the same outcome.
async fn complete_alone(shared: &Shared, f: &Finished) -> Result<Settled> {
    let (store, q, opts) = (&shared.store, &shared.queue, &shared.opts);
    let output = match &f.verdict {
        Verdict::DoneWith(o) => Some(o.as_slice()),
        _ => None,
    };
    match store
        .complete(
            q,
            &Completion::new(f.id.clone(), f.token).output(output),
            opts.settle_options(),
        )
        .await
    {
        // refusals that would repeat on every try; any other error is left to the lease
        Err(e @ (crate::Error::PayloadTooLarge { .. } | crate::Error::InvalidOption { .. })) => {
            tracing::warn!(queue = %q, id = %f.id, token = f.token, error = %e, "completion refused; failing the attempt");
            let failed = Finished {
                id: f.id.clone(),
                token: f.token,
                verdict: Verdict::Error(format!("completion refused: {e}")),
                attempt: f.attempt,
                retry: f.retry.clone(),
                permit: None,
            };
            settle_one(shared, &failed).await
        }
        r => r,
    }
}

async fn settle_one(shared: &Shared, f: &Finished) -> Result<Settled> {
    use crate::store::{Discarded, Retried};
    let (store, q, opts) = (&shared.store, &shared.queue, &shared.opts);
    let settle = opts.settle_options();
    let retried = |r: Retried, error: &str| match r {
        Retried::Retrying => Settled::Ok,
        Retried::Dead => {
            tracing::error!(queue = %q, id = %f.id, %error, "job dead: its last attempt failed");
            Settled::Ok
        }
        Retried::Stale => Settled::Stale,
        Retried::Gone => Settled::Gone,
    };
    Ok(match &f.verdict {
        Verdict::Cancel(reason) => {
            store
                .complete_cancelled(
                    q,
                    &f.id,
                    f.token,
                    &CancelledRequest::new().reason(Some(reason)).settle(settle),
                )
                .await?
        }
        Verdict::Error(e) => {
            let delay = f
                .retry
                .delay(f.attempt, e)
                .min(Duration::from_millis(DURATION_MAX_MS - 1));
            let r = store
                .retry(q, &f.id, f.token, &retry_request(delay, opts.max_attempts, e, settle))
                .await?;
            scheduled(shared, matches!(r, Retried::Retrying), delay);
            retried(r, e)
        }
        Verdict::RetryAfter(delay) => {
            // the longest delay a store takes: a handler's "after forever" is as late as it goes
            let delay = (*delay).min(Duration::from_millis(DURATION_MAX_MS - 1));
            let r = store
                .retry(
                    q,
                    &f.id,
                    f.token,
                    &retry_request(delay, opts.max_attempts, "retry requested", settle),
                )
                .await?;
            scheduled(shared, matches!(r, Retried::Retrying), delay);
            retried(r, "retry requested")
        }
        Verdict::Release(delay) => {
            let delay = (*delay).min(Duration::from_millis(DURATION_MAX_MS - 1));
            let r = store.release(q, &f.id, f.token, delay).await?;
            scheduled(shared, matches!(r, Settled::Ok), delay);
            r
        }
        Verdict::Discard(reason) => match store
            .discard(q, &f.id, f.token, &DiscardRequest::new(reason).settle(settle))
            .await?
        {
            Discarded::Dead => {
                tracing::error!(queue = %q, id = %f.id, %reason, "job dead: discarded");
                Settled::Ok
            }
            Discarded::Stale => Settled::Stale,
            Discarded::Gone => Settled::Gone,
        },
        Verdict::Done | Verdict::DoneWith(_) => {
            store
                .complete(q, &Completion::new(f.id.clone(), f.token), settle)
                .await?
        }
    })
}

/// A settle that `landed` scheduled its job `delay` from now (a delay of 0 made it ready at once,
/// and the settle's wake token tells the parks): the loop's next park ends by its due time, as
/// the promote that bounded that park may have run before the job was scheduled.
fn scheduled(shared: &Shared, landed: bool, delay: Duration) {
    if landed && !delay.is_zero() {
        shared.due_in(delay);
    }
}

fn report(shared: &Shared, f: &Finished, r: std::result::Result<Settled, String>) {
    match r {
        Ok(Settled::Ok) => {}
        // after a lost lease, or a replay whose first try landed: the job may have run twice,
        // which an operator must hear of
        Ok(why) => tracing::warn!(
            queue = %shared.queue, id = %f.id, token = f.token, reply = ?why,
            "settle refused: this consumer no longer holds the job"
        ),
        Err(error) => tracing::warn!(
            queue = %shared.queue, id = %f.id, token = f.token, %error,
            "settle lost to a store error; the job will be redelivered when its lease lapses"
        ),
    }
}

fn retry_request(delay: Duration, max_attempts: u32, error: &str, settle: SettleOptions) -> RetryRequest {
    RetryRequest::new(error)
        .after(delay)
        .max_attempts(max_attempts)
        .settle(settle)
}
