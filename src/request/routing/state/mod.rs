//! Client-wide routing knowledge shared by every request of one client
//! ([routing.md, "Store health"](crate::spec::routing#store-health-beyond) and
//! the shared `ServerIsBusy(0)` suspicion), and the counters of
//! ["Observability"](crate::spec::routing#observability). All methods are
//! synchronous and hold a lock only for a map lookup. One concept a file:
//! `store_health`, `liveness` (the probe of a store that leaves an RPC
//! unanswered), `busy` (the suspicion and its probe), `forwarding`,
//! `counters`.

mod busy;
mod counters;
mod forwarding;
mod liveness;
mod store_health;

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::region::{RegionId, StoreId};
use crate::request::routing::policy::RequestPolicy;
use crate::telemetry::Counter;
use crate::Config;

use busy::BusySuspicions;
pub(crate) use busy::{BusyVerdict, ProbeOutcome, ProbeTicket, ProbeWaiter};
use counters::Counters;
pub use counters::RoutingStats;
use forwarding::Proxies;
pub(crate) use forwarding::ProxyChange;
use liveness::Liveness;
pub(crate) use liveness::Watch;
pub(crate) use store_health::StoreHealth;

/// The shortest pause between two direct probes of a store reached
/// through a proxy, whatever the configuration says.
const MIN_FORWARDING_PROBE_INTERVAL: Duration = Duration::from_millis(10);

/// Routing knowledge shared by all requests of one client: store health, the
/// `ServerIsBusy(0)` suspicion, and counters. Create one per client, wrap it
/// in an `Arc`, and give it to every plan with
/// [`PlanBuilder::routing`](crate::request::PlanBuilder::routing).
#[derive(Debug)]
pub struct RoutingState {
    store_health: Option<StoreHealth>,
    /// Store liveness (`None`: store health is off).
    liveness: Option<Liveness>,
    /// The client's defaults of every request's policy (concurrency, RPC
    /// timeout, deadline, busy-probe sharing), from its [`Config`].
    defaults: RequestPolicy,
    busy: Arc<BusySuspicions>,
    counters: Counters,
    /// The proxies of stores this client cannot reach (`None`: forwarding
    /// is off).
    proxies: Option<Proxies>,
    forwarding_probe_interval: Duration,
    /// The bound of one direct probe of a store reached through a proxy.
    probe_bound: Duration,
    /// The client's location ([`Config::local_labels`]).
    local_labels: Vec<crate::proto::metapb::StoreLabel>,
    /// Spreads replica reads over equally good replicas.
    replica_spread: std::sync::atomic::AtomicUsize,
    /// Replica reads pass over slow stores ([`Config::slow_store_feedback`]).
    slow_store_feedback: bool,
}

