//! Talking to the servers for every verb: `EVALSHA` with the reload on `NOSCRIPT`, pipelines of
//! script calls, script loading, a cluster's redirects, the wait for replicas, the mapping of
//! client errors to the store's, TCP keepalive, the parking connections and the subscriptions.

use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::stream::BoxStream;
use futures::StreamExt;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, ErrorKind, PushKind, RedisError, RedisResult, ServerErrorKind, Value};

use super::reply::{self, Reply};
use super::topology::{self, Node, Topology};
use super::{RedisStore, WaitReplicas, CONNECT_TIMEOUT, RESPONSE_TIMEOUT};
use crate::error::{Error, Result};
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::engine::{Call, Engine};
use crate::store::scripts::{Script, Scripts};
use crate::store::CancelRequest;

/// The longest park that ends on the client's timer rather than the server's step (see
/// `park_on_own_connection`); a longer one (a consumer's beat) is late by one step at most.
const PRECISE_PARK: Duration = Duration::from_millis(250);

/// A pooled parking connection and its server-side id (`CLIENT ID`; `None` when refused).
pub(super) struct Parker {
    conn: MultiplexedConnection,
    id: Option<i64>,
}

/// The most sends of one script call: the first, then a resend after each `NOSCRIPT`. A server
/// loses its scripts at any moment (a restart, a failover, a `SCRIPT FLUSH`), and may lose them
/// again between a reload and the resend; each loss costs the call one more round trip, and only
/// a call answered `NOSCRIPT` on every send ends with that error.
const NOSCRIPT_SENDS: usize = 5;

/// How long a call waits out a cluster that is moving its slot (a reshard's `MOVED`, `ASK` and
/// `TRYAGAIN`; a failover's `CLUSTERDOWN`, `MASTERDOWN` and `READONLY`): each of those replies
/// says the command did not run, so it is sent again — after a pause growing to
/// [`REDIRECT_PAUSE_MAX`], to the master the cluster names — until it runs or this much time has
/// passed (a slot of many thousands of jobs takes seconds to migrate).
pub(super) const REDIRECTS_FOR: Duration = Duration::from_secs(20);

/// The longest pause between two sends of a call the cluster put off.
const REDIRECT_PAUSE_MAX: Duration = Duration::from_millis(200);

/// One call's outcome: the server's reply to its script, an error reply left raw (a verb may read
/// its own codes in it); or the store's error when the script could not be run (its load was
/// refused, or a resend's round trip failed), or ran and its write was not confirmed by the
/// replicas asked for ([`Error::NotReplicated`]).
pub(super) type Sent = Result<RedisResult<Value>>;

/// What an error reply says about its command.
enum Verdict {
    /// The script is not in the server's cache: load it and send again.
    NoScript,
    /// The slot is served by the master at this address (`MOVED`): send there.
    Moved(u16, String),
    /// The cluster is moving the slot or failing its master over: the command did not run; send
    /// it again after a pause (and, `refresh`, with the slot map read again).
    Later { refresh: bool },
    /// The command's own reply.
    Reply,
}

fn verdict(e: &RedisError) -> Verdict {
    match e.kind() {
        ErrorKind::Server(ServerErrorKind::NoScript) => Verdict::NoScript,
        ErrorKind::Server(ServerErrorKind::Moved) => match e.redirect_node() {
            Some((addr, slot)) => Verdict::Moved(slot, addr.to_string()),
            None => Verdict::Later { refresh: true },
        },
        // an ASK's target is importing the slot: a script there declares the guard key, which
        // exists nowhere, so it would be refused (TRYAGAIN) until the migration ends; wait for it
        ErrorKind::Server(ServerErrorKind::Ask | ServerErrorKind::TryAgain | ServerErrorKind::BusyLoading) => {
            Verdict::Later { refresh: false }
        }
        // a replica (an old master back from a failover) refuses writes before the first one:
        // the slot has a new master
        ErrorKind::Server(ServerErrorKind::ClusterDown | ServerErrorKind::MasterDown | ServerErrorKind::ReadOnly) => {
            Verdict::Later { refresh: true }
        }
        _ => Verdict::Reply,
    }
}

