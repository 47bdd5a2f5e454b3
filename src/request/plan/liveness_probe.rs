//! Store liveness in the shell ([routing.md, "Store
//! liveness"](crate::spec::routing#store-liveness-beyond)): an RPC waits
//! under its [`Watch`]; once it has waited `after` without an answer, its
//! store is probed in the background (one cheap call, bounded by `after`,
//! one probe per store at a time), and the RPC ends as soon as its store is
//! marked unreachable, by the probe or by anything else.
//! An RPC answered before `after` costs one timer and nothing more, and
//! on the batched transport not even that: the watch shares the RPC's own
//! (`store::shared_timer`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use tokio::time::Instant;

use crate::pd::PdClient;
use crate::region::StoreId;
use crate::request::routing::state::{RoutingState, Watch};
use crate::store::shared_timer::{self, Slot};
use crate::telemetry::Counter;
use crate::{Error, Failure, Result};

/// Awaits `rpc`, sent at `sent_at`, under `watch`.
pub(crate) async fn watched<F, T, PdC>(
    mut rpc: Pin<&mut F>,
    watch: Watch,
    sent_at: Instant,
    routing: &Arc<RoutingState>,
    pd: &Arc<PdC>,
) -> Result<T>
where
    F: Future<Output = Result<T>>,
    PdC: PdClient,
{
    if let Some(result) = unanswered_until(rpc.as_mut(), sent_at + watch.after).await {
        return result;
    }
    spawn(routing, pd, watch);
    let answered = |result: Result<T>| {
        if result.is_ok() {
            routing.late_answer(watch.store_id);
        }
        result
    };
    let Some(marked) = routing.store_marked_notify() else {
        return answered(rpc.await);
    };
    loop {
        // Registered before the check, so a mark between the two still
        // wakes this RPC.
        let notified = marked.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if routing.marked_unreachable_since(watch.store_id, sent_at) {
            routing.count(Counter::RpcGaveUp);
            return Err(gave_up(watch.store_id, sent_at.elapsed()));
        }
        tokio::select! {
            biased;
            result = rpc.as_mut() => return answered(result),
            () = notified => {}
        }
    }
}

/// Awaits `rpc` until `at`: its output, or `None` when `at` came first.
/// The instant is offered to the batched stream's wait inside the RPC
/// (`shared_timer`), whose one timer then tells when it passes; an RPC
/// that does not take the offer in its first poll (a unary call), or hands
/// it back, is timed here.
async fn unanswered_until<F: Future>(mut rpc: Pin<&mut F>, at: Instant) -> Option<F::Output> {
    let mut first = true;
    let mut shared = false;
    let mut own = std::pin::pin!(None::<tokio::time::Sleep>);
    std::future::poll_fn(|cx| {
        if first {
            shared_timer::offer(at);
        }
        let polled = rpc.as_mut().poll(cx);
        let slot = shared_timer::collect();
        if first {
            first = false;
            shared = slot == Slot::Taken || slot == Slot::Passed;
        }
        if let Poll::Ready(output) = polled {
            return Poll::Ready(Some(output));
        }
        match slot {
            Slot::Passed => return Poll::Ready(None),
            Slot::HandedBack => shared = false,
            _ => {}
        }
        if shared {
            return Poll::Pending;
        }
        if own.is_none() {
            own.set(Some(tokio::time::sleep_until(at)));
        }
        match own.as_mut().as_pin_mut().map(|sleep| sleep.poll(cx)) {
            Some(Poll::Pending) => Poll::Pending,
            _ => Poll::Ready(None),
        }
    })
    .await
}

