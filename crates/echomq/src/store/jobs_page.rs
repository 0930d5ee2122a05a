//! A page of `list`, and the cursor that starts the next one.
//!
//! A page never walks what the pages before it showed: its cursor names the last job it ended on
//! (its score in its set, and its id), and the next page starts right after that job — from the
//! job's rank while it is still there, else from its score — so a page of a 1,000,000-job queue
//! costs what a page of a 10-job one does, and jobs that move meanwhile shift nothing. Waiting jobs
//! are listed in two parts: the flat set in claim order, then the lanes of the groups, one group
//! after another (a group's jobs in claim order); a cursor there also names the group, and on
//! Redis the chunk of the groups hash being walked.
//!
//! The text form is the store's own (`score,id` for a set; `f,score,id` and
//! `l,chunk[,group,score,id]` for waiting jobs); a caller passes it back unchanged. A cursor that
//! does not parse is refused with [`Error::InvalidOption`].

use crate::error::{Error, Result};
use crate::job::JobState;
use crate::keyspace::{GroupName, JobId};

/// A page of job ids in one state ([`crate::store::Store::list`]).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct JobsPage {
    /// The page's ids, in the state's order.
    pub ids: Vec<JobId>,
    /// The cursor of the next page; `None` after the last. A page may hold fewer ids than asked
    /// and still have a next one (the walk of the groups reads a bounded part of them a call).
    pub next: Option<String>,
}

/// Where a page starts: the position a cursor names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum After {
    /// The first page.
    Start,
    /// After a job of a sorted set (any state but waiting; for waiting, the flat set).
    Job {
        /// Its score in the set.
        score: i64,
        /// Its id.
        id: String,
    },
    /// Waiting jobs, in the lanes: from the start of a chunk of the groups (Redis: the groups
    /// hash's scan cursor; the embedded store has one chunk, `0`), after a job of a group's lane
    /// when `at` is set.
    Lanes {
        /// The chunk: decimal digits.
        chunk: String,
        /// The group, and the job of its lane the page before ended on.
        at: Option<(String, i64, String)>,
    },
}

impl After {
    /// Parses a cursor of `list` in `state`; `None` is the first page.
    pub(crate) fn parse(state: JobState, cursor: Option<&str>) -> Result<After> {
        let Some(text) = cursor else {
            return Ok(After::Start);
        };
        let refuse = |reason| Error::InvalidOption {
            field: "cursor",
            value: text.to_string(),
            reason,
        };
        let parts: Vec<&str> = text.split(',').collect();
        let job = |score: &str, id: &str| -> Result<(i64, String)> {
            let score = score.parse::<i64>().map_err(|_| refuse("not a cursor of this list"))?;
            let id = JobId::parse(id).map_err(|_| refuse("not a cursor of this list"))?;
            Ok((score, id.as_str().to_string()))
        };
        if state != JobState::Pending {
            return match parts.as_slice() {
                [score, id] => job(score, id).map(|(score, id)| After::Job { score, id }),
                _ => Err(refuse("not a cursor of this list")),
            };
        }
        let chunk_ok = |c: &str| !c.is_empty() && c.len() <= 20 && c.bytes().all(|b| b.is_ascii_digit());
        match parts.as_slice() {
            ["f", score, id] => job(score, id).map(|(score, id)| After::Job { score, id }),
            ["l", chunk] if chunk_ok(chunk) => Ok(After::Lanes {
                chunk: chunk.to_string(),
                at: None,
            }),
            ["l", chunk, group, score, id] if chunk_ok(chunk) => {
                let group = GroupName::new(*group).map_err(|_| refuse("not a cursor of this list"))?;
                let (score, id) = job(score, id)?;
                Ok(After::Lanes {
                    chunk: chunk.to_string(),
                    at: Some((group.as_str().to_string(), score, id)),
                })
            }
            _ => Err(refuse("not a cursor of this list")),
        }
    }

    /// The cursor's text (what [`After::parse`] reads back).
    pub(crate) fn text(&self, state: JobState) -> Option<String> {
        match self {
            After::Start => None,
            After::Job { score, id } if state == JobState::Pending => Some(format!("f,{score},{id}")),
            After::Job { score, id } => Some(format!("{score},{id}")),
            After::Lanes { chunk, at: None } => Some(format!("l,{chunk}")),
            After::Lanes {
                chunk,
                at: Some((group, score, id)),
            } => Some(format!("l,{chunk},{group},{score},{id}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_cursor_reads_back_as_written() {
        let cases = [
            (
                JobState::Dead,
                After::Job {
                    score: 17,
                    id: "a:b".into(),
                },
            ),
            (
                JobState::Pending,
                After::Job {
                    score: -3,
                    id: "9".into(),
                },
            ),
            (
                JobState::Pending,
                After::Lanes {
                    chunk: "0".into(),
                    at: None,
                },
            ),
            (
                JobState::Pending,
                After::Lanes {
                    chunk: "1234".into(),
                    at: Some(("g:1".into(), 5, "x".into())),
                },
            ),
        ];
        for (state, after) in cases {
            let text = after.text(state).unwrap();
            assert_eq!(After::parse(state, Some(&text)).unwrap(), after, "{text}");
        }
        assert_eq!(After::parse(JobState::Active, None).unwrap(), After::Start);
    }

    #[test]
    fn a_cursor_that_does_not_parse_is_refused() {
        for (state, text) in [
            (JobState::Dead, ""),
            (JobState::Dead, "1"),
            (JobState::Dead, "x,1"),
            (JobState::Dead, "1,bad id"),
            (JobState::Dead, "f,1,2"),
            (JobState::Pending, "1,2"),
            (JobState::Pending, "l,"),
            (JobState::Pending, "l,x"),
            (JobState::Pending, "l,0,g"),
            (JobState::Pending, "l,0,bad group,1,2"),
        ] {
            let err = After::parse(state, Some(text)).unwrap_err();
            assert!(
                matches!(err, Error::InvalidOption { field: "cursor", .. }),
                "{text}: {err}"
            );
        }
    }
}
