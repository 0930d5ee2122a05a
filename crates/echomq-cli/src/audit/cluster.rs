//! The Redis Cluster of an audit's own: 3 masters with a replica each, AOF `appendfsync always`
//! on every node, `cluster-node-timeout 2000`, on free loopback ports; and its fault, the failover
//! of the master that holds the audit's queue (SIGKILLed; a replica promoted; the killed node
//! restarted on its files, back as a replica in sync, so that the next failover has one to
//! promote).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use echomq::store::redis::RedisStore;
use echomq::QueueName;
use tokio::process::{Child, Command};

/// Masters, and replicas of each.
const MASTERS: usize = 3;
const REPLICAS: usize = 1;

/// How long the cluster may take to form, to fail over or to take a node back.
const SETTLE_MAX: Duration = Duration::from_secs(60);

struct Node {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    starts: u32,
}

/// The nodes, each a child of the audit (killed with it).
pub(super) struct ClusterServers {
    program: PathBuf,
    nodes: Vec<Node>,
}

/// A loopback port free now, with its cluster bus port (+10000) free too, both below the kernel's
/// ephemeral ports (the local ports of outgoing connections, which could take a node's port
/// between this check and its bind): 11000 to 22767, buses 21000 to 32767.
fn free_port(taken: &[u16], rng: &mut super::XorShift) -> anyhow::Result<u16> {
    for _ in 0..200 {
        let p = 11_000 + u16::try_from(rng.below(11_768)).unwrap_or(0);
        let free = |p: u16| std::net::TcpListener::bind(("127.0.0.1", p)).is_ok();
        if !taken.contains(&p) && free(p) && free(p + 10_000) {
            return Ok(p);
        }
    }
    bail!("no free loopback port from 11000 to 22767 with its cluster bus port free")
}

/// `INFO section` of the node on `port`, or `None` when it does not answer.
async fn info(port: u16, section: &str) -> Option<String> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).ok()?;
    let mut c = tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection())
        .await
        .ok()?
        .ok()?;
    redis::cmd("INFO").arg(section).query_async(&mut c).await.ok()
}

impl ClusterServers {
    pub(super) async fn start(program: &Path, dir: &Path) -> anyhow::Result<Self> {
        let mut nodes: Vec<Node> = Vec::new();
        let mut rng = super::XorShift(super::now_ns().max(1));
        for _ in 0..MASTERS * (1 + REPLICAS) {
            let taken: Vec<u16> = nodes.iter().map(|n| n.port).collect();
            let port = free_port(&taken, &mut rng)?;
            let node_dir = dir.join(format!("node-{port}"));
            std::fs::create_dir_all(&node_dir)?;
            nodes.push(Node {
                port,
                dir: node_dir,
                child: None,
                starts: 0,
            });
        }
        let mut s = Self {
            program: program.to_path_buf(),
            nodes,
        };
        for i in 0..s.nodes.len() {
            s.spawn(i).await?;
        }
        let addrs: Vec<String> = s.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", &REPLICAS.to_string(), "--cluster-yes"])
            .stdin(Stdio::null())
            .output()
            .await
            .context("cannot run redis-cli (Debian: apt-get install redis-tools)")?;
        if !out.status.success() {
            bail!(
                "redis-cli --cluster create failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let ports: Vec<u16> = s.nodes.iter().map(|n| n.port).collect();
        s.settled(&ports).await?;
        Ok(s)
    }

    /// The seed URL of the cluster.
    pub(super) fn url(&self) -> String {
        let seeds: Vec<String> = self.nodes.iter().map(|n| format!("127.0.0.1:{}", n.port)).collect();
        format!("redis+cluster://{}", seeds.join(","))
    }

    async fn spawn(&mut self, i: usize) -> anyhow::Result<()> {
        let program = self.program.clone();
        let node = &mut self.nodes[i];
        let log = node.dir.join(format!("server-{}.log", node.starts));
        node.starts += 1;
        let out = std::fs::File::create(&log)?;
        let child = Command::new(&program)
            .args(["--port", &node.port.to_string(), "--bind", "127.0.0.1", "--save", ""])
            .args(["--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no"])
            .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
            .arg("--cluster-config-file")
            .arg(node.dir.join("nodes.conf"))
            .arg("--dir")
            .arg(&node.dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| {
                format!(
                    "cannot run {} (Debian: apt-get install redis-server)",
                    program.display()
                )
            })?;
        let child = node.child.insert(child);
        super::until_own_server(child, node.port, &log, SETTLE_MAX, "cluster node").await
    }

    /// Waits until every node on `ports` says `cluster_state:ok` and every replica among them is
    /// in sync with its master.
    async fn settled(&self, ports: &[u16]) -> anyhow::Result<()> {
        let deadline = Instant::now() + SETTLE_MAX;
        loop {
            let mut ok = true;
            for &p in ports {
                let replication = info(p, "replication").await.unwrap_or_default();
                let state_ok = cluster_state_ok(p).await;
                let synced = !replication.contains("role:slave") || replication.contains("master_link_status:up");
                ok &= state_ok && synced;
            }
            if ok {
                return Ok(());
            }
            if Instant::now() > deadline {
                bail!("the cluster did not settle (cluster_state:ok, replicas in sync) within {SETTLE_MAX:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// The failover: SIGKILLs the master that holds `queue`, waits until a replica serves its
    /// slot, then restarts the killed node on its files and waits until it is back in sync as a
    /// replica. Returns how long the slot had no master.
    pub(super) async fn fail_over(&mut self, queue: &QueueName) -> anyhow::Result<Duration> {
        let url = self.url();
        let store = RedisStore::open(&url).await?;
        let old = store.server_of(queue).await?;
        let i = self
            .nodes
            .iter()
            .position(|n| format!("127.0.0.1:{}", n.port) == old)
            .with_context(|| format!("the queue's master {old} is not one of the audit's nodes"))?;
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.start_kill();
            let _ = c.wait().await;
        }
        let killed = Instant::now();
        let others: Vec<String> = self
            .nodes
            .iter()
            .filter(|n| format!("127.0.0.1:{}", n.port) != old)
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let deadline = killed + SETTLE_MAX;
        let down = loop {
            let seeds = format!("redis+cluster://{}", others.join(","));
            let now = match RedisStore::open(&seeds).await {
                Ok(s) => s.server_of(queue).await.ok(),
                Err(_) => None,
            };
            if now.as_ref().is_some_and(|n| *n != old) {
                break killed.elapsed();
            }
            if Instant::now() > deadline {
                bail!("no replica took over the queue's slot within {SETTLE_MAX:?}");
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        self.spawn(i).await?;
        let ports: Vec<u16> = self.nodes.iter().map(|n| n.port).collect();
        self.settled(&ports).await?;
        Ok(down)
    }

    pub(super) async fn stop(&mut self) {
        for n in &mut self.nodes {
            if let Some(mut c) = n.child.take() {
                let _ = c.start_kill();
                let _ = c.wait().await;
            }
        }
    }
}

/// Whether the node on `port` says `cluster_state:ok` (`CLUSTER INFO`).
async fn cluster_state_ok(port: u16) -> bool {
    let Ok(client) = redis::Client::open(format!("redis://127.0.0.1:{port}")) else {
        return false;
    };
    let Ok(Ok(mut c)) = tokio::time::timeout(Duration::from_secs(2), client.get_multiplexed_async_connection()).await
    else {
        return false;
    };
    let text: String = redis::cmd("CLUSTER")
        .arg("INFO")
        .query_async(&mut c)
        .await
        .unwrap_or_default();
    text.lines().any(|l| l.trim() == "cluster_state:ok")
}
