//! `RedisStore`: every verb as one Lua script (`scripts/<verb>.lua`) run by `EVALSHA`, with a
//! transparent reload on `NOSCRIPT` (per entry in pipelines).
//!
//! Connections: one shared, multiplexed [`ConnectionManager`] carries every script (concurrent
//! callers pipeline on it); parks run `BLPOP` on dedicated connections of their own (a blocking
//! command holds its connection for the whole block, so parking on the shared one would stall every
//! other caller); cancel requests arrive on a pub/sub connection per subscriber.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};
use redis::io::tcp::TcpSettings;
use redis::{AsyncConnectionConfig, Client, Cmd, ErrorKind, IntoConnectionInfo, RedisError, Value};
use tokio::sync::Mutex;
use tracing::Instrument;

use crate::error::{Error, Result};
use crate::job::{ClaimedJob, Job, JobState, NewJob};
use crate::keyspace::{GroupName, JobId, QueueKeys, QueueName, QUEUES_KEY};
use crate::store::{
    check_claim, check_jobs, check_list_limit, check_payload, millis, positive, CancelRequest, Cancelled, ClaimRequest,
    Completion, Counts, Discarded, Enqueued, Extended, LimitTarget, Obliterated, Promoted, PromotedJob, Recovery,
    Redriven, Removed, Retried, Round, SettleOptions, Settled, StalledPolicy, Store, Swept, BATCH_MAX, CHUNK_DEFAULT,
    PAYLOAD_LIMIT_DEFAULT,
};

mod reply;
mod scripts;

pub use scripts::VERBS;
use scripts::{Script, Scripts};

/// How long a connect may take before the store is declared unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The response timeout of the shared connection (the client's default of 500 ms is too short for a
/// batch of 1000 large payloads on a busy server).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::store::BATCH_BYTES_MAX;

