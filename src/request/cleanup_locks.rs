//! GC's lock cleanup as a plan stage, with client-rust 0.4.0's names and
//! shapes: [`CleanupLocks`] scans one Region's locks (paging within it) and
//! hands them to a [`LockResolver`], which decides each transaction's fate
//! and resolves all of them in that Region with one `ResolveLock`; the
//! [`ResolveLocksContext`] remembers decided transactions and cleaned
//! Regions across Regions and runs.
//!
//! This is the cleanup a GC worker runs below its safe point: a transaction
//! whose primary is still locked is **rolled back** (it is asked about with
//! `current_ts = u64::MAX`, which expires every lock), unless it uses async
//! commit, whose primary TiKV will not roll back; then its secondaries
//! decide, by the missing-lock rule of [txn.md, "Known upstream
//! defects"](crate::spec::txn#known-upstream-defects-not-to-copy-client-rust-040)
//! (client-rust 0.4.0 leaves that rule out here). Readers never use this:
//! they wait live locks out
//! ([`ResolveLock`](super::ResolveLock)), and
//! [`TransactionClient::cleanup_locks`](crate::TransactionClient::cleanup_locks)
//! refuses to pass a live lock instead of rolling it back.
//!
//! ```
//! # #[cfg(feature = "mock")]
//! # async fn example() -> tikv_plan::Result<()> {
//! use std::sync::Arc;
//! use tikv_plan::mock::{self, MockPdClient};
//! use tikv_plan::proto::kvrpcpb;
//! use tikv_plan::request::{Collect, Keyspace, Plan, PlanBuilder};
//! use tikv_plan::transaction::{ResolveLocksContext, ResolveLocksOptions};
//! use tikv_plan::transaction_lowering::new_scan_lock_request;
//! use tikv_plan::{Backoff, Timestamp, TimestampExt};
//!
//! // One Region; the store holds no locks below the safe point.
//! let pd = Arc::new(MockPdClient::new(vec![mock::region(
//!     1, b"", b"", &[mock::voter(11, 1)], Some(11),
//! )]));
//! pd.set_dispatch_hook(|_peer, _request| Ok(Box::new(kvrpcpb::ScanLockResponse::default())));
//!
//! let safepoint = Timestamp::from_version(42);
//! let plan = PlanBuilder::new(pd, Keyspace::Disable, new_scan_lock_request((..).into(), &safepoint, 1024))
//!     .cleanup_locks(
//!         ResolveLocksContext::default(),
//!         ResolveLocksOptions::default(),
//!         Backoff::no_backoff(),
//!         Keyspace::Disable,
//!     )
//!     .retry_multi_region(Backoff::no_jitter_backoff(2, 500, 10))
//!     .extract_error()
//!     .merge(Collect)
//!     .plan();
//! assert_eq!(plan.execute().await?.resolved_locks, 0);
//! # Ok(())
//! # }
//! # #[cfg(feature = "mock")]
//! # tokio::runtime::Runtime::new().unwrap().block_on(example()).unwrap();
//! ```

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use super::lock_rules::{lock_until_expired_ms, secondaries_outcome, SecondariesOutcome};
use super::plan::{
    CleanupLocksResult, Collect, DefaultProcessor, Merge, Plan, Process, ResponseWithShard,
};
use super::{
    CollectError, CollectSingle, HasKeyErrors, HasLocks, HasNextBatch, HasRegionError, Keyspace,
    NextBatch, PlanBuilder, Shardable,
};
use crate::backoff::{Backoff, DEFAULT_REGION_BACKOFF};
use crate::pd::{PdClient, Timestamp, TimestampExt};
use crate::proto::kvrpcpb;
use crate::region::{RegionVerId, RegionWithLeader};
use crate::store::RegionStore;
use crate::{Error, Result};

/// How many locks one `ScanLock` request returns at most during GC.
pub(crate) const SCAN_LOCK_BATCH_SIZE: u32 = 1024;

/// Options of a lock cleanup ([`CleanupLocks`],
/// [`TransactionClient::cleanup_locks`](crate::TransactionClient::cleanup_locks)):
/// client-rust's `ResolveLocksOptions`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ResolveLocksOptions {
    /// Resolve async-commit locks only.
    pub async_commit_only: bool,
    /// Locks per `ScanLock` request (per Region).
    pub batch_size: u32,
}

