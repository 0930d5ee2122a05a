//! [`EngineStore`]: every verb run by its own script on the embedded engine, through the same verb
//! layer as Redis (`store/verbs/`). Experimental: it serves the engine's measurements beside the
//! embedded store's native verbs, within one process (a wake or a cancel request reaches only the
//! consumers of the process that wrote it; another process's consumer finds its work at its next
//! beat).
//!
//! One thread owns the engine (its connection and Lua state); every verb is sent to it over a
//! channel. After each transaction the store hands out what the scripts published: the tokens
//! pushed onto a queue's wake list are kept in memory (at most 16, as the list keeps them) for the
//! queue's parked consumers, each park taking one; a message on a channel reaches its
//! subscribers.

use std::collections::HashMap;
use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::{broadcast, Notify};

use super::{Call as HostCall, LuaHost, Notice, Reply};
use crate::error::{Error, Result};
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::engine::{Call, Engine};
use crate::store::scripts::{Script, Scripts};
use crate::store::verbs::reply::script_error;
use crate::store::{CancelRequest, PAYLOAD_LIMIT_DEFAULT};

type Job = Box<dyn FnOnce(&LuaHost) + Send>;

/// A queue's wake: the tokens its scripts pushed and not yet taken, and its parked consumers.
#[derive(Default)]
struct Wake {
    tokens: Mutex<u32>,
    notify: Notify,
}

/// The most wake tokens a queue keeps (as its wake list keeps its newest 16).
const WAKE_TOKENS_MAX: u32 = 16;

/// How many notices a slow subscriber may fall behind before it is told it missed some.
const NOTICES_BUFFERED: usize = 4096;

/// The store. Cheap to clone: clones share the engine's thread.
#[derive(Clone)]
pub struct EngineStore {
    inner: Arc<Inner>,
    /// The largest payload (and output) accepted, in bytes.
    payload_limit: usize,
}

struct Inner {
    tx: Mutex<mpsc::Sender<Job>>,
    scripts: Scripts,
    /// Each wake list's tokens and parked consumers, by its key.
    wakes: Mutex<HashMap<Vec<u8>, Arc<Wake>>>,
    /// What the scripts published, after each commit.
    notices: broadcast::Sender<Arc<Notice>>,
    path: String,
}

impl std::fmt::Debug for EngineStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineStore").field("path", &self.inner.path).finish()
    }
}

fn gone() -> Error {
    Error::Store {
        verb: "engine",
        reason: "the engine's thread is gone".into(),
    }
}

