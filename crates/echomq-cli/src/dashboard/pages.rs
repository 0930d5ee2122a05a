//! The pages: the overview of every queue, a queue's jobs in one state, one job, a queue's
//! schedules and groups, the consumers alive now. Each has its own URL, so a link can be shared; an unknown queue or job is a 404.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Json;
use echomq::store::Counts;
use echomq::{JobId, JobState, QueueName};
use futures::{StreamExt, TryStreamExt};
use maud::html;
use serde::Deserialize;

use super::layout::{self, action, addressable, bytes, link, page, query_value, seg, time};
use super::App;

/// Jobs a queue page lists at once.
pub(crate) const PAGE: u32 = 50;

/// The rows of a queue page read at once.
const ROWS_IN_FLIGHT: usize = 16;

/// The states a queue page has a tab for, in tab order.
const STATES: [JobState; 6] = [
    JobState::Pending,
    JobState::Scheduled,
    JobState::Active,
    JobState::Dead,
    JobState::Completed,
    JobState::Cancelled,
];

/// A page's outcome: the page, or an error page (a failed store call is a 502 naming it).
pub(crate) type PageResult = Result<Response, Response>;

pub(crate) fn store_failed(e: impl std::fmt::Display) -> Response {
    layout::error_page(StatusCode::BAD_GATEWAY, &format!("the store failed: {e}"))
}

/// The queue a path names, if it is valid and the store knows it.
pub(crate) async fn known_queue(app: &App, name: &str) -> Result<QueueName, Response> {
    let unknown = || layout::error_page(StatusCode::NOT_FOUND, &format!("no queue {name}"));
    let queue = QueueName::new(name).map_err(|_| unknown())?;
    let queues = app.store.queues().await.map_err(store_failed)?;
    if queues.contains(&queue) {
        Ok(queue)
    } else {
        Err(unknown())
    }
}

/// A state's count, as the overview and the tabs show it.
fn count_of(c: &Counts, state: JobState) -> u64 {
    match state {
        JobState::Pending => c.pending,
        JobState::Scheduled => c.scheduled,
        JobState::Active => c.active,
        JobState::Dead => c.dead,
        JobState::Completed => c.completed,
        JobState::Cancelled => c.cancelled,
        _ => 0,
    }
}

/// `GET /`: every queue with its counts per state, the age of its oldest pending job, whether it
/// is paused, and its jobs completed and dead-lettered per minute over the last hour as a chart;
/// the counts live.
pub(crate) async fn overview(State(app): State<Arc<App>>) -> PageResult {
    let rows = counts_of_every_queue(&app).await?;
    let names: Vec<QueueName> = rows.iter().map(|(q, _)| q.clone()).collect();
    let charts = crate::stats::each_queue(&names, |q| {
        let store = app.store.clone();
        async move { store.history(&q, 60).await }
    })
    .await
    .map_err(store_failed)?;
    let body = html! {
        @if rows.is_empty() {
            p { "No queues yet: enqueue a job (" code { "emq enqueue QUEUE PAYLOAD" } ") and it shows here." }
        } @else {
            table data-poll-ms=(poll_ms(rows.len())) {
                thead { tr {
                    th { "queue" }
                    @for s in STATES { th { (s.as_str()) } }
                    th title="how long the oldest pending job has waited" { "oldest pending" }
                    th { "failed" } th { "retried" } th { "" } th { "last hour" }
                } }
                tbody {
                    @for ((q, c), h) in rows.iter().zip(&charts) {
                        tr {
                            td { (link(&format!("/queues/{}", seg(q.as_str())), q.as_str())) }
                            @for s in STATES {
                                td.n data-q=(q.as_str()) data-k=(s.as_str()) { (count_of(c, s)) }
                            }
                            td.n data-q=(q.as_str()) data-k="oldest" { (crate::stats::age_text(c.oldest_pending_age)) }
                            td.n data-q=(q.as_str()) data-k="failed" { (c.failed) }
                            td.n data-q=(q.as_str()) data-k="retried" { (c.retried) }
                            td { @if c.paused { span.paused { "paused" } } }
                            td { (chart(q, h)) }
                        }
                    }
                }
            }
            p { small { "Completed, cancelled, failed and retried count every such event since the queue began." } }
        }
    };
    Ok(page(&app, "Queues", body, true).into_response())
}