/// The Redis/Valkey store. Cheap to clone: clones share the connection and the parking pool.
#[derive(Clone)]
pub struct RedisStore {
    client: Client,
    conn: ConnectionManager,
    /// Idle parking connections. A park takes one (or opens one) for the length of its BLPOP, so
    /// two consumers never share one and no script waits behind a park.
    parkers: Arc<Mutex<Vec<MultiplexedConnection>>>,
    scripts: Arc<Scripts>,
    addr: String,
    payload_limit: usize,
}

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to `redis://[user:password@]host:port[/db]` or `rediss://…` (TLS). Fails within
    /// [`CONNECT_TIMEOUT`] when the server cannot be reached. Warns loudly when the server's
    /// `maxmemory-policy` is not `noeviction` (any other policy can silently evict jobs).
    pub async fn open(url: &str) -> Result<Self> {
        let addr = super::redact_url(url);
        if url.starts_with("rediss://") {
            // A second install attempt is refused; either way a provider is installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let info = url
            .into_connection_info()
            .map_err(|e| Error::InvalidUrl {
                url: addr.clone(),
                reason: e.to_string(),
            })?
            .set_tcp_settings(TcpSettings::default().set_nodelay(true).set_keepalive(keepalive()));
        let client = Client::open(info).map_err(|e| Error::InvalidUrl {
            url: addr.clone(),
            reason: e.to_string(),
        })?;
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_max_delay(Duration::from_secs(1))
            .set_number_of_retries(2);
        let conn = tokio::time::timeout(
            CONNECT_TIMEOUT + Duration::from_secs(1),
            client.get_connection_manager_with_config(config),
        )
        .await
        .map_err(|_| Error::Unreachable {
            addr: addr.clone(),
            reason: format!("no connection within {CONNECT_TIMEOUT:?}"),
        })?
        .map_err(|e| unreachable_or(&addr, "open", e))?;
        let store = Self {
            client,
            conn,
            parkers: Arc::new(Mutex::new(Vec::new())),
            scripts: Arc::new(Scripts::load()),
            addr,
            payload_limit: PAYLOAD_LIMIT_DEFAULT,
        };
        store.check_eviction_policy().await?;
        Ok(store)
    }

    /// Sets the largest payload (and output) accepted, in bytes (default 16 MiB).
    pub fn with_payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = limit;
        self
    }

    /// The address this store talks to (credentials redacted).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn check_eviction_policy(&self) -> Result<()> {
        let mut conn = self.conn.clone();
        let reply: redis::RedisResult<Vec<String>> = redis::cmd("CONFIG")
            .arg("GET")
            .arg("maxmemory-policy")
            .query_async(&mut conn)
            .await;
        match reply {
            Ok(pair) => {
                if let Some(policy) = pair.get(1) {
                    if policy != "noeviction" {
                        tracing::warn!(
                            addr = %self.addr,
                            policy = %policy,
                            "Redis maxmemory-policy is not noeviction: under memory pressure Redis may \
                             silently EVICT JOBS. Set `maxmemory-policy noeviction` on this server."
                        );
                    }
                }
                Ok(())
            }
            Err(e) if is_wire(&e) => Err(unreachable_or(&self.addr, "open", e)),
            // CONFIG is often disabled on managed servers; the warning is best effort.
            Err(e) => {
                tracing::debug!(error = %e, "could not read maxmemory-policy");
                Ok(())
            }
        }
    }

    fn evalsha(script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(&script.sha).arg(keys.len()).arg(keys);
        for a in args {
            cmd.arg(a);
        }
        cmd
    }

    /// Runs one verb's script: `EVALSHA`, and on `NOSCRIPT` a `SCRIPT LOAD` and one resend.
    async fn run(&self, script: &Script, keys: &[String], args: Vec<Vec<u8>>) -> Result<Value> {
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

    /// Loads every script into the server's script cache now, instead of on each script's first use.
    pub async fn preload(&self) -> Result<()> {
        for script in self.scripts.all() {
            self.load(script).await?;
        }
        Ok(())
    }

    async fn load(&self, script: &Script) -> Result<()> {
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
    async fn run_pipelined(
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
    async fn run_calls(&self, calls: Vec<Call<'_>>, extra: Vec<Cmd>) -> Result<Vec<Result<Value>>> {
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

    fn reap_call(&self, k: &QueueKeys, limit: u32) -> Call<'_> {
        Call {
            script: &self.scripts.reap,
            keys: vec![k.active(), k.pending()],
            args: vec![k.base().as_bytes().to_vec(), num(limit)],
        }
    }

    fn sweep_call(&self, k: &QueueKeys, policy: StalledPolicy) -> Call<'_> {
        Call {
            script: &self.scripts.sweep_stalled,
            keys: vec![k.active(), k.pending(), k.dead()],
            args: vec![k.base().as_bytes().to_vec(), num(policy.max_stalled), num(policy.limit)],
        }
    }

    fn promote_call(&self, k: &QueueKeys, limit: u32) -> Call<'_> {
        Call {
            script: &self.scripts.promote,
            keys: vec![k.scheduled(), k.pending(), k.id()],
            args: vec![k.base().as_bytes().to_vec(), num(limit)],
        }
    }

    fn claim_call(
        &self,
        k: &QueueKeys,
        n: usize,
        lease: Duration,
        max_attempts: u32,
        settle: SettleOptions,
    ) -> Call<'_> {
        let [keep, recmax] = Self::settle_args(settle);
        Call {
            script: &self.scripts.claim,
            keys: vec![
                k.ring(),
                k.groups(),
                k.pending(),
                k.active(),
                k.paused(),
                k.obliterating(),
            ],
            args: vec![
                k.base().as_bytes().to_vec(),
                num(n),
                ms(lease),
                num(max_attempts),
                keep,
                recmax,
                num(BATCH_BYTES_MAX),
            ],
        }
    }

    fn error(&self, verb: &'static str, e: RedisError) -> Error {
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

    fn settle_args(settle: SettleOptions) -> [Vec<u8>; 2] {
        [num(settle.retain), num(crate::store::records_maxlen(settle))]
    }

    /// enqueue and genqueue: validated, split in script calls of ≤ 1000 jobs and ≤ 8 MiB, all sent
    /// in one pipeline with the `SADD emq:queues` registration.
    /// complete and complete_cancelled: the holder's settle that finishes a job, with an optional
    /// value (the output, or the reason).
    async fn finish(
        &self,
        script: &Script,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        value: Option<&[u8]>,
        settle: SettleOptions,
    ) -> Result<Settled> {
        let k = QueueKeys::new(queue);
        let [keep, recmax] = Self::settle_args(settle);
        let args = vec![
            k.base().as_bytes().to_vec(),
            id.as_str().as_bytes().to_vec(),
            num(token),
            keep,
            recmax,
            opt_arg(value),
        ];
        let v = self.run(script, &[k.active(), k.job(id)], args).await?;
        Self::settled(script.name, &v)
    }

    async fn new_jobs(&self, queue: &QueueName, group: Option<&GroupName>, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        check_jobs(jobs, self.payload_limit)?;
        if jobs.is_empty() {
            return Ok(Vec::new());
        }
        let k = QueueKeys::new(queue);
        let (script, keys) = match group {
            None => (
                &self.scripts.enqueue,
                vec![
                    k.id(),
                    k.pending(),
                    k.scheduled(),
                    k.ring(),
                    k.groups(),
                    k.wake(),
                    k.obliterating(),
                ],
            ),
            Some(g) => (
                &self.scripts.genqueue,
                vec![
                    k.id(),
                    k.lane(g),
                    k.scheduled(),
                    k.ring(),
                    k.groups(),
                    k.wake(),
                    k.obliterating(),
                ],
            ),
        };
        let mut calls = Vec::new();
        let mut batches = Vec::new();
        for batch in crate::store::bounded(jobs, |j| j.payload.len()) {
            let mut args = Vec::with_capacity(3 + 4 * batch.len());
            args.push(k.base().as_bytes().to_vec());
            if let Some(g) = group {
                args.push(g.as_str().as_bytes().to_vec());
            }
            args.push(num(batch.len()));
            // the plain layout (payloads alone) when no job has an option: a quarter of the arguments
            let plain = batch
                .iter()
                .all(|j| j.id.is_none() && j.max_attempts.is_none() && j.delay.is_none_or(|d| d.as_millis() == 0));
            for job in batch {
                if !plain {
                    args.push(
                        job.id
                            .as_ref()
                            .map(|i| i.as_str().as_bytes().to_vec())
                            .unwrap_or_default(),
                    );
                    args.push(num(job.delay.map(|d| d.as_millis()).unwrap_or(0)));
                    args.push(job.max_attempts.map(num).unwrap_or_default());
                }
                args.push(job.payload.clone());
            }
            calls.push((keys.clone(), args));
            batches.push(batch);
        }
        let mut register = redis::cmd("SADD");
        register.arg(QUEUES_KEY).arg(queue.as_str());
        let replies = self
            .run_pipelined(script, calls, vec![register])
            .await
            .map_err(|e| match e {
                Error::Obliterating { .. } => Error::Obliterating {
                    queue: queue.to_string(),
                },
                other => other,
            })?;
        let verb = script.name;
        let mut out = Vec::with_capacity(jobs.len());
        for (v, batch) in replies.into_iter().zip(batches) {
            // {first sequence, index of each duplicate…}: new jobs take sequences in batch order
            let items = reply::array(verb, v)?;
            let mut items = items.iter();
            let mut seq = reply::int(
                verb,
                items.next().ok_or_else(|| Error::Protocol {
                    verb,
                    reply: "empty".into(),
                })?,
            )?;
            let dups = items
                .map(|i| reply::int(verb, i))
                .collect::<Result<std::collections::HashSet<i64>>>()?;
            for (i, job) in batch.iter().enumerate() {
                if dups.contains(&(i as i64 + 1)) {
                    let id = job.id.clone().ok_or_else(|| Error::Protocol {
                        verb,
                        reply: "a generated id reported duplicate".into(),
                    })?;
                    out.push(Enqueued::Duplicate(id));
                } else {
                    out.push(Enqueued::New(
                        job.id.clone().unwrap_or_else(|| JobId::from_store(seq.to_string())),
                    ));
                    seq += 1;
                }
            }
        }
        Ok(out)
    }

    fn settled(verb: &'static str, v: &Value) -> Result<Settled> {
        match reply::int(verb, v)? {
            1 => Ok(Settled::Ok),
            0 => Ok(Settled::Stale),
            -1 => Ok(Settled::Gone),
            _ => Err(reply::protocol(verb, v)),
        }
    }

    async fn drain_chunk(&self, script: &Script, keys: Vec<String>, base: &str, mid: Vec<Vec<u8>>) -> Result<u64> {
        let mut cursor = b"0".to_vec();
        let mut total = 0u64;
        loop {
            let mut args = vec![base.as_bytes().to_vec()];
            args.extend(mid.iter().cloned());
            args.push(cursor.clone());
            let v = self.run(script, &keys, args).await?;
            let [removed, next, finished] = reply::tuple(script.name, v)?;
            let removed = reply::int(script.name, &removed)?;
            if removed < 0 {
                return Ok(u64::MAX - reply::int(script.name, &next)?.max(0) as u64);
            }
            total += removed as u64;
            cursor = reply::bytes(script.name, next)?;
            if reply::int(script.name, &finished)? == 1 {
                return Ok(total);
            }
        }
    }
}

