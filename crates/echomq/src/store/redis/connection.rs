//! Talking to the server for every verb: `EVALSHA` with the reload on `NOSCRIPT`, pipelines of
//! script calls, script loading, the mapping of client errors to the store's, TCP keepalive, the
//! parking connections and the cancel subscriptions.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, Value};
use tracing::Instrument;

use super::scripts::Script;
use super::{RedisStore, CONNECT_TIMEOUT};
use crate::error::{Error, Result};
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::CancelRequest;

/// One script call of a pipeline.
pub(super) struct Call<'a> {
    pub(super) script: &'a Script,
    pub(super) keys: Vec<String>,
    pub(super) args: Vec<Vec<u8>>,
}

impl RedisStore {
    pub(super) fn evalsha(script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&script.sha).arg(keys.len()).arg(keys);
        for a in args {
            cmd.arg(a);
        }
        cmd
    }

    /// Runs one verb's script: `EVALSHA`, and on `NOSCRIPT` a `SCRIPT LOAD` and one resend.
    pub(super) async fn run(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Value> {
        let cmd = Self::evalsha(script, keys, args);
        let mut conn = self.conn.clone();
        let span = tracing::trace_span!("emq.store", verb = script.name);
        match cmd.query_async::<Value>(&mut conn).instrument(span).await {
            Ok(v) => Ok(v),
            Err(e) if e.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                self.load(script).await?;
                cmd.query_async::<Value>(&mut conn)
                    .await
                    .map_err(|e| self.error(script.name, e))
            }
            Err(e) => Err(self.error(script.name, e)),
        }
    }

    pub(super) async fn load(&self, script: &Script) -> Result<()> {
        let mut conn = self.conn.clone();
        let sha: String = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&script.body)
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error(script.name, e))?;
        if sha != script.sha {
            return Err(Error::Protocol {
                verb: script.name,
                reply: format!("SCRIPT LOAD answered sha {sha}, expected {}", script.sha),
            });
        }
        Ok(())
    }

    /// Runs several calls of one script in one round trip, then `extra` plain commands; the first
    /// error fails the whole call.
    pub(super) async fn run_pipelined(
        &self,
        script: &Script,
        calls: Vec<(Vec<String>, Vec<Vec<u8>>)>,
        extra: Vec<Cmd>,
    ) -> Result<Vec<Value>> {
        let calls = calls
            .into_iter()
            .map(|(keys, args)| Call { script, keys, args })
            .collect();
        self.run_calls(calls, extra).await?.into_iter().collect()
    }

    /// Runs script calls in one round trip, then `extra` plain commands. Entries answered
    /// `NOSCRIPT` (nothing ran for them) are resent once after a `SCRIPT LOAD`. `Err` only when the
    /// round trip itself failed; each entry's reply or error is its own (a failed load included).
    pub(super) async fn run_calls(&self, calls: Vec<Call<'_>>, extra: Vec<Cmd>) -> Result<Vec<Result<Value>>> {
        let verb = calls.first().map_or("pipeline", |c| c.script.name);
        let scripts: Vec<&Script> = calls.iter().map(|c| c.script).collect();
        // each call's arguments moved into its command, once (a bulk enqueue's are megabytes: every
        // copy made before the first byte is sent is time the server waits)
        let mut pipe = redis::pipe();
        for c in calls {
            pipe.add_command(Self::evalsha(c.script, &c.keys, c.args));
        }
        for c in extra {
            pipe.add_command(c);
        }
        let mut conn = self.conn.clone();
        let results: Vec<redis::RedisResult<Value>> = pipe
            .ignore_errors()
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error(verb, e))?;
        let mut out = Vec::with_capacity(scripts.len());
        let mut resend = pipe.cmd_iter();
        for (r, script) in results.into_iter().zip(&scripts) {
            // the command of this entry (the iterator walks the pipeline beside the replies)
            let cmd = resend.next();
            out.push(match (r, cmd) {
                (Ok(v), _) => Ok(v),
                // a load that fails is this entry's error alone: the other entries ran (a claim
                // among them leased its jobs), and their replies must reach the caller
                (Err(e), Some(cmd)) if e.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                    match self.load(script).await {
                        Ok(()) => cmd
                            .query_async::<Value>(&mut conn)
                            .await
                            .map_err(|e| self.error(script.name, e)),
                        Err(e) => Err(e),
                    }
                }
                (Err(e), _) => Err(self.error(script.name, e)),
            });
        }
        Ok(out)
    }

    /// The store's error for a script's error reply: the scripts' own codes (`EMQOBLITERATING`,
    /// `EMQARGS`) typed, the rest as [`unreachable_or`] tells.
    pub(super) fn error(&self, verb: &'static str, e: RedisError) -> Error {
        if let Some(code) = e.code() {
            match code {
                "EMQOBLITERATING" => return Error::Obliterating { queue: String::new() },
                "EMQARGS" => {
                    return Error::Store {
                        verb,
                        reason: e.detail().unwrap_or("malformed arguments").to_string(),
                    }
                }
                _ => {}
            }
        }
        unreachable_or(&self.addr, verb, e)
    }

    /// The park: a `BLPOP` on the queue's wake list, on a parking connection of its own taken from
    /// the pool (or opened), returned to the pool after a reply and dropped after an error.
    pub(super) async fn park_on_own_connection(&self, queue: &QueueName, timeout: Duration) -> Result<bool> {
        let pooled = self.parkers.lock().await.pop();
        let mut conn = match pooled {
            Some(c) => c,
            None => {
                let config = AsyncConnectionConfig::new().set_connection_timeout(Some(CONNECT_TIMEOUT));
                tokio::time::timeout(
                    CONNECT_TIMEOUT + Duration::from_secs(1),
                    self.client.get_multiplexed_async_connection_with_config(&config),
                )
                .await
                .map_err(|_| Error::Unreachable {
                    addr: self.addr.clone(),
                    reason: "no parking connection within the connect timeout".into(),
                })?
                .map_err(|e| unreachable_or(&self.addr, "park", e))?
            }
        };
        // The response timeout sits above the block (DEPENDENCIES trap 1: the client's default of
        // 500 ms would end every park early with an error).
        let timeout = timeout.min(crate::store::PARK_TIMEOUT_MAX);
        conn.set_response_timeout(timeout + Duration::from_secs(2));
        let secs = format!("{:.3}", timeout.as_secs_f64().max(0.001));
        let reply = redis::cmd("BLPOP")
            .arg(QueueKeys::new(queue).wake())
            .arg(secs)
            .query_async::<Value>(&mut conn)
            .await;
        match reply {
            Ok(v) => {
                self.parkers.lock().await.push(conn);
                Ok(!matches!(v, Value::Nil))
            }
            // A broken parking connection is dropped, not returned to the pool.
            Err(e) => Err(unreachable_or(&self.addr, "park", e)),
        }
    }

    /// The queue's cancel requests, from a pub/sub connection of their own subscribed to its
    /// channel (`<id>\n<reason>` per message; a message naming no valid id is skipped).
    pub(super) async fn subscribe_cancels(&self, queue: &QueueName) -> Result<BoxStream<'static, CancelRequest>> {
        let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| Error::Unreachable {
                addr: self.addr.clone(),
                reason: "no pub/sub connection within the connect timeout".into(),
            })?
            .map_err(|e| unreachable_or(&self.addr, "cancel_requests", e))?;
        pubsub
            .subscribe(QueueKeys::new(queue).cancel())
            .await
            .map_err(|e| unreachable_or(&self.addr, "cancel_requests", e))?;
        let stream = pubsub.into_on_message().filter_map(|msg| async move {
            let payload = msg.get_payload_bytes();
            let text = String::from_utf8_lossy(payload);
            let (id, reason) = text.split_once('\n').unwrap_or((&text, ""));
            let id = JobId::parse(id).ok()?;
            Some(CancelRequest {
                id,
                reason: (!reason.is_empty()).then(|| reason.to_string()),
            })
        });
        Ok(stream.boxed())
    }
}

