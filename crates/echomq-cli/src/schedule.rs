//! `emq schedule`: cron expressions (in an IANA time zone) and intervals that fire a job template,
//! kept in the store and fired by the consumers of the queue — no scheduler process, and each slot
//! fires once however many consumers run.

use std::time::Duration;

use echomq::schedule::{self, JobTemplate, Misfire, Overlap, Schedule, ScheduleInfo, ScheduleName, Timing, Tz};
use echomq::{GroupName, QueueName, RetryPolicy};

/// The arguments of `emq schedule`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(subcommand)]
    pub command: Verb,
}

/// What `emq schedule` does.
#[derive(clap::Subcommand, Debug)]
pub enum Verb {
    /// Create a schedule, or change it in place (its next slot recomputed, no slot fired twice).
    #[command(group(clap::ArgGroup::new("timing").args(["every", "cron"]).required(true)))]
    Add(Box<Add>),
    /// Show schedules: the next fire (in the schedule's zone and UTC), the last fire, and the
    /// missed and skipped counts.
    List(ListArgs),
    /// Delete a schedule (the jobs it fired stay).
    Remove(Named),
    /// Stop a schedule firing (nothing is missed while paused).
    Pause(Named),
    /// Fire a paused schedule again, from its next slot after now.
    Resume(Named),
    /// Run one job of the schedule's template now, outside its slots.
    Trigger(Named),
}

/// `emq schedule add`.
#[derive(clap::Args, Debug)]
pub struct Add {
    /// The queue.
    pub queue: String,
    /// The schedule's name (at most 64 bytes of A-Z a-z 0-9 . _ : -).
    pub name: String,
    /// An interval: a slot at every multiple of it since the epoch (`30s`, `5m`, `1h`; at least 1s).
    #[arg(long, value_name = "D")]
    pub every: Option<String>,
    /// A cron expression: 5 fields (minute hour day month weekday), or 6 with seconds first.
    #[arg(long, value_name = "EXPR")]
    pub cron: Option<String>,
    /// The cron expression's IANA time zone (default UTC), e.g. Europe/Berlin.
    #[arg(long, value_name = "ZONE", requires = "cron")]
    pub tz: Option<String>,
    /// Each job's payload.
    #[arg(long, value_name = "P", default_value = "")]
    pub payload: String,
    /// Each job's group (its lane and concurrency limit).
    #[arg(long, value_name = "G")]
    pub group: Option<String>,
    /// Each job's priority, 0 (the most urgent, the default) to 9.
    #[arg(long, value_name = "P", default_value_t = 0)]
    pub priority: u8,
    /// Each job's retry policy (`fixed:1s`, `exp:200ms,x2,max=10m,jitter=full`).
    #[arg(long, value_name = "SPEC", value_parser = crate::retry_policy)]
    pub retry: Option<RetryPolicy>,
    /// Each job's attempt budget (default: the consumer's).
    #[arg(long, value_name = "N")]
    pub max_attempts: Option<u32>,
    /// Slots missed by more than the grace (all consumers down): `skip` fires none of them, `once`
    /// (the default) one catch-up job, `all` each of them (at most 100; `all:N` at most N).
    #[arg(long, value_name = "skip|once|all[:N]", default_value = "once")]
    pub misfire: Misfire,
    /// `skip`: no fire while the schedule's previous job still waits or runs (counted skipped).
    #[arg(long, value_name = "allow|skip", default_value = "allow")]
    pub overlap: Overlap,
    /// How late a slot may fire and still be on time (default: max(5s, 2 beats) of the consumer).
    #[arg(long, value_name = "D", value_parser = crate::duration)]
    pub grace: Option<Duration>,
}

/// `emq schedule list`.
#[derive(clap::Args, Debug)]
pub struct ListArgs {
    /// The queue (default: every queue).
    pub queue: Option<String>,
    /// One JSON object per schedule, one per line.
    #[arg(long)]
    pub json: bool,
}

/// A verb on one schedule.
#[derive(clap::Args, Debug)]
pub struct Named {
    /// The queue.
    pub queue: String,
    /// The schedule's name.
    pub name: String,
}

/// Runs `emq schedule`.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    match args.command {
        Verb::Add(a) => add(url, *a).await,
        Verb::List(a) => list(url, a).await,
        Verb::Remove(a) => one(url, a, "remove").await,
        Verb::Pause(a) => one(url, a, "pause").await,
        Verb::Resume(a) => one(url, a, "resume").await,
        Verb::Trigger(a) => one(url, a, "trigger").await,
    }
}

