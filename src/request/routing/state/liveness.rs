//! Store liveness ([routing.md, "Store
//! liveness"](crate::spec::routing#store-liveness-beyond)): an RPC left
//! unanswered for `store_probe_after` makes the client probe its store once
//! (one cheap call, bounded by the same time); a probe that fails marks the
//! store unreachable at once, and the requests still waiting on it give up:
//! a re-sendable one goes to the next candidate, a write that must not be
//! sent twice ends undetermined (it is never sent again). Which RPCs are watched is
//! decided here, synchronously; the shell keeps the timer and runs the
//! probe.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use crate::region::StoreId;

/// The shortest wait before a store is probed, whatever the configuration
/// says.
pub(crate) const MIN_PROBE_AFTER: Duration = Duration::from_millis(10);

/// How one RPC is watched: after `after` without an answer its store is
/// probed, and the RPC ends once the probe (or anything else) marks the
/// store unreachable. Its outcome is then the same as at its own timeout:
/// a write that must never be sent twice is undetermined, only sooner.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Watch {
    /// The store the RPC went to.
    pub(crate) store_id: StoreId,
    /// How long the RPC waits before its store is probed.
    pub(crate) after: Duration,
}

/// The client-wide side of store liveness: which stores are being probed,
/// and a wake-up for the RPCs waiting on a store that gets marked.
#[derive(Debug)]
pub(crate) struct Liveness {
    after: Duration,
    /// The stores being probed, each with the last answer to a watched RPC
    /// since its probe began.
    probing: Mutex<HashMap<StoreId, Option<Instant>>>,
    marked: Notify,
}

impl Liveness {
    /// Liveness that probes a store after `after` without an answer.
    pub(crate) fn new(after: Duration) -> Self {
        Liveness {
            after: after.max(MIN_PROBE_AFTER),
            probing: Mutex::new(HashMap::new()),
            marked: Notify::new(),
        }
    }

    /// The watch of an RPC to `store_id` sent directly (`forwarded`: through
    /// a proxy, whose slowness says nothing of the store's own link, and
    /// which is not watched).
    pub(crate) fn watch(&self, store_id: StoreId, forwarded: bool) -> Option<Watch> {
        (!forwarded).then_some(Watch {
            store_id,
            after: self.after,
        })
    }

    /// Starts a probe of `store_id` unless one runs: true when the caller
    /// must run it (and then call [`probe_ended`](Self::probe_ended)).
    pub(crate) fn begin_probe(&self, store_id: StoreId) -> bool {
        let mut probing = crate::sync::lock(&self.probing);
        if probing.contains_key(&store_id) {
            return false;
        }
        probing.insert(store_id, None);
        true
    }

    /// A watched RPC to `store_id` was answered (recorded while the store
    /// is being probed).
    pub(crate) fn late_answer(&self, store_id: StoreId) {
        if let Some(answered) = crate::sync::lock(&self.probing).get_mut(&store_id) {
            *answered = Some(Instant::now());
        }
    }

    /// The probe of `store_id`, sent at `sent_at`, ended: true when a
    /// watched RPC to the store was answered after it was sent.
    pub(crate) fn probe_ended(&self, store_id: StoreId, sent_at: Instant) -> bool {
        crate::sync::lock(&self.probing)
            .remove(&store_id)
            .flatten()
            .is_some_and(|at| at >= sent_at)
    }

    /// Wakes every RPC waiting for a store to be marked.
    pub(crate) fn store_marked(&self) {
        self.marked.notify_waiters();
    }

    /// The wake-up of [`store_marked`](Self::store_marked).
    pub(crate) fn marked(&self) -> &Notify {
        &self.marked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_direct_rpcs_are_watched() {
        let l = Liveness::new(Duration::from_millis(500));
        assert_eq!(
            l.watch(4, false),
            Some(Watch {
                store_id: 4,
                after: Duration::from_millis(500),
            })
        );
        assert_eq!(l.watch(4, true), None, "a forwarded RPC");
    }

    #[tokio::test(start_paused = true)]
    async fn one_probe_per_store_at_a_time_and_a_floor_on_the_wait() {
        let l = Liveness::new(Duration::ZERO);
        assert_eq!(l.watch(1, false).map(|w| w.after), Some(MIN_PROBE_AFTER));
        let sent = Instant::now();
        assert!(l.begin_probe(1));
        assert!(!l.begin_probe(1));
        assert!(l.begin_probe(2));
        assert!(!l.probe_ended(1, sent), "no RPC answered meanwhile");
        assert!(l.begin_probe(1));
        l.late_answer(1);
        l.late_answer(3);
        assert!(l.probe_ended(1, sent), "a watched RPC was answered");
        assert!(!l.probe_ended(3, sent), "store 3 was not being probed");
    }
}
