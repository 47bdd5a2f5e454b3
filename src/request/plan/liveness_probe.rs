//! Store liveness in the shell ([routing.md, "Store
//! liveness"](crate::spec::routing#store-liveness-beyond)): an RPC waits
//! under its [`Watch`]; once it has waited `after` without an answer, its
//! store is probed in the background (one cheap call, bounded by `after`,
//! one probe per store at a time), and the RPC ends as soon as its store is
//! marked unreachable, by the probe or by anything else.
//! An RPC answered before `after` costs one timer and nothing more.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use tokio::time::Instant;

use crate::pd::PdClient;
use crate::region::StoreId;
use crate::request::routing::state::{RoutingState, Watch};
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
    tokio::select! {
        biased;
        result = rpc.as_mut() => return result,
        () = tokio::time::sleep_until(sent_at + watch.after) => {}
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