/// How often the open overview of `queues` queues polls its counts, in ms: every 2 s, or less
/// often when its queues are many, so that an open page costs the store at most 2 round trips a
/// second. A poll is one round trip for the list of queues and one per `QUEUES_IN_FLIGHT` queues'
/// counts, and as many again for their last hour when it asks for that too.
pub(crate) fn poll_ms(queues: usize) -> u64 {
    let batches = queues.div_ceil(crate::stats::QUEUES_IN_FLIGHT) as u64;
    (500 * (1 + 2 * batches)).max(2000)
}

/// A queue's last hour as bars, a minute each: completed up from the middle line, dead-lettered
/// down from it, each scaled to the busiest minute of its kind. The live script redraws it the same
/// way from `/api/overview?history=1`.
fn chart(q: &QueueName, h: &echomq::store::History) -> maud::Markup {
    let (w, mid) = (3usize, 16.0f64);
    let top = |v: &[u64]| v.iter().copied().max().unwrap_or(0).max(1) as f64;
    let (done_max, failed_max) = (top(&h.completed), top(&h.failed));
    let total = |v: &[u64]| v.iter().sum::<u64>();
    let title = format!(
        "last hour: {} completed, {} dead-lettered (a bar a minute)",
        total(&h.completed),
        total(&h.failed)
    );
    let width = w * h.completed.len();
    html! {
        svg.chart data-q=(q.as_str()) width=(width) height="32" viewBox=(format!("0 0 {width} 32")) role="img" aria-label=(title) {
            title { (title) }
            line x1="0" y1="16" x2=(width) y2="16" stroke="#ccd" stroke-width="0.5" {}
            @for (i, n) in h.completed.iter().enumerate() {
                @if *n > 0 {
                    @let bar = (*n as f64 / done_max * (mid - 1.0)).max(1.0);
                    rect x=(i * w) y=(format!("{:.1}", mid - bar)) width=(w - 1) height=(format!("{bar:.1}")) fill="#3a8a3a" {}
                }
            }
            @for (i, n) in h.failed.iter().enumerate() {
                @if *n > 0 {
                    @let bar = (*n as f64 / failed_max * (mid - 1.0)).max(1.0);
                    rect x=(i * w) y="16" width=(w - 1) height=(format!("{bar:.1}")) fill="#b33" {}
                }
            }
        }
    }
}

async fn counts_of_every_queue(app: &App) -> Result<Vec<(QueueName, Counts)>, Response> {
    crate::stats::counts_of(&*app.store, None).await.map_err(store_failed)
}

/// The overview's JSON query: `history=1` adds each queue's last hour.
#[derive(Deserialize)]
pub(crate) struct OverviewQuery {
    history: Option<String>,
}

/// `GET /api/overview[?history=1]`: the overview's counts as JSON, for its live refresh (the
/// counts every [`poll_ms`], the last hour at most every 10 s and at least every minute: a minute
/// is its finest grain).
pub(crate) async fn overview_json(State(app): State<Arc<App>>, Query(o): Query<OverviewQuery>) -> PageResult {
    let rows = counts_of_every_queue(&app).await?;
    let names: Vec<QueueName> = rows.iter().map(|(q, _)| q.clone()).collect();
    let mut histories = match o.history.as_deref() {
        Some("1") => crate::stats::each_queue(&names, |q| {
            let store = app.store.clone();
            async move { store.history(&q, 60).await }
        })
        .await
        .map_err(store_failed)?,
        _ => Vec::new(),
    }
    .into_iter();
    let mut queues = Vec::with_capacity(rows.len());
    for (q, c) in &rows {
        let mut counts = serde_json::Map::new();
        for s in STATES {
            counts.insert(s.as_str().into(), count_of(c, s).into());
        }
        counts.insert("oldest".into(), crate::stats::age_text(c.oldest_pending_age).into());
        counts.insert("failed".into(), c.failed.into());
        counts.insert("retried".into(), c.retried.into());
        let mut line = serde_json::json!({ "name": q.as_str(), "paused": c.paused, "counts": counts });
        if let Some(h) = histories.next() {
            line["history"] = serde_json::json!({ "completed": h.completed, "failed": h.failed });
        }
        queues.push(line);
    }
    Ok(Json(serde_json::json!({ "queues": queues })).into_response())
}

/// `GET /metrics`: every queue's counts as Prometheus text (one `counts` per queue a scrape).
pub(crate) async fn metrics(State(app): State<Arc<App>>) -> PageResult {
    let text = crate::prometheus::store_metrics(&*app.store, None)
        .await
        .map_err(store_failed)?;
    Ok(crate::prometheus::text(text))
}

