//! `emq bench rate-limit`: consumer processes against a rate limit, the starts taken on the store's
//! clock (each job's claim time: its lease deadline, read back by its handler, less the lease).
//!
//! Without `--groups`: a queue limit over a flat backlog larger than the limit lets through; the
//! figures are the starts per second (against the limit) and the most starts any sliding window
//! of the limit's period holds, against its bound (max, or max + burst - 1 with a burst and no
//! exact window): a window over the bound fails the run. With `--groups G`: one group under the limit
//! among G unlimited groups, run twice — first with no limit, then with it — and each unlimited
//! group's starts with the limit against its starts without it, as counts and as its share of all
//! starts. With `--kind K`: the limit is kind K's own, over a flat backlog of K's jobs beside as many
//! jobs of another kind: the figures are K's, and the other kind's starts per second (which the
//! limit must not hold back).

use std::collections::HashMap;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use echomq::store::LimitTarget;
use echomq::{Consumer, ConsumerOptions, GroupName, JobContext, QueueName, RateLimit, RateTarget, Store, Verdict};
use serde_json::{json, Value};

use super::{emit, reset};

/// The options of the workload (`emq bench rate-limit`).
#[derive(clap::Args, Debug)]
pub struct RateArgs {
    /// The limit (MAX/PER): the queue's, or with --groups the limited group's.
    #[arg(long, default_value = "200/1s", value_parser = limit)]
    pub limit: RateLimit,
    /// Starts the limit lets through at once.
    #[arg(long, default_value_t = 1)]
    pub burst: u32,
    /// An exact-window limit (every window of PER holds at most MAX).
    #[arg(long)]
    pub exact: bool,
    /// Consumer processes.
    #[arg(long, default_value_t = 3)]
    pub consumers: usize,
    /// Each consumer's concurrency.
    #[arg(long, default_value_t = 10)]
    pub concurrency: usize,
    /// Seconds each run lasts.
    #[arg(long, default_value_t = 30)]
    pub secs: u64,
    /// Unlimited groups beside the limited one (0: the queue's own limit over flat jobs).
    #[arg(long, default_value_t = 0)]
    pub groups: usize,
    /// Jobs waiting in each group (--groups).
    #[arg(long, default_value_t = 20_000)]
    pub jobs_per_group: usize,
    /// The limit is this kind's own (RateTarget::Kind), over its jobs beside another kind's.
    #[arg(long, value_name = "K", conflicts_with = "groups")]
    pub kind: Option<String>,
}

pub(super) fn limit(s: &str) -> Result<RateLimit, String> {
    s.parse().map_err(|e: echomq::Error| e.to_string())
}

/// The hidden child: one consumer process of the workload.
#[derive(clap::Args, Debug)]
pub struct ChildArgs {
    /// Seconds to consume.
    #[arg(long)]
    pub secs: u64,
    /// Concurrency.
    #[arg(long)]
    pub concurrency: usize,
    /// Read each job's claim time back (the queue-limit run).
    #[arg(long)]
    pub times: bool,
    /// Read back the claim times of this kind's jobs only.
    #[arg(long, value_name = "K")]
    pub times_kind: Option<String>,
}

/// The lease of the child consumers: a job's claim time is its lease deadline less this.
const LEASE: Duration = Duration::from_secs(30);

/// The kind beside the limited one (--kind).
const OTHER_KIND: &str = "unlimited";

