//! The twin of `scripts/sweep_stalled.lua` (the seed's count-thresholded stalled sweep): every lapsed
//! lease, at most `limit`, has its `stalled` count raised; at `max_stalled` it goes dead (last_error
//! "stalled", metrics failed), else back to ready at the front (metrics stalled). A lane job frees
//! its slot and goes to its lane's head, in lapse order (the ring step); a missing row is dropped
//! from `active` and reported neither way. Replies {recovered ids, dead ids}, in lapse order.

use rusqlite::{params, OptionalExtension};

use super::common::{free_slot, lane, number, ring_step, ring_step_flat};
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
    // read every row first (HMGET state, group, stalled)
    let mut rows = Vec::with_capacity(exp.len());
    for id in &exp {
        rows.push(state_group_stalled(db, id)?);
    }
    // walked backwards (each LPUSH puts a job ahead of the one lapsed after it, so recovered lane
    // jobs keep their order at the lane's front); the reply lists are put back in lapse order below
    let (mut recovered, mut buried) = (Vec::new(), Vec::new());
    let mut flat = false;
    // groups a dead-lettered lane job put back on the ring: each made a job claimable
    let mut freed = 0i64;
    for (id, (st, g, stalled)) in exp.iter().zip(rows).rev() {
        db.zrem("active", id)?;
        if st.is_none() {
            continue;
        }
        if let Some(g) = g.as_deref() {
            // the slot invariant: the lane job leaves active, its group's slot frees
            free_slot(db, g)?;
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
            db.count("failed", 1)?;
            buried.push(id.clone());
        } else {
            db.hset(id, &[Field::Stalled(stalls), Field::State("pending")])?;
            match g.as_deref() {
                Some(g) => db.lpush(&lane(g), id)?,
                None => {
                    db.zadd("pending", 0, id)?;
                    flat = true;
                }
            }
            db.count("stalled", 1)?;
            recovered.push(id.clone());
        }
        if let Some(g) = g.as_deref() {
            // the ring step for g (eligible: a ready job and a free slot)
            if ring_step(db, g)? && dies {
                freed += 1;
            }
        }
    }
    if flat {
        ring_step_flat(db)?;
    }
    // one wake per job made claimable, at most 16
    db.wake(recovered.len() as i64 + freed)?;
    let in_lapse_order = |ids: Vec<String>| ids.into_iter().rev().map(JobId::from_store).collect();
    Ok(Swept {
        recovered: in_lapse_order(recovered),
        dead: in_lapse_order(buried),
    })
}

/// HMGET job:<id> state group stalled — without reading the payload.
fn state_group_stalled(db: &Db, id: &str) -> Result<(Option<String>, Option<String>, Option<String>)> {
    db.sql()
        .prepare_cached("SELECT state, grp, stalled FROM emq_jobs WHERE queue = ?1 AND id = ?2")
        .and_then(|mut s| {
            s.query_row(params![db.queue(), id], |r| Ok((text(r, 0)?, text(r, 1)?, text(r, 2)?)))
                .optional()
        })
        .map(Option::unwrap_or_default)
        .map_err(|e| db.err(e))
}
