//! The loop itself: the beat, the drain leg (named so: not the admin verb `drain`), the park, the
//! degraded back-off, and the cancel forwarder.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{FutureExt, StreamExt};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinHandle;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use super::panics;
use super::settle::Finished;
use super::{lock, JobContext, Shared, Verdict};
use crate::error::Error;
use crate::job::ClaimedJob;
use crate::store::{ClaimRequest, Claimed, RoundRequest, BATCH_MAX};

/// Starts claimed jobs, each on a task of its own. Cloned into every offer a park makes (a store
/// that serves the offer starts its jobs right after the commit, on the thread that committed: no
/// hop through this loop; an offer served after its park ended starts them all the same) and into
/// the settler, which starts the jobs it claimed behind a settle.
#[derive(Clone)]
pub(crate) struct Launcher {
    shared: Arc<Shared>,
    /// The settler's inbox, held weakly: the loop and the running handlers keep it open, and the
    /// settler (which holds a launcher too) ends once they are gone.
    settle_tx: mpsc::WeakUnboundedSender<Finished>,
    /// The consumer's slots, one per job it may run at once.
    slots: Arc<Semaphore>,
    /// The handler tasks, and the offers still in a store's hands (a token each): the loop's end
    /// waits for both.
    tracker: TaskTracker,
    /// The jobs held (prefetch), oldest first.
    held: Arc<std::sync::Mutex<std::collections::VecDeque<Held>>>,
    /// The room for more held jobs: the prefetch less the jobs held and the room claims in flight
    /// reserved.
    room: Arc<std::sync::Mutex<usize>>,
}

/// The loop's own state across beats.
struct Beat {
    shared: Arc<Shared>,
    launcher: Launcher,
    /// Keeps the settler's inbox open while the loop runs.
    _settle_tx: mpsc::UnboundedSender<Finished>,
    slots: Arc<Semaphore>,
    streak: u32,
    /// When the current run of failed rounds began (None while healthy).
    degraded_since: Option<Instant>,
    /// Whether a round has succeeded yet: the first outage's log line says the consumer is
    /// waiting for a store it has never reached.
    reached: bool,
    /// When a rate limit that held work back at the last claim admits a start again, and whether
    /// it is the queue's own (nothing of the queue starts sooner).
    admits_at: Option<(Instant, bool)>,
    /// The consumer's entry in the registry of live consumers, and when it was last written.
    entry: crate::registry::ConsumerEntry,
    registered: Option<Instant>,
    /// Whether the last park ended on a wake (new work, most likely): the next beat claims first.
    woken: bool,
}

/// How many beats a consumer's registry entry outlives its last registration: a consumer writes it
/// at least every [`REGISTRY_REFRESH_BEATS`], and a round (a drain leg of up to a beat, then a park
/// of up to a beat) may take two beats and a little, so an entry lapses only when a consumer has
/// missed a few refreshes' worth of beats.
const REGISTRY_TTL_BEATS: u32 = 12;

/// How many beats an unchanged registry entry goes unwritten: its entry is written once a beat at
/// most, when the jobs in hand changed, and at least this often (an idle consumer's writes are
/// most of what it sends).
const REGISTRY_REFRESH_BEATS: u32 = 6;

/// How close to a rate limit's next admission a park is aimed at the admission itself, so that the
/// consumer claims on time (a limit admits no start before its slot, and every ms a claim comes
/// late is lost to the rate: at 200/s an interval is 5 ms): a park this short ends on time on
/// every store (a Redis park ends its `BLPOP` itself, whose own timeouts move in the server's
/// 100 ms steps); a longer wait parks until this far before the admission, and the next beat's
/// claim aims again.
const PRECISE_WAIT: Duration = Duration::from_millis(150);

/// How far ahead of a due time (a scheduled job's, a retry's) a longer park bounded by it ends: a
/// Redis park of up to 250 ms ends on time (the store ends the block itself), a longer one when
/// the server times the `BLPOP` out, in its own 100 ms steps — a job due then would start up to
/// 100 ms late.
const DUE_APPROACH: Duration = Duration::from_millis(200);

/// The last part of a wait for a rate limit's slot slept on a thread of the blocking pool, whose
/// sleep ends within tens of µs of its deadline: the runtime's timer moves in whole ms and ends a
/// sleep up to a ms late, and each ms late is lost to the rate (a limit admits no start before its
/// slot; at 200/s a slot is 5 ms apart).
const FINE_SLEEP: Duration = Duration::from_millis(2);

