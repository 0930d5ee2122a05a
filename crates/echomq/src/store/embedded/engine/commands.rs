//! The commands the scripts send, served by the keyspace with Redis's replies and errors. Only the
//! commands and forms the scripts use are served; any other is an error naming it.

use std::collections::HashMap;

use rusqlite::params;

use super::keyspace::{classify, Class, Fail, Keyspace, Type, R, ROW_ZSETS};
use super::{format_double, Reply};

/// Runs one command: `args[0]` is its name (any case).
pub(crate) fn run(ks: &mut Keyspace, args: &[Vec<u8>], now_us: i64) -> R<Reply> {
    let Some(name) = args.first() else {
        return Err(err("ERR Please specify at least one argument for this redis lib call"));
    };
    let name = String::from_utf8_lossy(name).to_ascii_uppercase();
    let a = &args[1..];
    match name.as_str() {
        "GET" => get(ks, a),
        "SET" => set(ks, a),
        "INCR" => incrby(ks, a, true),
        "INCRBY" => incrby(ks, a, false),
        "MGET" => mget(ks, a),
        "EXISTS" => exists(ks, a),
        "DEL" => del(ks, a),
        "TYPE" => type_of(ks, a),
        "HSET" => hset(ks, a, false),
        "HSETNX" => hset(ks, a, true),
        "HGET" => hget(ks, a),
        "HMGET" => hmget(ks, a),
        "HDEL" => hdel(ks, a),
        "HINCRBY" => hincrby(ks, a),
        "HEXISTS" => hexists(ks, a),
        "HGETALL" => hgetall(ks, a),
        "HLEN" => hlen(ks, a),
        "HSCAN" => hscan(ks, a),
        "ZADD" => zadd(ks, a),
        "ZREM" => zrem(ks, a),
        "ZCARD" => size_of(ks, a, Type::Zset),
        "ZSCORE" => zscore(ks, a),
        "ZRANGE" => zrange(ks, a, false),
        "ZREVRANGE" => zrange(ks, a, true),
        "ZRANGEBYSCORE" => zrangebyscore(ks, a, false),
        "ZREVRANGEBYSCORE" => zrangebyscore(ks, a, true),
        "ZRANK" => zrank(ks, a, false),
        "ZREVRANK" => zrank(ks, a, true),
        "ZREMRANGEBYRANK" => zremrangebyrank(ks, a),
        "ZREMRANGEBYSCORE" => zremrangebyscore(ks, a),
        "RPUSH" => rpush(ks, a),
        "LRANGE" => lrange(ks, a),
        "LLEN" => size_of(ks, a, Type::List),
        "LTRIM" => ltrim(ks, a),
        // the engine's own park takes a wake token with it
        "LPOP" => lpop(ks, a),
        "XADD" => xadd(ks, a, now_us),
        "XRANGE" => xrange(ks, a),
        "XLEN" => size_of(ks, a, Type::Stream),
        "HKEYS" => {
            arity(a, 1, 1)?;
            Ok(Reply::Array(
                hash_all(ks, &a[0])?.into_iter().map(|(f, _)| Reply::Bulk(f)).collect(),
            ))
        }
        "SADD" => sadd(ks, a),
        "SREM" => srem(ks, a),
        "SMEMBERS" => smembers(ks, a),
        "SCARD" => size_of(ks, a, Type::Set),
        // the probes' and tools' own: every key matching a pattern, in one reply (cursor 0)
        "SCAN" => scan(ks, a),
        "TIME" => Ok(Reply::Array(vec![
            Reply::Bulk(now_us.div_euclid(1_000_000).to_string().into_bytes()),
            Reply::Bulk(now_us.rem_euclid(1_000_000).to_string().into_bytes()),
        ])),
        // delivered by the engine after the commit (the caller collects them from the script's
        // notices); here it only counts as a command
        "PUBLISH" | "SPUBLISH" => {
            arity(a, 2, 2)?;
            Ok(Reply::Int(0))
        }
        _ => Err(err(&format!(
            "ERR unknown command '{name}': the embedded engine serves only the commands the scripts use"
        ))),
    }
}

fn err(text: &str) -> Fail {
    Fail::Reply(text.to_string())
}

fn syntax() -> Fail {
    err("ERR syntax error")
}

fn not_integer() -> Fail {
    err("ERR value is not an integer or out of range")
}

/// Checks the count of arguments after the command's name.
fn arity(a: &[Vec<u8>], least: usize, most: usize) -> R<()> {
    if a.len() < least || a.len() > most {
        return Err(err("ERR wrong number of arguments for command"));
    }
    Ok(())
}

/// An integer argument as Redis reads one: decimal digits, an optional '-', no spaces.
pub(crate) fn int(b: &[u8]) -> R<i64> {
    let s = std::str::from_utf8(b).map_err(|_| not_integer())?;
    if s.is_empty() || s.starts_with('+') || s.len() > 1 && (s.starts_with('0') || s.starts_with("-0")) {
        return Err(not_integer());
    }
    s.parse().map_err(|_| not_integer())
}

