//! The primary lock's heartbeat: one on request (`send_heart_beat`), and
//! the automatic one that keeps a long transaction's locks alive until it
//! ends.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::warn;

use crate::pd::PdClient;
use crate::request::plan::call_deadline;
use crate::request::{CollectSingle, Plan};
use crate::transaction::buffer::choose_primary;
use crate::transaction::options::{HeartbeatOption, TransactionOptions, DEFAULT_LOCK_TTL, MAX_TTL};
use crate::transaction::requests::new_heart_beat_request;
use crate::{Error, Key, Result};

use super::{bump, Transaction, TxnShared};

impl<PdC: PdClient> Transaction<PdC> {
    /// Extends the primary lock's TTL; returns the new TTL in ms.
    pub async fn send_heart_beat(&mut self) -> Result<u64> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_allow_operation()?;
            let locked = &self.pessimistic_locked;
            let primary = choose_primary(
                self.buffer.primary_key(),
                &self.buffer.mutations(|k| locked.contains(k)),
            )
            .ok_or(Error::NoPrimaryKey)?;
            send_heart_beat(
                &self.shared,
                &self.options,
                primary,
                self.start_ts(),
                self.start_instant,
            )
            .await
        })
        .await
    }

    /// Keeps `primary`'s lock alive: the first heartbeat comes within half
    /// of `first_ttl_ms` (the TTL the lock was just given), then each within
    /// half of the lease the last one gave ([`heartbeat_lease`]), and at
    /// least every configured interval.
    pub(super) fn start_auto_heartbeat(&mut self, primary: Key, first_ttl_ms: u64) {
        if self.heartbeat_started || !self.options.heartbeat_option.is_auto_heartbeat() {
            return;
        }
        let HeartbeatOption::FixedTime(interval) = self.options.heartbeat_option else {
            return;
        };
        let first_wait = interval.min(Duration::from_millis(first_ttl_ms / 2));
        self.heartbeat_started = true;
        let shared = Arc::clone(&self.shared);
        let options = self.options.clone();
        let start_ts = self.start_ts();
        let start_instant = self.start_instant;
        let mut ended = self.ended.subscribe();
        tokio::spawn(async move {
            let mut wait = first_wait;
            loop {
                // Ended, or the transaction was dropped, before the interval.
                let waited = tokio::time::timeout(wait, ended.changed()).await;
                if waited.is_ok() {
                    return;
                }
                if *ended.borrow() {
                    return;
                }
                let lease = heartbeat_lease(start_instant.elapsed());
                wait = interval.min(lease / 2);
                let ttl = start_instant.elapsed().as_millis() as u64 + lease.as_millis() as u64;
                match send_heart_beat_with_ttl(&shared, &options, primary.clone(), start_ts, ttl)
                    .await
                {
                    Ok(_) => bump(&shared.counters.heartbeats),
                    // The commit (or a rollback) took the primary's lock
                    // while this heartbeat was on its way: nothing is left
                    // to keep alive, and the commit reports the outcome.
                    Err(e) if lock_is_gone(&e) => {
                        tracing::debug!(
                            "heartbeat of transaction {start_ts}: the primary lock is gone ({e}); stopping"
                        );
                        return;
                    }
                    Err(e) => {
                        bump(&shared.counters.heartbeat_failures);
                        warn!("heartbeat of transaction {start_ts} failed: {e}");
                    }
                }
            }
        });
    }
}

/// True when a heartbeat found no lock of its transaction on the primary:
/// TiKV answers `TxnNotFound`, or a retryable `TxnLockNotFound`.
pub(super) fn lock_is_gone(e: &Error) -> bool {
    match e {
        Error::KeyError(k) => k.txn_not_found.is_some() || k.retryable.contains("TxnLockNotFound"),
        Error::ExtractedErrors(errors) => !errors.is_empty() && errors.iter().all(lock_is_gone),
        _ => false,
    }
}

/// How long an automatic heartbeat keeps the primary alive past now, for a
/// transaction that has run for `age`: about its age, at least
/// [`DEFAULT_LOCK_TTL`] and at most [`MAX_TTL`] (client-go's lease). The
/// lease is what the others wait out if the holder dies right after the
/// heartbeat: a transaction killed young costs them seconds, not the 20 s
/// a long one is given.
pub(super) fn heartbeat_lease(age: Duration) -> Duration {
    age.clamp(
        Duration::from_millis(DEFAULT_LOCK_TTL),
        Duration::from_millis(MAX_TTL),
    )
}

/// A heartbeat asked for by the caller (client-rust's): [`MAX_TTL`] past
/// now.
pub(super) async fn send_heart_beat<PdC: PdClient>(
    shared: &TxnShared<PdC>,
    options: &TransactionOptions,
    primary: Key,
    start_ts: u64,
    start_instant: Instant,
) -> Result<u64> {
    let ttl = start_instant.elapsed().as_millis() as u64 + MAX_TTL;
    send_heart_beat_with_ttl(shared, options, primary, start_ts, ttl).await
}

/// Sets the primary's TTL to `ttl` ms from the start ts (TiKV never
/// shortens it).
async fn send_heart_beat_with_ttl<PdC: PdClient>(
    shared: &TxnShared<PdC>,
    options: &TransactionOptions,
    primary: Key,
    start_ts: u64,
    ttl: u64,
) -> Result<u64> {
    let request = new_heart_beat_request(primary.into(), start_ts, ttl);
    let response = shared
        .builder(request, &options.wire_tags)
        .retry_multi_region(options.retry_options.region_backoff.clone())
        .merge(CollectSingle)
        .extract_error()
        .plan()
        .execute()
        .await?;
    Ok(response.lock_ttl)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::kvrpcpb;

    #[test]
    fn a_heartbeat_leases_about_the_transaction_s_age_between_3_and_20_s() {
        let s = Duration::from_secs;
        assert_eq!(heartbeat_lease(Duration::from_millis(1500)), s(3));
        assert_eq!(heartbeat_lease(s(7)), s(7));
        assert_eq!(heartbeat_lease(s(60)), s(20));
    }

    #[test]
    fn a_heartbeat_stops_quietly_only_when_the_lock_is_gone() {
        let not_found = Error::KeyError(Box::new(kvrpcpb::KeyError {
            txn_not_found: Some(kvrpcpb::TxnNotFound::default()),
            ..Default::default()
        }));
        let lock_not_found = Error::KeyError(Box::new(kvrpcpb::KeyError {
            retryable: "TxnLockNotFound: txn 7 on key k".to_owned(),
            ..Default::default()
        }));
        let other = Error::KeyError(Box::new(kvrpcpb::KeyError {
            retryable: "WriteConflict".to_owned(),
            ..Default::default()
        }));
        assert!(lock_is_gone(&not_found));
        assert!(lock_is_gone(&lock_not_found));
        assert!(!lock_is_gone(&other));
        assert!(!lock_is_gone(&Error::InternalError {
            message: "x".to_owned()
        }));
        assert!(!lock_is_gone(&Error::ExtractedErrors(vec![
            not_found.duplicate(),
            other
        ])));
        assert!(lock_is_gone(&Error::ExtractedErrors(vec![
            not_found,
            lock_not_found
        ])));
        assert!(!lock_is_gone(&Error::ExtractedErrors(vec![])));
    }
}