/// Sleeps until `at`: on the runtime's timer until [`FINE_SLEEP`] before it, then on a blocking
/// thread for the rest.
async fn sleep_until_precisely(at: Instant) {
    if let Some(coarse) = at.checked_sub(FINE_SLEEP) {
        tokio::time::sleep_until(coarse.into()).await;
    }
    let rest = at.saturating_duration_since(Instant::now());
    if rest.is_zero() {
        return;
    }
    // a failed blocking task (a runtime shutting down) only ends the sleep early: the claim then
    // comes early and is told to wait again
    let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
}

/// What ends a leg early.
enum Leg {
    /// Go on with the beat.
    Healthy,
    /// A wire error: back off.
    Degraded(Error),
    /// Stop or ttl: leave the loop.
    Exit,
}

pub(crate) async fn run(
    shared: Arc<Shared>,
    launcher: Launcher,
    settle_tx: mpsc::UnboundedSender<Finished>,
    settler: JoinHandle<()>,
) {
    let slots = launcher.slots.clone();
    let concurrency = u32::try_from(shared.opts.concurrency).unwrap_or(u32::MAX);
    let ttl = (shared.opts.beat * REGISTRY_TTL_BEATS).min(crate::registry::CONSUMER_TTL_MAX);
    let mut entry = crate::registry::ConsumerEntry::for_this_process(concurrency, ttl);
    entry.kinds = shared.opts.kinds.clone();
    let mut beat = Beat {
        shared: shared.clone(),
        launcher,
        _settle_tx: settle_tx,
        slots,
        streak: 0,
        degraded_since: None,
        reached: false,
        admits_at: None,
        entry,
        registered: None,
        woken: false,
    };
    loop {
        match beat.once().await {
            Leg::Healthy => {
                if beat.streak > 0 {
                    shared.back.notify_one();
                }
                // the end of the back-off warnings: an operator who saw them must see them end
                if let Some(since) = beat.degraded_since.take() {
                    let degraded_ms = u64::try_from(since.elapsed().as_millis()).unwrap_or(u64::MAX);
                    tracing::warn!(
                        queue = %shared.queue, failed_rounds = beat.streak, degraded_ms,
                        "store reachable again; consuming"
                    );
                }
                beat.streak = 0;
                beat.reached = true;
            }
            Leg::Exit => break,
            // retrying cannot mend it: the loop ends, and stop/wait_for hand the error to the owner
            Leg::Degraded(e) if e.is_misconfigured() => {
                tracing::error!(queue = %shared.queue, error = %e, "the store refuses this consumer; it ends");
                shared.refuse(e);
                break;
            }
            Leg::Degraded(e) => {
                beat.streak += 1;
                beat.degraded_since.get_or_insert_with(Instant::now);
                let sleep = shared.opts.degraded_sleep(beat.streak);
                let what = if e.is_unreachable() && !beat.reached {
                    "store unreachable; waiting for it (backing off)"
                } else if e.is_unreachable() {
                    "store unreachable; backing off"
                } else {
                    "store refused the consumer's round; backing off (a lasting refusal needs an operator)"
                };
                tracing::warn!(queue = %shared.queue, error = %e, streak = beat.streak, ?sleep, "{what}");
                tokio::select! {
                    _ = tokio::time::sleep(sleep) => {}
                    _ = shared.stop.cancelled() => break,
                }
            }
        }
    }
    // jobs a store is still handing over are claimed: they run like the others; in-flight handlers
    // finish and hand their verdicts to the settler, which claims no more, drains and ends
    shared.closing.cancel();
    // the held jobs go back at once, their attempts unused
    beat.launcher.release_held();
    let tracker = beat.launcher.tracker.clone();
    tracker.close();
    tracker.wait().await;
    // the registry's entry goes with the consumer (a failure leaves it to lapse)
    if beat.registered.is_some() {
        if let Err(e) = shared.store.unregister_consumer(&shared.queue, &beat.entry.id).await {
            tracing::debug!(queue = %shared.queue, error = %e, "unregistering the consumer failed; its entry lapses");
        }
    }
    drop(beat);
    let _ = settler.await;
    // the forwarder and the locks plane end with the loop (after a stop, or its ttl)
    shared.stop.cancel();
    shared.ended.cancel();
}

impl Beat {
    fn should_exit(&self) -> bool {
        !self.shared.claiming()
    }