/// A score as Redis reads one (`inf`, `+inf`, `-inf` included; NaN refused).
fn score(b: &[u8]) -> R<f64> {
    let bad = || err("ERR value is not a valid float");
    let s = std::str::from_utf8(b).map_err(|_| bad())?;
    let v = match s.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => f64::INFINITY,
        "-inf" | "-infinity" => f64::NEG_INFINITY,
        t if t.trim() != t || t.is_empty() => return Err(bad()),
        t => t.parse::<f64>().map_err(|_| bad())?,
    };
    if v.is_nan() {
        return Err(bad());
    }
    Ok(v)
}

/// A range bound of ZRANGEBYSCORE: its value and whether it is exclusive (`(`).
fn bound(b: &[u8]) -> R<(f64, bool)> {
    match b.strip_prefix(b"(") {
        Some(rest) => Ok((score(rest).map_err(|_| err("ERR min or max is not a float"))?, true)),
        None => Ok((score(b).map_err(|_| err("ERR min or max is not a float"))?, false)),
    }
}

fn bulk(v: Option<Vec<u8>>) -> Reply {
    v.map_or(Reply::Nil, Reply::Bulk)
}

// -- strings and keys

fn get(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, 1)?;
    Ok(bulk(ks.string(&a[0])?))
}

fn set(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    if a.len() != 2 {
        return Err(syntax());
    }
    ks.set_string(&a[0], &a[1])?;
    Ok(Reply::Status("OK".into()))
}

fn incrby(ks: &mut Keyspace, a: &[Vec<u8>], one: bool) -> R<Reply> {
    let by = if one {
        arity(a, 1, 1)?;
        1
    } else {
        arity(a, 2, 2)?;
        int(&a[1])?
    };
    let old = match ks.string(&a[0])? {
        Some(v) => int(&v)?,
        None => 0,
    };
    let new = old
        .checked_add(by)
        .ok_or_else(|| err("ERR increment or decrement would overflow"))?;
    ks.set_string(&a[0], new.to_string().as_bytes())?;
    Ok(Reply::Int(new))
}

fn mget(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, usize::MAX)?;
    let mut out = Vec::with_capacity(a.len());
    for key in a {
        // a key of another type answers nil, as on Redis
        out.push(match ks.meta(key)? {
            Some(m) if m.ty == Type::String => bulk(ks.string(key)?),
            _ => Reply::Nil,
        });
    }
    Ok(Reply::Array(out))
}

fn exists(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, usize::MAX)?;
    let mut n = 0;
    for key in a {
        n += i64::from(ks.meta(key)?.is_some());
    }
    Ok(Reply::Int(n))
}

fn del(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, usize::MAX)?;
    let mut n = 0;
    for key in a {
        n += i64::from(ks.delete(key)?);
    }
    Ok(Reply::Int(n))
}

fn type_of(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, 1)?;
    let name = ks.meta(&a[0])?.map_or("none", |m| m.ty.name());
    Ok(Reply::Status(name.into()))
}

fn size_of(ks: &mut Keyspace, a: &[Vec<u8>], ty: Type) -> R<Reply> {
    arity(a, 1, 1)?;
    Ok(Reply::Int(ks.typed(&a[0], ty)?.map_or(0, |m| m.size)))
}

/// SCAN 0 [MATCH pattern] [COUNT n]: every key matching the pattern, at once (the cursor it answers
/// is 0). For tools and tests: the scripts never scan the keyspace.
fn scan(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, 5)?;
    let mut pattern: Option<&[u8]> = None;
    for o in a[1..].chunks(2) {
        let [name, value] = o else { return Err(syntax()) };
        match name.to_ascii_uppercase().as_slice() {
            b"MATCH" => pattern = Some(value),
            b"COUNT" => {
                int(value)?;
            }
            _ => return Err(syntax()),
        }
    }
    let mut keys: Vec<Vec<u8>> = {
        let mut stmt = ks.conn.prepare_cached("SELECT key FROM kv_keys")?;
        let rows = stmt.query_map([], |r| r.get(0))?;
        rows.collect::<rusqlite::Result<_>>()?
    };
    {
        let mut stmt = ks
            .conn
            .prepare_cached("SELECT base, id FROM kv_jobs WHERE fields > 0")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, Vec<u8>>(0)?, r.get::<_, Vec<u8>>(1)?)))?;
        for row in rows {
            let (base, id) = row?;
            keys.push([base.as_slice(), b"job:", id.as_slice()].concat());
        }
    }
    keys.retain(|k| pattern.is_none_or(|p| glob(p, k)));
    keys.sort();
    Ok(Reply::Array(vec![
        Reply::Bulk(b"0".to_vec()),
        Reply::Array(keys.into_iter().map(Reply::Bulk).collect()),
    ]))
}

// -- hashes: a job key's hash is its row (`Keyspace::job_hash`), any other hash generic

/// A field's value.
fn field(ks: &Keyspace, kid: i64, f: &[u8]) -> R<Option<Vec<u8>>> {
    use rusqlite::OptionalExtension;
    Ok(ks
        .conn
        .prepare_cached("SELECT value FROM kv_hash WHERE kid = ?1 AND field = ?2")?
        .query_row(params![kid, f], |r| r.get(0))
        .optional()?)
}

/// Writes a field; whether it is new.
fn put_field(ks: &Keyspace, kid: i64, fresh_key: bool, f: &[u8], v: &[u8]) -> R<bool> {
    if !fresh_key {
        let n = ks
            .conn
            .prepare_cached("UPDATE kv_hash SET value = ?3 WHERE kid = ?1 AND field = ?2")?
            .execute(params![kid, f, v])?;
        if n > 0 {
            return Ok(false);
        }
    }
    ks.conn
        .prepare_cached("INSERT INTO kv_hash (kid, field, value) VALUES (?1, ?2, ?3)")?
        .execute(params![kid, f, v])?;
    Ok(true)
}

