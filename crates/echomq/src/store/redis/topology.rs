//! Where a command goes. A standalone server takes every command. On a Redis Cluster every key
//! has a hash slot (CRC16 of its `{tag}`, modulo 16384) owned by one master; all keys of a queue
//! share the tag `{q}`, so a queue's slot — and every script call, park and subscription of it —
//! lives on one master, and `emq:queues` on the master of its own slot. The slot map comes from
//! `CLUSTER SLOTS`, asked of any node that answers; it is refreshed after a `MOVED`, a
//! `CLUSTERDOWN` and any outage (a failover shows as one), so a consumer follows a slot to its new
//! master by itself.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{Client, ConnectionAddr, ConnectionInfo, Value};
use tokio::sync::OnceCell;

use super::connection;
use super::CONNECT_TIMEOUT;
use crate::error::{Error, Result};

/// The number of hash slots of a Redis Cluster.
const SLOTS: u16 = 16384;

/// How long one node may take to answer `CLUSTER SLOTS` before the next is asked.
const SLOTS_TIMEOUT: Duration = Duration::from_secs(2);

/// The hash tag of `key`: the text between its first `{` and the first `}` after it, when that is
/// not empty; else the whole key. Keys that share a tag share a slot.
pub(super) fn hash_tag(key: &str) -> &str {
    key.find('{')
        .and_then(|open| {
            let rest = &key[open + 1..];
            rest.find('}').filter(|&close| close > 0).map(|close| &rest[..close])
        })
        .unwrap_or(key)
}

