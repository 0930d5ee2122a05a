//! history: the jobs completed and dead-lettered per minute, counted by the settles in the minute
//! they ran, read back over the last minutes on the store's clock.

use echomq::store::{Completion, SettleOptions};
use echomq::{Error, NewJob};

use crate::harness::Ctx;
use crate::steps::{claim, complete};

pub async fn history_counts_completed_and_dead_jobs_in_the_minute_they_ran(ctx: &Ctx) {
    let empty = ctx.store.history(&ctx.q, 60).await.unwrap();
    assert_eq!((empty.completed.len(), empty.failed.len()), (60, 60));
    assert!(empty.completed.iter().chain(&empty.failed).all(|n| *n == 0));
    let jobs: Vec<NewJob> = (0..5).map(|i| NewJob::new(vec![i])).collect();
    ctx.store.enqueue(&ctx.q, &jobs).await.unwrap();
    let before = ctx.probe.now_ms().await / 60_000;
    let held = claim(ctx, 5).await;
    // three in one complete_many, one alone, one dead
    let many: Vec<Completion> = held[..3]
        .iter()
        .map(|j| Completion::new(j.id.clone(), j.token))
        .collect();
    ctx.store
        .complete_many(&ctx.q, &many, SettleOptions::default())
        .await
        .unwrap();
    complete(ctx, &held[3]).await;
    ctx.store
        .discard(
            &ctx.q,
            &held[4].id,
            held[4].token,
            &echomq::store::DiscardRequest::new("broken"),
        )
        .await
        .unwrap();
    let h = ctx.store.history(&ctx.q, 60).await.unwrap();
    let after = ctx.probe.now_ms().await / 60_000;
    assert_eq!(h.completed.iter().sum::<u64>(), 4, "{h:?}");
    assert_eq!(h.failed.iter().sum::<u64>(), 1, "{h:?}");
    assert_eq!(h.first_minute, after - 59, "the last minute is the current one");
    // every count in the minutes the settles ran
    let ran = (before - h.first_minute) as usize;
    assert_eq!(h.completed[ran..].iter().sum::<u64>(), 4);
    // a shorter window is the same minutes' tail
    let last = ctx.store.history(&ctx.q, 2).await.unwrap();
    assert_eq!(last.completed, h.completed[58..]);
    assert_eq!(last.first_minute, h.first_minute + 58);
    for bad in [0, 1441] {
        assert!(matches!(
            ctx.store.history(&ctx.q, bad).await,
            Err(Error::InvalidOption { field: "minutes", .. })
        ));
    }
    // gone with the queue
    ctx.store.obliterate(&ctx.q, true).await.unwrap();
    let gone = ctx.store.history(&ctx.q, 60).await.unwrap();
    assert!(gone.completed.iter().chain(&gone.failed).all(|n| *n == 0));
}

crate::conformance!(history_counts_completed_and_dead_jobs_in_the_minute_they_ran);
