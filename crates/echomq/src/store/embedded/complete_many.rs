//! The twin of `scripts/complete_many.lua`: complete for a batch in one step; each entry fenced on
//! its own; a repeated entry is stale after its first settle.

use super::common::{fence_held, finish_active, leave_lane};
use super::db::{Db, Field};
use crate::error::Result;
use crate::store::{Completion, Settled};

pub(crate) fn complete_many(db: &Db, jobs: &[Completion], keep: i64, recmax: i64) -> Result<Vec<Settled>> {
    let mut reply = Vec::with_capacity(jobs.len());
    let mut seen = std::collections::HashSet::new();
    let mut done = Vec::new();
    let mut lanes = Vec::new();
    // read and validate every entry first; a flat job whose row is not kept is settled by the one
    // delete that checks it (entries touch only their own rows, so this reads as validating first)
    for (i, c) in jobs.iter().enumerate() {
        let id = c.id.as_str();
        // a repeat is stale after its first settle
        if seen.contains(id) {
            reply.push(Settled::Stale);
            continue;
        }
        if keep <= 0 && db.del_held_flat(id, c.token)? {
            seen.insert(id);
            reply.push(Settled::Ok);
            done.push((i, true));
            continue;
        }
        match fence_held(db, id, c.token)? {
            Err(refused) => reply.push(refused),
            Ok(held) => {
                seen.insert(id);
                if held.active {
                    reply.push(Settled::Ok);
                    done.push((i, false));
                    lanes.extend(held.group);
                } else {
                    reply.push(Settled::Stale);
                }
            }
        }
    }
    for &(i, deleted) in &done {
        let c = &jobs[i];
        if !deleted {
            finish_active(
                db,
                c.id.as_str(),
                "completed",
                keep,
                c.output.as_deref().map(Field::Output),
            )?;
        }
        db.record(
            recmax,
            c.id.as_str(),
            "completed",
            &c.token.to_string(),
            "output",
            c.output.as_deref(),
        )?;
    }
    for g in lanes {
        leave_lane(db, &g)?;
    }
    db.count("completed", done.len() as i64)?;
    Ok(reply)
}
