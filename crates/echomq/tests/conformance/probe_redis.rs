//! The probe of the Redis store: its own connection, reading and writing the queue's keys raw.

use std::collections::HashMap;
use std::sync::Arc;

use echomq::store::redis::RedisStore;
use echomq::store::Store;
use echomq::{JobId, QueueName};
use redis::AsyncCommands;

use super::redis_server::connect;
use super::{Record, Snapshot};

#[path = "../support/probe_conn.rs"]
mod probe_conn;
pub use probe_conn::ProbeConn;

#[derive(Clone)]
pub struct RedisProbe {
    conn: ProbeConn,
    /// `emq:{q}:`, the queue's key base.
    base: String,
    url: String,
    /// The URL of the node it reads.
    node: String,
}

/// The URL of the server that holds `q`'s keys: `url` itself, or for a cluster
/// (`redis+cluster://seed,…`) the master of the queue's slot, as the first seed tells it.
pub async fn node_of(url: &str, q: &QueueName) -> String {
    let Some(seeds) = url.strip_prefix("redis+cluster://") else {
        return url.to_string();
    };
    let seed = seeds.split([',', '/', '?']).next().expect("a seed");
    let mut conn = connect(&format!("redis://{seed}")).await;
    let key = format!("emq:{{{}}}:id", q.as_str());
    let slot: u16 = redis::cmd("CLUSTER")
        .arg("KEYSLOT")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .expect("CLUSTER KEYSLOT");
    let ranges: Vec<redis::Value> = redis::cmd("CLUSTER")
        .arg("SLOTS")
        .query_async(&mut conn)
        .await
        .expect("CLUSTER SLOTS");
    for range in ranges {
        let redis::Value::Array(parts) = range else { continue };
        let (Some(redis::Value::Int(start)), Some(redis::Value::Int(end)), Some(redis::Value::Array(master))) =
            (parts.first(), parts.get(1), parts.get(2))
        else {
            continue;
        };
        if (*start..=*end).contains(&i64::from(slot)) {
            let host: String = redis::from_redis_value_ref(&master[0]).expect("host");
            let port: u16 = redis::from_redis_value_ref(&master[1]).expect("port");
            return format!("redis://{host}:{port}");
        }
    }
    panic!("no master serves slot {slot} of {url}");
}

impl RedisProbe {
    pub async fn open(url: &str, q: &QueueName) -> Self {
        let node = node_of(url, q).await;
        let conn = connect(&node).await;
        RedisProbe {
            conn: ProbeConn::Redis(conn),
            base: format!("emq:{{{}}}:", q.as_str()),
            url: url.to_string(),
            node,
        }
    }

    /// The URL of the node the probe reads (on a cluster, the master of the queue's slot).
    #[allow(dead_code)] // used by the cluster tests only
    pub fn node_url(&self) -> &str {
        &self.node
    }

    /// A raw connection (Redis's, or the engine's raw commands) and the queue's key base, for the
    /// script tests.
    #[allow(dead_code)] // used by tests/redis_scripts.rs only
    pub fn raw(&self) -> (ProbeConn, &str) {
        (self.conn.clone(), &self.base)
    }

    /// The probe of a queue on the embedded store (its engine's raw commands).
    pub fn on_engine(store: echomq::store::embedded::EmbeddedStore, q: &QueueName) -> Self {
        RedisProbe {
            conn: ProbeConn::Engine(store),
            base: format!("emq:{{{}}}:", q.as_str()),
            url: String::new(),
            node: String::new(),
        }
    }

    fn key(&self, suffix: &str) -> String {
        format!("{}{suffix}", self.base)
    }

    fn row_key(&self, id: &JobId) -> String {
        self.key(&format!("job:{id}"))
    }

    pub async fn wakes(&self) -> u64 {
        self.conn.clone().llen(self.key("wake")).await.expect("LLEN wake")
    }

    pub async fn clear_wakes(&self) {
        let _: () = self.conn.clone().del(self.key("wake")).await.expect("DEL wake");
    }

    pub async fn keep_wakes(&self, n: u64) {
        let _: () = self
            .conn
            .clone()
            .ltrim(self.key("wake"), 0, n as isize - 1)
            .await
            .expect("LTRIM wake");
    }

    pub async fn slots(&self) -> HashMap<String, u64> {
        let all: HashMap<String, String> = self.conn.clone().hgetall(self.key("groups")).await.expect("HGETALL");
        all.into_iter()
            .filter_map(|(k, v)| {
                k.strip_prefix("a:")
                    .map(|g| (g.to_string(), v.parse().expect("a: is an integer")))
            })
            .collect()
    }