impl Default for ResolveLocksOptions {
    fn default() -> Self {
        ResolveLocksOptions {
            async_commit_only: false,
            batch_size: SCAN_LOCK_BATCH_SIZE,
        }
    }
}

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

/// Locks a map, ignoring poisoning (a panic elsewhere leaves the map
/// consistent: every update is one insert).
fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl ResolveLocksContext {
    /// The remembered status of transaction `txn_id`.
    pub async fn get_resolved(&self, txn_id: u64) -> Option<Arc<TransactionStatus>> {
        locked(&self.resolved).get(&txn_id).cloned()
    }

    /// Remembers the status of transaction `txn_id`.
    pub async fn save_resolved(&mut self, txn_id: u64, txn_status: Arc<TransactionStatus>) {
        locked(&self.resolved).insert(txn_id, txn_status);
    }

    /// True when `txn_id`'s locks in `region` were resolved already.
    pub async fn is_region_cleaned(&self, txn_id: u64, region: &RegionVerId) -> bool {
        locked(&self.clean_regions)
            .get(&txn_id)
            .is_some_and(|regions| regions.contains(region))
    }

    /// Remembers that `txn_id`'s locks in `region` are resolved.
    pub async fn save_cleaned_region(&mut self, txn_id: u64, region: RegionVerId) {
        locked(&self.clean_regions)
            .entry(txn_id)
            .or_default()
            .insert(region);
    }
}

/// GC's lock resolver (client-rust's `LockResolver`): decides the fate of
/// the transactions whose locks a Region holds, rolling back the ones still
/// running, and resolves their locks in that Region. For GC only: it rolls back running
/// transactions (see [`CleanupLocks`]).
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
                PlanBuilder::new(Arc::clone(pd_client), keyspace, request)
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
        let mut status = PlanBuilder::new(Arc::clone(&pd_client), keyspace, request)
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

/// Cleans up the locks one Region holds, under a retry stage that shards
/// the scan by Region (client-rust's `CleanupLocks`; built with
/// [`PlanBuilder::cleanup_locks`]). Per Region it scans a page of locks
/// (`inner`, a `ScanLock` aimed at the Region), hands them to a
/// [`LockResolver`], and scans on while pages come back full. A Region or
/// key error is returned in the result, for the retry stage above to act on.
pub struct CleanupLocks<P: Plan, PdC: PdClient> {
    /// The lock scan.
    pub inner: P,
    /// What the cleanup remembers across Regions.
    pub ctx: ResolveLocksContext,
    /// Page size and the async-commit-only filter.
    pub options: ResolveLocksOptions,
    /// The Region and store the retry stage aimed the scan at.
    pub store: Option<RegionStore>,
    /// The PD client the resolver's own requests route through.
    pub pd_client: Arc<PdC>,
    /// The keyspace of those requests.
    pub keyspace: Keyspace,
    /// Kept for client-rust's shape; the resolver's requests use the
    /// default Region backoff, as client-rust's do.
    pub backoff: Backoff,
}

impl<P: Plan, PdC: PdClient> Clone for CleanupLocks<P, PdC> {
    fn clone(&self) -> Self {
        CleanupLocks {
            inner: self.inner.clone(),
            ctx: self.ctx.clone(),
            options: self.options,
            store: self.store.clone(),
            pd_client: Arc::clone(&self.pd_client),
            keyspace: self.keyspace,
            backoff: self.backoff.clone(),
        }
    }
}

