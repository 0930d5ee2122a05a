//! Talking to the server for every verb: `EVALSHA` with the reload on `NOSCRIPT`, pipelines of
//! script calls, script loading, the mapping of client errors to the store's, TCP keepalive, the
//! parking connections and the cancel subscriptions.

use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use futures::StreamExt;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, RedisError, RedisResult, Value};
use tracing::Instrument;

use super::scripts::Script;
use super::{RedisStore, CONNECT_TIMEOUT};
use crate::error::{Error, Result};
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::CancelRequest;

/// The most sends of one script call: the first, then a resend after each `NOSCRIPT`. A server
/// loses its scripts at any moment (a restart, a failover, a `SCRIPT FLUSH`), and may lose them
/// again between a reload and the resend; each loss costs the call one more round trip, and only
/// a call answered `NOSCRIPT` on every send ends with that error.
const NOSCRIPT_SENDS: usize = 5;

/// One script call of a pipeline.
pub(super) struct Call<'a> {
    pub(super) script: &'a Script,
    pub(super) keys: Vec<String>,
    pub(super) args: Vec<Vec<u8>>,
}

/// One call's outcome: the server's reply to its script, an error reply left raw (a verb may read
/// its own codes in it); or the store's error when the script could not be run (its load was
/// refused, or a resend's round trip failed).
pub(super) type Sent = Result<RedisResult<Value>>;

