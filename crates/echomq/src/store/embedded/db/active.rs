//! The sorted set `active` on the rows themselves: a member's score is its row's `lease` column
//! (the lease deadline, ms), ordered by the partial index `emq_jobs_lease` (lease, then id bytes, as
//! Redis orders ties). A claim writes state, attempts and lease in one update; a settle deletes the
//! row and its lease with it. An id that stays in `active` after its row is deleted keeps its lease
//! on a row with no field, which every verb reads as no row.

use rusqlite::{params, OptionalExtension};

use super::{fields, Db, R};

impl Db<'_> {
    /// ZADD active: the lease of `id` set, on a row with no field when it has no row.
    pub(crate) fn lease_set(&self, id: &str, deadline: i64) -> R<()> {
        let moved = self
            .tx
            .prepare_cached("UPDATE emq_jobs SET lease = ?3 WHERE queue = ?1 AND id = ?2")
            .and_then(|mut s| s.execute(params![self.q, id, deadline]))
            .map_err(|e| self.e(e))?;
        if moved == 0 {
            self.tx
                .prepare_cached("INSERT INTO emq_jobs (queue, id, lease) VALUES (?1, ?2, ?3)")
                .and_then(|mut s| s.execute(params![self.q, id, deadline]))
                .map_err(|e| self.e(e))?;
        }
        Ok(())
    }

    /// ZADD XX active: a member's lease moved; true when it was a member.
    pub(crate) fn lease_move(&self, id: &str, deadline: i64) -> R<bool> {
        self.tx
            .prepare_cached("UPDATE emq_jobs SET lease = ?3 WHERE queue = ?1 AND id = ?2 AND lease IS NOT NULL")
            .and_then(|mut s| s.execute(params![self.q, id, deadline]))
            .map(|n| n > 0)
            .map_err(|e| self.e(e))
    }

    /// ZREM active: true when it was a member. A row with no field goes with its lease.
    pub(crate) fn lease_drop(&self, id: &str) -> R<bool> {
        let dropped = self
            .tx
            .prepare_cached("UPDATE emq_jobs SET lease = NULL WHERE queue = ?1 AND id = ?2 AND lease IS NOT NULL")
            .and_then(|mut s| s.execute(params![self.q, id]))
            .map_err(|e| self.e(e))?;
        if dropped == 0 {
            return Ok(false);
        }
        self.tx
            .prepare_cached(concat!(
                "DELETE FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND ",
                fields!(),
                " IS NULL"
            ))
            .and_then(|mut s| s.execute(params![self.q, id]))
            .map_err(|e| self.e(e))?;
        Ok(true)
    }

    /// ZSCORE active.
    pub(crate) fn lease(&self, id: &str) -> R<Option<i64>> {
        self.tx
            .prepare_cached("SELECT lease FROM emq_jobs WHERE queue = ?1 AND id = ?2 AND lease IS NOT NULL")
            .and_then(|mut s| s.query_row(params![self.q, id], |r| r.get(0)).optional())
            .map_err(|e| self.e(e))
    }

    /// ZCARD active.
    pub(crate) fn leases(&self) -> R<i64> {
        self.tx
            .prepare_cached("SELECT count(*) FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL")
            .and_then(|mut s| s.query_row(params![self.q], |r| r.get(0)))
            .map_err(|e| self.e(e))
    }

    /// ZRANGE active … WITHSCORES of the lowest member.
    pub(crate) fn lease_first(&self) -> R<Option<(String, i64)>> {
        self.tx
            .prepare_cached(
                "SELECT id, lease FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL ORDER BY lease, id LIMIT 1",
            )
            .and_then(|mut s| s.query_row(params![self.q], |r| Ok((r.get(0)?, r.get(1)?))).optional())
            .map_err(|e| self.e(e))
    }

    /// ZRANGE active by rank, `limit` members from `offset` (`rev` = ZREVRANGE).
    pub(crate) fn lease_range(&self, offset: i64, limit: i64, rev: bool) -> R<Vec<String>> {
        let sql = if rev {
            "SELECT id FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL ORDER BY lease DESC, id DESC LIMIT ?2 OFFSET ?3"
        } else {
            "SELECT id FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL ORDER BY lease, id LIMIT ?2 OFFSET ?3"
        };
        self.strings(sql, params![self.q, limit, offset])
    }

    /// ZRANGEBYSCORE active -inf max LIMIT 0 limit: the lapsed leases first.
    pub(crate) fn lease_upto(&self, max: i64, limit: i64) -> R<Vec<String>> {
        self.strings(
            "SELECT id FROM emq_jobs WHERE queue = ?1 AND lease IS NOT NULL AND lease <= ?2 ORDER BY lease, id LIMIT ?3",
            params![self.q, max, limit],
        )
    }

    /// Every lease of the queue dropped, and the rows with no field with them (obliterate's end):
    /// found through the lease index, as the rows are keyed by id first.
    pub(crate) fn leases_clear(&self) -> R<()> {
        loop {
            let ids = self.lease_range(0, 1000, false)?;
            if ids.is_empty() {
                return Ok(());
            }
            for id in &ids {
                self.lease_drop(id)?;
            }
        }
    }
}
