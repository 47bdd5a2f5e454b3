//! One deadline for a whole client call.
//!
//! A call such as a scan (page after page), a transaction's `get` (a read,
//! then perhaps lock resolution) or `commit` (prewrites, a timestamp, the
//! primary's commit) runs several plans and PD calls. Each plan has its own
//! [`request_deadline`](crate::Config::request_deadline); without a bound
//! over the call, a call of two plans could take two deadlines. The client
//! methods run their body in [`within`], and everything inside it, each
//! plan's rounds, its backoff sleeps, its RPC bounds and the waits for PD,
//! ends by the call's deadline: a plan's deadline is the earlier of its own
//! and the call's.
//!
//! The deadline lives in a task-local: work the call spawns (a commit's
//! secondaries, a heartbeat) is not part of it and keeps its own bounds.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use crate::{Error, Failure, Result};

tokio::task_local! {
    static CALL_DEADLINE: Instant;
}

/// Runs `call` with a deadline `length` from now; inside another call's
/// scope the earlier of the two holds.
pub(crate) async fn within<F: Future>(length: Duration, call: F) -> F::Output {
    let mut at = Instant::now() + length;
    if let Some(outer) = current() {
        at = at.min(outer);
    }
    CALL_DEADLINE.scope(at, call).await
}

/// The deadline of the call this runs in, if any.
pub(crate) fn current() -> Option<Instant> {
    CALL_DEADLINE.try_with(|at| *at).ok()
}

/// What is left of the call's deadline (zero once it passed), if any.
pub(crate) fn remaining() -> Option<Duration> {
    current().map(|at| at.saturating_duration_since(Instant::now()))
}

/// `work` cut off at the call's deadline: `None` when the deadline came
/// first (or had passed). Outside a call, `work` runs unbounded.
pub(crate) async fn bounded<F: Future>(work: F) -> Option<F::Output> {
    match current() {
        None => Some(work.await),
        Some(at) => tokio::time::timeout_at(at, work).await.ok(),
    }
}

/// `work`, a wait for `what`, failed with a timeout when the call's
/// deadline comes first.
pub(crate) async fn cut<T>(what: &str, work: impl Future<Output = Result<T>>) -> Result<T> {
    let left = remaining();
    match bounded(work).await {
        Some(result) => result,
        None => Err(Error::from(Failure::Timeout {
            what: format!("{what} (the rest of the call's deadline)"),
            after: left.unwrap_or_default(),
        })),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_nested_call_keeps_the_earlier_deadline_and_work_is_cut_there() {
        assert!(current().is_none());
        assert_eq!(bounded(async { 7 }).await, Some(7), "no call: unbounded");
        let start = Instant::now();
        within(Duration::from_secs(3), async {
            within(Duration::from_secs(10), async {
                assert_eq!(current(), Some(start + Duration::from_secs(3)));
            })
            .await;
            within(Duration::from_secs(1), async {
                assert_eq!(current(), Some(start + Duration::from_secs(1)));
            })
            .await;
            let slow = tokio::time::sleep(Duration::from_secs(5));
            assert!(bounded(slow).await.is_none(), "cut at the deadline");
            assert_eq!(Instant::now(), start + Duration::from_secs(3));
            assert_eq!(remaining(), Some(Duration::ZERO));
        })
        .await;
        assert!(current().is_none(), "the scope ended with the call");
    }
}
