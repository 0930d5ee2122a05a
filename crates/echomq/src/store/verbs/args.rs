//! Encoding script arguments: numbers as their decimal text, optional values behind a `+`, the
//! settle option of the settling verbs.

use std::time::Duration;

use crate::store::SettleOptions;

pub(crate) fn num(n: impl std::fmt::Display) -> Vec<u8> {
    n.to_string().into_bytes()
}

/// An optional value: empty for none, else `+` and the value (so an empty value is still one).
pub(crate) fn opt_arg(v: Option<&[u8]>) -> Vec<u8> {
    match v {
        None => Vec::new(),
        Some(b) => {
            let mut out = Vec::with_capacity(b.len() + 1);
            out.push(b'+');
            out.extend_from_slice(b);
            out
        }
    }
}

pub(crate) fn ms(d: Duration) -> Vec<u8> {
    num(d.as_millis())
}

/// The records `MAXLEN`, the settle argument of the verbs that settle a job (what they keep of a
/// finished job is the queue's retention, which the scripts read).
pub(crate) fn settle_arg(settle: SettleOptions) -> Vec<u8> {
    num(crate::store::records_maxlen(settle))
}

/// A plain command's words (its name first).
pub(crate) fn words<const N: usize>(w: [&str; N]) -> Vec<Vec<u8>> {
    w.iter().map(|s| s.as_bytes().to_vec()).collect()
}