/// The values of `fields` of a hash; None when the hash is absent.
fn hash_get(ks: &mut Keyspace, key: &[u8], fields: &[Vec<u8>]) -> R<Option<Vec<Option<Vec<u8>>>>> {
    if let Some(row) = ks.job_hash(key)? {
        if row.len() == 0 {
            return Ok(None);
        }
        return Ok(Some(fields.iter().map(|f| row.get(f).cloned()).collect()));
    }
    let Some(m) = ks.typed(key, Type::Hash)? else {
        return Ok(None);
    };
    // a small hash is read whole in one range; a large one field by field
    if fields.len() > 1 && m.size <= 24 {
        let all = all_fields(ks, m.kid)?;
        return Ok(Some(
            fields
                .iter()
                .map(|f| all.iter().find(|(k, _)| k == f).map(|(_, v)| v.clone()))
                .collect(),
        ));
    }
    let mut out = Vec::with_capacity(fields.len());
    for f in fields {
        out.push(field(ks, m.kid, f)?);
    }
    Ok(Some(out))
}

/// Writes field/value pairs; how many fields are new.
fn hash_set(ks: &mut Keyspace, key: &[u8], pairs: &[Vec<u8>]) -> R<i64> {
    if let Some(row) = ks.job_hash(key)? {
        let mut added = 0;
        for p in pairs.chunks(2) {
            added += i64::from(row.set(&p[0], p[1].clone()));
        }
        return Ok(added);
    }
    let m = ks.make(key, Type::Hash)?;
    // a key made by this command has no fields: each is inserted without looking, but for a
    // field repeated in one HSET (written twice, counted once)
    let fresh = m.size == 0;
    let mut seen: Vec<&[u8]> = Vec::new();
    let mut added = 0;
    for p in pairs.chunks(2) {
        let absent = fresh && !seen.contains(&p[0].as_slice());
        added += i64::from(put_field(ks, m.kid, absent, &p[0], &p[1])?);
        if fresh {
            seen.push(&p[0]);
        }
    }
    ks.resize(key, m.size + added, m.head)?;
    Ok(added)
}

fn hset(ks: &mut Keyspace, a: &[Vec<u8>], nx: bool) -> R<Reply> {
    if a.len() < 3 || a.len().is_multiple_of(2) || nx && a.len() != 3 {
        return Err(err("ERR wrong number of arguments for command"));
    }
    if nx && hash_get(ks, &a[0], &a[1..2])?.is_some_and(|v| v[0].is_some()) {
        return Ok(Reply::Int(0));
    }
    Ok(Reply::Int(hash_set(ks, &a[0], &a[1..])?))
}

fn hget(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, 2)?;
    let v = hash_get(ks, &a[0], &a[1..])?.and_then(|mut v| v.pop().flatten());
    Ok(bulk(v))
}

/// Every field and value of a generic hash, in field order.
fn all_fields(ks: &Keyspace, kid: i64) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
    let mut stmt = ks
        .conn
        .prepare_cached("SELECT field, value FROM kv_hash WHERE kid = ?1 ORDER BY field")?;
    let rows = stmt.query_map([kid], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// Every field and value of a hash (none when absent).
fn hash_all(ks: &mut Keyspace, key: &[u8]) -> R<Vec<(Vec<u8>, Vec<u8>)>> {
    if let Some(row) = ks.job_hash(key)? {
        return Ok(row.all());
    }
    match ks.typed(key, Type::Hash)? {
        Some(m) => all_fields(ks, m.kid),
        None => Ok(Vec::new()),
    }
}

fn hmget(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, usize::MAX)?;
    let values = hash_get(ks, &a[0], &a[1..])?.unwrap_or_else(|| vec![None; a.len() - 1]);
    Ok(Reply::Array(values.into_iter().map(bulk).collect()))
}

fn hdel(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, usize::MAX)?;
    if let Some(row) = ks.job_hash(&a[0])? {
        let n = a[1..].iter().filter(|f| row.del(f)).count();
        return Ok(Reply::Int(n as i64));
    }
    let Some(m) = ks.typed(&a[0], Type::Hash)? else {
        return Ok(Reply::Int(0));
    };
    let mut n = 0;
    for f in &a[1..] {
        n += ks
            .conn
            .prepare_cached("DELETE FROM kv_hash WHERE kid = ?1 AND field = ?2")?
            .execute(params![m.kid, f])? as i64;
    }
    ks.resize(&a[0], m.size - n, m.head)?;
    Ok(Reply::Int(n))
}

fn hincrby(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 3, 3)?;
    let by = int(&a[2])?;
    let old = hash_get(ks, &a[0], &a[1..2])?.and_then(|mut v| v.pop().flatten());
    let base = match &old {
        Some(v) => int(v).map_err(|_| err("ERR hash value is not an integer"))?,
        None => 0,
    };
    let new = base
        .checked_add(by)
        .ok_or_else(|| err("ERR increment or decrement would overflow"))?;
    hash_set(ks, &a[0], &[a[1].clone(), new.to_string().into_bytes()])?;
    Ok(Reply::Int(new))
}

