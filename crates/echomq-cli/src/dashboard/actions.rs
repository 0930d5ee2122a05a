//! The actions: each a POST to the page it acts on plus a verb, carrying the page's CSRF token;
//! each answers with a redirect back to that page and a line saying what was done.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Redirect, Response};
use axum::Form;
use echomq::store::{CancelOutcome, Obliterated, PromotedJob, Redriven, Removed, SettleOptions};
use echomq::{JobId, JobState, QueueName};
use serde::Deserialize;

use super::layout::{self, seg};
use super::pages::{known_queue, store_failed, PageResult};
use super::{guard, App};

/// The attempts a retried dead job gets beyond those it used (as `emq retry`).
const RETRY_EXTRA: u32 = 3;

/// Scheduled jobs "promote all" makes ready in one action, at most.
const PROMOTE_ALL_MAX: u64 = 100_000;

/// Every action's form: the CSRF token, for obliterate the queue's name typed again, for a
/// group's limit the new limit.
#[derive(Deserialize)]
pub(crate) struct ActionForm {
    csrf: Option<String>,
    confirm: Option<String>,
    limit: Option<String>,
}

/// The refusals every action shares: a read-only dashboard, a form without this process's token.
fn refused(app: &App, form: &ActionForm) -> Option<Response> {
    if app.read_only {
        return Some(layout::error_page(StatusCode::FORBIDDEN, "this dashboard is read-only"));
    }
    if !guard::csrf_ok(app, form.csrf.as_deref()) {
        return Some(layout::error_page(
            StatusCode::FORBIDDEN,
            "the form's CSRF token is missing or stale: reload the page and try again",
        ));
    }
    None
}

/// Back to `to` with `msg` shown on it.
fn back(to: &str, msg: &str) -> Response {
    let sep = if to.contains('?') { '&' } else { '?' };
    Redirect::to(&format!("{to}{sep}msg={}", layout::query_value(msg))).into_response()
}

/// What every action checks first: the refusals above, then the queue the path names.
async fn admitted(app: &App, form: &ActionForm, name: &str) -> Result<QueueName, Response> {
    if let Some(r) = refused(app, form) {
        return Err(r);
    }
    known_queue(app, name).await
}

