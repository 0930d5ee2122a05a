//! The keyspace on SQLite: the Redis data types the scripts use, each key a row of `kv_keys` (its
//! type, its size, a list's head position, a string's value) and each element a row of its type's
//! table. Values and members are bytes (`BLOB`: no numeric affinity, so `007` stays `007`); a
//! collection keeps its size, so `ZCARD`, `LLEN` and `HLEN` are O(1) as on Redis; an empty
//! collection is deleted, as Redis deletes it.
//!
//! Within one script the keys met are cached ([`Keyspace::meta`]): a key's size and head are
//! written back when the script ends ([`Keyspace::flush`]) and the cache is dropped, so nothing
//! here outlives the script's transaction.

use std::collections::HashMap;

use rusqlite::{params, Connection, OptionalExtension};

/// The keyspace's tables. Created when missing; a key's type is [`Type`]'s code.
pub(crate) const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS kv_keys (
  kid INTEGER PRIMARY KEY, key BLOB NOT NULL UNIQUE, type INTEGER NOT NULL,
  size INTEGER NOT NULL DEFAULT 0, head INTEGER NOT NULL DEFAULT 0, value BLOB);
CREATE TABLE IF NOT EXISTS kv_hash (
  kid INTEGER NOT NULL, field BLOB NOT NULL, value BLOB NOT NULL, PRIMARY KEY (kid, field)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv_zset (
  kid INTEGER NOT NULL, member BLOB NOT NULL, score REAL NOT NULL, PRIMARY KEY (kid, member)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_zset_order ON kv_zset (kid, score, member);
CREATE TABLE IF NOT EXISTS kv_list (
  kid INTEGER NOT NULL, pos INTEGER NOT NULL, value BLOB NOT NULL, PRIMARY KEY (kid, pos)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS kv_set (
  kid INTEGER NOT NULL, member BLOB NOT NULL, PRIMARY KEY (kid, member)) WITHOUT ROWID;
";

/// A key's type, as `TYPE` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Type {
    String = 1,
    Hash = 2,
    Zset = 3,
    List = 4,
    Set = 5,
}

impl Type {
    fn from_code(code: i64) -> Option<Type> {
        Some(match code {
            1 => Type::String,
            2 => Type::Hash,
            3 => Type::Zset,
            4 => Type::List,
            5 => Type::Set,
            _ => return None,
        })
    }

    /// The name `TYPE` answers.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Type::String => "string",
            Type::Hash => "hash",
            Type::Zset => "zset",
            Type::List => "list",
            Type::Set => "set",
        }
    }

    /// The table of the type's elements (none for a string: its value is on its key's row).
    fn table(self) -> Option<&'static str> {
        match self {
            Type::String => None,
            Type::Hash => Some("kv_hash"),
            Type::Zset => Some("kv_zset"),
            Type::List => Some("kv_list"),
            Type::Set => Some("kv_set"),
        }
    }
}

/// A key as the script sees it: its row id, type, size (elements) and, for a list, the position
/// of its first element.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Meta {
    pub(crate) kid: i64,
    pub(crate) ty: Type,
    pub(crate) size: i64,
    pub(crate) head: i64,
    /// The size or head changed since the key was read: written back by [`Keyspace::flush`].
    dirty: bool,
}

/// Why a command failed: an error reply the script sees (`WRONGTYPE`, a bad argument), or the
/// file's own failure, which ends the script whatever it does.
#[derive(Debug)]
pub(crate) enum Fail {
    /// An error reply: `redis.call` raises it, `redis.pcall` returns it.
    Reply(String),
    /// SQLite or I/O failed: the script is aborted and its transaction rolled back.
    Fatal(rusqlite::Error),
}

impl From<rusqlite::Error> for Fail {
    fn from(e: rusqlite::Error) -> Self {
        Fail::Fatal(e)
    }
}

pub(crate) type R<T> = std::result::Result<T, Fail>;

/// The reply of a key of another type.
pub(crate) fn wrongtype() -> Fail {
    Fail::Reply("WRONGTYPE Operation against a key holding the wrong kind of value".into())
}

/// The keyspace of one connection, with the cache of the running script's keys.
pub(crate) struct Keyspace {
    pub(crate) conn: Connection,
    keys: HashMap<Vec<u8>, Option<Meta>>,
}

impl Keyspace {
    pub(crate) fn new(conn: Connection) -> rusqlite::Result<Self> {
        conn.execute_batch(SCHEMA)?;
        Ok(Self {
            conn,
            keys: HashMap::new(),
        })
    }

