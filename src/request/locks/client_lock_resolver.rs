//! Lock resolution ([txn.md, "The
//! model"](crate::spec::txn#the-model-percolator-as-tikv-runs-it), lock
//! resolution): a reader or writer that meets another transaction's lock asks
//! the lock's primary for the transaction's status (`CheckTxnStatus`), and for
//! an async-commit primary asks the secondaries (`CheckSecondaryLocks`, with
//! the missing-lock rule); a finished transaction's locks are then resolved per
//! Region (`ResolveLock`), once per (transaction, Region) however many readers
//! meet them at the same time. A live lock is waited out by its TTL (the
//! [`ResolveLock`](crate::request::ResolveLock) stage sleeps, bounded by the
//! request deadline).
//!
//! The decisions are pure functions over the answers: [`txn_status`] and
//! [`secondaries_outcome`]; [`ClientLockResolver`] only carries them out.
//! GC's resolver, client-rust's `LockResolver`, which rolls back live
//! transactions, is another: [`LockResolver`](super::lock_resolver::LockResolver),
//! run Region by Region by the [`CleanupLocks`](crate::request::plan::CleanupLocks) stage.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::{BoxFuture, FutureExt, Shared};
use tracing::debug;

use super::lock_rules::{lock_until_expired_ms, secondaries_outcome, SecondariesOutcome};
use super::resolve_in_region::ResolveLockInRegion;
use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::pd::TimestampExt;
use crate::proto::kvrpcpb;
use crate::region::RegionVerId;
use crate::request::plan::base::{CollectError, CollectSingle, ResponseWithShard};
use crate::request::plan::builder::PlanBuilder;
use crate::request::plan::call_deadline;
use crate::request::plan::fast_dispatch::FastDispatch;
use crate::request::plan::keyspace::Keyspace;
use crate::request::plan::resolve_lock::{HasLocks, LockResolve, ResolveLock, ResolvePass};
use crate::request::plan::stage::TypedCall;
use crate::request::plan::traits::Plan;
use crate::request::routing::state::RoutingState;
use crate::{Config, Result};

/// How long a resolver waits before asking again about a transaction whose
/// primary has neither lock nor record yet (its prewrite may be in flight),
/// at most: the wait is also bounded by the remaining TTL of the lock met.
pub const PRIMARY_NOT_FOUND_RECHECK: Duration = Duration::from_millis(100);

/// What a resolver does when the primary of the lock it met has no lock
/// and no record (`TxnNotFound` from `CheckTxnStatus` without rollback):
/// wait while the lock met is alive — for a pessimistic lock its whole TTL,
/// for a prewrite lock at most [`PRIMARY_NOT_FOUND_RECHECK`] — and roll
/// back only once it expired (`None`: ask again with
/// `rollback_if_not_exist`).
pub fn primary_not_found_wait(lock: &kvrpcpb::LockInfo, current_version: u64) -> Option<u64> {
    let left = lock_until_expired_ms(lock.lock_version, lock.lock_ttl, current_version);
    if left == 0 {
        return None;
    }
    if is_pessimistic(lock) {
        Some(left)
    } else {
        Some(left.min(PRIMARY_NOT_FOUND_RECHECK.as_millis() as u64))
    }
}

/// What the primary says about a transaction.
#[derive(Debug, Clone, PartialEq)]
pub enum TxnStatus {
    /// Committed at this timestamp: resolve its locks as committed.
    Committed(u64),
    /// Rolled back (or never there, now protected by a rollback record):
    /// resolve its locks as rolled back.
    RolledBack,
    /// Still locked: wait `expires_in_ms` (0: expired, which only happens
    /// for an async-commit primary, whose fate the secondaries decide).
    /// `pushed`: the reader may read past it now.
    Alive {
        /// Milliseconds until the primary's lock expires.
        expires_in_ms: u64,
        /// The primary's min_commit_ts was pushed above the reader's ts.
        pushed: bool,
        /// The primary's lock, when it is an async-commit lock.
        async_commit: Option<kvrpcpb::LockInfo>,
    },
}

