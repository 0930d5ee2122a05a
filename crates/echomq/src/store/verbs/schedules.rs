//! The schedule verbs (`scripts/upsert_schedule.lua`, `remove_schedule.lua`, `pause_schedule.lua`,
//! `resume_schedule.lua`, `list_schedules.lua`, `trigger_schedule.lua`, `refill_schedule.lua`): a
//! schedule is the hash `emq:{q}:schedule:<name>`, its name in `emq:{q}:schedules` and its next slot
//! in `emq:{q}:schedule_due`, where the promote script finds it due.

use std::collections::BTreeMap;

use crate::store::reply::Reply;

use super::args::num;
use super::enqueue::register;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::schedule::{first_slots, Refill, RefillRequest, Schedule, ScheduleInfo, ScheduleName};

pub(crate) async fn upsert_schedule(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    schedule: &Schedule,
) -> Result<u64> {
    let verb = "upsert_schedule";
    schedule.check()?;
    let k = QueueKeys::new(queue);
    let fields = schedule.fields();
    let mut args = vec![
        k.base().as_bytes().to_vec(),
        schedule.name.as_str().as_bytes().to_vec(),
        num(fields.len()),
    ];
    for (field, value) in fields {
        args.push(field.as_bytes().to_vec());
        args.push(value);
    }
    args.extend(
        first_slots(&schedule.timing, crate::schedule::wall_ms())
            .into_iter()
            .map(num),
    );
    let keys = [k.schedule(&schedule.name), k.schedules(), k.schedule_due()];
    let [version, owed] = reply::tuple(verb, store.run(&store.scripts().upsert_schedule, &keys, args).await?)?;
    if !matches!(owed, Reply::Nil) {
        register(store, queue, &[reply::string(verb, owed)?]).await;
    }
    Ok(reply::int(verb, &version)?.max(0) as u64)
}

pub(crate) async fn remove_schedule(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    name: &ScheduleName,
) -> Result<bool> {
    let k = QueueKeys::new(queue);
    let keys = [k.schedule(name), k.schedules(), k.schedule_due()];
    let args = vec![name.as_str().as_bytes().to_vec()];
    flag(
        "remove_schedule",
        store.run(&store.scripts().remove_schedule, &keys, args).await?,
    )
}

pub(crate) async fn pause_schedule(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    name: &ScheduleName,
) -> Result<bool> {
    let k = QueueKeys::new(queue);
    let keys = [k.schedule(name), k.schedule_due()];
    let args = vec![name.as_str().as_bytes().to_vec()];
    flag(
        "pause_schedule",
        store.run(&store.scripts().pause_schedule, &keys, args).await?,
    )
}

pub(crate) async fn resume_schedule(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    name: &ScheduleName,
) -> Result<bool> {
    let k = QueueKeys::new(queue);
    let keys = [k.schedule(name), k.schedule_due()];
    let args = vec![k.base().as_bytes().to_vec(), name.as_str().as_bytes().to_vec()];
    flag(
        "resume_schedule",
        store.run(&store.scripts().resume_schedule, &keys, args).await?,
    )
}

pub(crate) async fn list_schedules(store: &(impl Engine + ?Sized), queue: &QueueName) -> Result<Vec<ScheduleInfo>> {
    let verb = "list_schedules";
    let k = QueueKeys::new(queue);
    let args = vec![k.base().as_bytes().to_vec()];
    let items = reply::array(
        verb,
        store
            .run(&store.scripts().list_schedules, &[k.schedules()], args)
            .await?,
    )?;
    let mut out = Vec::with_capacity(items.len() / 2);
    let mut it = items.into_iter();
    while let (Some(name), Some(fields)) = (it.next(), it.next()) {
        let name = reply::string(verb, name)?;
        let mut map = BTreeMap::new();
        let mut f = reply::array(verb, fields)?.into_iter();
        while let (Some(field), Some(value)) = (f.next(), f.next()) {
            map.insert(reply::string(verb, field)?, reply::bytes(verb, value)?);
        }
        // a name whose hash is gone (removed between the two reads cannot happen in one script;
        // a hash deleted by hand can): nothing to show
        if !map.is_empty() {
            out.push(ScheduleInfo::read(&name, &map)?);
        }
    }
    Ok(out)
}

pub(crate) async fn trigger_schedule(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    name: &ScheduleName,
) -> Result<Option<JobId>> {
    let k = QueueKeys::new(queue);
    let args = vec![k.base().as_bytes().to_vec(), name.as_str().as_bytes().to_vec()];
    match store
        .run(&store.scripts().trigger_schedule, &[k.schedule(name)], args)
        .await?
    {
        Reply::Nil => Ok(None),
        id => Ok(Some(JobId::from_store(reply::string("trigger_schedule", id)?))),
    }
}

pub(crate) async fn refill_schedule(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    request: &RefillRequest,
    refill: &Refill,
) -> Result<bool> {
    let k = QueueKeys::new(queue);
    let keys = [k.schedule(&request.name), k.schedule_due()];
    let mut args = vec![
        request.name.as_str().as_bytes().to_vec(),
        num(request.version),
        num(request.cursor),
        num(refill.omitted),
    ];
    args.extend(refill.slots.iter().copied().filter(|s| *s > request.cursor).map(num));
    flag(
        "refill_schedule",
        store.run(&store.scripts().refill_schedule, &keys, args).await?,
    )
}

fn flag(verb: &'static str, v: Reply) -> Result<bool> {
    Ok(reply::int(verb, &v)? == 1)
}