/// One script call of a pipeline.
struct Call<'a> {
    script: &'a Script,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

/// TCP keepalive for every connection: a peer gone silent (a failover, a partition) is found
/// within about a minute even on a connection that only listens, as the cancel subscription does.
fn keepalive() -> socket2::TcpKeepalive {
    socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(30))
        .with_interval(Duration::from_secs(10))
        .with_retries(3)
}

fn parse_reaped(v: Value) -> Result<u64> {
    Ok(reply::int("reap", &v)?.max(0) as u64)
}

fn parse_swept(v: Value) -> Result<Swept> {
    let verb = "sweep_stalled";
    let [recovered, dead] = reply::tuple(verb, v)?;
    let ids = |v: Value| -> Result<Vec<JobId>> {
        reply::array(verb, v)?
            .into_iter()
            .map(|i| reply::string(verb, i).map(JobId::from_store))
            .collect()
    };
    Ok(Swept {
        recovered: ids(recovered)?,
        dead: ids(dead)?,
    })
}

fn parse_promoted(v: Value) -> Result<Promoted> {
    let [moved, next] = reply::tuple("promote", v)?;
    let next = reply::int("promote", &next)?;
    Ok(Promoted {
        moved: reply::int("promote", &moved)?.max(0) as u64,
        next_due_in: (next >= 0).then(|| Duration::from_millis(next as u64)),
    })
}

