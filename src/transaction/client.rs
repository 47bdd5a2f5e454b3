//! [`TransactionClient`]: begins transactions and snapshots, and runs the
//! cluster-wide lock and GC operations.

use std::sync::Arc;

use super::transaction::{TransactionStats, TxnShared};
use super::{
    CodecPdClient, ResolveLocksOptions, Snapshot, TimestampExt, Transaction, TransactionOptions,
};
use crate::backoff::Backoff;
use crate::pd::{PdClient, PdRpcClient, Timestamp};
use crate::proto::kvrpcpb;
use crate::request::plan::CleanupLocksResult;
use crate::request::{resolve_locks_once, ClientLockResolver};
use crate::request::{Collect, Plan, PlanBuilder};
use crate::request::{
    EncodeKeyspace, KeyMode, Keyspace, RoutingState, RoutingStats, TruncateKeyspace,
};
use crate::transaction::lowering::new_scan_lock_request;
use crate::transaction::ResolveLocksContext;
use crate::Failure;
use crate::{BoundRange, Config, Error, Result};

/// The transactional client. Cheap to clone; clones share connections,
/// caches, routing state and lock resolution.
///
/// ```no_run
/// # async fn run() -> tikv_plan::Result<()> {
/// use tikv_plan::TransactionClient;
/// let client = TransactionClient::new(vec!["127.0.0.1:2379"]).await?;
/// let mut txn = client.begin_optimistic().await?;
/// txn.put("key".to_owned(), "value".to_owned()).await?;
/// txn.commit().await?;
/// # Ok(()) }
/// ```
pub struct TransactionClient<PdC: PdClient = PdRpcClient> {
    shared: Arc<TxnShared<PdC>>,
}

impl<PdC: PdClient> Clone for TransactionClient<PdC> {
    fn clone(&self) -> Self {
        TransactionClient {
            shared: Arc::clone(&self.shared),
        }
    }
}

impl<PdC: PdClient> std::fmt::Debug for TransactionClient<PdC> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TransactionClient").finish_non_exhaustive()
    }
}

impl TransactionClient<PdRpcClient> {
    /// Connects through the PD endpoints (`host:port`) with the default
    /// [`Config`].
    pub async fn new<S: Into<String>>(pd_endpoints: Vec<S>) -> Result<Self> {
        Self::new_with_config(pd_endpoints, Config::default()).await
    }

    /// Connects through the PD endpoints with `config`.
    pub async fn new_with_config<S: Into<String>>(
        pd_endpoints: Vec<S>,
        config: Config,
    ) -> Result<Self> {
        let rpc = Arc::new(PdRpcClient::connect_endpoints(pd_endpoints, &config).await?);
        let keyspace = crate::request::configured_keyspace(&*rpc, &config).await?;
        Ok(Self::build(rpc, &config, keyspace))
    }

    /// Connects for API v2 without a keyspace of its own (client-rust's
    /// "api-v2-no-prefix" mode): requests carry API version 2, and keys go
    /// on the wire exactly as given, so the caller writes them with the
    /// keyspace prefix already on (for instance a tool that works across
    /// keyspaces). `config.keyspace` must be unset.
    pub async fn new_with_config_api_v2_no_prefix<S: Into<String>>(
        pd_endpoints: Vec<S>,
        config: Config,
    ) -> Result<Self> {
        if let Some(name) = &config.keyspace {
            return Err(Error::from(Failure::InvalidArgument(format!(
                "api-v2-no-prefix mode takes keys with their prefix already on, so \
                 config.keyspace must be unset (it is {name:?}); use new_with_config \
                 to work inside that keyspace"
            ))));
        }
        let rpc = Arc::new(PdRpcClient::connect_endpoints(pd_endpoints, &config).await?);
        Ok(Self::build(rpc, &config, Keyspace::ApiV2NoPrefix))
    }
}

impl<PdC: PdClient> TransactionClient<PdC> {
    /// A client over any [`PdClient`] (its Regions must be split at
    /// memcomparable-encoded keys, as a transactional cluster's are).
    /// API v1 (no keyspace); see [`new_with_keyspace`](Self::new_with_keyspace).
    pub fn new_with_pd_client(pd_client: Arc<PdC>, config: &Config) -> Self {
        Self::build(pd_client, config, Keyspace::Disable)
    }

    /// A client over any [`PdClient`] whose keys live in `keyspace` (API v2:
    /// keys carry its transactional prefix on the wire; results come back
    /// without it).
    pub fn new_with_keyspace(pd_client: Arc<PdC>, config: &Config, keyspace: Keyspace) -> Self {
        Self::build(pd_client, config, keyspace)
    }

    fn build(pd_client: Arc<PdC>, config: &Config, keyspace: Keyspace) -> Self {
        let pd = Arc::new(CodecPdClient::new(pd_client, keyspace, KeyMode::Txn));
        let routing = Arc::new(RoutingState::new(config));
        let resolver = Arc::new(
            ClientLockResolver::new(
                Arc::clone(&pd),
                Arc::clone(&routing),
                config.region_backoff.clone(),
                keyspace,
            )
            .with_tags(&config.request_tags),
        );
        TransactionClient {
            shared: Arc::new(TxnShared {
                pd,
                keyspace,
                routing,
                resolver,
                request_deadline: config.request_deadline,
                counters: Default::default(),
                tags: config.request_tags.clone(),
                server_deadlines: config.server_deadlines,
            }),
        }
    }