impl RoutingState {
    /// Routing state following the config's switches.
    pub fn new(config: &Config) -> Self {
        RoutingState {
            store_health: config
                .store_health
                .then(|| StoreHealth::new(config.store_cooldown, config.store_timeout_strikes)),
            liveness: config
                .store_health
                .then(|| Liveness::new(config.store_probe_after)),
            defaults: RequestPolicy {
                max_concurrency: Some(config.max_concurrency.max(1)),
                rpc_timeout: Some(config.timeout),
                deadline: Some(config.request_deadline),
                leaderless_wait: Some(config.leaderless_wait),
                shared_busy_probe: config.shared_busy_probe,
                forwarding: config.forwarding,
                ..RequestPolicy::default()
            },
            busy: Arc::new(BusySuspicions::new(config.busy_probe_window)),
            counters: Counters::default(),
            proxies: config.forwarding.then(Proxies::default),
            // A probe that fails at once must not spin.
            forwarding_probe_interval: config
                .forwarding_probe_interval
                .max(MIN_FORWARDING_PROBE_INTERVAL),
            probe_bound: config.connect_timeout.max(Duration::from_millis(1)),
            local_labels: config
                .local_labels
                .iter()
                .map(|(key, value)| crate::proto::metapb::StoreLabel {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            replica_spread: std::sync::atomic::AtomicUsize::new(0),
            slow_store_feedback: config.slow_store_feedback,
        }
    }

    /// The labels of the client's location ([`Config::local_labels`]).
    pub(crate) fn local_labels(&self) -> &[crate::proto::metapb::StoreLabel] {
        &self.local_labels
    }

    /// True when replica reads pass over stores that report themselves
    /// slow.
    pub(crate) fn avoids_slow_stores(&self) -> bool {
        self.slow_store_feedback
    }

    /// The next number that spreads replica reads over their replicas.
    pub(crate) fn next_replica_spread(&self) -> usize {
        self.replica_spread
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RoutingStats {
        let mut stats = self.counters.snapshot();
        stats.forwarded_stores = self.proxies.as_ref().map_or(0, |p| p.len() as u64);
        stats
    }

    /// The client's defaults of a request's policy.
    pub(crate) fn policy_defaults(&self) -> &RequestPolicy {
        &self.defaults
    }

    /// The configured per-request concurrency limit.
    pub fn max_concurrency(&self) -> usize {
        self.defaults.concurrency()
    }

    /// The configured bound on one RPC
    /// ([`Config::timeout`](crate::Config::timeout)).
    pub fn rpc_timeout(&self) -> Duration {
        self.defaults.rpc_timeout.unwrap_or_default()
    }

    /// The configured overall deadline of one request.
    pub fn request_deadline(&self) -> Duration {
        self.defaults.deadline_or_default()
    }

    pub(crate) fn count(&self, counter: Counter) {
        self.counters.bump(counter);
    }

    pub(crate) fn rpc_started(&self) {
        self.counters.rpc_in_flight(true);
    }

    pub(crate) fn rpc_ended(&self) {
        self.counters.rpc_in_flight(false);
    }

    /// True when store health is on and the store is cooling down.
    pub fn is_store_unreachable(&self, store_id: StoreId) -> bool {
        self.store_health
            .as_ref()
            .is_some_and(|h| h.is_unreachable(store_id))
    }

    /// A transport or mapping failure: the store cools down.
    pub(crate) fn store_failed(&self, store_id: StoreId) {
        if let Some(h) = &self.store_health {
            let newly = h.mark_unreachable(store_id);
            self.store_marked(newly);
            if newly {
                tracing::debug!("store {store_id} marked unreachable");
            }
        }
    }

    /// A store was marked unreachable (`newly`: it was not already, and is
    /// counted). The RPCs waiting on a store are woken to check theirs
    /// either way: a store marked again while it cooled down has a newer
    /// mark, which RPCs sent before it may give up on.
    fn store_marked(&self, newly: bool) {
        if newly {
            self.counters.store_marked_unreachable();
        }
        if let Some(l) = &self.liveness {
            l.store_marked();
        }
    }

    /// How an RPC to `store_id` is watched for liveness (`None`: it is
    /// not).
    pub(crate) fn liveness_watch(&self, store_id: StoreId, forwarded: bool) -> Option<Watch> {
        self.liveness.as_ref()?.watch(store_id, forwarded)
    }

    /// Starts the liveness probe of `store_id` unless one runs: true when
    /// the caller must run it and then call
    /// [`liveness_probe_ended`](Self::liveness_probe_ended) with its result.
    pub(crate) fn begin_liveness_probe(&self, store_id: StoreId) -> bool {
        let begun = self
            .liveness
            .as_ref()
            .is_some_and(|l| l.begin_probe(store_id));
        if begun {
            self.counters.bump(Counter::LivenessProbe);
        }
        begun
    }

    /// The liveness probe of `store_id`, sent at `sent_at`, ended, the
    /// store answering it or not. An answer changes nothing (a trivial
    /// call answered says little of a store whose real requests stall, so
    /// its timeout strikes stay). No answer marks the store unreachable,
    /// unless an RPC the store had left waiting was answered after the
    /// probe was sent: the store is slow, not gone.
    pub(crate) fn liveness_probe_ended(&self, store_id: StoreId, sent_at: Instant, answered: bool) {
        let Some(l) = &self.liveness else {
            return;
        };
        let slow_not_gone = l.probe_ended(store_id, sent_at);
        if answered || slow_not_gone {
            return;
        }
        if let Some(h) = &self.store_health {
            let newly = h.mark_unreachable(store_id);
            self.store_marked(newly);
            if newly {
                tracing::info!(
                    "store {store_id} left an RPC unanswered and failed its liveness probe; \
                     marked unreachable"
                );
            }
        }
    }

    /// An RPC to `store_id` that had waited long enough to be watched was
    /// answered: the store lives, whatever its probe says.
    pub(crate) fn late_answer(&self, store_id: StoreId) {
        if let Some(l) = &self.liveness {
            l.late_answer(store_id);
        }
    }

    /// The wake-up of RPCs waiting on a store, sent whenever a store is
    /// marked unreachable (`None`: store health is off).
    pub(crate) fn store_marked_notify(&self) -> Option<&tokio::sync::Notify> {
        self.liveness.as_ref().map(Liveness::marked)
    }

    /// True when `store_id` was marked unreachable after `sent_at` and
    /// still is: an RPC sent before then may give up.
    pub(crate) fn marked_unreachable_since(&self, store_id: StoreId, sent_at: Instant) -> bool {
        self.store_health
            .as_ref()
            .is_some_and(|h| h.marked_since(store_id, sent_at))
    }

    /// A timeout from the store of an RPC sent at `sent_at`; enough in a row
    /// mark it unreachable.
    pub(crate) fn store_timed_out(&self, store_id: StoreId, sent_at: Instant) {
        if let Some(h) = &self.store_health {
            let newly = h.record_timeout(store_id, sent_at);
            if newly {
                tracing::debug!("store {store_id} marked unreachable after consecutive timeouts");
            }
            if newly || h.is_unreachable(store_id) {
                self.store_marked(newly);
            }
        }
    }

    /// The store answered an RPC sent at `sent_at`.
    pub(crate) fn store_answered(&self, store_id: StoreId, sent_at: Instant) {
        if let Some(h) = &self.store_health {
            h.mark_reachable(store_id, sent_at);
        }
    }

    /// The store that proxies requests to `target`, while this client
    /// reaches `target` only that way.
    pub fn proxy_for(&self, target: StoreId) -> Option<StoreId> {
        self.proxies.as_ref()?.proxy_for(target)
    }

    /// A request reached `target` through `proxy`.
    pub(crate) fn proxy_worked(&self, target: StoreId, proxy: StoreId) -> ProxyChange {
        let Some(proxies) = &self.proxies else {
            return ProxyChange::Same;
        };
        let change = proxies.worked(target, proxy);
        if change != ProxyChange::Same {
            self.counters.bump(Counter::ProxyChosen);
            tracing::info!("store {target} is reached through store {proxy} from now on");
        }
        change
    }

    /// `proxy` did not get a request through to `target`.
    pub(crate) fn proxy_failed(&self, target: StoreId, proxy: StoreId) {
        if let Some(proxies) = &self.proxies {
            if proxies.failed(target, proxy) {
                tracing::debug!("store {proxy} no longer proxies to store {target}");
            }
        }
    }

    /// Ends forwarding to `target`: it answered directly.
    pub(crate) fn end_forwarding(&self, target: StoreId) -> bool {
        let ended = self.proxies.as_ref().is_some_and(|p| p.end(target));
        if ended {
            tracing::info!("store {target} answers directly again; forwarding to it ended");
        }
        ended
    }

    /// When forwarding to `target` began, while it lasts.
    pub(crate) fn forwarding_since(&self, target: StoreId) -> Option<Instant> {
        self.proxies.as_ref()?.since(target)
    }

    /// The bound of one direct probe of a store (the connect timeout).
    pub(crate) fn probe_bound(&self) -> Duration {
        self.probe_bound
    }

    /// How often a store reached only through a proxy is probed directly.
    pub(crate) fn forwarding_probe_interval(&self) -> Duration {
        self.forwarding_probe_interval
    }

    /// Records a `ServerIsBusy(0)` from `leader_peer_id`, the cached leader of
    /// `region_id`, shared across requests within the probe window. With
    /// `may_probe` false (the request already probed) the verdict is never
    /// `BusyVerdict::Probe`.
    pub(crate) fn busy_zero_wait(
        &self,
        region_id: RegionId,
        leader_peer_id: u64,
        may_probe: bool,
    ) -> BusyVerdict {
        self.busy.report(region_id, leader_peer_id, may_probe)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> Arc<RoutingState> {
        Arc::new(RoutingState::new(&Config::default()))
    }

    #[tokio::test(start_paused = true)]
    async fn store_health_cools_down_with_jitter_and_recovers() {
        let h = StoreHealth::new(Duration::from_secs(10), 2);
        assert!(!h.is_unreachable(1));
        assert!(h.mark_unreachable(1));
        assert!(!h.mark_unreachable(1), "already unreachable");
        assert!(h.is_unreachable(1));
        tokio::time::advance(Duration::from_millis(7_400)).await;
        assert!(h.is_unreachable(1), "the cool-down is at least 7.5 s");
        tokio::time::advance(Duration::from_millis(5_200)).await;
        assert!(!h.is_unreachable(1), "and at most 12.5 s");
        h.mark_unreachable(2);
        h.mark_reachable(2, Instant::now());
        assert!(!h.is_unreachable(2));
    }

    #[tokio::test(start_paused = true)]
    async fn marking_a_store_again_wakes_the_rpcs_waiting_on_it() {
        let state = state();
        state.store_failed(1);
        tokio::time::advance(Duration::from_millis(5)).await;
        let sent_at = Instant::now();
        tokio::time::advance(Duration::from_millis(5)).await;
        assert!(!state.marked_unreachable_since(1, sent_at), "marked before");
        let Some(marked) = state.store_marked_notify() else {
            panic!("store health is on by default");
        };
        let woken = marked.notified();
        tokio::pin!(woken);
        woken.as_mut().enable();
        // Still cooling down: not counted again, but a newer mark.
        state.store_failed(1);
        assert_eq!(state.stats().stores_marked_unreachable, 1);
        assert!(state.marked_unreachable_since(1, sent_at));
        tokio::time::timeout(Duration::from_millis(1), woken)
            .await
            .expect("the waiting RPCs were woken");
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_strikes_mark_unreachable_only_when_consecutive() {
        let h = StoreHealth::new(Duration::from_secs(10), 2);
        assert!(!h.record_timeout(1, Instant::now()));
        h.mark_reachable(1, Instant::now());
        assert!(
            !h.record_timeout(1, Instant::now()),
            "a success in between resets"
        );
        assert!(h.record_timeout(1, Instant::now()));
        assert!(h.is_unreachable(1));
    }

    #[tokio::test(start_paused = true)]
    async fn busy_suspicions_expire_with_their_window() {
        // The map holds the Regions busy within one window, not
        // every Region that was ever busy.
        let s = state();
        for region in 0..10_000 {
            s.busy_zero_wait(region, 11, true);
        }
        assert!(s.busy.len() <= 10_000);
        tokio::time::advance(Config::default().busy_probe_window * 2).await;
        for region in 10_000..10_100 {
            s.busy_zero_wait(region, 11, true);
        }
        assert!(s.busy.len() <= 200, "{} suspicions kept", s.busy.len());
        // A suspicion within its window still counts toward a probe.
        assert!(matches!(
            s.busy_zero_wait(10_050, 11, true),
            BusyVerdict::Probe(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn a_late_answer_cannot_erase_a_newer_unreachable_mark() {
        // An RPC sent before the store was marked unreachable
        // answers afterwards; that proves nothing about the store now.
        let h = StoreHealth::new(Duration::from_secs(10), 2);
        let sent = Instant::now();
        tokio::time::advance(Duration::from_millis(5)).await;
        h.mark_unreachable(1);
        h.mark_reachable(1, sent);
        assert!(h.is_unreachable(1), "the older answer is ignored");
        tokio::time::advance(Duration::from_millis(5)).await;
        h.mark_reachable(1, Instant::now());
        assert!(
            !h.is_unreachable(1),
            "an answer sent after the mark clears it"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_huge_cooldown_saturates_instead_of_panicking() {
        for cooldown in [Duration::MAX, Duration::from_secs(u64::MAX / 2)] {
            let h = StoreHealth::new(cooldown, 2);
            assert!(h.mark_unreachable(1));
            assert!(h.is_unreachable(1));
            tokio::time::advance(Duration::from_secs(3600 * 24 * 365)).await;
            assert!(h.is_unreachable(1), "still cooling down a year later");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_timeouts_are_one_strike() {
        // RPCs in flight together that time out together are one
        // slow moment, not consecutive strikes.
        let h = StoreHealth::new(Duration::from_secs(10), 2);
        let sent = Instant::now();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(!h.record_timeout(1, sent));
        for _ in 0..10 {
            assert!(!h.record_timeout(1, sent), "sent before the strike");
        }
        assert!(!h.is_unreachable(1));
        // An RPC sent after the strike that times out too is the next one.
        let later = Instant::now();
        tokio::time::advance(Duration::from_secs(2)).await;
        assert!(h.record_timeout(1, later));
        assert!(h.is_unreachable(1));
    }

    #[tokio::test(start_paused = true)]
    async fn shared_busy_suspicion_allows_one_probe_in_flight() {
        let s = state();
        assert!(matches!(
            s.busy_zero_wait(1, 11, true),
            BusyVerdict::Ordinary
        ));
        let ticket = match s.busy_zero_wait(1, 11, true) {
            BusyVerdict::Probe(t) => t,
            other => panic!("{other:?}"),
        };
        let waiter = match s.busy_zero_wait(1, 11, true) {
            BusyVerdict::WaitForProbe(w) => w,
            other => panic!("{other:?}"),
        };
        ticket.finish(ProbeOutcome::FoundLeader);
        assert_eq!(waiter.outcome().await, ProbeOutcome::FoundLeader);
        // The suspicion of the old leader is gone.
        assert!(matches!(
            s.busy_zero_wait(1, 11, true),
            BusyVerdict::Ordinary
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn inconclusive_probe_restarts_the_count() {
        let s = state();
        s.busy_zero_wait(1, 11, true);
        let ticket = match s.busy_zero_wait(1, 11, true) {
            BusyVerdict::Probe(t) => t,
            other => panic!("{other:?}"),
        };
        let waiter = match s.busy_zero_wait(1, 11, true) {
            BusyVerdict::WaitForProbe(w) => w,
            other => panic!("{other:?}"),
        };
        ticket.finish(ProbeOutcome::Inconclusive);
        assert_eq!(waiter.outcome().await, ProbeOutcome::Inconclusive);
        assert!(matches!(
            s.busy_zero_wait(1, 11, true),
            BusyVerdict::Ordinary
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn abandoned_probe_releases_waiters_and_keeps_the_count() {
        let s = state();
        s.busy_zero_wait(1, 11, true);
        let ticket = match s.busy_zero_wait(1, 11, true) {
            BusyVerdict::Probe(t) => t,
            other => panic!("{other:?}"),
        };
        let waiter = match s.busy_zero_wait(1, 11, true) {
            BusyVerdict::WaitForProbe(w) => w,
            other => panic!("{other:?}"),
        };
        // The probing request was cancelled.
        drop(ticket);
        assert_eq!(waiter.outcome().await, ProbeOutcome::Inconclusive);
        assert!(
            matches!(s.busy_zero_wait(1, 11, true), BusyVerdict::Probe(_)),
            "the suspicion stands: the next busy(0) probes at once"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leader_change_never_starts_a_second_probe_of_the_region() {
        let s = state();
        s.busy_zero_wait(1, 11, true);
        let ticket = match s.busy_zero_wait(1, 11, true) {
            BusyVerdict::Probe(t) => t,
            other => panic!("{other:?}"),
        };
        // Other requests have already cached peer 12 as the leader.
        for _ in 0..3 {
            assert!(
                matches!(s.busy_zero_wait(1, 12, true), BusyVerdict::WaitForProbe(_)),
                "one probe per Region in flight"
            );
        }
        drop(ticket);
        // The probe is over: peer 12's answers are counted afresh.
        assert!(matches!(
            s.busy_zero_wait(1, 12, true),
            BusyVerdict::Ordinary
        ));
        assert!(matches!(
            s.busy_zero_wait(1, 12, true),
            BusyVerdict::Probe(_)
        ));
    }

    #[tokio::test(start_paused = true)]
    async fn busy_window_and_leader_change_restart_the_count() {
        let s = state();
        s.busy_zero_wait(1, 11, true);
        tokio::time::advance(Config::default().busy_probe_window + Duration::from_millis(1)).await;
        assert!(
            matches!(s.busy_zero_wait(1, 11, true), BusyVerdict::Ordinary),
            "the window expired"
        );
        assert!(
            matches!(s.busy_zero_wait(1, 12, true), BusyVerdict::Ordinary),
            "another leader"
        );
        assert!(matches!(
            s.busy_zero_wait(1, 12, false),
            BusyVerdict::Ordinary
        ));
    }
}
