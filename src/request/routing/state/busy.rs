//! The shared `ServerIsBusy(0)` suspicion and the one probe per Region.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use crate::region::RegionId;

use crate::request::routing::round::BUSY_ANSWERS_BEFORE_PROBE;
use crate::sync::lock;

/// The outcome of a busy probe, as its waiters see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProbeOutcome {
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
pub(crate) enum BusyVerdict {
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
pub(crate) struct ProbeTicket {
    state: Arc<BusySuspicions>,
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
            let mut busy = lock(&self.state.map);
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
pub(crate) struct ProbeWaiter {
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

/// The shared `ServerIsBusy(0)` suspicion of every Region ([routing.md,
/// "ServerIsBusy(0) follower
/// probe"](crate::spec::routing#serverisbusy0-follower-probe), **beyond**):
/// counts per (Region, leader) within a window, and at most one probe per
/// Region in flight.
#[derive(Debug)]
pub(crate) struct BusySuspicions {
    window: Duration,
    map: Mutex<HashMap<RegionId, BusySuspicion>>,
}

/// How many suspicions the map holds before expired ones are swept.
const SWEEP_AT: usize = 64;

impl BusySuspicions {
    /// An empty suspicion map with this window.
    pub(crate) fn new(window: Duration) -> Self {
        BusySuspicions {
            window,
            map: Mutex::new(HashMap::new()),
        }
    }

    /// Drops suspicions whose window has passed (and that no probe holds),
    /// once the map has grown to twice what it held after the last sweep:
    /// bounded by the Regions busy within one window, at amortised O(1).
    fn forget_expired(&self, busy: &mut HashMap<RegionId, BusySuspicion>, now: Instant) {
        if busy.len() < SWEEP_AT.max(busy.capacity() / 2) {
            return;
        }
        busy.retain(|_, s| s.probe.is_some() || now.duration_since(s.since) <= self.window);
        busy.shrink_to(SWEEP_AT.max(busy.len() * 2));
    }

    /// How many Regions are under suspicion (for tests).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        lock(&self.map).len()
    }

    /// Records a `ServerIsBusy(0)` from `leader_peer_id`, the cached leader
    /// of `region_id`. With `may_probe` false (the request already probed)
    /// the verdict is never [`BusyVerdict::Probe`].
    pub(crate) fn report(
        self: &Arc<Self>,
        region_id: RegionId,
        leader_peer_id: u64,
        may_probe: bool,
    ) -> BusyVerdict {
        let now = Instant::now();
        let mut busy = lock(&self.map);
        if !busy.contains_key(&region_id) {
            self.forget_expired(&mut busy, now);
        }
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
        let expired = now.duration_since(suspicion.since) > self.window;
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