/// A queue page's query: the tab, where the page starts, a job to find, a message to show.
#[derive(Deserialize)]
pub(crate) struct QueueQuery {
    state: Option<String>,
    cursor: Option<String>,
    find: Option<String>,
    msg: Option<String>,
}

/// `GET /queues/QUEUE?state=…&cursor=…`: the queue's counts, its flat ready jobs by kind (those of
/// a kind no live consumer runs marked, and named in a warning), a tab per state, a page of its
/// jobs in that state, and the queue's actions.
pub(crate) async fn queue(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(q): Query<QueueQuery>,
) -> PageResult {
    let queue = known_queue(&app, &name).await?;
    if let Some(find) = q.find.as_deref().map(str::trim).filter(|f| !f.is_empty()) {
        // only a valid id reaches the Location header
        let id = JobId::parse(find)
            .map_err(|_| layout::error_page(StatusCode::NOT_FOUND, &format!("no job {find} in queue {name}")))?;
        return Ok(Redirect::to(&format!("/queues/{}/jobs/{}", seg(queue.as_str()), seg(id.as_str()))).into_response());
    }
    let state = match q.state.as_deref() {
        None => JobState::Pending,
        Some(s) => JobState::parse(s)
            .filter(|s| STATES.contains(s))
            .ok_or_else(|| layout::error_page(StatusCode::BAD_REQUEST, &format!("no state {s}")))?,
    };
    let cursor = q.cursor.as_deref().filter(|c| !c.is_empty());
    let counts = app.store.counts(&queue).await.map_err(store_failed)?;
    let live = app.store.consumers(&queue).await.map_err(store_failed)?;
    let orphans = echomq::registry::kinds_without_consumer(&counts.ready_by_kind, &live);
    let listed = app.store.list(&queue, state, cursor, PAGE).await.map_err(|e| match e {
        echomq::Error::InvalidOption { .. } => layout::error_page(StatusCode::BAD_REQUEST, &e.to_string()),
        e => store_failed(e),
    })?;
    // the page's rows read a few at a time, in the list's order (a row gone meanwhile is left out)
    let rows: Vec<echomq::JobRow> = futures::stream::iter(listed.ids)
        .map(|id| {
            let (store, queue) = (app.store.clone(), queue.clone());
            async move { store.get(&queue, &id).await }
        })
        .buffered(ROWS_IN_FLIGHT)
        .try_collect::<Vec<_>>()
        .await
        .map_err(store_failed)?
        .into_iter()
        .flatten()
        .collect();
    let base = format!("/queues/{}", seg(queue.as_str()));
    let body = html! {
        @if let Some(m) = &q.msg { div.msg { (m) } }
        p {
            @if counts.paused { span.paused { "paused" } " · " }
            a href=(format!("{base}/schedules")) { "schedules" }
            " · "
            a href=(format!("{base}/groups")) { "groups" }
        }
        div.actions {
            @if counts.paused { (action(&app, &format!("{base}/resume"), "Resume", false, None)) }
            @else { (action(&app, &format!("{base}/pause"), "Pause", false, None)) }
            (action(&app, &format!("{base}/retry-dead"), "Retry all dead", false, None))
            (action(&app, &format!("{base}/promote-scheduled"), "Promote all scheduled", false, None))
            (action(&app, &format!("{base}/drain"), "Drain", true, None))
            (action(&app, &format!("{base}/obliterate"), "Obliterate", true, Some(queue.as_str())))
        }
        @if !counts.ready_by_kind.is_empty() {
            p.kinds {
                "ready by kind: "
                @for (i, (kind, n)) in counts.ready_by_kind.iter().enumerate() {
                    @if i > 0 { " · " }
                    @let orphan = orphans.iter().any(|(k, _)| k == kind);
                    span.orphan[orphan] data-kind=(kind.as_deref().unwrap_or("")) {
                        (crate::stats::kind_text(kind.as_deref())) " " (n)
                        @if orphan { " (no live consumer)" }
                    }
                }
            }
        }
        @if !orphans.is_empty() {
            div.msg.warn {
                "Kinds with no live consumer: "
                (orphans.iter().map(|(k, _)| crate::stats::kind_text(k.as_deref())).collect::<Vec<_>>().join(", "))
                ". Their jobs wait for a worker that runs them (a deploy under way, or a kind misspelled on one side)."
            }
        }
        form method="get" action=(base) {
            input type="text" name="find" placeholder="job id";
            button type="submit" { "Find" }
        }
        nav.tabs {
            @for s in STATES {
                a.on[s == state] href=(format!("{base}?state={}", s.as_str())) {
                    (s.as_str()) " (" (count_of(&counts, s)) ")"
                }
            }
        }
        table {
            thead { tr { th { "id" } th { "attempts" } th { "group" } th { "kind" } th { "priority" } th { "time" } th { "last error" } } }
            tbody {
                @for row in &rows {
                    tr {
                        td { (link(&format!("{base}/jobs/{}", seg(row.id.as_str())), row.id.as_str())) }
                        td.n { (row.attempts) }
                        td { (row.group.as_ref().map(|g| g.as_str()).unwrap_or("")) }
                        td { (row.kind.as_deref().unwrap_or("")) }
                        td.n { (row.priority) }
                        td { (when(row)) }
                        td { (row.last_error.as_deref().unwrap_or("")) }
                    }
                }
            }
        }
        @if rows.is_empty() { p { "No " (state.as_str()) " jobs." } }
        p {
            @if cursor.is_some() {
                a href=(format!("{base}?state={}", state.as_str())) { "← first page" }
                " "
            }
            @if let Some(next) = &listed.next {
                a href=(format!("{base}?state={}&cursor={}", state.as_str(), query_value(next))) { "next →" }
            }
        }
    };
    Ok(page(&app, &format!("Queue {queue}"), body, false).into_response())
}

