//! set_rate_limit and rate_limits (`scripts/set_rate_limit.lua`, `scripts/rate_limits.lua`): the
//! queue's rate limits, the fields `rate`, `rate:~` and `rate:<g>` of `emq:{q}:groups` and the
//! kinds' own in `emq:{q}:kind_rates`, and their state (`emq:{q}:tat`, `emq:{q}:tats`,
//! `emq:{q}:kind_tats`, `emq:{q}:throttled`, an exact limit's log of starts).

use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::rate::{target_parts, RateLimit, RateLimits, RateParts, RateTarget};
use crate::store::reply::Reply;

fn keys(k: &QueueKeys) -> [String; 4] {
    [k.groups(), k.throttled(), k.tats(), k.tat()]
}

pub(crate) async fn set_rate_limit(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    target: &RateTarget,
    limit: Option<RateLimit>,
) -> Result<()> {
    let k = QueueKeys::new(queue);
    if let RateTarget::Kind(kind) = target {
        crate::store::check_kind(kind)?;
    }
    let (name, group) = target_parts(target);
    let spec = limit.map(|l| l.spec()).unwrap_or_default();
    let args = vec![
        k.base().as_bytes().to_vec(),
        name.as_bytes().to_vec(),
        group.as_bytes().to_vec(),
        spec.into_bytes(),
    ];
    store.run(&store.scripts().set_rate_limit, &keys(&k), args).await?;
    Ok(())
}

pub(crate) async fn rate_limits(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<RateLimits> {
    let verb = "rate_limits";
    let k = QueueKeys::new(queue);
    let args = vec![k.base().as_bytes().to_vec()];
    let v = store.run(&store.scripts().rate_limits, &keys(&k), args).await?;
    let items = reply::array(verb, v)?;
    if items.len() < 6 || (items.len() - 6) % 3 != 0 {
        return Err(reply::protocol_text(verb, &format!("{} elements", items.len())));
    }
    let count = |v: &Reply| u64::try_from(reply::int(verb, v)?).map_err(|_| reply::protocol(verb, v));
    let mut it = items.into_iter();
    let mut next = || it.next().unwrap_or(Reply::Nil);
    let queue_spec = reply::string(verb, next())?;
    let queue_wait_us = count(&next())?;
    let group_default = reply::string(verb, next())?;
    let throttled = count(&next())?;
    let first_wait_us = count(&next())?;
    let mut kinds = Vec::new();
    let mut by_kind = reply::array(verb, next())?.into_iter();
    while let (Some(kind), Some(spec), Some(wait)) = (by_kind.next(), by_kind.next(), by_kind.next()) {
        kinds.push((reply::string(verb, kind)?, reply::string(verb, spec)?, count(&wait)?));
    }
    let mut groups = Vec::new();
    let mut rest = it;
    while let (Some(g), Some(spec), Some(wait)) = (rest.next(), rest.next(), rest.next()) {
        groups.push((reply::string(verb, g)?, reply::string(verb, spec)?, count(&wait)?));
    }
    RateParts {
        queue: queue_spec,
        queue_wait_us,
        group_default,
        throttled,
        first_wait_us,
        groups,
        kinds,
    }
    .read(verb)
}
