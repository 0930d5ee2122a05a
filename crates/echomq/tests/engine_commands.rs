//! The embedded engine's commands against a real Redis: generated sequences of the commands the
//! scripts send, in the forms they send them (negative ranks, `(` and `±inf` bounds, `LIMIT`,
//! `WITHSCORES`, `XX`, keys of another type, job rows and the row sets beside generic keys), each
//! run by one Lua script under `redis.pcall` on both, every reply compared as the script sees it.
//! The orders Redis leaves unspecified (a hash's fields, a set's members, a scan's chunks) are
//! compared as sets; an error as its code (its first word).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

#[path = "support/redis_server.rs"]
mod redis_server;

use echomq::store::embedded::engine::{Call, LuaHost, Reply};

/// Runs the commands in ARGV (each: its count of words, then its words) and replies, per
/// command, its reply as text: `i:` a number, `s:` a string, `nil`, `ok:` a status, `e:` an
/// error's code, `[…]` an array; HGETALL and SMEMBERS sorted, HSCAN followed to its end.
const RUNNER: &str = r#"
local function ser(r)
  local t = type(r)
  if t == 'number' then return 'i:' .. string.format('%d', r) end
  if t == 'string' then return 's:' .. r end
  if t == 'boolean' then return r and 'true' or 'nil' end
  if t == 'table' then
    if r.err then return 'e:' .. (string.match(r.err, '^(%S+)') or r.err) end
    if r.ok then return 'ok:' .. r.ok end
    local parts = {}
    for i = 1, #r do parts[i] = ser(r[i]) end
    return '[' .. table.concat(parts, ',') .. ']'
  end
  return '?' .. t
end
local function pairs_sorted(flat)
  if type(flat) ~= 'table' or flat.err then return flat end
  local items = {}
  for i = 1, #flat, 2 do items[#items + 1] = flat[i] .. '=' .. flat[i + 1] end
  table.sort(items)
  return items
end
local out = {}
local i = 1
while i <= #ARGV do
  local n = tonumber(ARGV[i])
  local words = {}
  for j = 1, n do words[j] = ARGV[i + j] end
  i = i + n + 1
  local cmd = string.upper(words[1])
  local r
  if cmd == 'HSCAN' then
    local all, cursor, guard = {}, '0', 0
    repeat
      r = redis.pcall('HSCAN', words[2], cursor, unpack(words, 4))
      if type(r) ~= 'table' or r.err then break end
      cursor = r[1]
      for j = 1, #r[2] do all[#all + 1] = r[2][j] end
      guard = guard + 1
    until cursor == '0' or guard > 100
    if type(r) == 'table' and not r.err then r = pairs_sorted(all) end
  else
    r = redis.pcall(unpack(words))
    if cmd == 'HGETALL' then r = pairs_sorted(r) end
    if cmd == 'SMEMBERS' and type(r) == 'table' and not r.err then table.sort(r) end
  end
  out[#out + 1] = ser(r)
end
return out
"#;

/// A small deterministic generator (xorshift64*).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from[self.below(from.len())]
    }

    /// A number as the scripts pass them (whole, negative, fractional, 16 digits), often equal
    /// to another (ties order sorted sets by member).
    fn num(&mut self) -> String {
        match self.below(8) {
            0..=2 => format!("{}", self.below(3)),
            3 => format!("-{}", self.below(3)),
            4 => format!("{}.5", self.below(3)),
            5 => format!("{}", 1_733_000_000_000_000u64 + self.below(3) as u64),
            6 => format!("{}", self.below(40)),
            _ => self.pick(&["007", "1e2", "x", "", "0.1", "-inf"]).to_string(),
        }
    }

    fn bound(&mut self) -> String {
        match self.below(5) {
            0 => "-inf".into(),
            1 => "+inf".into(),
            2 => format!("({}", self.below(5)),
            _ => format!("{}", self.below(5)),
        }
    }

    fn rank(&mut self) -> String {
        format!("{}", self.below(9) as i64 - 4)
    }
}

