//! [`RetryOptions`]: the retry schedules a transaction's plans use
//! (client-rust keeps it in `request`, and so do we, below the clients).

use crate::backoff::{Backoff, DEFAULT_REGION_BACKOFF, OPTIMISTIC_BACKOFF, PESSIMISTIC_BACKOFF};

/// How plans retry: Region errors, and locks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryOptions {
    /// The schedule for Region errors and exhausted candidate rounds.
    pub region_backoff: Backoff,
    /// Whether locks are resolved, and how long a pessimistic lock waits
    /// for a live one. [`Backoff::no_backoff`] turns resolution off: a
    /// request that meets a lock fails with
    /// [`Error::ResolveLockError`](crate::Error::ResolveLockError) carrying
    /// the locks. With any other schedule, locks of finished transactions
    /// are resolved, and:
    ///
    /// - a pessimistic lock request (`lock_keys`, `get_for_update`, and
    ///   every write of a pessimistic transaction) is bounded by this
    ///   schedule, as in client-rust: each answer that still carries a live
    ///   lock (after the request's wait on the server, see
    ///   [`LockWait`](crate::transaction::LockWait)) spends one attempt,
    ///   the request is sent again after that attempt's delay, and with the
    ///   attempts spent the call fails with
    ///   [`Error::PessimisticLockError`](crate::Error::PessimisticLockError)
    ///   around `ResolveLockError`. The default (ten attempts, 2 ms doubling
    ///   to 500 ms) gives up after eleven server waits and 1.51 s of delays,
    ///   about 12.5 s against TiKV's 1 s wait. A request woken by the
    ///   holder's release is no failed attempt: it is sent again at a new
    ///   `for_update_ts` with the whole schedule.
    /// - every other request (reads, prewrite) waits live locks out by their
    ///   TTL within [`Config::request_deadline`](crate::Config::request_deadline),
    ///   not by this schedule's delays, which would give up before a TTL can
    ///   expire ([txn.md, "Behaviour we require"](crate::spec::txn#behaviour-we-require)).
    pub lock_backoff: Backoff,
}

impl RetryOptions {
    /// Pairs the two schedules.
    pub const fn new(region_backoff: Backoff, lock_backoff: Backoff) -> RetryOptions {
        RetryOptions {
            region_backoff,
            lock_backoff,
        }
    }

    /// The defaults of an optimistic transaction.
    pub const fn default_optimistic() -> RetryOptions {
        RetryOptions::new(DEFAULT_REGION_BACKOFF, OPTIMISTIC_BACKOFF)
    }

    /// The defaults of a pessimistic transaction.
    pub const fn default_pessimistic() -> RetryOptions {
        RetryOptions::new(DEFAULT_REGION_BACKOFF, PESSIMISTIC_BACKOFF)
    }

    /// No retries.
    pub const fn none() -> RetryOptions {
        RetryOptions::new(Backoff::no_backoff(), Backoff::no_backoff())
    }
}
