//! Client-wide store health ([routing.md, "Store
//! health"](crate::spec::routing#store-health-beyond)): which stores cool down
//! after a transport failure or consecutive timeouts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;
use std::time::Duration;

use tokio::time::Instant;

use crate::region::StoreId;

use crate::sync::{read, write};

#[derive(Debug, Clone, Copy, Default)]
struct StoreHealthEntry {
    unreachable_until: Option<Instant>,
    timeout_strikes: u32,
    /// When the last strike was recorded: a timeout of an RPC sent before
    /// it is the same slow moment, not a further strike.
    last_strike: Option<Instant>,
    /// When the store was last marked unreachable: an answer to an RPC sent
    /// before then proves nothing about the store now.
    marked_at: Option<Instant>,
}

/// Client-wide store health: which stores are cooling down after a failure.
#[derive(Debug)]
pub(crate) struct StoreHealth {
    cooldown: Duration,
    timeout_strikes: u32,
    // Read-locked on every request (the fast path asks whether the leader's
    // store cools down and reports that it answered); written only when a
    // store's health changes.
    stores: RwLock<HashMap<StoreId, StoreHealthEntry>>,
    /// How many entries `stores` holds, kept under its write lock: with none
    /// (every store healthy, the usual case) a request's checks read this
    /// and take no lock.
    entries: AtomicUsize,
}

impl StoreHealth {
    /// Store health with a cool-down (jittered by a quarter either way) and
    /// the number of consecutive timeouts that mark a store unreachable.
    pub fn new(cooldown: Duration, timeout_strikes: u32) -> Self {
        StoreHealth {
            cooldown,
            timeout_strikes: timeout_strikes.max(1),
            stores: RwLock::new(HashMap::new()),
            entries: AtomicUsize::new(0),
        }
    }

    /// The cool-down jittered by a quarter either way; a huge configured
    /// cool-down saturates instead of overflowing.
    fn jittered_cooldown(&self) -> Duration {
        let factor = 0.75 + fastrand::f64() * 0.5;
        Duration::try_from_secs_f64(self.cooldown.as_secs_f64() * factor).unwrap_or(Duration::MAX)
    }

    /// True while the store cools down after a failure.
    pub fn is_unreachable(&self, store_id: StoreId) -> bool {
        if self.entries.load(Ordering::Acquire) == 0 {
            return false;
        }
        let until = read(&self.stores)
            .get(&store_id)
            .and_then(|e| e.unreachable_until);
        until.is_some_and(|until| Instant::now() < until)
    }

    /// True when the store was marked unreachable at or after `since` and
    /// still cools down.
    pub fn marked_since(&self, store_id: StoreId, since: Instant) -> bool {
        if self.entries.load(Ordering::Acquire) == 0 {
            return false;
        }
        let now = Instant::now();
        read(&self.stores).get(&store_id).is_some_and(|e| {
            e.marked_at.is_some_and(|m| m >= since) && e.unreachable_until.is_some_and(|u| now < u)
        })
    }

    /// Marks the store unreachable for the cool-down. Returns true when it
    /// was not already.
    pub fn mark_unreachable(&self, store_id: StoreId) -> bool {
        let now = Instant::now();
        let until = saturating_add(now, self.jittered_cooldown());
        let mut stores = write(&self.stores);
        let entry = stores.entry(store_id).or_default();
        let was_unreachable = entry.unreachable_until.is_some_and(|u| now < u);
        entry.unreachable_until = Some(until);
        entry.marked_at = Some(now);
        entry.timeout_strikes = 0;
        entry.last_strike = None;
        self.entries.store(stores.len(), Ordering::Release);
        !was_unreachable
    }

    /// The store answered an RPC sent at `sent_at`: it is reachable and its
    /// timeout strikes reset, unless it was marked unreachable after that
    /// RPC was sent (a late answer cannot erase a newer failure).
    pub fn mark_reachable(&self, store_id: StoreId, sent_at: Instant) {
        let clears = |entry: &StoreHealthEntry| entry.marked_at.is_none_or(|m| sent_at >= m);
        // A healthy store has no entry: the usual answer reads a counter.
        if self.entries.load(Ordering::Acquire) == 0
            || !read(&self.stores).get(&store_id).is_some_and(clears)
        {
            return;
        }
        let mut stores = write(&self.stores);
        if stores.get(&store_id).is_some_and(clears) {
            stores.remove(&store_id);
            self.entries.store(stores.len(), Ordering::Release);
        }
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
            let strikes = if entry.last_strike.is_some_and(|last| sent_at < last) {
                None
            } else {
                entry.timeout_strikes += 1;
                entry.last_strike = Some(Instant::now());
                Some(entry.timeout_strikes)
            };
            self.entries.store(stores.len(), Ordering::Release);
            match strikes {
                Some(strikes) => strikes,
                None => return false,
            }
        };
        if strikes >= self.timeout_strikes {
            self.mark_unreachable(store_id)
        } else {
            false
        }
    }
}

/// `at + by`, or the farthest instant the clock can represent when that
/// overflows (a cool-down of "forever").
fn saturating_add(at: Instant, by: Duration) -> Instant {
    const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);
    [by, YEAR * 100, YEAR, Duration::from_secs(24 * 3600)]
        .into_iter()
        .find_map(|d| at.checked_add(d))
        .unwrap_or(at)
}
