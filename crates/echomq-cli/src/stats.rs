//! `emq stats`: sizes per state and the counters of one queue or of every queue, once or (with
//! `--watch`) every second with rates.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant, SystemTime};

use echomq::store::Counts;
use echomq::{QueueName, Store};
use tokio::signal::unix::{signal, SignalKind};

/// Sizes per state and the counters, per queue.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// Only this queue (default: every queue the store knows). A queue never used prints zeros.
    /// The table of one queue is followed by its settings: `priority_aging=60s` (`strict` at 0),
    /// then its rate limits and their state, as `emq rate-limit QUEUE` prints them
    /// (`rate_limit=200/1s next=now`, `rate_limit_group[G]=…`, `throttled_groups=N next=…`;
    /// `rate_limit=none` for a queue without any).
    pub queue: Option<String>,
    /// One JSON object per line per queue (NDJSON): queue, pending, scheduled, active, dead,
    /// completed, cancelled (counters since the queue was created or obliterated), paused,
    /// oldest_pending_age_ms (how long the oldest pending job has waited ready, to within a
    /// second; null when none is counted — jobs put back at the front by a recovery or a release
    /// are not), ready_by_kind (the flat ready jobs of each kind, "" for raw jobs) and
    /// kinds_with_no_live_consumer (those of them no live consumer runs; "" for raw jobs) and
    /// consumers (each live consumer's id and kinds, null for every kind). The table of one queue
    /// is followed by `ready_kind[K]=N` per kind, `kinds_with_no_live_consumer=K,…` (`(raw)` for
    /// raw jobs, `none` when every kind has one) and `consumer[ID]=KINDS` per live consumer.
    #[arg(long)]
    pub json: bool,
    /// Redraw every second with rates since the last draw (completed, retried and dead-lettered
    /// jobs per second); Ctrl-C stops (exit 0). When stdout is not a terminal, a new block per
    /// second; with --json, each line also carries `at` (ms since the epoch) and `completed_per_s`,
    /// `retried_per_s`, `failed_per_s` (null on the first draw).
    #[arg(long)]
    pub watch: bool,
    /// The queue's jobs completed and dead-lettered per minute over its last MINUTES minutes
    /// (default 60, at most 1440), oldest first: one line per minute,
    /// `2026-12-05 20:59 UTC completed=12 failed=0`, or with --json one object per line (queue,
    /// minute in minutes since the epoch, at, completed, failed).
    #[arg(
        long,
        value_name = "MINUTES",
        num_args = 0..=1,
        default_missing_value = "60",
        requires = "queue",
        conflicts_with = "watch"
    )]
    pub history: Option<u32>,
}

/// Runs `emq stats`.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let named = args.queue.as_deref().map(QueueName::new).transpose()?;
    let store = crate::open(url).await?;
    if args.watch {
        return watch(store.as_ref(), named.as_ref(), args.json).await;
    }
    if let (Some(minutes), Some(q)) = (args.history, named.as_ref()) {
        let h = store.history(q, minutes).await?;
        for (i, (done, failed)) in h.completed.iter().zip(&h.failed).enumerate() {
            let minute = h.first_minute + i as u64;
            let at = echomq::schedule::utc(minute as i64 * 60_000)
                .map_or_else(|| minute.to_string(), |t| t.format("%Y-%m-%d %H:%M UTC").to_string());
            if args.json {
                let line = serde_json::json!({
                    "queue": q.as_str(), "minute": minute, "at": at, "completed": done, "failed": failed,
                });
                out!("{line}");
            } else {
                out!("{at} completed={done} failed={failed}");
            }
        }
        return Ok(0);
    }
    let rows = read(store.as_ref(), named.as_ref()).await?;
    if args.json {
        let queues: Vec<QueueName> = rows.iter().map(|(q, _)| q.clone()).collect();
        let consumers = each_queue(&queues, |q| {
            let store = store.clone();
            async move { store.consumers(&q).await }
        })
        .await?;
        for ((q, c), live) in rows.iter().zip(consumers) {
            let line = json_line(q, c);
            let orphans: Vec<String> = echomq::registry::kinds_without_consumer(&c.ready_by_kind, &live)
                .into_iter()
                .map(|(k, _)| k.unwrap_or_default())
                .collect();
            let consumers: Vec<serde_json::Value> = live
                .iter()
                .map(|c| serde_json::json!({ "id": c.id, "kinds": c.kinds.store_names() }))
                .collect();
            out!(
                "{},\"kinds_with_no_live_consumer\":{},\"consumers\":{}}}",
                &line[..line.len() - 1],
                serde_json::Value::from(orphans),
                serde_json::Value::from(consumers)
            );
        }
    } else {
        print_table(&rows);
        if let Some(q) = &named {
            let aging = store.priority_aging(q).await?;
            out!("priority_aging={}", crate::priority_aging::shown(aging));
            for line in crate::rate_limit::lines(&store.rate_limits(q).await?) {
                out!("{line}");
            }
            if let Some((_, c)) = rows.first() {
                for line in kind_lines(&c.ready_by_kind, &store.consumers(q).await?) {
                    out!("{line}");
                }
            }
        }
    }
    Ok(0)
}

