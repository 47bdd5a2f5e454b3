//! Client-wide routing knowledge shared by every request of one client
//! (routing.md, "Store health" and the shared `ServerIsBusy(0)` suspicion),
//! and the counters of "Observability". All methods are synchronous and
//! hold a lock only for a map lookup.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::region::{RegionId, StoreId};
use crate::Config;

use super::round::BUSY_ANSWERS_BEFORE_PROBE;

/// A snapshot of the routing counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
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
}

#[derive(Debug, Default)]
struct Counters {
    fallback_attempts: AtomicU64,
    fallback_successes: AtomicU64,
    busy_probes: AtomicU64,
    store_invalidations: AtomicU64,
    region_invalidations: AtomicU64,
    connect_timeouts: AtomicU64,
    stores_marked_unreachable: AtomicU64,
    rpcs_in_flight: AtomicU64,
}

/// Which counter to bump.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Counter {
    FallbackAttempt,
    FallbackSuccess,
    BusyProbe,
    StoreInvalidation,
    RegionInvalidation,
    ConnectTimeout,
}

#[derive(Debug, Clone, Copy, Default)]
struct StoreHealthEntry {
    unreachable_until: Option<Instant>,
    timeout_strikes: u32,
    /// When the last strike was recorded: a timeout of an RPC sent before
    /// it is the same slow moment, not a further strike.
    last_strike: Option<Instant>,
}

/// Client-wide store health: which stores are cooling down after a failure.
#[derive(Debug)]
pub struct StoreHealth {
    cooldown: Duration,
    timeout_strikes: u32,
    // Read-locked on every request (the fast path asks whether the leader's
    // store cools down and reports that it answered); written only when a
    // store's health changes.
    stores: RwLock<HashMap<StoreId, StoreHealthEntry>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding these locks cannot leave the maps inconsistent
    // (each update is one insert or field write), so poisoning is ignored.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn read<T>(l: &RwLock<T>) -> RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn write<T>(l: &RwLock<T>) -> RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl StoreHealth {
    /// Store health with a cool-down (jittered by a quarter either way) and
    /// the number of consecutive timeouts that mark a store unreachable.
    pub fn new(cooldown: Duration, timeout_strikes: u32) -> Self {
        StoreHealth {
            cooldown,
            timeout_strikes: timeout_strikes.max(1),
            stores: RwLock::new(HashMap::new()),
        }
    }

    fn jittered_cooldown(&self) -> Duration {
        self.cooldown.mul_f64(0.75 + fastrand::f64() * 0.5)
    }

    /// True while the store cools down after a failure.
    pub fn is_unreachable(&self, store_id: StoreId) -> bool {
        let now = Instant::now();
        read(&self.stores)
            .get(&store_id)
            .and_then(|e| e.unreachable_until)
            .is_some_and(|until| now < until)
    }

    /// Marks the store unreachable for the cool-down. Returns true when it
    /// was not already.
    pub fn mark_unreachable(&self, store_id: StoreId) -> bool {
        let now = Instant::now();
        let until = now + self.jittered_cooldown();
        let mut stores = write(&self.stores);
        let entry = stores.entry(store_id).or_default();
        let was_unreachable = entry.unreachable_until.is_some_and(|u| now < u);
        entry.unreachable_until = Some(until);
        entry.timeout_strikes = 0;
        entry.last_strike = None;
        !was_unreachable
    }

    /// The store answered: it is reachable and its timeout strikes reset.
    pub fn mark_reachable(&self, store_id: StoreId) {
        // A healthy store has no entry: the usual answer only reads.
        if !read(&self.stores).contains_key(&store_id) {
            return;
        }
        write(&self.stores).remove(&store_id);
    }

    /// The store timed out an RPC sent at `sent_at`. Consecutive timeouts
    /// reaching the strike count mark it unreachable (without touching any
    /// cache); returns true then. Consecutive means one after the other: a
    /// timeout of an RPC sent before the previous strike was recorded ran
    /// concurrently with it and adds no strike, so a burst of requests that
    /// time out together counts once.
    pub fn record_timeout(&self, store_id: StoreId, sent_at: Instant) -> bool {
        let strikes = {
            let mut stores = write(&self.stores);
            let entry = stores.entry(store_id).or_default();
            if entry.last_strike.is_some_and(|last| sent_at < last) {
                return false;
            }
            entry.timeout_strikes += 1;
            entry.last_strike = Some(Instant::now());
            entry.timeout_strikes
        };
        if strikes >= self.timeout_strikes {
            self.mark_unreachable(store_id)
        } else {
            false
        }
    }
}

/// The outcome of a busy probe, as its waiters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeOutcome {
    /// A follower accepted and is now the cached leader.
    FoundLeader,
    /// No follower accepted; the cached leader stays.
    Inconclusive,
}