impl EngineStore {
    /// Opens (creating when missing) the file at `path`, configured as the embedded store
    /// configures its own.
    pub async fn open(path: &str) -> Result<Self> {
        let (tx, rx) = mpsc::channel::<Job>();
        let (opened_tx, opened) = tokio::sync::oneshot::channel();
        let file = path.to_string();
        std::thread::Builder::new()
            .name("emq-engine".into())
            .spawn(move || {
                let mut stop_checkpoints = None;
                let host =
                    crate::store::embedded::EmbeddedStore::configure(&file, Default::default()).and_then(|conn| {
                        // the commits' pages copied into the file off the verbs' path, as the
                        // embedded store does (the copier ends with this thread)
                        stop_checkpoints = crate::store::embedded::checkpoint::spawn(&file, &conn);
                        LuaHost::with_verbs(conn).map_err(|e| Error::Store {
                            verb: "open",
                            reason: e.to_string(),
                        })
                    });
                let host = match host {
                    Ok(h) => {
                        let _ = opened_tx.send(Ok(()));
                        h
                    }
                    Err(e) => {
                        let _ = opened_tx.send(Err(e));
                        return;
                    }
                };
                for job in rx {
                    // a verb that panics (a defect) fails alone: its caller is told the thread is
                    // gone for that call (its reply sender dropped), its transaction is rolled
                    // back, and the thread serves the next verb
                    if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| job(&host))).is_err() {
                        host.abandon();
                    }
                }
                drop(stop_checkpoints);
            })
            .map_err(|e| Error::Store {
                verb: "open",
                reason: e.to_string(),
            })?;
        opened.await.map_err(|_| gone())??;
        let (notices, _) = broadcast::channel(NOTICES_BUFFERED);
        Ok(Self {
            inner: Arc::new(Inner {
                tx: Mutex::new(tx),
                scripts: Scripts::load(),
                wakes: Mutex::default(),
                notices,
                path: path.to_string(),
            }),
            payload_limit: PAYLOAD_LIMIT_DEFAULT,
        })
    }

    /// Sets the largest payload (and output) accepted, in bytes (default 16 MiB).
    pub fn with_payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = limit;
        self
    }

    /// Runs `f` on the engine's thread, then hands out what it published.
    async fn on_thread(
        &self,
        verb: &'static str,
        f: impl FnOnce(&LuaHost) -> std::result::Result<(Vec<Reply>, Vec<Notice>), super::EngineError> + Send + 'static,
    ) -> Result<Vec<Reply>> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.inner
            .tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .send(Box::new(move |h| {
                let _ = tx.send(f(h));
            }))
            .map_err(|_| gone())?;
        let (replies, notices) = rx.await.map_err(|_| gone())?.map_err(|e| Error::Store {
            verb,
            reason: e.to_string(),
        })?;
        self.hand_out(notices);
        Ok(replies)
    }

    /// Keeps the tokens pushed onto each wake list and wakes its parked consumers; sends each
    /// message to its channel's subscribers.
    fn hand_out(&self, notices: Vec<Notice>) {
        for notice in notices {
            if notice.0.ends_with(b":wake") {
                let pushed: u32 = String::from_utf8_lossy(&notice.1).parse().unwrap_or(1);
                let wake = self.wake_of(&notice.0);
                {
                    let mut tokens = wake.tokens.lock().unwrap_or_else(PoisonError::into_inner);
                    *tokens = (*tokens + pushed).min(WAKE_TOKENS_MAX);
                }
                wake.notify.notify_waiters();
            } else {
                let _ = self.inner.notices.send(Arc::new(notice));
            }
        }
    }

    fn wake_of(&self, key: &[u8]) -> Arc<Wake> {
        self.inner
            .wakes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.to_vec())
            .or_default()
            .clone()
    }

    /// Runs one plain command (its words, name first) in a transaction of its own: a raw entry
    /// into the keyspace for tools and tests. A refused command answers [`Reply::Error`].
    #[doc(hidden)]
    pub async fn raw(&self, words: Vec<Vec<u8>>) -> Result<Reply> {
        let mut replies = self.on_thread("raw", move |h| h.commands(&[words])).await?;
        replies.pop().ok_or_else(|| Error::Protocol {
            verb: "raw",
            reply: "no reply".into(),
        })
    }

    /// The park: a wake token taken at once, or the first pushed within `timeout`.
    pub(crate) async fn park_here(&self, queue: &QueueName, timeout: Duration) -> Result<bool> {
        let wake = self.wake_of(QueueKeys::new(queue).wake().as_bytes());
        let take = || {
            let mut tokens = wake.tokens.lock().unwrap_or_else(PoisonError::into_inner);
            let had = *tokens > 0;
            *tokens = tokens.saturating_sub(1);
            had
        };
        let notified = wake.notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if take() {
            return Ok(true);
        }
        if tokio::time::timeout(timeout, notified).await.is_err() {
            return Ok(false);
        }
        take();
        Ok(true)
    }

    /// The messages published on `channel` from now on (`None`: some were missed).
    fn subscribe(&self, channel: String) -> BoxStream<'static, Option<Vec<u8>>> {
        let rx = self.inner.notices.subscribe();
        futures::stream::unfold((rx, channel), |(mut rx, channel)| async move {
            loop {
                match rx.recv().await {
                    Ok(n) if n.0 == channel.as_bytes() => return Some((Some(n.1.clone()), (rx, channel))),
                    Ok(_) => {}
                    Err(broadcast::error::RecvError::Lagged(_)) => return Some((None, (rx, channel))),
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        })
        .boxed()
    }

    /// The queue's cancel requests, as Redis's subscribers read them (`<id>\n<reason>`).
    pub(crate) fn cancels(&self, queue: &QueueName) -> BoxStream<'static, CancelRequest> {
        self.subscribe(QueueKeys::new(queue).cancel())
            .filter_map(|m| async move {
                let text = String::from_utf8_lossy(&m?).into_owned();
                let (id, reason) = text.split_once('\n').unwrap_or((&text, ""));
                Some(CancelRequest {
                    id: JobId::parse(id).ok()?,
                    reason: (!reason.is_empty()).then(|| reason.to_string()),
                })
            })
            .boxed()
    }

    /// The queue's finished waited jobs (`None`: look at every waited job again).
    pub(crate) fn finishes(&self, queue: &QueueName) -> BoxStream<'static, Option<JobId>> {
        self.subscribe(QueueKeys::new(queue).finished())
            .map(|m| m.and_then(|id| JobId::parse(String::from_utf8_lossy(&id).into_owned()).ok()))
            .boxed()
    }
}