    /// Begins an optimistic transaction.
    pub async fn begin_optimistic(&self) -> Result<Transaction<PdC>> {
        self.begin_with_options(TransactionOptions::new_optimistic())
            .await
    }

    /// Begins a pessimistic transaction.
    pub async fn begin_pessimistic(&self) -> Result<Transaction<PdC>> {
        self.begin_with_options(TransactionOptions::new_pessimistic())
            .await
    }

    /// Begins a transaction with `options`.
    pub async fn begin_with_options(
        &self,
        options: TransactionOptions,
    ) -> Result<Transaction<PdC>> {
        let timestamp = self.current_timestamp().await?;
        Ok(Transaction::new(
            Arc::clone(&self.shared),
            timestamp,
            options,
        ))
    }

    /// A read-only view at `timestamp`.
    pub fn snapshot(&self, timestamp: Timestamp, options: TransactionOptions) -> Snapshot<PdC> {
        Snapshot::new(Transaction::new(
            Arc::clone(&self.shared),
            timestamp,
            options.read_only(),
        ))
    }

    /// **beyond** A snapshot `staleness` in the past: at a timestamp that
    /// far behind PD's clock, its reads are stale reads
    /// ([`TransactionOptions::stale_read`]), served by any replica whose
    /// safe-ts has reached it (spread over the replicas, or as `options`'
    /// replica read says), else by the leader at the same timestamp. It
    /// sees exactly what a snapshot at that timestamp sees on the leader.
    pub async fn stale_snapshot(
        &self,
        staleness: std::time::Duration,
        options: TransactionOptions,
    ) -> Result<Snapshot<PdC>> {
        let now = self.current_timestamp().await?;
        let back = i64::try_from(staleness.as_millis()).unwrap_or(i64::MAX);
        let at = Timestamp {
            physical: now.physical.saturating_sub(back).max(0),
            logical: 0,
            ..now
        };
        Ok(self.snapshot(at, options.stale_read()))
    }

    /// A fresh timestamp from PD's TSO.
    pub async fn current_timestamp(&self) -> Result<Timestamp> {
        self.shared.timestamp().await
    }

    /// The locks with `start_ts <= safepoint` in `range`, `batch_size` per
    /// Region request (paged until the range is done). In a keyspace the
    /// locks' keys (own, primary, secondaries) come without the keyspace
    /// prefix, as the caller wrote them, and
    /// [`resolve_locks`](Self::resolve_locks) takes them in that form.
    pub async fn scan_locks(
        &self,
        safepoint: &Timestamp,
        range: impl Into<BoundRange>,
        batch_size: u32,
    ) -> Result<Vec<kvrpcpb::LockInfo>> {
        let locks = self
            .scan_encoded_locks(safepoint, range, batch_size)
            .await?;
        Ok(locks.truncate_keyspace(self.shared.keyspace))
    }

    /// [`scan_locks`](Self::scan_locks) with the keys as TiKV holds them
    /// (with the keyspace prefix), as the resolver needs them.
    async fn scan_encoded_locks(
        &self,
        safepoint: &Timestamp,
        range: impl Into<BoundRange>,
        batch_size: u32,
    ) -> Result<Vec<kvrpcpb::LockInfo>> {
        let range = range
            .into()
            .encode_keyspace(self.shared.keyspace, KeyMode::Txn);
        let (start, end) = range.into_key_range()?;
        self.shared
            .resolver
            .scan_locks(start.into(), end.into(), safepoint.version(), batch_size)
            .await
    }

    /// Resolves `locks` (keys as [`scan_locks`](Self::scan_locks) returns
    /// them, without the keyspace prefix): the locks of finished
    /// transactions are committed or rolled back; locks of live
    /// transactions are retried with `backoff` and the ones still alive at
    /// the end are returned, in the same form.
    pub async fn resolve_locks(
        &self,
        locks: Vec<kvrpcpb::LockInfo>,
        _timestamp: Timestamp,
        mut backoff: Backoff,
    ) -> Result<Vec<kvrpcpb::LockInfo>> {
        let keyspace = self.shared.keyspace;
        let mut live = locks.encode_keyspace(keyspace, KeyMode::Txn);
        loop {
            live = resolve_locks_once(&self.shared.resolver, live).await?;
            if live.is_empty() {
                return Ok(live);
            }
            match backoff.next_delay_duration() {
                Some(delay) => tokio::time::sleep(delay).await,
                None => return Ok(live.truncate_keyspace(keyspace)),
            }
        }
    }

