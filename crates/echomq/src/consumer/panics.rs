//! Handler panics through `tracing`, never stderr: a panic inside a handler's poll is logged at
//! error with its message and location, and becomes the attempt's failure (`panic: …`). Panics
//! anywhere else go to the hook that was installed before ours, unchanged.

use std::cell::Cell;
use std::future::Future;
use std::sync::Once;

thread_local! {
    /// True while this thread polls a handler.
    static IN_HANDLER: Cell<bool> = const { Cell::new(false) };
}

static HOOK: Once = Once::new();

/// Installs the process's panic hook once: handler panics are logged, the others passed on.
fn install() {
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if IN_HANDLER.with(Cell::get) {
                let location = info.location().map(|l| l.to_string()).unwrap_or_default();
                tracing::error!(panic = %message(info.payload()), %location, "handler panicked");
            } else {
                previous(info);
            }
        }));
    });
}

/// Runs `f`, its panics logged through `tracing` (see the module's docs).
pub(crate) async fn logged<F: Future>(f: F) -> F::Output {
    install();
    let mut f = std::pin::pin!(f);
    std::future::poll_fn(|cx| {
        let was = IN_HANDLER.with(|h| h.replace(true));
        // the flag is put back on unwind too, so a panic caught above leaves the thread clean
        let _reset = Reset(was);
        f.as_mut().poll(cx)
    })
    .await
}

/// Puts the thread's flag back as it was.
struct Reset(bool);

impl Drop for Reset {
    fn drop(&mut self) {
        IN_HANDLER.with(|h| h.set(self.0));
    }
}

/// A panic payload's message: its text, or a note that it carried none.
pub(crate) fn message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a non-string panic payload".to_string()
    }
}