/// `POST /queues/QUEUE/{pause,resume,drain,obliterate,retry-dead,promote-scheduled}`.
pub(crate) async fn queue(
    State(app): State<Arc<App>>,
    Path((name, verb)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> PageResult {
    let queue = admitted(&app, &form, &name).await?;
    let store = &app.store;
    let page = format!("/queues/{}", seg(queue.as_str()));
    let msg = match verb.as_str() {
        "pause" => {
            store.pause(&queue).await.map_err(store_failed)?;
            "paused: consumers claim nothing until it is resumed".to_string()
        }
        "resume" => {
            store.resume(&queue).await.map_err(store_failed)?;
            "resumed".to_string()
        }
        "drain" => {
            let n = store.drain(&queue).await.map_err(store_failed)?;
            format!("drained: {} dropped", crate::count(n, "ready or scheduled job"))
        }
        "obliterate" => {
            if form.confirm.as_deref().map(str::trim) != Some(queue.as_str()) {
                return Err(layout::error_page(
                    StatusCode::BAD_REQUEST,
                    &format!("type the queue's name, {queue}, to obliterate it"),
                ));
            }
            return match store.obliterate(&queue, false).await.map_err(store_failed)? {
                Obliterated::Done { removed } => Ok(back(
                    "/",
                    &format!("queue {queue} obliterated: {} deleted", crate::count(removed, "job")),
                )),
                Obliterated::Active { active } => Ok(back(
                    &page,
                    &format!(
                        "not obliterated: {} running; pause the queue and let them finish (or use emq obliterate --force)",
                        crate::count(active, "job is")
                    ),
                )),
                other => Ok(back(
                    &page,
                    &format!("the store answered {other:?}, which this build does not know"),
                )),
            };
        }
        "retry-dead" => {
            let n = store.redrive_all(&queue, RETRY_EXTRA).await.map_err(store_failed)?;
            format!("{} back to ready", crate::count(n, "dead job"))
        }
        "promote-scheduled" => {
            // every job of a page leaves `scheduled` (promoted here, or by a consumer's beat
            // meanwhile, or gone): each page is the set's head again
            let mut promoted = 0u64;
            while promoted < PROMOTE_ALL_MAX {
                let ids = store
                    .list(&queue, JobState::Scheduled, None, 1000)
                    .await
                    .map_err(store_failed)?
                    .ids;
                let mut moved = 0;
                for id in &ids {
                    if store.promote_job(&queue, id).await.map_err(store_failed)? == PromotedJob::Promoted {
                        moved += 1;
                    }
                }
                promoted += moved;
                if moved == 0 {
                    break;
                }
            }
            format!("{} made ready now", crate::count(promoted, "scheduled job"))
        }
        _ => return Err(layout::error_page(StatusCode::NOT_FOUND, &format!("no action {verb}"))),
    };
    Ok(back(&page, &msg))
}

/// `POST /queues/QUEUE/jobs/ID/{retry,promote,cancel,remove}`.
pub(crate) async fn job(
    State(app): State<Arc<App>>,
    Path((name, id, verb)): Path<(String, String, String)>,
    Form(form): Form<ActionForm>,
) -> PageResult {
    let queue = admitted(&app, &form, &name).await?;
    let missing = || layout::error_page(StatusCode::NOT_FOUND, &format!("no job {id} in queue {name}"));
    let job_id = JobId::parse(&id).map_err(|_| missing())?;
    let store = &app.store;
    let page = format!("/queues/{}/jobs/{}", seg(queue.as_str()), seg(job_id.as_str()));
    let msg = match verb.as_str() {
        "retry" => match store
            .redrive(&queue, &job_id, RETRY_EXTRA)
            .await
            .map_err(store_failed)?
        {
            Redriven::Redriven => "back to ready".to_string(),
            Redriven::NotDead => "not retried: the job is not dead".to_string(),
            Redriven::Gone => return Err(missing()),
            other => format!("the store answered {other:?}, which this build does not know"),
        },
        "promote" => match store.promote_job(&queue, &job_id).await.map_err(store_failed)? {
            PromotedJob::Promoted => "ready now".to_string(),
            PromotedJob::NotScheduled => "not promoted: the job is not scheduled".to_string(),
            PromotedJob::Gone => return Err(missing()),
            other => format!("the store answered {other:?}, which this build does not know"),
        },
        "cancel" => {
            let reason = Some("cancelled from the dashboard");
            match store
                .cancel(&queue, &job_id, reason, SettleOptions::default())
                .await
                .map_err(store_failed)?
            {
                CancelOutcome::Cancelled => "cancelled".to_string(),
                CancelOutcome::Requested => "cancel requested: the consumer running it is told to stop".to_string(),
                CancelOutcome::Finished => "not cancelled: the job had already finished".to_string(),
                CancelOutcome::Gone => return Err(missing()),
                other => format!("the store answered {other:?}, which this build does not know"),
            }
        }
        "remove" => match store.remove(&queue, &job_id, false).await.map_err(store_failed)? {
            Removed::Removed => {
                return Ok(back(
                    &format!("/queues/{}", seg(queue.as_str())),
                    &format!("job {job_id} removed"),
                ));
            }
            Removed::Active => "not removed: the job is running; cancel it first".to_string(),
            Removed::Gone => return Err(missing()),
            other => format!("the store answered {other:?}, which this build does not know"),
        },
        _ => return Err(layout::error_page(StatusCode::NOT_FOUND, &format!("no action {verb}"))),
    };
    Ok(back(&page, &msg))
}

/// `POST /queues/QUEUE/schedules/NAME/{pause,resume,trigger,remove}`.
pub(crate) async fn schedule(
    State(app): State<Arc<App>>,
    Path((name, schedule, verb)): Path<(String, String, String)>,
    Form(form): Form<ActionForm>,
) -> PageResult {
    let queue = admitted(&app, &form, &name).await?;
    let missing = || {
        layout::error_page(
            StatusCode::NOT_FOUND,
            &format!("no schedule {schedule} in queue {name}"),
        )
    };
    let s = echomq::schedule::ScheduleName::new(&schedule).map_err(|_| missing())?;
    let store = &app.store;
    let found = match verb.as_str() {
        "pause" => store.pause_schedule(&queue, &s).await.map_err(store_failed)?,
        "resume" => store.resume_schedule(&queue, &s).await.map_err(store_failed)?,
        "remove" => store.remove_schedule(&queue, &s).await.map_err(store_failed)?,
        "trigger" => store
            .trigger_schedule(&queue, &s)
            .await
            .map_err(store_failed)?
            .is_some(),
        _ => return Err(layout::error_page(StatusCode::NOT_FOUND, &format!("no action {verb}"))),
    };
    if !found {
        return Err(missing());
    }
    let page = format!("/queues/{}/schedules", seg(queue.as_str()));
    Ok(back(&page, &format!("schedule {s}: {verb} done")))
}

/// `POST /queues/QUEUE/groups/GROUP/limit` (form field `limit`, at least 1): the group's
/// concurrency limit, set in place.
pub(crate) async fn group_limit(
    State(app): State<Arc<App>>,
    Path((name, group)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> PageResult {
    let queue = admitted(&app, &form, &name).await?;
    let g = echomq::GroupName::new(&group)
        .map_err(|_| layout::error_page(StatusCode::NOT_FOUND, &format!("no group {group}")))?;
    let limit = form
        .limit
        .as_deref()
        .and_then(|l| l.trim().parse::<u32>().ok())
        .filter(|l| *l >= 1)
        .ok_or_else(|| layout::error_page(StatusCode::BAD_REQUEST, "a limit is a whole number, at least 1"))?;
    app.store
        .set_group_limit(&queue, &echomq::store::LimitTarget::Group(g.clone()), limit)
        .await
        .map_err(store_failed)?;
    let page = format!("/queues/{}/groups", seg(queue.as_str()));
    Ok(back(&page, &format!("group {g}: limit {limit}")))
}