const KEYS: &[&str] = &[
    "emq:{t}:job:1",
    "emq:{t}:job:2",
    "emq:{t}:pending",
    "emq:{t}:active",
    "emq:{t}:groups",
    "emq:{t}:wake",
    "emq:{t}:id",
    "emq:{t}:dead",
];
const MEMBERS: &[&str] = &["1", "2", "3", "a", "b"];
const FIELDS: &[&str] = &["data", "state", "attempts", "x", "y", "rate:1", "rate:2"];

/// The commands of each type (indexes of [`command`]'s forms): strings and keys, hashes, sorted
/// sets, lists.
const FAMILIES: [std::ops::Range<usize>; 4] = [0..8, 8..18, 18..28, 28..32];

/// One command in a form the scripts send, on one of `keys`: of `family` four times in five.
fn command(g: &mut Gen, keys: &[&str], family: usize) -> Vec<String> {
    let key = g.pick(keys).to_string();
    let member = || MEMBERS.to_vec();
    let range = &FAMILIES[family];
    let form = if g.below(5) < 4 {
        range.start + g.below(range.len())
    } else {
        g.below(32)
    };
    let words: Vec<String> = match form {
        0 => vec!["GET".into(), key],
        1 => vec!["SET".into(), key, g.num()],
        2 => vec!["INCRBY".into(), key, g.num()],
        3 => vec!["INCR".into(), key],
        4 => vec!["MGET".into(), key, g.pick(KEYS).into()],
        5 => vec!["EXISTS".into(), key, g.pick(KEYS).into()],
        6 => vec!["DEL".into(), key],
        7 => vec!["TYPE".into(), key],
        8 | 9 => {
            let mut w = vec!["HSET".into(), key];
            for _ in 0..1 + g.below(3) {
                w.push(g.pick(FIELDS).into());
                w.push(g.num());
            }
            w
        }
        10 => vec!["HGET".into(), key, g.pick(FIELDS).into()],
        11 => vec!["HMGET".into(), key, g.pick(FIELDS).into(), g.pick(FIELDS).into()],
        12 => vec!["HDEL".into(), key, g.pick(FIELDS).into(), g.pick(FIELDS).into()],
        13 => vec!["HINCRBY".into(), key, g.pick(FIELDS).into(), g.num()],
        14 => vec!["HEXISTS".into(), key, g.pick(FIELDS).into()],
        15 => vec!["HGETALL".into(), key],
        16 => vec!["HLEN".into(), key],
        17 => {
            let mut w = vec!["HSCAN".into(), key, "0".into()];
            if g.below(2) == 0 {
                w.extend(["MATCH".into(), "rate:*".into()]);
            }
            w.extend(["COUNT".into(), format!("{}", 1 + g.below(3))]);
            w
        }
        18 | 19 => {
            let mut w = vec!["ZADD".into(), key];
            if g.below(3) == 0 {
                w.push("XX".into());
            }
            for _ in 0..1 + g.below(2) {
                w.push(g.num());
                w.push(g.pick(&member()).into());
            }
            w
        }
        20 => vec!["ZREM".into(), key, g.pick(&member()).into()],
        21 => vec!["ZCARD".into(), key],
        22 => vec!["ZSCORE".into(), key, g.pick(&member()).into()],
        23 => {
            let mut w = vec![g.pick(&["ZRANGE", "ZREVRANGE"]).into(), key, g.rank(), g.rank()];
            if g.below(2) == 0 {
                w.push("WITHSCORES".into());
            }
            w
        }
        24 => {
            let rev = g.below(2) == 0;
            let mut w = vec![
                if rev { "ZREVRANGEBYSCORE" } else { "ZRANGEBYSCORE" }.into(),
                key,
                g.bound(),
                g.bound(),
            ];
            if g.below(2) == 0 {
                w.push("WITHSCORES".into());
            }
            if g.below(2) == 0 {
                w.extend(["LIMIT".into(), format!("{}", g.below(3)), format!("{}", g.below(4))]);
            }
            w
        }
        25 => vec![g.pick(&["ZRANK", "ZREVRANK"]).into(), key, g.pick(&member()).into()],
        26 => vec!["ZREMRANGEBYRANK".into(), key, g.rank(), g.rank()],
        27 => vec!["ZREMRANGEBYSCORE".into(), key, g.bound(), g.bound()],
        28 => {
            let mut w = vec!["RPUSH".into(), key];
            for _ in 0..1 + g.below(3) {
                w.push(g.pick(&member()).into());
            }
            w
        }
        29 => vec!["LRANGE".into(), key, g.rank(), g.rank()],
        30 => vec!["LTRIM".into(), key, g.rank(), g.rank()],
        _ => vec!["LLEN".into(), key],
    };
    words
}

