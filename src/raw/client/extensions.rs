//! The raw client's methods beyond client-rust's that only read or swap
//! its shared state: routing stats and request tags.

use std::sync::Arc;

use super::RawClient;
use crate::pd::PdClient;
use crate::request::RoutingStats;

impl<PdC: PdClient> RawClient<PdC> {
    /// What routing has done so far for this client and its clones:
    /// fallback attempts and successes, busy probes, invalidations, connect
    /// timeouts.
    pub fn routing_stats(&self) -> RoutingStats {
        let mut stats = self.routing.stats();
        stats.slow_stores = self.rpc.store_feedback().map_or(0, |f| f.slow_stores());
        stats
    }

    /// **beyond** A clone whose requests carry `tags` in place of the
    /// config's ([`RequestTags`](crate::RequestTags): resource group,
    /// request source, transaction source, resource group tag); it shares
    /// connections, caches and routing state with this one.
    pub fn with_request_tags(&self, tags: crate::RequestTags) -> Self {
        let mut wire = tags.wire();
        wire.no_server_deadline = self.tags.no_server_deadline;
        RawClient {
            tags: Arc::new(wire),
            ..self.clone()
        }
    }
}