/// The counts of the named queue, or of every queue by name.
async fn read(store: &dyn Store, named: Option<&QueueName>) -> anyhow::Result<Vec<(QueueName, Counts)>> {
    Ok(counts_of(store, named.map(std::slice::from_ref)).await?)
}

/// The counts of `queues`, in their order, or of every queue the store knows, by name: one
/// `counts` a queue (`emq stats`, the dashboard's overview and its `/metrics` read them here).
pub async fn counts_of(store: &dyn Store, queues: Option<&[QueueName]>) -> echomq::Result<Vec<(QueueName, Counts)>> {
    let queues = match queues {
        Some(q) => q.to_vec(),
        None => {
            let mut all = store.queues().await?;
            all.sort();
            all
        }
    };
    let counts = each_queue(&queues, |q| async move { store.counts(&q).await }).await?;
    Ok(queues.into_iter().zip(counts).collect())
}

/// How many queues' reads a view of every queue keeps in flight: Redis answers them side by
/// side, about this many a round trip (a view of thousands of queues would otherwise wait out a
/// round trip per queue in turn), each batch a few hundred microseconds of its time; the embedded
/// store's thread takes them one after another all the same.
pub(crate) const QUEUES_IN_FLIGHT: usize = 64;

/// `read` of each of `queues`, a few in flight, the answers in the queues' order.
pub(crate) async fn each_queue<T, F, Fut>(queues: &[QueueName], read: F) -> echomq::Result<Vec<T>>
where
    F: Fn(QueueName) -> Fut,
    Fut: std::future::Future<Output = echomq::Result<T>>,
{
    use futures::{StreamExt, TryStreamExt};
    futures::stream::iter(queues.iter().cloned().map(read))
        .buffered(QUEUES_IN_FLIGHT)
        .try_collect()
        .await
}

/// One NDJSON line, its fields in the documented order.
fn json_line(queue: &QueueName, c: &Counts) -> String {
    format!(
        "{{\"queue\":{},\"pending\":{},\"scheduled\":{},\"active\":{},\"dead\":{},\"completed\":{},\"cancelled\":{},\"paused\":{},\"oldest_pending_age_ms\":{},\"ready_by_kind\":{}}}",
        serde_json::Value::from(queue.as_str()),
        c.pending,
        c.scheduled,
        c.active,
        c.dead,
        c.completed,
        c.cancelled,
        c.paused,
        serde_json::Value::from(c.oldest_pending_age.map(|a| a.as_millis() as u64)),
        serde_json::Value::Object(
            c.ready_by_kind
                .iter()
                .map(|(k, n)| (k.clone().unwrap_or_default(), (*n).into()))
                .collect()
        ),
    )
}

/// How long the oldest pending job has waited, as the table and the dashboard show it: `45s`,
/// `12m05s`, `3h20m`, `2d04h`; `-` when none is counted.
pub(crate) fn age_text(age: Option<std::time::Duration>) -> String {
    let Some(age) = age else { return "-".into() };
    let s = age.as_secs();
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        3600..86400 => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86400, s % 86400 / 3600),
    }
}

