//! Schedules: upsert_schedule, remove_schedule, pause_schedule, resume_schedule, list_schedules,
//! trigger_schedule and refill_schedule, and promote firing due slots — each slot once, as a job
//! named by the slot, missed slots by the schedule's misfire policy, overlaps by its overlap one.

use std::time::Duration;

use echomq::schedule::{self, JobTemplate, Misfire, Overlap, Refill, Schedule, ScheduleInfo, ScheduleName, Timing};
use echomq::store::Promoted;
use echomq::{Error, GroupName, JobId, JobState};

use crate::harness::Ctx;
use crate::steps::{LEASE, MAX};

const GRACE: Duration = Duration::from_secs(5);

fn name(n: &str) -> ScheduleName {
    ScheduleName::new(n).unwrap()
}

fn every_second(n: &str, payload: &str) -> Schedule {
    let template = JobTemplate {
        payload: payload.as_bytes().to_vec(),
        ..JobTemplate::default()
    };
    Schedule::new(name(n), Timing::every(Duration::from_secs(1)).unwrap(), template)
}

async fn promote(ctx: &Ctx) -> Promoted {
    ctx.store.promote(&ctx.q, 100, GRACE).await.unwrap()
}

async fn list(ctx: &Ctx) -> Vec<ScheduleInfo> {
    ctx.store.list_schedules(&ctx.q).await.unwrap()
}

async fn info(ctx: &Ctx, n: &str) -> ScheduleInfo {
    list(ctx)
        .await
        .into_iter()
        .find(|s| s.schedule.name.as_str() == n)
        .unwrap_or_else(|| panic!("schedule {n} listed"))
}

/// Waits until the store's clock is past `at_ms`.
async fn past(ctx: &Ctx, at_ms: i64) {
    loop {
        let now = ctx.probe.now_ms().await as i64;
        if now > at_ms {
            return;
        }
        tokio::time::sleep(Duration::from_millis((at_ms - now + 5) as u64)).await;
    }
}

fn slot_id(n: &str, slot: i64) -> JobId {
    JobId::new(format!("sched:{n}:{slot}")).unwrap()
}

async fn payload(ctx: &Ctx, id: &JobId) -> String {
    let row = ctx
        .store
        .get(&ctx.q, id)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("job {id}"));
    String::from_utf8(row.payload).unwrap()
}

pub async fn upsert_schedule_fires_each_slot_once_as_a_job_named_by_the_slot(ctx: &Ctx) {
    let mut s = every_second("tick", "t");
    s.template.priority = 3;
    s.template.kind = Some("report".into());
    s.template.max_attempts = Some(2);
    let version = ctx.store.upsert_schedule(&ctx.q, &s).await.unwrap();
    assert!(version >= 1);
    let first = info(ctx, "tick").await;
    let slot = first.next_slot.expect("a next slot");
    assert_eq!(slot % 1000, 0, "an interval's slots are multiples of it");
    assert_eq!(
        (first.fired, first.missed, first.skipped, first.version),
        (0, 0, 0, version)
    );
    let early = promote(ctx).await;
    if (ctx.probe.now_ms().await as i64) < slot {
        assert_eq!(early.fired, 0, "no slot fires before its time");
    }
    assert!(
        early.next_due_in.is_some_and(|d| d <= Duration::from_secs(1)),
        "the park is bounded by the next slot: {early:?}"
    );
    past(ctx, slot).await;
    let p = promote(ctx).await;
    let id = slot_id("tick", slot);
    assert_eq!(p.fired, 1, "one job for the slot: {p:?}");
    let row = ctx.store.get(&ctx.q, &id).await.unwrap().expect("the slot's job");
    assert_eq!(row.state, JobState::Pending);
    assert_eq!(row.payload, b"t");
    assert_eq!(row.priority, 3);
    assert_eq!(row.kind.as_deref(), Some("report"));
    assert_eq!(row.max_attempts, Some(2));
    assert_eq!(promote(ctx).await.fired, 0, "a slot fires once");
    let after = info(ctx, "tick").await;
    assert_eq!((after.fired, after.missed, after.last_slot), (1, 0, Some(slot)));
    assert_eq!(after.last_job.as_ref(), Some(&id));
    assert_eq!(after.next_slot, Some(slot + 1000));
    let claimed = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(10, LEASE).max_attempts(MAX))
        .await
        .unwrap();
    assert_eq!(claimed.jobs.iter().map(|j| j.id.clone()).collect::<Vec<_>>(), [id]);
}