    /// One beat: recover + promote + the first claim in one round trip, the drain leg, the park.
    /// After a park a wake ended, the claim goes first, alone: the work that woke the consumer
    /// starts one round trip after the wake, and recovery and promote follow.
    async fn once(&mut self) -> Leg {
        if self.should_exit() {
            return Leg::Exit;
        }
        let shared = self.shared.clone();
        let opts = &shared.opts;
        let free = self.slots.available_permits().min(BATCH_MAX);
        if std::mem::take(&mut self.woken) && free > 0 {
            let (request, reserved) = self.claim(free);
            let sent = Instant::now();
            match shared.store.claim(&shared.queue, request).await {
                Ok(claimed) => self.launch_first(claimed, sent, reserved).await,
                Err(e) => {
                    self.launcher.unreserve(reserved);
                    return Leg::Degraded(e);
                }
            }
        }
        // the claim before parking: any free slot, not only a batch of them
        let (claim, reserved) = self.claim(self.slots.available_permits().min(BATCH_MAX));
        let want = claim.n as usize;
        let registration = self.registration_due();
        let request = RoundRequest::new(opts.recovery, claim)
            .pump(opts.pump_batch)
            .grace(opts.schedule_grace());
        let sent = Instant::now();
        let (round, beat_ms) = tokio::join!(
            self.shared.store.recover_promote_claim(&self.shared.queue, &request),
            async {
                let entry = registration.as_ref()?;
                shared
                    .store
                    .register_consumer(&shared.queue, entry)
                    .await
                    .inspect_err(|e| {
                        tracing::debug!(queue = %shared.queue, error = %e, "registering the consumer failed; the next beat tries again");
                    })
                    .ok()
            }
        );
        if let Some(ms) = beat_ms {
            self.entry.beat_ms = ms;
        }
        let round = match round {
            Ok(r) => r,
            Err(e) => {
                self.launcher.unreserve(reserved);
                return Leg::Degraded(e);
            }
        };
        // a failed earlier leg does not discard the jobs the claim returned
        let mut empty = true;
        let mut degraded = None;
        match round.claimed {
            Ok(claimed) => {
                empty = claimed.len() < want;
                self.launch_first(claimed, sent, reserved).await;
            }
            Err(e) => {
                self.launcher.unreserve(reserved);
                degraded = Some(e);
            }
        }
        if let Err(e) = round.recovered {
            degraded.get_or_insert(e);
        }
        let (promoted_full, next_due) = match round.promoted {
            Ok(p) => {
                self.refill(&p.refills).await;
                (p.moved >= opts.pump_batch as u64, p.next_due_in)
            }
            Err(e) => {
                degraded.get_or_insert(e);
                (false, None)
            }
        };
        if let Some(e) = degraded {
            return Leg::Degraded(e);
        }
        match self.drain_leg(empty).await {
            Leg::Healthy => {}
            other => return other,
        }
        if promoted_full || self.should_exit() {
            return Leg::Healthy;
        }
        self.park(next_due).await
    }

    /// The entry to write in the registry of live consumers, with the jobs in hand now: the first
    /// time, then once a beat at most — when the jobs in hand changed, else every
    /// [`REGISTRY_REFRESH_BEATS`].
    fn registration_due(&mut self) -> Option<crate::registry::ConsumerEntry> {
        let beat = self.shared.opts.beat;
        let free = self.slots.available_permits();
        let in_hand = u32::try_from(self.shared.opts.concurrency.saturating_sub(free)).unwrap_or(u32::MAX);
        if let Some(at) = self.registered {
            let since = at.elapsed();
            if since < beat || (in_hand == self.entry.in_hand && since < beat * REGISTRY_REFRESH_BEATS) {
                return None;
            }
        }
        self.registered = Some(Instant::now());
        self.entry.in_hand = in_hand;
        Some(self.entry.clone())
    }

    /// A claim for `free` slots, and for as many jobs more to hold as the prefetch has room for
    /// (reserved: the claim's caller gives back what it did not hold).
    fn claim(&self, free: usize) -> (ClaimRequest, usize) {
        let reserved = self.launcher.reserve(BATCH_MAX - free.min(BATCH_MAX));
        (
            self.shared.claim_request(free + reserved).held(reserved as u32),
            reserved,
        )
    }

    /// The schedules the promote left with few slots: their next slots computed here (the store
    /// never parses cron) and written under the version the promote read. Another consumer's
    /// refill of the same request, or an upsert since, has the store refuse this one: nothing to
    /// do. A failure is logged; the next promote asks again.
    async fn refill(&self, requests: &[crate::schedule::RefillRequest]) {
        for request in requests {
            let written = match crate::schedule::refill(request) {
                Ok(refill) => {
                    self.shared
                        .store
                        .refill_schedule(&self.shared.queue, request, &refill)
                        .await
                }
                Err(e) => Err(e),
            };
            if let Err(e) = written {
                tracing::warn!(queue = %self.shared.queue, schedule = %request.name, error = %e, "refilling a schedule's slots failed; the next beat asks again");
            }
        }
    }