/// The hash slot of `key`: CRC16 (XMODEM) of its [`hash_tag`], modulo 16384.
pub(crate) fn slot(key: &str) -> u16 {
    crc16(hash_tag(key).as_bytes()) % SLOTS
}

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in bytes {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// One server of the topology: its address (`host:port`, or the store's redacted URL for a
/// standalone server), a client for its dedicated connections (parks, subscriptions), and the
/// shared, multiplexed connection every script to it rides.
#[derive(Clone)]
pub(super) struct Node {
    pub(super) addr: Arc<str>,
    pub(super) client: Client,
    pub(super) conn: ConnectionManager,
}

/// The servers a store talks to, found on its first connect (one per store, made once: its size
/// is of no account).
#[allow(clippy::large_enum_variant)]
pub(super) enum Topology {
    /// One server: every command goes to it.
    Single(Node),
    /// A Redis Cluster: each command goes to the master of its slot.
    Cluster(Cluster),
}

/// What a store knows of a cluster: how to reach a node, the nodes its URL named, the slot map and the
/// connections made so far.
pub(super) struct Cluster {
    /// The settings of every node's connection (credentials, TLS, TCP), the address aside.
    template: ConnectionInfo,
    conn_config: ConnectionManagerConfig,
    /// The seed nodes' addresses (`host:port`), asked for the slot map when no known node answers.
    seeds: Vec<Arc<str>>,
    /// The slot ranges and their masters, sorted by first slot.
    slots: RwLock<Vec<(u16, u16, Arc<str>)>>,
    /// The nodes connected so far (or being connected), by address.
    nodes: Mutex<HashMap<Arc<str>, Arc<OnceCell<Node>>>>,
    /// Set after an outage, a `CLUSTERDOWN` or a `MOVED`: the next command refreshes the map first.
    stale: AtomicBool,
    /// One refresh at a time; the callers that waited for it use its map.
    refreshing: tokio::sync::Mutex<()>,
}

/// The `host:port` of a connection's address (a Unix socket has none: the cluster bus is TCP).
pub(super) fn host_port(addr: &ConnectionAddr) -> Option<String> {
    match addr {
        ConnectionAddr::Tcp(host, port) | ConnectionAddr::TcpTls { host, port, .. } => Some(format!("{host}:{port}")),
        _ => None,
    }
}

/// Makes the shared connection of the server `info` names (within the connect timeout) and checks
/// it, as [`super::RedisStore::check_eviction_policy`] does; `shown` names it in errors.
pub(super) async fn connect(
    info: ConnectionInfo,
    config: &ConnectionManagerConfig,
    shown: &str,
) -> Result<(Client, ConnectionManager)> {
    let client = Client::open(info).map_err(|e| Error::InvalidUrl {
        url: shown.to_string(),
        reason: e.to_string(),
    })?;
    let conn = tokio::time::timeout(
        CONNECT_TIMEOUT + Duration::from_secs(1),
        client.get_connection_manager_with_config(config.clone()),
    )
    .await
    .map_err(|_| Error::Unreachable {
        addr: shown.to_string(),
        reason: format!("no connection within {CONNECT_TIMEOUT:?}"),
    })?
    .map_err(|e| connection::unreachable_or(shown, "open", e))?;
    super::check_eviction_policy(conn.clone(), shown).await?;
    Ok((client, conn))
}

/// Whether the server behind `conn` runs in cluster mode (`INFO cluster` says
/// `cluster_enabled:1`). A server that denies `INFO` is taken for a standalone one.
pub(super) async fn cluster_enabled(conn: &mut ConnectionManager, shown: &str) -> Result<bool> {
    let reply: redis::RedisResult<String> = redis::cmd("INFO").arg("cluster").query_async(conn).await;
    match reply {
        Ok(info) => Ok(info.lines().any(|l| l.trim() == "cluster_enabled:1")),
        Err(e) if connection::is_wire(&e) => Err(connection::unreachable_or(shown, "open", e)),
        Err(e) => {
            tracing::debug!(error = %e, "INFO cluster refused; taking the server for a standalone one");
            Ok(false)
        }
    }
}

impl Cluster {
    /// A cluster reached through `seeds` (at least one), each node connected with `template`'s
    /// settings; `first`, when given, is a node already connected (the plain URL that turned out to
    /// name a cluster node). Reads the slot map before returning.
    pub(super) async fn open(
        template: ConnectionInfo,
        conn_config: ConnectionManagerConfig,
        seeds: Vec<String>,
        first: Option<Node>,
    ) -> Result<Self> {
        let cluster = Self {
            template,
            conn_config,
            seeds: seeds.into_iter().map(Arc::from).collect(),
            slots: RwLock::new(Vec::new()),
            nodes: Mutex::new(HashMap::new()),
            stale: AtomicBool::new(true),
            refreshing: tokio::sync::Mutex::new(()),
        };
        if let Some(node) = first {
            let cell = Arc::new(OnceCell::new_with(Some(node.clone())));
            lock(&cluster.nodes).insert(node.addr.clone(), cell);
        }
        cluster.refresh().await?;
        Ok(cluster)
    }

    /// The addresses named in errors: those its URL gave.
    pub(super) fn shown(&self) -> String {
        self.seeds.join(",")
    }

    /// The master of `slot`, connected; the map refreshed first when it is stale.
    pub(super) async fn node_for(&self, slot: u16) -> Result<Node> {
        if self.stale.load(Ordering::Acquire) {
            self.refresh().await?;
        }
        let addr = self.owner(slot).ok_or_else(|| Error::Unreachable {
            addr: self.shown(),
            reason: format!("no master serves hash slot {slot} (the cluster is down or being set up)"),
        });
        let addr = match addr {
            Ok(a) => a,
            Err(e) => {
                self.mark_stale();
                return Err(e);
            }
        };
        self.node(&addr).await
    }

    fn owner(&self, slot: u16) -> Option<Arc<str>> {
        let slots = self.slots.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let at = slots.partition_point(|(start, _, _)| *start <= slot);
        at.checked_sub(1)
            .map(|i| &slots[i])
            .filter(|(_, end, _)| slot <= *end)
            .map(|(_, _, addr)| addr.clone())
    }

    /// The node at `addr` (`host:port`), connected now when it was not yet.
    pub(super) async fn node(&self, addr: &str) -> Result<Node> {
        let cell = lock(&self.nodes).entry(Arc::from(addr)).or_default().clone();
        let node = cell
            .get_or_try_init(|| async {
                let info = self.info_for(addr)?;
                let (client, conn) = connect(info, &self.conn_config, addr).await?;
                Ok::<_, Error>(Node {
                    addr: Arc::from(addr),
                    client,
                    conn,
                })
            })
            .await;
        if node.is_err() {
            self.mark_stale();
        }
        node.cloned()
    }

    /// The connection settings of the node at `addr`: the template's, at that host and port.
    fn info_for(&self, addr: &str) -> Result<ConnectionInfo> {
        let invalid = || Error::Protocol {
            verb: "open",
            reply: format!("the cluster named a node at {addr:?}, not host:port"),
        };
        let (host, port) = addr.rsplit_once(':').ok_or_else(invalid)?;
        let port: u16 = port.parse().map_err(|_| invalid())?;
        let host = host.trim_start_matches('[').trim_end_matches(']').to_string();
        let at = match self.template.addr() {
            ConnectionAddr::TcpTls {
                insecure, tls_params, ..
            } => ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => ConnectionAddr::Tcp(host, port),
        };
        Ok(self.template.clone().set_addr(at))
    }

    /// Every master of the slot map, connected.
    pub(super) async fn masters(&self) -> Result<Vec<Node>> {
        let mut addrs: Vec<Arc<str>> = Vec::new();
        for (_, _, addr) in self
            .slots
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
        {
            if !addrs.contains(addr) {
                addrs.push(addr.clone());
            }
        }
        let mut nodes = Vec::with_capacity(addrs.len());
        for addr in addrs {
            nodes.push(self.node(&addr).await?);
        }
        Ok(nodes)
    }

    /// The next command reads the slot map again first.
    pub(super) fn mark_stale(&self) {
        self.stale.store(true, Ordering::Release);
    }

    /// Takes the master at `addr` for `slot`, as a `MOVED` said. The rest of the map stays: a
    /// reshard moves slot after slot, each corrected by its own `MOVED` (a refresh asked of a
    /// master that has not heard of the move yet would send the command back where it came from).
    pub(super) fn moved(&self, slot: u16, addr: &str) {
        {
            let mut slots = self.slots.write().unwrap_or_else(std::sync::PoisonError::into_inner);
            let at = slots.partition_point(|(start, _, _)| *start <= slot);
            let addr: Arc<str> = Arc::from(addr);
            match at.checked_sub(1).filter(|&i| slot <= slots[i].1) {
                Some(i) => {
                    let (start, end, old) = slots[i].clone();
                    let mut pieces = Vec::with_capacity(3);
                    if start < slot {
                        pieces.push((start, slot - 1, old.clone()));
                    }
                    pieces.push((slot, slot, addr));
                    if slot < end {
                        pieces.push((slot + 1, end, old));
                    }
                    slots.splice(i..=i, pieces);
                }
                None => slots.insert(at, (slot, slot, addr)),
            }
        }
    }

    /// Reads the slot map from the first node that answers: the known masters, then the nodes its
    /// URL named.
    async fn refresh(&self) -> Result<()> {
        let _one = self.refreshing.lock().await;
        if !self.stale.load(Ordering::Acquire) {
            return Ok(()); // a refresh ran while this one waited
        }
        let mut candidates: Vec<Arc<str>> = Vec::new();
        {
            let slots = self.slots.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            for (_, _, addr) in slots.iter() {
                if !candidates.contains(addr) {
                    candidates.push(addr.clone());
                }
            }
        }
        for seed in &self.seeds {
            if !candidates.contains(seed) {
                candidates.push(seed.clone());
            }
        }
        let mut last = None;
        for addr in candidates {
            match self.slots_from(&addr).await {
                Ok(map) if !map.is_empty() => {
                    *self.slots.write().unwrap_or_else(std::sync::PoisonError::into_inner) = map;
                    self.stale.store(false, Ordering::Release);
                    self.forget_others();
                    return Ok(());
                }
                Ok(_) => {
                    last = Some(Error::Unreachable {
                        addr: addr.to_string(),
                        reason: "the node knows no slot of the cluster (CLUSTER SLOTS is empty)".into(),
                    })
                }
                // a refusal no node will mend (a password refused) ends the refresh at once
                Err(e) if e.is_misconfigured() => return Err(e),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| Error::Unreachable {
            addr: self.shown(),
            reason: "no node of the cluster to ask".into(),
        }))
    }

    /// Drops the connections of nodes that serve no slot now (a master that failed over): their
    /// managers would go on reconnecting for nothing.
    fn forget_others(&self) {
        let slots = self.slots.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        let seeds = &self.seeds;
        lock(&self.nodes).retain(|addr, _| slots.iter().any(|(_, _, a)| a == addr) || seeds.contains(addr));
    }

    /// The slot map as the node at `addr` tells it (`CLUSTER SLOTS`).
    async fn slots_from(&self, addr: &str) -> Result<Vec<(u16, u16, Arc<str>)>> {
        let node = tokio::time::timeout(SLOTS_TIMEOUT + CONNECT_TIMEOUT, self.node(addr))
            .await
            .map_err(|_| Error::Unreachable {
                addr: addr.to_string(),
                reason: "no connection in time to read the slot map".into(),
            })??;
        let mut conn = node.conn.clone();
        let reply = tokio::time::timeout(
            SLOTS_TIMEOUT,
            redis::cmd("CLUSTER").arg("SLOTS").query_async::<Value>(&mut conn),
        )
        .await
        .map_err(|_| Error::Unreachable {
            addr: addr.to_string(),
            reason: "CLUSTER SLOTS unanswered in time".into(),
        })?
        .map_err(|e| connection::unreachable_or(addr, "open", e))?;
        let asked_host = addr.rsplit_once(':').map_or(addr, |(h, _)| h);
        parse_slots(reply, asked_host)
    }
}

/// `CLUSTER SLOTS`'s reply — `[[start, end, [host, port, id…], replicas…], …]` — as sorted ranges
/// with their masters' `host:port`. An empty host (the node does not know its own address) is the
/// host asked.
fn parse_slots(reply: Value, asked_host: &str) -> Result<Vec<(u16, u16, Arc<str>)>> {
    let bad = |what: &str| Error::Protocol {
        verb: "open",
        reply: format!("CLUSTER SLOTS: {what}"),
    };
    let Value::Array(ranges) = reply else {
        return Err(bad("not an array"));
    };
    let mut out = Vec::with_capacity(ranges.len());
    for range in ranges {
        let Value::Array(parts) = range else {
            return Err(bad("a range is not an array"));
        };
        let int = |v: Option<&Value>| match v {
            Some(Value::Int(i)) => u16::try_from(*i).map_err(|_| bad("a slot out of range")),
            _ => Err(bad("a slot is not an integer")),
        };
        let start = int(parts.first())?;
        let end = int(parts.get(1))?;
        let Some(Value::Array(master)) = parts.get(2) else {
            return Err(bad("a range has no master"));
        };
        let host = match master.first() {
            Some(Value::BulkString(b)) => String::from_utf8_lossy(b).into_owned(),
            Some(Value::SimpleString(s)) => s.clone(),
            // NULL: the node does not know its endpoint (the host asked, as for "")
            Some(Value::Nil) => String::new(),
            _ => return Err(bad("a master has no host")),
        };
        let host = if host.is_empty() || host == "?" {
            asked_host.to_string()
        } else {
            host
        };
        let port = match master.get(1) {
            Some(Value::Int(p)) => *p,
            _ => return Err(bad("a master has no port")),
        };
        out.push((start, end, Arc::from(format!("{host}:{port}"))));
    }
    out.sort_by_key(|(start, _, _)| *start);
    Ok(out)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_hashes_by_its_tag_as_redis_does() {
        // CLUSTER KEYSLOT of each, asked of Redis 7.0
        assert_eq!(slot("{q}"), 11958);
        assert_eq!(slot("emq:{q}:pending"), 11958);
        assert_eq!(slot("x"), 16287);
        assert_eq!(slot("123456789"), 12739);
        // an empty tag is no tag: the whole key hashes
        assert_eq!(slot("a{}b"), crc16(b"a{}b") % SLOTS);
        assert_eq!(slot("a{b"), crc16(b"a{b") % SLOTS);
    }

    fn cluster_of(ranges: &[(u16, u16, &str)]) -> Cluster {
        use redis::IntoConnectionInfo;
        Cluster {
            template: "redis://127.0.0.1:1".into_connection_info().unwrap(),
            conn_config: ConnectionManagerConfig::new(),
            seeds: vec![Arc::from("127.0.0.1:1")],
            slots: RwLock::new(ranges.iter().map(|(a, b, n)| (*a, *b, Arc::from(*n))).collect()),
            nodes: Mutex::new(HashMap::new()),
            stale: AtomicBool::new(false),
            refreshing: tokio::sync::Mutex::new(()),
        }
    }

    #[test]
    fn a_slot_has_the_master_of_its_range_and_a_moved_slot_its_new_one() {
        let c = cluster_of(&[(0, 5460, "a:1"), (5461, 10922, "b:1"), (10923, 16383, "c:1")]);
        let owner = |slot| c.owner(slot).map(|a| a.to_string());
        assert_eq!(owner(0).as_deref(), Some("a:1"));
        assert_eq!(owner(5460).as_deref(), Some("a:1"));
        assert_eq!(owner(5461).as_deref(), Some("b:1"));
        assert_eq!(owner(16383).as_deref(), Some("c:1"));
        // a slot in the middle of a range, at either end, and one the map did not have
        c.moved(7000, "d:1");
        c.moved(10923, "d:1");
        c.moved(16383, "e:1");
        assert_eq!(owner(6999).as_deref(), Some("b:1"));
        assert_eq!(owner(7000).as_deref(), Some("d:1"));
        assert_eq!(owner(7001).as_deref(), Some("b:1"));
        assert_eq!(owner(10922).as_deref(), Some("b:1"));
        assert_eq!(owner(10923).as_deref(), Some("d:1"));
        assert_eq!(owner(10924).as_deref(), Some("c:1"));
        assert_eq!(owner(16382).as_deref(), Some("c:1"));
        assert_eq!(owner(16383).as_deref(), Some("e:1"));
        let gap = cluster_of(&[(0, 99, "a:1"), (200, 16383, "b:1")]);
        assert_eq!(gap.owner(150), None, "a slot no master serves");
        gap.moved(150, "c:1");
        assert_eq!(gap.owner(150).as_deref(), Some("c:1"));
        assert_eq!(gap.owner(99).as_deref(), Some("a:1"));
        assert_eq!(gap.owner(200).as_deref(), Some("b:1"));
        assert!(!c.stale.load(Ordering::Acquire), "a MOVED corrects the one slot only");
    }

    #[test]
    fn the_slot_map_reads_cluster_slots() {
        let node = |h: &str, p: i64| Value::Array(vec![Value::BulkString(h.as_bytes().to_vec()), Value::Int(p)]);
        let reply = Value::Array(vec![
            Value::Array(vec![Value::Int(5461), Value::Int(16383), node("", 7002)]),
            Value::Array(vec![
                Value::Int(0),
                Value::Int(5460),
                node("10.0.0.1", 7001),
                node("10.0.0.2", 7004),
            ]),
        ]);
        let map = parse_slots(reply, "127.0.0.1").unwrap();
        assert_eq!(
            map,
            vec![
                (0, 5460, Arc::from("10.0.0.1:7001")),
                (5461, 16383, Arc::from("127.0.0.1:7002"))
            ]
        );
    }
}