#[allow(clippy::print_stderr)] // what was done, on stderr by contract
async fn add(url: &str, a: Add) -> anyhow::Result<i32> {
    let queue = QueueName::new(&a.queue)?;
    let name = ScheduleName::new(&a.name)?;
    let timing = match (&a.every, &a.cron) {
        (Some(every), _) => Timing::every(schedule::parse_interval(every)?)?,
        (None, Some(cron)) => Timing::cron(cron, a.tz.as_deref())?,
        (None, None) => anyhow::bail!("--every D or --cron EXPR is needed"),
    };
    let template = JobTemplate {
        payload: a.payload.into_bytes(),
        group: a.group.map(GroupName::new).transpose()?,
        priority: a.priority,
        max_attempts: a.max_attempts,
        retry: a.retry,
        kind: None,
    };
    let mut s = Schedule::new(name, timing, template);
    s.misfire = a.misfire;
    s.overlap = a.overlap;
    s.grace = a.grace;
    let store = crate::open(url).await?;
    let version = store.upsert_schedule(&queue, &s).await?;
    let next = store
        .list_schedules(&queue)
        .await?
        .into_iter()
        .find(|i| i.schedule.name == s.name)
        .and_then(|i| i.next_slot);
    let when = next.map_or("no slot yet".into(), |ms| fire_text(ms, &s.timing));
    eprintln!(
        "schedule {} of queue {queue}: {} (version {version}); next fire {when}",
        s.name, s.timing
    );
    Ok(0)
}

/// A slot in the schedule's zone and in UTC (the same text once for a UTC schedule).
fn fire_text(ms: i64, timing: &Timing) -> String {
    let zone = timing.zone();
    let utc = schedule::local_text(ms, Tz::UTC);
    if zone.name() == "UTC" {
        return utc;
    }
    format!("{} ({utc})", schedule::local_text(ms, zone))
}

#[allow(clippy::print_stdout)] // the listing, on stdout
async fn list(url: &str, a: ListArgs) -> anyhow::Result<i32> {
    let store = crate::open(url).await?;
    let queues = match &a.queue {
        Some(q) => vec![QueueName::new(q)?],
        None => store.queues().await?,
    };
    for queue in queues {
        for s in store.list_schedules(&queue).await? {
            if a.json {
                println!("{}", json(&queue, &s));
            } else {
                println!("{}", line(&queue, &s));
            }
        }
    }
    Ok(0)
}

/// One schedule as `emq schedule list` prints it.
fn line(queue: &QueueName, i: &ScheduleInfo) -> String {
    let s = &i.schedule;
    let next = match (i.paused, i.next_slot) {
        (true, _) => "paused".to_string(),
        (false, Some(ms)) => fire_text(ms, &s.timing),
        (false, None) => "awaiting slots".to_string(),
    };
    let last = i.last_fire.map_or("never".into(), |ms| fire_text(ms, &s.timing));
    format!(
        "{queue} {} {} misfire={} overlap={} next={next} last={last} fired={} missed={} skipped={}",
        s.name, s.timing, s.misfire, s.overlap, i.fired, i.missed, i.skipped
    )
}

/// One schedule as `emq schedule list --json` prints it.
fn json(queue: &QueueName, i: &ScheduleInfo) -> serde_json::Value {
    let s = &i.schedule;
    let zone = s.timing.zone();
    let at = |ms: Option<i64>| ms.map(|ms| schedule::local_text(ms, Tz::UTC));
    serde_json::json!({
        "queue": queue.as_str(),
        "name": s.name.as_str(),
        "timing": s.timing.to_string(),
        "tz": zone.name(),
        "misfire": s.misfire.to_string(),
        "overlap": s.overlap.to_string(),
        "grace_ms": s.grace.map(|g| g.as_millis() as u64),
        "payload": String::from_utf8_lossy(&s.template.payload),
        "group": s.template.group.as_ref().map(|g| g.as_str()),
        "priority": s.template.priority,
        "paused": i.paused,
        "next_fire_ms": i.next_slot,
        "next_fire": i.next_slot.map(|ms| schedule::local_text(ms, zone)),
        "next_fire_utc": at(i.next_slot),
        "last_fire_ms": i.last_fire,
        "last_fire_utc": at(i.last_fire),
        "last_job": i.last_job.as_ref().map(|j| j.as_str()),
        "fired": i.fired,
        "missed": i.missed,
        "skipped": i.skipped,
        "version": i.version,
    })
}

#[allow(clippy::print_stdout, clippy::print_stderr)] // a trigger's job id on stdout; what was done on stderr
async fn one(url: &str, a: Named, verb: &str) -> anyhow::Result<i32> {
    let queue = QueueName::new(&a.queue)?;
    let name = ScheduleName::new(&a.name)?;
    let store = crate::open(url).await?;
    let found = match verb {
        "remove" => store.remove_schedule(&queue, &name).await?,
        "pause" => store.pause_schedule(&queue, &name).await?,
        "resume" => store.resume_schedule(&queue, &name).await?,
        _ => match store.trigger_schedule(&queue, &name).await? {
            Some(id) => {
                println!("{id}");
                true
            }
            None => false,
        },
    };
    if !found {
        eprintln!("no schedule {name} in queue {queue}");
        return Ok(1);
    }
    let done = match verb {
        "remove" => "removed",
        "pause" => "paused",
        "resume" => "resumed",
        _ => "triggered",
    };
    eprintln!("schedule {name} of queue {queue}: {done}");
    Ok(0)
}