pub async fn upsert_schedule_changes_it_in_place_and_fires_no_decided_slot_again(ctx: &Ctx) {
    let v1 = ctx
        .store
        .upsert_schedule(&ctx.q, &every_second("s", "old"))
        .await
        .unwrap();
    let slot = info(ctx, "s").await.next_slot.unwrap();
    past(ctx, slot).await;
    assert_eq!(promote(ctx).await.fired, 1);
    let v2 = ctx
        .store
        .upsert_schedule(&ctx.q, &every_second("s", "new"))
        .await
        .unwrap();
    assert!(v2 > v1, "an upsert raises the version: {v1} then {v2}");
    let edited = info(ctx, "s").await;
    assert_eq!(edited.fired, 1, "the counts are kept");
    assert_eq!(edited.schedule.template.payload, b"new");
    let next = edited.next_slot.unwrap();
    assert!(next > slot, "the decided slot is not given again: {next} after {slot}");
    past(ctx, next).await;
    assert_eq!(promote(ctx).await.fired, 1);
    assert_eq!(payload(ctx, &slot_id("s", slot)).await, "old");
    assert_eq!(payload(ctx, &slot_id("s", next)).await, "new");
    assert_eq!(info(ctx, "s").await.fired, 2);
}

pub async fn upsert_schedule_refuses_bad_names_timings_zones_and_templates(ctx: &Ctx) {
    assert!(matches!(
        ScheduleName::new("x".repeat(65)),
        Err(Error::InvalidName { .. })
    ));
    assert!(matches!(ScheduleName::new("a b"), Err(Error::InvalidName { .. })));
    assert!(Timing::every(Duration::from_millis(500)).is_err(), "under a second");
    assert!(Timing::cron("61 * * * *", None).is_err());
    assert!(Timing::cron("0 * * * *", Some("Mars/Olympus")).is_err());
    let mut s = every_second("bad", "x");
    s.template.priority = 12;
    assert!(matches!(
        ctx.store.upsert_schedule(&ctx.q, &s).await,
        Err(Error::InvalidOption { field: "priority", .. })
    ));
    assert!(list(ctx).await.is_empty(), "nothing written");
}

pub async fn upsert_schedule_is_gone_with_its_queue_after_obliterate(ctx: &Ctx) {
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("s", "x"))
        .await
        .unwrap();
    ctx.store.obliterate(&ctx.q, true).await.unwrap();
    assert!(list(ctx).await.is_empty());
    assert_eq!(ctx.probe.set_len("schedule_due").await, 0);
    assert_eq!(promote(ctx).await, Promoted::default(), "nothing left to fire");
}

pub async fn remove_schedule_then_upsert_starts_afresh(ctx: &Ctx) {
    let v1 = ctx
        .store
        .upsert_schedule(&ctx.q, &every_second("s", "x"))
        .await
        .unwrap();
    let slot = info(ctx, "s").await.next_slot.unwrap();
    past(ctx, slot).await;
    assert_eq!(promote(ctx).await.fired, 1);
    assert!(ctx.store.remove_schedule(&ctx.q, &name("s")).await.unwrap());
    assert!(
        !ctx.store.remove_schedule(&ctx.q, &name("s")).await.unwrap(),
        "already gone"
    );
    assert!(list(ctx).await.is_empty());
    assert_eq!(ctx.probe.set_len("schedule_due").await, 0);
    assert!(
        ctx.store.get(&ctx.q, &slot_id("s", slot)).await.unwrap().is_some(),
        "its jobs stay"
    );
    let v2 = ctx
        .store
        .upsert_schedule(&ctx.q, &every_second("s", "y"))
        .await
        .unwrap();
    assert!(v2 > v1, "the version still rises: {v1} then {v2}");
    let fresh = info(ctx, "s").await;
    assert_eq!((fresh.fired, fresh.missed, fresh.last_slot), (0, 0, None));
    let next = fresh.next_slot.unwrap();
    assert!(next > slot);
    past(ctx, next).await;
    assert_eq!(
        promote(ctx).await.fired,
        1,
        "the new schedule fires: no finished row holds its slot"
    );
    assert_eq!(payload(ctx, &slot_id("s", next)).await, "y");
}