/// A kind as `emq stats` and the dashboard show it: its name, `(raw)` for raw jobs.
pub(crate) fn kind_text(kind: Option<&str>) -> &str {
    kind.unwrap_or("(raw)")
}

/// The lines after one queue's table: its flat ready jobs per kind, then the kinds no live
/// consumer runs.
fn kind_lines(ready: &[(Option<String>, u64)], live: &[echomq::registry::ConsumerEntry]) -> Vec<String> {
    let mut lines: Vec<String> = ready
        .iter()
        .map(|(k, n)| format!("ready_kind[{}]={n}", kind_text(k.as_deref())))
        .collect();
    let orphans: Vec<String> = echomq::registry::kinds_without_consumer(ready, live)
        .iter()
        .map(|(k, _)| kind_text(k.as_deref()).to_string())
        .collect();
    lines.push(format!(
        "kinds_with_no_live_consumer={}",
        if orphans.is_empty() {
            "none".to_string()
        } else {
            orphans.join(",")
        }
    ));
    lines.extend(live.iter().map(|c| format!("consumer[{}]={}", c.id, c.kinds)));
    lines
}

#[allow(clippy::print_stderr)] // the table is the command's result
fn print_table(rows: &[(QueueName, Counts)]) {
    if rows.is_empty() {
        eprintln!("no queues yet");
        return;
    }
    for line in table(rows, None) {
        out!("{line}");
    }
}

const HEAD: [&str; 9] = [
    "QUEUE",
    "PENDING",
    "SCHEDULED",
    "ACTIVE",
    "DEAD",
    "COMPLETED",
    "CANCELLED",
    "OLDEST",
    "PAUSED",
];

/// The columns `--watch` adds before PAUSED.
const RATE_HEAD: [&str; 3] = ["COMPLETED/S", "RETRIED/S", "FAILED/S"];

/// The aligned table: numbers right-aligned, the last column (paused) left-aligned. With `rates`
/// (one per row, `None` before the second draw), the rate columns go before PAUSED.
fn table(rows: &[(QueueName, Counts)], rates: Option<&[Option<Rates>]>) -> Vec<String> {
    let mut head: Vec<&str> = HEAD[..8].to_vec();
    if rates.is_some() {
        head.extend(RATE_HEAD);
    }
    head.push(HEAD[8]);
    let cells: Vec<Vec<String>> = rows
        .iter()
        .enumerate()
        .map(|(i, (q, c))| {
            let mut row = vec![
                q.to_string(),
                c.pending.to_string(),
                c.scheduled.to_string(),
                c.active.to_string(),
                c.dead.to_string(),
                c.completed.to_string(),
                c.cancelled.to_string(),
                age_text(c.oldest_pending_age),
            ];
            if let Some(rates) = rates {
                match rates.get(i).copied().flatten() {
                    Some(r) => row.extend([r.completed, r.retried, r.failed].map(|x| format!("{x:.1}"))),
                    None => row.extend(["-", "-", "-"].map(String::from)),
                }
            }
            row.push(if c.paused { "yes" } else { "no" }.to_string());
            row
        })
        .collect();
    let mut width: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in &cells {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.len());
        }
    }
    let last = head.len() - 1;
    let line = |row: &[&str]| {
        let mut out = format!("{:<w$}", row[0], w = width[0]);
        for (i, cell) in row.iter().enumerate().skip(1) {
            if i == last {
                out.push_str(&format!("  {cell:<w$}", w = width[i]));
            } else {
                out.push_str(&format!("  {cell:>w$}", w = width[i]));
            }
        }
        out.trim_end().to_string()
    };
    let mut lines = vec![line(&head)];
    for row in &cells {
        lines.push(line(&row.iter().map(String::as_str).collect::<Vec<_>>()));
    }
    lines
}

/// Events per second between two draws of one queue.
#[derive(Debug, Clone, Copy)]
struct Rates {
    completed: f64,
    retried: f64,
    failed: f64,
}