fn argv(commands: &[Vec<String>]) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    for c in commands {
        out.push(c.len().to_string().into_bytes());
        out.extend(c.iter().map(|w| w.clone().into_bytes()));
    }
    out
}

/// The commands with what Redis replied to each, one a line.
fn listed(commands: &[Vec<String>], replies: &[String]) -> String {
    commands
        .iter()
        .zip(replies)
        .map(|(c, r)| format!("  {} -> {r}", c.join(" ")))
        .collect::<Vec<_>>()
        .join("\n")
}

fn texts(r: Reply) -> Vec<String> {
    match r {
        Reply::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Reply::Bulk(b) => String::from_utf8_lossy(&b).into_owned(),
                other => format!("{other:?}"),
            })
            .collect(),
        other => panic!("the runner replied {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_engine_answers_every_command_as_redis_does() {
    let url = redis_server::url_from_env_or_start("EMQ_TEST_REDIS_URL");
    let mut redis = redis_server::connect(&url).await;
    let mut engine = LuaHost::new(rusqlite::Connection::open_in_memory().unwrap()).unwrap();
    engine.register("runner", RUNNER).unwrap();
    let sequences: u64 = std::env::var("EMQ_ENGINE_SEQUENCES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    for seed in 1..=sequences {
        let mut g = Gen(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        // a few keys a sequence, so that its commands meet each other's elements
        let some: Vec<&str> = (0..1 + g.below(3)).map(|_| g.pick(KEYS)).collect();
        let family = g.below(FAMILIES.len());
        let commands: Vec<Vec<String>> = (0..40).map(|_| command(&mut g, &some, family)).collect();
        let keys: Vec<&str> = KEYS.to_vec();
        // a fresh keyspace on both: every key of the sequence deleted first
        let _: () = redis::cmd("DEL").arg(&keys).query_async(&mut redis).await.unwrap();
        engine
            .run(&[Call {
                script: "runner",
                keys: Vec::new(),
                args: argv(&[keys
                    .iter()
                    .map(|k| k.to_string())
                    .fold(vec!["DEL".to_string()], |mut v, k| {
                        v.push(k);
                        v
                    })]),
            }])
            .unwrap();
        let expected: Vec<String> = redis::cmd("EVAL")
            .arg(RUNNER)
            .arg(0)
            .arg(argv(&commands))
            .query_async(&mut redis)
            .await
            .unwrap();
        let (replies, _) = engine
            .run(&[Call {
                script: "runner",
                keys: Vec::new(),
                args: argv(&commands),
            }])
            .unwrap_or_else(|e| panic!("seed {seed}: {e}\n{}", listed(&commands, &expected)));
        let got = texts(replies.into_iter().next().unwrap());
        for table in ["kv_hash", "kv_zset", "kv_list", "kv_set"] {
            let orphans: i64 = engine
                .with_conn(|c| {
                    c.query_row(
                        &format!("SELECT count(*) FROM {table} WHERE kid NOT IN (SELECT kid FROM kv_keys)"),
                        [],
                        |r| r.get(0),
                    )
                })
                .unwrap()
                .unwrap();
            assert_eq!(
                orphans,
                0,
                "seed {seed}: {table} holds elements of no key\n{}",
                listed(&commands, &expected)
            );
        }
        for (i, (want, have)) in expected.iter().zip(&got).enumerate() {
            assert_eq!(
                have,
                want,
                "seed {seed}, command {i}: {:?}\nthe sequence so far:\n{}",
                commands[i],
                listed(&commands[..=i], &expected)
            );
        }
        assert_eq!(got.len(), expected.len(), "seed {seed}");
    }
}
