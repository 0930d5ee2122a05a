//! The sorted sets `active` and `pending` on the rows themselves: a member's score is a column of
//! its row (`lease`: the lease deadline, ms; `pending`: the sequence), each ordered by a partial
//! index (`emq_jobs_lease`, `emq_jobs_pending`: score, then id bytes, as Redis orders ties). So an
//! enqueue writes a ready job's row and its place in `pending` in one insert, a claim moves a row
//! from `pending` to `active` in one update, and a settle deletes the row and its lease together.
//! An id left in one of these sets after its row is deleted keeps its score on a row with no field,
//! which every verb reads as no row.

use rusqlite::{params, OptionalExtension};

use super::{fields, Db, R};

/// A sorted set kept on the rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RowSet {
    /// `active`, in the column `lease`.
    Active,
    /// `pending`, in the column `pending`.
    Pending,
}

impl RowSet {
    /// The row set a sorted set's name names, if it is one.
    pub(crate) fn of(z: &str) -> Option<RowSet> {
        match z {
            "active" => Some(RowSet::Active),
            "pending" => Some(RowSet::Pending),
            _ => None,
        }
    }
}

/// A statement's text for a row set: the pieces joined by the set's column name.
macro_rules! on_col {
    ($set:expr; $($piece:literal),+) => {
        match $set {
            RowSet::Active => on_col!(@join "lease"; $($piece),+),
            RowSet::Pending => on_col!(@join "pending"; $($piece),+),
        }
    };
    (@join $c:literal; $first:literal $(, $rest:literal)*) => {
        concat!($first $(, $c, $rest)*)
    };
}

