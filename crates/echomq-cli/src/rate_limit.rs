//! `emq rate-limit`: at most MAX job starts per PER, for a whole queue, one group, every group
//! without its own or one kind of job — a setting in the store that every consumer of the queue, on every machine,
//! obeys.

use std::time::Duration;

use echomq::rate::RateLimits;
use echomq::{GroupName, QueueName, RateLimit, RateTarget};

/// The arguments of `emq rate-limit` (its help is the command's, in `main.rs`).
#[derive(clap::Args, Debug)]
#[command(
    group(clap::ArgGroup::new("change").args(["limit", "off"])),
    override_usage = "emq rate-limit QUEUE [--group G | --group-default | --kind K] [--burst N] [--exact] MAX/PER\n       \
                      emq rate-limit QUEUE [--group G | --group-default | --kind K] --off\n       \
                      emq rate-limit QUEUE"
)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The limit: MAX starts per PER (`200/1s`, `1000/1m`, `5/s`).
    #[arg(value_name = "MAX/PER", value_parser = limit)]
    pub limit: Option<RateLimit>,
    /// One group's limit instead of the queue's.
    #[arg(long, value_name = "G", conflicts_with_all = ["group_default", "kind"])]
    pub group: Option<String>,
    /// One kind's limit instead of the queue's: the starts of that kind's jobs, flat and in
    /// groups. While it admits none, they wait and the queue's other kinds go on.
    #[arg(long, value_name = "K", conflicts_with = "group_default")]
    pub kind: Option<String>,
    /// The default of groups without a limit of their own instead of the queue's.
    #[arg(long)]
    pub group_default: bool,
    /// Starts let through at once (1 to 1000000; default 1). A burst B lets up to MAX + B - 1
    /// starts into a window of PER, unless --exact.
    #[arg(long, value_name = "N", requires = "limit")]
    pub burst: Option<u32>,
    /// Hold every window of PER to at most MAX starts whatever the burst (MAX at most 10000: the
    /// store keeps a log of the last MAX starts).
    #[arg(long, requires = "limit")]
    pub exact: bool,
    /// Remove the limit.
    #[arg(long)]
    pub off: bool,
}

fn limit(s: &str) -> Result<RateLimit, String> {
    s.parse().map_err(|e: echomq::Error| e.to_string())
}

/// A wait as this command and `emq stats` print it: `now`, or a duration to the ms.
fn wait(d: Duration) -> String {
    if d.is_zero() {
        return "now".into();
    }
    let ms = Duration::from_millis(d.as_millis().max(1) as u64);
    humantime::format_duration(ms).to_string().replace(' ', "")
}

/// The lines `emq stats QUEUE` and `emq rate-limit QUEUE` print for a queue's limits:
/// `rate_limit=200/1s next=now`, `rate_limit_group_default=5/1m burst 2`,
/// `rate_limit_group[G]=1/1h next=59m59s`, `rate_limit_kind[K]=5/1s next=now`,
/// `throttled_groups=N next=…`; `rate_limit=none` when the queue has none of them.
pub fn lines(l: &RateLimits) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(q) = &l.queue {
        out.push(format!("rate_limit={} next={}", q.limit, wait(q.wait)));
    }
    if let Some(d) = &l.group_default {
        out.push(format!("rate_limit_group_default={d}"));
    }
    for g in &l.groups {
        out.push(format!(
            "rate_limit_group[{}]={} next={}",
            g.group,
            g.state.limit,
            wait(g.state.wait)
        ));
    }
    for k in &l.kinds {
        out.push(format!(
            "rate_limit_kind[{}]={} next={}",
            k.kind,
            k.state.limit,
            wait(k.state.wait)
        ));
    }
    if let Some(next) = l.next_admission {
        out.push(format!("throttled_groups={} next={}", l.throttled, wait(next)));
    }
    if out.is_empty() {
        out.push("rate_limit=none".into());
    }
    out
}

/// Runs `emq rate-limit`.
#[allow(clippy::print_stdout, clippy::print_stderr)] // the limits on stdout; a change on stderr
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let target = match (&args.group, args.group_default, &args.kind) {
        (Some(g), _, _) => RateTarget::Group(GroupName::new(g.as_str())?),
        (None, true, _) => RateTarget::GroupDefault,
        (None, false, Some(k)) => RateTarget::Kind(k.clone()),
        (None, false, None) => RateTarget::Queue,
    };
    let change = match (args.limit, args.off) {
        (Some(l), _) => {
            let l = match args.burst {
                Some(b) => l.with_burst(b)?,
                None => l,
            };
            Some(Some(if args.exact { l.exact_window()? } else { l }))
        }
        (None, true) => Some(None),
        (None, false) if target != RateTarget::Queue => {
            anyhow::bail!("--group, --group-default and --kind need MAX/PER or --off")
        }
        (None, false) => None,
    };
    let store = crate::open(url).await?;
    if let Some(limit) = change {
        store.set_rate_limit(&queue, &target, limit).await?;
        let whose = match &target {
            RateTarget::Queue => format!("queue {queue}"),
            RateTarget::Group(g) => format!("group {g} of queue {queue}"),
            RateTarget::GroupDefault => format!("queue {queue}: groups without their own limit"),
            RateTarget::Kind(k) => format!("kind {k} of queue {queue}"),
            other => format!("{other:?} of queue {queue}"),
        };
        match limit {
            Some(l) => eprintln!(
                "{whose}: at most {} starts in any window of {}",
                l.window_bound(),
                humantime::format_duration(l.per())
            ),
            None => eprintln!("{whose}: no rate limit"),
        }
    }
    for line in lines(&store.rate_limits(&queue).await?) {
        println!("{line}");
    }
    Ok(0)
}
