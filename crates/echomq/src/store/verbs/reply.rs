//! Reading script replies: helpers that turn a [`Reply`] into plain values or an
//! [`Error::Protocol`] naming the verb, and a script's error reply into the store's error.

use crate::error::{Error, Result};
pub(crate) use crate::store::reply::Reply;
use crate::store::Settled;

/// The store's error for a script's error reply `text` (its code first): the scripts' own codes
/// typed (`EMQOBLITERATING`, `EMQARGS`), any other as [`Error::Store`] with the whole text; `None`
/// for a code the scripts never send, which the engine maps itself.
pub(crate) fn script_error(verb: &'static str, text: &str) -> Option<Error> {
    let (code, detail) = text.split_once(' ').unwrap_or((text, ""));
    match code {
        "EMQOBLITERATING" => Some(Error::Obliterating { queue: String::new() }),
        "EMQARGS" => Some(Error::Store {
            verb,
            reason: if detail.is_empty() {
                "malformed arguments"
            } else {
                detail
            }
            .to_string(),
        }),
        _ => None,
    }
}

/// A script's reply with an error reply as the store's error (a whole reply, or a part of one that
/// holds another script's: claim's inside complete_then_claim's).
pub(crate) fn checked(verb: &'static str, r: Reply) -> Result<Reply> {
    match r {
        Reply::Error(text) => Err(script_error(verb, &text).unwrap_or(Error::Store { verb, reason: text })),
        r => Ok(r),
    }
}

pub(crate) fn protocol(verb: &'static str, v: &Reply) -> Error {
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

pub(crate) fn int(verb: &'static str, v: &Reply) -> Result<i64> {
    match v {
        Reply::Int(i) => Ok(*i),
        Reply::Bulk(b) => std::str::from_utf8(b)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| protocol(verb, v)),
        _ => Err(protocol(verb, v)),
    }
}

pub(crate) fn bytes(verb: &'static str, v: Reply) -> Result<Vec<u8>> {
    match v {
        Reply::Bulk(b) => Ok(b),
        Reply::Status(s) => Ok(s.into_bytes()),
        Reply::Int(i) => Ok(i.to_string().into_bytes()),
        other => Err(protocol(verb, &other)),
    }
}

pub(crate) fn string(verb: &'static str, v: Reply) -> Result<String> {
    String::from_utf8(bytes(verb, v)?).map_err(|e| Error::Protocol {
        verb,
        reply: format!("not UTF-8: {e}"),
    })
}

pub(crate) fn array(verb: &'static str, v: Reply) -> Result<Vec<Reply>> {
    match v {
        Reply::Array(items) => Ok(items),
        Reply::Nil => Ok(Vec::new()),
        other => Err(protocol(verb, &other)),
    }
}

/// An array of exactly `N` items.
pub(crate) fn tuple<const N: usize>(verb: &'static str, v: Reply) -> Result<[Reply; N]> {
    let items = array(verb, v)?;
    let len = items.len();
    items.try_into().map_err(|_| Error::Protocol {
        verb,
        reply: format!("an array of {len} items, expected {N}"),
    })
}

/// A settle's code (complete, complete_cancelled, each job of complete_many, update_data): 1 done,
/// 0 stale token, -1 no such job.
pub(crate) fn settled(verb: &'static str, v: &Reply) -> Result<Settled> {
    match int(verb, v)? {
        1 => Ok(Settled::Ok),
        0 => Ok(Settled::Stale),
        -1 => Ok(Settled::Gone),
        _ => Err(protocol(verb, v)),
    }
}

#[cfg(test)]
mod tests {
    use super::Reply;

    #[test]
    fn a_long_reply_is_cut_on_a_character_boundary() {
        // the reply's text as printed starts at byte 199 with a 2-byte character across byte 200
        let opening = format!("{:?}", Reply::Status(String::new())).len() - 2;
        let text = format!("{}é and more", "a".repeat(199 - opening));
        let err = super::protocol("get", &Reply::Status(text));
        let crate::Error::Protocol { reply, .. } = err else {
            panic!("a protocol error");
        };
        assert_eq!(reply.len(), 199, "{reply}");
        assert!(reply.ends_with('a'), "{reply}");
    }
}
