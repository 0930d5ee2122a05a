//! A script's reply as either engine gives it: Redis's protocol values, and numbers written as
//! Redis writes them.

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