    /// Cleans up every lock with `start_ts <= safepoint` in `range` (all of
    /// them, or async-commit ones only), Region by Region, as GC does and
    /// as client-rust does: each lock's transaction is decided with
    /// `CheckTxnStatus` at the largest timestamp, so a transaction still
    /// running (its lock within its TTL) is rolled back, and an async-commit
    /// one is committed or rolled back as its secondaries say; then each
    /// Region's locks are resolved with one `ResolveLock`. A lock that
    /// cannot be decided is an [`Error::ResolveLockError`].
    pub async fn cleanup_locks(
        &self,
        range: impl Into<BoundRange>,
        safepoint: &Timestamp,
        options: ResolveLocksOptions,
    ) -> Result<CleanupLocksResult> {
        let keyspace = self.shared.keyspace;
        let range = range.into().encode_keyspace(keyspace, KeyMode::Txn);
        let request = new_scan_lock_request(range, safepoint, options.batch_size);
        // client-rust's backoffs for this call: the cleanup's own, and the
        // Region retries around it.
        let backoff = Backoff::equal_jitter_backoff(100, 10000, 50);
        PlanBuilder::new(Arc::clone(&self.shared.pd), keyspace, request)
            .cleanup_locks(ResolveLocksContext::default(), options, backoff, keyspace)
            .retry_multi_region(crate::backoff::DEFAULT_REGION_BACKOFF)
            .extract_error()
            .merge(Collect)
            .plan()
            .execute()
            .await
    }

    /// Garbage collection up to `safepoint`: resolves every lock older
    /// than it (a live one is an error), then moves PD's GC safe point.
    /// True when PD now holds exactly `safepoint` (false: it already held a
    /// later one).
    pub async fn gc(&self, safepoint: Timestamp) -> Result<bool> {
        self.cleanup_locks(.., &safepoint, ResolveLocksOptions::default())
            .await?;
        Arc::clone(&self.shared.pd)
            .update_safepoint(safepoint.version())
            .await
    }

    /// Deletes every key in `range` on every store, bypassing MVCC and
    /// Raft (TiKV's `UnsafeDestroyRange`; for dropping whole tables).
    pub async fn unsafe_destroy_range(&self, range: impl Into<BoundRange>) -> Result<()> {
        let range = range
            .into()
            .encode_keyspace(self.shared.keyspace, KeyMode::Txn);
        let (start, end) = range.into_key_range()?;
        let (start, end): (Vec<u8>, Vec<u8>) = (start.into(), end.into());
        // TiKV asserts both keys are non-empty on this request (a failed
        // assertion stops the store); in a keyspace neither can be.
        if start.is_empty() || end.is_empty() {
            return Err(Error::from(Failure::InvalidArgument(
                "unsafe_destroy_range needs a bounded range (a start and an end key): \
                 TiKV stops on an UnsafeDestroyRange with an empty key"
                    .to_owned(),
            )));
        }
        // Raw keys: TiKV encodes them itself for this request. TiKV does not
        // check the API version here; the context says it all the same, as
        // on every other request of this client.
        let mut context = kvrpcpb::Context::default();
        self.shared.keyspace.apply_to_context(&mut context);
        let request = kvrpcpb::UnsafeDestroyRangeRequest {
            context: Some(context),
            start_key: start,
            end_key: end,
        };
        let stores = self.shared.pd.all_stores().await?;
        let mut errors = Vec::new();
        // TiKV's stores only: TiFlash keeps no TiKV data and answers
        // `Unimplemented` (the PD client leaves it out already).
        for store in stores.into_iter().filter(crate::store::Store::is_tikv) {
            let answer = store.client.dispatch(&request).await.and_then(|r| {
                r.downcast::<kvrpcpb::UnsafeDestroyRangeResponse>()
                    .map(|b| *b)
                    .map_err(|_| Error::InternalError {
                        message: "unsafe_destroy_range answered with another type".to_owned(),
                    })
            });
            match answer {
                Ok(r) if r.error.is_empty() => {}
                Ok(r) => errors.push(Error::KvError {
                    message: format!(
                        "store {} could not destroy the range: {}",
                        store.meta.id, r.error
                    ),
                }),
                Err(e) => errors.push(e),
            }
        }
        match errors.len() {
            0 => Ok(()),
            1 => Err(errors.remove(0)),
            _ => Err(Error::ExtractedErrors(errors)),
        }
    }

    /// What transactions of this client have done (background commits,
    /// heartbeats, lock resolution).
    pub fn stats(&self) -> TransactionStats {
        self.shared.stats()
    }

    /// The keyspace keys live in ([`Keyspace::Disable`]: API v1).
    pub fn keyspace(&self) -> Keyspace {
        self.shared.keyspace
    }

    /// What routing has done for this client.
    pub fn routing_stats(&self) -> RoutingStats {
        let mut stats = self.shared.routing.stats();
        stats.slow_stores = self
            .shared
            .pd
            .store_feedback()
            .map_or(0, |f| f.slow_stores());
        stats
    }

    /// **beyond** The slow score (1 healthy to 100) each store last
    /// reported in its health feedback, by store id ([routing.md,
    /// "Slow-store feedback"](crate::spec::routing#slow-store-feedback-beyond)).
    pub fn store_slow_scores(&self) -> Vec<(crate::region::StoreId, u32)> {
        self.shared
            .pd
            .store_feedback()
            .map(|f| f.scores())
            .unwrap_or_default()
    }
}
