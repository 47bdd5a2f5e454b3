//! GC's lock resolver, client-rust's [`LockResolver`]: it decides the
//! fate of the transactions whose locks one Region holds (rolling back the
//! ones still running) and resolves their locks there; the
//! [`ResolveLocksContext`] remembers decided transactions and cleaned
//! Regions across Regions and runs. [`CleanupLocks`](super::cleanup_locks::CleanupLocks)
//! scans the locks and hands them to it.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use super::lock_rules::{lock_until_expired_ms, secondaries_outcome, SecondariesOutcome};
use crate::backoff::DEFAULT_REGION_BACKOFF;
use crate::pd::{PdClient, Timestamp, TimestampExt};
use crate::proto::kvrpcpb;
use crate::region::RegionVerId;
use crate::request::plan::base::{
    CollectError, CollectSingle, DefaultProcessor, Process, ResponseWithShard,
};
use crate::request::plan::builder::PlanBuilder;
use crate::request::plan::keyspace::Keyspace;
use crate::request::plan::traits::Plan;
use crate::store::RegionStore;
use crate::sync::lock;
use crate::{Error, Result};

/// A transaction's status as `CheckTxnStatus` reported it, as client-rust's
/// [`LockResolver::check_txn_status`] returns it.
#[derive(Debug, Clone)]
pub struct TransactionStatus {
    /// Committed, rolled back, or still locked.
    pub kind: TransactionStatusKind,
    /// What TiKV did while checking.
    pub action: kvrpcpb::Action,
    /// For a locked transaction: its primary lock's TTL has run out as of
    /// the last [`check_ttl`](Self::check_ttl).
    pub is_expired: bool,
}

/// What [`TransactionStatus::kind`] says.
#[derive(Debug, Clone)]
pub enum TransactionStatusKind {
    /// Committed at this timestamp.
    Committed(Timestamp),
    /// Rolled back (or never prewritten, now protected by a rollback record).
    RolledBack,
    /// Still locked: the primary lock's TTL in milliseconds, and the lock.
    Locked(u64, kvrpcpb::LockInfo),
}

impl TransactionStatus {
    /// Reads a `CheckTxnStatus` answer. An action this client does not
    /// know is an error: the answer is not understood, so nothing is
    /// decided from it.
    fn from_response(response: kvrpcpb::CheckTxnStatusResponse) -> Result<TransactionStatus> {
        let action =
            kvrpcpb::Action::try_from(response.action).map_err(|_| Error::InternalError {
                message: format!(
                "TiKV answered CheckTxnStatus with action {}, which this client does not know; \
                 upgrade tikv-plan to one that speaks this TiKV's protocol",
                response.action
            ),
            })?;
        let kind = match (response.lock_info, response.commit_version) {
            (Some(lock), _) => TransactionStatusKind::Locked(response.lock_ttl, lock),
            (None, 0) => TransactionStatusKind::RolledBack,
            (None, commit) => TransactionStatusKind::Committed(Timestamp::from_version(commit)),
        };
        Ok(TransactionStatus {
            kind,
            action,
            is_expired: false,
        })
    }

    /// Marks a locked transaction expired when its primary lock's TTL has
    /// run out at `current` (on the TSO's physical clock, as TiKV measures
    /// it).
    pub fn check_ttl(&mut self, current: Timestamp) {
        if let TransactionStatusKind::Locked(ttl, lock) = &self.kind {
            let current = current.version();
            if lock_until_expired_ms(lock.lock_version, *ttl, current) == 0 {
                self.is_expired = true;
            }
        }
    }

    /// True when the status can no longer change, so it may be remembered:
    /// committed, rolled back, or an expired lock whose check left it as it
    /// was or rolled it back (a pessimistic primary that was only locked
    /// may still be prewritten by its live owner).
    pub fn is_cacheable(&self) -> bool {
        match &self.kind {
            TransactionStatusKind::Committed(_) | TransactionStatusKind::RolledBack => true,
            TransactionStatusKind::Locked(..) => {
                self.is_expired
                    && matches!(
                        self.action,
                        kvrpcpb::Action::NoAction
                            | kvrpcpb::Action::LockNotExistRollback
                            | kvrpcpb::Action::TtlExpireRollback
                    )
            }
        }
    }
}

