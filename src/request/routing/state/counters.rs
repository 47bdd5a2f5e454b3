//! The routing counters of [routing.md,
//! "Observability"](crate::spec::routing#observability), and the snapshot a
//! user reads ([`RoutingStats`]).

use std::sync::atomic::{AtomicU64, Ordering};

use crate::telemetry::Counter;

/// A snapshot of the routing counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RoutingStats {
    /// Attempts sent (or mapped) to a candidate other than the cached leader.
    pub fallback_attempts: u64,
    /// Fallback candidates that accepted a request and became the cached
    /// leader.
    pub fallback_successes: u64,
    /// Followers-only probe rounds run after `ServerIsBusy(0)` answers.
    pub busy_probes: u64,
    /// Store cache entries dropped.
    pub store_invalidations: u64,
    /// Region cache entries dropped.
    pub region_invalidations: u64,
    /// Store mappings that ended with a connect timeout.
    pub connect_timeouts: u64,
    /// Stores marked unreachable (transport failures or timeout strikes).
    pub stores_marked_unreachable: u64,
    /// RPCs in flight right now (each holds one concurrency permit).
    pub rpcs_in_flight: u64,
    /// Writes that ended undetermined: they may have reached a store, so
    /// they were not re-sent ([routing.md, "Replay
    /// safety"](crate::spec::routing#replay-safety)).
    pub undetermined_writes: u64,
    /// Leader attempts routed through a proxy store (the route's proof
    /// included) because this client could not reach the leader's store ([routing.md,
    /// "Forwarding"](crate::spec::routing#forwarding-beyond)).
    pub forwarded_requests: u64,
    /// Proxy stores chosen (a store that could not be reached got a proxy,
    /// or a failed proxy was replaced).
    pub proxies_chosen: u64,
    /// Direct probes sent to stores reached only through a proxy.
    pub forwarding_probes: u64,
    /// Stores reached only through a proxy right now.
    pub forwarded_stores: u64,
    /// Probes of a store that left an RPC unanswered for
    /// [`Config::store_probe_after`](crate::Config::store_probe_after)
    /// ([routing.md, "Store
    /// liveness"](crate::spec::routing#store-liveness-beyond)).
    pub liveness_probes: u64,
    /// RPCs abandoned because their store was marked unreachable while
    /// they waited.
    pub rpcs_given_up: u64,
    /// Reads sent to a replica first, as replica or stale reads ([routing.md,
    /// "Replica and stale
    /// reads"](crate::spec::routing#replica-and-stale-reads-beyond)).
    pub replica_reads: u64,
    /// Of those, the ones the replica did not answer cleanly, which went to
    /// the leader.
    pub replica_fallbacks: u64,
    /// Stores whose own health feedback calls them slow right now (slow
    /// score 80 or more; [routing.md, "Slow-store
    /// feedback"](crate::spec::routing#slow-store-feedback-beyond)); their
    /// scores are in the client's `store_slow_scores`.
    pub slow_stores: u64,
}

#[derive(Debug, Default)]
pub(super) struct Counters {
    fallback_attempts: AtomicU64,
    fallback_successes: AtomicU64,
    busy_probes: AtomicU64,
    store_invalidations: AtomicU64,
    region_invalidations: AtomicU64,
    connect_timeouts: AtomicU64,
    stores_marked_unreachable: AtomicU64,
    rpcs_in_flight: AtomicU64,
    undetermined_writes: AtomicU64,
    forwarded_requests: AtomicU64,
    proxies_chosen: AtomicU64,
    forwarding_probes: AtomicU64,
    liveness_probes: AtomicU64,
    rpcs_given_up: AtomicU64,
    replica_reads: AtomicU64,
    replica_fallbacks: AtomicU64,
}

impl Counters {
    /// A snapshot of every counter.
    pub(super) fn snapshot(&self) -> RoutingStats {
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RoutingStats {
            fallback_attempts: get(&self.fallback_attempts),
            fallback_successes: get(&self.fallback_successes),
            busy_probes: get(&self.busy_probes),
            store_invalidations: get(&self.store_invalidations),
            region_invalidations: get(&self.region_invalidations),
            connect_timeouts: get(&self.connect_timeouts),
            stores_marked_unreachable: get(&self.stores_marked_unreachable),
            rpcs_in_flight: get(&self.rpcs_in_flight),
            undetermined_writes: get(&self.undetermined_writes),
            forwarded_requests: get(&self.forwarded_requests),
            proxies_chosen: get(&self.proxies_chosen),
            forwarding_probes: get(&self.forwarding_probes),
            forwarded_stores: 0,
            liveness_probes: get(&self.liveness_probes),
            rpcs_given_up: get(&self.rpcs_given_up),
            replica_reads: get(&self.replica_reads),
            replica_fallbacks: get(&self.replica_fallbacks),
            slow_stores: 0,
        }
    }

    /// Adds one to `counter`.
    pub(super) fn bump(&self, counter: Counter) {
        let atomic = match counter {
            Counter::FallbackAttempt => &self.fallback_attempts,
            Counter::FallbackSuccess => &self.fallback_successes,
            Counter::BusyProbe => &self.busy_probes,
            Counter::StoreInvalidation => &self.store_invalidations,
            Counter::RegionInvalidation => &self.region_invalidations,
            Counter::ConnectTimeout => &self.connect_timeouts,
            Counter::Undetermined => &self.undetermined_writes,
            Counter::Forwarded => &self.forwarded_requests,
            Counter::ProxyChosen => &self.proxies_chosen,
            Counter::ForwardingProbe => &self.forwarding_probes,
            Counter::LivenessProbe => &self.liveness_probes,
            Counter::RpcGaveUp => &self.rpcs_given_up,
            Counter::ReplicaRead => &self.replica_reads,
            Counter::ReplicaFallback => &self.replica_fallbacks,
        };
        atomic.fetch_add(1, Ordering::Relaxed);
        crate::telemetry::routing_event(counter);
    }

    /// A store was marked unreachable.
    pub(super) fn store_marked_unreachable(&self) {
        self.stores_marked_unreachable
            .fetch_add(1, Ordering::Relaxed);
        crate::telemetry::store_marked_unreachable();
    }

    /// An RPC started (`1`) or ended (`-1`).
    pub(super) fn rpc_in_flight(&self, started: bool) {
        crate::telemetry::rpc_in_flight(started);
        if started {
            self.rpcs_in_flight.fetch_add(1, Ordering::Relaxed);
        } else {
            self.rpcs_in_flight.fetch_sub(1, Ordering::Relaxed);
        }
    }
}
