//! The embedded engine: the verbs' own Lua scripts (the very bodies Redis runs) in Lua 5.1, with
//! `redis.call` served by a keyspace on SQLite (`engine/keyspace.rs`, `engine/commands.rs`).
//! Unstable: the store's own machinery, not an extension point.
//!
//! * **Sandbox** as Redis 7's: `string`, `table`, `math` and the base functions but `load*`,
//!   `dofile`, `require`, `module`, `getfenv`/`setfenv`, `collectgarbage`, `print`; no `os`, `io`,
//!   `debug`, `package`; reading or writing an undefined global is an error. `cjson`, `cmsgpack`
//!   and `bit` are not provided (no script uses them).
//! * **One Lua state per connection**, moving with it between the store's thread and a caller's
//!   (mlua's `send` feature): a script runs on whichever thread holds the connection.
//! * **Conversions** as Redis does them: a Lua number passed to `redis.call` is written as Redis
//!   writes it (an integer in full, otherwise 17 significant digits — never Lua's `%.14g`, which
//!   would corrupt 16-digit µs values); a number reply to an integer by truncation; `false` to
//!   nil; a table stops at its first nil; `{err=…}` / `{ok=…}` are error and status replies; a
//!   nil bulk reply reaches the script as `false`.
//! * **Transactions**: a run of scripts is one `BEGIN IMMEDIATE` transaction, each script under a
//!   savepoint of its own: a script that fails leaves nothing written (stricter than Redis, which
//!   keeps a failed script's writes — the scripts never write before their last refusal), and the
//!   scripts before and after it keep theirs. An SQLite or I/O error fails its script even inside
//!   `redis.pcall` (the script undone whole, its reply an error); the transaction's own `BEGIN`,
//!   savepoints and `COMMIT` failing abort the whole run.
//! * **Notices** (`PUBLISH`, and a push onto a queue's wake list) are collected in order and handed
//!   back after the commit; a message on a queue's `cancel` channel is also appended to a durable
//!   log in the file (`kv_cancels`, its newest 1,000) in the script's own transaction, for the
//!   consumers of other processes.

mod commands;
pub(crate) mod keyspace;

use std::collections::HashMap;

use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};
use rusqlite::Connection;

use keyspace::{Fail, Keyspace};

pub use crate::store::reply::{format_double, Reply};

/// A notice a script published: (channel, message).
pub type Notice = (Vec<u8>, Vec<u8>);

/// A failure of the file itself (SQLite, I/O): the run is rolled back whole.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EngineError(String);

impl From<rusqlite::Error> for EngineError {
    fn from(e: rusqlite::Error) -> Self {
        EngineError(e.to_string())
    }
}

impl From<mlua::Error> for EngineError {
    fn from(e: mlua::Error) -> Self {
        EngineError(format!("lua: {e}"))
    }
}

/// The host's Lua side: `redis.*` over the raw command function, the sandbox, and the runner
/// that sets KEYS and ARGV and calls a script under `pcall`.
const PRELUDE: &str = r#"
local raw = ...
local G, error, type, pcall, rawset, tostring = _G, error, type, pcall, rawset, tostring
local redis = {}
function redis.call(...)
  local r = raw(...)
  if type(r) == 'table' and r.err ~= nil then error(r, 0) end
  return r
end
redis.pcall = raw
function redis.error_reply(s) return { err = s } end
function redis.status_reply(s) return { ok = s } end
rawset(G, 'redis', redis)
for _, name in ipairs({ 'load', 'loadstring', 'loadfile', 'dofile', 'require', 'module', 'getfenv',
    'setfenv', 'collectgarbage', 'print', 'gcinfo', 'newproxy', 'os', 'io', 'debug', 'package' }) do
  rawset(G, name, nil)
end
setmetatable(G, {
  __index = function(_, k)
    error("Script attempted to access nonexistent global variable '" .. tostring(k) .. "'", 2)
  end,
  __newindex = function(_, k)
    error("Script attempted to create global variable '" .. tostring(k) .. "'", 2)
  end,
  __metatable = false,
})
return function(f, keys, argv)
  rawset(G, 'KEYS', keys)
  rawset(G, 'ARGV', argv)
  local ok, r = pcall(f)
  rawset(G, 'KEYS', nil)
  rawset(G, 'ARGV', nil)
  if ok then return true, r end
  if type(r) == 'table' and type(r.err) == 'string' then return false, r.err end
  return false, 'ERR ' .. tostring(r)
end
"#;

