//! The twin of `scripts/groups.lua`: a page of a queue's groups — each with waiting or running
//! jobs or a limit of its own — by name after the cursor (the last name of the page before). Where
//! the script scans its hash in chunks, the twin reads the names in order from the table's key: a
//! page costs the same however many groups the queue has.

use std::collections::BTreeSet;

use super::common::lane;
use super::db::Db;
use crate::error::{Error, Result};
use crate::keyspace::GroupName;
use crate::store::{GroupRow, GroupsPage, GROUPS_PAGE};

pub(crate) fn groups(db: &Db, after: Option<&str>) -> Result<GroupsPage> {
    // the first page and one more of each kind of field (and the flat set's `~`, never a group's):
    // together they hold the first page and one more of all the names after the cursor
    let want = GROUPS_PAGE as i64 + 2;
    let mut names = BTreeSet::new();
    for prefix in ["a:", "r:", "l:"] {
        names.extend(db.gnames(prefix, after, want)?.into_iter().filter(|g| g != "~"));
    }
    let limit_of = |text: Option<String>| -> Result<Option<u32>> {
        text.map(|t| {
            t.parse().map_err(|_| Error::Store {
                verb: "groups",
                reason: format!("a limit {t:?}"),
            })
        })
        .transpose()
    };
    let mut rows = Vec::new();
    for g in names.iter().take(GROUPS_PAGE) {
        rows.push(GroupRow {
            group: GroupName::new(g)?,
            waiting: db.zcard(&lane(g))?.max(0) as u64,
            active: db.gget(&format!("a:{g}"))?.and_then(|a| a.parse().ok()).unwrap_or(0),
            limit: limit_of(db.gget(&format!("l:{g}"))?)?,
        });
    }
    let next = (names.len() > GROUPS_PAGE)
        .then(|| rows.last().map(|r| r.group.to_string()))
        .flatten();
    Ok(GroupsPage {
        groups: rows,
        default_limit: limit_of(db.gget("l:~")?)?.unwrap_or(1),
        next,
    })
}
