//! The twin of `scripts/groups.lua`: a page of a queue's groups — each with waiting or running
//! jobs or a limit of its own — by name after the cursor (the last name of the page before).

use std::collections::BTreeSet;

use super::common::lane;
use super::db::Db;
use crate::error::{Error, Result};
use crate::keyspace::GroupName;
use crate::store::{GroupRow, GroupsPage, GROUPS_PAGE};

pub(crate) fn groups(db: &Db, after: Option<&str>) -> Result<GroupsPage> {
    let names: BTreeSet<String> = db
        .gfields()?
        .into_iter()
        .filter_map(|f| {
            let (kind, g) = f.split_at_checked(2)?;
            (matches!(kind, "a:" | "r:" | "l:") && g != "~").then(|| g.to_string())
        })
        .filter(|g| after.is_none_or(|a| g.as_str() > a))
        .collect();
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