impl RedisStore {
    pub(super) fn evalsha(script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&script.sha).arg(keys.len()).arg(keys);
        for a in args {
            cmd.arg(a);
        }
        cmd
    }

    /// Runs one verb's script ([`Self::send`]), its error reply mapped to the store's error.
    pub(super) async fn run(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Value> {
        self.run_raw(script, keys, args)
            .await?
            .map_err(|e| self.error(script.name, e))
    }

    /// Runs one verb's script ([`Self::send`]), its error reply left raw.
    pub(super) async fn run_raw(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Sent {
        let call = Call {
            script,
            keys: keys.to_vec(),
            args,
        };
        let mut sent = self.send(vec![call], Vec::new()).await?;
        sent.pop().unwrap_or_else(|| Err(missing(script.name)))
    }

    pub(super) async fn load(&self, script: &Script) -> Result<()> {
        let mut conn = self.conn().await?;
        let reply = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(&script.body)
            .query_async::<Value>(&mut conn)
            .await;
        self.loaded(script, &reply)
    }

    /// `Ok` when `reply`, a `SCRIPT LOAD` of `script` answered, is the script's SHA.
    fn loaded(&self, script: &Script, reply: &RedisResult<Value>) -> Result<()> {
        let sha = match reply {
            Ok(v) => redis::from_redis_value_ref::<String>(v).unwrap_or_else(|_| format!("{v:?}")),
            Err(e) => return Err(self.error(script.name, e.clone())),
        };
        if sha != script.sha {
            return Err(Error::Protocol {
                verb: script.name,
                reply: format!("SCRIPT LOAD answered sha {sha}, expected {}", script.sha),
            });
        }
        Ok(())
    }

    /// Runs script calls in one round trip ([`Self::send`]), then `extra` plain commands; each
    /// call's reply or error is its own, an error reply mapped to the store's error.
    pub(super) async fn run_calls(&self, calls: Vec<Call<'_>>, extra: Vec<Cmd>) -> Result<Vec<Result<Value>>> {
        let names: Vec<&'static str> = calls.iter().map(|c| c.script.name).collect();
        let sent = self.send(calls, extra).await?;
        Ok(sent
            .into_iter()
            .zip(names)
            .map(|(s, name)| s.and_then(|r| r.map_err(|e| self.error(name, e))))
            .collect())
    }

    /// Every script call goes this way: the calls in one pipeline, then `extra` plain commands
    /// (their replies unread). Calls answered `NOSCRIPT` (nothing ran for them) are sent again in
    /// one pipeline, behind a `SCRIPT LOAD` of each of their scripts, until they run or
    /// [`NOSCRIPT_SENDS`] sends are made; a call then still answered `NOSCRIPT` keeps that reply,
    /// and one whose script's load was refused takes the load's error at once. `Err` only when the
    /// first round trip failed; after it each call's outcome is its own, and a call that ran keeps
    /// its reply whatever the others meet (a claim among them leased its jobs: its reply must reach
    /// the caller).
    async fn send(&self, calls: Vec<Call<'_>>, extra: Vec<Cmd>) -> Result<Vec<Sent>> {
        let verb = calls.first().map_or("pipeline", |c| c.script.name);
        let span = tracing::trace_span!("emq.store", verb);
        let mut out: Vec<Option<Sent>> = calls.iter().map(|_| None).collect();
        // the pipeline: a load of each of `loads`, then the calls `sending` (index in `out`, script)
        let mut loads: Vec<&Script> = Vec::new();
        let mut sending: Vec<(usize, &Script)> = calls.iter().map(|c| c.script).enumerate().collect();
        let mut pipe = redis::pipe();
        // each call's arguments moved into its command, once (a bulk enqueue's are megabytes: every
        // copy made before the first byte is sent is time the server waits)
        for c in calls {
            pipe.add_command(Self::evalsha(c.script, &c.keys, c.args));
        }
        for c in extra {
            pipe.add_command(c);
        }
        let mut conn = self.conn().await?;
        for send in 1..=NOSCRIPT_SENDS {
            let replies = pipe
                .ignore_errors()
                .query_async::<Vec<RedisResult<Value>>>(&mut conn)
                .instrument(span.clone())
                .await;
            let mut load_replies = match replies {
                Ok(r) => r,
                Err(e) if send == 1 => return Err(self.error(verb, e)),
                // a resend's round trip failed: the calls it carried take its error
                Err(e) => {
                    for (i, script) in sending {
                        out[i] = Some(Err(self.error(script.name, e.clone())));
                    }
                    break;
                }
            };
            let replies = load_replies.split_off(loads.len().min(load_replies.len()));
            let cmds = pipe.cmd_iter().skip(loads.len());
            let mut resend = Vec::new();
            for ((i, script), (reply, cmd)) in sending.into_iter().zip(replies.into_iter().zip(cmds)) {
                match reply {
                    Err(e) if e.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                        // a refused load (a user without `SCRIPT LOAD`) would be refused again
                        let refused = loads
                            .iter()
                            .position(|s| std::ptr::eq(*s, script))
                            .and_then(|at| self.loaded(script, &load_replies[at]).err());
                        if let Some(refused) = refused {
                            out[i] = Some(Err(refused));
                        } else if send == NOSCRIPT_SENDS {
                            out[i] = Some(Ok(Err(e)));
                        } else {
                            resend.push((i, script, cmd.clone()));
                        }
                    }
                    reply => out[i] = Some(Ok(reply)),
                }
            }
            if resend.is_empty() {
                break;
            }
            loads.clear();
            pipe = redis::pipe();
            for (_, script, _) in &resend {
                if !loads.iter().any(|s| std::ptr::eq(*s, *script)) {
                    loads.push(script);
                    pipe.cmd("SCRIPT").arg("LOAD").arg(&script.body);
                }
            }
            sending = Vec::with_capacity(resend.len());
            for (i, script, cmd) in resend {
                pipe.add_command(cmd);
                sending.push((i, script));
            }
        }
        Ok(out
            .into_iter()
            .map(|s| s.unwrap_or_else(|| Err(missing(verb))))
            .collect())
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

    /// A pub/sub connection of its own, subscribed to `channel` (the server has confirmed it):
    /// for `verb`, whose error it names.
    pub(super) async fn subscribed(&self, channel: String, verb: &'static str) -> Result<redis::aio::PubSub> {
        let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, self.client.get_async_pubsub())
            .await
            .map_err(|_| Error::Unreachable {
                addr: self.addr.clone(),
                reason: "no pub/sub connection within the connect timeout".into(),
            })?
            .map_err(|e| unreachable_or(&self.addr, verb, e))?;
        pubsub
            .subscribe(channel)
            .await
            .map_err(|e| unreachable_or(&self.addr, verb, e))?;
        Ok(pubsub)
    }

    /// The queue's cancel requests, from a pub/sub connection of their own subscribed to its
    /// channel (`<id>\n<reason>` per message; a message naming no valid id is skipped).
    pub(super) async fn subscribe_cancels(&self, queue: &QueueName) -> Result<BoxStream<'static, CancelRequest>> {
        let pubsub = self
            .subscribed(QueueKeys::new(queue).cancel(), "cancel_requests")
            .await?;
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

/// Whether `e` is an outage: the server could not be reached or could not answer (refused, reset
/// or dropped connections, timeouts). A refusal no retry mends ([`misconfigured`]) is not one, so a
/// consumer ends on it instead of backing off for ever.
pub(super) fn is_wire(e: &RedisError) -> bool {
    if misconfigured(e).is_some() {
        return false;
    }
    e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || e.is_unrecoverable_error()
}

/// The cause, in plain words with what to change, of a refusal that every retry would meet again:
/// a password missing or refused, an ACL denial, a TLS certificate no trusted root vouches for, a
/// server that does not speak Redis. `None` for any other error.
pub(super) fn misconfigured(e: &RedisError) -> Option<String> {
    let detail = || e.detail().unwrap_or_default().trim().to_string();
    match e.code() {
        Some("NOAUTH") => {
            return Some(
                "the server requires a password (NOAUTH): give one in the URL, redis://:PASSWORD@host:port \
                 (or redis://USER:PASSWORD@host:port for an ACL user)"
                    .into(),
            )
        }
        Some("WRONGPASS") => {
            return Some(format!(
                "the server refused the user or password (WRONGPASS: {}): check them in the URL",
                detail()
            ))
        }
        Some("NOPERM") => {
            return Some(format!(
                "the server's ACL denies this user a command, key or channel the store needs (NOPERM: {}): \
                 grant it +@all (or at least the scripting, list, pub/sub and CONFIG GET commands) on \
                 the keys ~emq:* and the channels &emq:*",
                detail()
            ))
        }
        _ => {}
    }
    match e.kind() {
        // the client's verdict on the reply to AUTH: the server's own code is not kept
        ErrorKind::AuthenticationFailed => Some(
            "the server refused the credentials in the URL (WRONGPASS or authentication failed: a wrong \
             password, a disabled user, or a password given to a server that wants none): check the \
             user and password in the URL"
                .into(),
        ),
        // the bytes back were not a Redis reply: another service listens on the port (the
        // parser's detail names byte values, a riddle to the reader, and spans lines)
        ErrorKind::Parse => Some(
            "the server does not speak the Redis protocol (its reply does not parse: another service, \
             HTTP say, listens there): check the host and port in the URL"
                .into(),
        ),
        _ => refused_certificate(e).map(|tls| {
            format!(
                "the server's TLS certificate is refused ({tls}): trust the CA that signed it \
                 (SSL_CERT_FILE) and check the host name in the URL"
            )
        }),
    }
}

/// rustls's verdict when the TLS handshake failed on the server's certificate, inside the I/O error
/// redis-rs keeps behind an `Arc` (its `source()` is that `Arc`, and an I/O error's own `source()`
/// skips the error it wraps, so only `get_ref` reaches it).
fn refused_certificate(e: &RedisError) -> Option<String> {
    type Shared = Arc<dyn std::error::Error + Send + Sync>;
    std::error::Error::source(e)
        .and_then(|s| s.downcast_ref::<Shared>())
        .and_then(|shared| shared.downcast_ref::<std::io::Error>())
        .and_then(std::io::Error::get_ref)
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
        .filter(|tls| matches!(tls, rustls::Error::InvalidCertificate(_)))
        .map(ToString::to_string)
}

/// [`Error::Misconfigured`] for a refusal no retry mends ([`misconfigured`]), [`Error::Unreachable`]
/// for an error of the wire (the server could not be reached or answer), else [`Error::Store`]
/// naming the verb.
pub(super) fn unreachable_or(addr: &str, verb: &'static str, e: RedisError) -> Error {
    if let Some(reason) = misconfigured(&e) {
        return Error::Misconfigured {
            addr: addr.to_string(),
            reason,
        };
    }
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

/// The error for a call the server's replies left unanswered.
fn missing(verb: &'static str) -> Error {
    Error::Protocol {
        verb,
        reply: "fewer replies than calls".into(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{BufRead, BufReader, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::NOSCRIPT_SENDS;
    use crate::keyspace::QueueName;
    use crate::store::redis::RedisStore;
    use crate::store::{ClaimRequest, Recovery, SettleOptions, Store};

    /// A stand-in for a server that keeps losing its scripts, on a loopback port: its first `lost`
    /// `EVALSHA`s are answered `NOSCRIPT` and the later ones `:1`, a `SCRIPT LOAD` its body's SHA-1,
    /// the store's `CONFIG GET` `noeviction`, anything else `+OK`. Counts the `EVALSHA`s.
    fn losing_server(lost: usize) -> (String, Arc<AtomicUsize>) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("redis://{}", listener.local_addr().unwrap());
        let evalshas = Arc::new(AtomicUsize::new(0));
        let counted = evalshas.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming().map_while(|c| c.ok()) {
                let counted = counted.clone();
                std::thread::spawn(move || serve(conn, lost, &counted));
            }
        });
        (url, evalshas)
    }

    fn serve(conn: TcpStream, lost: usize, evalshas: &AtomicUsize) {
        let mut out = conn.try_clone().unwrap();
        let mut input = BufReader::new(conn);
        while let Some(cmd) = command(&mut input) {
            let reply = match cmd[0].to_ascii_uppercase().as_slice() {
                b"EVALSHA" if evalshas.fetch_add(1, Ordering::SeqCst) < lost => "-NOSCRIPT no script\r\n".into(),
                b"EVALSHA" => ":1\r\n".into(),
                b"SCRIPT" => {
                    let sha = sha1_smol::Sha1::from(&cmd[2]).digest().to_string();
                    format!("${}\r\n{sha}\r\n", sha.len())
                }
                b"CONFIG" => "*2\r\n$16\r\nmaxmemory-policy\r\n$10\r\nnoeviction\r\n".into(),
                _ => "+OK\r\n".to_string(),
            };
            if out.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
    }

    /// One command of the client's, as its arguments (`None` once the connection closes).
    fn command(input: &mut impl BufRead) -> Option<Vec<Vec<u8>>> {
        let mut line = String::new();
        input.read_line(&mut line).ok().filter(|n| *n > 0)?;
        let n: usize = line.trim_end().strip_prefix('*')?.parse().ok()?;
        (0..n)
            .map(|_| {
                line.clear();
                input.read_line(&mut line).ok()?;
                let len: usize = line.trim_end().strip_prefix('$')?.parse().ok()?;
                let mut arg = vec![0; len + 2];
                input.read_exact(&mut arg).ok()?;
                arg.truncate(len);
                Some(arg)
            })
            .collect()
    }

    /// The store's error for a `NOSCRIPT` reply.
    fn noscript(e: &crate::Error) -> bool {
        matches!(e, crate::Error::Store { reason, .. } if reason.starts_with("NoScript"))
    }

    #[tokio::test]
    async fn a_call_meeting_noscript_on_every_send_but_the_last_runs() {
        let (url, evalshas) = losing_server(NOSCRIPT_SENDS - 1);
        let store = RedisStore::open(&url).await.unwrap();
        store.pause(&QueueName::new("q").unwrap()).await.unwrap();
        assert_eq!(evalshas.load(Ordering::SeqCst), NOSCRIPT_SENDS);
    }

    #[tokio::test]
    async fn a_call_meeting_noscript_on_every_send_ends_with_it_after_the_bound() {
        let (url, evalshas) = losing_server(usize::MAX);
        let store = RedisStore::open(&url).await.unwrap();
        let q = QueueName::new("q").unwrap();
        let err = store.pause(&q).await.unwrap_err();
        assert!(noscript(&err), "{err}");
        assert_eq!(evalshas.load(Ordering::SeqCst), NOSCRIPT_SENDS, "a single call");
        // a pipeline: each entry alike
        let claim = ClaimRequest {
            n: 1,
            lease: Duration::from_secs(30),
            max_attempts: 3,
            settle: SettleOptions::default(),
        };
        let round = store.recover_promote_claim(&q, Recovery::Off, 10, claim).await.unwrap();
        let promoted = round.promoted.unwrap_err();
        assert!(noscript(&promoted), "{promoted}");
        let claimed = round.claimed.unwrap_err();
        assert!(noscript(&claimed), "{claimed}");
        assert_eq!(
            evalshas.load(Ordering::SeqCst),
            3 * NOSCRIPT_SENDS,
            "the single call's, then the round's two entries"
        );
    }
}
