//! [`SingleFlight`]: at most one load per key at a time, shared by every
//! caller that asks for the key while it runs (the Region and store caches'
//! misses).

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};

use futures::future::{BoxFuture, FutureExt, Shared};

use crate::sync::lock;
use crate::Result;

/// A load several callers wait on: its error is shared (`Error` is not
/// `Clone`), and each caller gets it back with [`Error::from_shared`].
type SharedLoad<V> = Shared<BoxFuture<'static, Result<V, Arc<crate::Error>>>>;

/// Runs at most one load per key at a time: concurrent callers with the same
/// key await the same future and get the same result, error included. The
/// entry is removed once the load finishes, so a failure is not remembered,
/// and also when every caller has given up (dropped its future), which
/// drops the load itself: nothing runs on behind an abandoned lookup.
pub(crate) struct SingleFlight<K, V> {
    in_flight: Mutex<InFlight<K, V>>,
}

struct InFlight<K, V> {
    /// Ordered, so that dropping the map (the client going away) ends the
    /// loads in a reproducible order (a simulation replays from its seed).
    loads: BTreeMap<K, (u64, SharedLoad<V>)>,
    next_id: u64,
}

impl<K, V> Default for SingleFlight<K, V> {
    fn default() -> Self {
        SingleFlight {
            in_flight: Mutex::new(InFlight {
                loads: BTreeMap::new(),
                next_id: 0,
            }),
        }
    }
}

impl<K, V> std::fmt::Debug for SingleFlight<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SingleFlight")
            .field("in_flight", &lock(&self.in_flight).loads.len())
            .finish()
    }
}

/// One caller's share of a load. Dropping it (the load finished, or the
/// caller was cancelled) removes the entry once the load is done or no
/// other caller waits for it.
struct Waiter<'a, K: Ord, V> {
    flight: &'a SingleFlight<K, V>,
    key: K,
    id: u64,
    shared: Option<SharedLoad<V>>,
}

impl<K: Ord, V> Drop for Waiter<'_, K, V> {
    fn drop(&mut self) {
        // Give up our own handle first, so the count below sees only the
        // map's and other callers' handles.
        self.shared = None;
        let mut in_flight = lock(&self.flight.in_flight);
        let finished_or_abandoned = match in_flight.loads.get(&self.key) {
            // Only our own load: a newer one for the same key may have
            // started after this one finished.
            Some((id, shared)) if *id == self.id => {
                shared.peek().is_some() || shared.strong_count() == Some(1)
            }
            _ => false,
        };
        if finished_or_abandoned {
            in_flight.loads.remove(&self.key);
        }
    }
}

impl<K, V> SingleFlight<K, V>
where
    K: Ord + Clone,
    V: Clone + Send + Sync + 'static,
{
    /// Returns `cached()` if it has a value; otherwise joins the load in
    /// flight for `key`, or starts `load()` if there is none.
    ///
    /// `cached` is evaluated under the same lock that guards the in-flight
    /// map. A load that stores its result (in a cache `cached` reads) before
    /// it finishes therefore leaves no window in which a caller sees neither
    /// the stored value nor the load in flight.
    pub(crate) async fn run<C, L, Fut>(&self, key: K, cached: C, load: L) -> Result<V>
    where
        C: FnOnce() -> Option<V>,
        L: FnOnce() -> Fut,
        Fut: Future<Output = Result<V>> + Send + 'static,
    {
        let mut waiter = {
            let mut in_flight = lock(&self.in_flight);
            if let Some(value) = cached() {
                return Ok(value);
            }
            let (id, shared) = match in_flight.loads.get(&key) {
                Some((id, shared)) => (*id, shared.clone()),
                None => {
                    let id = in_flight.next_id;
                    in_flight.next_id += 1;
                    let shared = load().map(|r| r.map_err(Arc::new)).boxed().shared();
                    in_flight.loads.insert(key.clone(), (id, shared.clone()));
                    (id, shared)
                }
            };
            Waiter {
                flight: self,
                key,
                id,
                shared: Some(shared),
            }
        };
        match waiter.shared.as_mut() {
            Some(shared) => shared.await.map_err(crate::Error::from_shared),
            None => Err(crate::Error::InternalError {
                message: "a single-flight load lost its future".to_owned(),
            }),
        }
    }

    /// Waits for some load in flight (any key), if there is one, before
    /// starting another, and says whether there was one: after a hot
    /// Region is dropped, concurrent misses for different keys of it
    /// mostly need the same answer. Its outcome is its callers'; this one
    /// only wants the cache filled.
    ///
    /// The wait is a caller like any other: when it gives up last, the
    /// load is dropped with it. (A bare handle would keep an abandoned
    /// load in the map, never polled again, holding whatever it held, PD's
    /// leader-discovery lock included, for good.)
    pub(crate) async fn wait_for_any(&self) -> bool {
        let mut waiter = {
            // The oldest: it finishes first, and the choice does not depend
            // on the map's order (a simulation replays from its seed).
            let in_flight = lock(&self.in_flight);
            let Some((key, (id, shared))) = in_flight.loads.iter().min_by_key(|(_, (id, _))| *id)
            else {
                return false;
            };
            Waiter {
                flight: self,
                key: key.clone(),
                id: *id,
                shared: Some(shared.clone()),
            }
        };
        if let Some(shared) = waiter.shared.as_mut() {
            let _ = shared.await;
        }
        true
    }

    /// How many loads are in flight.
    #[cfg_attr(not(any(test, feature = "unstable-internals")), allow(dead_code))]
    pub(crate) fn in_flight(&self) -> usize {
        lock(&self.in_flight).loads.len()
    }
}