    /// Claims until the ring is empty or one beat has passed since the leg began (then the next
    /// beat starts at once, so recover and promote run under a lasting backlog). Stop and ttl are
    /// honoured between claims only.
    async fn drain_leg(&mut self, mut empty: bool) -> Leg {
        let began = Instant::now();
        let beat = self.shared.opts.beat;
        let threshold = self.shared.opts.claim_threshold();
        loop {
            if self.should_exit() {
                return Leg::Exit;
            }
            if empty {
                return Leg::Healthy;
            }
            if began.elapsed() >= beat {
                return Leg::Healthy;
            }
            // wait for a batch of free slots (or the end of the leg); taken and given back at once
            while self.slots.available_permits() < threshold {
                let left = beat.saturating_sub(began.elapsed());
                let slots = self.slots.clone();
                tokio::select! {
                    _ = slots.acquire_many(threshold as u32) => {}
                    _ = tokio::time::sleep(left) => return Leg::Healthy,
                    _ = self.shared.stop.cancelled() => return Leg::Exit,
                }
            }
            let (req, reserved) = self.claim(self.slots.available_permits().min(BATCH_MAX));
            let want = req.n as usize;
            let sent = Instant::now();
            match self.shared.store.claim(&self.shared.queue, req).await {
                Ok(claimed) => {
                    empty = claimed.len() < want;
                    self.launch_first(claimed, sent, reserved).await;
                }
                Err(e) => {
                    self.launcher.unreserve(reserved);
                    return Leg::Degraded(e);
                }
            }
        }
    }

    /// Parks on the wake list for the beat or until the next scheduled job is due, whichever is
    /// sooner. A stop ends the park at once. With free slots the park offers a claim
    /// for them ([`crate::store::Store::park_with_handoff`]): a store that serves it starts the
    /// jobs on the slots reserved here ([`Launcher`]).
    ///
    /// A rate limit that held work back shortens the park to its next admission: within
    /// [`PRECISE_WAIT`] of it the park ends at the admission (the next beat claims then). The
    /// queue's own limit admits nothing sooner, so that park is a sleep on the consumer's timer;
    /// under a group's or a kind's it is a park on the wake lists, which other work still ends,
    /// until [`FINE_SLEEP`] before the admission, then (not woken) a sleep to the admission itself:
    /// a park's own end is a round trip and a ms of timer late, each lost to the rate.
    async fn park(&mut self, next_due: Option<Duration>) -> Leg {
        let beat = self.shared.opts.beat;
        let mut timeout = next_due.map_or(beat, |d| d.min(beat));
        // a job this consumer's settles scheduled since the promote: due by then (taken: the next
        // promote sees the job in `scheduled`)
        if let Some(at) = lock(&self.shared.due).take() {
            timeout = timeout.min(at.saturating_duration_since(Instant::now()));
        }
        // a park bounded by a due time ends DUE_APPROACH before it when that is further off: the
        // next beat's park, that short, ends on time on every store
        if timeout < beat && timeout > DUE_APPROACH {
            timeout -= DUE_APPROACH;
        }
        // the admission a park that times out sleeps on to
        let mut then_at = None;
        if let Some((at, queue_limited)) = self.admits_at {
            let left = at.saturating_duration_since(Instant::now());
            if left <= PRECISE_WAIT && queue_limited {
                return tokio::select! {
                    _ = sleep_until_precisely(at) => Leg::Healthy,
                    _ = self.shared.stop.cancelled() => Leg::Exit,
                };
            }
            if left <= PRECISE_WAIT {
                then_at = Some(at);
                timeout = timeout.min(left.saturating_sub(FINE_SLEEP));
            } else {
                timeout = timeout.min(left - PRECISE_WAIT);
            }
        }
        let timeout = timeout.max(Duration::from_millis(1));
        let shared = self.shared.clone();
        let free = self.slots.available_permits();
        // every free slot is offered (the claim before parking), at most a claim's worth
        let mut reserved = Vec::new();
        while reserved.len() < BATCH_MAX {
            match self.slots.clone().try_acquire_owned() {
                Ok(permit) => reserved.push(permit),
                Err(_) => break,
            }
        }
        // an offer claims for its slots alone: nothing to hold
        let claim = self.shared.claim_request(reserved.len());
        // a store that serves the offer starts its jobs and need not wake this park: the park ends
        // when a slot frees instead (a handler done, or the offer's surplus given back), and the
        // next beat offers it again. Only when every slot is out: a spare one would end it at once
        let ends_on_slot = free == 0 || (shared.store.serves_handoffs() && self.slots.available_permits() == 0);
        // dropped unserved (the park ended first, or the store hands nothing off): slots freed
        let (launcher, offer) = (self.launcher.clone(), self.launcher.tracker.token());
        let handoff: crate::store::Handoff = Box::new(move |jobs| {
            let _ = launcher.start_all(jobs, reserved);
            drop(launcher);
            // the loop's end waits for this offer until here
            drop(offer);
        });
        let slots = self.slots.clone();
        let leg = tokio::select! {
            r = shared.store.park_with_handoff(&shared.queue, timeout, claim, handoff) => match (r, then_at) {
                // timed out before a limit's admission: on to the admission itself
                (Ok(false), Some(at)) => tokio::select! {
                    _ = sleep_until_precisely(at) => Leg::Healthy,
                    _ = shared.stop.cancelled() => Leg::Exit,
                },
                (Ok(woken), _) => {
                    self.woken = woken;
                    Leg::Healthy
                }
                (Err(e), _) => Leg::Degraded(e),
            },
            _ = shared.stop.cancelled() => Leg::Exit,
            // a handler finishing frees a slot; the ring may still hold work for it
            _ = slots.acquire(), if ends_on_slot => Leg::Healthy,
        };
        // jobs handed over may wait on the worker thread this loop holds
        Self::handlers_first().await;
        leg
    }

