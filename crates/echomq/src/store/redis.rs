//! `RedisStore`: every verb as one Lua script (`scripts/<verb>.lua`) run by `EVALSHA`, with a
//! transparent reload on `NOSCRIPT` (per entry in pipelines).
//!
//! Connections: one shared, multiplexed [`ConnectionManager`] per server carries every script
//! (concurrent callers pipeline on it), made by [`RedisStore::open`] or, for a store opened with
//! [`RedisStore::open_lazy`], by the first verb that reaches the server; on a Redis Cluster one
//! per master, each call sent to the master of its queue's hash slot (`redis/topology.rs`); parks
//! run `BLPOP` on dedicated connections of their own to that server (a blocking command holds its
//! connection for the whole block, so parking on the shared one would stall every other caller);
//! cancel requests arrive on a pub/sub connection per subscriber (sharded pub/sub on a cluster);
//! the finishes of waited jobs on one pub/sub connection per queue, shared by every wait
//! (`redis/wait.rs`).
//!
//! Layout: this file holds the store, its options, its park and its subscriptions; each verb is
//! written once above the engines (`store/verbs/<verb>.rs`: its KEYS and ARGV, and the reading of
//! its reply), and this store is their engine: `redis/connection.rs` sends the scripts and maps
//! their errors, `redis/reply.rs` turns the client's values into the engines' replies,
//! `redis/url.rs` reads the URL, `redis/wait.rs` subscribes to the finishes of waited jobs.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::BoxStream;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use redis::{ConnectionInfo, IntoConnectionInfo};
use tokio::sync::Mutex;

use crate::error::{Error, Result};
use crate::keyspace::QueueName;
use crate::store::{CancelRequest, PAYLOAD_LIMIT_DEFAULT};

mod connection;
mod reply;

mod topology;
mod url;

mod wait;

use crate::store::scripts::Scripts;
pub use crate::store::scripts::{script_body, VERBS};
use topology::{Cluster, Node, Topology};

/// How long a connect may take before the store is declared unreachable.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// The response timeout of the shared connection (the client's default of 500 ms is too short for a
/// batch of 1000 large payloads on a busy server).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::store::BATCH_BYTES_MAX;

/// The Redis/Valkey store. Cheap to clone: clones share the connections and the parking pool.
#[derive(Clone)]
pub struct RedisStore {
    /// The servers named by the URL: one, or a cluster's seed nodes.
    seeds: Arc<Vec<ConnectionInfo>>,
    /// The URL asked for a cluster (`redis+cluster://`); a plain URL to a cluster node finds out
    /// on connecting.
    cluster_url: bool,
    /// The servers, found once: a failed attempt leaves the cell empty, and the next verb tries
    /// again (so a store opened while the server is down works once it is up).
    topology: Arc<tokio::sync::OnceCell<Topology>>,
    /// How each shared connection is made and kept.
    conn_config: ConnectionManagerConfig,
    /// Idle parking connections, by node. A park takes one (or opens one) for the length of its
    /// BLPOP, so two consumers never share one and no script waits behind a park.
    parkers: Arc<Mutex<HashMap<Arc<str>, Vec<connection::Parker>>>>,
    scripts: Arc<Scripts>,
    /// The shared subscriptions to the queues' finished channels (`JobHandle::wait`).
    waits: Arc<wait::Waits>,
    addr: String,
    payload_limit: usize,
    /// Every write confirmed by this many replicas before it returns (`wait_replicas`).
    wait: Option<WaitReplicas>,
}

/// How many replicas must confirm a write, and how long the server waits for them (`WAIT`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WaitReplicas {
    /// Replicas that must have the write.
    pub replicas: u32,
    /// How long the server waits for them before the write is reported unconfirmed.
    pub timeout: Duration,
}

/// The `WAIT` timeout when a URL's `?wait=N` gives none (`&wait_timeout=MS`).
pub const WAIT_TIMEOUT_DEFAULT: Duration = Duration::from_secs(1);

/// The longest `WAIT` timeout: half the shared connection's [`RESPONSE_TIMEOUT`]. A `WAIT` holds
/// up the connection it rides (every caller of that master queues behind it), so a longer one
/// would end the writes behind it as timeouts instead of [`Error::NotReplicated`].
pub const WAIT_TIMEOUT_MAX: Duration = Duration::from_secs(5);

