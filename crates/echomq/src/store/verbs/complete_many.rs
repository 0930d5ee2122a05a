//! complete_many (`scripts/complete_many.lua`): the batch settle, split in script calls of ≤ 1000
//! jobs and ≤ 8 MiB of outputs sent in one pipeline, and the encoding of its entries.

use super::args::{num, opt_arg, settle_arg};
use crate::store::reply::Reply;

use super::Call;
use super::{reply, Engine};
use crate::error::Result;
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::{check_outputs, Completion, SettleOptions, Settled};

pub(crate) async fn complete_many(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    jobs: &[Completion],
    settle: SettleOptions,
) -> Result<Vec<Settled>> {
    let calls = complete_many_calls(store, &QueueKeys::new(queue), jobs, settle)?;
    if calls.is_empty() {
        return Ok(Vec::new());
    }
    parse_completed(store.run_calls(calls).await?)
}

/// The script calls of a batch: ≤ 1000 jobs and ≤ 8 MiB of outputs each. An output over the
/// store's payload limit refuses the whole batch before anything is sent.
pub(crate) fn complete_many_calls<'a>(
    store: &'a (impl Engine + ?Sized),
    k: &QueueKeys,
    jobs: &[Completion],
    settle: SettleOptions,
) -> Result<Vec<Call<'a>>> {
    check_outputs(jobs, store.payload_limit())?;
    let mut calls = Vec::new();
    for batch in crate::store::bounded(jobs, |c| c.output.as_ref().map_or(0, Vec::len)) {
        let recmax = settle_arg(settle);
        let mut args = Vec::with_capacity(4 + batch.len() * 3);
        args.extend([k.base().as_bytes().to_vec(), num(batch.len()), recmax]);
        settle_entries(batch, &mut args);
        calls.push(Call {
            script: &store.scripts().complete_many,
            keys: vec![k.active()],
            args,
        });
    }
    Ok(calls)
}

/// The replies of [`complete_many_calls`], one per entry in order; the first failed call fails
/// the batch.
pub(crate) fn parse_completed(replies: Vec<Result<Reply>>) -> Result<Vec<Settled>> {
    let mut out = Vec::new();
    for v in replies {
        for code in reply::array("complete_many", v?)? {
            out.push(reply::settled("complete_many", &code)?);
        }
    }
    Ok(out)
}

/// Appends complete_many's entries for `batch` to `args`: (id, token, output) per job, as the
/// script's header gives them.
fn settle_entries(batch: &[Completion], args: &mut Vec<Vec<u8>>) {
    for c in batch {
        args.push(c.id.as_str().as_bytes().to_vec());
        args.push(num(c.token));
        args.push(opt_arg(c.output.as_deref()));
    }
}