fn hexists(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, 2)?;
    let there = hash_get(ks, &a[0], &a[1..])?.is_some_and(|v| v[0].is_some());
    Ok(Reply::Int(i64::from(there)))
}

fn hlen(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, 1)?;
    if let Some(row) = ks.job_hash(&a[0])? {
        return Ok(Reply::Int(row.len() as i64));
    }
    size_of(ks, a, Type::Hash)
}

fn hgetall(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, 1)?;
    let mut out = Vec::new();
    for (f, v) in hash_all(ks, &a[0])? {
        out.push(Reply::Bulk(f));
        out.push(Reply::Bulk(v));
    }
    Ok(Reply::Array(out))
}

/// Whether `s` matches the glob `p` (`*`, `?`, `\` escapes), as MATCH does.
fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || !s.is_empty() && glob(p, &s[1..]),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(b'\\'), Some(c)) if p.get(1) == Some(c) => glob(&p[2..], &s[1..]),
        (Some(a), Some(b)) if a == b && *a != b'\\' => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

/// HSCAN key cursor [MATCH pattern] [COUNT n]: the fields after the cursor in field order, COUNT
/// of them looked at. The cursor is `0` at either end, else the last field looked at (hex after a
/// `h`): a field present from the first call to the last is returned once.
fn hscan(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, 6)?;
    let (mut pattern, mut count) = (None, 10i64);
    for o in a[2..].chunks(2) {
        let [name, value] = o else { return Err(syntax()) };
        match name.to_ascii_uppercase().as_slice() {
            b"MATCH" => pattern = Some(value.clone()),
            b"COUNT" => count = int(value)?.max(1),
            _ => return Err(syntax()),
        }
    }
    let after: Vec<u8> = match a[1].as_slice() {
        b"0" => Vec::new(),
        c => unhex(c).ok_or_else(|| err("ERR invalid cursor"))?,
    };
    let rows: Vec<(Vec<u8>, Vec<u8>)> = if ks.job_hash(&a[0])?.is_some() {
        let mut all = hash_all(ks, &a[0])?;
        all.sort();
        all.into_iter()
            .filter(|(f, _)| a[1] == b"0" || *f > after)
            .take(count as usize)
            .collect()
    } else {
        let Some(m) = ks.typed(&a[0], Type::Hash)? else {
            return Ok(Reply::Array(vec![Reply::Bulk(b"0".to_vec()), Reply::Array(Vec::new())]));
        };
        let mut stmt = ks
            .conn
            .prepare_cached("SELECT field, value FROM kv_hash WHERE kid = ?1 AND field > ?2 ORDER BY field LIMIT ?3")?;
        let rows = stmt
            .query_map(params![m.kid, after, count], |r| Ok((r.get(0)?, r.get(1)?)))?
            .collect::<rusqlite::Result<_>>()?;
        rows
    };
    let next = if (rows.len() as i64) < count {
        b"0".to_vec()
    } else {
        rows.last().map_or(b"0".to_vec(), |(f, _)| hex(f))
    };
    let mut items = Vec::new();
    for (f, v) in rows {
        if pattern.as_deref().is_none_or(|p| glob(p, &f)) {
            items.push(Reply::Bulk(f));
            items.push(Reply::Bulk(v));
        }
    }
    Ok(Reply::Array(vec![Reply::Bulk(next), Reply::Array(items)]))
}

fn hex(b: &[u8]) -> Vec<u8> {
    let mut out = b"h".to_vec();
    for c in b {
        out.extend_from_slice(format!("{c:02x}").as_bytes());
    }
    out
}

fn unhex(c: &[u8]) -> Option<Vec<u8>> {
    let digits = c.strip_prefix(b"h")?;
    if digits.len() % 2 != 0 {
        return None;
    }
    digits
        .chunks(2)
        .map(|p| u8::from_str_radix(std::str::from_utf8(p).ok()?, 16).ok())
        .collect()
}

// -- sorted sets: generic (`kv_zset`, by the key's kid) or row sets (a column of the job rows
// of the key's queue, by its base)

/// Where a sorted set's members are, and the SQL that reaches them.
struct Z<'k> {
    key: &'k [u8],
    size: i64,
    head: i64,
    at: ZAt<'k>,
}

enum ZAt<'k> {
    Generic(i64),
    Rows { base: &'k [u8], col: usize },
}

impl Z<'_> {
    /// The table, the condition selecting the set's members (`?1` the owner), and the member
    /// and score columns.
    fn sql(&self) -> (&'static str, String, &'static str, &'static str) {
        match self.at {
            ZAt::Generic(_) => ("kv_zset", "kid = ?1".into(), "member", "score"),
            ZAt::Rows { col, .. } => {
                let z = ROW_ZSETS[col];
                ("kv_jobs", format!("base = ?1 AND {z} IS NOT NULL"), "id", z)
            }
        }
    }

    /// The statement of `shape` on this kind of set, its text built once (the statement cache
    /// is keyed by the text; building it on every command cost a tenth of a claim).
    fn memo(&self, shape: u8, build: impl FnOnce() -> String) -> &'static str {
        type Memo = std::sync::Mutex<HashMap<(usize, u8), &'static str>>;
        static MEMO: std::sync::LazyLock<Memo> = std::sync::LazyLock::new(Memo::default);
        let kind = match self.at {
            ZAt::Generic(_) => 0,
            ZAt::Rows { col, .. } => 1 + col,
        };
        let mut memo = MEMO.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        // a few shapes on three kinds of set: what is leaked is bounded
        memo.entry((kind, shape))
            .or_insert_with(|| Box::leak(build().into_boxed_str()))
    }

    fn owner(&self) -> rusqlite::types::Value {
        match self.at {
            ZAt::Generic(kid) => rusqlite::types::Value::Integer(kid),
            ZAt::Rows { base, .. } => rusqlite::types::Value::Blob(base.to_vec()),
        }
    }
}

