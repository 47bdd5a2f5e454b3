//! Client-wide forwarding ([routing.md,
//! "Forwarding"](crate::spec::routing#forwarding-beyond)): for each store
//! this client cannot reach while its leaders live, the store that proxies
//! requests to it.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::RwLock;

use tokio::time::Instant;

use crate::region::StoreId;
use crate::sync::{read, write};

/// One store reached through a proxy.
#[derive(Debug, Clone, Copy)]
struct Route {
    proxy: StoreId,
    /// When forwarding to the store began (the probe gives up some time
    /// after).
    since: Instant,
}

/// What [`Proxies::worked`] changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ProxyChange {
    /// The store already went through this proxy.
    Same,
    /// Another proxy replaced a failed one.
    Replaced,
    /// Forwarding to the store began: probe it directly in the background.
    Began,
}

/// The proxy of each store that this client reaches only through another
/// store. Empty (the usual case), a lookup reads a counter and takes no
/// lock.
#[derive(Debug, Default)]
pub(crate) struct Proxies {
    routes: RwLock<HashMap<StoreId, Route>>,
    /// How many routes `routes` holds, kept under its write lock.
    entries: AtomicUsize,
}

impl Proxies {
    /// The proxy requests to `target` go through, if any.
    pub(crate) fn proxy_for(&self, target: StoreId) -> Option<StoreId> {
        if self.entries.load(Ordering::Acquire) == 0 {
            return None;
        }
        read(&self.routes).get(&target).map(|r| r.proxy)
    }

    /// A request reached `target` through `proxy`: from now on every
    /// request to `target` goes that way.
    pub(crate) fn worked(&self, target: StoreId, proxy: StoreId) -> ProxyChange {
        if self.proxy_for(target) == Some(proxy) {
            return ProxyChange::Same;
        }
        let mut routes = write(&self.routes);
        let change = match routes.get_mut(&target) {
            Some(route) if route.proxy == proxy => ProxyChange::Same,
            Some(route) => {
                route.proxy = proxy;
                ProxyChange::Replaced
            }
            None => {
                routes.insert(
                    target,
                    Route {
                        proxy,
                        since: Instant::now(),
                    },
                );
                ProxyChange::Began
            }
        };
        self.entries.store(routes.len(), Ordering::Release);
        change
    }

    /// `proxy` failed to reach `target` (or could not be reached): the
    /// route through it is forgotten; the next request that cannot reach
    /// `target` finds another. Returns true when it was the store's route.
    pub(crate) fn failed(&self, target: StoreId, proxy: StoreId) -> bool {
        if self.proxy_for(target) != Some(proxy) {
            return false;
        }
        let mut routes = write(&self.routes);
        let removed = routes.get(&target).is_some_and(|r| r.proxy == proxy);
        if removed {
            routes.remove(&target);
        }
        self.entries.store(routes.len(), Ordering::Release);
        removed
    }

    /// Ends forwarding to `target` (it answered directly, or the probe gave
    /// up). Returns true when it was forwarded to.
    pub(crate) fn end(&self, target: StoreId) -> bool {
        if self.proxy_for(target).is_none() {
            return false;
        }
        let mut routes = write(&self.routes);
        let removed = routes.remove(&target).is_some();
        self.entries.store(routes.len(), Ordering::Release);
        removed
    }

    /// How many stores are reached through a proxy.
    pub(crate) fn len(&self) -> usize {
        self.entries.load(Ordering::Acquire)
    }

    /// When forwarding to `target` began, while it lasts.
    pub(crate) fn since(&self, target: StoreId) -> Option<Instant> {
        if self.entries.load(Ordering::Acquire) == 0 {
            return None;
        }
        read(&self.routes).get(&target).map(|r| r.since)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_route_begins_is_replaced_and_ends() {
        let p = Proxies::default();
        assert_eq!(p.proxy_for(1), None);
        assert_eq!(p.worked(1, 2), ProxyChange::Began);
        assert_eq!(p.worked(1, 2), ProxyChange::Same);
        assert_eq!(p.proxy_for(1), Some(2));
        let since = p.since(1);
        assert!(!p.failed(1, 3), "another proxy's failure changes nothing");
        assert_eq!(p.worked(1, 3), ProxyChange::Replaced);
        assert_eq!(p.since(1), since, "a replaced proxy keeps the start");
        assert!(p.failed(1, 3));
        assert_eq!(p.proxy_for(1), None);
        assert_eq!(p.worked(1, 2), ProxyChange::Began);
        assert!(p.end(1));
        assert!(!p.end(1));
        assert_eq!(p.entries.load(Ordering::Acquire), 0);
    }
}
