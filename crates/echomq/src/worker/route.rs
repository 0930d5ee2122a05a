//! Routing by kind: a handler per kind (typed, decoded from the JSON payload) and one for raw
//! jobs; the kinds a worker claims are those of its routes.

use std::collections::HashMap;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use futures::future::BoxFuture;
use serde::Serialize;

use super::JobError;
use crate::consumer::{Handler, JobContext, Verdict};
use crate::job::Job;
use crate::store::Kinds;

/// A handler of one kind of typed job.
///
/// Any `Fn(J, JobContext) -> impl Future<Output = Result<O, JobError>>` is one; a struct can be
/// one with a plain `async fn` (no macro crate):
///
/// ```
/// use echomq::{Job, JobContext, JobError, JobHandler};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct Resize { width: u32 }
/// impl Job for Resize { const KIND: &'static str = "resize"; }
///
/// struct Resizer { max: u32 }
///
/// impl JobHandler<Resize> for Resizer {
///     type Output = u32;
///     async fn handle(&self, job: Resize, _ctx: JobContext) -> Result<u32, JobError> {
///         Ok(job.width.min(self.max))
///     }
/// }
/// ```
pub trait JobHandler<J: Job>: Send + Sync + 'static {
    /// What a completed job keeps as its output, as JSON.
    type Output: Serialize;

    /// Runs one job.
    fn handle(&self, job: J, ctx: JobContext) -> impl Future<Output = Result<Self::Output, JobError>> + Send;
}

impl<J, F, Fut, O> JobHandler<J> for F
where
    J: Job,
    F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, JobError>> + Send,
    O: Serialize,
{
    type Output = O;

    fn handle(&self, job: J, ctx: JobContext) -> impl Future<Output = Result<O, JobError>> + Send {
        self(job, ctx)
    }
}

/// What a raw handler's completed job keeps as its output: bytes as they are, or none.
pub trait RawOutput {
    /// The output bytes; `None` for no output.
    fn into_output(self) -> Option<Vec<u8>>;
}

impl RawOutput for () {
    fn into_output(self) -> Option<Vec<u8>> {
        None
    }
}

impl RawOutput for Vec<u8> {
    fn into_output(self) -> Option<Vec<u8>> {
        Some(self)
    }
}

impl RawOutput for String {
    fn into_output(self) -> Option<Vec<u8>> {
        Some(self.into_bytes())
    }
}

impl RawOutput for bytes::Bytes {
    fn into_output(self) -> Option<Vec<u8>> {
        Some(self.to_vec())
    }
}

/// One registered handler, its types erased.
pub(crate) trait Route: Send + Sync + 'static {
    fn run(&self, ctx: JobContext) -> BoxFuture<'static, Verdict>;
}

/// A typed handler: decodes the payload as `J`, runs, serializes the output.
pub(crate) struct Typed<J, H> {
    pub(crate) handler: Arc<H>,
    pub(crate) _job: PhantomData<fn() -> J>,
}

impl<J: Job, H: JobHandler<J>> Route for Typed<J, H> {
    fn run(&self, ctx: JobContext) -> BoxFuture<'static, Verdict> {
        let handler = self.handler.clone();
        Box::pin(async move {
            let job = match serde_json::from_slice::<J>(ctx.payload()) {
                Ok(job) => job,
                // retrying cannot fix a payload
                Err(e) => return Verdict::Discard(format!("payload does not decode as kind {}: {e}", J::KIND)),
            };
            match handler.handle(job, ctx).await {
                Ok(out) => output(&out),
                Err(e) => e.into_verdict(),
            }
        })
    }
}

/// A completed job's output as JSON; `null` (a handler returning `()`) keeps none.
fn output<O: Serialize>(out: &O) -> Verdict {
    match serde_json::to_vec(out) {
        Ok(bytes) if bytes == b"null" => Verdict::Done,
        Ok(bytes) => Verdict::DoneWith(bytes),
        Err(e) => Verdict::Error(format!("the output does not serialize: {e}")),
    }
}

/// A raw handler: the payload as bytes (`ctx.payload()`), the output as bytes.
pub(crate) struct Raw<F> {
    pub(crate) f: Arc<F>,
}

impl<F, Fut, O> Route for Raw<F>
where
    F: Fn(JobContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, JobError>> + Send + 'static,
    O: RawOutput,
{
    fn run(&self, ctx: JobContext) -> BoxFuture<'static, Verdict> {
        let fut = (self.f)(ctx);
        Box::pin(async move {
            match fut.await {
                Ok(out) => match out.into_output() {
                    Some(bytes) => Verdict::DoneWith(bytes),
                    None => Verdict::Done,
                },
                Err(e) => e.into_verdict(),
            }
        })
    }
}

/// The handler a worker's consumers run: picks the route by the job's kind. The worker claims
/// only the kinds it has a route for, so every job it is handed has one.
pub(crate) struct Router {
    pub(crate) routes: HashMap<&'static str, Arc<dyn Route>>,
    pub(crate) raw: Option<Arc<dyn Route>>,
}

impl Router {
    /// The kinds the routes run: the claims ask the store for these alone.
    pub(crate) fn kinds(&self) -> Kinds {
        let kinds = Kinds::only(self.routes.keys().copied());
        if self.raw.is_some() {
            kinds.with_raw()
        } else {
            kinds
        }
    }
}

#[async_trait]
impl Handler for Router {
    async fn handle(&self, ctx: JobContext) -> Verdict {
        let route = match ctx.kind() {
            Some(kind) => self.routes.get(kind),
            None => self.raw.as_ref(),
        };
        match route {
            Some(route) => route.run(ctx).await,
            // only a row whose kind was changed by hand after its claim reaches here: dead, named
            // (an operator redrives it), never given back to come round again
            None => Verdict::Discard(match ctx.kind() {
                Some(kind) => format!("no handler for kind {kind} on the worker that claimed it"),
                None => "no handler for raw jobs on the worker that claimed it".to_string(),
            }),
        }
    }
}