/// The sorted set at `key` (None: absent), or with `make` made when absent, for reads and writes
/// of single members (a row set's go through the cached rows).
fn zset<'k>(ks: &mut Keyspace, key: &'k [u8], make: bool) -> R<Option<Z<'k>>> {
    zset_at(ks, key, make, false)
}

/// The sorted set at `key` (None: absent) for a read or removal by range: a row set's rows the
/// script changed are written first, so the range's SQL sees them.
fn zset_ranged<'k>(ks: &mut Keyspace, key: &'k [u8]) -> R<Option<Z<'k>>> {
    zset_at(ks, key, false, true)
}

fn zset_at<'k>(ks: &mut Keyspace, key: &'k [u8], make: bool, ranged: bool) -> R<Option<Z<'k>>> {
    let m = if make {
        Some(ks.make(key, Type::Zset)?)
    } else {
        ks.typed(key, Type::Zset)?
    };
    let Some(m) = m else { return Ok(None) };
    let at = match classify(key) {
        Class::RowZset { base, col } => {
            // a range read sees the rows the script wrote (a single member's read or write goes
            // through the cached row: writing every changed row at each ZADD cost a fifth of a
            // consumer's time)
            if ranged {
                ks.flush_rows()?;
            }
            ZAt::Rows { base, col }
        }
        _ => ZAt::Generic(m.kid),
    };
    Ok(Some(Z {
        key,
        size: m.size,
        head: m.head,
        at,
    }))
}

/// A member's score.
fn z_score(ks: &mut Keyspace, z: &Z<'_>, member: &[u8]) -> R<Option<f64>> {
    use rusqlite::OptionalExtension;
    match z.at {
        ZAt::Generic(kid) => Ok(ks
            .conn
            .prepare_cached("SELECT score FROM kv_zset WHERE kid = ?1 AND member = ?2")?
            .query_row(params![kid, member], |r| r.get(0))
            .optional()?),
        ZAt::Rows { base, col } => {
            let key = [base, b"job:", member].concat();
            Ok(ks.row(&key, base, member)?.scores[col])
        }
    }
}

/// Sets (Some) or removes (None) a member's score; `old` as [`z_score`] read it.
fn z_put(ks: &mut Keyspace, z: &Z<'_>, member: &[u8], old: Option<f64>, score: Option<f64>) -> R<()> {
    match z.at {
        ZAt::Generic(kid) => {
            let sql = match (old, score) {
                (None, Some(_)) => "INSERT INTO kv_zset (kid, member, score) VALUES (?1, ?2, ?3)",
                (Some(_), Some(_)) => "UPDATE kv_zset SET score = ?3 WHERE kid = ?1 AND member = ?2",
                (Some(_), None) => "DELETE FROM kv_zset WHERE kid = ?1 AND member = ?2 AND ?3 IS NULL",
                (None, None) => return Ok(()),
            };
            ks.conn.prepare_cached(sql)?.execute(params![kid, member, score])?;
        }
        ZAt::Rows { base, col } => {
            let key = [base, b"job:", member].concat();
            ks.row(&key, base, member)?.set_score(col, score);
        }
    }
    Ok(())
}

/// ZADD key [NX|XX] [CH] score member [score member …]
fn zadd(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 3, usize::MAX)?;
    let (mut nx, mut xx, mut ch) = (false, false, false);
    let mut i = 1;
    while i < a.len() {
        match a[i].to_ascii_uppercase().as_slice() {
            b"NX" => nx = true,
            b"XX" => xx = true,
            b"CH" => ch = true,
            _ => break,
        }
        i += 1;
    }
    let pairs = &a[i..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) || nx && xx {
        return Err(syntax());
    }
    let mut parsed = Vec::with_capacity(pairs.len() / 2);
    for p in pairs.chunks(2) {
        parsed.push((score(&p[0])?, &p[1]));
    }
    let Some(z) = zset(ks, &a[0], !xx)? else {
        return Ok(Reply::Int(0));
    };
    let (mut added, mut changed) = (0i64, 0i64);
    for (s, member) in parsed {
        // a set made by this command has no member yet but those it adds
        let old = if z.size + added == 0 && matches!(z.at, ZAt::Generic(_)) {
            None
        } else {
            z_score(ks, &z, member)?
        };
        match old {
            None if !xx => {
                z_put(ks, &z, member, None, Some(s))?;
                added += 1;
            }
            Some(o) if !nx && o != s => {
                z_put(ks, &z, member, old, Some(s))?;
                changed += 1;
            }
            _ => {}
        }
    }
    ks.resize(z.key, z.size + added, z.head)?;
    Ok(Reply::Int(if ch { added + changed } else { added }))
}