impl Db<'_> {
    /// ZADD: the member's score set, on a row with no field when `id` has no row.
    pub(crate) fn set_score(&self, set: RowSet, id: &str, score: i64) -> R<()> {
        if set == RowSet::Pending {
            // a new member (the usual case: a job made ready) counted; else its score moved
            let joined = self
                .tx
                .prepare_cached("UPDATE emq_jobs SET pending = ?3 WHERE queue = ?1 AND id = ?2 AND pending IS NULL")
                .and_then(|mut s| s.execute(params![self.q, id, score]))
                .map_err(|e| self.e(e))?;
            if joined > 0 || !self.move_score(set, id, score)? {
                self.pending_moved.set(self.pending_moved.get() + 1);
                if joined == 0 {
                    self.tx
                        .prepare_cached("INSERT INTO emq_jobs (queue, id, pending) VALUES (?1, ?2, ?3)")
                        .and_then(|mut s| s.execute(params![self.q, id, score]))
                        .map_err(|e| self.e(e))?;
                }
            }
            return Ok(());
        }
        let moved = self
            .tx
            .prepare_cached(on_col!(set; "UPDATE emq_jobs SET ", " = ?3 WHERE queue = ?1 AND id = ?2"))
            .and_then(|mut s| s.execute(params![self.q, id, score]))
            .map_err(|e| self.e(e))?;
        if moved == 0 {
            self.tx
                .prepare_cached(on_col!(set; "INSERT INTO emq_jobs (queue, id, ", ") VALUES (?1, ?2, ?3)"))
                .and_then(|mut s| s.execute(params![self.q, id, score]))
                .map_err(|e| self.e(e))?;
        }
        Ok(())
    }

    /// ZADD XX: a member's score moved; true when it was a member.
    pub(crate) fn move_score(&self, set: RowSet, id: &str, score: i64) -> R<bool> {
        self.tx
            .prepare_cached(on_col!(set;
                "UPDATE emq_jobs SET ", " = ?3 WHERE queue = ?1 AND id = ?2 AND ", " IS NOT NULL"))
            .and_then(|mut s| s.execute(params![self.q, id, score]))
            .map(|n| n > 0)
            .map_err(|e| self.e(e))
    }

    /// ZREM: true when it was a member. A row with no field and in no other row set goes with it.
    pub(crate) fn drop_member(&self, set: RowSet, id: &str) -> R<bool> {
        let dropped = self
            .tx
            .prepare_cached(on_col!(set;
                "UPDATE emq_jobs SET ", " = NULL WHERE queue = ?1 AND id = ?2 AND ", " IS NOT NULL"))
            .and_then(|mut s| s.execute(params![self.q, id]))
            .map_err(|e| self.e(e))?;
        if dropped == 0 {
            return Ok(false);
        }
        if set == RowSet::Pending {
            self.pending_moved.set(self.pending_moved.get() - 1);
        }
        self.tx
            .prepare_cached(concat!(
                "DELETE FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND lease IS NULL AND pending IS NULL AND ",
                fields!(),
                " IS NULL"
            ))
            .and_then(|mut s| s.execute(params![self.q, id]))
            .map_err(|e| self.e(e))?;
        Ok(true)
    }

    /// ZSCORE.
    pub(crate) fn score(&self, set: RowSet, id: &str) -> R<Option<i64>> {
        self.tx
            .prepare_cached(on_col!(set;
                "SELECT ", " FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND ", " IS NOT NULL"))
            .and_then(|mut s| s.query_row(params![self.q, id], |r| r.get(0)).optional())
            .map_err(|e| self.e(e))
    }

    /// ZCARD: of `pending` in O(1), its size as committed moved by this transaction's moves.
    pub(crate) fn card(&self, set: RowSet) -> R<i64> {
        if set == RowSet::Pending {
            return self.pending_len();
        }
        self.tx
            .prepare_cached(on_col!(set; "SELECT count(*) FROM emq_jobs WHERE queue = ?1 AND ", " IS NOT NULL"))
            .and_then(|mut s| s.query_row(params![self.q], |r| r.get(0)))
            .map_err(|e| self.e(e))
    }

    /// ZCARD counted no further than `cap`.
    pub(crate) fn card_upto(&self, set: RowSet, cap: i64) -> R<i64> {
        if set == RowSet::Pending {
            return Ok(self.card(set)?.min(cap));
        }
        self.tx
            .prepare_cached(on_col!(set;
                "SELECT count(*) FROM (SELECT 1 FROM emq_jobs WHERE queue = ?1 AND ", " IS NOT NULL LIMIT ?2)"))
            .and_then(|mut s| s.query_row(params![self.q, cap], |r| r.get(0)))
            .map_err(|e| self.e(e))
    }

    /// ZRANGE … WITHSCORES of the lowest member.
    pub(crate) fn first(&self, set: RowSet) -> R<Option<(String, i64)>> {
        self.tx
            .prepare_cached(on_col!(set;
                "SELECT id, ", " FROM emq_jobs WHERE queue = ?1 AND ", " IS NOT NULL ORDER BY ", ", id LIMIT 1"))
            .and_then(|mut s| s.query_row(params![self.q], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(|e| self.e(e))
    }

    /// ZRANGE by rank, `limit` members from `offset` (`rev` = ZREVRANGE).
    pub(crate) fn range(&self, set: RowSet, offset: i64, limit: i64, rev: bool) -> R<Vec<String>> {
        let sql = if rev {
            on_col!(set; "SELECT id FROM emq_jobs WHERE queue = ?1 AND ", " IS NOT NULL ORDER BY ",
                " DESC, id DESC LIMIT ?2 OFFSET ?3")
        } else {
            on_col!(set; "SELECT id FROM emq_jobs WHERE queue = ?1 AND ", " IS NOT NULL ORDER BY ",
                ", id LIMIT ?2 OFFSET ?3")
        };
        self.strings(sql, params![self.q, limit, offset])
    }

    /// ZRANGE … WITHSCORES by rank, ascending.
    pub(crate) fn range_scored(&self, set: RowSet, offset: i64, limit: i64) -> R<Vec<(String, i64)>> {
        self.tx
            .prepare_cached(
                on_col!(set; "SELECT id, ", " FROM emq_jobs WHERE queue = ?1 AND ", " IS NOT NULL ORDER BY ",
                ", id LIMIT ?2 OFFSET ?3"),
            )
            .and_then(|mut s| {
                s.query_map(params![self.q, limit, offset], |r| Ok((r.get(0)?, r.get(1)?)))?
                    .collect()
            })
            .map_err(|e| self.e(e))
    }

    /// ZRANGEBYSCORE -inf max LIMIT 0 limit.
    pub(crate) fn upto(&self, set: RowSet, max: i64, limit: i64) -> R<Vec<String>> {
        self.strings(
            on_col!(set; "SELECT id FROM emq_jobs WHERE queue = ?1 AND ", " IS NOT NULL AND ", " <= ?2 ORDER BY ",
                ", id LIMIT ?3"),
            params![self.q, max, limit],
        )
    }

    /// ZPOPMIN: the lowest members, each dropped.
    pub(crate) fn pop(&self, set: RowSet, count: i64) -> R<Vec<String>> {
        let ids = self.range(set, 0, count, false)?;
        for id in &ids {
            self.drop_member(set, id)?;
        }
        Ok(ids)
    }

    /// Every member dropped, and the rows with no field with them (obliterate's end): found
    /// through the set's index, as the rows are keyed by id first.
    pub(crate) fn clear(&self, set: RowSet) -> R<()> {
        while !self.pop(set, 1000)?.is_empty() {}
        Ok(())
    }
}
