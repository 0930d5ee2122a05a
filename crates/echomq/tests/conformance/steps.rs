//! Steps the claim and promote cases share: names, payload batches, a claim and a complete with
//! the suite's lease and budget.

use std::time::Duration;

use echomq::store::{SettleOptions, Settled};
use echomq::{ClaimedJob, GroupName, NewJob};

use crate::harness::Ctx;

/// The lease of a case's claims: long enough never to lapse within one.
pub const LEASE: Duration = Duration::from_secs(30);
/// The default attempt budget of a case's claims.
pub const MAX: u32 = 3;

pub fn group(name: &str) -> GroupName {
    GroupName::new(name).unwrap()
}

pub fn named(payloads: &[&str]) -> Vec<NewJob> {
    payloads.iter().map(|p| NewJob::new(p.as_bytes())).collect()
}

pub fn payloads(claimed: &[ClaimedJob]) -> Vec<String> {
    claimed
        .iter()
        .map(|c| String::from_utf8(c.payload.clone()).unwrap())
        .collect()
}

pub async fn claim(ctx: &Ctx, n: u32) -> Vec<ClaimedJob> {
    ctx.store
        .claim(&ctx.q, echomq::store::ClaimRequest::new(n, LEASE).max_attempts(MAX))
        .await
        .unwrap()
        .jobs
}

pub async fn complete(ctx: &Ctx, job: &ClaimedJob) {
    let r = ctx
        .store
        .complete(
            &ctx.q,
            &echomq::store::Completion::new(job.id.clone(), job.token),
            SettleOptions::default(),
        )
        .await
        .unwrap();
    assert_eq!(r, Settled::Ok, "complete of {}", job.id);
}