/// The time a row's state is about: due, lease deadline, death, finish.
fn when(row: &echomq::JobRow) -> String {
    match row.state {
        JobState::Scheduled => row.run_at.map(|t| format!("due {}", time(t))),
        JobState::Active => row.score.map(|t| format!("lease until {}", time(t))),
        JobState::Dead => row.score.map(|t| format!("died {}", time(t))),
        JobState::Completed | JobState::Cancelled => row.finished_at.map(|t| format!("finished {}", time(t))),
        _ => None,
    }
    .unwrap_or_default()
}

/// A job page's query: a message to show.
#[derive(Deserialize)]
pub(crate) struct JobQuery {
    msg: Option<String>,
}

/// `GET /queues/QUEUE/jobs/ID`: every field of the job, and the actions its state allows.
pub(crate) async fn job(
    State(app): State<Arc<App>>,
    Path((name, id)): Path<(String, String)>,
    Query(q): Query<JobQuery>,
) -> PageResult {
    let queue = known_queue(&app, &name).await?;
    let missing = || layout::error_page(StatusCode::NOT_FOUND, &format!("no job {id} in queue {name}"));
    let job_id = JobId::parse(&id).map_err(|_| missing())?;
    let row = app
        .store
        .get(&queue, &job_id)
        .await
        .map_err(store_failed)?
        .ok_or_else(missing)?;
    let base = format!("/queues/{}/jobs/{}", seg(queue.as_str()), seg(row.id.as_str()));
    let opt = |v: Option<u64>| v.map(time).unwrap_or_default();
    let body = html! {
        @if let Some(m) = &q.msg { div.msg { (m) } }
        p { a href=(format!("/queues/{}?state={}", seg(queue.as_str()), row.state.as_str())) { "← queue " (queue.as_str()) } }
        div.actions {
            @if row.state == JobState::Dead { (action(&app, &format!("{base}/retry"), "Retry", false, None)) }
            @if row.state == JobState::Scheduled { (action(&app, &format!("{base}/promote"), "Promote", false, None)) }
            @if matches!(row.state, JobState::Pending | JobState::Scheduled | JobState::Active) {
                (action(&app, &format!("{base}/cancel"), "Cancel", true, None))
            }
            @if row.state != JobState::Active { (action(&app, &format!("{base}/remove"), "Remove", true, None)) }
        }
        dl {
            dt { "id" } dd { (row.id.as_str()) }
            dt { "state" } dd { (row.state.as_str()) }
            dt { "attempts" } dd { (row.attempts) @if let Some(m) = row.max_attempts { " of " (m) } }
            @if row.free > 0 { dt { "claims without an attempt" } dd { (row.free) } }
            dt { "group" } dd { (row.group.as_ref().map(|g| g.as_str()).unwrap_or("—")) }
            dt { "kind" } dd { (row.kind.as_deref().unwrap_or("—")) }
            dt { "priority" } dd { (row.priority) }
            @if let Some(r) = &row.retry { dt { "retry policy" } dd { (r) } }
            @if row.state == JobState::Scheduled { dt { "due" } dd { (opt(row.run_at)) } }
            @if row.state == JobState::Active { dt { "lease deadline" } dd { (opt(row.score)) } }
            @if row.state == JobState::Dead { dt { "died" } dd { (opt(row.score)) } }
            @if row.finished_at.is_some() { dt { "finished" } dd { (opt(row.finished_at)) } }
            @if row.stalled > 0 { dt { "stalled" } dd { (row.stalled) } }
            @if let Some(c) = &row.cancel { dt { "cancel requested" } dd { (if c.is_empty() { "(no reason)" } else { c }) } }
            @if let Some(e) = &row.last_error { dt { "last error" } dd { pre { (e) } } }
        }
        h2 { "payload" }
        pre.payload { (bytes(&row.payload)) }
        @if let Some(out) = &row.output { h2 { "output" } pre.output { (bytes(out)) } }
        @if let Some(n) = row.output_dropped { p { "Its output (" (n) " bytes) was over the queue's cap and not kept." } }
    };
    Ok(page(&app, &format!("Job {}", row.id), body, false).into_response())
}