    pub async fn ring(&self) -> Vec<String> {
        self.conn
            .clone()
            .lrange(self.key("ring"), 0, -1)
            .await
            .expect("LRANGE ring")
    }

    pub async fn dedup_keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.conn.clone().hkeys(self.key("dedup")).await.expect("HKEYS");
        keys.sort();
        keys
    }

    pub async fn members(&self, set: &str) -> Vec<(String, u64)> {
        let scored: Vec<(String, f64)> = self
            .conn
            .clone()
            .zrange_withscores(self.key(set), 0, -1)
            .await
            .expect("ZRANGE WITHSCORES");
        let mut out: Vec<(String, u64)> = scored.into_iter().map(|(m, s)| (m, s as u64)).collect();
        out.sort();
        out
    }

    pub async fn set_member_score(&self, set: &str, member: &str, score: u64) {
        let _: () = self
            .conn
            .clone()
            .zadd(self.key(set), member, score)
            .await
            .expect("ZADD");
    }

    pub async fn group_fields(&self) -> Vec<String> {
        let mut fields: Vec<String> = self.conn.clone().hkeys(self.key("groups")).await.expect("HKEYS");
        // the count of the lanes' jobs is no group's field (the embedded store counts them apart)
        fields.retain(|f| f != "lane_jobs");
        fields.sort();
        fields
    }

    pub async fn row_field(&self, id: &JobId, field: &str) -> Option<String> {
        self.conn.clone().hget(self.row_key(id), field).await.expect("HGET")
    }

    pub async fn set_row_field(&self, id: &JobId, field: &str, value: &str) {
        let _: () = self
            .conn
            .clone()
            .hset(self.row_key(id), field, value)
            .await
            .expect("HSET");
    }

    pub async fn del_row_field(&self, id: &JobId, field: &str) {
        let _: () = self.conn.clone().hdel(self.row_key(id), field).await.expect("HDEL");
    }

    pub async fn forget_kinds(&self, kinds: &[&str]) {
        for kind in kinds {
            let _: () = self
                .conn
                .clone()
                .del(self.key(&format!("pending:{kind}")))
                .await
                .expect("DEL");
        }
        let _: () = self
            .conn
            .clone()
            .hdel(self.key("groups"), "by_kind")
            .await
            .expect("HDEL");
    }

    pub async fn list_len(&self, list: &str) -> u64 {
        self.conn.clone().llen(self.key(list)).await.expect("LLEN")
    }

    pub async fn del_row(&self, id: &JobId) -> bool {
        let n: u64 = self.conn.clone().del(self.row_key(id)).await.expect("DEL");
        n == 1
    }

    pub async fn row_exists(&self, id: &JobId) -> bool {
        self.conn.clone().exists(self.row_key(id)).await.expect("EXISTS")
    }

    pub async fn score(&self, set: &str, id: &JobId) -> Option<u64> {
        let score: Option<f64> = self
            .conn
            .clone()
            .zscore(self.key(set), id.as_str())
            .await
            .expect("ZSCORE");
        score.map(|s| s as u64)
    }

    /// The jobs in a sorted set.
    pub async fn set_len(&self, set: &str) -> u64 {
        self.conn.clone().zcard(self.key(set)).await.expect("ZCARD")
    }

    pub async fn remove_from_set(&self, set: &str, id: &JobId) -> bool {
        let n: u64 = self.conn.clone().zrem(self.key(set), id.as_str()).await.expect("ZREM");
        n == 1
    }

    pub async fn set_schedule_slots(&self, name: &str, slots: &[u64]) {
        let text = slots.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
        let _: () = self
            .conn
            .clone()
            .hset(self.key(&format!("schedule:{name}")), "slots", text)
            .await
            .expect("HSET");
        let _: () = self
            .conn
            .clone()
            .zadd(self.key("schedule_due"), name, slots.first().copied().unwrap_or(0))
            .await
            .expect("ZADD");
    }

    pub async fn now_ms(&self) -> u64 {
        let (s, us): (u64, u64) = redis::cmd("TIME")
            .query_async(&mut self.conn.clone())
            .await
            .expect("TIME");
        s * 1000 + us / 1000
    }

    pub async fn records(&self) -> Vec<Record> {
        let entries: Vec<(String, HashMap<String, String>)> = redis::cmd("XRANGE")
            .arg(self.key("completions"))
            .arg("-")
            .arg("+")
            .query_async(&mut self.conn.clone())
            .await
            .expect("XRANGE completions");
        entries
            .into_iter()
            .map(|(entry, mut fields)| {
                let mut take = |name: &str| fields.remove(name);
                let record = Record {
                    id: take("id").expect("a record names its job"),
                    status: take("status").expect("a record has a status"),
                    attempts: take("attempts").expect("a record has attempts"),
                    output: take("output"),
                    error: take("error"),
                    at: take("at")
                        .expect("a record has its time")
                        .parse()
                        .expect("at is an integer"),
                };
                assert!(fields.is_empty(), "record {entry} has unknown fields {fields:?}");
                record
            })
            .collect()
    }

    pub async fn keys(&self) -> Vec<String> {
        let pattern = self.key("*");
        let mut conn = self.conn.clone();
        let mut cursor: u64 = 0;
        let mut keys = Vec::new();
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(&pattern)
                .arg("COUNT")
                .arg(1000)
                .query_async(&mut conn)
                .await
                .expect("SCAN");
            keys.extend(
                batch
                    .into_iter()
                    .map(|k| k.strip_prefix(&self.base).expect("a key of the queue").to_string()),
            );
            if next == 0 {
                break;
            }
            cursor = next;
        }
        keys.sort();
        keys
    }

    /// Every key with its type and content read by type (a hash's fields and a set's members
    /// sorted, a sorted set with its scores, a list in order, a stream's entries): a counter, a
    /// flag, a wake token included. Read through commands both engines answer, not `DUMP`.
    pub async fn snapshot(&self) -> Snapshot {
        let mut conn = self.conn.clone();
        let mut out = Vec::new();
        for key in self.keys().await {
            let k = self.key(&key);
            let kind: String = redis::cmd("TYPE").arg(&k).query_async(&mut conn).await.expect("TYPE");
            let content: Vec<Vec<u8>> = match kind.as_str() {
                "string" => vec![conn.get(&k).await.expect("GET")],
                "hash" => {
                    let mut all: Vec<(Vec<u8>, Vec<u8>)> = conn.hgetall(&k).await.expect("HGETALL");
                    all.sort();
                    all.into_iter().flat_map(|(f, v)| [f, v]).collect()
                }
                "zset" => {
                    let all: Vec<(Vec<u8>, f64)> = conn.zrange_withscores(&k, 0, -1).await.expect("ZRANGE");
                    all.into_iter()
                        .flat_map(|(m, s)| [m, s.to_string().into_bytes()])
                        .collect()
                }
                "list" => conn.lrange(&k, 0, -1).await.expect("LRANGE"),
                "set" => {
                    let mut all: Vec<Vec<u8>> = conn.smembers(&k).await.expect("SMEMBERS");
                    all.sort();
                    all
                }
                "stream" => {
                    let v: redis::Value = redis::cmd("XRANGE")
                        .arg(&k)
                        .arg("-")
                        .arg("+")
                        .query_async(&mut conn)
                        .await
                        .expect("XRANGE");
                    vec![format!("{v:?}").into_bytes()]
                }
                other => vec![other.as_bytes().to_vec()],
            };
            let mut value = kind.into_bytes();
            for part in content {
                value.extend_from_slice(&(part.len() as u32).to_be_bytes());
                value.extend(part);
            }
            out.push((key, value));
        }
        Snapshot(out)
    }

    pub async fn set_obliterating_mark(&self) {
        let _: () = self
            .conn
            .clone()
            .set(self.key("obliterating"), 1)
            .await
            .expect("SET obliterating");
    }

    pub async fn set_key_string(&self, suffix: &str, value: &str) {
        let _: () = self
            .conn
            .clone()
            .set(self.key(suffix), value)
            .await
            .expect("SET a key raw");
    }

    pub async fn del_key(&self, suffix: &str) {
        let _: () = self.conn.clone().del(self.key(suffix)).await.expect("DEL a key raw");
    }

    pub async fn refuse_new_jobs(&self) {
        let _: () = self
            .conn
            .clone()
            .set(self.key("id"), "no-number")
            .await
            .expect("SET id");
    }

    pub async fn allow_new_jobs(&self) {
        let _: () = self.conn.clone().del(self.key("id")).await.expect("DEL id");
    }

    pub async fn clear_obliterating_mark(&self) {
        let _: () = self
            .conn
            .clone()
            .del(self.key("obliterating"))
            .await
            .expect("DEL obliterating");
    }

    pub async fn store_with_payload_limit(&self, limit: usize) -> Arc<dyn Store> {
        if let ProbeConn::Engine(store) = &self.conn {
            return Arc::new(store.clone().with_payload_limit(limit));
        }
        let store = RedisStore::open(&self.url).await.expect("open the Redis store");
        Arc::new(store.with_payload_limit(limit))
    }
}