/// Removes members; how many were there.
fn z_remove(ks: &mut Keyspace, z: &Z<'_>, members: &[Vec<u8>]) -> R<i64> {
    let mut n = 0;
    for member in members {
        let old = z_score(ks, z, member)?;
        if old.is_some() {
            z_put(ks, z, member, old, None)?;
            n += 1;
        }
    }
    ks.resize(z.key, z.size - n, z.head)?;
    Ok(n)
}

fn zrem(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, usize::MAX)?;
    let Some(z) = zset(ks, &a[0], false)? else {
        return Ok(Reply::Int(0));
    };
    Ok(Reply::Int(z_remove(ks, &z, &a[1..])?))
}

fn zscore(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, 2)?;
    let Some(z) = zset(ks, &a[0], false)? else {
        return Ok(Reply::Nil);
    };
    Ok(bulk(z_score(ks, &z, &a[1])?.map(|s| format_double(s).into_bytes())))
}

/// Rank indexes as Redis takes them (negative from the end), clamped: None when the range is
/// empty.
fn ranks(start: i64, stop: i64, size: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { (size + start).max(0) } else { start };
    let stop = if stop < 0 { size + stop } else { stop.min(size - 1) };
    (start <= stop && start < size).then_some((start, stop))
}

/// The members (with their scores) of a rank range, in order or reversed.
fn by_rank(ks: &Keyspace, z: &Z<'_>, from: i64, to: i64, rev: bool) -> R<Vec<(Vec<u8>, f64)>> {
    let sql = z.memo(rev as u8, || {
        let (table, cond, member, score) = z.sql();
        let order = if rev {
            format!("{score} DESC, {member} DESC")
        } else {
            format!("{score}, {member}")
        };
        format!("SELECT {member}, {score} FROM {table} WHERE {cond} ORDER BY {order} LIMIT ?2 OFFSET ?3")
    });
    let mut stmt = ks.conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params![z.owner(), to - from + 1, from], |r| Ok((r.get(0)?, r.get(1)?)))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// A range of scores: its bounds (each exclusive or not), its order, and `count` members (negative:
/// all) from `offset`.
struct ScoreRange {
    low: (f64, bool),
    high: (f64, bool),
    rev: bool,
    offset: i64,
    count: i64,
}

/// The members of a score range.
fn by_score(ks: &Keyspace, z: &Z<'_>, range: ScoreRange) -> R<Vec<(Vec<u8>, f64)>> {
    let ScoreRange {
        low: (low, low_open),
        high: (high, high_open),
        rev,
        offset,
        count,
    } = range;
    let shape = 2 + rev as u8 + 2 * low_open as u8 + 4 * high_open as u8;
    let sql = z.memo(shape, || {
        let (table, cond, member, score) = z.sql();
        let order = if rev {
            format!("{score} DESC, {member} DESC")
        } else {
            format!("{score}, {member}")
        };
        format!(
            "SELECT {member}, {score} FROM {table} WHERE {cond} AND {score} {} ?2 AND {score} {} ?3 ORDER BY {order} LIMIT ?4 OFFSET ?5",
            if low_open { ">" } else { ">=" },
            if high_open { "<" } else { "<=" },
        )
    });
    let mut stmt = ks.conn.prepare_cached(sql)?;
    let rows = stmt.query_map(params![z.owner(), low, high, count, offset], |r| {
        Ok((r.get(0)?, r.get(1)?))
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

fn scored(rows: Vec<(Vec<u8>, f64)>, with_scores: bool) -> Reply {
    let mut out = Vec::with_capacity(rows.len() * if with_scores { 2 } else { 1 });
    for (m, s) in rows {
        out.push(Reply::Bulk(m));
        if with_scores {
            out.push(Reply::Bulk(format_double(s).into_bytes()));
        }
    }
    Reply::Array(out)
}

/// ZRANGE / ZREVRANGE key start stop [WITHSCORES] (by rank)
fn zrange(ks: &mut Keyspace, a: &[Vec<u8>], rev: bool) -> R<Reply> {
    arity(a, 3, 4)?;
    let with_scores = match a.get(3) {
        None => false,
        Some(o) if o.eq_ignore_ascii_case(b"WITHSCORES") => true,
        Some(_) => return Err(syntax()),
    };
    let (start, stop) = (int(&a[1])?, int(&a[2])?);
    let Some(z) = zset_ranged(ks, &a[0])? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let Some((from, to)) = ranks(start, stop, z.size) else {
        return Ok(Reply::Array(Vec::new()));
    };
    Ok(scored(by_rank(ks, &z, from, to, rev)?, with_scores))
}

/// ZRANGEBYSCORE key min max / ZREVRANGEBYSCORE key max min, [WITHSCORES] [LIMIT offset count]
fn zrangebyscore(ks: &mut Keyspace, a: &[Vec<u8>], rev: bool) -> R<Reply> {
    arity(a, 3, 7)?;
    let (first, second) = (bound(&a[1])?, bound(&a[2])?);
    let (low, high) = if rev { (second, first) } else { (first, second) };
    let (mut with_scores, mut offset, mut count) = (false, 0i64, -1i64);
    let mut i = 3;
    while i < a.len() {
        match a[i].to_ascii_uppercase().as_slice() {
            b"WITHSCORES" => {
                with_scores = true;
                i += 1;
            }
            b"LIMIT" if i + 2 < a.len() => {
                offset = int(&a[i + 1])?;
                count = int(&a[i + 2])?;
                i += 3;
            }
            _ => return Err(syntax()),
        }
    }
    let Some(z) = zset_ranged(ks, &a[0])? else {
        return Ok(Reply::Array(Vec::new()));
    };
    if offset < 0 {
        return Ok(Reply::Array(Vec::new()));
    }
    let range = ScoreRange {
        low,
        high,
        rev,
        offset,
        count,
    };
    Ok(scored(by_score(ks, &z, range)?, with_scores))
}

fn zrank(ks: &mut Keyspace, a: &[Vec<u8>], rev: bool) -> R<Reply> {
    arity(a, 2, 2)?;
    let Some(z) = zset_ranged(ks, &a[0])? else {
        return Ok(Reply::Nil);
    };
    let Some(s) = z_score(ks, &z, &a[1])? else {
        return Ok(Reply::Nil);
    };
    let sql = z.memo(10, || {
        let (table, cond, member, score) = z.sql();
        format!("SELECT count(*) FROM {table} WHERE {cond} AND ({score} < ?2 OR {score} = ?2 AND {member} < ?3)")
    });
    let before: i64 = ks
        .conn
        .prepare_cached(sql)?
        .query_row(params![z.owner(), s, a[1]], |r| r.get(0))?;
    Ok(Reply::Int(if rev { z.size - 1 - before } else { before }))
}

fn zremrangebyrank(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 3, 3)?;
    let (start, stop) = (int(&a[1])?, int(&a[2])?);
    let Some(z) = zset_ranged(ks, &a[0])? else {
        return Ok(Reply::Int(0));
    };
    let Some((from, to)) = ranks(start, stop, z.size) else {
        return Ok(Reply::Int(0));
    };
    let members: Vec<Vec<u8>> = by_rank(ks, &z, from, to, false)?.into_iter().map(|(m, _)| m).collect();
    Ok(Reply::Int(z_remove(ks, &z, &members)?))
}

fn zremrangebyscore(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 3, 3)?;
    let (low, high) = (bound(&a[1])?, bound(&a[2])?);
    let Some(z) = zset_ranged(ks, &a[0])? else {
        return Ok(Reply::Int(0));
    };
    let all = ScoreRange {
        low,
        high,
        rev: false,
        offset: 0,
        count: -1,
    };
    let members: Vec<Vec<u8>> = by_score(ks, &z, all)?.into_iter().map(|(m, _)| m).collect();
    Ok(Reply::Int(z_remove(ks, &z, &members)?))
}

// -- lists: element i at position head + i

fn rpush(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, usize::MAX)?;
    let m = ks.make(&a[0], Type::List)?;
    for (i, v) in a[1..].iter().enumerate() {
        ks.conn
            .prepare_cached("INSERT INTO kv_list (kid, pos, value) VALUES (?1, ?2, ?3)")?
            .execute(params![m.kid, m.head + m.size + i as i64, v])?;
    }
    let size = m.size + a.len() as i64 - 1;
    ks.resize(&a[0], size, m.head)?;
    Ok(Reply::Int(size))
}

