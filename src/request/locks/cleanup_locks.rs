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
//! ([`ResolveLock`](crate::request::ResolveLock)), and
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

use std::sync::Arc;

use async_trait::async_trait;

use super::lock_resolver::{LockResolver, ResolveLocksContext};
use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::region::RegionWithLeader;
use crate::request::plan::base::{Collect, Merge};
use crate::request::plan::builder::PlanBuilder;
use crate::request::plan::keyspace::Keyspace;
use crate::request::plan::request_shape::{HasNextBatch, NextBatch};
use crate::request::plan::resolve_lock::HasLocks;
use crate::request::plan::stage::{ShardStage, Stage};
use crate::request::plan::traits::Plan;
use crate::request::plan::traits::{HasKeyErrors, HasRegionError, Shardable};
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

/// What [`TransactionClient::cleanup_locks`](crate::TransactionClient::cleanup_locks)
/// did (client-rust's `CleanupLocksResult`). `cleanup_locks` itself returns
/// its failures as `Err` and leaves both error fields `None`; they are here
/// for plans of the caller's own that carry a cleanup's errors in the result
/// ([`HasRegionError`] and [`HasKeyErrors`] take them out, as for a
/// response).
#[derive(Debug, Default)]
pub struct CleanupLocksResult {
    /// A Region error that ended the cleanup of a Region.
    pub region_error: Option<crate::proto::errorpb::Error>,
    /// Key errors met while resolving.
    pub key_error: Option<Vec<Error>>,
    /// How many locks were resolved.
    pub resolved_locks: usize,
}

/// A copy keeps the errors too (as their kind and text where an error
/// cannot be copied whole; client-rust's copy drops them).
impl Clone for CleanupLocksResult {
    fn clone(&self) -> Self {
        CleanupLocksResult {
            region_error: self.region_error.clone(),
            key_error: self
                .key_error
                .as_ref()
                .map(|errors| errors.iter().map(Error::duplicate).collect()),
            resolved_locks: self.resolved_locks,
        }
    }
}

impl HasRegionError for CleanupLocksResult {
    fn region_error(&mut self) -> Option<crate::proto::errorpb::Error> {
        self.region_error.take()
    }
}

impl HasKeyErrors for CleanupLocksResult {
    fn key_errors(&mut self) -> Option<Vec<Error>> {
        self.key_error.take()
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

impl<P: Plan + Shardable + NextBatch, PdC: PdClient> Stage for CleanupLocks<P, PdC>
where
    P::Result: HasLocks + HasNextBatch + HasKeyErrors + HasRegionError,
{
    fn run(&self) -> impl std::future::Future<Output = Result<Self::Result>> + Send + '_ {
        self.execute()
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

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        self.store = Some(store.clone());
        self.inner.apply_store(store)
    }
}

impl<P: ShardStage + NextBatch + Send + Sync, PdC: PdClient> ShardStage for CleanupLocks<P, PdC>
where
    P::Result: HasLocks + HasNextBatch + HasKeyErrors + HasRegionError,
{
    fn cached_shards<PdC2: PdClient>(
        &self,
        _pd_client: &PdC2,
    ) -> Option<Vec<(Self::Shard, RegionWithLeader)>> {
        None
    }

    fn for_shard(&self, shard: Self::Shard, whole: bool) -> Self {
        CleanupLocks {
            inner: self.inner.for_shard(shard, whole),
            store: None,
            ..self.clone()
        }
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

// GC's cleanup as a builder step (client-rust's), beside the stage it
// builds.
impl<PdC: PdClient, P: Plan> PlanBuilder<PdC, P> {
    /// Cleans up the locks the plan's `ScanLock` finds, Region by Region
    /// (GC: running transactions are rolled back; see
    /// [`CleanupLocks`]). Put
    /// `retry_multi_region` after it, as client-rust does.
    pub fn cleanup_locks(
        self,
        ctx: ResolveLocksContext,
        options: ResolveLocksOptions,
        backoff: Backoff,
        keyspace: Keyspace,
    ) -> PlanBuilder<PdC, CleanupLocks<P, PdC>>
    where
        P: Shardable + NextBatch,
        P::Result: HasLocks + HasNextBatch + HasRegionError + HasKeyErrors,
    {
        let pd_client = Arc::clone(self.pd_client());
        self.map_plan(|inner| CleanupLocks {
            inner,
            ctx,
            options,
            store: None,
            pd_client,
            keyspace,
            backoff,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