    /// Lets the handlers just started run before this loop goes on to its next round trip (they
    /// wait on the worker thread this loop holds until it yields), so a job starts as soon as it
    /// arrives.
    async fn handlers_first() {
        tokio::task::yield_now().await;
    }

    /// Keeps the claim's rate-limit wait, then [`Self::launch`] and [`Self::handlers_first`] when
    /// any job started. The wait counts from when the claim was `sent`: the store measured it when
    /// the claim ran, between the send and the reply, so the next claim, sent at `sent + wait`,
    /// reaches the store about when the limit admits it (counted from the reply, every start would
    /// come a round trip late, lost to the rate; a claim a little early is told the few µs left).
    /// The room `reserved` for held jobs that the claim did not fill is given back.
    async fn launch_first(&mut self, claimed: Claimed, sent: Instant, reserved: usize) {
        self.admits_at = claimed.wait.map(|w| (sent + w, claimed.queue_limited));
        let jobs = claimed.jobs;
        if jobs.is_empty() {
            self.launcher.unreserve(reserved);
            return;
        }
        let held = self.launch(jobs);
        self.launcher.unreserve(reserved.saturating_sub(held));
        Self::handlers_first().await;
    }

    /// Runs each claimed job on a task of its own ([`Launcher::start_all`]) on the free slots,
    /// holding the rest; how many it held.
    fn launch(&mut self, jobs: Vec<ClaimedJob>) -> usize {
        let mut permits = Vec::with_capacity(jobs.len());
        while permits.len() < jobs.len() {
            match self.slots.clone().try_acquire_owned() {
                Ok(permit) => permits.push(permit),
                Err(_) => break,
            }
        }
        self.launcher.start_all(jobs, permits)
    }
}

impl Launcher {
    pub(crate) fn new(shared: Arc<Shared>, settle_tx: &mpsc::UnboundedSender<Finished>) -> Launcher {
        let launcher = Launcher {
            slots: Arc::new(Semaphore::new(shared.opts.concurrency)),
            room: Arc::new(std::sync::Mutex::new(shared.opts.prefetch)),
            shared,
            settle_tx: settle_tx.downgrade(),
            tracker: TaskTracker::new(),
            held: Arc::default(),
        };
        if launcher.shared.opts.prefetch > 0 && launcher.shared.opts.cancel {
            tokio::spawn(launcher.clone().settle_held_cancels());
        }
        launcher
    }

    /// Each time a cancel request reaches a job tracked here: the held jobs it cancelled leave the
    /// queue of held jobs and go to the settler as cancelled, at once, never run (a held job could
    /// otherwise wait behind long handlers for the turn that settles it). Ends with the loop.
    async fn settle_held_cancels(self) {
        let shared = self.shared.clone();
        loop {
            tokio::select! {
                _ = shared.held_cancel.notified() => {}
                _ = shared.ended.cancelled() => return,
                _ = shared.aborted.cancelled() => return,
            }
            let cancelled: std::collections::VecDeque<Held> = {
                let mut held = lock(&self.held);
                let (gone, kept) = std::mem::take(&mut *held)
                    .into_iter()
                    .partition(|h| h.cancel.is_cancelled());
                *held = kept;
                gone
            };
            if cancelled.is_empty() {
                continue;
            }
            self.unreserve(cancelled.len());
            let Some(settle_tx) = self.settle_tx.upgrade() else {
                return;
            };
            for h in cancelled {
                shared.timings.record_held(h.since.elapsed());
                let reason = h.cancel.check().err().and_then(|c| c.reason);
                let finished = Finished {
                    id: h.job.id,
                    token: h.job.token,
                    verdict: Verdict::Cancel(reason.unwrap_or_else(|| "cancelled".into())),
                    attempt: h.job.attempts,
                    retry: h.job.retry.unwrap_or_else(|| shared.opts.retry.clone()),
                    permit: None,
                };
                if settle_tx.send(finished).is_err() {
                    return;
                }
            }
        }
    }