/// What a command that succeeded tells beyond the keyspace: a message published on a channel, or
/// a push onto one of a queue's wake lists (a notice on the list's key, its message the count of
/// tokens).
fn notice(argv: &[Vec<u8>]) -> Option<Notice> {
    let name = argv.first()?;
    if name.eq_ignore_ascii_case(b"PUBLISH") || name.eq_ignore_ascii_case(b"SPUBLISH") {
        if let [_, ch, msg] = argv {
            return Some((ch.clone(), msg.clone()));
        }
    }
    if name.eq_ignore_ascii_case(b"RPUSH")
        && argv
            .get(1)
            .is_some_and(|k| crate::keyspace::wake_list_base(k).is_some())
    {
        return Some((argv[1].clone(), (argv.len() - 2).to_string().into_bytes()));
    }
    None
}

/// What the raw command function reaches while a script runs (the state's app data).
struct Session {
    ks: Keyspace,
    /// The file failed during the script: the script fails, whatever it did with the error.
    fatal: Option<rusqlite::Error>,
    /// `PUBLISH`es of the run, in order: (channel, message).
    notices: Vec<Notice>,
    /// The store's clock as last read, µs (never goes back within the process).
    clock_us: i64,
}

impl Session {
    /// Keeps what a command that succeeded published: a message on a queue's `cancel` channel is
    /// also appended to the durable log other processes read (in the script's transaction, so it
    /// lands with the request's row or not at all).
    fn published(&mut self, argv: &[Vec<u8>]) -> Result<(), Fail> {
        if let Some(n) = notice(argv) {
            if n.0.ends_with(b":cancel") {
                self.ks.log_cancel(&n.0, &n.1).map_err(Fail::Fatal)?;
            }
            self.notices.push(n);
        }
        Ok(())
    }

    fn now_us(&mut self) -> i64 {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_micros() as i64)
            .unwrap_or(0);
        self.clock_us = self.clock_us.max(t);
        self.clock_us
    }
}

/// One script call: the script's name, its KEYS and ARGV.
#[derive(Debug, Clone)]
pub struct Call<'a> {
    /// The script (as registered with [`LuaHost::register`]).
    pub script: &'a str,
    /// KEYS.
    pub keys: Vec<Vec<u8>>,
    /// ARGV.
    pub args: Vec<Vec<u8>>,
}

/// A connection's keyspace and its Lua state, with the scripts compiled once (the embedded
/// `EVALSHA`).
pub struct LuaHost {
    lua: Lua,
    runner: Function,
    scripts: HashMap<String, Function>,
}

impl std::fmt::Debug for LuaHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LuaHost").field("scripts", &self.scripts.len()).finish()
    }
}

/// A Lua value as a command argument: a string's bytes, a number as Redis writes it.
fn arg(v: &Value) -> Result<Vec<u8>, String> {
    match v {
        Value::String(s) => Ok(s.as_bytes().to_vec()),
        Value::Integer(i) => Ok(i.to_string().into_bytes()),
        Value::Number(n) => Ok(format_double(*n).into_bytes()),
        _ => Err("ERR Lua redis lib command arguments must be strings or integers".into()),
    }
}

/// A reply as the script sees it.
fn to_lua(lua: &Lua, r: Reply) -> mlua::Result<Value> {
    Ok(match r {
        Reply::Nil => Value::Boolean(false),
        Reply::Int(i) => Value::Number(i as f64),
        Reply::Bulk(b) => Value::String(lua.create_string(&b)?),
        Reply::Status(s) => {
            let t = lua.create_table_with_capacity(0, 1)?;
            t.raw_set("ok", s)?;
            Value::Table(t)
        }
        Reply::Error(e) => {
            let t = lua.create_table_with_capacity(0, 1)?;
            t.raw_set("err", e)?;
            Value::Table(t)
        }
        Reply::Array(items) => {
            let t = lua.create_table_with_capacity(items.len(), 0)?;
            for (i, item) in items.into_iter().enumerate() {
                t.raw_seti(i + 1, to_lua(lua, item)?)?;
            }
            Value::Table(t)
        }
    })
}

/// A script's return value as a reply.
fn from_lua(v: Value) -> mlua::Result<Reply> {
    Ok(match v {
        Value::Nil => Reply::Nil,
        Value::Boolean(true) => Reply::Int(1),
        Value::Boolean(false) => Reply::Nil,
        Value::Integer(i) => Reply::Int(i),
        Value::Number(n) => Reply::Int(n as i64),
        Value::String(s) => Reply::Bulk(s.as_bytes().to_vec()),
        Value::Table(t) => table_reply(t)?,
        _ => Reply::Nil,
    })
}

fn table_reply(t: Table) -> mlua::Result<Reply> {
    if let Value::String(e) = t.raw_get::<Value>("err")? {
        return Ok(Reply::Error(e.to_string_lossy()));
    }
    if let Value::String(s) = t.raw_get::<Value>("ok")? {
        return Ok(Reply::Status(s.to_string_lossy()));
    }
    let mut out = Vec::new();
    for i in 1.. {
        match t.raw_get::<Value>(i)? {
            Value::Nil => break,
            v => out.push(from_lua(v)?),
        }
    }
    Ok(Reply::Array(out))
}