/// A `CheckTxnStatus` answer as the transaction's status (client-rust's
/// processor for it); a key error in the answer is returned as the error:
/// [`Error::TxnNotFound`] for "no lock and no record", else
/// [`Error::KeyError`].
impl Process<kvrpcpb::CheckTxnStatusResponse> for DefaultProcessor {
    type Out = TransactionStatus;

    fn process(&self, input: Result<kvrpcpb::CheckTxnStatusResponse>) -> Result<Self::Out> {
        let mut response = input?;
        if let Some(mut e) = response.error.take() {
            return Err(match e.txn_not_found.take() {
                Some(not_found) => Error::TxnNotFound(not_found),
                None => Error::KeyError(Box::new(e)),
            });
        }
        TransactionStatus::from_response(response)
    }
}

/// What a cleanup remembers across Regions and runs: the statuses of
/// transactions already decided, and the Regions where a transaction's
/// locks are already resolved. Clones share it (client-rust's
/// `ResolveLocksContext`).
#[derive(Clone, Default, Debug)]
pub struct ResolveLocksContext {
    resolved: Arc<Mutex<HashMap<u64, Arc<TransactionStatus>>>>,
    clean_regions: Arc<Mutex<HashMap<u64, HashSet<RegionVerId>>>>,
}

impl ResolveLocksContext {
    /// The remembered status of transaction `txn_id`.
    pub async fn get_resolved(&self, txn_id: u64) -> Option<Arc<TransactionStatus>> {
        lock(&self.resolved).get(&txn_id).cloned()
    }

    /// Remembers the status of transaction `txn_id`.
    pub async fn save_resolved(&mut self, txn_id: u64, txn_status: Arc<TransactionStatus>) {
        lock(&self.resolved).insert(txn_id, txn_status);
    }

    /// True when `txn_id`'s locks in `region` were resolved already.
    pub async fn is_region_cleaned(&self, txn_id: u64, region: &RegionVerId) -> bool {
        lock(&self.clean_regions)
            .get(&txn_id)
            .is_some_and(|regions| regions.contains(region))
    }

    /// Remembers that `txn_id`'s locks in `region` are resolved.
    pub async fn save_cleaned_region(&mut self, txn_id: u64, region: RegionVerId) {
        lock(&self.clean_regions)
            .entry(txn_id)
            .or_default()
            .insert(region);
    }
}

/// GC's lock resolver (client-rust's `LockResolver`): decides the fate of
/// the transactions whose locks a Region holds, rolling back the ones still
/// running, and resolves their locks in that Region. For GC only: it rolls back running
/// transactions (see [`CleanupLocks`](crate::request::plan::CleanupLocks)).
pub struct LockResolver {
    ctx: ResolveLocksContext,
}

impl LockResolver {
    /// A resolver remembering into `ctx`.
    pub fn new(ctx: ResolveLocksContext) -> Self {
        LockResolver { ctx }
    }

    /// Cleans up `locks`, all found in `store`'s Region: decides each
    /// transaction (rolling back live ones; async-commit ones by their
    /// secondaries) and resolves them all in that Region with one
    /// `ResolveLock`. A Region or key error of that last request comes back
    /// as client-rust has it, `ExtractedErrors([RegionError | KeyError])`,
    /// so a caller under a retry stage can re-scan the Region.
    pub async fn cleanup_locks(
        &mut self,
        store: RegionStore,
        locks: Vec<kvrpcpb::LockInfo>,
        pd_client: Arc<impl PdClient>,
        keyspace: Keyspace,
    ) -> Result<()> {
        if locks.is_empty() {
            return Ok(());
        }
        // client-rust's fail point: the locks are counted as cleaned up
        // without a request.
        fail::fail_point!("before-cleanup-locks", |_| Ok(()));
        let region = store.region_with_leader.ver_id();
        // Transaction → (commit ts or 0, file-based); ordered so the request
        // is the same for the same locks.
        let mut decided: BTreeMap<u64, (u64, bool)> = BTreeMap::new();
        for lock in locks {
            let txn_id = lock.lock_version;
            if decided.contains_key(&txn_id) || self.ctx.is_region_cleaned(txn_id, &region).await {
                continue;
            }
            let commit_ts = self.decide(&pd_client, keyspace, &lock).await?;
            decided.insert(txn_id, (commit_ts, lock.is_txn_file));
        }
        if decided.is_empty() {
            return Ok(());
        }
        let txn_infos = decided
            .iter()
            .map(|(&txn, &(status, is_txn_file))| kvrpcpb::TxnInfo {
                txn,
                status,
                is_txn_file,
            })
            .collect();
        let request = kvrpcpb::ResolveLockRequest {
            txn_infos,
            ..Default::default()
        };
        let mut response = PlanBuilder::new(Arc::clone(&pd_client), keyspace, request)
            .single_region_with_store(store)
            .await?
            .plan()
            .execute()
            .await?;
        if let Some(e) = response.region_error.take() {
            return Err(Error::ExtractedErrors(vec![Error::RegionError(Box::new(
                e,
            ))]));
        }
        if let Some(e) = response.error.take() {
            return Err(Error::ExtractedErrors(vec![Error::KeyError(Box::new(e))]));
        }
        for txn_id in decided.into_keys() {
            self.ctx.save_cleaned_region(txn_id, region).await;
        }
        Ok(())
    }

