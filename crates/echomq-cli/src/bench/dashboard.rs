//! `emq bench dashboard`: the dashboard's pages over loopback HTTP with a large queue — N waiting
//! jobs, half flat and half spread over G groups — each page requested R times in turn, its
//! median and 99th percentile printed; and `/metrics` on the empty queue first, and again once the
//! queue is drained, for the ratio.

use std::sync::Arc;
use std::time::{Duration, Instant};

use echomq::{GroupName, NewJob, QueueName, Store};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::emit;

#[derive(clap::Args, Debug)]
pub struct DashboardArgs {
    /// Waiting jobs (N): half flat, half in the groups.
    #[arg(long, default_value_t = 1_000_000)]
    jobs: usize,
    /// Groups (G).
    #[arg(long, default_value_t = 10_000)]
    groups: usize,
    /// Requests per page (R).
    #[arg(long, default_value_t = 200)]
    requests: usize,
}

pub(super) async fn run(store: &Arc<dyn Store>, q: &QueueName, a: DashboardArgs) -> anyhow::Result<()> {
    let addr = crate::dashboard::serve_in_process(store.clone()).await?;
    // the queue exists, empty: the scrape to compare with
    store.enqueue(q, &[NewJob::new("x")]).await?;
    store.drain(q).await?;
    let empty = measure(addr, "/metrics", a.requests).await?;
    let t = Instant::now();
    let flat = a.jobs / 2;
    let payload = |i: usize| format!("{{\"n\":{i}}}");
    for from in (0..flat).step_by(1000) {
        let batch: Vec<NewJob> = (from..(from + 1000).min(flat))
            .map(|i| NewJob::new(payload(i)))
            .collect();
        store.enqueue(q, &batch).await?;
    }
    let per_group = (a.jobs - flat) / a.groups.max(1);
    if per_group > 0 {
        for g in 0..a.groups {
            let group = GroupName::new(format!("g{g}"))?;
            let batch: Vec<NewJob> = (0..per_group).map(|i| NewJob::new(payload(i))).collect();
            store.genqueue(q, &group, &batch).await?;
        }
    }
    let filled = t.elapsed().as_secs_f64();
    let waiting = store.counts(q).await?.pending;
    let first = store.list(q, echomq::JobState::Pending, None, 1).await?;
    let id = first.ids.first().map(|i| i.to_string()).unwrap_or_default();
    // pages deep in the flat set and deep in the lanes
    let deep_flat = cursor_at(store, q, waiting / 4).await?;
    let deep_lanes = cursor_at(store, q, waiting * 3 / 4).await?;
    let pages = [
        "/".to_string(),
        format!("/queues/{q}"),
        format!("/queues/{q}?state=pending&cursor={deep_flat}"),
        format!("/queues/{q}?state=pending&cursor={deep_lanes}"),
        format!("/queues/{q}/jobs/{id}"),
        format!("/queues/{q}/schedules"),
        format!("/queues/{q}/groups"),
        "/workers".to_string(),
        "/metrics".to_string(),
    ];
    for page in &pages {
        let m = measure(addr, page, a.requests).await?;
        let mut line = json!({
            "page": page, "waiting": waiting, "groups": a.groups, "requests": a.requests,
            "fill_secs": filled, "p50_ms": m.p50, "p99_ms": m.p99, "max_ms": m.max,
        });
        if page == "/metrics" {
            line["empty_p50_ms"] = json!(empty.p50);
            line["vs_empty"] = json!(m.p50 / empty.p50);
        }
        emit("f_dashboard", line);
    }
    // the scrape once more with the queue emptied, in the same process and store state as the full
    // queue's (the first empty scrape ran before the million jobs warmed them): the fairer ratio
    let full = measure(addr, "/metrics", a.requests).await?;
    store.drain(q).await?;
    let emptied = measure(addr, "/metrics", a.requests).await?;
    emit(
        "f_dashboard",
        json!({
            "page": "/metrics (full, then emptied)", "waiting": waiting, "groups": a.groups,
            "requests": a.requests, "p50_ms": full.p50, "p99_ms": full.p99,
            "emptied_p50_ms": emptied.p50, "vs_emptied": full.p50 / emptied.p50,
        }),
    );
    Ok(())
}

struct Latency {
    p50: f64,
    p99: f64,
    max: f64,
}

/// `n` GETs of `path` in turn; each must answer 200.
async fn measure(addr: std::net::SocketAddr, path: &str, n: usize) -> anyhow::Result<Latency> {
    let mut ms = Vec::with_capacity(n);
    for _ in 0..n.max(1) {
        let t = Instant::now();
        let status = get(addr, path).await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
        anyhow::ensure!(status == 200, "GET {path} answered {status}");
    }
    ms.sort_by(f64::total_cmp);
    let at = |p: f64| ms[((ms.len() as f64 * p).ceil() as usize).clamp(1, ms.len()) - 1];
    Ok(Latency {
        p50: at(0.5),
        p99: at(0.99),
        max: at(1.0),
    })
}

/// One GET on a connection of its own, read to its end; its status.
async fn get(addr: std::net::SocketAddr, path: &str) -> anyhow::Result<u16> {
    let mut s = tokio::time::timeout(Duration::from_secs(30), tokio::net::TcpStream::connect(addr)).await??;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut reply = Vec::new();
    tokio::time::timeout(Duration::from_secs(60), s.read_to_end(&mut reply)).await??;
    let head = String::from_utf8_lossy(&reply[..reply.len().min(32)]).into_owned();
    head.split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("GET {path}: no status in {head:?}"))
}

/// The cursor of the page that starts after the first `n` waiting jobs (about: in steps of 10,000),
/// query-encoded.
async fn cursor_at(store: &Arc<dyn Store>, q: &QueueName, n: u64) -> anyhow::Result<String> {
    let (mut passed, mut cursor) = (0u64, None::<String>);
    while passed < n {
        let page = store
            .list(q, echomq::JobState::Pending, cursor.as_deref(), 10_000)
            .await?;
        passed += page.ids.len() as u64;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    Ok(cursor.map(|c| crate::dashboard::query_value(&c)).unwrap_or_default())
}