    /// Starts jobs on `permits`: the jobs held first (claimed earlier), then `jobs` in their claim
    /// order; the jobs left over are held until a slot frees (prefetch: their room was reserved
    /// by the claim, [`Self::reserve`]), and surplus permits are freed. After an abort it starts
    /// nothing: the leases lapse and recovery returns the jobs. When the consumer has ended before
    /// they could start (no handler could report), each is released, its attempt unused. Returns
    /// how many of `jobs` it held.
    pub(crate) fn start_all(&self, jobs: Vec<ClaimedJob>, permits: Vec<OwnedSemaphorePermit>) -> usize {
        let shared = &self.shared;
        if shared.aborted.is_cancelled() {
            if !jobs.is_empty() {
                let ids: Vec<String> = jobs.iter().map(|j| j.id.to_string()).collect();
                tracing::warn!(queue = %shared.queue, ?ids, "jobs handed over after the consumer was aborted");
            }
            return 0;
        }
        let Some(settle_tx) = self.settle_tx.upgrade() else {
            self.release_all(jobs);
            return 0;
        };
        let mut permits = permits.into_iter();
        // the held jobs go first, on as many of the permits as they take
        while permits.len() > 0 {
            let Some(held) = self.pop_held() else { break };
            let Some(permit) = permits.next() else { break };
            self.start_one(held.job, held.cancel, Some(held.since), permit, &settle_tx);
        }
        let mut holding = 0;
        for job in jobs {
            match permits.next() {
                Some(permit) => {
                    let cancel = shared.track(&job.id, job.token);
                    self.start_one(job, cancel, None, permit, &settle_tx);
                }
                None if shared.opts.prefetch > 0 => {
                    // tracked (leased, renewed, cancellable) from its claim
                    let cancel = shared.track(&job.id, job.token);
                    lock(&self.held).push_back(Held {
                        job,
                        cancel,
                        since: Instant::now(),
                    });
                    holding += 1;
                }
                // claims never ask for more than the free slots without prefetch; a surplus job's
                // lease lapses
                None => tracing::error!(queue = %shared.queue, id = %job.id, "claimed beyond the free slots"),
            }
        }
        holding
    }

    /// Reserves room for up to `max` jobs to hold (prefetch): what the consumer's `prefetch`
    /// leaves beside the jobs held and the room other claims in flight reserved. A claim asks for
    /// its free slots plus this many, and gives back what it did not hold ([`Self::unreserve`]).
    pub(crate) fn reserve(&self, max: usize) -> usize {
        if self.shared.opts.prefetch == 0 || !self.shared.claiming() {
            return 0;
        }
        let mut room = lock(&self.room);
        let take = (*room).min(max);
        *room -= take;
        take
    }

    /// Gives back room reserved for jobs a claim did not hold.
    pub(crate) fn unreserve(&self, n: usize) {
        if n > 0 {
            *lock(&self.room) += n;
        }
    }

    /// The oldest held job, while the consumer still claims (after a stop, an abort or its ttl,
    /// the loop gives the held jobs back: [`Self::release_held`]); its room is free again.
    fn pop_held(&self) -> Option<Held> {
        if !self.shared.claiming() {
            return None;
        }
        let held = lock(&self.held).pop_front()?;
        self.unreserve(1);
        Some(held)
    }