/// The limited group's name.
const LIMITED: &str = "limited";

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Runs one consumer for `secs`, then prints one JSON line: `starts` (each job's claim time, ms,
/// with --times; of --times-kind's jobs only when given), `groups` (starts per group) and `kinds`
/// (starts per kind).
pub async fn child(store: Arc<dyn Store>, q: &QueueName, args: ChildArgs) -> anyhow::Result<()> {
    let starts = Arc::new(Mutex::new(Vec::<u64>::new()));
    let groups = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let kinds = Arc::new(Mutex::new(HashMap::<String, u64>::new()));
    let (s, g, k, times, reader) = (starts.clone(), groups.clone(), kinds.clone(), args.times, store.clone());
    let times_kind = args.times_kind.clone();
    let handler = move |job: JobContext| {
        let (s, g, k, reader) = (s.clone(), g.clone(), k.clone(), reader.clone());
        let timed = times && times_kind.as_deref().is_none_or(|t| job.kind() == Some(t));
        async move {
            let name = job.group().map_or("", |g| g.as_str()).to_string();
            *g.lock().unwrap_or_else(|e| e.into_inner()).entry(name).or_insert(0) += 1;
            let kind = job.kind().unwrap_or("").to_string();
            *k.lock().unwrap_or_else(|e| e.into_inner()).entry(kind).or_insert(0) += 1;
            if timed {
                if let Ok(Some(row)) = reader.get(job.queue(), job.id()).await {
                    if let Some(deadline) = row.score {
                        s.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(deadline - LEASE.as_millis() as u64);
                    }
                }
            }
            Verdict::Done
        }
    };
    let opts = ConsumerOptions::default()
        .with_concurrency(args.concurrency)
        .with_lease(LEASE);
    let consumer = Consumer::start(store, q.clone(), handler, opts)?;
    tokio::time::sleep(Duration::from_secs(args.secs)).await;
    consumer.stop(Duration::from_secs(10)).await?;
    let starts = std::mem::take(&mut *starts.lock().unwrap_or_else(|e| e.into_inner()));
    let groups = std::mem::take(&mut *groups.lock().unwrap_or_else(|e| e.into_inner()));
    let kinds = std::mem::take(&mut *kinds.lock().unwrap_or_else(|e| e.into_inner()));
    out!("{}", json!({ "starts": starts, "groups": groups, "kinds": kinds }));
    Ok(())
}

/// The consumer processes' reports, once every one has ended.
async fn consumers(url: &str, args: &RateArgs, times: bool) -> anyhow::Result<Vec<Value>> {
    let exe = std::env::current_exe().context("cannot find this program to run the consumers")?;
    let mut children = Vec::new();
    for _ in 0..args.consumers {
        let mut cmd = tokio::process::Command::new(&exe);
        cmd.args(["--url", url, "bench", "rate-limit-child", "--secs"])
            .arg(args.secs.to_string())
            .arg("--concurrency")
            .arg(args.concurrency.to_string())
            .stdout(Stdio::piped())
            .kill_on_drop(true);
        if times {
            cmd.arg("--times");
            if let Some(k) = &args.kind {
                cmd.arg("--times-kind").arg(k);
            }
        }
        children.push(cmd.spawn().context("starting a consumer process")?);
    }
    let mut reports = Vec::new();
    for c in children {
        let out = c.wait_with_output().await?;
        anyhow::ensure!(out.status.success(), "a consumer process failed: {}", out.status);
        let text = String::from_utf8_lossy(&out.stdout);
        let line = text.lines().last().context("a consumer process printed nothing")?;
        reports.push(serde_json::from_str(line)?);
    }
    Ok(reports)
}

/// The most starts in any window [t, t + period) of the sorted `starts`.
fn max_window(starts: &[u64], period_ms: u64) -> usize {
    let (mut best, mut lo) = (0, 0);
    for hi in 0..starts.len() {
        while starts[hi] - starts[lo] >= period_ms {
            lo += 1;
        }
        best = best.max(hi - lo + 1);
    }
    best
}

pub async fn run(store: &Arc<dyn Store>, url: &str, q: &QueueName, args: RateArgs) -> anyhow::Result<()> {
    let limit = args.limit.with_burst(args.burst)?;
    let limit = if args.exact { limit.exact_window()? } else { limit };
    let per_s = f64::from(limit.max()) / limit.per().as_secs_f64();
    if args.groups == 0 {
        return queue_limit(store, url, q, &args, limit, per_s).await;
    }
    group_limit(store, url, q, &args, limit, per_s).await
}

async fn queue_limit(
    store: &Arc<dyn Store>,
    url: &str,
    q: &QueueName,
    args: &RateArgs,
    limit: RateLimit,
    per_s: f64,
) -> anyhow::Result<()> {
    let backlog = (per_s * args.secs as f64 * 1.2) as usize + 1000;
    let target = match &args.kind {
        None => {
            super::push(store, q, backlog, false).await?;
            RateTarget::Queue
        }
        Some(kind) => {
            // the limited kind's jobs, each followed by one of another kind
            let jobs: Vec<echomq::NewJob> = super::payloads(backlog)
                .into_iter()
                .flat_map(|j| [j.clone().with_kind(kind.as_str()), j.with_kind(OTHER_KIND)])
                .collect();
            for chunk in jobs.chunks(1000) {
                store.enqueue(q, chunk).await?;
            }
            RateTarget::Kind(kind.clone())
        }
    };
    store.set_rate_limit(q, &target, Some(limit)).await?;
    let began = now_ms();
    let reports = consumers(url, args, true).await?;
    let mut starts: Vec<u64> = reports
        .iter()
        .flat_map(|r| r["starts"].as_array().cloned().unwrap_or_default())
        .filter_map(|v| v.as_u64())
        .collect();
    starts.sort_unstable();
    anyhow::ensure!(starts.len() > 2, "the consumers started {} jobs", starts.len());
    // the steady part: a second in from the first start and back from the last
    let (first, last) = (starts[0], starts[starts.len() - 1]);
    let (lo, hi) = (first + 1000, last.saturating_sub(1000).max(first + 1001));
    let steady = starts.iter().filter(|&&t| t >= lo && t < hi).count();
    let rate = steady as f64 * 1000.0 / (hi - lo) as f64;
    let period = limit.per().as_millis() as u64;
    let most = max_window(&starts, period);
    let other: u64 = reports.iter().filter_map(|r| r["kinds"][OTHER_KIND].as_u64()).sum();
    emit(
        "e_rate_limit",
        json!({
            "limit": limit.to_string(), "burst": limit.burst(), "consumers": args.consumers,
            "kind": args.kind, "other_kind_starts": args.kind.as_ref().map(|_| other),
            "concurrency": args.concurrency, "secs": args.secs, "started_after_ms": first.saturating_sub(began),
            "starts": starts.len(), "starts_per_s": rate, "pct_of_limit": 100.0 * rate / per_s,
            "max_starts_in_a_period": most,
            "allowed_in_a_period": limit.window_bound(),
        }),
    );
    anyhow::ensure!(
        most as u64 <= limit.window_bound(),
        "a window of {period} ms held {most} starts, over the limit's bound of {}",
        limit.window_bound()
    );
    Ok(())
}

/// Starts per group of one run of the consumers over fresh lanes.
async fn group_run(
    store: &Arc<dyn Store>,
    url: &str,
    q: &QueueName,
    args: &RateArgs,
    limit: Option<RateLimit>,
) -> anyhow::Result<HashMap<String, u64>> {
    reset(store, q).await?;
    store.set_retention(q, &echomq::Retention::off()).await?;
    let mut names: Vec<String> = (0..args.groups).map(|i| format!("g{i}")).collect();
    names.push(LIMITED.into());
    for name in &names {
        let g = GroupName::new(name.as_str())?;
        for jobs in super::payloads(args.jobs_per_group).chunks(1000) {
            store.genqueue(q, &g, jobs).await?;
        }
    }
    let target = RateTarget::Group(GroupName::new(LIMITED)?);
    store.set_rate_limit(q, &target, limit).await?;
    let reports = consumers(url, args, false).await?;
    let mut total = HashMap::new();
    for r in reports {
        for (g, n) in r["groups"].as_object().cloned().unwrap_or_default() {
            *total.entry(g).or_insert(0) += n.as_u64().unwrap_or(0);
        }
    }
    Ok(total)
}

async fn group_limit(
    store: &Arc<dyn Store>,
    url: &str,
    q: &QueueName,
    args: &RateArgs,
    limit: RateLimit,
    per_s: f64,
) -> anyhow::Result<()> {
    // each group runs one job at a time (the default), as tenants' lanes do
    store.set_group_limit(q, &LimitTarget::Default, 1).await?;
    let without = group_run(store, url, q, args, None).await?;
    let with = group_run(store, url, q, args, Some(limit)).await?;
    let sum = |m: &HashMap<String, u64>| m.values().sum::<u64>();
    let (all_without, all_with) = (sum(&without).max(1) as f64, sum(&with).max(1) as f64);
    // each unlimited group's starts with the limit against without it: as counts (which the
    // machine's noise between the two runs moves too), and as its share of all starts
    let kept = |share: bool| -> Vec<f64> {
        let mut r: Vec<f64> = (0..args.groups)
            .map(|i| {
                let g = format!("g{i}");
                let (a, b) = (
                    without.get(&g).copied().unwrap_or(0),
                    with.get(&g).copied().unwrap_or(0),
                );
                let (a, b) = if share {
                    (a as f64 / all_without, b as f64 / all_with)
                } else {
                    (a as f64, b as f64)
                };
                if a == 0.0 {
                    0.0
                } else {
                    b / a
                }
            })
            .collect();
        r.sort_by(f64::total_cmp);
        r
    };
    let (ratios, shares) = (kept(false), kept(true));
    let limited = with.get(LIMITED).copied().unwrap_or(0);
    emit(
        "e_rate_limit_group",
        json!({
            "limit": limit.to_string(), "groups": args.groups, "consumers": args.consumers,
            "concurrency": args.concurrency, "secs": args.secs,
            "starts_without_limit": sum(&without), "starts_with_limit": sum(&with),
            "limited_group_starts_per_s": limited as f64 / args.secs as f64, "limited_group_limit_per_s": per_s,
            "other_groups_starts_kept_min_pct": 100.0 * ratios.first().copied().unwrap_or(0.0),
            "other_groups_starts_kept_median_pct": 100.0 * ratios.get(ratios.len() / 2).copied().unwrap_or(0.0),
            "other_groups_share_kept_min_pct": 100.0 * shares.first().copied().unwrap_or(0.0),
            "other_groups_share_kept_median_pct": 100.0 * shares.get(shares.len() / 2).copied().unwrap_or(0.0),
        }),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::max_window;

    #[test]
    fn the_window_counts_the_starts_of_any_half_open_period() {
        assert_eq!(max_window(&[], 1000), 0);
        assert_eq!(max_window(&[0, 999, 1000, 1001], 1000), 3);
        assert_eq!(max_window(&[0, 500, 1000, 1500, 1999], 1000), 3);
        assert_eq!(max_window(&[0, 500, 1000, 1500, 2000], 1000), 2);
    }
}