    /// The commit ts of `lock`'s transaction (0: rolled back), rolling it
    /// back if it is still running.
    async fn decide(
        &mut self,
        pd_client: &Arc<impl PdClient>,
        keyspace: Keyspace,
        lock: &kvrpcpb::LockInfo,
    ) -> Result<u64> {
        let mut status = self.check_lock(pd_client, keyspace, lock, false).await?;
        if let TransactionStatusKind::Locked(_, primary) = &status.kind {
            if primary.use_async_commit {
                // TiKV does not roll back an async-commit primary: the
                // secondaries decide.
                match self.secondaries(pd_client, keyspace, primary).await? {
                    SecondariesOutcome::Committed(ts) | SecondariesOutcome::AllLocked(ts) => {
                        return Ok(ts)
                    }
                    SecondariesOutcome::RolledBack => return Ok(0),
                    SecondariesOutcome::FellBack => {
                        status = self.check_lock(pd_client, keyspace, lock, true).await?
                    }
                }
            }
        }
        match &status.kind {
            TransactionStatusKind::Committed(ts) => Ok(ts.version()),
            TransactionStatusKind::RolledBack => Ok(0),
            TransactionStatusKind::Locked(_, primary) => {
                Err(Error::ResolveLockError(vec![primary.clone()]))
            }
        }
    }

    /// Asks about `lock`'s transaction with `current_ts = u64::MAX`, which
    /// expires every lock: a running transaction is rolled back.
    async fn check_lock(
        &mut self,
        pd_client: &Arc<impl PdClient>,
        keyspace: Keyspace,
        lock: &kvrpcpb::LockInfo,
        force_sync_commit: bool,
    ) -> Result<Arc<TransactionStatus>> {
        self.check_txn_status(
            Arc::clone(pd_client),
            keyspace,
            lock.lock_version,
            lock.primary_lock.clone(),
            0,
            u64::MAX,
            true,
            force_sync_commit,
            lock.lock_type == kvrpcpb::Op::PessimisticLock as i32,
            lock.is_txn_file,
        )
        .await
    }

    /// What the secondaries of the async-commit transaction whose primary
    /// lock is `primary` say.
    async fn secondaries(
        &mut self,
        pd_client: &Arc<impl PdClient>,
        keyspace: Keyspace,
        primary: &kvrpcpb::LockInfo,
    ) -> Result<SecondariesOutcome> {
        let mut pairs = Vec::new();
        if !primary.secondaries.is_empty() {
            let request = kvrpcpb::CheckSecondaryLocksRequest {
                keys: primary.secondaries.clone(),
                start_version: primary.lock_version,
                ..Default::default()
            };
            let answers: Vec<ResponseWithShard<kvrpcpb::CheckSecondaryLocksResponse, _>> =
                PlanBuilder::fast(Arc::clone(pd_client), keyspace, request)
                    .preserve_shard()
                    .retry_multi_region(DEFAULT_REGION_BACKOFF)
                    .merge(CollectError)
                    .plan()
                    .execute()
                    .await?;
            for ResponseWithShard(mut answer, keys) in answers {
                if let Some(e) = answer.error.take() {
                    return Err(Error::KeyError(Box::new(e)));
                }
                pairs.push((keys, answer));
            }
        }
        Ok(secondaries_outcome(&pairs, primary.min_commit_ts))
    }

