//! Prometheus text: the store's gauges and counters per queue, read at scrape time (one `counts`
//! and one `consumers` per queue), and for `emq work --metrics-bind` the worker's own histograms
//! beside them.
//!
//! | name | type | labels |
//! | --- | --- | --- |
//! | `emq_jobs` | gauge | `queue`, `state` (`pending`, `scheduled`, `active`, `dead`) |
//! | `emq_events_total` | counter | `queue`, `event` (`completed`, `cancelled`, `failed`, `retried`, `stalled`, `reaped`) |
//! | `emq_queue_paused` | gauge | `queue` (1 while paused) |
//! | `emq_oldest_pending_age_seconds` | gauge | `queue` (0 when no pending job is counted) |
//! | `emq_consumers` | gauge | `queue` (the consumers alive: the registry's entries) |
//! | `emq_ready_jobs_by_kind` | gauge | `queue`, `kind` (flat ready jobs; `kind=""` for raw jobs) |
//! | `emq_ready_jobs_no_consumer` | gauge | `queue`, `kind` (those of a kind no live consumer runs) |
//! | `emq_job_duration_seconds` | histogram | `queue`, `outcome` (`emq work` only: see `echomq::telemetry`) |
//! | `emq_job_wait_seconds` | histogram | `queue`, `outcome` (`emq work` only: see `echomq::telemetry`) |

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;

use echomq::store::Counts;
use echomq::{QueueName, Store};

/// The buckets of the run-time histogram, in seconds.
const DURATION_BUCKETS: [f64; 14] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0,
];

/// The buckets of the wait histogram, in seconds: a backlog's waits run to hours.
const WAIT_BUCKETS: [f64; 15] = [
    0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 14400.0,
];

/// The store's metrics of `queues` as Prometheus text (every queue the store knows when `None`).
pub async fn store_metrics(store: &dyn Store, queues: Option<&[QueueName]>) -> echomq::Result<String> {
    let counts = crate::stats::counts_of(store, queues).await?;
    let names: Vec<QueueName> = counts.iter().map(|(q, _)| q.clone()).collect();
    let alive = crate::stats::each_queue(&names, |q| async move { store.consumers(&q).await }).await?;
    Ok(render(&counts, &alive))
}

fn render(counts: &[(QueueName, Counts)], alive: &[Vec<echomq::registry::ConsumerEntry>]) -> String {
    let mut out = String::new();
    let family = |out: &mut String, name: &str, kind: &str, help: &str| {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    };
    family(&mut out, "emq_jobs", "gauge", "Jobs in each state, per queue.");
    for (q, c) in counts {
        for (state, n) in [
            ("pending", c.pending),
            ("scheduled", c.scheduled),
            ("active", c.active),
            ("dead", c.dead),
        ] {
            let _ = writeln!(out, "emq_jobs{{queue=\"{q}\",state=\"{state}\"}} {n}");
        }
    }
    family(
        &mut out,
        "emq_events_total",
        "counter",
        "Events counted by the store since the queue began, per queue.",
    );
    for (q, c) in counts {
        let events = [
            ("completed", c.completed),
            ("cancelled", c.cancelled),
            ("failed", c.failed),
            ("retried", c.retried),
            ("stalled", c.stalled),
            ("reaped", c.reaped),
        ];
        for (event, n) in events {
            let _ = writeln!(out, "emq_events_total{{queue=\"{q}\",event=\"{event}\"}} {n}");
        }
    }
    family(&mut out, "emq_queue_paused", "gauge", "1 while the queue is paused.");
    for (q, c) in counts {
        let _ = writeln!(out, "emq_queue_paused{{queue=\"{q}\"}} {}", u8::from(c.paused));
    }
    family(
        &mut out,
        "emq_oldest_pending_age_seconds",
        "gauge",
        "How long the oldest pending job has waited ready, to within a second, per queue (0 when none is counted).",
    );
    for (q, c) in counts {
        let age = c.oldest_pending_age.unwrap_or_default().as_secs_f64();
        let _ = writeln!(out, "emq_oldest_pending_age_seconds{{queue=\"{q}\"}} {age}");
    }
    family(
        &mut out,
        "emq_consumers",
        "gauge",
        "Consumers alive, per queue (each writes its entry once a beat).",
    );
    for ((q, _), live) in counts.iter().zip(alive) {
        let _ = writeln!(out, "emq_consumers{{queue=\"{q}\"}} {}", live.len());
    }
    family(
        &mut out,
        "emq_ready_jobs_by_kind",
        "gauge",
        "Flat ready jobs of each kind, per queue (kind=\"\" for raw jobs).",
    );
    for (q, c) in counts {
        for (kind, n) in &c.ready_by_kind {
            let kind = label(kind.as_deref().unwrap_or(""));
            let _ = writeln!(out, "emq_ready_jobs_by_kind{{queue=\"{q}\",kind=\"{kind}\"}} {n}");
        }
    }
    family(
        &mut out,
        "emq_ready_jobs_no_consumer",
        "gauge",
        "Flat ready jobs of a kind no live consumer runs, per queue: a rolling deploy, or a misspelled kind.",
    );
    for ((q, c), live) in counts.iter().zip(alive) {
        for (kind, n) in echomq::registry::kinds_without_consumer(&c.ready_by_kind, live) {
            let kind = label(kind.as_deref().unwrap_or(""));
            let _ = writeln!(out, "emq_ready_jobs_no_consumer{{queue=\"{q}\",kind=\"{kind}\"}} {n}");
        }
    }
    out
}

/// A label value escaped as the text format wants it (a kind is printable text, so only `\` and
/// `"` need it).
fn label(v: &str) -> String {
    v.replace('\\', "\\\\").replace('"', "\\\"")
}

/// `emq work --metrics-bind`: installs the Prometheus recorder (before any consumer starts, so
/// theirs are the histograms it exports) and serves `GET /metrics` on `bind` — the worker's
/// histograms, then the store's metrics of its queues. Returns the address it listens on.
#[allow(clippy::print_stderr)] // where it serves, on stderr (a test reads the port from it)
pub async fn serve_worker(
    bind: SocketAddr,
    store: Arc<dyn Store>,
    queues: Vec<QueueName>,
) -> anyhow::Result<SocketAddr> {
    let handle = metrics_exporter_prometheus::PrometheusBuilder::new()
        .set_buckets(&DURATION_BUCKETS)?
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(echomq::telemetry::JOB_WAIT.to_string()),
            &WAIT_BUCKETS,
        )?
        .install_recorder()?;
    // the recorder keeps each sample until its histogram is folded: fold them every few
    // seconds, scraped or not, so an unscraped worker's memory stays flat
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {bind} for metrics: {e}"))?;
    let addr = listener.local_addr()?;
    let route = axum::routing::get(move || {
        let (handle, store, queues) = (handle.clone(), store.clone(), queues.clone());
        async move {
            match store_metrics(&*store, Some(&queues)).await {
                Ok(gauges) => text(format!("{}{gauges}", handle.render())),
                Err(e) => (axum::http::StatusCode::BAD_GATEWAY, format!("the store failed: {e}\n")).into_response(),
            }
        }
    });
    let app = axum::Router::new().route("/metrics", route);
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::warn!(error = %e, "the metrics endpoint stopped");
        }
    });
    eprintln!("emq work: metrics on http://{addr}/metrics");
    Ok(addr)
}

use axum::response::IntoResponse as _;

/// A Prometheus text reply.
pub fn text(body: String) -> axum::response::Response {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}
