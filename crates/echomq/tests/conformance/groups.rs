//! groups: a queue's groups page by page — each with waiting or running jobs or a limit of its
//! own — with its waiting and running jobs and its limit.

use echomq::store::{GroupRow, LimitTarget, GROUPS_PAGE};
use echomq::NewJob;

use crate::harness::Ctx;
use crate::steps::{claim, group};

/// Every page from the first, its groups by name.
async fn all(ctx: &Ctx) -> (Vec<GroupRow>, u32) {
    let (mut rows, mut cursor, mut default) = (Vec::new(), None, 0);
    for _ in 0..1000 {
        let page = ctx.store.groups(&ctx.q, cursor.as_deref()).await.unwrap();
        let n = page.groups.len();
        assert!(n <= 3 * GROUPS_PAGE, "a page is about GROUPS_PAGE groups: {n}");
        rows.extend(page.groups);
        default = page.default_limit;
        match page.next {
            Some(next) => cursor = Some(next),
            None => break,
        }
    }
    rows.sort_by(|a, b| a.group.cmp(&b.group));
    rows.dedup_by(|a, b| a.group == b.group);
    (rows, default)
}

pub async fn groups_lists_each_group_with_its_waiting_and_running_jobs_and_its_limit(ctx: &Ctx) {
    let (none, default) = all(ctx).await;
    assert!(none.is_empty());
    assert_eq!(default, 1, "the default limit when none is set");
    // 250 groups (three pages), g-000 with three jobs, the others with one; a limit on g-001
    for i in 0..250 {
        let jobs: Vec<NewJob> = (0..if i == 0 { 3 } else { 1 }).map(|j| NewJob::new(vec![j])).collect();
        ctx.store
            .genqueue(&ctx.q, &group(&format!("g-{i:03}")), &jobs)
            .await
            .unwrap();
    }
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(group("g-001")), 4)
        .await
        .unwrap();
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Default, 2)
        .await
        .unwrap();
    // g-000 runs two (its limit is the default, 2); everyone else one
    let running = claim(ctx, 1000).await;
    assert_eq!(running.len(), 2 + 249);
    // and a group with only a limit of its own is listed too
    ctx.store
        .set_group_limit(&ctx.q, &LimitTarget::Group(group("idle")), 7)
        .await
        .unwrap();
    let (rows, default) = all(ctx).await;
    assert_eq!(default, 2);
    assert_eq!(rows.len(), 251, "every group once");
    let row = |g: &str| rows.iter().find(|r| r.group.as_str() == g).unwrap().clone();
    let g0 = row("g-000");
    assert_eq!((g0.waiting, g0.active, g0.limit), (1, 2, None));
    let g1 = row("g-001");
    assert_eq!((g1.waiting, g1.active, g1.limit), (0, 1, Some(4)));
    let idle = row("idle");
    assert_eq!((idle.waiting, idle.active, idle.limit), (0, 0, Some(7)));
}

crate::conformance!(groups_lists_each_group_with_its_waiting_and_running_jobs_and_its_limit);
