//! The front door on every store: typed jobs pushed through a `Queue`, a `Worker` that routes them
//! by kind, `JobError` and `?`, the context's methods, and the safe defaults — leases renewed, a
//! stop that gives back what it cannot finish, unknown kinds released for the next deploy.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::store::CancelOutcome;
use echomq::{Error, Job, JobContext, JobError, JobHandler, JobId, JobState, Outcome, Queue, Retention, Worker};
use serde::{Deserialize, Serialize};

use crate::harness::{captured_log, fast, log_lines, wait_until, Ctx};

const WITHIN: Duration = Duration::from_secs(20);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SendEmail {
    to: String,
}

impl Job for SendEmail {
    const KIND: &'static str = "send_email";
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Resize {
    width: u32,
}

impl Job for Resize {
    const KIND: &'static str = "resize";
    const KIND_ALIASES: &'static [&'static str] = &["resize_v0"];
}

/// Waits until job `id` of the case's queue is in `state`; returns its row.
async fn row_in(ctx: &Ctx, id: &JobId, state: JobState) -> echomq::JobRow {
    let mut last = None;
    let deadline = std::time::Instant::now() + WITHIN;
    loop {
        let row = ctx.store.get(&ctx.q, id).await.unwrap();
        if let Some(r) = row.as_ref().filter(|r| r.state == state) {
            return r.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} never reached {state}: last {last:?}"
        );
        last = row;
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Two kinds and raw jobs on one queue, each to its own handler; every output kept as the handler
/// returned it (typed: JSON); the context says which job, kind, attempt and budget it runs.
async fn a_worker_routes_each_kind_to_its_handler_and_keeps_its_output(ctx: &Ctx) {
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let email = q
        .push(SendEmail {
            to: "a@example.com".into(),
        })
        .await
        .unwrap();
    let resize = q.push(Resize { width: 640 }).max_attempts(5).await.unwrap();
    let raw = q.push_raw("bytes in").await.unwrap();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let (s1, s2, s3) = (seen.clone(), seen.clone(), seen.clone());
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(move |job: SendEmail, ctx: JobContext| {
            let seen = s1.clone();
            async move {
                let what = (
                    ctx.kind().map(str::to_string),
                    ctx.attempt(),
                    ctx.max_attempts(),
                    ctx.is_last_attempt(),
                );
                seen.lock().unwrap().push(what);
                Ok::<_, JobError>(format!("sent to {}", job.to))
            }
        })
        .on(move |job: Resize, ctx: JobContext| {
            let seen = s2.clone();
            async move {
                let what = (
                    ctx.kind().map(str::to_string),
                    ctx.attempt(),
                    ctx.max_attempts(),
                    ctx.is_last_attempt(),
                );
                seen.lock().unwrap().push(what);
                Ok::<_, JobError>(job.width / 2)
            }
        })
        .on_raw(move |ctx: JobContext| {
            let seen = s3.clone();
            async move {
                seen.lock()
                    .unwrap()
                    .push((None, ctx.attempt(), ctx.max_attempts(), ctx.is_last_attempt()));
                let mut out = ctx.payload().to_vec();
                out.extend_from_slice(b", bytes out");
                Ok::<_, JobError>(out)
            }
        })
        .options(fast().with_max_attempts(3))
        .start()
        .unwrap();
    let email_row = row_in(ctx, email.id(), JobState::Completed).await;
    let resize_row = row_in(ctx, resize.id(), JobState::Completed).await;
    let raw_row = row_in(ctx, raw.id(), JobState::Completed).await;
    worker.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(email_row.output.as_deref(), Some(&br#""sent to a@example.com""#[..]));
    assert_eq!(email_row.kind.as_deref(), Some("send_email"));
    assert_eq!(resize_row.output.as_deref(), Some(&b"320"[..]));
    assert_eq!(raw_row.output.as_deref(), Some(&b"bytes in, bytes out"[..]));
    assert_eq!(raw_row.kind, None);
    assert_eq!((email_row.attempts, resize_row.attempts, raw_row.attempts), (1, 1, 1));
    let mut seen = seen.lock().unwrap().clone();
    seen.sort();
    assert_eq!(
        seen,
        [
            (None, 1, 3, false),
            (Some("resize".to_string()), 1, 5, false),
            (Some("send_email".to_string()), 1, 3, false),
        ]
    );
}

/// A row carrying an old name of a kind (`KIND_ALIASES`) reaches the kind's handler; a struct
/// handler (`JobHandler`, a plain `async fn`) runs like a closure, with the worker's state.
async fn an_alias_and_a_struct_handler_with_state_run_like_the_kind(ctx: &Ctx) {
    struct Halver;
    impl JobHandler<Resize> for Halver {
        type Output = u32;
        async fn handle(&self, job: Resize, ctx: JobContext) -> Result<u32, JobError> {
            let offset = ctx.state::<u32>().copied().unwrap_or(0);
            Ok(job.width / 2 + offset)
        }
    }
    let old = echomq::NewJob::new(r#"{"width":100}"#).with_kind("resize_v0");
    let id = ctx.store.enqueue(&ctx.q, &[old]).await.unwrap()[0].id().clone();
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(Halver)
        .state(7u32)
        .options(fast())
        .start()
        .unwrap();
    let row = row_in(ctx, &id, JobState::Completed).await;
    worker.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(row.output.as_deref(), Some(&b"57"[..]));
}

/// With the default options a handler that runs 2.5 leases long runs once: its lease is renewed,
/// so no recovery hands it to a second run beside the first, and it completes.
async fn a_job_longer_than_its_lease_runs_once_and_completes_under_the_defaults(ctx: &Ctx) {
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let job = q.push(SendEmail { to: "slow".into() }).await.unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(move |_job: SendEmail, _ctx: JobContext| {
            let runs = r.clone();
            async move {
                runs.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2500)).await;
                Ok::<_, JobError>(())
            }
        })
        .options(fast())
        .lease(Duration::from_secs(1))
        .start()
        .unwrap();
    let row = row_in(ctx, job.id(), JobState::Completed).await;
    worker.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(runs.load(Ordering::SeqCst), 1, "ran once");
    assert_eq!(row.attempts, 1);
    assert_eq!(row.last_error, None);
}

/// `?` turns a `std::io::Error` and an `anyhow::Error` into a failed attempt carrying the error's
/// text (causes included); the job is dead once its budget is spent, and a death is logged at
/// error; a cancel check's `?` ends the job cancelled.
async fn question_mark_fails_the_attempt_with_the_error_s_text(ctx: &Ctx) {
    #[derive(Serialize, Deserialize)]
    struct ReadFile {
        path: String,
    }
    impl Job for ReadFile {
        const KIND: &'static str = "read_file";
    }
    captured_log();
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let io = q
        .push(ReadFile {
            path: "/nonexistent/emq".into(),
        })
        .await
        .unwrap();
    let any = q.push(SendEmail { to: "x".into() }).await.unwrap();
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(|job: ReadFile, _ctx: JobContext| async move {
            let text = std::fs::read_to_string(&job.path)?;
            Ok::<_, JobError>(text)
        })
        .on(|_job: SendEmail, _ctx: JobContext| async move {
            let e = anyhow::anyhow!("connection refused").context("smtp");
            Err::<(), _>(e)?;
            Ok::<_, JobError>(())
        })
        .options(fast().with_max_attempts(2))
        .start()
        .unwrap();
    let io_row = row_in(ctx, io.id(), JobState::Dead).await;
    let any_row = row_in(ctx, any.id(), JobState::Dead).await;
    worker.stop(Duration::from_secs(5)).await.unwrap();
    assert!(
        io_row.last_error.as_deref().unwrap_or("").contains("No such file"),
        "{io_row:?}"
    );
    assert_eq!(any_row.last_error.as_deref(), Some("smtp: connection refused"));
    assert_eq!((io_row.attempts, any_row.attempts), (2, 2));
    let q_field = format!("queue={}", ctx.q);
    assert!(
        !log_lines(&["ERROR", "job dead", &q_field]).is_empty(),
        "a death is logged at error"
    );
    assert!(
        !log_lines(&["WARN", "job failed", "smtp: connection refused"]).is_empty(),
        "a failure is logged at warn"
    );
}

/// A handler that panics fails its attempt with the panic's message; the panic is logged through
/// `tracing` inside the job's span (queue, kind, id, attempt), not printed.
async fn a_panicking_handler_fails_its_attempt_and_the_panic_is_logged_in_the_job_s_span(ctx: &Ctx) {
    captured_log();
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let job = q.push(SendEmail { to: "boom".into() }).await.unwrap();
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(|job: SendEmail, _ctx: JobContext| async move {
            if job.to == "boom" {
                panic!("handler exploded on {}", job.to);
            }
            Ok::<_, JobError>(())
        })
        .options(fast().with_max_attempts(1))
        .start()
        .unwrap();
    let row = row_in(ctx, job.id(), JobState::Dead).await;
    worker.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(row.last_error.as_deref(), Some("panic: handler exploded on boom"));
    let span = format!("emq.job{{queue={} kind=send_email id={} attempt=1}}", ctx.q, job.id());
    let lines = log_lines(&[&span, "handler panicked", "handler exploded on boom"]);
    assert_eq!(
        lines.len(),
        1,
        "one log line in the job's span: {lines:?} of {:?}",
        log_lines(&["handler panicked"])
    );
}

/// A payload that does not decode as its kind goes dead at once (retrying cannot fix it), its
/// error naming the kind and serde's message.
async fn a_payload_that_does_not_decode_goes_dead_naming_the_kind(ctx: &Ctx) {
    let bad = echomq::NewJob::new("not json").with_kind("send_email");
    let id = ctx.store.enqueue(&ctx.q, &[bad]).await.unwrap()[0].id().clone();
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(|_job: SendEmail, _ctx: JobContext| async move { Ok::<_, JobError>(()) })
        .options(fast())
        .start()
        .unwrap();
    let row = row_in(ctx, &id, JobState::Dead).await;
    worker.stop(Duration::from_secs(5)).await.unwrap();
    let error = row.last_error.unwrap_or_default();
    assert!(error.contains("does not decode as kind send_email"), "{error}");
    assert!(error.contains("expected ident"), "serde's message: {error}");
    assert_eq!(row.attempts, 1, "one attempt, no retry");
}

/// A rolling deploy: a worker without the kind never claims the job (it claims only its own
/// kinds), which waits untouched; once a worker with the kind runs, the job completes on attempt 1.
async fn an_unknown_kind_waits_for_a_worker_that_has_it_and_completes_on_attempt_1(ctx: &Ctx) {
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let job = q.push(Resize { width: 10 }).await.unwrap();
    let old = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(|_job: SendEmail, _ctx: JobContext| async move { Ok::<_, JobError>(()) })
        .options(fast())
        .start()
        .unwrap();
    // the old worker runs its own kind meanwhile: pushed after the other job, it is claimed past it
    let own = q.push(SendEmail { to: "a@b".into() }).await.unwrap();
    row_in(ctx, own.id(), JobState::Completed).await;
    old.stop(Duration::from_secs(5)).await.unwrap();
    let waiting = ctx.store.get(&ctx.q, job.id()).await.unwrap().unwrap();
    assert_eq!(waiting.state, JobState::Pending, "never claimed");
    assert_eq!((waiting.attempts, waiting.free), (0, 0), "never claimed");
    let counts = ctx.store.counts(&ctx.q).await.unwrap();
    assert_eq!(
        counts.ready_by_kind,
        [(Some("resize".to_string()), 1)],
        "counted by kind"
    );
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let a = attempts.clone();
    let new = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(move |_job: Resize, ctx: JobContext| {
            let a = a.clone();
            async move {
                a.lock().unwrap().push(ctx.attempt());
                Ok::<_, JobError>(())
            }
        })
        .options(fast())
        .start()
        .unwrap();
    let row = row_in(ctx, job.id(), JobState::Completed).await;
    new.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(*attempts.lock().unwrap(), [1]);
    assert_eq!(row.attempts, 1);
}

/// `stop` past its timeout drops the handler still running and releases its job: ready again at
/// once, its attempt unused; the handler's shutdown fired first. A new worker completes it on
/// attempt 1.
async fn stop_past_its_timeout_releases_the_running_job_and_the_next_worker_runs_it_as_attempt_1(ctx: &Ctx) {
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let job = q.push(SendEmail { to: "stuck".into() }).await.unwrap();
    let told = Arc::new(AtomicUsize::new(0));
    let t = told.clone();
    let stuck = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(move |_job: SendEmail, ctx: JobContext| {
            let told = t.clone();
            async move {
                ctx.shutdown().await;
                told.fetch_add(1, Ordering::SeqCst);
                // ignores the shutdown: only the stop's timeout ends it
                std::future::pending::<()>().await;
                Ok::<_, JobError>(())
            }
        })
        .options(fast())
        .start()
        .unwrap();
    row_in(ctx, job.id(), JobState::Active).await;
    wait_until(WITHIN, "the handler runs", || async { stuck.in_flight() == 1 }).await;
    stuck.stop(Duration::from_millis(300)).await.unwrap();
    assert_eq!(told.load(Ordering::SeqCst), 1, "the handler heard the shutdown");
    let back = ctx.store.get(&ctx.q, job.id()).await.unwrap().unwrap();
    assert_eq!(back.state, JobState::Pending, "ready again at once");
    assert_eq!(back.attempts, 0, "its attempt unused");
    let attempts = Arc::new(Mutex::new(Vec::new()));
    let a = attempts.clone();
    let next = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(move |_job: SendEmail, ctx: JobContext| {
            let a = a.clone();
            async move {
                a.lock().unwrap().push(ctx.attempt());
                Ok::<_, JobError>(())
            }
        })
        .options(fast())
        .start()
        .unwrap();
    let row = row_in(ctx, job.id(), JobState::Completed).await;
    next.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(*attempts.lock().unwrap(), [1]);
    assert_eq!(row.attempts, 1);
}

/// The verdicts returned through `JobError`: discard (dead now), snooze (back later, no attempt
/// used), retry_after (an attempt used), cancel (cancelled); and the run-time cap `timeout` fails
/// an attempt that runs past it.
async fn job_error_verdicts_and_the_timeout_settle_as_named(ctx: &Ctx) {
    #[derive(Serialize, Deserialize)]
    struct Step {
        what: String,
    }
    impl Job for Step {
        const KIND: &'static str = "step";
    }
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let mut ids = Vec::new();
    for what in ["discard", "snooze", "retry", "cancel", "slow"] {
        ids.push(q.push(Step { what: what.into() }).await.unwrap().id().clone());
    }
    let snoozed = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(move |job: Step, ctx: JobContext| {
            let snoozed = snoozed.clone();
            async move {
                match (job.what.as_str(), ctx.attempt()) {
                    ("discard", _) => Err(JobError::discard("not worth it")),
                    ("snooze", _) if !snoozed.swap(true, Ordering::SeqCst) => {
                        Err(JobError::snooze(Duration::from_millis(50)))
                    }
                    ("retry", 1) => Err(JobError::retry_after(Duration::from_millis(50))),
                    ("cancel", _) => Err(JobError::cancel("changed my mind")),
                    ("slow", 1) => {
                        tokio::time::sleep(Duration::from_secs(30)).await;
                        Ok(())
                    }
                    _ => Ok(()),
                }
            }
        })
        .options(fast())
        .timeout(Duration::from_millis(200))
        .start()
        .unwrap();
    let discarded = row_in(ctx, &ids[0], JobState::Dead).await;
    let snoozed = row_in(ctx, &ids[1], JobState::Completed).await;
    let retried = row_in(ctx, &ids[2], JobState::Completed).await;
    let cancelled = row_in(ctx, &ids[3], JobState::Cancelled).await;
    let slow = row_in(ctx, &ids[4], JobState::Completed).await;
    worker.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(discarded.last_error.as_deref(), Some("not worth it"));
    assert_eq!((snoozed.attempts, snoozed.free), (1, 1), "a snooze uses no attempt");
    assert_eq!(retried.attempts, 2);
    assert_eq!(cancelled.last_error.as_deref(), Some("changed my mind"));
    assert_eq!(slow.attempts, 2, "the first attempt timed out");
}

/// The queue handle: a push's options land on the row (delay, group, budget, caller id, a
/// duplicate writes nothing), a waiting job is cancelled, and `get` reads a row or says none.
async fn a_queue_pushes_with_options_cancels_and_gets(ctx: &Ctx) {
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let later = q
        .push(SendEmail { to: "later".into() })
        .delay(Duration::from_secs(3600))
        .group("tenant-1")
        .max_attempts(5)
        .id("welcome-1")
        .await
        .unwrap();
    assert_eq!(later.id().as_str(), "welcome-1");
    assert!(!later.is_duplicate());
    let row = later.get().await.unwrap().unwrap();
    assert_eq!(row.state, JobState::Scheduled);
    assert_eq!(row.group.as_ref().map(|g| g.as_str()), Some("tenant-1"));
    assert_eq!(row.max_attempts, Some(5));
    assert_eq!(row.kind.as_deref(), Some("send_email"));
    assert_eq!(serde_json::from_slice::<SendEmail>(&row.payload).unwrap().to, "later");
    let again = q.push(SendEmail { to: "other".into() }).id("welcome-1").await.unwrap();
    assert!(again.is_duplicate(), "the second push of an id writes nothing");
    let many = q.push_many((0..3).map(|w| Resize { width: w })).await.unwrap();
    assert_eq!(many.len(), 3);
    assert_eq!(many[2].get().await.unwrap().unwrap().kind.as_deref(), Some("resize"));
    assert_eq!(later.cancel().await.unwrap(), CancelOutcome::Cancelled);
    assert_eq!(q.get(&JobId::new("never-pushed").unwrap()).await.unwrap(), None);
    // refusals name what was wrong, and write nothing
    let err = q
        .push(SendEmail { to: "x".into() })
        .group("no spaces")
        .await
        .unwrap_err();
    assert!(matches!(err, echomq::Error::InvalidName { .. }), "{err}");
    let err = q.push(SendEmail { to: "x".into() }).id("123").await.unwrap_err();
    assert!(matches!(err, echomq::Error::InvalidName { .. }), "{err}");
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().pending, 3);
}

/// A schedule of typed jobs: each fired job carries its kind and its options, so the worker's
/// handler for that type runs it (a schedule of raw bytes and no kind would be given back by a
/// typed worker); trigger, pause, resume, list and remove through the queue handle; the queue's
/// settings through it too.
async fn a_typed_schedule_fires_jobs_the_typed_worker_runs(ctx: &Ctx) {
    use echomq::schedule::{Misfire, Overlap, Timing};
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    q.schedule(
        "tick",
        Timing::every(Duration::from_secs(1)).unwrap(),
        Resize { width: 7 },
    )
    .misfire(Misfire::Skip)
    .overlap(Overlap::Skip)
    .priority(2)
    .max_attempts(4)
    .grace(Duration::from_secs(30))
    .await
    .unwrap();
    let listed = q.schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    let t = &listed[0].schedule;
    assert_eq!(t.name.as_str(), "tick");
    assert_eq!(t.template.kind.as_deref(), Some("resize"));
    assert_eq!((t.template.priority, t.template.max_attempts), (2, Some(4)));
    assert_eq!(
        (t.misfire, t.overlap, t.grace),
        (Misfire::Skip, Overlap::Skip, Some(Duration::from_secs(30)))
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(move |job: Resize, ctx: JobContext| {
            let s = s.clone();
            async move {
                s.lock().unwrap().push((job.width, ctx.id().to_string()));
                Ok::<_, JobError>(job.width * 2)
            }
        })
        .options(fast())
        .start()
        .unwrap();
    let fired = q.trigger_schedule("tick").await.unwrap().expect("the schedule exists");
    match fired.wait(WITHIN).await.unwrap() {
        Outcome::Completed(out) => assert_eq!(out.json::<u32>().unwrap(), 14),
        other => panic!("the triggered job: {other:?}"),
    }
    let slot_ran = || seen.lock().unwrap().iter().any(|(_, id)| !id.contains(":run"));
    wait_until(WITHIN, "a slot's job ran in the typed handler", || async { slot_ran() }).await;
    assert!(q.pause_schedule("tick").await.unwrap());
    assert!(q.schedules().await.unwrap()[0].paused);
    assert!(q.resume_schedule("tick").await.unwrap());
    assert!(q.remove_schedule("tick").await.unwrap());
    assert!(!q.remove_schedule("tick").await.unwrap(), "removed already");
    assert!(q.trigger_schedule("tick").await.unwrap().is_none());
    assert!(!q.pause_schedule("tick").await.unwrap());
    worker.stop(Duration::from_secs(5)).await.unwrap();
    assert_eq!(
        ctx.store.counts(&ctx.q).await.unwrap().dead,
        0,
        "no fired job went dead"
    );
    // a bad name is refused when awaited, writing nothing
    let err = q
        .schedule(
            "no spaces",
            Timing::every(Duration::from_secs(1)).unwrap(),
            Resize { width: 1 },
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InvalidName { .. }), "{err}");
    assert!(q.schedules().await.unwrap().is_empty());
    // the queue's settings
    let limit: echomq::RateLimit = "5/1s".parse().unwrap();
    q.set_rate_limit(echomq::RateTarget::Queue, Some(limit)).await.unwrap();
    assert_eq!(q.rate_limits().await.unwrap().queue.map(|r| r.limit), Some(limit));
    q.set_priority_aging(Duration::from_secs(7)).await.unwrap();
    assert_eq!(q.priority_aging().await.unwrap(), Duration::from_secs(7));
    q.set_group_limit(echomq::store::LimitTarget::Default, 3).await.unwrap();
}

/// One worker serves several queues (`.queue`), one loop each; building mistakes are refused by
/// `start`, naming them.
async fn one_worker_serves_several_queues_and_refuses_a_bad_build(ctx: &Ctx) {
    let other = ctx.queue("second");
    let (a, b) = (
        Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap(),
        Queue::new(ctx.store.clone(), other.as_str()).unwrap(),
    );
    let ja = a.push(SendEmail { to: "a".into() }).await.unwrap();
    let jb = b.push(SendEmail { to: "b".into() }).await.unwrap();
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .queue(other.as_str())
        .on(|_job: SendEmail, _ctx: JobContext| async move { Ok::<_, JobError>(()) })
        .options(fast())
        .start()
        .unwrap();
    row_in(ctx, ja.id(), JobState::Completed).await;
    wait_until(WITHIN, "the second queue's job completed", || async {
        ctx.store.get(&other, jb.id()).await.unwrap().map(|r| r.state) == Some(JobState::Completed)
    })
    .await;
    worker.stop(Duration::from_secs(5)).await.unwrap();

    let handler = |_job: SendEmail, _ctx: JobContext| async move { Ok::<_, JobError>(()) };
    let none = Worker::new(ctx.store.clone(), ctx.q.as_str()).unwrap().start();
    assert!(matches!(
        none,
        Err(echomq::Error::InvalidOption { field: "handlers", .. })
    ));
    let twice = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(handler)
        .on(handler)
        .start();
    assert!(matches!(twice, Err(echomq::Error::InvalidOption { field: "kind", .. })));
    let bad_queue = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .queue("no spaces")
        .on(handler)
        .start();
    assert!(matches!(bad_queue, Err(echomq::Error::InvalidName { .. })));
    assert!(Worker::new(ctx.store.clone(), "").is_err());
}

/// `wait` answers a job that completed before it was called from its kept row, and one that
/// completes while it waits as it completes; its output decodes as the handler's type.
async fn wait_returns_the_output_of_a_job_done_before_it_and_of_one_done_during_it(ctx: &Ctx) {
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let (gate_tx, gate) = tokio::sync::watch::channel(false);
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(move |job: SendEmail, _ctx: JobContext| {
            let mut gate = gate.clone();
            async move {
                if job.to == "later" {
                    // held until the test waits on it
                    let _ = gate.wait_for(|open| *open).await;
                }
                Ok::<_, JobError>(format!("sent to {}", job.to))
            }
        })
        .options(fast())
        .start()
        .unwrap();
    let before = q.push(SendEmail { to: "first".into() }).await.unwrap();
    row_in(ctx, before.id(), JobState::Completed).await;
    match before.wait(WITHIN).await.unwrap() {
        Outcome::Completed(out) => assert_eq!(out.json::<String>().unwrap(), "sent to first"),
        other => panic!("expected completed, got {other:?}"),
    }
    let later = q.push(SendEmail { to: "later".into() }).await.unwrap();
    row_in(ctx, later.id(), JobState::Active).await;
    let waiting = tokio::spawn({
        let later = later.clone();
        async move { later.wait(WITHIN).await }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "the wait ends only with the job");
    gate_tx.send_replace(true);
    match waiting.await.unwrap().unwrap() {
        Outcome::Completed(out) => {
            assert_eq!(out.json::<String>().unwrap(), "sent to later");
            assert_eq!(out.bytes(), Some(&b"\"sent to later\""[..]));
        }
        other => panic!("expected completed, got {other:?}"),
    }
    worker.stop(WITHIN).await.unwrap();
}

/// `wait` of a job that goes dead answers `Dead` with its error; of a cancelled one `Cancelled`
/// with the reason; of one that does not finish in time `Error::Timeout`, the job going on.
async fn wait_returns_dead_with_the_error_cancelled_with_the_reason_and_times_out(ctx: &Ctx) {
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    let doomed = q.push(Resize { width: 0 }).max_attempts(2).await.unwrap();
    let slow = q
        .push(SendEmail { to: "slow".into() })
        .delay(Duration::from_secs(3600))
        .await
        .unwrap();
    let waiting = tokio::spawn({
        let doomed = doomed.clone();
        async move { doomed.wait(WITHIN).await }
    });
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(|job: Resize, _ctx: JobContext| async move {
            if job.width == 0 {
                return Err(JobError::msg("width 0"));
            }
            Ok::<_, JobError>(())
        })
        .options(fast().with_retry(echomq::RetryPolicy::fixed(Duration::from_millis(10))))
        .start()
        .unwrap();
    match waiting.await.unwrap().unwrap() {
        Outcome::Dead { error, attempts } => assert_eq!((error.as_str(), attempts), ("width 0", 2)),
        other => panic!("expected dead, got {other:?}"),
    }
    let err = slow.wait(Duration::from_millis(300)).await.unwrap_err();
    assert!(matches!(err, Error::Timeout { what: "wait", .. }), "{err:?}");
    assert_eq!(
        slow.get().await.unwrap().unwrap().state,
        JobState::Scheduled,
        "the job goes on"
    );
    let waiting = tokio::spawn({
        let slow = slow.clone();
        async move { slow.wait(WITHIN).await }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    q.cancel_with_reason(slow.id(), "not needed").await.unwrap();
    assert_eq!(
        waiting.await.unwrap().unwrap(),
        Outcome::Cancelled {
            reason: Some("not needed".into())
        }
    );
    worker.stop(WITHIN).await.unwrap();
}

/// With nothing kept, a finished job's wait says it expired; a generated id the queue never
/// handed out, or a caller's id with no row, is no such job.
async fn wait_past_retention_says_expired_and_an_unknown_id_is_no_such_job(ctx: &Ctx) {
    let q = Queue::new(ctx.store.clone(), ctx.q.as_str()).unwrap();
    q.set_retention(Retention::off()).await.unwrap();
    assert_eq!(q.retention().await.unwrap(), Retention::off());
    let worker = Worker::new(ctx.store.clone(), ctx.q.as_str())
        .unwrap()
        .on(|_job: SendEmail, _ctx: JobContext| async { Ok::<_, JobError>(()) })
        .options(fast())
        .start()
        .unwrap();
    let done = q.push(SendEmail { to: "x".into() }).await.unwrap();
    wait_until(WITHIN, "the job done and deleted", || async {
        q.get(done.id()).await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        done.wait(WITHIN).await.unwrap(),
        Outcome::Expired,
        "pushed by this handle"
    );
    let by_id = q.handle(done.id().clone());
    assert_eq!(
        by_id.wait(WITHIN).await.unwrap(),
        Outcome::Expired,
        "a generated id handed out"
    );
    let never = q.handle(JobId::parse("999999").unwrap());
    let err = never.wait(WITHIN).await.unwrap_err();
    assert!(matches!(err, Error::NoSuchJob { .. }), "{err:?}");
    let caller = q.handle(JobId::new("order-17").unwrap());
    let err = caller.wait(WITHIN).await.unwrap_err();
    assert!(matches!(err, Error::NoSuchJob { .. }), "{err:?}");
    worker.stop(WITHIN).await.unwrap();
}

crate::consumer_cases!(
    a_typed_schedule_fires_jobs_the_typed_worker_runs,
    wait_returns_the_output_of_a_job_done_before_it_and_of_one_done_during_it,
    wait_returns_dead_with_the_error_cancelled_with_the_reason_and_times_out,
    wait_past_retention_says_expired_and_an_unknown_id_is_no_such_job,
    a_worker_routes_each_kind_to_its_handler_and_keeps_its_output,
    an_alias_and_a_struct_handler_with_state_run_like_the_kind,
    a_job_longer_than_its_lease_runs_once_and_completes_under_the_defaults,
    question_mark_fails_the_attempt_with_the_error_s_text,
    a_panicking_handler_fails_its_attempt_and_the_panic_is_logged_in_the_job_s_span,
    a_payload_that_does_not_decode_goes_dead_naming_the_kind,
    an_unknown_kind_waits_for_a_worker_that_has_it_and_completes_on_attempt_1,
    stop_past_its_timeout_releases_the_running_job_and_the_next_worker_runs_it_as_attempt_1,
    job_error_verdicts_and_the_timeout_settle_as_named,
    a_queue_pushes_with_options_cancels_and_gets,
    one_worker_serves_several_queues_and_refuses_a_bad_build,
);