fn lrange(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 3, 3)?;
    let (start, stop) = (int(&a[1])?, int(&a[2])?);
    let Some(m) = ks.typed(&a[0], Type::List)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let Some((from, to)) = ranks(start, stop, m.size) else {
        return Ok(Reply::Array(Vec::new()));
    };
    let mut stmt = ks
        .conn
        .prepare_cached("SELECT value FROM kv_list WHERE kid = ?1 AND pos BETWEEN ?2 AND ?3 ORDER BY pos")?;
    let rows = stmt
        .query_map(params![m.kid, m.head + from, m.head + to], |r| r.get(0))?
        .map(|v| v.map(Reply::Bulk))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Reply::Array(rows))
}

fn ltrim(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 3, 3)?;
    let (start, stop) = (int(&a[1])?, int(&a[2])?);
    let Some(m) = ks.typed(&a[0], Type::List)? else {
        return Ok(Reply::Status("OK".into()));
    };
    let (from, to) = ranks(start, stop, m.size).unwrap_or((m.size, m.size - 1));
    ks.conn
        .prepare_cached("DELETE FROM kv_list WHERE kid = ?1 AND (pos < ?2 OR pos > ?3)")?
        .execute(params![m.kid, m.head + from, m.head + to])?;
    ks.resize(&a[0], (to - from + 1).max(0), m.head + from)?;
    Ok(Reply::Status("OK".into()))
}

fn lpop(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, 1)?;
    let Some(m) = ks.typed(&a[0], Type::List)? else {
        return Ok(Reply::Nil);
    };
    let v: Vec<u8> = ks
        .conn
        .prepare_cached("DELETE FROM kv_list WHERE kid = ?1 AND pos = ?2 RETURNING value")?
        .query_row(params![m.kid, m.head], |r| r.get(0))?;
    ks.resize(&a[0], m.size - 1, m.head + 1)?;
    Ok(Reply::Bulk(v))
}

// -- streams: entry i at position head + i of the list table, its bytes the entry's id and fields
// (encoded as a job row's overflow is)