impl LuaHost {
    /// The engine of `conn` (its keyspace tables made when missing).
    pub fn new(conn: Connection) -> Result<Self, EngineError> {
        let ks = Keyspace::new(conn)?;
        let lua = Lua::new_with(StdLib::STRING | StdLib::TABLE | StdLib::MATH, LuaOptions::default())?;
        lua.set_app_data(Session {
            ks,
            fatal: None,
            notices: Vec::new(),
            clock_us: 0,
        });
        let raw = lua.create_function(|lua, args: MultiValue| {
            let mut argv = Vec::with_capacity(args.len());
            for v in args.iter() {
                match arg(v) {
                    Ok(a) => argv.push(a),
                    Err(e) => return to_lua(lua, Reply::Error(e)),
                }
            }
            let reply = {
                let mut host = lua
                    .app_data_mut::<Session>()
                    .ok_or_else(|| mlua::Error::runtime("the engine's host is missing"))?;
                let now = host.now_us();
                match commands::run(&mut host.ks, &argv, now).and_then(|r| host.published(&argv).map(|()| r)) {
                    Ok(r) => r,
                    Err(Fail::Reply(e)) => Reply::Error(e),
                    Err(Fail::Fatal(e)) => {
                        let text = e.to_string();
                        host.fatal = Some(e);
                        return Err(mlua::Error::runtime(format!("the store failed: {text}")));
                    }
                }
            };
            to_lua(lua, reply)
        })?;
        let runner: Function = lua.load(PRELUDE).set_name("=emq_host").call(raw)?;
        Ok(Self {
            lua,
            runner,
            scripts: HashMap::new(),
        })
    }

    /// The host of `conn` with every verb's script registered under the verb's name.
    pub fn with_verbs(conn: Connection) -> Result<Self, EngineError> {
        let mut engine = Self::new(conn)?;
        for script in crate::store::scripts::Scripts::load().all() {
            engine.register(script.name, script.body(false))?;
        }
        Ok(engine)
    }

    /// Compiles a script under `name` (a body already registered is kept).
    pub fn register(&mut self, name: &str, body: &str) -> Result<(), EngineError> {
        if !self.scripts.contains_key(name) {
            let f = self.lua.load(body).set_name(format!("@{name}")).into_function()?;
            self.scripts.insert(name.to_string(), f);
        }
        Ok(())
    }

    /// The connection, for what the engine does outside scripts (opening, pragmas).
    pub fn with_conn<T>(&self, f: impl FnOnce(&Connection) -> T) -> Result<T, EngineError> {
        let host = self
            .lua
            .app_data_ref::<Session>()
            .ok_or_else(|| EngineError("the engine's host is missing".into()))?;
        Ok(f(&host.ks.conn))
    }

    /// Runs one statement that returns no rows (a transaction's or savepoint's own), prepared
    /// once a connection: parsing `BEGIN`, `SAVEPOINT`, `RELEASE` and `COMMIT` anew at every
    /// script cost a twentieth of a consumer's time.
    fn sql(&self, sql: &str) -> Result<(), EngineError> {
        self.with_conn(|c| exec(c, sql))??;
        Ok(())
    }