/// Reads a `CheckTxnStatus` answer for the transaction `lock_version`,
/// asked at `current_version`.
pub fn txn_status(
    response: &kvrpcpb::CheckTxnStatusResponse,
    lock_version: u64,
    current_version: u64,
) -> TxnStatus {
    if response.commit_version > 0 {
        return TxnStatus::Committed(response.commit_version);
    }
    if response.lock_ttl == 0 {
        return TxnStatus::RolledBack;
    }
    let async_commit = response
        .lock_info
        .as_ref()
        .filter(|l| l.use_async_commit)
        .cloned();
    TxnStatus::Alive {
        expires_in_ms: lock_until_expired_ms(lock_version, response.lock_ttl, current_version),
        pushed: response.action == kvrpcpb::Action::MinCommitTsPushed as i32,
        async_commit,
    }
}

/// What lock resolution has done, for tests and monitoring. Counters only
/// grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct LockStats {
    /// `CheckTxnStatus` calls.
    pub check_txn_status: u64,
    /// `CheckSecondaryLocks` rounds (one per async-commit transaction
    /// checked).
    pub check_secondary_locks: u64,
    /// `ResolveLock` requests sent (one per transaction and Region).
    pub resolve_lock_sent: u64,
    /// Resolutions that joined another reader's resolution of the same
    /// transaction and Region instead of sending their own.
    pub resolve_lock_shared: u64,
}

#[derive(Debug, Default)]
struct LockCounters {
    check_txn_status: AtomicU64,
    check_secondary_locks: AtomicU64,
    resolve_lock_sent: AtomicU64,
    resolve_lock_shared: AtomicU64,
}

/// A resolution several readers wait on; its error is shared (`Error` is
/// not `Clone`) and handed back with [`Error::from_shared`].
type SharedResolve = Shared<BoxFuture<'static, Result<(), Arc<crate::Error>>>>;

/// Resolves other transactions' locks through the plan (every RPC routes
/// leader-first with voter fallback).
pub(crate) struct ClientLockResolver<PdC: PdClient> {
    pd: Arc<PdC>,
    keyspace: Keyspace,
    routing: Arc<RoutingState>,
    backoff: Backoff,
    in_flight: Mutex<HashMap<(u64, RegionVerId), SharedResolve>>,
    counters: LockCounters,
    /// The client's resource group and request source, as context fields.
    tags: crate::config::WireTags,
}

/// True for a pessimistic lock (not yet prewritten).
fn is_pessimistic(lock: &kvrpcpb::LockInfo) -> bool {
    lock.lock_type == kvrpcpb::Op::PessimisticLock as i32
}

impl<PdC: PdClient> ClientLockResolver<PdC> {
    /// A resolver over `pd`: the transactional client's (which encodes
    /// keys), or the PD client of a plan built with
    /// [`PlanBuilder::resolve_lock`](crate::request::PlanBuilder::resolve_lock),
    /// which locates lock keys as it locates the plan's own. Its requests
    /// carry `keyspace` in their context; lock keys are used as TiKV
    /// reports them (with the keyspace prefix).
    pub(crate) fn new(
        pd: Arc<PdC>,
        routing: Arc<RoutingState>,
        backoff: Backoff,
        keyspace: Keyspace,
    ) -> Self {
        ClientLockResolver {
            pd,
            keyspace,
            routing,
            backoff,
            in_flight: Mutex::new(HashMap::new()),
            counters: LockCounters::default(),
            tags: Default::default(),
        }
    }

    /// The counters.
    pub fn stats(&self) -> LockStats {
        let c = &self.counters;
        LockStats {
            check_txn_status: c.check_txn_status.load(Ordering::Relaxed),
            check_secondary_locks: c.check_secondary_locks.load(Ordering::Relaxed),
            resolve_lock_sent: c.resolve_lock_sent.load(Ordering::Relaxed),
            resolve_lock_shared: c.resolve_lock_shared.load(Ordering::Relaxed),
        }
    }

