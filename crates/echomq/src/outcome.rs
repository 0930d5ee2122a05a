//! What a finished job came to ([`Outcome`]), as [`JobHandle::wait`](crate::JobHandle::wait)
//! answers it, and a completed job's [`Output`].

use std::fmt;

use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::job::{JobRow, JobState};

/// How a job ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Its handler succeeded; what it returned.
    Completed(Output),
    /// It failed for good (its attempts spent, discarded, a payload that did not decode, a kind no
    /// worker knew for too long); `error` is its last error.
    Dead {
        /// The last error recorded.
        error: String,
        /// The attempts it used.
        attempts: u64,
    },
    /// It was cancelled, with the reason given, if any.
    Cancelled {
        /// The cancel's reason.
        reason: Option<String>,
    },
    /// Its row is gone though the job existed: it finished and is past the queue's retention, or
    /// an operator removed it (a remove or a drain, which may come before it ever ran).
    Expired,
}

impl Outcome {
    /// The outcome a finished row states (completed, cancelled or dead); `None` for a job still to
    /// finish.
    pub(crate) fn of(row: JobRow) -> Option<Outcome> {
        Some(match row.state {
            JobState::Completed => Outcome::Completed(Output {
                bytes: row.output,
                dropped: row.output_dropped,
            }),
            JobState::Cancelled => Outcome::Cancelled {
                reason: row.last_error.filter(|r| !r.is_empty()),
            },
            JobState::Dead => Outcome::Dead {
                error: row.last_error.unwrap_or_default(),
                attempts: row.attempts,
            },
            _ => return None,
        })
    }
}

/// A completed job's output: the bytes its handler returned (a typed handler's are JSON), or none.
#[derive(Clone, PartialEq, Eq)]
pub struct Output {
    bytes: Option<Vec<u8>>,
    dropped: Option<u64>,
}

/// The most bytes of an output its `Debug` shows as text.
const DEBUG_TEXT_MAX: usize = 256;

impl fmt::Debug for Output {
    /// `Output(none)`, `Output(dropped, 70000 bytes)`, `Output(12 bytes: {"ok":true})` — UTF-8
    /// (JSON among it) as text, cut at 256 bytes; other bytes as their size only.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.bytes, self.dropped) {
            (_, Some(size)) => write!(f, "Output(dropped, {size} bytes)"),
            (None, None) => write!(f, "Output(none)"),
            (Some(b), None) => match std::str::from_utf8(b) {
                Ok(text) if text.len() <= DEBUG_TEXT_MAX => write!(f, "Output({} bytes: {text})", b.len()),
                Ok(text) => {
                    let mut end = DEBUG_TEXT_MAX;
                    while !text.is_char_boundary(end) {
                        end -= 1;
                    }
                    write!(f, "Output({} bytes: {}…)", b.len(), &text[..end])
                }
                Err(_) => write!(f, "Output({} bytes, binary)", b.len()),
            },
        }
    }
}

impl Output {
    /// The output decoded from JSON. No output reads as JSON `null` (so `()` and `Option<T>`
    /// decode it); an output the queue did not keep is [`Error::OutputDropped`].
    pub fn json<T: DeserializeOwned>(&self) -> Result<T> {
        if let Some(size) = self.dropped {
            return Err(Error::OutputDropped { size });
        }
        let bytes = self.bytes.as_deref().unwrap_or(b"null");
        serde_json::from_slice(bytes).map_err(|e| Error::Deserialize {
            what: "the job's output",
            reason: e.to_string(),
        })
    }

    /// The output's bytes, if the handler returned any and the queue kept them.
    pub fn bytes(&self) -> Option<&[u8]> {
        self.bytes.as_deref()
    }

    /// The size in bytes of an output the queue's retention did not keep (over its
    /// [`max_output`](crate::store::Retention::max_output)).
    pub fn dropped(&self) -> Option<u64> {
        self.dropped
    }
}

#[cfg(test)]
mod tests {
    use super::Output;

    fn out(bytes: Option<&[u8]>, dropped: Option<u64>) -> Output {
        Output {
            bytes: bytes.map(<[u8]>::to_vec),
            dropped,
        }
    }

    #[test]
    fn debug_shows_the_text_and_its_size_not_a_byte_array() {
        assert_eq!(
            format!("{:?}", out(Some(br#"{"ok":true}"#), None)),
            r#"Output(11 bytes: {"ok":true})"#
        );
        assert_eq!(format!("{:?}", out(None, None)), "Output(none)");
        assert_eq!(format!("{:?}", out(None, Some(70_000))), "Output(dropped, 70000 bytes)");
        assert_eq!(
            format!("{:?}", out(Some(&[0xff, 0, 1]), None)),
            "Output(3 bytes, binary)"
        );
        let long = "é".repeat(200);
        let shown = format!("{:?}", out(Some(long.as_bytes()), None));
        assert!(
            shown.starts_with("Output(400 bytes: éé") && shown.ends_with("é…)"),
            "{shown}"
        );
        assert_eq!(shown.chars().filter(|&c| c == 'é').count(), 128);
    }
}