fn host_call(call: &Call<'_>) -> HostCall<'static> {
    HostCall {
        script: call.script.name,
        keys: call.keys.iter().map(|k| k.clone().into_bytes()).collect(),
        args: call.args.clone(),
    }
}

/// A script's reply as [`Engine::run`] answers it: an error reply as the store's error.
fn checked(verb: &'static str, r: Reply) -> Result<Reply> {
    match r {
        Reply::Error(text) => Err(script_error(verb, &text).unwrap_or(Error::Store { verb, reason: text })),
        r => Ok(r),
    }
}

#[async_trait::async_trait]
impl Engine for EngineStore {
    fn scripts(&self) -> &Scripts {
        &self.inner.scripts
    }

    fn payload_limit(&self) -> usize {
        self.payload_limit
    }

    async fn run(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply> {
        checked(script.name, self.run_raw(script, keys, args).await?)
    }

    async fn run_raw(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply> {
        let call = host_call(&Call {
            script,
            keys: keys.to_vec(),
            args,
        });
        let mut replies = self.on_thread(script.name, move |h| h.run(&[call])).await?;
        replies.pop().ok_or_else(|| Error::Protocol {
            verb: script.name,
            reply: "no reply".into(),
        })
    }

    async fn run_calls_waiting(
        &self,
        calls: Vec<Call<'_>>,
        _wait: Option<(u32, Duration)>,
    ) -> Result<Vec<Result<Reply>>> {
        let names: Vec<&'static str> = calls.iter().map(|c| c.script.name).collect();
        let calls: Vec<HostCall<'static>> = calls.iter().map(host_call).collect();
        let verb = names.first().copied().unwrap_or("run");
        let replies = self.on_thread(verb, move |h| h.run(&calls)).await?;
        Ok(replies
            .into_iter()
            .zip(names)
            .map(|(r, name)| checked(name, r))
            .collect())
    }

    async fn commands(
        &self,
        verb: &'static str,
        _route_key: &str,
        cmds: Vec<Vec<Vec<u8>>>,
    ) -> Result<Vec<Result<Reply>>> {
        let replies = self.on_thread(verb, move |h| h.commands(&cmds)).await?;
        Ok(replies.into_iter().map(|r| checked(verb, r)).collect())
    }
}

crate::store::verbs::script_store!(EngineStore, {
    async fn park(&self, queue: &QueueName, timeout: Duration) -> Result<bool> {
        self.park_here(queue, timeout).await
    }

    fn settle_round_trips(&self) -> usize {
        2
    }

    async fn cancel_requests(
        &self,
        queue: &QueueName,
    ) -> Result<futures::stream::BoxStream<'static, crate::store::CancelRequest>> {
        Ok(self.cancels(queue))
    }

    async fn finished_waits(&self, queue: &QueueName) -> Result<futures::stream::BoxStream<'static, Option<JobId>>> {
        Ok(self.finishes(queue))
    }
});