    fn builder<Req: TypedCall>(&self, request: Req) -> PlanBuilder<PdC, FastDispatch<Req>> {
        PlanBuilder::fast(Arc::clone(&self.pd), self.keyspace, request)
            .routing(Arc::clone(&self.routing))
            .tagged(&self.tags)
    }

    /// Tags the resolver's requests (check_txn_status, check_secondary_locks,
    /// resolve_lock, pessimistic rollback) with the client's tags: a
    /// resolution is shared by every reader that meets the lock, so it
    /// carries the client's resource group and source, never one
    /// transaction's (nor a transaction source or tag: its writes settle
    /// another transaction's locks, as client-go's resolver sends them).
    pub(crate) fn with_tags(mut self, tags: &crate::RequestTags) -> Self {
        let mut shared = crate::RequestTags::new();
        shared.resource_group.clone_from(&tags.resource_group);
        shared.request_source.clone_from(&tags.request_source);
        self.tags = shared.wire();
        self
    }

    /// One pass over `locks` met by a request of a transaction at
    /// `caller_start_ts` (0 for writers, which must not push others'
    /// `min_commit_ts`).
    pub(crate) async fn resolve_locks(
        self: &Arc<Self>,
        locks: Vec<kvrpcpb::LockInfo>,
        caller_start_ts: u64,
    ) -> Result<ResolvePass> {
        let mut alive = Vec::new();
        let mut wait_ms = u64::MAX;
        // One status per transaction and kind of lock: a pessimistic lock
        // is checked with `resolving_pessimistic_lock`, and TiKV's answer
        // to that (an expired pessimistic primary removed, no rollback
        // written) says nothing about the transaction's prewritten locks.
        // Its prewrite may still come (TiKV then writes the primary's lock
        // anyway) and commit; so a prewritten lock of the same
        // transaction gets a check of its own.
        let mut statuses: HashMap<(u64, bool), TxnStatus> = HashMap::new();
        for lock in locks {
            let slot = (lock.lock_version, is_pessimistic(&lock));
            let status = match statuses.get(&slot) {
                Some(s) => s.clone(),
                None => {
                    let s = self.txn_status_of(&lock, caller_start_ts).await?;
                    statuses.insert(slot, s.clone());
                    s
                }
            };
            match status {
                TxnStatus::Committed(ts) => self.resolve_key(&lock, ts).await?,
                TxnStatus::RolledBack => self.resolve_key(&lock, 0).await?,
                TxnStatus::Alive { pushed: true, .. } if caller_start_ts != 0 => {}
                TxnStatus::Alive { expires_in_ms, .. } => {
                    wait_ms = wait_ms.min(expires_in_ms.max(1));
                    alive.push(lock);
                }
            }
        }
        if alive.is_empty() {
            Ok(ResolvePass::Done)
        } else {
            Ok(ResolvePass::Wait(Duration::from_millis(wait_ms), alive))
        }
    }