pub async fn pause_schedule_fires_and_misses_nothing_while_paused(ctx: &Ctx) {
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("s", "x"))
        .await
        .unwrap();
    assert!(!ctx.store.pause_schedule(&ctx.q, &name("none")).await.unwrap());
    assert!(ctx.store.pause_schedule(&ctx.q, &name("s")).await.unwrap());
    let paused = info(ctx, "s").await;
    assert!(paused.paused);
    past(ctx, paused.next_slot.unwrap() + 1000).await;
    let p = promote(ctx).await;
    assert_eq!(
        (p.fired, p.next_due_in),
        (0, None),
        "a paused schedule is not due: {p:?}"
    );
    let still = info(ctx, "s").await;
    assert_eq!((still.fired, still.missed), (0, 0));
    // an upsert keeps the pause
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("s", "y"))
        .await
        .unwrap();
    assert!(info(ctx, "s").await.paused);
    assert_eq!(promote(ctx).await.fired, 0);
}

/// Runs the refills a promote asked for, as a consumer does.
async fn refill(ctx: &Ctx, p: &Promoted) {
    for r in &p.refills {
        let slots = schedule::refill(r).unwrap();
        ctx.store.refill_schedule(&ctx.q, r, &slots).await.unwrap();
    }
}

pub async fn resume_schedule_fires_from_the_next_slot_after_now(ctx: &Ctx) {
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("s", "x"))
        .await
        .unwrap();
    assert!(!ctx.store.resume_schedule(&ctx.q, &name("none")).await.unwrap());
    assert!(
        ctx.store.resume_schedule(&ctx.q, &name("s")).await.unwrap(),
        "not paused: nothing to do"
    );
    ctx.store.pause_schedule(&ctx.q, &name("s")).await.unwrap();
    let before = info(ctx, "s").await;
    past(ctx, before.next_slot.unwrap() + 1500).await;
    let resumed_at = ctx.probe.now_ms().await as i64;
    assert!(ctx.store.resume_schedule(&ctx.q, &name("s")).await.unwrap());
    let resumed = info(ctx, "s").await;
    assert!(!resumed.paused);
    assert!(resumed.version > before.version, "a resume raises the version");
    // it holds no slot yet: the next promote asks for them
    let p = promote(ctx).await;
    assert_eq!(p.fired, 0);
    assert_eq!(p.refills.len(), 1, "{p:?}");
    assert_eq!(p.refills[0].version, resumed.version);
    refill(ctx, &p).await;
    let next = info(ctx, "s").await.next_slot.expect("refilled");
    assert!(
        next > resumed_at - 1000,
        "no slot from the pause: {next} vs resume at {resumed_at}"
    );
    past(ctx, next).await;
    assert_eq!(promote(ctx).await.fired, 1);
    let after = info(ctx, "s").await;
    assert_eq!((after.fired, after.missed), (1, 0), "the paused slots are not missed");
}

pub async fn list_schedules_shows_each_definition_and_its_state_by_name(ctx: &Ctx) {
    let template = JobTemplate {
        payload: b"{\"r\":1}".to_vec(),
        group: Some(GroupName::new("g").unwrap()),
        priority: 2,
        max_attempts: Some(4),
        retry: Some("exp:1s,x2,max=1m".parse().unwrap()),
        kind: Some("nightly".into()),
    };
    let mut b = Schedule::new(
        name("b-nightly"),
        Timing::cron("30 2 * * *", Some("Europe/Berlin")).unwrap(),
        template,
    );
    b.misfire = Misfire::All(5);
    b.overlap = Overlap::Skip;
    b.grace = Some(Duration::from_secs(2));
    let before = ctx.probe.now_ms().await as i64;
    ctx.store.upsert_schedule(&ctx.q, &b).await.unwrap();
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("a-tick", "x"))
        .await
        .unwrap();
    let all = list(ctx).await;
    let names: Vec<&str> = all.iter().map(|s| s.schedule.name.as_str()).collect();
    assert_eq!(names, ["a-tick", "b-nightly"]);
    let got = &all[1];
    assert_eq!(got.schedule, b, "the definition reads back whole");
    assert_eq!(got.next_slot, schedule::first_slots(&b.timing, before).first().copied());
    assert!(!got.paused);
    assert_eq!(
        (got.fired, got.missed, got.skipped, got.last_job.clone()),
        (0, 0, 0, None)
    );
}

