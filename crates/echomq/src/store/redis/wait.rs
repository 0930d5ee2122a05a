//! Waiting on jobs: mark_waited (`scripts/mark_waited.lua`), and the finishes of a queue's waited
//! jobs, read from its channel `emq:{q}:finished` by one pub/sub subscription per queue that every
//! stream of this store and its clones shares (a thousand waits cost one connection, not a
//! thousand). A subscription lost and made again tells every stream to look again (`None`): a
//! finish published meanwhile reached nobody.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use tokio::sync::{broadcast, watch};

use super::{RedisStore, CONNECT_TIMEOUT};
use crate::error::{Error, Result};
use crate::keyspace::{JobId, QueueKeys, QueueName};

/// Notices a stream may fall behind by before it is told to look again instead.
const NOTICES_BUFFERED: usize = 1024;

/// How often an idle subscription checks whether any stream still reads it (it ends when none
/// does).
const IDLE_CHECK: Duration = Duration::from_secs(10);

/// The longest pause between two attempts to subscribe again after the subscription broke.
const RESUBSCRIBE_MAX: Duration = Duration::from_secs(5);

/// The shared subscriptions of one store, by queue.
#[derive(Default)]
pub(super) struct Waits {
    queues: Mutex<HashMap<String, Arc<Channel>>>,
}

/// One queue's subscription: its notices, and whether it is subscribed now (its sender dropped:
/// the task is gone).
struct Channel {
    tx: broadcast::Sender<Option<JobId>>,
    ready: watch::Receiver<bool>,
}

pub(super) async fn finished_waits(store: &RedisStore, queue: &QueueName) -> Result<BoxStream<'static, Option<JobId>>> {
    let (channel, rx) = channel(store, queue);
    let mut ready = channel.ready.clone();
    match tokio::time::timeout(CONNECT_TIMEOUT, ready.wait_for(|r| *r)).await {
        Ok(Ok(_)) => {}
        _ => {
            return Err(Error::Unreachable {
                addr: store.addr.clone(),
                reason: "no subscription to the finished channel within the connect timeout".into(),
            })
        }
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(notice) => Some((notice, rx)),
            // notices this stream missed: look at every waited job again
            Err(broadcast::error::RecvError::Lagged(_)) => Some((None, rx)),
            Err(broadcast::error::RecvError::Closed) => None,
        }
    });
    Ok(stream.boxed())
}

/// The queue's shared subscription, started when none runs, and a receiver of its notices —
/// taken under the lock, so the subscription cannot end (no receiver left) before it is counted.
fn channel(store: &RedisStore, queue: &QueueName) -> (Arc<Channel>, broadcast::Receiver<Option<JobId>>) {
    let mut queues = store.waits.queues.lock().unwrap_or_else(PoisonError::into_inner);
    // an entry whose task is gone (its runtime shut down) is replaced, not joined
    if let Some(c) = queues.get(queue.as_str()).filter(|c| c.ready.has_changed().is_ok()) {
        return (c.clone(), c.tx.subscribe());
    }
    let (tx, rx) = broadcast::channel(NOTICES_BUFFERED);
    let (ready_tx, ready) = watch::channel(false);
    let channel = Arc::new(Channel { tx: tx.clone(), ready });
    queues.insert(queue.as_str().to_string(), channel.clone());
    tokio::spawn(listen(store.clone(), queue.clone(), tx, ready_tx));
    (channel, rx)
}

/// Whether no stream reads the queue's notices any more: then its entry is removed (under the
/// lock a new stream takes it by, so none can join a subscription that is ending).
fn unread(store: &RedisStore, queue: &QueueName, tx: &broadcast::Sender<Option<JobId>>) -> bool {
    let mut queues = store.waits.queues.lock().unwrap_or_else(PoisonError::into_inner);
    if tx.receiver_count() > 0 {
        return false;
    }
    queues.remove(queue.as_str());
    true
}

/// The subscription's task: subscribes, forwards each message, and subscribes again after a break
/// (backing off, and telling every stream to look again), until no stream reads it.
async fn listen(store: RedisStore, queue: QueueName, tx: broadcast::Sender<Option<JobId>>, ready: watch::Sender<bool>) {
    let name = QueueKeys::new(&queue).finished();
    let mut pause = Duration::from_millis(100);
    let mut resumed = false;
    loop {
        if unread(&store, &queue, &tx) {
            return;
        }
        let mut messages = match subscribe(&store, &name).await {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(queue = %queue, error = %e, "the finished channel: subscribing failed, retrying");
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(RESUBSCRIBE_MAX);
                continue;
            }
        };
        pause = Duration::from_millis(100);
        ready.send_replace(true);
        if resumed {
            let _ = tx.send(None);
        }
        resumed = true;
        // made once: a steady stream of messages must not keep putting the check off
        let mut idle = tokio::time::interval(IDLE_CHECK);
        idle.tick().await;
        loop {
            tokio::select! {
                msg = messages.next() => match msg {
                    // a send nobody receives: the streams are gone, perhaps for good
                    Some(notice) => {
                        if tx.send(notice).is_err() && unread(&store, &queue, &tx) {
                            return;
                        }
                    }
                    None => break,
                },
                _ = idle.tick() => {
                    if unread(&store, &queue, &tx) {
                        return;
                    }
                }
            }
        }
        // not subscribed until the next attempt succeeds: a new stream waits for it
        ready.send_replace(false);
        tracing::warn!(queue = %queue, "the finished channel's subscription broke; subscribing again");
    }
}

/// A pub/sub connection of its own subscribed to `channel`: its messages, each an id (`Some`) or
/// `*` (`None`: look again); a message naming no valid id is skipped.
async fn subscribe(store: &RedisStore, channel: &str) -> Result<BoxStream<'static, Option<JobId>>> {
    let messages = store.subscribed(channel.to_string(), "finished_waits").await?;
    let stream = messages.filter_map(|payload| async move {
        let text = String::from_utf8_lossy(&payload).into_owned();
        if text == "*" {
            return Some(None);
        }
        JobId::parse(text).ok().map(Some)
    });
    Ok(stream.boxed())
}
