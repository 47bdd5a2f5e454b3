//! The Tokio runtime a blocking client owns: started with the client,
//! shared by its clones and everything it hands out, and shut down when the
//! last of them is dropped, without ever waiting unboundedly and without
//! Tokio's panic for a runtime dropped inside another.

use std::future::Future;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::{Error, Failure, Result};

/// The most that dropping the last handle of a blocking client waits, on a
/// thread outside any runtime: first for the background work it should
/// finish (a transaction client's secondary commits), then for the
/// runtime's threads to stop. Tasks stop at their next `.await` at once;
/// only blocking work inside the runtime (a DNS lookup of a store's
/// address) could take longer, and the drop does not wait for it past
/// this.
pub(crate) const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Fails with [`Failure::NestedRuntime`] naming `call` when this thread
/// is inside a Tokio runtime: a worker thread, a `block_on`, a
/// `spawn_blocking` thread or an entered handle. Tokio's `block_on` would
/// panic in most of these places and stall the runtime's thread in the
/// others.
pub(crate) fn outside_runtime(call: &str) -> Result<()> {
    match tokio::runtime::Handle::try_current() {
        Ok(_) => Err(Error::from(Failure::NestedRuntime {
            call: call.to_owned(),
        })),
        Err(_) => Ok(()),
    }
}

/// Whether the background work a drop should let finish is done.
pub(crate) type Settled = Box<dyn Fn() -> bool + Send + Sync>;

/// A multi-threaded runtime that shuts down when dropped, in bounded time.
pub(crate) struct OwnedRuntime {
    /// Always `Some` until the drop takes it.
    runtime: Option<tokio::runtime::Runtime>,
    /// The most the drop waits, off any runtime.
    grace: Duration,
    /// What the drop waits for before shutting down (within `grace`).
    settled: OnceLock<Settled>,
}

impl OwnedRuntime {
    /// Starts a runtime for the blocking client call `call` (a constructor),
    /// or fails when this thread is inside a runtime already.
    pub(crate) fn start(call: &str) -> Result<Arc<OwnedRuntime>> {
        Self::start_with_grace(call, SHUTDOWN_GRACE)
    }

    /// [`start`](Self::start) with a shutdown grace of its own.
    pub(crate) fn start_with_grace(call: &str, grace: Duration) -> Result<Arc<OwnedRuntime>> {
        outside_runtime(call)?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .thread_name("tikv-plan-blocking")
            .build()?;
        Ok(Arc::new(OwnedRuntime {
            runtime: Some(runtime),
            grace,
            settled: OnceLock::new(),
        }))
    }

    /// Makes the drop, off any runtime, wait (within the grace) until
    /// `settled` holds before it shuts the runtime down. Set once.
    pub(crate) fn settle_before_shutdown(&self, settled: Settled) {
        let _ = self.settled.set(settled);
    }

    /// Runs `future` to its end on this runtime, blocking this thread; or
    /// fails with [`Failure::NestedRuntime`] naming `call`, having run
    /// nothing, when this thread is inside a runtime.
    pub(crate) fn block_on<T>(
        &self,
        call: &str,
        future: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        outside_runtime(call)?;
        match &self.runtime {
            Some(runtime) => runtime.block_on(future),
            None => Err(Error::InternalError {
                message: format!("{call}: the blocking client's runtime is already shut down"),
            }),
        }
    }

    /// The runtime's handle, for work that must find a runtime (spawning)
    /// outside `block_on`, such as a transaction's drop.
    pub(crate) fn handle(&self) -> Option<&tokio::runtime::Handle> {
        self.runtime.as_ref().map(tokio::runtime::Runtime::handle)
    }
}

impl Drop for OwnedRuntime {
    fn drop(&mut self) {
        let Some(runtime) = self.runtime.take() else {
            return;
        };
        if tokio::runtime::Handle::try_current().is_ok() {
            // Inside a runtime Tokio may not block (dropping the runtime
            // there panics): stop without waiting; the threads end on
            // their own.
            runtime.shutdown_background();
            return;
        }
        let deadline = Instant::now() + self.grace;
        if let Some(settled) = self.settled.get() {
            runtime.block_on(async {
                while !settled() && Instant::now() < deadline {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            });
        }
        runtime.shutdown_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

impl std::fmt::Debug for OwnedRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedRuntime")
            .field("running", &self.runtime.is_some())
            .field("grace", &self.grace)
            .field("settles", &self.settled.get().is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The call a refusal names; any other result fails the test.
    fn refused_call<T: std::fmt::Debug>(result: Result<T>) -> String {
        let error = result.expect_err("refused");
        let Error::GrpcAPI(status) = &error else {
            panic!("reported as GrpcAPI, as every failure to run: {error:?}");
        };
        assert_eq!(status.code(), tonic::Code::FailedPrecondition);
        match error.failure() {
            Some(Failure::NestedRuntime { call }) => call.clone(),
            other => panic!("expected Failure::NestedRuntime, got {other:?}"),
        }
    }

    #[test]
    fn a_plain_thread_is_outside_any_runtime() {
        assert!(outside_runtime("test").is_ok());
        let runtime = OwnedRuntime::start("test").unwrap();
        assert_eq!(runtime.block_on("test", async { Ok(7) }).unwrap(), 7);
    }

    #[test]
    fn inside_a_runtime_every_call_is_refused_with_its_name() {
        let owned = OwnedRuntime::start("test").unwrap();
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        outer.block_on(async {
            let refused = owned.block_on("SyncRawClient::get", async { Ok(1) });
            assert_eq!(refused_call(refused), "SyncRawClient::get");
            let started = OwnedRuntime::start("SyncRawClient::new");
            assert_eq!(refused_call(started), "SyncRawClient::new");
        });
        // An entered handle counts too (a `spawn_blocking` thread has one).
        let _entered = outer.enter();
        assert_eq!(refused_call(outside_runtime("x")), "x");
    }

    #[test]
    fn the_error_says_what_to_do() {
        let text = Error::from(Failure::NestedRuntime {
            call: "SyncTransactionClient::begin_optimistic".into(),
        })
        .to_string();
        assert!(
            text.contains(
                "SyncTransactionClient::begin_optimistic was called inside a Tokio runtime"
            ),
            "{text}"
        );
        assert!(text.contains("use the async client there"), "{text}");
        assert!(text.contains("std::thread::spawn"), "{text}");
    }

    #[test]
    fn dropping_inside_another_runtime_does_not_panic() {
        let owned = OwnedRuntime::start("test").unwrap();
        let outer = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        outer.block_on(async move { drop(owned) });
    }

    /// Blocking work that never ends on its own (it waits for a message
    /// sent only after the drop) does not hold the drop past the grace,
    /// on a plain thread and inside another runtime.
    #[test]
    fn the_drop_does_not_wait_for_stuck_blocking_work() {
        for inside in [false, true] {
            let owned = OwnedRuntime::start_with_grace("test", Duration::from_millis(50)).unwrap();
            let (release, stuck) = std::sync::mpsc::channel::<()>();
            let (started, has_started) = std::sync::mpsc::channel::<()>();
            let handle = owned.handle().unwrap().clone();
            handle.spawn_blocking(move || {
                started.send(()).unwrap();
                let _ = stuck.recv();
            });
            has_started.recv().unwrap();
            if inside {
                let outer = tokio::runtime::Builder::new_current_thread()
                    .build()
                    .unwrap();
                outer.block_on(async move { drop(owned) });
            } else {
                drop(owned);
            }
            // Reached only because the drop returned while the work was
            // still stuck; now let it end.
            release.send(()).unwrap();
        }
    }
}
