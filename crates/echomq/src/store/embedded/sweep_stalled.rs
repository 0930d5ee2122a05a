//! The twin of `scripts/sweep_stalled.lua` (the count-thresholded stalled sweep): every lapsed
//! lease, at most `limit`, has its `stalled` count raised; at `max_stalled` it goes dead (last_error
//! "stalled", metrics failed), else back to ready at the front (metrics stalled). A lane job frees
//! its slot and goes to its lane at rank 0, the front (the ring step); a missing row is dropped
//! from `active` and reported neither way. Replies {recovered ids, dead ids}, in lapse order.
//! Reads first, as the script: the lapsed ids, every row, each group's fields and lane, the flat
//! set's ring flag and whether the queue is paused, then the writes.

use rusqlite::{params, OptionalExtension};

use super::common::{lane, number, paused_read, wake, Count, Lanes};
use super::db::{text, Db, Field};
use crate::error::{Error, Result};
use crate::keyspace::JobId;
use crate::store::Swept;

pub(crate) fn sweep_stalled(db: &Db, max_stalled: i64, limit: i64) -> Result<Swept> {
    if max_stalled < 1 || limit < 1 {
        return Err(Error::Store {
            verb: "sweep_stalled",
            reason: "sweep_stalled: max_stalled and limit must be >= 1".into(),
        });
    }
    let now = db.now();
    let exp = db.zrange_upto("active", now, limit)?;
    // the reads: every row (HMGET state, group, stalled, waited), each group's state, the flat set's flag
    let mut rows = Vec::with_capacity(exp.len());
    let mut lanes = Lanes::default();
    let mut flat_ringed = None;
    for id in &exp {
        let row = state_group_stalled(db, id)?;
        if row.0.is_some() {
            match row.1.as_deref() {
                Some(g) => {
                    lanes.read(db, g, Count::Any)?;
                }
                None if flat_ringed.is_none() => flat_ringed = Some(db.gget("r:~")?.is_some()),
                None => {}
            }
        }
        rows.push(row);
    }
    let paused = paused_read(db)?;

    // the writes, walked backwards (each LPUSH puts a job ahead of the one lapsed after it, so
    // recovered lane jobs keep their order at the lane's front); the reply lists are put back in
    // lapse order below
    let (mut recovered, mut buried) = (Vec::new(), Vec::new());
    let mut flat = false;
    // groups a dead-lettered lane job put back on the ring: each made a job claimable
    let mut freed = 0i64;
    for (id, (st, g, stalled, waited)) in exp.iter().zip(rows).rev() {
        db.zrem("active", id)?;
        if st.is_none() {
            continue;
        }
        let mut lane_state = match g.as_deref() {
            Some(g) => lanes.get(g).map(|s| (g, s)),
            None => None,
        };
        if let Some((g, s)) = lane_state.as_mut() {
            // the slot invariant: the lane job leaves active, its group's slot frees
            s.a -= 1;
            if s.a <= 0 {
                s.a = 0;
                db.gdel(&format!("a:{g}"))?;
            } else {
                db.gset(&format!("a:{g}"), &s.a.to_string())?;
            }
        }
        let stalls = number(stalled.as_deref(), 0).unwrap_or(0) + 1;
        let dies = stalls >= max_stalled;
        if dies {
            db.hset(
                id,
                &[
                    Field::Stalled(stalls),
                    Field::State("dead"),
                    Field::LastError("stalled"),
                ],
            )?;
            db.zadd("dead", now, id)?;
            db.notify(waited.as_deref(), id);
            buried.push(id.clone());
        } else {
            db.hset(id, &[Field::Stalled(stalls), Field::State("pending")])?;
            match lane_state.as_mut() {
                Some((g, s)) => {
                    db.zadd(&lane(g), 0, id)?;
                    s.len += 1;
                }
                None => {
                    db.zadd("pending", 0, id)?;
                    flat = true;
                }
            }
            recovered.push(id.clone());
        }
        if let Some((g, s)) = lane_state {
            // the ring step for g (eligible: off the ring, a ready job and a free slot)
            if !s.ringed && s.len > 0 && s.a < s.limit {
                db.rpush("ring", g)?;
                db.gset(&format!("r:{g}"), "1")?;
                s.ringed = true;
                if dies {
                    freed += 1;
                }
            }
        }
    }
    if flat && flat_ringed == Some(false) {
        // the ring step for the flat set
        db.rpush("ring", "~")?;
        db.gset("r:~", "1")?;
    }
    db.count("failed", buried.len() as i64)?;
    db.count("stalled", recovered.len() as i64)?;
    // one wake per job made claimable, at most 16
    wake(db, recovered.len() as i64 + freed, paused)?;
    let in_lapse_order = |ids: Vec<String>| ids.into_iter().rev().map(JobId::from_store).collect();
    Ok(Swept {
        recovered: in_lapse_order(recovered),
        dead: in_lapse_order(buried),
    })
}

/// HMGET job:<id> state group stalled waited — without reading the payload.
type Look = (Option<String>, Option<String>, Option<String>, Option<String>);

fn state_group_stalled(db: &Db, id: &str) -> Result<Look> {
    db.sql()
        .prepare_cached("SELECT state, grp, stalled, waited FROM emq_jobs WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| {
                Ok((text(r, 0)?, text(r, 1)?, text(r, 2)?, text(r, 3)?))
            })
            .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
