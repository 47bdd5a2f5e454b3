//! The background probe of a store this client reaches only through a
//! proxy ([routing.md, "Forwarding"](crate::spec::routing#forwarding-beyond)):
//! every `forwarding_probe_interval` one cheap call goes to the store
//! directly; the first answer ends forwarding to it and clears its
//! unreachable mark, so requests go direct again. Bounded: each call by the
//! probe bound, the whole probe by [`PROBE_LIFETIME`], and it holds only
//! weak references between calls, so a client that is dropped ends it.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::time::Instant;

use crate::pd::PdClient;
use crate::region::StoreId;
use crate::request::routing::state::RoutingState;
use crate::telemetry::Counter;

/// How long a store is probed before forwarding to it ends anyway: the
/// next request that cannot reach it finds a proxy again.
pub(crate) const PROBE_LIFETIME: Duration = Duration::from_secs(600);

/// Starts the probe of `target` in the background.
pub(crate) fn spawn<PdC: PdClient>(routing: &Arc<RoutingState>, pd: &Arc<PdC>, target: StoreId) {
    let Some(began) = routing.forwarding_since(target) else {
        return;
    };
    let routing = Arc::downgrade(routing);
    let pd = Arc::downgrade(pd);
    tokio::spawn(probe(routing, pd, target, began));
}

/// Probes `target` for the forwarding to it that began at `began`.
async fn probe<PdC: PdClient>(
    routing: Weak<RoutingState>,
    pd: Weak<PdC>,
    target: StoreId,
    began: Instant,
) {
    loop {
        let Some(interval) = routing.upgrade().map(|r| r.forwarding_probe_interval()) else {
            return;
        };
        tokio::time::sleep(interval).await;
        let (Some(routing), Some(pd)) = (routing.upgrade(), pd.upgrade()) else {
            return;
        };
        // Forwarding ended meanwhile (a request reached the store, or the
        // client's proxy failed and no other was found), and a forwarding
        // that began again has a probe of its own.
        if routing.forwarding_since(target) != Some(began) {
            return;
        }
        if began.elapsed() >= PROBE_LIFETIME {
            tracing::info!(
                "store {target} still cannot be reached directly after {PROBE_LIFETIME:?}; \
                 forwarding to it ends, the next request finds a proxy again"
            );
            routing.end_forwarding(target);
            return;
        }
        routing.count(Counter::ForwardingProbe);
        let sent_at = Instant::now();
        match pd.probe_store(target, None, routing.probe_bound()).await {
            Ok(()) => {
                routing.store_answered(target, sent_at);
                routing.end_forwarding(target);
                return;
            }
            Err(e) => tracing::debug!("store {target} still cannot be reached directly: {e}"),
        }
    }
}