    /// Gives every held job back at once, its attempt unused (a release); one whose cancel came
    /// while it was held is settled cancelled instead. Called as the loop ends (stop, abort, ttl).
    pub(crate) fn release_held(&self) {
        let held: Vec<Held> = lock(&self.held).drain(..).collect();
        for h in held {
            let shared = self.shared.clone();
            self.tracker.spawn_on(
                async move {
                    let (q, id, token) = (&shared.queue, &h.job.id, h.job.token);
                    let r = match h.cancel.check() {
                        Err(cancelled) => {
                            let request = crate::store::CancelledRequest::new()
                                .reason(Some(cancelled.reason.as_deref().unwrap_or("cancelled")))
                                .settle(shared.opts.settle_options());
                            shared.store.complete_cancelled(q, id, token, &request).await
                        }
                        Ok(()) => shared.store.release(q, id, token, Duration::ZERO).await,
                    };
                    shared.untrack(id, token);
                    match r {
                        Ok(_) => tracing::debug!(queue = %q, id = %id, "a held job given back as the consumer ends"),
                        Err(e) => tracing::warn!(queue = %q, id = %id, error = %e, "giving back a held job failed; it returns when its lease lapses"),
                    }
                },
                &self.shared.runtime,
            );
        }
    }

    /// Runs one job on `permit` on a task of its own: track → handler → verdict to the settler
    /// (which untracks after the settle, even a failed one). A job held since `held` records its
    /// time held; one whose cancel came while it was held is settled cancelled without running.
    /// When its handler ends, the slot passes at once to the oldest held job, before the settle.
    fn start_one(
        &self,
        job: ClaimedJob,
        cancel: crate::cancel::CancelToken,
        held: Option<Instant>,
        permit: OwnedSemaphorePermit,
        settle_tx: &mpsc::UnboundedSender<Finished>,
    ) {
        let shared = &self.shared;
        if let Some(since) = held {
            shared.timings.record_held(since.elapsed());
        }
        let span = tracing::info_span!(
            "emq.job",
            queue = %shared.queue,
            kind = %job.kind.as_deref().unwrap_or(""),
            id = %job.id,
            attempt = job.attempts,
        );
        let ctx = JobContext {
            id: job.id.clone(),
            payload: job.payload,
            attempt: job.attempts,
            max_attempts: job.max_attempts,
            token: job.token,
            group: job.group,
            kind: job.kind,
            cancel: cancel.clone(),
            shutdown: shared.stop.clone(),
            state: shared.state.clone(),
            queue: shared.queue.clone(),
            store: shared.store.clone(),
        };
        let handler = shared.handler.clone();
        let (tx, aborted, dropping) = (settle_tx.clone(), shared.aborted.clone(), shared.dropping.clone());
        let timeout = shared.opts.timeout;
        let (id, token, queue) = (job.id, job.token, shared.queue.clone());
        let (attempt, retry) = (job.attempts, job.retry.unwrap_or_else(|| shared.opts.retry.clone()));
        let waited = job.wait;
        let tracked = shared.clone();
        let launcher = self.clone();
        self.tracker.spawn_on(
            async move {
                let began = Instant::now();
                let verdict = match cancel.check() {
                    // cancelled while held: settled so, never run
                    Err(cancelled) if held.is_some() => {
                        Verdict::Cancel(cancelled.reason.unwrap_or_else(|| "cancelled".into()))
                    }
                    _ => {
                        let run = AssertUnwindSafe(panics::logged(handler.handle(ctx))).catch_unwind();
                        let timed = async {
                            match timeout {
                                Some(t) => tokio::time::timeout(t, run).await.ok(),
                                None => Some(run.await),
                            }
                        };
                        tokio::select! {
                            // an abort drops the handler where it stands, unsettled
                            biased;
                            _ = aborted.cancelled() => return,
                            // a stop past its timeout drops it too, and gives the job back
                            _ = dropping.cancelled() => {
                                cancel.cancel(Some("worker stopping".into()));
                                tracing::warn!("dropped by the worker's stop; releasing the job");
                                Verdict::Release(Duration::ZERO)
                            }
                            v = timed => match v {
                                Some(Ok(v)) => v,
                                Some(Err(panic)) => Verdict::Error(format!("panic: {}", panics::message(&*panic))),
                                None => {
                                    cancel.cancel(Some("timed out".into()));
                                    Verdict::Error(format!("timed out after {:?}", timeout.unwrap_or_default()))
                                }
                            },
                        }
                    }
                };
                let took = began.elapsed();
                tracked.timings.record(&verdict, took, waited);
                log_verdict(&queue, &id, &verdict, took);
                // before the settle is sent: a renewal that meets it is not a lost lease
                tracked.settling(&id, token);
                // the slot passes at once to the oldest held job; else it goes with the verdict,
                // free for a claim once its settle is sent
                let permit = match launcher.pop_held() {
                    Some(next) => {
                        launcher.start_one(next.job, next.cancel, Some(next.since), permit, &tx);
                        None
                    }
                    None => Some(permit),
                };
                // the settler outlives every handler; a closed channel means an abort
                let _ = tx.send(Finished {
                    id,
                    token,
                    verdict,
                    attempt,
                    retry,
                    permit,
                });
            }
            .instrument(span),
            &shared.runtime,
        );
    }
}