/// TCP keepalive for every connection: a peer gone silent (a failover, a partition) is found
/// within about a minute even on a connection that only listens, as the cancel subscription does.
pub(super) fn keepalive() -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10))
        .with_retries(3)
}

pub(super) fn is_wire(e: &RedisError) -> bool {
    // a refused password is the caller's to fix, not an outage to wait out
    if e.kind() == redis::ErrorKind::AuthenticationFailed {
        return false;
    }
    // a server certificate no trusted root vouches for is a configuration to fix, too
    if refused_certificate(e) {
        return false;
    }
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

/// Whether the TLS handshake failed on the server's certificate: rustls's verdict, inside the I/O
/// error redis-rs keeps behind an `Arc` (its `source()` is that `Arc`, and an I/O error's own
/// `source()` skips the error it wraps, so only `get_ref` reaches it).
fn refused_certificate(e: &RedisError) -> bool {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<Shared>())
        .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::get_ref)
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .is_some_and(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)))
}

/// [`Error::Unreachable`] for an error of the wire (the server could not be reached or answer),
/// else [`Error::Store`] naming the verb.
pub(super) fn unreachable_or(addr: &str, verb: &'static str, e: RedisError) -> Error {
    if is_wire(&e) {
        Error::Unreachable {
            addr: addr.to_string(),
            reason: e.to_string(),
        }
    } else {
        Error::Store {
            verb,
            reason: e.to_string(),
        }
    }
}
