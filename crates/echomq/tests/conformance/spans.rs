//! Tracing: every verb opens one `emq.store` span on every store, naming the verb, the queue, how
//! many jobs it carries and the store's kind.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use echomq::NewJob;
use tracing::field::{Field, Visit};
use tracing::instrument::WithSubscriber;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::Layer;

use crate::harness::Ctx;

/// One span's fields: (name, value as text).
type SpanFields = Vec<(String, String)>;

/// The `emq.store` spans opened: each one's fields.
#[derive(Clone, Default)]
struct Spans(Arc<Mutex<Vec<SpanFields>>>);

struct Fields(Vec<(String, String)>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.push((field.name().to_string(), format!("{value:?}")));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.push((field.name().to_string(), value.to_string()));
    }
}

impl<S: tracing::Subscriber> Layer<S> for Spans {
    fn on_new_span(&self, attrs: &tracing::span::Attributes<'_>, _: &tracing::span::Id, _: Context<'_, S>) {
        if attrs.metadata().name() == "emq.store" {
            let mut fields = Fields(Vec::new());
            attrs.record(&mut fields);
            self.0.lock().unwrap().push(fields.0);
        }
    }
}

impl Spans {
    fn field(&self, i: usize, name: &str) -> Option<String> {
        self.0.lock().unwrap()[i]
            .iter()
            .find(|(f, _)| f == name)
            .map(|(_, v)| v.clone())
    }
}

async fn enqueue_and_claim_open_one_emq_store_span_each(ctx: &Ctx) {
    let spans = Spans::default();
    let subscriber = tracing_subscriber::registry().with(
        spans
            .clone()
            .with_filter(tracing_subscriber::filter::LevelFilter::TRACE),
    );
    let (store, q) = (ctx.store.clone(), ctx.q.clone());
    async move {
        let jobs: Vec<NewJob> = (0..3).map(|i| NewJob::new(format!("{i}"))).collect();
        store.enqueue(&q, &jobs).await.unwrap();
        let claimed = store
            .claim(
                &q,
                echomq::store::ClaimRequest::new(2, Duration::from_secs(30)).max_attempts(3),
            )
            .await
            .unwrap();
        assert_eq!(claimed.len(), 2);
    }
    .with_subscriber(subscriber)
    .await;
    assert_eq!(spans.0.lock().unwrap().len(), 2, "one span a verb");
    let kind = spans.field(0, "store").unwrap();
    assert!(kind == "redis" || kind == "embedded", "the store's kind: {kind}");
    for (i, verb, batch) in [(0, "enqueue", "3"), (1, "claim", "2")] {
        assert_eq!(spans.field(i, "verb").as_deref(), Some(verb));
        assert_eq!(spans.field(i, "queue").as_deref(), Some(ctx.q.as_str()));
        assert_eq!(spans.field(i, "batch").as_deref(), Some(batch));
        assert_eq!(spans.field(i, "store"), Some(kind.clone()));
    }
}

crate::conformance!(enqueue_and_claim_open_one_emq_store_span_each);
