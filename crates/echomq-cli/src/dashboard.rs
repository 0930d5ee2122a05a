//! `emq dashboard`: a web dashboard over any store — every queue's counts, a queue's jobs by
//! state, one job's fields, the schedules, the groups, the consumers alive now — with the
//! operator's actions (pause, resume, drain, obliterate, retry, promote, cancel, remove), server-
//! rendered, every asset compiled in.
//!
//! Safe by default: it binds 127.0.0.1 unless told otherwise, and refuses a bind another machine
//! can reach without `--auth-token` or `--auth-user`/`--auth-password`; every action is a POST
//! carrying the page's CSRF token; `--read-only` hides and refuses every action; every value a job
//! carries is escaped. `GET /metrics` serves the store's gauges and counters as Prometheus text.

mod actions;
mod guard;
mod layout;
mod pages;

pub(crate) use layout::query_value;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::routing::{get, post};
use axum::Router;
use echomq::Store;

/// Serve the web dashboard.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The address to listen on. Anything but a loopback address needs --auth-token or
    /// --auth-user and --auth-password.
    #[arg(long, value_name = "ADDR:PORT", default_value = "127.0.0.1:7070")]
    pub bind: SocketAddr,
    /// A bearer token every request must carry (`Authorization: Bearer T`); a browser opens
    /// `/?token=T` once and keeps it in a cookie.
    #[arg(long, env = "EMQ_DASHBOARD_TOKEN", value_name = "T", hide_env_values = true)]
    pub auth_token: Option<String>,
    /// A user name for HTTP basic authentication (with --auth-password).
    #[arg(long, env = "EMQ_DASHBOARD_USER", value_name = "USER", requires = "auth_password")]
    pub auth_user: Option<String>,
    /// The password for --auth-user.
    #[arg(
        long,
        env = "EMQ_DASHBOARD_PASSWORD",
        value_name = "PASSWORD",
        requires = "auth_user",
        hide_env_values = true
    )]
    pub auth_password: Option<String>,
    /// Show everything, change nothing: no action is offered, and every POST is refused.
    #[arg(long)]
    pub read_only: bool,
}

/// What every handler shares.
pub(crate) struct App {
    pub(crate) store: Arc<dyn Store>,
    /// The CSRF token every form carries and every POST must return: random per process, so no
    /// page of another site can know it.
    pub(crate) csrf: String,
    pub(crate) read_only: bool,
    pub(crate) auth: guard::Auth,
}

/// Runs `emq dashboard` until interrupted.
#[allow(clippy::print_stderr)] // where it serves, on stderr (a test reads the port from it)
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let auth = guard::Auth::from_args(
        args.auth_token.as_deref(),
        args.auth_user.as_deref(),
        args.auth_password.as_deref(),
    )?;
    if !args.bind.ip().is_loopback() && !auth.is_set() {
        anyhow::bail!(
            "refusing to serve the dashboard on {} without authentication: another machine could \
             reach it; give --auth-token (or --auth-user and --auth-password), or bind a loopback \
             address such as 127.0.0.1",
            args.bind
        );
    }
    let store = crate::open(url).await?;
    let app = Arc::new(App {
        store,
        csrf: guard::random_token()?,
        read_only: args.read_only,
        auth,
    });
    let listener = tokio::net::TcpListener::bind(args.bind)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.bind))?;
    let addr = listener.local_addr()?;
    eprintln!(
        "emq dashboard: serving {} on http://{addr}/{}",
        echomq::store::redact_url(url),
        if args.read_only { " (read-only)" } else { "" }
    );
    axum::serve(listener, router(app))
        .with_graceful_shutdown(stopped())
        .await?;
    Ok(0)
}

/// The dashboard on a free loopback port in this process, open and not read-only, for the
/// benchmark; its address.
pub(crate) async fn serve_in_process(store: Arc<dyn Store>) -> anyhow::Result<SocketAddr> {
    let app = Arc::new(App {
        store,
        csrf: guard::random_token()?,
        read_only: false,
        auth: guard::Auth::Open,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, router(app)).await {
            tracing::warn!(error = %e, "the benchmark's dashboard stopped");
        }
    });
    Ok(addr)
}

/// Resolves at SIGINT (Ctrl-C) or SIGTERM: the server stops taking connections and ends.
async fn stopped() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Every page and action.
fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(pages::overview))
        .route("/api/overview", get(pages::overview_json))
        .route("/metrics", get(pages::metrics))
        .route("/workers", get(pages::workers))
        .route("/queues/{queue}", get(pages::queue))
        .route("/queues/{queue}/schedules", get(pages::schedules))
        .route("/queues/{queue}/groups", get(pages::groups))
        .route("/queues/{queue}/groups/{group}/limit", post(actions::group_limit))
        .route("/queues/{queue}/jobs/{id}", get(pages::job))
        .route("/queues/{queue}/{action}", post(actions::queue))
        .route("/queues/{queue}/jobs/{id}/{action}", post(actions::job))
        .route("/queues/{queue}/schedules/{name}/{action}", post(actions::schedule))
        .fallback(pages::not_found)
        .layer(axum::middleware::from_fn_with_state(app.clone(), guard::check))
        .with_state(app)
}