    /// The key as it stands (None: absent).
    pub(crate) fn meta(&mut self, key: &[u8]) -> R<Option<Meta>> {
        if let Some(m) = self.keys.get(key) {
            return Ok(*m);
        }
        let row = self
            .conn
            .prepare_cached("SELECT kid, type, size, head FROM kv_keys WHERE key = ?1")?
            .query_row([key], |r| Ok((r.get::<_, i64>(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))
            .optional()?;
        let m = match row {
            None => None,
            Some((kid, code, size, head)) => {
                let ty = Type::from_code(code)
                    .ok_or_else(|| Fail::Fatal(rusqlite::Error::IntegralValueOutOfRange(1, code)))?;
                Some(Meta {
                    kid,
                    ty,
                    size,
                    head,
                    dirty: false,
                })
            }
        };
        self.keys.insert(key.to_vec(), m);
        Ok(m)
    }

    /// The key if it holds `ty` (None: absent), else `WRONGTYPE`.
    pub(crate) fn typed(&mut self, key: &[u8], ty: Type) -> R<Option<Meta>> {
        match self.meta(key)? {
            Some(m) if m.ty != ty => Err(wrongtype()),
            m => Ok(m),
        }
    }

    /// The key, made (empty, of `ty`) when absent; `WRONGTYPE` when it holds another type.
    pub(crate) fn make(&mut self, key: &[u8], ty: Type) -> R<Meta> {
        if let Some(m) = self.typed(key, ty)? {
            return Ok(m);
        }
        let kid: i64 = self
            .conn
            .prepare_cached("INSERT INTO kv_keys (key, type) VALUES (?1, ?2) RETURNING kid")?
            .query_row(params![key, ty as i64], |r| r.get(0))?;
        let m = Meta {
            kid,
            ty,
            size: 0,
            head: 0,
            dirty: false,
        };
        self.keys.insert(key.to_vec(), Some(m));
        Ok(m)
    }

    /// Records a collection's new size and head (written back at the script's end). A collection
    /// left empty is deleted now, as Redis deletes it: `EXISTS` and `TYPE` no longer see it.
    pub(crate) fn resize(&mut self, key: &[u8], size: i64, head: i64) -> R<()> {
        let Some(Some(m)) = self.keys.get_mut(key) else {
            return Ok(());
        };
        if size == 0 && m.ty != Type::String {
            let kid = m.kid;
            self.conn
                .prepare_cached("DELETE FROM kv_keys WHERE kid = ?1")?
                .execute([kid])?;
            self.keys.insert(key.to_vec(), None);
            return Ok(());
        }
        m.size = size;
        m.head = head;
        m.dirty = true;
        Ok(())
    }

    /// Deletes the key and its elements; whether it existed.
    pub(crate) fn delete(&mut self, key: &[u8]) -> R<bool> {
        let Some(m) = self.meta(key)? else {
            return Ok(false);
        };
        if let Some(table) = m.ty.table() {
            self.conn
                .prepare_cached(&format!("DELETE FROM {table} WHERE kid = ?1"))?
                .execute([m.kid])?;
        }
        self.conn
            .prepare_cached("DELETE FROM kv_keys WHERE kid = ?1")?
            .execute([m.kid])?;
        self.keys.insert(key.to_vec(), None);
        Ok(true)
    }

    /// Writes back the sizes and heads that changed and drops the cache: the script's end.
    pub(crate) fn flush(&mut self) -> rusqlite::Result<()> {
        for m in self.keys.values().flatten() {
            if m.dirty {
                self.conn
                    .prepare_cached("UPDATE kv_keys SET size = ?2, head = ?3 WHERE kid = ?1")?
                    .execute([m.kid, m.size, m.head])?;
            }
        }
        self.keys.clear();
        Ok(())
    }

    /// Drops the cache without writing it: the script's writes are being rolled back.
    pub(crate) fn forget(&mut self) {
        self.keys.clear();
    }

    /// A string's value (None: absent; `WRONGTYPE` for another type).
    pub(crate) fn string(&mut self, key: &[u8]) -> R<Option<Vec<u8>>> {
        let Some(m) = self.typed(key, Type::String)? else {
            return Ok(None);
        };
        Ok(self
            .conn
            .prepare_cached("SELECT value FROM kv_keys WHERE kid = ?1")?
            .query_row([m.kid], |r| r.get::<_, Option<Vec<u8>>>(0))?)
    }

    /// Sets a string, replacing a key of any type (as `SET` does).
    pub(crate) fn set_string(&mut self, key: &[u8], value: &[u8]) -> R<()> {
        if let Some(m) = self.meta(key)? {
            if m.ty != Type::String {
                self.delete(key)?;
            }
        }
        let m = self.make(key, Type::String)?;
        self.conn
            .prepare_cached("UPDATE kv_keys SET value = ?2 WHERE kid = ?1")?
            .execute(params![m.kid, value])?;
        Ok(())
    }
}