/// The guard key of a queue's script call: `emq:{q}:guard`, in the slot of its keys, which no
/// script or command ever writes. Every script declares it last: while a cluster migrates the
/// queue's slot, a command whose declared keys are not all on the node is refused before it runs
/// (`TRYAGAIN`, or `ASK` and then `TRYAGAIN` on the importing node), and a key that exists
/// nowhere is never all there — so no script runs while its queue's keys are split between two
/// nodes, where it could write some keys and then fail on one that has left (a script's writes
/// are not undone). Outside a migration a missing key is no refusal.
fn guard(first_key: &str) -> Option<String> {
    let close = first_key.find("}:")?;
    first_key
        .starts_with("emq:{")
        .then(|| format!("{}guard", &first_key[..close + 2]))
}

impl RedisStore {
    /// A script call on a server of the store's topology (`cluster`: a cluster's master): its
    /// keys, then the guard key of their queue ([`guard`]), then its arguments.
    fn evalsha(script: &Script, cluster: bool, keys: &[String], args: Vec<Vec<u8>>) -> Cmd {
        let guard = keys.first().and_then(|k| guard(k));
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(script.sha(cluster))
            .arg(keys.len() + usize::from(guard.is_some()))
            .arg(keys);
        if let Some(g) = guard {
            cmd.arg(g);
        }
        for a in args {
            cmd.arg(a);
        }
        cmd
    }