/// A job claimed beyond the free slots (prefetch), waiting in the consumer for one to free.
pub(crate) struct Held {
    job: ClaimedJob,
    cancel: crate::cancel::CancelToken,
    since: Instant,
}

/// The line a finished handler leaves in its job's span: a completion at debug with its duration,
/// a failure or a discard at warn (naming the job: a subscriber at warn filters the span out; a
/// death is logged by the settle that finds it).
fn log_verdict(queue: &crate::keyspace::QueueName, id: &crate::keyspace::JobId, verdict: &Verdict, took: Duration) {
    match verdict {
        Verdict::Done | Verdict::DoneWith(_) => tracing::debug!(?took, "job completed"),
        Verdict::Error(error) => tracing::warn!(%queue, %id, ?took, %error, "job failed"),
        Verdict::Discard(reason) => tracing::warn!(%queue, %id, ?took, %reason, "job discarded"),
        Verdict::RetryAfter(delay) => tracing::info!(?took, ?delay, "job asked to run again later"),
        Verdict::Cancel(reason) => tracing::info!(?took, %reason, "job cancelled"),
        Verdict::Release(delay) => tracing::debug!(?took, ?delay, "job released"),
    }
}

impl Launcher {
    /// Gives back jobs no handler will run, each with its attempt unused (a release).
    fn release_all(&self, jobs: Vec<ClaimedJob>) {
        for job in jobs {
            let shared = self.shared.clone();
            self.tracker.spawn_on(
                async move {
                    let r = shared.store.release(&shared.queue, &job.id, job.token, Duration::ZERO).await;
                    match r {
                        Ok(_) => tracing::debug!(queue = %shared.queue, id = %job.id, "claimed as the consumer ended; released"),
                        Err(e) => tracing::warn!(queue = %shared.queue, id = %job.id, error = %e, "releasing a job the consumer will not run failed; it returns when its lease lapses"),
                    }
                },
                &self.shared.runtime,
            );
        }
    }
}

/// How many cancel requests for untracked jobs are remembered.
const EARLY_CANCELS_MAX: usize = 1024;

/// The forwarder: routes each cancel request for job X to X's token only. On every (re)subscribe
/// it also reads the rows of the jobs in flight: a request whose message was lost while the
/// subscription was down is still on the row.
pub(crate) async fn forward_cancels(shared: Arc<Shared>) {
    let mut streak = 0;
    while !shared.ended.is_cancelled() {
        let mut requests = match shared.store.cancel_requests(&shared.queue).await {
            Ok(s) => s,
            // a subscription refused for good (an ACL denying the channel, a refused password):
            // the consumer ends on it as the loop would, rather than run on deaf to cancels
            Err(e) if e.is_misconfigured() => {
                tracing::error!(queue = %shared.queue, error = %e, "the store refuses the cancel subscription; the consumer ends");
                shared.refuse(e);
                return;
            }
            Err(e) => {
                streak += 1;
                let sleep = shared.opts.degraded_sleep(streak);
                tracing::warn!(queue = %shared.queue, error = %e, ?sleep, "cancel subscription failed; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(sleep) => continue,
                    _ = shared.ended.cancelled() => return,
                }
            }
        };
        streak = 0;
        let ids: Vec<_> = lock(&shared.inflight).keys().cloned().collect();
        for id in ids {
            if let Ok(Some(job)) = shared.store.get(&shared.queue, &id).await {
                if let Some(reason) = job.cancel {
                    fire(&shared, &id, (!reason.is_empty()).then_some(reason));
                }
            }
        }
        loop {
            tokio::select! {
                msg = requests.next() => match msg {
                    Some(req) => fire(&shared, &req.id, req.reason),
                    None => break, // the subscription dropped: subscribe again
                },
                // the store is back after an outage: subscribe again, read the rows again
                _ = shared.back.notified() => break,
                // requests still reach the jobs finishing after a stop, until the loop has ended
                _ = shared.ended.cancelled() => return,
            }
        }
    }
}

fn fire(shared: &Shared, id: &crate::keyspace::JobId, reason: Option<String>) {
    let tracked = lock(&shared.inflight).get(id).map(|t| t.cancel.clone());
    match tracked {
        Some(token) => {
            token.cancel(reason);
            shared.held_cancel.notify_one();
        }
        None => {
            let mut early = lock(&shared.early_cancels);
            if early.len() >= EARLY_CANCELS_MAX {
                early.remove(0);
            }
            early.push((id.clone(), reason, Instant::now()));
        }
    }
}