pub async fn trigger_schedule_runs_one_job_now_outside_the_slots(ctx: &Ctx) {
    assert_eq!(ctx.store.trigger_schedule(&ctx.q, &name("none")).await.unwrap(), None);
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("s", "now"))
        .await
        .unwrap();
    let first = ctx.store.trigger_schedule(&ctx.q, &name("s")).await.unwrap().unwrap();
    let second = ctx.store.trigger_schedule(&ctx.q, &name("s")).await.unwrap().unwrap();
    assert_ne!(first, second);
    assert!(first.as_str().starts_with("sched:s:run"), "{first}");
    let row = ctx.store.get(&ctx.q, &first).await.unwrap().unwrap();
    assert_eq!((row.state, row.payload.as_slice()), (JobState::Pending, &b"now"[..]));
    let after = info(ctx, "s").await;
    assert_eq!(after.fired, 0, "a trigger is not a slot");
    assert_eq!(after.last_job, Some(second));
    let claimed = ctx
        .store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(10, LEASE).max_attempts(MAX))
        .await
        .unwrap();
    assert_eq!(claimed.jobs.len(), 2);
}

pub async fn refill_schedule_is_taken_once_and_only_under_its_version_and_cursor(ctx: &Ctx) {
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("s", "x"))
        .await
        .unwrap();
    ctx.store.pause_schedule(&ctx.q, &name("s")).await.unwrap();
    ctx.store.resume_schedule(&ctx.q, &name("s")).await.unwrap();
    let p = promote(ctx).await;
    let r = p.refills.first().expect("a refill asked").clone();
    let computed = schedule::refill(&r).unwrap();
    let slots = Refill {
        omitted: 7,
        slots: computed.slots.clone(),
    };
    let old = echomq::schedule::RefillRequest {
        version: r.version - 1,
        ..r.clone()
    };
    assert!(
        !ctx.store.refill_schedule(&ctx.q, &old, &slots).await.unwrap(),
        "another version"
    );
    let moved = echomq::schedule::RefillRequest {
        cursor: r.cursor + 1,
        ..r.clone()
    };
    assert!(
        !ctx.store.refill_schedule(&ctx.q, &moved, &slots).await.unwrap(),
        "another cursor"
    );
    assert!(ctx.store.refill_schedule(&ctx.q, &r, &slots).await.unwrap());
    assert!(
        !ctx.store.refill_schedule(&ctx.q, &r, &slots).await.unwrap(),
        "taken once"
    );
    let next = info(ctx, "s").await.next_slot.unwrap();
    assert_eq!(Some(next), computed.slots.first().copied());
    past(ctx, next).await;
    assert_eq!(promote(ctx).await.fired, 1);
    assert_eq!(info(ctx, "s").await.missed, 7, "the omitted slots are counted missed");
    // an upsert since: the request's version is refused
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("s", "y"))
        .await
        .unwrap();
    assert!(!ctx.store.refill_schedule(&ctx.q, &r, &slots).await.unwrap());
}

pub async fn promote_fires_due_slots_by_each_schedules_misfire_and_overlap_policy(ctx: &Ctx) {
    let policies = [
        ("skip", Misfire::Skip, Overlap::Allow),
        ("once", Misfire::Once, Overlap::Allow),
        ("all3", Misfire::All(3), Overlap::Allow),
        ("serial", Misfire::All(3), Overlap::Skip),
    ];
    for (n, misfire, overlap) in policies {
        let mut s = every_second(n, n);
        s.misfire = misfire;
        s.overlap = overlap;
        s.grace = Some(Duration::from_secs(2));
        ctx.store.upsert_schedule(&ctx.q, &s).await.unwrap();
    }
    // ten slots 3 s to 12 s late (missed: past the grace), one 100 ms ago (on time), two ahead
    let now = ctx.probe.now_ms().await;
    let mut slots: Vec<u64> = (3..=12).rev().map(|k| now - k * 1000).collect();
    let on_time = now - 100;
    slots.extend([on_time, now + 5000, now + 6000]);
    for (n, ..) in policies {
        ctx.probe.set_schedule_slots(n, &slots).await;
    }
    let p = promote(ctx).await;
    assert_eq!(p.fired, 1 + 2 + 4 + 1, "{p:?}");
    let fired = |n: &'static str, late: &[u64]| {
        let mut ids: Vec<JobId> = late.iter().map(|k| slot_id(n, (now - k * 1000) as i64)).collect();
        ids.push(slot_id(n, on_time as i64));
        ids
    };
    for (n, late, missed, skipped) in [
        ("skip", &[][..], 10, 0),
        ("once", &[3][..], 10, 0),
        ("all3", &[5, 4, 3][..], 10, 0),
        ("serial", &[][..], 10, 3),
    ] {
        for id in fired(n, late) {
            assert!(ctx.store.get(&ctx.q, &id).await.unwrap().is_some(), "{n}: {id} fired");
        }
        let i = info(ctx, n).await;
        let expect = late.len() as u64 + 1;
        assert_eq!((i.fired, i.missed, i.skipped), (expect, missed, skipped), "{n}");
        assert_eq!(i.last_slot, Some(on_time as i64), "{n}: every past slot decided");
        assert_eq!(i.next_slot, Some((now + 5000) as i64), "{n}");
    }
    assert_eq!(ctx.probe.set_len("pending").await, 8, "the fired jobs wait, no others");
    // overlap skip: while its last job waits, a due slot is skipped
    ctx.probe.set_schedule_slots("serial", &[now - 50, now + 5000]).await;
    assert_eq!(promote(ctx).await.fired, 0);
    let serial = info(ctx, "serial").await;
    assert_eq!((serial.fired, serial.skipped), (1, 4));
}