#[derive(Debug)]
struct BusySuspicion {
    leader_peer_id: u64,
    zero_wait_answers: u32,
    since: Instant,
    probe: Option<watch::Receiver<Option<ProbeOutcome>>>,
}

/// What a request does after a `ServerIsBusy(0)` from the cached leader.
#[derive(Debug)]
pub enum BusyVerdict {
    /// The ordinary busy path: back off and retry the leader.
    Ordinary,
    /// Run the followers-only probe now; the ticket reports its outcome.
    Probe(ProbeTicket),
    /// Another request's probe of this Region is in flight: wait for it.
    WaitForProbe(ProbeWaiter),
}

/// The right to run the one probe of a Region. Dropping it without
/// [`finish`](ProbeTicket::finish) (the probing request was cancelled)
/// reports an inconclusive probe to the waiters, so none is left waiting, and
/// frees the Region for the next probe; the shared count stays, since an
/// abandoned probe proves nothing.
#[derive(Debug)]
pub struct ProbeTicket {
    state: Arc<RoutingState>,
    region_id: RegionId,
    sender: watch::Sender<Option<ProbeOutcome>>,
    outcome: Option<ProbeOutcome>,
}

impl ProbeTicket {
    /// Reports the probe's outcome to every waiter.
    pub fn finish(mut self, outcome: ProbeOutcome) {
        self.outcome = Some(outcome);
    }
}

impl Drop for ProbeTicket {
    fn drop(&mut self) {
        {
            let mut busy = lock(&self.state.busy);
            match self.outcome {
                // The leader changed: the suspicion of the old one is over.
                Some(ProbeOutcome::FoundLeader) => {
                    busy.remove(&self.region_id);
                }
                // Genuine overload is likely: start counting afresh.
                Some(ProbeOutcome::Inconclusive) => {
                    if let Some(s) = busy.get_mut(&self.region_id) {
                        s.zero_wait_answers = 0;
                        s.probe = None;
                    }
                }
                // Abandoned: no cache changes on account of it; the next
                // busy(0) answer may start a probe at once.
                None => {
                    if let Some(s) = busy.get_mut(&self.region_id) {
                        s.probe = None;
                    }
                }
            }
        }
        let outcome = self.outcome.unwrap_or(ProbeOutcome::Inconclusive);
        self.sender.send_replace(Some(outcome));
    }
}

/// Waits for another request's probe of the same Region.
#[derive(Debug)]
pub struct ProbeWaiter {
    receiver: watch::Receiver<Option<ProbeOutcome>>,
}

impl ProbeWaiter {
    /// The probe's outcome; inconclusive if the probing request went away.
    pub async fn outcome(mut self) -> ProbeOutcome {
        loop {
            if let Some(outcome) = *self.receiver.borrow_and_update() {
                return outcome;
            }
            if self.receiver.changed().await.is_err() {
                return (*self.receiver.borrow()).unwrap_or(ProbeOutcome::Inconclusive);
            }
        }
    }
}

/// Routing knowledge shared by all requests of one client: store health, the
/// `ServerIsBusy(0)` suspicion, and counters. Create one per client, wrap it
/// in an `Arc`, and give it to every plan with
/// [`PlanBuilder::routing`](super::PlanBuilder::routing).
#[derive(Debug)]
pub struct RoutingState {
    store_health: Option<StoreHealth>,
    shared_busy_probe: bool,
    busy_probe_window: Duration,
    max_concurrency: usize,
    request_timeout: Duration,
    busy: Mutex<HashMap<RegionId, BusySuspicion>>,
    counters: Counters,
}

impl RoutingState {
    /// Routing state following the config's switches.
    pub fn new(config: &Config) -> Self {
        RoutingState {
            store_health: config
                .store_health
                .then(|| StoreHealth::new(config.store_cooldown, config.store_timeout_strikes)),
            shared_busy_probe: config.shared_busy_probe,
            busy_probe_window: config.busy_probe_window,
            max_concurrency: config.max_concurrency.max(1),
            request_timeout: config.timeout,
            busy: Mutex::new(HashMap::new()),
            counters: Counters::default(),
        }
    }

