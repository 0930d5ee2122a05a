//! `emq job`: one job's row, as a `key: value` listing or one JSON object. Also the job rendering
//! `emq list --json` shares, and the refusal messages the per-job verbs share.

use std::time::{Duration, SystemTime};

use echomq::{JobId, JobRow, QueueName, Store};
use serde_json::Value;

/// Show one job.
#[derive(clap::Args, Debug)]
pub struct Args {
    /// The queue.
    pub queue: String,
    /// The job's id (generated or caller-given).
    pub id: String,
    /// One JSON object: id, queue, state, attempts, max_attempts, group, kind, payload (or payload_base64
    /// when the payload is not UTF-8), run_at, last_error, output (or output_base64), then stalled,
    /// cancel, finished_at, lease_deadline, dead_at. Absent fields are null; times are ms since the
    /// epoch.
    #[arg(long)]
    pub json: bool,
}

/// Runs `emq job`.
pub async fn run(url: &str, args: Args) -> anyhow::Result<i32> {
    let queue = QueueName::new(&args.queue)?;
    let id = JobId::parse(&args.id)?;
    let store = crate::open(url).await?;
    let Some(job) = store.get(&queue, &id).await? else {
        return Err(not_found(&queue, &id));
    };
    if args.json {
        print(&json_line(&queue, &job));
    } else {
        print(&listing(&queue, &job));
    }
    Ok(0)
}

fn print(text: &str) {
    out!("{text}");
}

/// The error of every per-job verb when the row does not exist.
pub fn not_found(queue: &QueueName, id: &JobId) -> anyhow::Error {
    anyhow::anyhow!("job {id} not found in queue {queue}")
}

/// The job's state as a refusal names it: read after the refusal, so it may have moved since
/// (`gone` when the row went in between).
pub async fn state_now(store: &dyn Store, queue: &QueueName, id: &JobId) -> String {
    match store.get(queue, id).await {
        Ok(Some(job)) => job.state.to_string(),
        Ok(None) => "gone".to_string(),
        Err(e) => format!("unknown: {e}"),
    }
}

/// A byte field as JSON: `(name, text)` when it is UTF-8, else `(name_base64, base64)`.
fn bytes_field(name: &'static str, name_base64: &'static str, bytes: &[u8]) -> (&'static str, Value) {
    match std::str::from_utf8(bytes) {
        Ok(text) => (name, Value::from(text)),
        Err(_) => (name_base64, Value::from(base64(bytes))),
    }
}

/// The row's fields in the documented order.
fn fields(queue: &QueueName, job: &JobRow) -> Vec<(&'static str, Value)> {
    let opt_u64 = |v: Option<u64>| v.map_or(Value::Null, Value::from);
    let opt_str = |v: Option<&str>| v.map_or(Value::Null, Value::from);
    let score_when = |state| {
        if job.state == state {
            opt_u64(job.score)
        } else {
            Value::Null
        }
    };
    vec![
        ("id", Value::from(job.id.as_str())),
        ("queue", Value::from(queue.as_str())),
        ("state", Value::from(job.state.as_str())),
        ("attempts", Value::from(job.attempts)),
        ("max_attempts", opt_u64(job.max_attempts)),
        ("group", opt_str(job.group.as_ref().map(|g| g.as_str()))),
        ("kind", opt_str(job.kind.as_deref())),
        bytes_field("payload", "payload_base64", &job.payload),
        ("run_at", opt_u64(job.run_at)),
        ("last_error", opt_str(job.last_error.as_deref())),
        match &job.output {
            Some(out) => bytes_field("output", "output_base64", out),
            None => ("output", Value::Null),
        },
        ("stalled", Value::from(job.stalled)),
        ("cancel", opt_str(job.cancel.as_deref())),
        ("finished_at", opt_u64(job.finished_at)),
        ("lease_deadline", score_when(echomq::JobState::Active)),
        ("dead_at", score_when(echomq::JobState::Dead)),
    ]
}

/// One JSON object on one line, its fields in the documented order (shared with `emq list --json`).
pub fn json_line(queue: &QueueName, job: &JobRow) -> String {
    let body: Vec<String> = fields(queue, job)
        .into_iter()
        .map(|(k, v)| format!("{}:{v}", Value::from(k)))
        .collect();
    format!("{{{}}}", body.join(","))
}

/// The readable listing: `key: value` lines, `-` for an absent field, times also in RFC 3339.
fn listing(queue: &QueueName, job: &JobRow) -> String {
    const TIMES: [&str; 4] = ["run_at", "finished_at", "lease_deadline", "dead_at"];
    let rows = fields(queue, job);
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0) + 1;
    let mut out = Vec::with_capacity(rows.len());
    for (k, v) in rows {
        let value = match v {
            Value::Null => "-".to_string(),
            Value::String(s) => printable(&s),
            Value::Number(n) if TIMES.contains(&k) => match n.as_u64() {
                Some(ms) => format!("{ms} ({})", rfc3339(ms)),
                None => n.to_string(),
            },
            other => other.to_string(),
        };
        out.push(format!("{:<width$} {value}", format!("{k}:")));
    }
    out.join("\n")
}

/// Control characters escaped, so a payload never breaks the one-line-per-field listing.
fn printable(s: &str) -> String {
    s.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

fn rfc3339(ms: u64) -> String {
    humantime::format_rfc3339_millis(SystemTime::UNIX_EPOCH + Duration::from_millis(ms)).to_string()
}

/// Standard base64 (RFC 4648 §4) with padding.
pub fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let b = [chunk[0], *chunk.get(1).unwrap_or(&0), *chunk.get(2).unwrap_or(&0)];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..4 {
            if i <= chunk.len() {
                out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
            } else {
                out.push('=');
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::base64;

    #[test]
    fn base64_matches_the_rfc_4648_test_vectors() {
        for (input, want) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
            ("fooba", "Zm9vYmE="),
            ("foobar", "Zm9vYmFy"),
        ] {
            assert_eq!(base64(input.as_bytes()), want, "{input:?}");
        }
        assert_eq!(base64(&[0xff, 0x00, 0x01, 0xfe]), "/wAB/g==");
    }
}