impl Rates {
    /// A counter that went down (the queue was obliterated in between) counts as 0.
    fn between(before: &Counts, after: &Counts, secs: f64) -> Self {
        let per_s = |a: u64, b: u64| b.saturating_sub(a) as f64 / secs.max(1e-9);
        Rates {
            completed: per_s(before.completed, after.completed),
            retried: per_s(before.retried, after.retried),
            failed: per_s(before.failed, after.failed),
        }
    }
}

/// `--watch`: a draw every second until SIGINT or SIGTERM (exit 0). On a terminal the table is
/// redrawn in place; otherwise each draw is a new block (or new NDJSON lines).
async fn watch(store: &dyn Store, named: Option<&QueueName>, json: bool) -> anyhow::Result<i32> {
    // listen first: from here on Ctrl-C ends the loop instead of killing the process mid-draw
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let redraw = !json && std::io::stdout().is_terminal();
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last: Option<(Instant, HashMap<QueueName, Counts>)> = None;
    let mut first = true;
    loop {
        tokio::select! {
            _ = tick.tick() => {}
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
        let rows = read(store, named).await?;
        let now = Instant::now();
        let rates: Vec<Option<Rates>> = rows
            .iter()
            .map(|(q, c)| {
                let (then, before) = last.as_ref()?;
                Some(Rates::between(
                    before.get(q)?,
                    c,
                    now.duration_since(*then).as_secs_f64(),
                ))
            })
            .collect();
        let at = SystemTime::now();
        let mut block = String::new();
        if json {
            let ms = at
                .duration_since(SystemTime::UNIX_EPOCH)
                .unwrap_or_default()
                .as_millis();
            for ((q, c), r) in rows.iter().zip(&rates) {
                let base = json_line(q, c);
                let rate = |f: fn(&Rates) -> f64| {
                    r.as_ref()
                        .map_or(serde_json::Value::Null, |r| ((f(r) * 100.0).round() / 100.0).into())
                };
                block.push_str(&format!(
                    "{},\"at\":{ms},\"completed_per_s\":{},\"retried_per_s\":{},\"failed_per_s\":{}}}\n",
                    &base[..base.len() - 1],
                    rate(|r| r.completed),
                    rate(|r| r.retried),
                    rate(|r| r.failed),
                ));
            }
        } else {
            let when = humantime::format_rfc3339_seconds(at);
            let mut lines = vec![if redraw {
                format!("{when}  every 1 s, Ctrl-C to stop")
            } else {
                when.to_string()
            }];
            if rows.is_empty() {
                lines.push("no queues yet".to_string());
            } else {
                lines.extend(table(&rows, Some(&rates)));
            }
            if redraw {
                // home, each line clearing its rest, then clear below: no flicker, no leftovers
                block.push_str(if first { "\x1b[2J\x1b[H" } else { "\x1b[H" });
                for l in lines {
                    block.push_str(&l);
                    block.push_str("\x1b[K\n");
                }
                block.push_str("\x1b[J");
            } else {
                block = lines.join("\n") + "\n\n";
            }
        }
        let mut out = std::io::stdout().lock();
        match out.write_all(block.as_bytes()).and_then(|()| out.flush()) {
            Ok(()) => {}
            // the reader went away (`| head`): as good as Ctrl-C
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => return Ok(0),
            Err(e) => return Err(e.into()),
        }
        first = false;
        last = Some((now, rows.into_iter().collect()));
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::age_text;

    #[test]
    fn an_age_shows_its_two_largest_units() {
        let at = |s: u64| age_text(Some(Duration::from_secs(s)));
        assert_eq!(age_text(None), "-");
        assert_eq!(age_text(Some(Duration::from_millis(999))), "0s");
        assert_eq!(at(59), "59s");
        assert_eq!(at(60), "1m00s");
        assert_eq!(at(725), "12m05s");
        assert_eq!(at(3600 * 3 + 20 * 60 + 59), "3h20m");
        assert_eq!(at(86400 * 2 + 3600 * 4 + 1), "2d04h");
    }
}