    /// Runs one verb's script ([`Self::send`]), its error reply mapped to the store's error.
    pub(super) async fn run(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply> {
        self.sent(script.name, self.send_one(script, keys, args).await?)
    }

    /// Runs one verb's script ([`Self::send`]), its error reply left raw ([`Reply::Error`], code
    /// first) for the verb to read; the store's error when the script could not run or its round
    /// trip failed.
    pub(super) async fn run_raw(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply> {
        match self.send_one(script, keys, args).await? {
            Ok(v) => Ok(reply::from_value(v)),
            Err(e) => match e.code() {
                Some(code) if !is_wire(&e) => Ok(Reply::Error(format!("{code} {}", e.detail().unwrap_or("")))),
                _ => Err(self.error(script.name, e)),
            },
        }
    }

    async fn send_one(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Sent {
        let call = Call {
            script,
            keys: keys.to_vec(),
            args,
        };
        let mut sent = self.send(vec![call], None).await?;
        sent.pop().unwrap_or_else(|| Err(missing(script.name)))
    }

    /// A call's reply as the store reads it: an error reply mapped to the store's error.
    fn sent(&self, verb: &'static str, r: RedisResult<Value>) -> Result<Reply> {
        r.map(reply::from_value).map_err(|e| self.error(verb, e))
    }

    /// Loads `script` into the script cache of `node`.
    pub(super) async fn load(&self, node: &Node, script: &Script) -> Result<()> {
        let cluster = self.is_cluster();
        let mut conn = node.conn.clone();
        let reply = redis::cmd("SCRIPT")
            .arg("LOAD")
            .arg(script.body(cluster))
            .query_async::<Value>(&mut conn)
            .await;
        self.loaded(script, cluster, &reply)
    }

    /// `Ok` when `reply`, a `SCRIPT LOAD` of `script` answered, is the script's SHA.
    fn loaded(&self, script: &Script, cluster: bool, reply: &RedisResult<Value>) -> Result<()> {
        let sha = match reply {
            Ok(v) => redis::from_redis_value_ref::<String>(v).unwrap_or_else(|_| format!("{v:?}")),
            Err(e) => return Err(self.error(script.name, e.clone())),
        };
        if sha != script.sha(cluster) {
            return Err(Error::Protocol {
                verb: script.name,
                reply: format!("SCRIPT LOAD answered sha {sha}, expected {}", script.sha(cluster)),
            });
        }
        Ok(())
    }

    /// Runs script calls in one round trip ([`Self::send`]); each call's reply or error is its own,
    /// an error reply mapped to the store's error. The writes also wait for the replicas `wait`
    /// asks (beside the store's own setting: the larger count and the longer timeout of the two).
    pub(super) async fn run_calls_waiting(
        &self,
        calls: Vec<Call<'_>>,
        wait: Option<WaitReplicas>,
    ) -> Result<Vec<Result<Reply>>> {
        let names: Vec<&'static str> = calls.iter().map(|c| c.script.name).collect();
        let sent = self.send(calls, wait).await?;
        Ok(sent
            .into_iter()
            .zip(names)
            .map(|(s, name)| s.and_then(|r| self.sent(name, r)))
            .collect())
    }

    /// Plain commands (no script) for `verb` in one round trip to the server that holds
    /// `route_key` (every key they name shares its slot), with a cluster's redirects followed as a
    /// script's are; each command's reply is its own.
    pub(super) async fn commands(
        &self,
        verb: &'static str,
        route_key: &str,
        cmds: Vec<Vec<Vec<u8>>>,
    ) -> Result<Vec<Result<Reply>>> {
        let entries = cmds
            .into_iter()
            .map(|words| {
                let mut cmd = Cmd::new();
                for w in words {
                    cmd.arg(w);
                }
                (None, cmd)
            })
            .collect();
        let sent = self.send_entries(verb, route_key, entries, None).await?;
        Ok(sent.into_iter().map(|s| s.and_then(|r| self.sent(verb, r))).collect())
    }

    /// Every script call goes this way: the calls in one pipeline to the server that holds their
    /// queue (all their keys share one hash slot: checked here, as a cluster refuses anything
    /// else), followed by `WAIT` when the store waits for replicas and a call writes. Calls
    /// answered `NOSCRIPT` (nothing ran for them) are sent again in one pipeline, behind a
    /// `SCRIPT LOAD` of each of their scripts, until they run or [`NOSCRIPT_SENDS`] sends are
    /// made; a call then still answered `NOSCRIPT` keeps that reply, and one whose script's load
    /// was refused takes the load's error at once. Calls a cluster redirects or puts off are sent
    /// again as [`REDIRECTS_FOR`] says. `Err` only when the first round trip failed; after it each
    /// call's outcome is its own, and a call that ran keeps its reply whatever the others meet (a
    /// claim among them leased its jobs: its reply must reach the caller). A call whose round
    /// trip failed after the server may have run it is never sent again: that is the caller's
    /// outage to see (a resent enqueue of generated ids would add its jobs twice; a resent claim
    /// would lease a second batch).
    async fn send(&self, calls: Vec<Call<'_>>, wait: Option<WaitReplicas>) -> Result<Vec<Sent>> {
        let verb = calls.first().map_or("pipeline", |c| c.script.name);
        let route = calls.first().and_then(|c| c.keys.first()).cloned().unwrap_or_default();
        let one_tag = topology::hash_tag(&route);
        if let Some(stray) = calls
            .iter()
            .flat_map(|c| &c.keys)
            .find(|k| topology::hash_tag(k) != one_tag)
        {
            return Err(Error::Store {
                verb,
                reason: format!("keys of two hash slots in one call ({route} and {stray}): a cluster refuses it"),
            });
        }
        let cluster = matches!(self.topology().await?, Topology::Cluster(_));
        let wait = match (self.wait, wait) {
            (Some(a), Some(b)) => Some(WaitReplicas {
                replicas: a.replicas.max(b.replicas),
                timeout: a.timeout.max(b.timeout),
            }),
            (a, b) => a.or(b),
        }
        .filter(|w| w.replicas > 0 && calls.iter().any(|c| c.script.writes));
        // each call's arguments moved into its command, once (a bulk enqueue's are megabytes: every
        // copy made before the first byte is sent is time the server waits)
        let entries = calls
            .into_iter()
            .map(|c| (Some(c.script), Self::evalsha(c.script, cluster, &c.keys, c.args)))
            .collect();
        self.send_entries(verb, &route, entries, wait).await
    }

    /// [`Self::send`] for `entries` (each a script call, or a plain command when `None`).
    async fn send_entries(
        &self,
        verb: &'static str,
        route: &str,
        entries: Vec<(Option<&Script>, Cmd)>,
        wait: Option<WaitReplicas>,
    ) -> Result<Vec<Sent>> {
        let topo = self.topology().await?;
        let (cluster, cluster_flavour) = match topo {
            Topology::Cluster(c) => (Some(c), true),
            Topology::Single(_) => (None, false),
        };
        let slot = topology::slot(route);
        let scripts: Vec<Option<&Script>> = entries.iter().map(|(s, _)| *s).collect();
        let name = |i: usize| scripts[i].map_or(verb, |s| s.name);
        let mut out: Vec<Option<Sent>> = scripts.iter().map(|_| None).collect();
        let mut noscripts = vec![0usize; scripts.len()];
        let mut moves = vec![0usize; scripts.len()];
        // the pipeline: a load of each of `loads`, then the entries `sending` (index in `out`),
        // then the WAIT when one is due
        let mut loads: Vec<&Script> = Vec::new();
        let mut sending: Vec<usize> = (0..scripts.len()).collect();
        let mut pipe = redis::pipe();
        for (_, cmd) in entries {
            pipe.add_command(cmd);
        }
        let wait_cmd = wait.map(|w| {
            let mut c = redis::cmd("WAIT");
            // at least 1 ms: `WAIT n 0` would wait for ever
            c.arg(w.replicas)
                .arg(u64::try_from(w.timeout.as_millis()).unwrap_or(u64::MAX).max(1));
            c
        });
        if let Some(c) = &wait_cmd {
            pipe.add_command(c.clone());
        }
        let started = Instant::now();
        let mut pause = Duration::from_millis(5);
        let mut first = true;
        loop {
            let node = match cluster {
                Some(c) => c.node_for(slot).await,
                None => self.node_for(route).await,
            };
            let replies = match node {
                Ok(node) => {
                    let mut conn = node.conn.clone();
                    pipe.ignore_errors()
                        .query_async::<Vec<RedisResult<Value>>>(&mut conn)
                        .await
                        .map_err(|e| {
                            if let (Some(c), true) = (cluster, is_wire(&e)) {
                                c.mark_stale();
                            }
                            self.error(verb, e)
                        })
                }
                Err(e) => Err(e),
            };
            let mut replies = match replies {
                Ok(r) => r,
                Err(e) if first => return Err(e),
                // a resend's round trip failed: the calls it carried take its error
                Err(e) => {
                    for i in sending {
                        out[i] = Some(Err(e.clone()));
                    }
                    break;
                }
            };
            first = false;
            let wait_reply = if wait_cmd.is_some() { replies.pop() } else { None };
            let load_replies: Vec<RedisResult<Value>> = replies.drain(..loads.len().min(replies.len())).collect();
            let cmds = pipe.cmd_iter().skip(loads.len());
            let mut resend: Vec<(usize, Cmd)> = Vec::new();
            let mut reload: Vec<&Script> = Vec::new();
            let mut put_off = false;
            let mut ran = Vec::new();
            let in_time = started.elapsed() < REDIRECTS_FOR;
            for ((i, reply), cmd) in sending.iter().copied().zip(replies).zip(cmds) {
                let e = match reply {
                    Ok(v) => {
                        out[i] = Some(Ok(Ok(v)));
                        if scripts[i].is_some_and(|s| s.writes) {
                            ran.push(i);
                        }
                        continue;
                    }
                    Err(e) => e,
                };
                match (verdict(&e), scripts[i]) {
                    (Verdict::NoScript, Some(script)) => {
                        // a refused load (a user without `SCRIPT LOAD`) would be refused again
                        let refused = loads
                            .iter()
                            .position(|s| std::ptr::eq(*s, script))
                            .and_then(|at| self.loaded(script, cluster_flavour, &load_replies[at]).err());
                        noscripts[i] += 1;
                        if let Some(refused) = refused {
                            out[i] = Some(Err(refused));
                        } else if noscripts[i] >= NOSCRIPT_SENDS {
                            out[i] = Some(Ok(Err(e)));
                        } else {
                            if !reload.iter().any(|s| std::ptr::eq(*s, script)) {
                                reload.push(script);
                            }
                            resend.push((i, cmd.clone()));
                        }
                    }
                    (Verdict::Moved(moved_slot, addr), _) if in_time => {
                        if let Some(c) = cluster {
                            c.moved(moved_slot, &addr);
                        }
                        // sent on at once the first time; a second MOVED (two nodes that
                        // disagree for a moment, in a failover) waits as a TRYAGAIN does
                        moves[i] += 1;
                        put_off |= moves[i] > 1;
                        resend.push((i, cmd.clone()));
                    }
                    (Verdict::Later { refresh }, _) if in_time => {
                        if let (Some(c), true) = (cluster, refresh) {
                            c.mark_stale();
                        }
                        put_off = true;
                        resend.push((i, cmd.clone()));
                    }
                    _ => out[i] = Some(Ok(Err(e))),
                }
            }
            // the writes of the calls that ran this round are confirmed by the replicas, or those
            // calls fail: their writes stand, unconfirmed
            if let (Some(w), false) = (wait, ran.is_empty()) {
                let acked = match &wait_reply {
                    Some(Ok(Value::Int(n))) => Ok(u64::try_from(*n).unwrap_or(0)),
                    Some(Err(e)) => Err(self.error(verb, e.clone())),
                    _ => Ok(0),
                };
                for i in ran {
                    match &acked {
                        Ok(n) if *n >= u64::from(w.replicas) => {}
                        Ok(n) => {
                            out[i] = Some(Err(Error::NotReplicated {
                                verb: name(i),
                                acked: *n,
                                wanted: w.replicas,
                                timeout: w.timeout,
                            }))
                        }
                        Err(e) => out[i] = Some(Err(e.clone())),
                    }
                }
            }
            if resend.is_empty() {
                break;
            }
            if put_off {
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(REDIRECT_PAUSE_MAX);
            }
            pipe = redis::pipe();
            for script in &reload {
                pipe.cmd("SCRIPT").arg("LOAD").arg(script.body(cluster_flavour));
            }
            loads = reload;
            sending = Vec::with_capacity(resend.len());
            for (i, cmd) in resend {
                pipe.add_command(cmd);
                sending.push(i);
            }
            if let Some(c) = &wait_cmd {
                pipe.add_command(c.clone());
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
            if let Some(typed) = reply::script_error(verb, &format!("{code} {}", e.detail().unwrap_or(""))) {
                return typed;
            }
        }
        unreachable_or(&self.addr, verb, e)
    }

    /// The park: a `BLPOP` on the wake lists of the queue a consumer of `kinds` parks on (one hash
    /// tag: one slot, one node), on a parking connection of its own to the
    /// server that holds the queue (taken from the pool, or opened), returned to the pool after a
    /// reply and dropped after an error. On a cluster moving the queue's slot the park ends at once
    /// as woken (the `BLPOP` did not run; the consumer's next claim follows the slot), with the
    /// slot map corrected or marked for a refresh.
    ///
    /// A short park ends on time: the server ends a block in its own steps (100 ms at its default
    /// `hz`), so a park of at most [`PRECISE_PARK`] also runs the client's timer and, when that
    /// fires first, ends the block itself (`CLIENT UNBLOCK` of the parking connection, from the
    /// node's shared one): the connection stays open and goes back to the pool. A user the server
    /// refuses `CLIENT ID` or `CLIENT UNBLOCK` waits for the server's own step instead.
    pub(super) async fn park_on_own_connection(
        &self,
        queue: &QueueName,
        kinds: &crate::store::Kinds,
        timeout: Duration,
    ) -> Result<bool> {
        let k = QueueKeys::new(queue);
        let wakes = k.wakes_of(kinds);
        // every list of the queue is in its slot: its wake list names the node
        let node = self.node_for(&k.wake()).await?;
        let pooled = self.parkers.lock().await.get_mut(&node.addr).and_then(Vec::pop);
        let Parker { mut conn, id } = match pooled {
            Some(p) => p,
            None => {
                let mut conn = self.dedicated(&node, "park").await?;
                let id = redis::cmd("CLIENT").arg("ID").query_async::<i64>(&mut conn).await.ok();
                Parker { conn, id }
            }
        };
        // The response timeout sits above the block: the client's default of 500 ms would end
        // every longer park early with an error.
        let timeout = timeout.min(crate::store::PARK_TIMEOUT_MAX);
        conn.set_response_timeout(timeout + Duration::from_secs(2));
        let secs = format!("{:.3}", timeout.as_secs_f64().max(0.001));
        let mut blpop_conn = conn.clone();
        let mut cmd = redis::cmd("BLPOP");
        cmd.arg(&wakes).arg(secs);
        let blpop = cmd.query_async::<Value>(&mut blpop_conn);
        tokio::pin!(blpop);
        let precise = id.filter(|_| timeout <= PRECISE_PARK);
        let reply = tokio::select! {
            r = &mut blpop => r,
            _ = tokio::time::sleep(timeout), if precise.is_some() => {
                let mut shared = node.conn.clone();
                let unblocked = redis::cmd("CLIENT")
                    .arg("UNBLOCK")
                    .arg(precise.unwrap_or_default())
                    .query_async::<Value>(&mut shared)
                    .await;
                if let Err(e) = unblocked {
                    tracing::debug!(error = %e, "CLIENT UNBLOCK refused; the park ends at the server's step");
                }
                blpop.await
            }
        };
        let conn = Parker { conn, id };
        let cluster = match self.topology().await? {
            Topology::Cluster(c) => Some(c),
            Topology::Single(_) => None,
        };
        match reply {
            Ok(v) => {
                self.parkers.lock().await.entry(node.addr).or_default().push(conn);
                Ok(!matches!(v, Value::Nil))
            }
            Err(e) => match (verdict(&e), cluster) {
                (Verdict::Moved(slot, addr), Some(c)) => {
                    c.moved(slot, &addr);
                    self.parkers.lock().await.entry(node.addr).or_default().push(conn);
                    Ok(true)
                }
                (Verdict::Later { refresh }, Some(c)) => {
                    if refresh {
                        c.mark_stale();
                    }
                    self.parkers.lock().await.entry(node.addr).or_default().push(conn);
                    tokio::time::sleep(REDIRECT_PAUSE_MAX.min(timeout)).await;
                    Ok(true)
                }
                // A broken parking connection is dropped, not returned to the pool.
                (_, cluster) => {
                    if let (Some(c), true) = (cluster, is_wire(&e)) {
                        c.mark_stale();
                    }
                    Err(unreachable_or(&node.addr, "park", e))
                }
            },
        }
    }

    /// A connection of its own to `node` (not the shared one), for `verb`.
    async fn dedicated(&self, node: &Node, verb: &'static str) -> Result<MultiplexedConnection> {
        let config = AsyncConnectionConfig::new().set_connection_timeout(Some(CONNECT_TIMEOUT));
        connect_own(&node.client, &node.addr, &config, verb).await
    }

    /// The messages of `channel` (their payloads), from a subscription of its own that the server
    /// has confirmed, for `verb`, whose error it names: plain pub/sub on a standalone server;
    /// sharded pub/sub (`SSUBSCRIBE`) on a cluster, on the master of the channel's slot. The
    /// stream ends when the subscription breaks (the connection dropped, or the cluster moved the
    /// slot away): the caller subscribes again, and reads again what it may have missed.
    pub(super) async fn subscribed(&self, channel: String, verb: &'static str) -> Result<BoxStream<'static, Vec<u8>>> {
        let node = self.node_for(&channel).await?;
        let cluster = match self.topology().await? {
            Topology::Cluster(c) => Some(c),
            Topology::Single(_) => None,
        };
        // a subscription refused or broken on a cluster may mean the slot moved: the map is
        // corrected (a MOVED) or read again (anything else) before the caller subscribes again
        let moved_or_stale = |e: &RedisError| {
            if let Some(c) = cluster {
                match verdict(e) {
                    Verdict::Moved(slot, addr) => c.moved(slot, &addr),
                    _ => c.mark_stale(),
                }
            }
        };
        if cluster.is_none() {
            let mut pubsub = tokio::time::timeout(CONNECT_TIMEOUT, node.client.get_async_pubsub())
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
            return Ok(pubsub
                .into_on_message()
                .map(|msg| msg.get_payload_bytes().to_vec())
                .boxed());
        }
        // RESP3 on a connection of its own to the slot's master: the server's pushes (messages,
        // and the notice that the slot moved away) arrive on `pushes`
        let (tx, pushes) = tokio::sync::mpsc::unbounded_channel();
        let info = node.client.get_connection_info().clone().set_redis_settings(
            node.client
                .get_connection_info()
                .redis_settings()
                .clone()
                .set_protocol(redis::ProtocolVersion::RESP3),
        );
        let client = redis::Client::open(info).map_err(|e| unreachable_or(&node.addr, verb, e))?;
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_push_sender(tx);
        let conn = connect_own(&client, &node.addr, &config, verb).await?;
        let mut subscribe = redis::cmd("SSUBSCRIBE");
        subscribe.arg(&channel);
        let mut sub_conn = conn.clone();
        // the confirmation is a push; the command's own reply is empty
        let confirmed = sub_conn.send_packed_command(&subscribe).await;
        if let Err(e) = confirmed {
            moved_or_stale(&e);
            return Err(unreachable_or(&node.addr, verb, e));
        }
        // the stream's end (the slot moved away, the connection dropped) marks the map stale
        let store = self.clone();
        let stream = futures::stream::unfold((pushes, conn, store), |(mut pushes, conn, store)| async move {
            loop {
                let Some(push) = pushes.recv().await else {
                    store.mark_stale();
                    return None;
                };
                match push.kind {
                    PushKind::SMessage => {
                        if let Some(Value::BulkString(payload)) = push.data.into_iter().nth(1) {
                            return Some((payload, (pushes, conn, store)));
                        }
                    }
                    PushKind::SUnsubscribe | PushKind::Disconnection => {
                        store.mark_stale();
                        return None;
                    }
                    _ => {}
                }
            }
        });
        Ok(stream.boxed())
    }

    /// On a cluster, the next call reads the slot map again first.
    fn mark_stale(&self) {
        if let Some(Topology::Cluster(c)) = self.topology.get() {
            c.mark_stale();
        }
    }

    /// The queue's cancel requests, from a subscription of their own to its channel
    /// (`<id>\n<reason>` per message; a message naming no valid id is skipped).
    pub(super) async fn subscribe_cancels(&self, queue: &QueueName) -> Result<BoxStream<'static, CancelRequest>> {
        let messages = self
            .subscribed(QueueKeys::new(queue).cancel(), "cancel_requests")
            .await?;
        let stream = messages.filter_map(|payload| async move {
            let text = String::from_utf8_lossy(&payload);
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

/// A connection of its own made by `client` with `config` (within the connect timeout), for
/// `verb`; `addr` names the server in errors.
async fn connect_own(
    client: &redis::Client,
    addr: &str,
    config: &AsyncConnectionConfig,
    verb: &'static str,
) -> Result<MultiplexedConnection> {
    tokio::time::timeout(
        CONNECT_TIMEOUT + Duration::from_secs(1),
        client.get_multiplexed_async_connection_with_config(config),
    )
    .await
    .map_err(|_| Error::Unreachable {
        addr: addr.to_string(),
        reason: format!("no connection for {verb} within the connect timeout"),
    })?
    .map_err(|e| unreachable_or(addr, verb, e))
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

#[async_trait::async_trait]
impl Engine for RedisStore {
    fn scripts(&self) -> &Scripts {
        &self.scripts
    }

    fn payload_limit(&self) -> usize {
        self.payload_limit
    }

    fn kind(&self) -> &'static str {
        "redis"
    }

    async fn run(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply> {
        RedisStore::run(self, script, keys, args).await
    }

    async fn run_raw(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Reply> {
        RedisStore::run_raw(self, script, keys, args).await
    }

    async fn run_calls_waiting(
        &self,
        calls: Vec<Call<'_>>,
        wait: Option<(u32, Duration)>,
    ) -> Result<Vec<Result<Reply>>> {
        let wait = wait.map(|(replicas, timeout)| WaitReplicas { replicas, timeout });
        RedisStore::run_calls_waiting(self, calls, wait).await
    }

    async fn commands(
        &self,
        verb: &'static str,
        route_key: &str,
        cmds: Vec<Vec<Vec<u8>>>,
    ) -> Result<Vec<Result<Reply>>> {
        RedisStore::commands(self, verb, route_key, cmds).await
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

    #[test]
    fn a_queues_calls_declare_its_guard_key_and_share_its_tag() {
        use super::guard;
        use crate::store::redis::topology::hash_tag as tag;
        assert_eq!(guard("emq:{q}:pending").as_deref(), Some("emq:{q}:guard"));
        assert_eq!(guard("emq:{a.b-c}:job:7").as_deref(), Some("emq:{a.b-c}:guard"));
        assert_eq!(guard("emq:queues"), None, "the key outside any queue has none");
        assert_eq!(tag("emq:{q}:pending"), "q");
        assert_eq!(tag("emq:{q}:guard"), tag("emq:{q}:job:1"));
        assert_eq!(tag("emq:queues"), "emq:queues");
        assert_eq!(
            crate::store::redis::topology::slot("emq:{q}:guard"),
            crate::store::redis::topology::slot("emq:{q}:wake")
        );
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
            kinds: crate::store::Kinds::all(),
            held: 0,
        };
        let round = store
            .recover_promote_claim(
                &q,
                &crate::store::RoundRequest::new(Recovery::Off, claim)
                    .pump(10)
                    .grace(crate::schedule::GRACE_MIN),
            )
            .await
            .unwrap();
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