pub async fn upsert_schedule_keeps_the_due_slots_it_has_not_decided_and_fires_them_by_policy(ctx: &Ctx) {
    let mut s = every_second("s", "old");
    s.misfire = Misfire::All(3);
    s.grace = Some(Duration::from_secs(2));
    ctx.store.upsert_schedule(&ctx.q, &s).await.unwrap();
    // every consumer down: ten slots 3 s to 12 s late, one 100 ms ago, none decided
    let now = ctx.probe.now_ms().await;
    let mut slots: Vec<u64> = (3..=12).rev().map(|k| now - k * 1000).collect();
    let on_time = now - 100;
    slots.extend([on_time, now + 5000]);
    ctx.probe.set_schedule_slots("s", &slots).await;
    // the schedule added again (a deploy) before any consumer is back
    s.template.payload = b"new".to_vec();
    ctx.store.upsert_schedule(&ctx.q, &s).await.unwrap();
    let p = promote(ctx).await;
    assert_eq!(p.fired, 3 + 1, "the three latest missed and the one on time: {p:?}");
    for k in [5, 4, 3] {
        assert_eq!(payload(ctx, &slot_id("s", (now - k * 1000) as i64)).await, "new");
    }
    assert_eq!(payload(ctx, &slot_id("s", on_time as i64)).await, "new");
    let i = info(ctx, "s").await;
    assert_eq!((i.fired, i.missed), (4, 10), "the missed slots counted");
    assert!(i.next_slot.is_some_and(|n| n > now as i64), "{i:?}");
}

pub async fn trigger_schedule_passes_over_ids_callers_took(ctx: &Ctx) {
    ctx.store
        .upsert_schedule(&ctx.q, &every_second("s", "now"))
        .await
        .unwrap();
    let first = ctx.store.trigger_schedule(&ctx.q, &name("s")).await.unwrap().unwrap();
    let n: u64 = first.as_str().strip_prefix("sched:s:run").unwrap().parse().unwrap();
    // two jobs of a caller's own under the next trigger ids (their enqueue takes two counter
    // values: the next trigger looks from n + 3)
    let taken: Vec<JobId> = [n + 3, n + 4]
        .iter()
        .map(|k| JobId::new(format!("sched:s:run{k}")).unwrap())
        .collect();
    let jobs: Vec<_> = taken
        .iter()
        .map(|id| echomq::NewJob::new(b"mine".to_vec()).with_id(id.clone()))
        .collect();
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    let next = ctx.store.trigger_schedule(&ctx.q, &name("s")).await.unwrap().unwrap();
    assert_eq!(next.as_str(), format!("sched:s:run{}", n + 5));
    for id in &taken {
        assert_eq!(payload(ctx, id).await, "mine", "the caller's job is untouched");
    }
    assert_eq!(payload(ctx, &next).await, "now");
    assert_eq!(ctx.store.counts(&ctx.q).await.unwrap().pending, 4);
}

crate::conformance!(
    upsert_schedule_fires_each_slot_once_as_a_job_named_by_the_slot,
    upsert_schedule_changes_it_in_place_and_fires_no_decided_slot_again,
    upsert_schedule_refuses_bad_names_timings_zones_and_templates,
    upsert_schedule_is_gone_with_its_queue_after_obliterate,
    remove_schedule_then_upsert_starts_afresh,
    pause_schedule_fires_and_misses_nothing_while_paused,
    resume_schedule_fires_from_the_next_slot_after_now,
    list_schedules_shows_each_definition_and_its_state_by_name,
    trigger_schedule_runs_one_job_now_outside_the_slots,
    refill_schedule_is_taken_once_and_only_under_its_version_and_cursor,
    promote_fires_due_slots_by_each_schedules_misfire_and_overlap_policy,
    upsert_schedule_keeps_the_due_slots_it_has_not_decided_and_fires_them_by_policy,
    trigger_schedule_passes_over_ids_callers_took,
);
