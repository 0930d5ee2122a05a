//! Reading script replies. Only the Redis store sees `redis::Value`; these helpers turn a reply into
//! plain values or a [`Error::Protocol`] naming the verb.

use redis::Value;

use crate::error::{Error, Result};
use crate::store::Settled;

pub(crate) fn protocol(verb: &'static str, v: &Value) -> Error {
    let mut reply = format!("{v:?}");
    // at most 200 bytes, cut on a character boundary
    let cut = (0..=reply.len().min(200))
        .rev()
        .find(|&i| reply.is_char_boundary(i))
        .unwrap_or(0);
    reply.truncate(cut);
    Error::Protocol { verb, reply }
}

/// A reply of the wrong shape, described in words.
pub(crate) fn protocol_text(verb: &'static str, what: &str) -> Error {
    Error::Protocol {
        verb,
        reply: what.to_string(),
    }
}

pub(crate) fn int(verb: &'static str, v: &Value) -> Result<i64> {
    match v {
        Value::Int(i) => Ok(*i),
        Value::BulkString(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol(verb, v)),
        _ => Err(protocol(verb, v)),
    }
}

pub(crate) fn bytes(verb: &'static str, v: Value) -> Result<Vec<u8>> {
    match v {
        Value::BulkString(b) => Ok(b),
        Value::SimpleString(s) => Ok(s.into_bytes()),
        Value::Int(i) => Ok(i.to_string().into_bytes()),
        other => Err(protocol(verb, &other)),
    }
}

pub(crate) fn string(verb: &'static str, v: Value) -> Result<String> {
    String::from_utf8(bytes(verb, v)?).map_err(|e| Error::Protocol {
        verb,
        reply: format!("not UTF-8: {e}"),
    })
}

pub(crate) fn array(verb: &'static str, v: Value) -> Result<Vec<Value>> {
    match v {
        Value::Array(items) => Ok(items),
        Value::Nil => Ok(Vec::new()),
        other => Err(protocol(verb, &other)),
    }
}

/// An array of exactly `N` items.
pub(crate) fn tuple<const N: usize>(verb: &'static str, v: Value) -> Result<[Value; N]> {
    let items = array(verb, v)?;
    let len = items.len();
    items.try_into().map_err(|_| Error::Protocol {
        verb,
        reply: format!("an array of {len} items, expected {N}"),
    })
}

/// A settle's code (complete, complete_cancelled, each job of complete_many, update_data): 1 done,
/// 0 stale token, -1 no such job.
pub(crate) fn settled(verb: &'static str, v: &Value) -> Result<Settled> {
    match int(verb, v)? {
        1 => Ok(Settled::Ok),
        0 => Ok(Settled::Stale),
        -1 => Ok(Settled::Gone),
        _ => Err(protocol(verb, v)),
    }
}

#[cfg(test)]
mod tests {
    use redis::Value;

    #[test]
    fn a_long_reply_is_cut_on_a_character_boundary() {
        // the reply's text as printed starts at byte 199 with a 2-byte character across byte 200
        let opening = format!("{:?}", Value::SimpleString(String::new())).len() - 2;
        let text = format!("{}é and more", "a".repeat(199 - opening));
        let err = super::protocol("get", &Value::SimpleString(text));
        let crate::Error::Protocol { reply, .. } = err else {
            panic!("a protocol error");
        };
        assert_eq!(reply.len(), 199, "{reply}");
        assert!(reply.ends_with('a'), "{reply}");
    }
}