impl<P: Plan, PdC: PdClient> CleanupLocks<P, PdC> {
    /// One Region's cleanup: the result, with the Region or key error that
    /// ended it, if any.
    async fn clean_region(&self, store: &RegionStore) -> Result<CleanupLocksResult>
    where
        P: NextBatch,
        P::Result: HasLocks + HasNextBatch + HasKeyErrors + HasRegionError,
    {
        let mut result = CleanupLocksResult::default();
        let mut scan = self.inner.clone();
        let mut resolver = LockResolver::new(self.ctx.clone());
        let batch_size = self.options.batch_size.max(1) as usize;
        loop {
            let mut page = scan.execute().await?;
            if let Some(errors) = page.key_errors() {
                result.key_error = Some(errors);
                return Ok(result);
            }
            if let Some(e) = page.region_error() {
                result.region_error = Some(e);
                return Ok(result);
            }
            let next = page.has_next_batch();
            let mut locks = page.take_locks();
            let full = locks.len() >= batch_size;
            if self.options.async_commit_only {
                locks.retain(|l| l.use_async_commit);
            }
            let count = locks.len();
            match resolver
                .cleanup_locks(
                    store.clone(),
                    locks,
                    Arc::clone(&self.pd_client),
                    self.keyspace,
                )
                .await
            {
                Ok(()) => result.resolved_locks += count,
                Err(Error::ExtractedErrors(mut errors)) => {
                    match errors.pop() {
                        Some(Error::RegionError(e)) if errors.is_empty() => {
                            result.region_error = Some(*e)
                        }
                        Some(last) => {
                            errors.push(last);
                            result.key_error = Some(errors);
                        }
                        None => {}
                    }
                    return Ok(result);
                }
                Err(e) => return Err(e),
            }
            match next {
                Some(range) if full && in_region(&store.region_with_leader, &range.0) => {
                    scan.next_batch(range)
                }
                _ => return Ok(result),
            }
        }
    }
}

fn in_region(region: &RegionWithLeader, key: &[u8]) -> bool {
    key >= region.start_key() && (region.end_key().is_empty() || key < region.end_key())
}

#[async_trait]
impl<P: Plan + Shardable + NextBatch, PdC: PdClient> Plan for CleanupLocks<P, PdC>
where
    P::Result: HasLocks + HasNextBatch + HasKeyErrors + HasRegionError,
{
    type Result = CleanupLocksResult;

    async fn execute(&self) -> Result<Self::Result> {
        let store = self.store.as_ref().ok_or_else(|| Error::InternalError {
            message: "CleanupLocks ran without a Region to clean: put it under \
                      retry_multi_region, which aims it at each Region of the scan"
                .to_owned(),
        })?;
        self.clean_region(store).await
    }

    fn describe(&self) -> String {
        format!("lock cleanup: {}", self.inner.describe())
    }

    fn label(&self) -> &'static str {
        self.inner.label()
    }
}

#[async_trait]
impl<P: Plan + Shardable + Send + Sync, PdC: PdClient> Shardable for CleanupLocks<P, PdC> {
    type Shard = P::Shard;

    async fn shards<PdC2: PdClient>(
        &self,
        pd_client: &Arc<PdC2>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        self.inner.shards(pd_client).await
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        self.inner.apply_shard(shard);
    }

    fn template(&self) -> Self {
        CleanupLocks {
            inner: self.inner.template(),
            store: None,
            ..self.clone()
        }
    }

    fn for_shard(&self, shard: Self::Shard, whole: bool) -> Self {
        CleanupLocks {
            inner: self.inner.for_shard(shard, whole),
            store: None,
            ..self.clone()
        }
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        self.store = Some(store.clone());
        self.inner.apply_store(store)
    }
}

/// Adds up the locks the Regions' cleanups resolved; the first failure
/// wins (client-rust's merge).
impl Merge<CleanupLocksResult> for Collect {
    type Out = CleanupLocksResult;

    fn merge(&self, input: Vec<Result<CleanupLocksResult>>) -> Result<Self::Out> {
        let mut total = CleanupLocksResult::default();
        for result in input {
            total.resolved_locks += result?.resolved_locks;
        }
        Ok(total)
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

    #[test]
    fn the_merge_adds_up_and_stops_at_a_failure() {
        let ok = |n| {
            Ok(CleanupLocksResult {
                resolved_locks: n,
                ..Default::default()
            })
        };
        assert_eq!(Collect.merge(vec![ok(2), ok(3)]).unwrap().resolved_locks, 5);
        let failed = Collect.merge(vec![
            ok(2),
            Err(Error::InternalError {
                message: "x".into(),
            }),
        ]);
        assert!(failed.is_err());
    }
}
