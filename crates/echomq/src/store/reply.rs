//! Script replies as the store layer reads them, whichever engine ran the script: [`Reply`], and
//! helpers that turn one into plain values or an [`Error::Protocol`] naming the verb.

use crate::error::{Error, Result};
use crate::store::Settled;

/// A reply, as Redis's protocol has them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// A nil bulk (or array) reply.
    Nil,
    /// An integer reply.
    Int(i64),
    /// A bulk string.
    Bulk(Vec<u8>),
    /// A status reply (`OK`, a type's name).
    Status(String),
    /// An error reply: its full text, code first (`WRONGTYPE …`, `EMQSTALE …`).
    Error(String),
    /// An array reply.
    Array(Vec<Reply>),
}

/// A double as Redis writes one: an integer in full when it is whole (and below 10^17), else
/// with 17 significant digits (`%.17g`); `inf` and `-inf` for the infinities.
pub fn format_double(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v.is_nan() {
        return "nan".into();
    }
    if v == v.trunc() && v.abs() < 1e17 {
        return format!("{}", v as i64);
    }
    // %.17g: scientific when the exponent is below -4 or at least 17, else fixed; trailing
    // zeros of the fraction dropped
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let m = trim_fraction(mantissa);
        let sign = if exp < 0 { '-' } else { '+' };
        return format!("{m}e{sign}{:02}", exp.abs());
    }
    let decimals = (16 - exp).max(0) as usize;
    trim_fraction(&format!("{v:.decimals$}")).to_string()
}

fn trim_fraction(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

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