    /// Asks `primary`'s Region for the status of transaction `txn_id`
    /// (client-rust's arguments, passed to `CheckTxnStatus` as they are),
    /// answering from the context when a final status is remembered, and
    /// remembering a final one. TiKV's "no lock and no record" is
    /// [`Error::TxnNotFound`]; another key error is [`Error::KeyError`].
    #[allow(clippy::too_many_arguments)]
    pub async fn check_txn_status(
        &mut self,
        pd_client: Arc<impl PdClient>,
        keyspace: Keyspace,
        txn_id: u64,
        primary: Vec<u8>,
        caller_start_ts: u64,
        current_ts: u64,
        rollback_if_not_exist: bool,
        force_sync_commit: bool,
        resolving_pessimistic_lock: bool,
        is_txn_file: bool,
    ) -> Result<Arc<TransactionStatus>> {
        if let Some(status) = self.ctx.get_resolved(txn_id).await {
            return Ok(status);
        }
        let request = kvrpcpb::CheckTxnStatusRequest {
            primary_key: primary,
            lock_ts: txn_id,
            caller_start_ts,
            current_ts,
            rollback_if_not_exist,
            force_sync_commit,
            resolving_pessimistic_lock,
            is_txn_file,
            ..Default::default()
        };
        let mut status = PlanBuilder::fast(Arc::clone(&pd_client), keyspace, request)
            .retry_multi_region(DEFAULT_REGION_BACKOFF)
            .merge(CollectSingle)
            .post_process_default()
            .plan()
            .execute()
            .await?;
        status.check_ttl(pd_client.get_timestamp().await?);
        let status = Arc::new(status);
        if status.is_cacheable() {
            self.ctx.save_resolved(txn_id, Arc::clone(&status)).await;
        }
        Ok(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(
        commit_version: u64,
        lock: Option<kvrpcpb::LockInfo>,
        action: i32,
    ) -> kvrpcpb::CheckTxnStatusResponse {
        kvrpcpb::CheckTxnStatusResponse {
            commit_version,
            lock_ttl: if lock.is_some() { 3_000 } else { 0 },
            lock_info: lock,
            action,
            ..Default::default()
        }
    }

    #[test]
    fn a_status_answer_is_read_and_an_unknown_action_refused() {
        let committed = TransactionStatus::from_response(answer(7 << 18, None, 0)).unwrap();
        assert!(
            matches!(committed.kind, TransactionStatusKind::Committed(ts) if ts.version() == 7 << 18)
        );
        assert!(committed.is_cacheable());
        let rolled_back = TransactionStatus::from_response(answer(0, None, 1)).unwrap();
        assert!(matches!(
            rolled_back.kind,
            TransactionStatusKind::RolledBack
        ));
        assert_eq!(rolled_back.action, kvrpcpb::Action::TtlExpireRollback);
        let unknown = TransactionStatus::from_response(answer(0, None, 99));
        assert!(
            matches!(&unknown, Err(Error::InternalError { message }) if message.contains("action 99")),
            "{unknown:?}"
        );
    }

    #[test]
    fn a_lock_is_final_only_once_expired_and_left_alone() {
        let lock = kvrpcpb::LockInfo {
            lock_version: 100 << 18,
            ..Default::default()
        };
        let mut status = TransactionStatus::from_response(answer(0, Some(lock), 0)).unwrap();
        assert!(matches!(
            status.kind,
            TransactionStatusKind::Locked(3_000, _)
        ));
        // 2,999 ms after the lock was taken: alive.
        status.check_ttl(Timestamp::from_version((100 + 2_999) << 18));
        assert!(!status.is_expired && !status.is_cacheable());
        status.check_ttl(Timestamp::from_version((100 + 3_000) << 18));
        assert!(status.is_expired && status.is_cacheable());
        // Pushed rather than left: the owner is alive and may still commit.
        status.action = kvrpcpb::Action::MinCommitTsPushed;
        assert!(!status.is_cacheable());
    }

    #[tokio::test]
    async fn the_context_is_shared_by_its_clones() {
        let mut ctx = ResolveLocksContext::default();
        let copy = ctx.clone();
        let region = RegionVerId {
            id: 1,
            conf_ver: 1,
            ver: 1,
        };
        assert!(!copy.is_region_cleaned(5, &region).await);
        ctx.save_cleaned_region(5, region).await;
        ctx.save_resolved(
            5,
            Arc::new(TransactionStatus::from_response(answer(0, None, 0)).unwrap()),
        )
        .await;
        assert!(copy.is_region_cleaned(5, &region).await);
        assert!(!copy.is_region_cleaned(6, &region).await);
        assert!(copy.get_resolved(5).await.is_some());
        assert!(copy.get_resolved(6).await.is_none());
    }
}