    /// The status of `lock`'s transaction, deciding async-commit
    /// transactions whose primary lock expired through their secondaries.
    async fn txn_status_of(
        self: &Arc<Self>,
        lock: &kvrpcpb::LockInfo,
        caller_start_ts: u64,
    ) -> Result<TxnStatus> {
        let status = self.check_txn_status(lock, caller_start_ts, false).await?;
        let TxnStatus::Alive {
            expires_in_ms: 0,
            async_commit: Some(primary),
            ..
        } = &status
        else {
            return Ok(status);
        };
        self.counters
            .check_secondary_locks
            .fetch_add(1, Ordering::Relaxed);
        let request = kvrpcpb::CheckSecondaryLocksRequest {
            keys: primary.secondaries.clone(),
            start_version: lock.lock_version,
            ..Default::default()
        };
        let answers: Vec<ResponseWithShard<kvrpcpb::CheckSecondaryLocksResponse, Vec<Vec<u8>>>> =
            if primary.secondaries.is_empty() {
                Vec::new()
            } else {
                self.builder(request)
                    .preserve_shard()
                    .retry_multi_region(self.backoff.clone())
                    .merge(CollectError)
                    .plan()
                    .execute()
                    .await?
            };
        let mut pairs = Vec::with_capacity(answers.len());
        for ResponseWithShard(mut answer, keys) in answers {
            if let Some(e) = answer.error.take() {
                return Err(crate::Error::KeyError(Box::new(e)));
            }
            pairs.push((keys, answer));
        }
        let outcome = secondaries_outcome(&pairs, primary.min_commit_ts);
        debug!(
            "async-commit transaction {}: secondaries say {outcome:?}",
            lock.lock_version
        );
        let status = match outcome {
            SecondariesOutcome::Committed(ts) | SecondariesOutcome::AllLocked(ts) => {
                TxnStatus::Committed(ts)
            }
            SecondariesOutcome::RolledBack => TxnStatus::RolledBack,
            SecondariesOutcome::FellBack => {
                self.check_txn_status(lock, caller_start_ts, true).await?
            }
        };
        // The primary is resolved with the others: its lock is the one
        // every later reader asks about.
        let mut primary_lock = lock.clone();
        primary_lock.key = lock.primary_lock.clone();
        match status {
            TxnStatus::Committed(ts) => self.resolve_key(&primary_lock, ts).await?,
            TxnStatus::RolledBack => self.resolve_key(&primary_lock, 0).await?,
            TxnStatus::Alive { .. } => {}
        }
        Ok(status)
    }

