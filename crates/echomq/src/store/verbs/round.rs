//! The consumer's pipelined rounds, each leg's reply read by its verb's module and kept apart:
//! recover_promote_claim (a beat's recovery, promote and claim) and complete_then_claim (a batch of
//! completions, then the claim for the slots they free).

use super::args::num;
use super::claim::{claim_call, parse_claimed};
use super::complete_many::{complete_many_calls, parse_completed};
use super::promote::{parse_promoted, promote_call};
use super::reap::{parse_reaped, reap_call};
use super::reply::{self, Reply};
use super::sweep_stalled::{parse_swept, sweep_call};
use super::{Call, Engine};
use crate::error::{Error, Result};
use crate::keyspace::{QueueKeys, QueueName};
use crate::store::{
    check_claim, positive, ClaimRequest, Claimed, CompletedThenClaimed, Completion, Recovery, Round, RoundRequest,
    SettleOptions, BATCH_MAX, REAP_LIMIT,
};

pub(crate) async fn recover_promote_claim(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    request: &RoundRequest,
) -> Result<Round> {
    let RoundRequest {
        recovery,
        pump,
        grace,
        ref claim,
    } = *request;
    positive("pump", pump as u64)?;
    let k = QueueKeys::new(queue);
    let mut calls = Vec::with_capacity(3);
    match recovery {
        Recovery::Off => {}
        Recovery::Reap => calls.push(reap_call(store, &k, REAP_LIMIT, None)),
        Recovery::Redeliver(p) => calls.push(reap_call(store, &k, p.limit, Some(p.max_redeliveries))),
        Recovery::Stalled(policy) => calls.push(sweep_call(store, &k, policy)),
    }
    calls.push(promote_call(store, &k, pump, grace));
    if claim.n > 0 {
        check_claim(claim.lease, claim.max_attempts)?;
        let n = (claim.n as usize).min(BATCH_MAX);
        calls.push(claim_call(store, &k, n, super::claim::slots_of(n, claim), claim));
    }
    let mut replies = store.run_calls(calls).await?.into_iter();
    let mut next = || {
        replies.next().unwrap_or_else(|| {
            Err(Error::Protocol {
                verb: "recover_promote_claim",
                reply: "fewer replies than calls".into(),
            })
        })
    };
    let recovered = match recovery {
        Recovery::Off => Ok(()),
        Recovery::Reap | Recovery::Redeliver(_) => next().and_then(parse_reaped).map(drop),
        Recovery::Stalled(_) => next().and_then(parse_swept).map(drop),
    };
    let promoted = next().and_then(parse_promoted);
    let claimed = if claim.n > 0 {
        next().and_then(claimed_of)
    } else {
        Ok(Claimed::default())
    };
    Ok(Round {
        recovered,
        promoted,
        claimed,
    })
}

pub(crate) async fn complete_then_claim(
    store: &(impl Engine + ?Sized),
    queue: &QueueName,
    jobs: &[Completion],
    settle: SettleOptions,
    claim: &ClaimRequest,
) -> Result<CompletedThenClaimed> {
    let k = QueueKeys::new(queue);
    // a batch refused before sending (an output over the limit) sends no claim either: the
    // caller settles its entries one by one, then claims
    let mut calls = complete_many_calls(store, &k, jobs, settle)?;
    if claim.n == 0 {
        return Ok(CompletedThenClaimed {
            completed: parse_completed(store.run_calls(calls).await?),
            claimed: Ok(Claimed::default()),
        });
    }
    check_claim(claim.lease, claim.max_attempts)?;
    let n = (claim.n as usize).min(BATCH_MAX);
    let claim_call = claim_call(store, &k, n, super::claim::slots_of(n, claim), claim);
    let Some(last) = calls.pop() else {
        // no completion: the claim alone
        let claimed = store.run_calls(vec![claim_call]).await?.pop();
        return Ok(CompletedThenClaimed {
            completed: Ok(Vec::new()),
            claimed: claimed.map_or_else(|| Err(fewer()), |v| v.and_then(claimed_of)),
        });
    };
    // the last settle call and the claim are one script call (complete_then_claim.lua): the
    // completions land first, then the claim runs whole
    calls.push(fused(store, last, claim_call));
    let mut replies = store.run_calls(calls).await?;
    let (last, claimed) = match replies.pop() {
        Some(Ok(v)) => match reply::tuple::<2>("complete_then_claim", v) {
            Ok([completed, claimed]) => (Ok(completed), reply::checked("claim", claimed).and_then(claimed_of)),
            Err(e) => (Err(e.clone()), Err(e)),
        },
        Some(Err(e)) => (Err(e.clone()), Err(e)),
        None => (Err(fewer()), Err(fewer())),
    };
    replies.push(last);
    Ok(CompletedThenClaimed {
        completed: parse_completed(replies),
        claimed,
    })
}

/// The jobs of one claim call's reply.
fn claimed_of(v: Reply) -> Result<Claimed> {
    let mut out = Claimed::default();
    parse_claimed(v, &mut out).map(|_| out)
}

/// A round trip that answered fewer replies than its calls.
fn fewer() -> Error {
    Error::Protocol {
        verb: "complete_then_claim",
        reply: "fewer replies than calls".into(),
    }
}

/// One complete_many call and a claim call as one complete_then_claim call: the claim's KEYS; its
/// ARGV counted, then the settle's past the queue base both share.
fn fused<'a>(store: &'a (impl Engine + ?Sized), settle: Call<'a>, claim: Call<'a>) -> Call<'a> {
    let mut args = Vec::with_capacity(1 + claim.args.len() + settle.args.len());
    args.push(num(claim.args.len()));
    args.extend(claim.args);
    args.extend(settle.args.into_iter().skip(1));
    Call {
        script: &store.scripts().complete_then_claim,
        keys: claim.keys,
        args,
    }
}