/// `GET /queues/QUEUE/schedules`: each schedule's timing, zone, next and last fire, counts, and
/// its actions.
pub(crate) async fn schedules(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(q): Query<JobQuery>,
) -> PageResult {
    let queue = known_queue(&app, &name).await?;
    let list = app.store.list_schedules(&queue).await.map_err(store_failed)?;
    let base = format!("/queues/{}/schedules", seg(queue.as_str()));
    let fire = |ms: Option<i64>, zone| {
        ms.map(|m| echomq::schedule::local_text(m, zone))
            .unwrap_or_else(|| "—".into())
    };
    let body = html! {
        @if let Some(m) = &q.msg { div.msg { (m) } }
        p { a href=(format!("/queues/{}", seg(queue.as_str()))) { "← queue " (queue.as_str()) } }
        @if list.is_empty() { p { "No schedules: " code { "emq schedule add QUEUE NAME --every 1m" } } }
        @else {
            table {
                thead { tr { th { "name" } th { "timing" } th { "next fire" } th { "last fire" } th { "fired" } th { "missed" } th { "skipped" } th { "" } } }
                tbody {
                    @for s in &list {
                        @let zone = s.schedule.timing.zone();
                        @let path = format!("{base}/{}", seg(s.schedule.name.as_str()));
                        tr {
                            td { (s.schedule.name.as_str()) @if s.paused { " " span.paused { "paused" } } }
                            td { (s.schedule.timing.to_string()) }
                            td { (fire(s.next_slot, zone)) }
                            td { (fire(s.last_fire, zone)) }
                            td.n { (s.fired) } td.n { (s.missed) } td.n { (s.skipped) }
                            td.actions {
                                // a name of dots only cannot be a path segment: no action
                                @if addressable(s.schedule.name.as_str()) {
                                    @if s.paused { (action(&app, &format!("{path}/resume"), "Resume", false, None)) }
                                    @else { (action(&app, &format!("{path}/pause"), "Pause", false, None)) }
                                    (action(&app, &format!("{path}/trigger"), "Trigger", false, None))
                                    (action(&app, &format!("{path}/remove"), "Remove", true, None))
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(page(&app, &format!("Schedules of {queue}"), body, false).into_response())
}

/// A groups page's query: where the page starts, a message to show.
#[derive(Deserialize)]
pub(crate) struct GroupsQuery {
    cursor: Option<String>,
    msg: Option<String>,
}

/// `GET /queues/QUEUE/groups?cursor=…`: a page of the queue's groups — waiting and running jobs,
/// concurrency limit (editable in place), rate limit and its state.
pub(crate) async fn groups(
    State(app): State<Arc<App>>,
    Path(name): Path<String>,
    Query(q): Query<GroupsQuery>,
) -> PageResult {
    let queue = known_queue(&app, &name).await?;
    let listed = app
        .store
        .groups(&queue, q.cursor.as_deref())
        .await
        .map_err(store_failed)?;
    let rates = app.store.rate_limits(&queue).await.map_err(store_failed)?;
    let base = format!("/queues/{}/groups", seg(queue.as_str()));
    let rate_of = |g: &echomq::GroupName| -> String {
        match rates.groups.iter().find(|r| &r.group == g) {
            Some(r) if r.state.wait.is_zero() => format!("{} (admits now)", r.state.limit),
            Some(r) => format!("{} (next in {} ms)", r.state.limit, r.state.wait.as_millis()),
            None => rates
                .group_default
                .as_ref()
                .map_or_else(|| "—".to_string(), |d| format!("{d} (default)")),
        }
    };
    let body = html! {
        @if let Some(m) = &q.msg { div.msg { (m) } }
        p {
            a href=(format!("/queues/{}", seg(queue.as_str()))) { "← queue " (queue.as_str()) }
            " · default limit " (listed.default_limit)
            @if rates.throttled > 0 { " · " (rates.throttled) " held back by their rate limit" }
        }
        @if listed.groups.is_empty() { p { "No groups with waiting or running jobs or a limit of their own." } }
        @else {
            table {
                thead { tr { th { "group" } th { "waiting" } th { "running / limit" } th { "rate limit" } th { "" } } }
                tbody {
                    @for g in &listed.groups {
                        @let limit = g.limit.unwrap_or(listed.default_limit);
                        tr {
                            td { (g.group.as_str()) }
                            td.n { (g.waiting) }
                            td.n { (g.active) " / " (limit) @if g.limit.is_none() { " (default)" } }
                            td { (rate_of(&g.group)) }
                            td.actions {
                                @if !app.read_only && addressable(g.group.as_str()) {
                                    form method="post" action=(format!("{base}/{}/limit", seg(g.group.as_str()))) {
                                        input type="hidden" name="csrf" value=(app.csrf);
                                        input type="number" name="limit" min="1" value=(limit) required;
                                        button type="submit" { "Set limit" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        @if let Some(next) = &listed.next {
            p { a href=(format!("{base}?cursor={}", query_value(next))) { "next →" } }
        }
    };
    Ok(page(&app, &format!("Groups of {queue}"), body, false).into_response())
}

/// `GET /workers`: the consumers alive now, of every queue — host, pid, queue, the kinds it runs,
/// concurrency, jobs in hand, started, last beat — from the registry each consumer writes once a
/// beat.
pub(crate) async fn workers(State(app): State<Arc<App>>) -> PageResult {
    let queues = app.store.queues().await.map_err(store_failed)?;
    let mut rows = Vec::new();
    for q in queues {
        for c in app.store.consumers(&q).await.map_err(store_failed)? {
            rows.push((q.clone(), c));
        }
    }
    let ms = |v: i64| time(u64::try_from(v).unwrap_or(0));
    let body = html! {
        @if rows.is_empty() {
            p { "No consumer is running: start one with " code { "emq work QUEUE --exec CMD" } " (or a "
                code { "Worker" } " of the library) and it shows here within a beat." }
        } @else {
            table {
                thead { tr {
                    th { "host" } th { "pid" } th { "queue" } th { "kinds" } th { "concurrency" } th { "in hand" }
                    th { "started" } th { "last beat" } th { "id" }
                } }
                tbody {
                    @for (q, c) in &rows {
                        tr {
                            td { (c.host) }
                            td.n { (c.pid) }
                            td { (link(&format!("/queues/{}", seg(q.as_str())), q.as_str())) }
                            td data-k="kinds" { (c.kinds.to_string()) }
                            td.n { (c.concurrency) }
                            td.n data-k="in_hand" { (c.in_hand) }
                            td { (ms(c.started_ms)) }
                            td { (ms(c.beat_ms)) }
                            td { code { (c.id) } }
                        }
                    }
                }
            }
            p { small { "A consumer writes its line once a beat; one that stops leaves at once, one that dies or is cut off once it has missed five beats." } }
        }
    };
    Ok(page(&app, "Workers", body, false).into_response())
}

/// Any other path.
pub(crate) async fn not_found() -> Response {
    layout::error_page(StatusCode::NOT_FOUND, "no such page")
}

#[cfg(test)]
mod tests {
    use super::poll_ms;

    /// An open overview costs the store at most 2 round trips a second, however many its queues:
    /// a poll's round trips (the list, then each batch's counts and last hour) over its period.
    #[test]
    fn the_overview_polls_less_often_as_its_queues_grow() {
        assert_eq!(poll_ms(0), 2000);
        assert_eq!(poll_ms(64), 2000);
        for queues in [1usize, 64, 65, 200, 3_000, 100_000] {
            let batches = queues.div_ceil(crate::stats::QUEUES_IN_FLIGHT) as f64;
            let per_second = (1.0 + 2.0 * batches) / (poll_ms(queues) as f64 / 1000.0);
            assert!(per_second <= 2.0, "{queues} queues: {per_second} round trips a second");
        }
        assert!(poll_ms(3_000) > poll_ms(200));
    }
}