/// Probes `watch`'s store in the background unless a probe of it runs.
fn spawn<PdC: PdClient>(routing: &Arc<RoutingState>, pd: &Arc<PdC>, watch: Watch) {
    if !pd.probes_stores() || !routing.begin_liveness_probe(watch.store_id) {
        return;
    }
    let probe = Probe {
        routing: Arc::clone(routing),
        store_id: watch.store_id,
        sent_at: Instant::now(),
        answered: true,
    };
    let pd = Arc::clone(pd);
    tokio::spawn(async move {
        // The whole probe moves into the task (not only the fields it
        // names), so it ends when the task does.
        let mut probe = probe;
        if let Err(e) = pd.probe_store(probe.store_id, None, watch.after).await {
            tracing::debug!("store {} failed its liveness probe: {e}", probe.store_id);
            probe.answered = false;
        }
    });
}

/// One probe in flight; it ends when dropped, with its verdict. A probe
/// whose task was cancelled before the verdict counts as answered: nothing
/// is marked, and the store can be probed again.
struct Probe {
    routing: Arc<RoutingState>,
    store_id: StoreId,
    sent_at: Instant,
    answered: bool,
}

impl Drop for Probe {
    fn drop(&mut self) {
        self.routing
            .liveness_probe_ended(self.store_id, self.sent_at, self.answered);
    }
}

/// The error of an RPC that gave up on its store: a timeout of the
/// client's own (the request may have been received: a re-sendable one goes
/// to the next candidate, a write that must not be sent twice ends
/// undetermined).
fn gave_up(store_id: StoreId, waited: std::time::Duration) -> Error {
    Error::from(Failure::Timeout {
        what: format!(
            "the request to store {store_id}, given up when the store was marked unreachable"
        ),
        after: waited,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::sync::oneshot;

    use super::*;

    const AFTER: Duration = Duration::from_secs(1);
    const BOUND: Duration = Duration::from_secs(10);

    #[tokio::test(start_paused = true)]
    async fn an_rpc_that_keeps_no_timer_is_timed_by_the_watch() {
        let start = Instant::now();
        let rpc = std::pin::pin!(std::future::pending::<()>());
        assert!(unanswered_until(rpc, start + AFTER).await.is_none());
        assert_eq!(Instant::now() - start, AFTER);
    }

    #[tokio::test(start_paused = true)]
    async fn an_rpc_answered_in_time_is_returned() {
        let start = Instant::now();
        let (tx, rx) = oneshot::channel::<u8>();
        let mut rpc = std::pin::pin!(shared_timer::until(start + BOUND, rx));
        let answer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            tx.send(5).unwrap();
        });
        let got = unanswered_until(rpc.as_mut(), start + AFTER).await;
        assert!(matches!(got, Some(Some(Ok(5)))), "{got:?}");
        assert_eq!(Instant::now() - start, Duration::from_millis(300));
        answer.await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_stream_wait_tells_the_watch_when_its_instant_passes_and_keeps_its_bound() {
        let start = Instant::now();
        let (_tx, rx) = oneshot::channel::<u8>();
        let mut rpc = std::pin::pin!(shared_timer::until(start + BOUND, rx));
        assert!(unanswered_until(rpc.as_mut(), start + AFTER)
            .await
            .is_none());
        assert_eq!(Instant::now() - start, AFTER);
        // The RPC goes on, bounded as before.
        assert!(rpc.await.is_none());
        assert_eq!(Instant::now() - start, BOUND);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_that_hands_the_instant_back_leaves_the_watch_to_time_it() {
        let start = Instant::now();
        let (tx, rx) = oneshot::channel::<u8>();
        // The stream's wait ends early (its stream closed, say) and the RPC
        // goes on without a timer of its own.
        let rpc = std::pin::pin!(async move {
            let _ = shared_timer::until(start + BOUND, rx).await;
            std::future::pending::<()>().await
        });
        let close = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            drop(tx);
        });
        // Bounded, so a watch that is never woken fails the test instead of
        // hanging it.
        let watched = tokio::time::timeout(BOUND, unanswered_until(rpc, start + AFTER)).await;
        assert!(matches!(watched, Ok(None)), "{watched:?}");
        assert_eq!(Instant::now() - start, AFTER);
        close.await.unwrap();
    }
}