    /// A snapshot of the counters.
    pub fn stats(&self) -> RoutingStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RoutingStats {
            fallback_attempts: get(&c.fallback_attempts),
            fallback_successes: get(&c.fallback_successes),
            busy_probes: get(&c.busy_probes),
            store_invalidations: get(&c.store_invalidations),
            region_invalidations: get(&c.region_invalidations),
            connect_timeouts: get(&c.connect_timeouts),
            stores_marked_unreachable: get(&c.stores_marked_unreachable),
            rpcs_in_flight: get(&c.rpcs_in_flight),
        }
    }

    /// The store health, when the `store_health` switch is on.
    pub fn store_health(&self) -> Option<&StoreHealth> {
        self.store_health.as_ref()
    }

    /// True when the ServerIsBusy(0) suspicion is shared across requests.
    pub fn shares_busy_probe(&self) -> bool {
        self.shared_busy_probe
    }

    /// The configured per-request concurrency limit.
    pub fn max_concurrency(&self) -> usize {
        self.max_concurrency
    }

    /// The configured bound on one RPC.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    pub(crate) fn count(&self, counter: Counter) {
        let c = &self.counters;
        let atomic = match counter {
            Counter::FallbackAttempt => &c.fallback_attempts,
            Counter::FallbackSuccess => &c.fallback_successes,
            Counter::BusyProbe => &c.busy_probes,
            Counter::StoreInvalidation => &c.store_invalidations,
            Counter::RegionInvalidation => &c.region_invalidations,
            Counter::ConnectTimeout => &c.connect_timeouts,
        };
        atomic.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn rpc_started(&self) {
        self.counters.rpcs_in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn rpc_ended(&self) {
        self.counters.rpcs_in_flight.fetch_sub(1, Ordering::Relaxed);
    }

    /// True when store health is on and the store is cooling down.
    pub fn is_store_unreachable(&self, store_id: StoreId) -> bool {
        self.store_health
            .as_ref()
            .is_some_and(|h| h.is_unreachable(store_id))
    }

    /// A transport or mapping failure: the store cools down.
    pub fn store_failed(&self, store_id: StoreId) {
        if let Some(h) = &self.store_health {
            if h.mark_unreachable(store_id) {
                self.counters
                    .stores_marked_unreachable
                    .fetch_add(1, Ordering::Relaxed);
                log::debug!("store {store_id} marked unreachable");
            }
        }
    }

    /// A timeout from the store of an RPC sent at `sent_at`; enough in a row
    /// mark it unreachable.
    pub fn store_timed_out(&self, store_id: StoreId, sent_at: Instant) {
        if let Some(h) = &self.store_health {
            if h.record_timeout(store_id, sent_at) {
                self.counters
                    .stores_marked_unreachable
                    .fetch_add(1, Ordering::Relaxed);
                log::debug!("store {store_id} marked unreachable after consecutive timeouts");
            }
        }
    }

    /// The store answered.
    pub fn store_answered(&self, store_id: StoreId) {
        if let Some(h) = &self.store_health {
            h.mark_reachable(store_id);
        }
    }

    /// Records a `ServerIsBusy(0)` from `leader_peer_id`, the cached leader of
    /// `region_id`, shared across requests within the probe window. With
    /// `may_probe` false (the request already probed) the verdict is never
    /// [`BusyVerdict::Probe`].
    pub fn busy_zero_wait(
        self: &Arc<Self>,
        region_id: RegionId,
        leader_peer_id: u64,
        may_probe: bool,
    ) -> BusyVerdict {
        let now = Instant::now();
        let mut busy = lock(&self.busy);
        let suspicion = busy.entry(region_id).or_insert(BusySuspicion {
            leader_peer_id,
            zero_wait_answers: 0,
            since: now,
            probe: None,
        });
        // A probe in flight decides for the whole Region, whichever leader
        // this request has cached: replacing the suspicion now would let a
        // second probe of the Region start beside it.
        if let Some(receiver) = &suspicion.probe {
            return BusyVerdict::WaitForProbe(ProbeWaiter {
                receiver: receiver.clone(),
            });
        }
        let expired = now.duration_since(suspicion.since) > self.busy_probe_window;
        if suspicion.leader_peer_id != leader_peer_id || expired {
            *suspicion = BusySuspicion {
                leader_peer_id,
                zero_wait_answers: 0,
                since: now,
                probe: None,
            };
        }
        suspicion.zero_wait_answers += 1;
        if !may_probe || suspicion.zero_wait_answers < BUSY_ANSWERS_BEFORE_PROBE {
            return BusyVerdict::Ordinary;
        }
        let (sender, receiver) = watch::channel(None);
        suspicion.probe = Some(receiver);
        drop(busy);
        BusyVerdict::Probe(ProbeTicket {
            state: Arc::clone(self),
            region_id,
            sender,
            outcome: None,
        })
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
        h.mark_reachable(2);
        assert!(!h.is_unreachable(2));
    }

    #[tokio::test(start_paused = true)]
    async fn timeout_strikes_mark_unreachable_only_when_consecutive() {
        let h = StoreHealth::new(Duration::from_secs(10), 2);
        assert!(!h.record_timeout(1, Instant::now()));
        h.mark_reachable(1);
        assert!(
            !h.record_timeout(1, Instant::now()),
            "a success in between resets"
        );
        assert!(h.record_timeout(1, Instant::now()));
        assert!(h.is_unreachable(1));
    }

    #[tokio::test(start_paused = true)]
    async fn concurrent_timeouts_are_one_strike() {
        // Issue 9: RPCs in flight together that time out together are one
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