impl std::fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisStore")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// Connects to `redis://[user:password@]host:port[/db]` or `rediss://…` (TLS), or to a Redis
    /// Cluster through its seed nodes, `redis+cluster://[user:password@]host:port[,host:port…]`
    /// (`rediss+cluster://` for TLS); a plain URL that reaches a node of a cluster uses the cluster
    /// too. `?wait=N[&wait_timeout=MS]` sets [`wait_replicas`](Self::wait_replicas). Fails within
    /// [`CONNECT_TIMEOUT`] when the server cannot be reached ([`Error::Unreachable`]), and at once
    /// when it refuses this client in a way no retry mends ([`Error::Misconfigured`]: a password
    /// missing or refused, a certificate refused, a server that does not speak Redis). Warns
    /// loudly when a server's `maxmemory-policy` is not `noeviction` (any other policy can
    /// silently evict jobs).
    pub async fn open(url: &str) -> Result<Self> {
        let store = Self::open_lazy(url)?;
        store.topology().await?;
        Ok(store)
    }

    /// [`open`](Self::open) without connecting: only the URL is checked now, and the first verb
    /// that reaches the server connects (each verb before then fails as `open` would, so a
    /// consumer on this store waits out a server that is down at start-up as it waits out any
    /// outage). For workers; a producer wants `open`, which fails at once.
    pub fn open_lazy(url: &str) -> Result<Self> {
        let addr = super::redact_url(url);
        let target = url::parse(url).map_err(|reason| Error::InvalidUrl {
            url: addr.clone(),
            reason,
        })?;
        if target.tls {
            // A second install attempt is refused; either way a provider is installed.
            let _ = rustls::crypto::ring::default_provider().install_default();
        }
        let mut seeds = Vec::with_capacity(target.seeds.len());
        for seed in &target.seeds {
            let info = seed
                .as_str()
                .into_connection_info()
                .map_err(|e| Error::InvalidUrl {
                    url: addr.clone(),
                    reason: e.to_string(),
                })?
                .set_tcp_settings(
                    TcpSettings::default()
                        .set_nodelay(true)
                        .set_keepalive(connection::keepalive()),
                );
            seeds.push(info);
        }
        let conn_config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(Some(RESPONSE_TIMEOUT))
            .set_max_delay(Duration::from_secs(1))
            .set_number_of_retries(2);
        Ok(Self {
            seeds: Arc::new(seeds),
            cluster_url: target.cluster,
            topology: Arc::default(),
            conn_config,
            parkers: Arc::default(),
            scripts: Arc::new(Scripts::load()),
            waits: Arc::default(),
            addr,
            payload_limit: PAYLOAD_LIMIT_DEFAULT,
            wait: target.wait,
        })
    }

    /// The servers, found now when no verb has found them yet (concurrent callers wait for one
    /// attempt). Each server's eviction policy is checked on its connection's first making.
    async fn topology(&self) -> Result<&Topology> {
        self.topology.get_or_try_init(|| self.connect()).await
    }

    async fn connect(&self) -> Result<Topology> {
        let first = self.seeds.first().cloned().ok_or_else(|| Error::InvalidUrl {
            url: self.addr.clone(),
            reason: "no server named".into(),
        })?;
        let seed_addrs = || {
            self.seeds
                .iter()
                .filter_map(|s| topology::host_port(s.addr()))
                .collect()
        };
        if self.cluster_url {
            let cluster = Cluster::open(first, self.conn_config.clone(), seed_addrs(), None).await?;
            return Ok(Topology::Cluster(cluster));
        }
        let (client, mut conn) = topology::connect(first.clone(), &self.conn_config, &self.addr).await?;
        if topology::cluster_enabled(&mut conn, &self.addr).await? {
            let addrs: Vec<String> = seed_addrs();
            let node = addrs.first().map(|a| Node {
                addr: Arc::from(a.as_str()),
                client: client.clone(),
                conn: conn.clone(),
            });
            let cluster = Cluster::open(first, self.conn_config.clone(), addrs, node).await?;
            return Ok(Topology::Cluster(cluster));
        }
        Ok(Topology::Single(Node {
            addr: Arc::from(self.addr.as_str()),
            client,
            conn,
        }))
    }

    /// The server that holds `key`: the one server, or the master of the key's slot.
    async fn node_for(&self, key: &str) -> Result<Node> {
        match self.topology().await? {
            Topology::Single(node) => Ok(node.clone()),
            Topology::Cluster(c) => c.node_for(topology::slot(key)).await,
        }
    }

    /// The `host:port` of the server that holds `queue`: the one server, or on a cluster the
    /// master of the queue's hash slot now (for tools that read that server's own figures).
    pub async fn server_of(&self, queue: &QueueName) -> Result<String> {
        let node = self.node_for(&crate::keyspace::QueueKeys::new(queue).id()).await?;
        if self.is_cluster() {
            return Ok(node.addr.to_string());
        }
        Ok(self
            .seeds
            .first()
            .and_then(|s| topology::host_port(s.addr()))
            .unwrap_or_else(|| node.addr.to_string()))
    }

    /// Whether the store talks to a Redis Cluster (found on connecting; `false` before).
    pub fn is_cluster(&self) -> bool {
        matches!(self.topology.get(), Some(Topology::Cluster(_)))
    }

    /// Sets the largest payload (and output) accepted, in bytes (default 16 MiB).
    pub fn with_payload_limit(mut self, limit: usize) -> Self {
        self.payload_limit = limit;
        self
    }

    /// Makes every write — an enqueue, a claim, a settle, any verb that changes the queue — return
    /// only once `replicas` replicas of the master that took it confirm they have it (`WAIT`,
    /// sent right after the write on the same connection), or fail with
    /// [`Error::NotReplicated`] when they do not within `timeout`. Redis replicates
    /// asynchronously: without this, a write acknowledged just before its master dies can vanish
    /// in the failover (an enqueued job lost; a claim lost, so the new master hands out the same
    /// fencing token again). `replicas` 0 turns it off. Each write then costs the replicas' round
    /// trip (see the guide's durability table, `guide::redis`), and the `WAIT` holds up that master's shared
    /// connection while it waits. `timeout` is kept from 1 ms (the server's `WAIT n 0` would wait
    /// for ever) to [`WAIT_TIMEOUT_MAX`]. A failover keeps an acknowledged write when the replica
    /// promoted is one that confirmed it: with one replica per master, always; with more, wait
    /// for as many as may be promoted.
    pub fn wait_replicas(mut self, replicas: u32, timeout: Duration) -> Self {
        let timeout = timeout.clamp(Duration::from_millis(1), WAIT_TIMEOUT_MAX);
        self.wait = (replicas > 0).then_some(WaitReplicas { replicas, timeout });
        self
    }

    /// The replicas every write waits for, if any.
    pub fn waits_for(&self) -> Option<WaitReplicas> {
        self.wait
    }

    /// The address this store talks to (credentials redacted).
    pub fn addr(&self) -> &str {
        &self.addr
    }

    /// Loads every script into the script cache of every master now, instead of on each script's
    /// first use.
    pub async fn preload(&self) -> Result<()> {
        let nodes = match self.topology().await? {
            Topology::Single(node) => vec![node.clone()],
            Topology::Cluster(c) => c.masters().await?,
        };
        for node in nodes {
            for script in self.scripts.all() {
                self.load(&node, script).await?;
            }
        }
        Ok(())
    }
}

