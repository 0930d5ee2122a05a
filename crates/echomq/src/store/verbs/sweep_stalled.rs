//! sweep_stalled (`scripts/sweep_stalled.lua`): the count-thresholded stalled sweep; its call is
//! also the round's `Recovery::Stalled` leg.

use crate::store::reply::Reply;

use super::args::num;
use super::Call;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{JobId, QueueKeys, QueueName};
use crate::store::{positive, StalledPolicy, Swept};

pub(crate) async fn sweep_stalled(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    policy: StalledPolicy,
) -> Result<Swept> {
    positive("max_stalled", policy.max_stalled as u64)?;
    positive("limit", policy.limit as u64)?;
    let call = sweep_call(store, &QueueKeys::new(queue), policy);
    parse_swept(store.run(call.script, &call.keys, call.args).await?)
}

/// One sweep script call under `policy`.
pub(crate) fn sweep_call<'a>(store: &'a (impl Engine + ?Sized), k: &QueueKeys, policy: StalledPolicy) -> Call<'a> {
    Call {
        script: &store.scripts().sweep_stalled,
        keys: vec![k.active(), k.pending(), k.dead()],
        args: vec![k.base().as_bytes().to_vec(), num(policy.max_stalled), num(policy.limit)],
    }
}

/// The ids recovered and the ids buried, in the reply's order.
pub(crate) fn parse_swept(v: Reply) -> Result<Swept> {
    let verb = "sweep_stalled";
    let [recovered, dead] = reply::tuple(verb, v)?;
    let ids = |v: Reply| -> Result<Vec<JobId>> {
        reply::array(verb, v)?
            .into_iter()
            .map(|i| reply::string(verb, i).map(JobId::from_store))
            .collect()
    };
    Ok(Swept {
        recovered: ids(recovered)?,
        dead: ids(dead)?,
    })
}