/// Appends complete_many's entries for `batch` to `args`, in the fewest arguments the script
/// takes (complete_many.lua's header): the id alone after one shared token when every job of two or more
/// has the same token and no output (a fresh backlog's batch), (id, token) when none has an
/// output, else (id, token, output).
fn settle_entries(batch: &[Completion], args: &mut Vec<Vec<u8>>) {
    let plain = batch.iter().all(|c| c.output.is_none());
    let shared = match batch {
        [first, _, ..] if plain && batch.iter().all(|c| c.token == first.token) => Some(first.token),
        _ => None,
    };
    if let Some(token) = shared {
        args.push(num(token));
    }
    for c in batch {
        args.push(c.id.as_str().as_bytes().to_vec());
        if shared.is_none() {
            args.push(num(c.token));
        }
        if !plain {
            args.push(opt_arg(c.output.as_deref()));
        }
    }
}

/// Appends the claimed jobs of one claim reply to `out`; returns how many. The reply (claim.lua's
/// header): (id, payload) per job, then an empty array when every job is a flat one on its first
/// attempt, else (attempts, group) per job.
fn parse_claimed(v: Value, out: &mut Vec<ClaimedJob>) -> Result<usize> {
    let verb = "claim";
    let mut items = reply::array(verb, v)?;
    let Some(more) = items.pop() else { return Ok(0) };
    let more = reply::array(verb, more)?;
    let got = items.len() / 2;
    if items.len() % 2 != 0 || !(more.is_empty() || more.len() == items.len()) {
        return Err(Error::Protocol {
            verb,
            reply: format!("{} job elements and {} attempt/group elements", items.len(), more.len()),
        });
    }
    let mut more = more.into_iter();
    let mut it = items.into_iter();
    while let (Some(id), Some(payload)) = (it.next(), it.next()) {
        let (attempts, group) = match (more.next(), more.next()) {
            (Some(att), Some(group)) => (
                u64::try_from(reply::int(verb, &att)?).map_err(|_| reply::protocol(verb, &att))?,
                // a ring member that is no valid name (the keyspace edited by hand) is the
                // handler's information only, as on the embedded store: it must not fail the
                // batch, whose jobs are leased already and would wait out their leases (the
                // settles read the row's group)
                GroupName::new(reply::string(verb, group)?).ok(),
            ),
            _ => (1, None),
        };
        out.push(ClaimedJob {
            id: JobId::from_store(reply::string(verb, id)?),
            payload: reply::bytes(verb, payload)?,
            attempts,
            group,
        });
    }
    Ok(got)
}

fn num(n: impl std::fmt::Display) -> Vec<u8> {
    n.to_string().into_bytes()
}

fn opt_arg(v: Option<&[u8]>) -> Vec<u8> {
    match v {
        None => Vec::new(),
        Some(b) => {
            let mut out = Vec::with_capacity(b.len() + 1);
            out.push(b'+');
            out.extend_from_slice(b);
            out
        }
    }
}

fn ms(d: Duration) -> Vec<u8> {
    num(d.as_millis())
}

