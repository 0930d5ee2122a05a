//! Redis's replies as the store layer reads them: [`from_value`] turns the client's `redis::Value`
//! into the engines' common [`Reply`]; only the Redis store sees `redis::Value`.

use redis::Value;

pub(crate) use crate::store::verbs::reply::*;

/// A reply of the client as a [`Reply`] (RESP3 forms read as their RESP2 twins).
pub(crate) fn from_value(v: Value) -> Reply {
    match v {
        Value::Nil => Reply::Nil,
        Value::Int(i) => Reply::Int(i),
        Value::BulkString(b) => Reply::Bulk(b),
        Value::SimpleString(s) => Reply::Status(s),
        Value::Okay => Reply::Status("OK".into()),
        Value::Array(items) | Value::Set(items) => Reply::Array(items.into_iter().map(from_value).collect()),
        Value::Map(pairs) => Reply::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [from_value(k), from_value(v)])
                .collect(),
        ),
        Value::Double(d) => Reply::Bulk(crate::store::reply::format_double(d).into_bytes()),
        Value::Boolean(b) => Reply::Int(i64::from(b)),
        Value::VerbatimString { text, .. } => Reply::Bulk(text.into_bytes()),
        Value::ServerError(e) => Reply::Error(format!("{} {}", e.code(), e.details().unwrap_or_default())),
        other => Reply::Bulk(format!("{other:?}").into_bytes()),
    }
}