    /// Runs `calls` in one transaction, each under a savepoint of its own; their replies in order
    /// (a script's error is its reply), and the notices they published. Errs — nothing written —
    /// when the file fails.
    pub fn run(&self, calls: &[Call<'_>]) -> Result<(Vec<Reply>, Vec<Notice>), EngineError> {
        self.transaction(|| self.run_in(calls))
    }

    /// Runs `calls` as [`LuaHost::run`] does, then — in the same transaction, before its commit —
    /// the calls `then` makes of the notices published so far, each under a savepoint of its own
    /// (the hand-off: a parked consumer's claim run inside the transaction that woke it). The
    /// replies of both, in order.
    pub fn run_then(
        &self,
        calls: &[Call<'_>],
        then: impl FnOnce(&[Notice]) -> Vec<Call<'static>>,
    ) -> Result<(Vec<Reply>, Vec<Notice>), EngineError> {
        self.transaction(|| {
            let mut replies = self.run_in(calls)?;
            let more = {
                let host = self
                    .lua
                    .app_data_ref::<Session>()
                    .ok_or_else(|| EngineError("the engine's host is missing".into()))?;
                then(&host.notices)
            };
            if !more.is_empty() {
                replies.extend(self.run_in(&more)?);
            }
            Ok(replies)
        })
    }

    /// Runs plain commands (each its words, name first) in one transaction: each command's reply
    /// (an error reply for a refused one), and what they published.
    pub fn commands(&self, cmds: &[Vec<Vec<u8>>]) -> Result<(Vec<Reply>, Vec<Notice>), EngineError> {
        self.transaction(|| {
            let mut host = self
                .lua
                .app_data_mut::<Session>()
                .ok_or_else(|| EngineError("the engine's host is missing".into()))?;
            let mut replies = Vec::with_capacity(cmds.len());
            for words in cmds {
                let now = host.now_us();
                replies.push(
                    match commands::run(&mut host.ks, words, now).and_then(|r| host.published(words).map(|()| r)) {
                        Ok(r) => r,
                        Err(Fail::Reply(e)) => Reply::Error(e),
                        Err(Fail::Fatal(e)) => return Err(EngineError::from(e)),
                    },
                );
            }
            host.ks.flush()?;
            Ok(replies)
        })
    }

    /// Runs `f` in one `BEGIN IMMEDIATE` transaction, committed when `f` returns its replies;
    /// when `f` or the commit fails, rolled back whole, its notices dropped and the keyspace's
    /// cache forgotten.
    fn transaction(
        &self,
        f: impl FnOnce() -> Result<Vec<Reply>, EngineError>,
    ) -> Result<(Vec<Reply>, Vec<Notice>), EngineError> {
        self.sql("BEGIN IMMEDIATE")?;
        match f().and_then(|replies| self.sql("COMMIT").map(|()| replies)) {
            Ok(replies) => Ok((replies, self.take_notices())),
            Err(e) => {
                let _ = self.sql("ROLLBACK");
                self.take_notices();
                if let Some(mut host) = self.lua.app_data_mut::<Session>() {
                    host.ks.forget();
                }
                Err(e)
            }
        }
    }

    /// Ends whatever a verb that panicked left open: its transaction rolled back, its notices and
    /// the keyspace's cache dropped.
    pub fn abandon(&self) {
        let _ = self.sql("ROLLBACK");
        self.take_notices();
        if let Some(mut host) = self.lua.app_data_mut::<Session>() {
            host.ks.forget();
            host.fatal = None;
        }
    }

    /// A Lua array of these strings. Built one element at a time: a reference held in Rust takes a
    /// slot of the state's auxiliary stack (about 8,000), and a batch's ARGV holds more values.
    fn sequence(&self, items: &[Vec<u8>]) -> mlua::Result<Table> {
        let t = self.lua.create_table_with_capacity(items.len(), 0)?;
        for (i, item) in items.iter().enumerate() {
            t.raw_seti(i + 1, self.lua.create_string(item)?)?;
        }
        Ok(t)
    }

    fn take_notices(&self) -> Vec<Notice> {
        self.lua
            .app_data_mut::<Session>()
            .map(|mut h| std::mem::take(&mut h.notices))
            .unwrap_or_default()
    }

    fn run_in(&self, calls: &[Call<'_>]) -> Result<Vec<Reply>, EngineError> {
        let mut out = Vec::with_capacity(calls.len());
        for call in calls {
            let f = self
                .scripts
                .get(call.script)
                .ok_or_else(|| EngineError(format!("no script {}", call.script)))?;
            self.sql("SAVEPOINT emq_script")?;
            let published = self.lua.app_data_ref::<Session>().map_or(0, |h| h.notices.len());
            let keys = self.sequence(&call.keys)?;
            let argv = self.sequence(&call.args)?;
            let result = self.runner.call::<(bool, Value)>((f, keys, argv));
            let mut host = self
                .lua
                .app_data_mut::<Session>()
                .ok_or_else(|| EngineError("the engine's host is missing".into()))?;
            // the file failed under the script (a write refused, the disk full): the script is
            // undone whole, whatever it did with the error; the scripts around it keep theirs
            let mut reply = match (host.fatal.take(), result) {
                (Some(e), _) => Reply::Error(format!("ERR the store failed: {e}")),
                (None, Ok((true, v))) => from_lua(v)?,
                (None, Ok((false, Value::String(e)))) => Reply::Error(e.to_string_lossy()),
                (None, Ok((false, _))) => Reply::Error("ERR the script failed".into()),
                (None, Err(e)) => Reply::Error(format!("ERR {e}")),
            };
            if !matches!(reply, Reply::Error(_)) {
                if let Err(e) = host.ks.flush() {
                    reply = Reply::Error(format!("ERR the store failed: {e}"));
                }
            }
            if matches!(reply, Reply::Error(_)) {
                host.ks.forget();
                host.notices.truncate(published);
                exec(&host.ks.conn, "ROLLBACK TO emq_script")?;
            }
            exec(&host.ks.conn, "RELEASE emq_script")?;
            out.push(reply);
        }
        Ok(out)
    }
}

/// One statement that returns no rows, from the connection's statement cache.
fn exec(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(drop)
}

#[cfg(test)]
mod tests;