/// Warns when the server may evict jobs. Its `CONFIG GET` is a connection's first command: a
/// server that refuses this client (a password missing or refused, a reply that is not Redis)
/// fails the connect here; one that only denies `CONFIG` (managed servers) does not. `shown` names
/// the server.
pub(super) async fn check_eviction_policy(mut conn: ConnectionManager, shown: &str) -> Result<()> {
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
                        addr = %shown,
                        policy = %policy,
                        "Redis maxmemory-policy is not noeviction: under memory pressure Redis may \
                         silently EVICT JOBS. Set `maxmemory-policy noeviction` on this server."
                    );
                }
            }
            Ok(())
        }
        // CONFIG is often disabled on managed servers (an ACL's NOPERM, a renamed command): the
        // warning is best effort, and a user denied a verb's own commands learns it there
        Err(e) if connection::is_wire(&e) || connection::misconfigured(&e).is_some() && e.code() != Some("NOPERM") => {
            Err(connection::unreachable_or(shown, "open", e))
        }
        Err(e) => {
            tracing::debug!(error = %e, "could not read maxmemory-policy");
            Ok(())
        }
    }
}

crate::store::verbs::script_store!(RedisStore, {
    async fn finished_waits(&self, queue: &QueueName) -> Result<BoxStream<'static, Option<JobId>>> {
        wait::finished_waits(self, queue).await
    }

    async fn park(&self, queue: &QueueName, kinds: &crate::store::Kinds, timeout: Duration) -> Result<bool> {
        self.park_on_own_connection(queue, kinds, timeout).await
    }

    /// Four: a consumer's round trips wait on the network and on Redis's one thread, so with two
    /// out Redis idles while the consumer turns a reply around; with four it stays busy (the
    /// smaller batches cost less than the idle time).
    fn settle_round_trips(&self) -> usize {
        4
    }

    async fn cancel_requests(&self, queue: &QueueName) -> Result<BoxStream<'static, CancelRequest>> {
        self.subscribe_cancels(queue).await
    }
});