fn is_wire(e: &RedisError) -> bool {
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

fn unreachable_or(addr: &str, verb: &'static str, e: RedisError) -> Error {
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

#[async_trait]
impl Store for RedisStore {
    async fn enqueue(&self, queue: &QueueName, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        self.new_jobs(queue, None, jobs).await
    }

    async fn genqueue(&self, queue: &QueueName, group: &GroupName, jobs: &[NewJob]) -> Result<Vec<Enqueued>> {
        self.new_jobs(queue, Some(group), jobs).await
    }

    async fn claim(
        &self,
        queue: &QueueName,
        n: u32,
        lease: Duration,
        max_attempts: u32,
        settle: SettleOptions,
    ) -> Result<Vec<ClaimedJob>> {
        positive("n", n as u64)?;
        check_claim(lease, max_attempts)?;
        let k = QueueKeys::new(queue);
        let mut out = Vec::new();
        let mut left = n as usize;
        while left > 0 {
            let take = left.min(BATCH_MAX);
            let call = self.claim_call(&k, take, lease, max_attempts, settle);
            let v = self.run(call.script, &call.keys, call.args).await?;
            let got = parse_claimed(v, &mut out)?;
            if got < take {
                break;
            }
            left -= take;
        }
        Ok(out)
    }

    async fn complete(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        output: Option<&[u8]>,
        settle: SettleOptions,
    ) -> Result<Settled> {
        if let Some(o) = output {
            check_payload(o.len(), self.payload_limit)?;
        }
        self.finish(&self.scripts.complete, queue, id, token, output, settle)
            .await
    }

    async fn complete_many(
        &self,
        queue: &QueueName,
        jobs: &[Completion],
        settle: SettleOptions,
    ) -> Result<Vec<Settled>> {
        let k = QueueKeys::new(queue);
        let mut calls = Vec::new();
        for batch in crate::store::bounded(jobs, |c| c.output.as_ref().map_or(0, Vec::len)) {
            let [keep, recmax] = Self::settle_args(settle);
            for c in batch {
                if let Some(o) = &c.output {
                    check_payload(o.len(), self.payload_limit)?;
                }
            }
            let mut args = Vec::with_capacity(5 + batch.len() * 3);
            args.extend([k.base().as_bytes().to_vec(), num(batch.len()), keep, recmax]);
            settle_entries(batch, &mut args);
            calls.push((vec![k.active()], args));
        }
        if calls.is_empty() {
            return Ok(Vec::new());
        }
        let mut out = Vec::with_capacity(jobs.len());
        for v in self
            .run_pipelined(&self.scripts.complete_many, calls, Vec::new())
            .await?
        {
            for code in reply::array("complete_many", v)? {
                out.push(Self::settled("complete_many", &code)?);
            }
        }
        Ok(out)
    }

    async fn complete_cancelled(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        reason: Option<&str>,
        settle: SettleOptions,
    ) -> Result<Settled> {
        self.finish(
            &self.scripts.complete_cancelled,
            queue,
            id,
            token,
            reason.map(str::as_bytes),
            settle,
        )
        .await
    }

    async fn retry(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        delay: Duration,
        max_attempts: u32,
        error: &str,
        settle: SettleOptions,
    ) -> Result<Retried> {
        positive("max_attempts", max_attempts as u64)?;
        millis("delay", delay)?;
        let k = QueueKeys::new(queue);
        let [_, recmax] = Self::settle_args(settle);
        let v = self
            .run(
                &self.scripts.retry,
                &[k.active(), k.job(id), k.scheduled(), k.dead()],
                vec![
                    k.base().as_bytes().to_vec(),
                    id.as_str().as_bytes().to_vec(),
                    num(token),
                    ms(delay),
                    num(max_attempts),
                    error.as_bytes().to_vec(),
                    recmax,
                ],
            )
            .await?;
        match reply::int("retry", &v)? {
            1 => Ok(Retried::Retrying),
            2 => Ok(Retried::Dead),
            0 => Ok(Retried::Stale),
            -1 => Ok(Retried::Gone),
            _ => Err(reply::protocol("retry", &v)),
        }
    }

    async fn discard(
        &self,
        queue: &QueueName,
        id: &JobId,
        token: u64,
        error: &str,
        settle: SettleOptions,
    ) -> Result<Discarded> {
        let k = QueueKeys::new(queue);
        let [_, recmax] = Self::settle_args(settle);
        let v = self
            .run(
                &self.scripts.discard,
                &[k.active(), k.job(id), k.dead()],
                vec![
                    k.base().as_bytes().to_vec(),
                    id.as_str().as_bytes().to_vec(),
                    num(token),
                    error.as_bytes().to_vec(),
                    recmax,
                ],
            )
            .await?;
        match reply::int("discard", &v)? {
            2 => Ok(Discarded::Dead),
            0 => Ok(Discarded::Stale),
            -1 => Ok(Discarded::Gone),
            _ => Err(reply::protocol("discard", &v)),
        }
    }

    async fn reap(&self, queue: &QueueName, limit: u32) -> Result<u64> {
        positive("limit", limit as u64)?;
        let call = self.reap_call(&QueueKeys::new(queue), limit);
        parse_reaped(self.run(call.script, &call.keys, call.args).await?)
    }

    async fn sweep_stalled(&self, queue: &QueueName, policy: StalledPolicy) -> Result<Swept> {
        positive("max_stalled", policy.max_stalled as u64)?;
        positive("limit", policy.limit as u64)?;
        let call = self.sweep_call(&QueueKeys::new(queue), policy);
        parse_swept(self.run(call.script, &call.keys, call.args).await?)
    }

    async fn promote(&self, queue: &QueueName, limit: u32) -> Result<Promoted> {
        positive("limit", limit as u64)?;
        let call = self.promote_call(&QueueKeys::new(queue), limit);
        parse_promoted(self.run(call.script, &call.keys, call.args).await?)
    }

    async fn recover_promote_claim(
        &self,
        queue: &QueueName,
        recovery: Recovery,
        pump: u32,
        claim: ClaimRequest,
    ) -> Result<Round> {
        positive("pump", pump as u64)?;
        let k = QueueKeys::new(queue);
        let mut calls = Vec::with_capacity(3);
        match recovery {
            Recovery::Off => {}
            Recovery::Reap => calls.push(self.reap_call(&k, crate::store::REAP_LIMIT)),
            Recovery::Stalled(policy) => calls.push(self.sweep_call(&k, policy)),
        }
        calls.push(self.promote_call(&k, pump));
        if claim.n > 0 {
            check_claim(claim.lease, claim.max_attempts)?;
            let n = (claim.n as usize).min(BATCH_MAX);
            calls.push(self.claim_call(&k, n, claim.lease, claim.max_attempts, claim.settle));
        }
        let mut replies = self.run_calls(calls, Vec::new()).await?.into_iter();
        let mut next = || {
            replies.next().unwrap_or_else(|| {
                Err(Error::Protocol {
                    verb: "recover_promote_claim",
                    reply: "fewer replies than calls".into(),
                })
            })
        };
        let recovered = match recovery {
            Recovery::Off => Ok(()),
            Recovery::Reap => next().and_then(parse_reaped).map(drop),
            Recovery::Stalled(_) => next().and_then(parse_swept).map(drop),
        };
        let promoted = next().and_then(parse_promoted);
        let claimed = if claim.n > 0 {
            next().and_then(|v| {
                let mut out = Vec::new();
                parse_claimed(v, &mut out).map(|_| out)
            })
        } else {
            Ok(Vec::new())
        };
        Ok(Round {
            recovered,
            promoted,
            claimed,
        })
    }

    async fn extend_lock(&self, queue: &QueueName, id: &JobId, token: u64, lease: Duration) -> Result<Extended> {
        positive("lease", millis("lease", lease)?)?;
        let k = QueueKeys::new(queue);
        let cmd = Self::evalsha(
            &self.scripts.extend_lock,
            &[k.active(), k.job(id)],
            vec![id.as_str().as_bytes().to_vec(), num(token), ms(lease)],
        );
        let mut conn = self.conn.clone();
        let mut result = cmd.query_async::<Value>(&mut conn).await;
        if matches!(&result, Err(e) if e.kind() == ErrorKind::Server(redis::ServerErrorKind::NoScript)) {
            self.load(&self.scripts.extend_lock).await?;
            result = cmd.query_async::<Value>(&mut conn).await;
        }
        match result {
            Ok(v) => match reply::int("extend_lock", &v)? {
                1 => Ok(Extended::Ok),
                -1 => Ok(Extended::Gone),
                _ => Err(reply::protocol("extend_lock", &v)),
            },
            Err(e) if e.code() == Some("EMQSTALE") => Ok(Extended::Stale),
            Err(e) => Err(self.error("extend_lock", e)),
        }
    }

    async fn update_data(&self, queue: &QueueName, id: &JobId, token: u64, payload: &[u8]) -> Result<Settled> {
        check_payload(payload.len(), self.payload_limit)?;
        let k = QueueKeys::new(queue);
        let v = self
            .run(
                &self.scripts.update_data,
                &[k.active(), k.job(id)],
                vec![id.as_str().as_bytes().to_vec(), num(token), payload.to_vec()],
            )
            .await?;
        Self::settled("update_data", &v)
    }

    async fn pause(&self, queue: &QueueName) -> Result<()> {
        let k = QueueKeys::new(queue);
        self.run(&self.scripts.pause, &[k.paused()], Vec::new()).await?;
        Ok(())
    }

    async fn resume(&self, queue: &QueueName) -> Result<()> {
        let k = QueueKeys::new(queue);
        self.run(
            &self.scripts.resume,
            &[k.paused(), k.pending(), k.ring()],
            vec![k.base().as_bytes().to_vec()],
        )
        .await?;
        Ok(())
    }

    async fn drain(&self, queue: &QueueName) -> Result<u64> {
        let k = QueueKeys::new(queue);
        self.drain_chunk(
            &self.scripts.drain,
            vec![k.pending(), k.scheduled(), k.groups()],
            k.base(),
            vec![num(CHUNK_DEFAULT)],
        )
        .await
    }

    async fn obliterate(&self, queue: &QueueName, force: bool) -> Result<Obliterated> {
        let k = QueueKeys::new(queue);
        let keys = vec![
            k.active(),
            k.obliterating(),
            k.pending(),
            k.scheduled(),
            k.dead(),
            k.completed(),
            k.groups(),
        ];
        let removed = self
            .drain_chunk(
                &self.scripts.obliterate,
                keys,
                k.base(),
                vec![num(u8::from(force)), num(CHUNK_DEFAULT)],
            )
            .await?;
        if removed > u64::MAX / 2 {
            return Ok(Obliterated::Active {
                active: u64::MAX - removed,
            });
        }
        // the registration goes with the queue's last key. An enqueue that landed after the last
        // chunk (the mark gone) registered the queue with its own SADD, which this SREM may undo:
        // the id counter that enqueue made says so, and the queue is registered again
        let mut conn = self.conn.clone();
        let (recreated,): (bool,) = redis::pipe()
            .cmd("SREM")
            .arg(QUEUES_KEY)
            .arg(queue.as_str())
            .ignore()
            .cmd("EXISTS")
            .arg(k.id())
            .query_async(&mut conn)
            .await
            .map_err(|e| self.error("obliterate", e))?;
        if recreated {
            redis::cmd("SADD")
                .arg(QUEUES_KEY)
                .arg(queue.as_str())
                .query_async::<Value>(&mut conn)
                .await
                .map_err(|e| self.error("obliterate", e))?;
        }
        Ok(Obliterated::Done { removed })
    }

    async fn get(&self, queue: &QueueName, id: &JobId) -> Result<Option<Job>> {
        let k = QueueKeys::new(queue);
        let verb = "get";
        let v = self
            .run(
                &self.scripts.get,
                &[k.job(id), k.active(), k.scheduled(), k.dead(), k.completed()],
                vec![id.as_str().as_bytes().to_vec()],
            )
            .await?;
        let mut items = reply::array(verb, v)?;
        let Some(score) = items.pop() else {
            return Ok(None);
        };
        let score = reply::string(verb, score)?;
        let mut job = Job {
            id: id.clone(),
            state: JobState::Pending,
            payload: Vec::new(),
            attempts: 0,
            max_attempts: None,
            group: None,
            run_at: None,
            stalled: 0,
            last_error: None,
            cancel: None,
            output: None,
            finished_at: None,
            score: score.parse::<f64>().ok().map(|s| s as u64),
        };
        let mut it = items.into_iter();
        let bad = |field: &str| Error::Protocol {
            verb,
            reply: format!("malformed field {field} in the row of job {id}"),
        };
        while let (Some(f), Some(val)) = (it.next(), it.next()) {
            let f = reply::string(verb, f)?;
            let val = reply::bytes(verb, val)?;
            let text = || String::from_utf8_lossy(&val).into_owned();
            let int = || text().parse::<u64>().map_err(|_| bad(&f));
            match f.as_str() {
                "data" => job.payload = val.clone(),
                "state" => job.state = JobState::parse(&text()).ok_or_else(|| bad(&f))?,
                "attempts" => job.attempts = int()?,
                "max_attempts" => job.max_attempts = Some(int()?),
                "group" => job.group = Some(GroupName::new(text())?),
                "run_at" => job.run_at = Some(int()?),
                "stalled" => job.stalled = int()?,
                "last_error" => job.last_error = Some(text()),
                "cancel" => job.cancel = Some(text()),
                "output" => job.output = Some(val.clone()),
                "finished_at" => job.finished_at = Some(int()?),
                _ => {}
            }
        }
        Ok(Some(job))
    }

    async fn remove(&self, queue: &QueueName, id: &JobId, force: bool) -> Result<Removed> {
        let k = QueueKeys::new(queue);
        let v = self
            .run(
                &self.scripts.remove,
                &[k.job(id), k.active()],
                vec![
                    k.base().as_bytes().to_vec(),
                    id.as_str().as_bytes().to_vec(),
                    num(u8::from(force)),
                ],
            )
            .await?;
        match reply::int("remove", &v)? {
            1 => Ok(Removed::Removed),
            0 => Ok(Removed::Active),
            -1 => Ok(Removed::Gone),
            _ => Err(reply::protocol("remove", &v)),
        }
    }

    async fn redrive(&self, queue: &QueueName, id: &JobId, extra: u32) -> Result<Redriven> {
        positive("extra", extra as u64)?;
        let k = QueueKeys::new(queue);
        let v = self
            .run(
                &self.scripts.redrive,
                &[k.dead(), k.pending()],
                vec![
                    k.base().as_bytes().to_vec(),
                    b"one".to_vec(),
                    id.as_str().as_bytes().to_vec(),
                    num(extra),
                ],
            )
            .await?;
        match reply::int("redrive", &v)? {
            1 => Ok(Redriven::Redriven),
            0 => Ok(Redriven::NotDead),
            -1 => Ok(Redriven::Gone),
            _ => Err(reply::protocol("redrive", &v)),
        }
    }

    async fn redrive_all(&self, queue: &QueueName, extra: u32) -> Result<u64> {
        positive("extra", extra as u64)?;
        let k = QueueKeys::new(queue);
        let mut total = 0;
        loop {
            let v = self
                .run(
                    &self.scripts.redrive,
                    &[k.dead(), k.pending()],
                    vec![
                        k.base().as_bytes().to_vec(),
                        b"all".to_vec(),
                        num(CHUNK_DEFAULT),
                        num(extra),
                    ],
                )
                .await?;
            let [done, seen] = reply::tuple("redrive", v)?;
            total += reply::int("redrive", &done)?.max(0) as u64;
            if reply::int("redrive", &seen)? == 0 {
                return Ok(total);
            }
        }
    }

    async fn promote_job(&self, queue: &QueueName, id: &JobId) -> Result<PromotedJob> {
        let k = QueueKeys::new(queue);
        let v = self
            .run(
                &self.scripts.promote_job,
                &[k.job(id), k.scheduled()],
                vec![k.base().as_bytes().to_vec(), id.as_str().as_bytes().to_vec()],
            )
            .await?;
        match reply::int("promote_job", &v)? {
            1 => Ok(PromotedJob::Promoted),
            0 => Ok(PromotedJob::NotScheduled),
            -1 => Ok(PromotedJob::Gone),
            _ => Err(reply::protocol("promote_job", &v)),
        }
    }

    async fn cancel(
        &self,
        queue: &QueueName,
        id: &JobId,
        reason: Option<&str>,
        settle: SettleOptions,
    ) -> Result<Cancelled> {
        let k = QueueKeys::new(queue);
        let [keep, recmax] = Self::settle_args(settle);
        let v = self
            .run(
                &self.scripts.cancel,
                &[k.job(id), k.cancel()],
                vec![
                    k.base().as_bytes().to_vec(),
                    id.as_str().as_bytes().to_vec(),
                    opt_arg(reason.map(str::as_bytes)),
                    keep,
                    recmax,
                ],
            )
            .await?;
        match reply::int("cancel", &v)? {
            1 => Ok(Cancelled::Cancelled),
            2 => Ok(Cancelled::Requested),
            0 => Ok(Cancelled::Finished),
            -1 => Ok(Cancelled::Gone),
            _ => Err(reply::protocol("cancel", &v)),
        }
    }

    async fn set_group_limit(&self, queue: &QueueName, target: &LimitTarget, limit: u32) -> Result<()> {
        positive("limit", limit as u64)?;
        let k = QueueKeys::new(queue);
        let group = match target {
            LimitTarget::Group(g) => g.as_str().as_bytes().to_vec(),
            LimitTarget::Default => Vec::new(),
        };
        self.run(
            &self.scripts.set_group_limit,
            &[k.groups()],
            vec![k.base().as_bytes().to_vec(), group, num(limit)],
        )
        .await?;
        Ok(())
    }

    async fn counts(&self, queue: &QueueName) -> Result<Counts> {
        let k = QueueKeys::new(queue);
        let verb = "counts";
        let keys = [k.pending(), k.scheduled(), k.active(), k.dead(), k.paused(), k.groups()];
        let mut cursor = b"0".to_vec();
        let mut lanes = std::collections::HashMap::new();
        loop {
            let v = self
                .run(&self.scripts.counts, &keys, vec![k.base().as_bytes().to_vec(), cursor])
                .await?;
            let items = reply::array(verb, v)?;
            let [pending, scheduled, active, dead, paused, completed, cancelled, failed, retried, stalled, reaped, next, groups] =
                <[Value; 13]>::try_from(items).map_err(|_| Error::Protocol {
                    verb,
                    reply: "counts shape".into(),
                })?;
            let mut g = reply::array(verb, groups)?.into_iter();
            while let (Some(name), Some(len)) = (g.next(), g.next()) {
                lanes.insert(reply::bytes(verb, name)?, reply::int(verb, &len)?.max(0) as u64);
            }
            cursor = reply::bytes(verb, next)?;
            if cursor == b"0" {
                let n = |v: &Value| reply::int(verb, v).map(|i| i.max(0) as u64);
                return Ok(Counts {
                    pending: n(&pending)? + lanes.values().sum::<u64>(),
                    scheduled: n(&scheduled)?,
                    active: n(&active)?,
                    dead: n(&dead)?,
                    completed: n(&completed)?,
                    cancelled: n(&cancelled)?,
                    failed: n(&failed)?,
                    retried: n(&retried)?,
                    stalled: n(&stalled)?,
                    reaped: n(&reaped)?,
                    paused: n(&paused)? == 1,
                });
            }
        }
    }

    async fn list(&self, queue: &QueueName, state: JobState, offset: u64, limit: u32) -> Result<Vec<JobId>> {
        check_list_limit(limit)?;
        let k = QueueKeys::new(queue);
        let v = self
            .run(
                &self.scripts.list,
                &[
                    k.pending(),
                    k.scheduled(),
                    k.active(),
                    k.dead(),
                    k.completed(),
                    k.ring(),
                ],
                vec![
                    k.base().as_bytes().to_vec(),
                    state.as_str().as_bytes().to_vec(),
                    num(offset),
                    num(limit),
                ],
            )
            .await?;
        reply::array("list", v)?
            .into_iter()
            .map(|i| reply::string("list", i).map(JobId::from_store))
            .collect()
    }

    async fn queues(&self) -> Result<Vec<QueueName>> {
        let v = self
            .run(&self.scripts.queues, &[QUEUES_KEY.to_string()], Vec::new())
            .await?;
        let mut names = Vec::new();
        for item in reply::array("queues", v)? {
            // A foreign member someone added by hand is skipped, not fatal to listing.
            if let Some(q) = reply::string("queues", item).ok().and_then(|n| QueueName::new(n).ok()) {
                names.push(q);
            }
        }
        names.sort();
        Ok(names)
    }

    async fn park(&self, queue: &QueueName, timeout: Duration) -> Result<bool> {
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

    async fn cancel_requests(&self, queue: &QueueName) -> Result<BoxStream<'static, CancelRequest>> {
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
