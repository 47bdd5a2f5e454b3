//! Rollback and cleanup: `rollback`, the primary-first rollback of
//! prewritten keys, the release of pessimistic locks, and the cleanup a
//! failed write or a dropped transaction leaves on a task of its own.

use std::sync::Arc;

use tracing::warn;

use crate::backoff::Backoff;
use crate::config::WireTags;
use crate::pd::PdClient;
use crate::proto::kvrpcpb;
use crate::request::plan::call_deadline;
use crate::request::{CollectError, Plan};
use crate::transaction::buffer::{choose_primary, takes_lock};
use crate::transaction::requests::new_batch_rollback_request;
use crate::{Error, Key, Result};

use super::{bump, Transaction, TransactionStatus, TxnShared};

impl<PdC: PdClient> Transaction<PdC> {
    /// Rolls back: releases this transaction's locks. After a commit that
    /// ended undetermined, a rollback fails if the transaction committed.
    ///
    /// A rollback that fails (no store answered, say) leaves the
    /// transaction as it was, so calling `rollback` again retries it.
    /// Dropping the transaction instead is fine: once `commit` or
    /// `rollback` was called, the drop check ([`CheckLevel`](crate::CheckLevel)) never fires,
    /// whatever the call returned. The locks a failed rollback left behind
    /// expire after their TTL, and a reader that meets one resolves it
    /// through the transaction's primary key first (rolling the primary
    /// back makes the transaction's fate final before any other key is
    /// touched); a dropped transaction that still holds pessimistic locks
    /// also tries once, in the background on the current Tokio runtime,
    /// to release them, bounded by the request deadline.
    pub async fn rollback(&mut self) -> Result<()> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.end_requested = true;
            self.refuse_if_undetermined("rollback")?;
            match self.status {
                TransactionStatus::Active
                | TransactionStatus::StartedCommit
                | TransactionStatus::StartedRollback => {}
                TransactionStatus::ReadOnly => {
                    self.finish(TransactionStatus::Rolledback);
                    return Ok(());
                }
                _ => return Err(Error::OperationAfterCommitError),
            }
            let before = self.status;
            let prewritten = before == TransactionStatus::StartedCommit;
            self.status = TransactionStatus::StartedRollback;
            let released = self.release_for_rollback(prewritten).await;
            if let Err(e) = released {
                // Not rolled back: a later `rollback()` tries again, prewritten
                // keys (a primary that may have committed) included.
                self.status = before;
                return Err(e);
            }
            self.finish(TransactionStatus::Rolledback);
            Ok(())
        })
        .await
    }

    /// The work of [`rollback`](Self::rollback): releases the pessimistic
    /// locks, then, once the commit started, the prewritten keys.
    pub(super) async fn release_for_rollback(&self, prewritten: bool) -> Result<()> {
        if !self.pessimistic_locked.is_empty() {
            let keys: Vec<Vec<u8>> = self
                .pessimistic_locked
                .iter()
                .map(|k| k.as_bytes().to_vec())
                .collect();
            self.pessimistic_rollback(keys, self.options.for_update_ts())
                .await?;
        }
        if prewritten {
            let locked = &self.pessimistic_locked;
            let mutations = self.buffer.mutations(|k| locked.contains(k));
            let primary = choose_primary(self.buffer.primary_key(), &mutations);
            let keys: Vec<Vec<u8>> = mutations
                .into_iter()
                .filter(takes_lock)
                .map(|m| m.key)
                .collect();
            self.rollback_prewritten(primary, keys).await?;
        }
        Ok(())
    }

    /// Rolls back prewritten `keys`, the transaction's `primary` first:
    /// the primary decides a transaction's fate, so once its rollback is
    /// definite the others can never commit. Should the primary have
    /// committed after all, its rollback fails and the other keys keep
    /// their locks (readers commit them from the primary's record) rather
    /// than being rolled back under a committed primary.
    pub(super) async fn rollback_prewritten(
        &self,
        primary: Option<Key>,
        keys: Vec<Vec<u8>>,
    ) -> Result<()> {
        self.shared
            .rollback_prewritten(
                self.start_ts(),
                self.region_backoff(),
                &self.options.wire_tags,
                primary,
                keys,
                None,
            )
            .await
    }

    /// Best effort: a failed prewrite's locks are rolled back instead of
    /// being left for readers to wait out
    /// ([txn.md](crate::spec::txn#behaviour-we-require)). True when the
    /// primary's rollback was answered within the call: the transaction can
    /// never commit then, whatever copy of its prewrite still arrives (TiKV
    /// refuses a prewrite over the transaction's own rollback record, and a
    /// reader meeting any other lock of it resolves it by the primary).
    pub(super) async fn rollback_after_failed_prewrite(
        &self,
        primary: Key,
        keys: Vec<Vec<u8>>,
    ) -> bool {
        bump(&self.shared.counters.prewrite_rollbacks);
        let shared = Arc::clone(&self.shared);
        let (start_ts, backoff) = (self.start_ts(), self.region_backoff());
        let for_update_ts = self.options.for_update_ts();
        let tags = Arc::clone(&self.options.wire_tags);
        let locked: Vec<Vec<u8>> = self
            .pessimistic_locked
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        // Set once the primary's rollback is answered, which settles the
        // verdict even when the rest of the cleanup outlasts the call.
        let primary_rolled_back = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let verdict = Arc::clone(&primary_rolled_back);
        self.beyond_the_call(async move {
            if let Err(e) = shared
                .rollback_prewritten(
                    start_ts,
                    backoff.clone(),
                    &tags,
                    Some(primary),
                    keys,
                    Some(&verdict),
                )
                .await
            {
                warn!(
                    "rolling back transaction {start_ts} after a failed prewrite failed: {e}; its locks expire after their TTL"
                );
            }
            if let Err(e) = shared
                .pessimistic_rollback(start_ts, backoff, &tags, locked, for_update_ts)
                .await
            {
                warn!("releasing pessimistic locks after a failed prewrite failed: {e}");
            }
        })
        .await;
        primary_rolled_back.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Runs `cleanup`, the release of locks a failed write left, on a task
    /// of its own with a deadline of its own: a write that failed because
    /// the call's deadline ran out would otherwise leave its locks, the
    /// cleanup having no time left either. The call waits for it until the
    /// call's own deadline, then returns and leaves it running.
    pub(super) fn beyond_the_call(
        &self,
        cleanup: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> impl std::future::Future<Output = ()> {
        let task = tokio::spawn(call_deadline::within(self.shared.request_deadline, cleanup));
        async move {
            let _ = call_deadline::bounded(task).await;
        }
    }

    /// Best effort, for a dropped transaction: releases its pessimistic
    /// locks instead of leaving them for others to wait out.
    pub(super) fn release_locks_in_background(&self) {
        if self.pessimistic_locked.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let keys: Vec<Vec<u8>> = self
            .pessimistic_locked
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        let shared = Arc::clone(&self.shared);
        let (start_ts, backoff) = (self.start_ts(), self.region_backoff());
        let for_update_ts = self.options.for_update_ts();
        let tags = Arc::clone(&self.options.wire_tags);
        runtime.spawn(async move {
            let released = shared
                .pessimistic_rollback(start_ts, backoff, &tags, keys, for_update_ts)
                .await;
            if let Err(e) = released {
                warn!("releasing the locks of dropped transaction {start_ts} failed: {e}");
            }
        });
    }
}

impl<PdC: PdClient> TxnShared<PdC> {
    /// Rolls back prewritten `keys` of transaction `start_ts`, the
    /// transaction's `primary` first: the primary decides a transaction's
    /// fate, so once its rollback is definite the others can never commit.
    /// Should the primary have committed after all, its rollback fails and
    /// the other keys keep their locks (readers commit them from the
    /// primary's record) rather than being rolled back under a committed
    /// primary. `primary_rolled_back` is set once the primary's rollback is
    /// answered (the primary listed among `keys`).
    pub(crate) async fn rollback_prewritten(
        &self,
        start_ts: u64,
        backoff: Backoff,
        tags: &WireTags,
        primary: Option<Key>,
        keys: Vec<Vec<u8>>,
        primary_rolled_back: Option<&std::sync::atomic::AtomicBool>,
    ) -> Result<()> {
        let listed = |p: &Key| keys.iter().any(|k| k.as_slice() == p.as_bytes());
        let Some(primary) = primary.filter(|p| listed(p)) else {
            return self.batch_rollback(start_ts, backoff, tags, keys).await;
        };
        let primary = primary.as_bytes().to_vec();
        let rest: Vec<Vec<u8>> = keys.into_iter().filter(|k| *k != primary).collect();
        self.batch_rollback(start_ts, backoff.clone(), tags, vec![primary])
            .await?;
        if let Some(done) = primary_rolled_back {
            done.store(true, std::sync::atomic::Ordering::Release);
        }
        self.batch_rollback(start_ts, backoff, tags, rest).await
    }

    async fn batch_rollback(
        &self,
        start_ts: u64,
        backoff: Backoff,
        tags: &WireTags,
        keys: Vec<Vec<u8>>,
    ) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.builder(new_batch_rollback_request(keys, start_ts), tags)
            .retry_multi_region(backoff)
            .merge(CollectError)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok(())
    }

    /// Releases pessimistic locks of `keys` taken at or below
    /// `for_update_ts`.
    pub(crate) async fn pessimistic_rollback(
        &self,
        start_ts: u64,
        backoff: Backoff,
        tags: &WireTags,
        keys: Vec<Vec<u8>>,
        for_update_ts: u64,
    ) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        let request = kvrpcpb::PessimisticRollbackRequest {
            keys,
            start_version: start_ts,
            for_update_ts,
            ..Default::default()
        };
        self.builder(request, tags)
            .retry_multi_region(backoff)
            .merge(CollectError)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok(())
    }
}