    async fn check_txn_status(
        &self,
        lock: &kvrpcpb::LockInfo,
        caller_start_ts: u64,
        force_sync_commit: bool,
    ) -> Result<TxnStatus> {
        self.counters
            .check_txn_status
            .fetch_add(1, Ordering::Relaxed);
        let current = Arc::clone(&self.pd).get_timestamp().await?.version();
        // A missing primary is rolled back (and protected) only once the
        // lock that led here expired; before, its prewrite may still be in
        // flight ([txn.md](crate::spec::txn#behaviour-we-require)).
        let not_found_wait = primary_not_found_wait(lock, current);
        let request = kvrpcpb::CheckTxnStatusRequest {
            primary_key: lock.primary_lock.clone(),
            lock_ts: lock.lock_version,
            caller_start_ts,
            current_ts: current,
            rollback_if_not_exist: not_found_wait.is_none(),
            force_sync_commit,
            resolving_pessimistic_lock: is_pessimistic(lock),
            is_txn_file: lock.is_txn_file,
            ..Default::default()
        };
        let response = self
            .builder(request)
            .retry_multi_region(self.backoff.clone())
            .merge(CollectSingle)
            .extract_error()
            .plan()
            .execute()
            .await;
        match response {
            Ok(response) => Ok(txn_status(&response, lock.lock_version, current)),
            // Only asked without rollback, so the lock met is alive: wait
            // (at least a millisecond) and check again.
            Err(e) if is_txn_not_found(&e) => {
                let wait = not_found_wait.unwrap_or(1);
                debug!(
                    "transaction {}: primary not found yet, the lock met is alive for {wait} ms more; checking again",
                    lock.lock_version
                );
                Ok(TxnStatus::Alive {
                    expires_in_ms: wait,
                    pushed: false,
                    async_commit: None,
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Resolves the locks of `lock`'s transaction in the Region holding
    /// `lock.key` (commit at `commit_ts`, or roll back with 0); concurrent
    /// callers for the same transaction and Region share one request.
    async fn resolve_key(self: &Arc<Self>, lock: &kvrpcpb::LockInfo, commit_ts: u64) -> Result<()> {
        if is_pessimistic(lock) {
            // A pessimistic lock of a finished transaction is a leftover.
            let request = kvrpcpb::PessimisticRollbackRequest {
                keys: vec![lock.key.clone()],
                start_version: lock.lock_version,
                for_update_ts: u64::MAX,
                ..Default::default()
            };
            self.builder(request)
                .retry_multi_region(self.backoff.clone())
                .merge(CollectError)
                .extract_error()
                .plan()
                .execute()
                .await?;
            return Ok(());
        }
        let region = self.pd.region_for_key(&lock.key).await?;
        let slot = (lock.lock_version, region.ver_id());
        let (future, joined) = {
            let mut in_flight = crate::sync::lock(&self.in_flight);
            match in_flight.get(&slot) {
                Some(f) => (f.clone(), true),
                None => {
                    let this = Arc::clone(self);
                    let request = ResolveLockInRegion {
                        key: lock.key.clone(),
                        request: kvrpcpb::ResolveLockRequest {
                            start_version: lock.lock_version,
                            commit_version: commit_ts,
                            is_txn_file: lock.is_txn_file,
                            ..Default::default()
                        },
                    };
                    let slot2 = slot;
                    let f: BoxFuture<'static, Result<()>> = async move {
                        this.counters
                            .resolve_lock_sent
                            .fetch_add(1, Ordering::Relaxed);
                        let result = this
                            .builder(request)
                            .retry_multi_region(this.backoff.clone())
                            .merge(CollectSingle)
                            .extract_error()
                            .plan()
                            .execute()
                            .await
                            .map(|_| ());
                        crate::sync::lock(&this.in_flight).remove(&slot2);
                        result
                    }
                    .boxed();
                    // Run on its own task: it finishes (and removes its
                    // entry) even when every caller waiting on it is
                    // dropped, so no entry is left behind.
                    let task = tokio::spawn(f);
                    let shared = async move {
                        task.await
                            .unwrap_or_else(|e| {
                                Err(crate::Error::InternalError {
                                    message: format!("resolving locks stopped: {e}"),
                                })
                            })
                            .map_err(Arc::new)
                    }
                    .boxed()
                    .shared();
                    in_flight.insert(slot, shared.clone());
                    (shared, false)
                }
            }
        };
        if joined {
            self.counters
                .resolve_lock_shared
                .fetch_add(1, Ordering::Relaxed);
        }
        // The shared resolution runs on its own task, beyond the call's
        // scope: wait for it only until the call's deadline.
        call_deadline::cut("resolving a lock", async {
            future.await.map_err(crate::Error::from_shared)
        })
        .await
    }

    /// Every lock with `start_ts <= max_version` in `[start, end)` (empty
    /// `end`: unbounded), in key order, paging `batch_size` locks per
    /// Region request: one scan covers every Region of a range, and a
    /// Region whose page came back full is scanned again past its last
    /// lock.
    pub async fn scan_locks(
        &self,
        start: Vec<u8>,
        end: Vec<u8>,
        max_version: u64,
        batch_size: u32,
    ) -> Result<Vec<kvrpcpb::LockInfo>> {
        let batch_size = batch_size.max(1);
        let mut out = Vec::new();
        let mut ranges = vec![(start, end)];
        while let Some((start, end)) = ranges.pop() {
            let request = kvrpcpb::ScanLockRequest {
                start_key: start,
                end_key: end,
                max_version,
                limit: batch_size,
                ..Default::default()
            };
            let pieces = self
                .builder(request)
                .preserve_shard()
                .retry_multi_region(self.backoff.clone())
                .merge(CollectError)
                .plan()
                .execute()
                .await?;
            for ResponseWithShard(mut response, (_, piece_end)) in pieces {
                if let Some(e) = response.error.take() {
                    return Err(crate::Error::KeyError(Box::new(e)));
                }
                let full = response.locks.len() as u32 >= batch_size;
                if let (true, Some(last)) = (full, response.locks.last()) {
                    // A full page: the Region may hold more after its last key.
                    let next: Vec<u8> = crate::Key::from(last.key.clone()).next_key().into();
                    if piece_end.is_empty() || next < piece_end {
                        ranges.push((next, piece_end));
                    }
                }
                out.extend(response.locks);
            }
        }
        out.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(out)
    }
}

/// True for TiKV's answer that a transaction has neither lock nor record
/// on its primary.
fn is_txn_not_found(e: &crate::Error) -> bool {
    match e {
        crate::Error::TxnNotFound(_) => true,
        crate::Error::KeyError(k) => k.txn_not_found.is_some(),
        _ => false,
    }
}

impl<PdC: PdClient> LockResolve for ClientLockResolver<PdC> {
    fn resolve_pass(
        self: Arc<Self>,
        locks: Vec<kvrpcpb::LockInfo>,
        caller_start_ts: u64,
    ) -> BoxFuture<'static, Result<ResolvePass>> {
        Box::pin(async move { self.resolve_locks(locks, caller_start_ts).await })
    }
}

/// Resolves `locks` once (no waiting): the locks of finished transactions
/// are resolved, and the ones still alive are returned.
pub async fn resolve_locks_once<PdC: PdClient>(
    resolver: &Arc<ClientLockResolver<PdC>>,
    locks: Vec<kvrpcpb::LockInfo>,
) -> Result<Vec<kvrpcpb::LockInfo>> {
    match resolver.resolve_locks(locks, 0).await? {
        ResolvePass::Done => Ok(Vec::new()),
        ResolvePass::Wait(_, alive) => Ok(alive),
    }
}

// Lock resolution as a builder step (client-rust's), beside the resolver
// it builds.
impl<PdC: PdClient, P: Plan> PlanBuilder<PdC, P> {
    /// Resolves the locks the plan meets and re-runs it (client-rust's
    /// signature): `timestamp` is the reading transaction's start ts (0 for
    /// a writer, which must not push others' `min_commit_ts`), `keyspace`
    /// the one the resolver's requests run in. Live locks are waited out by
    /// their TTL within the request deadline (see
    /// [`ResolveLock`](crate::request::ResolveLock)); with no `backoff`
    /// ([`Backoff::no_backoff`]) nothing is resolved and the locks met are
    /// returned as [`Error::ResolveLockError`](crate::Error::ResolveLockError).
    ///
    /// The resolver routes through this builder's PD client (and its routing
    /// state, when [`routing`](PlanBuilder::routing) gave one), so lock keys must be
    /// in the form that PD client locates, as the plan's own keys are.
    pub fn resolve_lock(
        self,
        timestamp: crate::pd::Timestamp,
        backoff: Backoff,
        keyspace: Keyspace,
    ) -> PlanBuilder<PdC, ResolveLock<P, PdC>>
    where
        P::Result: HasLocks,
    {
        let routing = self
            .routing_state()
            .cloned()
            .unwrap_or_else(|| Arc::new(RoutingState::new(&Config::default())));
        let resolver = Arc::new(ClientLockResolver::new(
            Arc::clone(self.pd_client()),
            routing,
            crate::backoff::DEFAULT_REGION_BACKOFF,
            keyspace,
        ));
        let caller_start_ts = crate::pd::TimestampExt::version(&timestamp);
        self.resolve_lock_with(resolver, caller_start_ts, backoff)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_answers_are_read_by_the_rules() {
        let ts = |ms: u64| ms << 18;
        let committed = kvrpcpb::CheckTxnStatusResponse {
            commit_version: 7,
            ..Default::default()
        };
        assert_eq!(
            txn_status(&committed, ts(1), ts(2)),
            TxnStatus::Committed(7)
        );
        let rolled = kvrpcpb::CheckTxnStatusResponse::default();
        assert_eq!(txn_status(&rolled, ts(1), ts(2)), TxnStatus::RolledBack);
        let alive = kvrpcpb::CheckTxnStatusResponse {
            lock_ttl: 3000,
            ..Default::default()
        };
        assert_eq!(
            txn_status(&alive, ts(1000), ts(2000)),
            TxnStatus::Alive {
                expires_in_ms: 2000,
                pushed: false,
                async_commit: None
            }
        );
        assert_eq!(lock_until_expired_ms(ts(1000), 3000, ts(9000)), 0);
    }

    /// A resolution whose every caller gave up still finishes and leaves
    /// no entry behind in the per-(transaction, Region) map.
    #[cfg(feature = "mock")]
    #[tokio::test(start_paused = true)]
    async fn a_dropped_resolution_leaves_no_entry_behind() {
        use crate::mock::{self, MockPdClient};
        use crate::proto::errorpb;
        use std::sync::atomic::AtomicUsize;

        let pd = Arc::new(MockPdClient::new(vec![mock::region(
            1,
            b"",
            b"",
            &[mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)],
            Some(11),
        )]));
        let resolves = Arc::new(AtomicUsize::new(0));
        let seen = Arc::clone(&resolves);
        pd.set_dispatch_hook(move |_peer, request| {
            let any = request.as_any();
            if any.is::<kvrpcpb::CheckTxnStatusRequest>() {
                return Ok(Box::new(kvrpcpb::CheckTxnStatusResponse {
                    commit_version: 5,
                    ..Default::default()
                }));
            }
            if any.is::<kvrpcpb::ResolveLockRequest>() && seen.fetch_add(1, Ordering::SeqCst) == 0 {
                // The first attempt meets a Region in a merge: backed off.
                return mock::response_with_region_error(
                    request,
                    Some(errorpb::Error {
                        proposal_in_merging_mode: Some(errorpb::ProposalInMergingMode::default()),
                        ..Default::default()
                    }),
                );
            }
            mock::response_with_region_error(request, None)
        });
        let resolver = Arc::new(ClientLockResolver::new(
            pd,
            Arc::new(RoutingState::new(&crate::Config::default())),
            Backoff::no_jitter_backoff(1000, 1000, 5),
            Keyspace::Disable,
        ));
        let lock = kvrpcpb::LockInfo {
            key: b"k".to_vec(),
            primary_lock: b"k".to_vec(),
            lock_version: 3,
            lock_ttl: 3000,
            ..Default::default()
        };
        // The caller gives up during the backoff.
        let gave_up = tokio::time::timeout(
            Duration::from_millis(10),
            resolver.resolve_locks(vec![lock], 0),
        )
        .await;
        assert!(gave_up.is_err());
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(
            resolves.load(Ordering::SeqCst),
            2,
            "the resolution finished"
        );
        assert!(crate::sync::lock(&resolver.in_flight).is_empty());
    }

    #[test]
    fn a_huge_wire_ttl_never_wraps_into_expired() {
        let ts = |ms: u64| ms << 18;
        assert_eq!(
            lock_until_expired_ms(ts(1000), u64::MAX, ts(9000)),
            u64::MAX - 9000
        );
        let lock = kvrpcpb::LockInfo {
            lock_version: ts(1000),
            lock_ttl: u64::MAX,
            ..Default::default()
        };
        assert!(primary_not_found_wait(&lock, ts(u64::MAX >> 18)).is_some());
    }

    #[test]
    fn a_missing_primary_is_waited_for_until_the_lock_met_expires() {
        let ts = |ms: u64| ms << 18;
        let prewrite = kvrpcpb::LockInfo {
            lock_version: ts(1000),
            lock_ttl: 3000,
            lock_type: kvrpcpb::Op::Put as i32,
            ..Default::default()
        };
        // Alive: check again soon (its prewrite may land any moment).
        assert_eq!(primary_not_found_wait(&prewrite, ts(1500)), Some(100));
        assert_eq!(primary_not_found_wait(&prewrite, ts(3950)), Some(50));
        // Expired: roll back.
        assert_eq!(primary_not_found_wait(&prewrite, ts(4000)), None);
        // A pessimistic lock is waited out for its whole TTL.
        let pessimistic = kvrpcpb::LockInfo {
            lock_type: kvrpcpb::Op::PessimisticLock as i32,
            lock_ttl: 20_000,
            ..prewrite
        };
        assert_eq!(primary_not_found_wait(&pessimistic, ts(1500)), Some(19_500));
        assert_eq!(primary_not_found_wait(&pessimistic, ts(21_000)), None);
    }
}
