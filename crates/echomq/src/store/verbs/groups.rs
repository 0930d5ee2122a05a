//! groups (`scripts/groups.lua`): a page of a queue's groups, chunks of the groups hash by cursor.

use std::collections::BTreeMap;

use super::{reply, Engine};
use crate::error::{Error, Result};
use crate::keyspace::{GroupName, QueueKeys, QueueName};
use crate::store::{GroupRow, GroupsPage, GROUPS_PAGE};

pub(crate) async fn groups(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    cursor: Option<&str>,
) -> Result<GroupsPage> {
    let k = QueueKeys::new(queue);
    let verb = "groups";
    let mut cursor = cursor.unwrap_or("0").to_string();
    let mut rows = BTreeMap::new();
    let mut default_limit;
    // chunks until a page is full or the hash is walked (a chunk may hold no group at all)
    loop {
        let v = store
            .run(
                &store.scripts().groups,
                &[k.groups()],
                vec![k.base().as_bytes().to_vec(), cursor.clone().into_bytes()],
            )
            .await?;
        let mut items = reply::array(verb, v)?.into_iter();
        let (Some(next), Some(default)) = (items.next(), items.next()) else {
            return Err(Error::Protocol {
                verb,
                reply: "groups shape".into(),
            });
        };
        cursor = reply::string(verb, next)?;
        default_limit = limit_of(verb, &reply::string(verb, default)?)?.unwrap_or(1);
        while let (Some(g), Some(waiting), Some(active), Some(limit)) =
            (items.next(), items.next(), items.next(), items.next())
        {
            let group = GroupName::new(reply::string(verb, g)?)?;
            let row = GroupRow {
                group: group.clone(),
                waiting: reply::int(verb, &waiting)?.max(0) as u64,
                active: reply::int(verb, &active)?.max(0) as u64,
                limit: limit_of(verb, &reply::string(verb, limit)?)?,
            };
            rows.insert(group, row);
        }
        if cursor == "0" || rows.len() >= GROUPS_PAGE {
            break;
        }
    }
    Ok(GroupsPage {
        groups: rows.into_values().collect(),
        default_limit,
        next: (cursor != "0").then_some(cursor),
    })
}

/// A stored limit ('' = none).
fn limit_of(verb: &'static str, text: &str) -> Result<Option<u32>> {
    if text.is_empty() {
        return Ok(None);
    }
    text.parse().map(Some).map_err(|_| Error::Protocol {
        verb,
        reply: format!("a limit {text:?}"),
    })
}