/// XADD key [MAXLEN [~|=] n] * field value [field value …]: an entry with an id of the store's
/// clock (`<ms>-<seq>`, after the stream's last), the oldest entries past `n` trimmed.
fn xadd(ks: &mut Keyspace, a: &[Vec<u8>], now_us: i64) -> R<Reply> {
    arity(a, 4, usize::MAX)?;
    let mut i = 1;
    let mut maxlen = None;
    if a[i].eq_ignore_ascii_case(b"MAXLEN") {
        i += 1;
        if a.get(i).is_some_and(|o| o == b"~" || o == b"=") {
            i += 1;
        }
        maxlen = Some(int(a.get(i).ok_or_else(syntax)?)?);
        i += 1;
    }
    if a.get(i).map(Vec::as_slice) != Some(b"*") {
        return Err(err(
            "ERR the embedded engine adds stream entries with generated ids (*) only",
        ));
    }
    let fields = &a[i + 1..];
    if fields.is_empty() || !fields.len().is_multiple_of(2) {
        return Err(err("ERR wrong number of arguments for 'xadd' command"));
    }
    let last = ks.stream_last(&a[0])?;
    let ms = now_us.div_euclid(1000);
    let (ms, seq) = match last {
        Some((lms, lseq)) if lms >= ms => (lms, lseq + 1),
        _ => (ms, 0),
    };
    let id = format!("{ms}-{seq}");
    let m = ks.make(&a[0], Type::Stream)?;
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = fields.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
    let mut entry = vec![(id.clone().into_bytes(), Vec::new())];
    entry.extend(pairs);
    ks.conn
        .prepare_cached("INSERT INTO kv_list (kid, pos, value) VALUES (?1, ?2, ?3)")?
        .execute(params![m.kid, m.head + m.size, super::keyspace::encode_extra(&entry)])?;
    ks.conn
        .prepare_cached("UPDATE kv_keys SET value = ?2 WHERE kid = ?1")?
        .execute(params![m.kid, id.as_bytes()])?;
    let (mut head, mut size) = (m.head, m.size + 1);
    if let Some(max) = maxlen.filter(|&n| n >= 0 && size > n) {
        let drop = size - max;
        ks.conn
            .prepare_cached("DELETE FROM kv_list WHERE kid = ?1 AND pos < ?2")?
            .execute(params![m.kid, head + drop])?;
        head += drop;
        size = max;
    }
    ks.resize(&a[0], size, head)?;
    Ok(Reply::Bulk(id.into_bytes()))
}

/// XRANGE key - + [COUNT n]: the entries in order, each its id and its fields.
fn xrange(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 3, 5)?;
    if a[1] != b"-" || a[2] != b"+" {
        return Err(err("ERR the embedded engine reads streams whole (XRANGE key - +) only"));
    }
    let count = match a.get(3) {
        Some(c) if c.eq_ignore_ascii_case(b"COUNT") => int(a.get(4).ok_or_else(syntax)?)?,
        Some(_) => return Err(syntax()),
        None => -1,
    };
    let Some(m) = ks.typed(&a[0], Type::Stream)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let mut stmt = ks
        .conn
        .prepare_cached("SELECT value FROM kv_list WHERE kid = ?1 ORDER BY pos LIMIT ?2")?;
    let rows = stmt
        .query_map(params![m.kid, count], |r| r.get::<_, Vec<u8>>(0))?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut out = Vec::with_capacity(rows.len());
    for bytes in rows {
        let mut parts = super::keyspace::decode_extra(&bytes).into_iter();
        let id = parts.next().map(|(id, _)| id).unwrap_or_default();
        let fields = parts.flat_map(|(f, v)| [Reply::Bulk(f), Reply::Bulk(v)]).collect();
        out.push(Reply::Array(vec![Reply::Bulk(id), Reply::Array(fields)]));
    }
    Ok(Reply::Array(out))
}

// -- sets

fn sadd(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, usize::MAX)?;
    let m = ks.make(&a[0], Type::Set)?;
    let mut n = 0;
    for member in &a[1..] {
        n += ks
            .conn
            .prepare_cached("INSERT OR IGNORE INTO kv_set (kid, member) VALUES (?1, ?2)")?
            .execute(params![m.kid, member])? as i64;
    }
    ks.resize(&a[0], m.size + n, m.head)?;
    Ok(Reply::Int(n))
}

fn srem(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 2, usize::MAX)?;
    let Some(m) = ks.typed(&a[0], Type::Set)? else {
        return Ok(Reply::Int(0));
    };
    let mut n = 0;
    for member in &a[1..] {
        n += ks
            .conn
            .prepare_cached("DELETE FROM kv_set WHERE kid = ?1 AND member = ?2")?
            .execute(params![m.kid, member])? as i64;
    }
    ks.resize(&a[0], m.size - n, m.head)?;
    Ok(Reply::Int(n))
}

fn smembers(ks: &mut Keyspace, a: &[Vec<u8>]) -> R<Reply> {
    arity(a, 1, 1)?;
    let Some(m) = ks.typed(&a[0], Type::Set)? else {
        return Ok(Reply::Array(Vec::new()));
    };
    let mut stmt = ks
        .conn
        .prepare_cached("SELECT member FROM kv_set WHERE kid = ?1 ORDER BY member")?;
    let rows = stmt
        .query_map([m.kid], |r| r.get(0))?
        .map(|v| v.map(Reply::Bulk))
        .collect::<rusqlite::Result<Vec<_>>>()?;
    Ok(Reply::Array(rows))
}
