//! A request a store may hold on purpose: a pessimistic lock request that
//! meets another transaction's lock waits for its release, up to its
//! `wait_timeout` (0: the server's `wait-for-lock-timeout`, 1 s by default;
//! negative: no wait). Such a wait is fitted into the RPC's bound before
//! each attempt, so a request waiting as asked is answered by the server
//! (`KeyIsLocked` when the wait runs out) and never runs into the client's
//! timeout, where it would look like a dead store.

use std::any::Any;
use std::time::Duration;

use crate::proto::kvrpcpb;

/// TiKV's default `pessimistic-txn.wait-for-lock-timeout`: the wait of a
/// lock request whose `wait_timeout` is 0.
pub(crate) const DEFAULT_SERVER_LOCK_WAIT: Duration = Duration::from_millis(1000);

/// The wait a `wait_timeout` asks for.
fn wait_of(wait_timeout: i64) -> Duration {
    match wait_timeout {
        t if t < 0 => Duration::ZERO,
        0 => DEFAULT_SERVER_LOCK_WAIT,
        t => Duration::from_millis(t.unsigned_abs()),
    }
}

/// The shortest wait worth asking for: below it, the request asks for none
/// and the server answers at once.
const MIN_SERVER_WAIT: Duration = Duration::from_millis(10);

/// Fits the server's wait of `request` into half of the RPC's `bound` (the
/// other half is for the answer and what the caller does next): a lock
/// request asks for the shorter of its wait and that, explicitly (the
/// server's default may be longer), and for none when less than
/// [`MIN_SERVER_WAIT`] fits. Only ever shortens: each attempt's bound is
/// at most the last one's. Without a bound nothing changes.
///
/// Generic, so that for every other request type the check is decided at
/// compile time and costs the fast path nothing.
pub(crate) fn fit_server_wait<R: Any>(request: &mut R, bound: Option<Duration>) {
    let request: &mut dyn Any = request;
    let (Some(lock), Some(bound)) = (
        request.downcast_mut::<kvrpcpb::PessimisticLockRequest>(),
        bound,
    ) else {
        return;
    };
    if lock.wait_timeout < 0 {
        return;
    }
    let room = bound / 2;
    let asked = wait_of(lock.wait_timeout);
    let wait = asked.min(room);
    lock.wait_timeout = if wait < MIN_SERVER_WAIT {
        -1
    } else {
        i64::try_from(wait.as_millis()).unwrap_or(i64::MAX)
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lock(wait_timeout: i64) -> kvrpcpb::PessimisticLockRequest {
        kvrpcpb::PessimisticLockRequest {
            wait_timeout,
            ..Default::default()
        }
    }

    fn fitted(wait_timeout: i64, bound: Option<Duration>) -> i64 {
        let mut request = lock(wait_timeout);
        fit_server_wait(&mut request, bound);
        request.wait_timeout
    }

    #[test]
    fn the_wait_takes_at_most_half_the_bound_and_is_then_explicit() {
        let secs = |s: u64| Some(Duration::from_secs(s));
        // The default 2 s timeout leaves the server's default 1 s wait, sent
        // as what it is.
        assert_eq!(fitted(0, secs(2)), 1000);
        assert_eq!(fitted(0, secs(20)), 1000);
        assert_eq!(fitted(5_000, secs(2)), 1000);
        assert_eq!(fitted(300, secs(2)), 300);
        // Near the deadline (the bound is what is left of it).
        assert_eq!(fitted(0, Some(Duration::from_millis(300))), 150);
        assert_eq!(fitted(0, Some(Duration::from_millis(20))), 10);
        assert_eq!(fitted(0, Some(Duration::from_millis(19))), -1);
        // No wait stays no wait; no bound changes nothing.
        assert_eq!(fitted(-1, secs(2)), -1);
        assert_eq!(fitted(0, None), 0);
        // Other requests are left alone.
        let mut get = kvrpcpb::GetRequest::default();
        fit_server_wait(&mut get, Some(Duration::from_millis(1)));
        assert_eq!(get, kvrpcpb::GetRequest::default());
    }
}
