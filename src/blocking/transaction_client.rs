//! [`SyncTransactionClient`]: [`TransactionClient`]'s methods, each
//! blocking its thread.

use std::sync::Arc;
use std::time::Duration;

use super::runtime::OwnedRuntime;
use super::snapshot::SyncSnapshot;
use super::transaction::SyncTransaction;
use crate::proto::kvrpcpb;
use crate::request::plan::CleanupLocksResult;
use crate::request::{Keyspace, RoutingStats};
use crate::transaction::{ResolveLocksOptions, TransactionStats};
use crate::{
    Backoff, BoundRange, Config, Result, Timestamp, Transaction, TransactionClient,
    TransactionOptions,
};

/// The transactional client for programs without an async runtime
/// (client-rust's `SyncTransactionClient`): every method of
/// [`TransactionClient`], under the same name, with the same arguments,
/// results and errors, blocking the calling thread until it is done; the
/// transactions and snapshots it begins ([`SyncTransaction`],
/// [`SyncSnapshot`]) block the same way.
///
/// It owns a multi-threaded Tokio runtime, shared by its clones and by the
/// transactions and snapshots it hands out, on which the requests and the
/// transactions' background work (heartbeats, secondary commits) run. When
/// the last of them is dropped on a thread outside any runtime, the drop
/// lets the secondary commits in flight finish, then shuts the runtime
/// down, cutting whatever else is in flight, all within 5 s at most;
/// dropped inside a runtime, it shuts down at once without waiting
/// (secondary commits cut short leave locks that readers resolve). Called
/// on a thread inside a Tokio runtime,
/// every method fails with
/// [`Failure::NestedRuntime`](crate::Failure::NestedRuntime) (inside [`Error::GrpcAPI`](crate::Error::GrpcAPI), code `FailedPrecondition`)
/// and sends nothing: use [`TransactionClient`] there.
///
/// ```no_run
/// # fn run() -> tikv_plan::Result<()> {
/// use tikv_plan::SyncTransactionClient;
/// let client = SyncTransactionClient::new(vec!["127.0.0.1:2379"])?;
/// let mut txn = client.begin_optimistic()?;
/// txn.put("key".to_owned(), "value".to_owned())?;
/// txn.commit()?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SyncTransactionClient {
    client: TransactionClient,
    runtime: Arc<OwnedRuntime>,
}

impl SyncTransactionClient {
    /// Connects to the cluster whose PD members are `pd_endpoints`, with the
    /// default configuration ([`TransactionClient::new`]).
    pub fn new<S: Into<String>>(pd_endpoints: Vec<S>) -> Result<Self> {
        let call = "SyncTransactionClient::new";
        let runtime = OwnedRuntime::start(call)?;
        let client = runtime.block_on(call, TransactionClient::new(pd_endpoints))?;
        Ok(SyncTransactionClient::on(runtime, client))
    }

    /// Connects with `config` ([`TransactionClient::new_with_config`]).
    pub fn new_with_config<S: Into<String>>(pd_endpoints: Vec<S>, config: Config) -> Result<Self> {
        let call = "SyncTransactionClient::new_with_config";
        let runtime = OwnedRuntime::start(call)?;
        let client = runtime.block_on(
            call,
            TransactionClient::new_with_config(pd_endpoints, config),
        )?;
        Ok(SyncTransactionClient::on(runtime, client))
    }

    /// Connects with `config` in API v2 without a keyspace prefix
    /// ([`TransactionClient::new_with_config_api_v2_no_prefix`]).
    pub fn new_with_config_api_v2_no_prefix<S: Into<String>>(
        pd_endpoints: Vec<S>,
        config: Config,
    ) -> Result<Self> {
        let call = "SyncTransactionClient::new_with_config_api_v2_no_prefix";
        let runtime = OwnedRuntime::start(call)?;
        let client = runtime.block_on(
            call,
            TransactionClient::new_with_config_api_v2_no_prefix(pd_endpoints, config),
        )?;
        Ok(SyncTransactionClient::on(runtime, client))
    }

    /// The async client this one drives. Use it (it is cheap to clone) in
    /// async code; its futures need a Tokio runtime of their own.
    pub fn async_client(&self) -> &TransactionClient {
        &self.client
    }

    /// A client on `runtime`, whose last drop first lets the secondary
    /// commits in flight finish (within the runtime's shutdown grace).
    fn on(runtime: Arc<OwnedRuntime>, client: TransactionClient) -> Self {
        let watched = client.clone();
        runtime.settle_before_shutdown(Box::new(move || {
            watched.stats().secondary_commits_pending == 0
        }));
        SyncTransactionClient { client, runtime }
    }

    fn wrap(&self, transaction: Transaction) -> SyncTransaction {
        SyncTransaction::new(transaction, Arc::clone(&self.runtime))
    }

    /// Begins an optimistic transaction
    /// ([`TransactionClient::begin_optimistic`]).
    pub fn begin_optimistic(&self) -> Result<SyncTransaction> {
        let call = "SyncTransactionClient::begin_optimistic";
        let transaction = self
            .runtime
            .block_on(call, self.client.begin_optimistic())?;
        Ok(self.wrap(transaction))
    }

    /// Begins a pessimistic transaction
    /// ([`TransactionClient::begin_pessimistic`]).
    pub fn begin_pessimistic(&self) -> Result<SyncTransaction> {
        let call = "SyncTransactionClient::begin_pessimistic";
        let transaction = self
            .runtime
            .block_on(call, self.client.begin_pessimistic())?;
        Ok(self.wrap(transaction))
    }

    /// Begins a transaction with `options`
    /// ([`TransactionClient::begin_with_options`]).
    pub fn begin_with_options(&self, options: TransactionOptions) -> Result<SyncTransaction> {
        let call = "SyncTransactionClient::begin_with_options";
        let transaction = self
            .runtime
            .block_on(call, self.client.begin_with_options(options))?;
        Ok(self.wrap(transaction))
    }

    /// A read-only view at `timestamp` ([`TransactionClient::snapshot`]).
    /// Building it sends nothing; its reads block like this client's calls.
    pub fn snapshot(&self, timestamp: Timestamp, options: TransactionOptions) -> SyncSnapshot {
        // Built inside the runtime, so anything it starts finds one.
        let _entered = self.runtime.handle().map(|h| h.enter());
        let snapshot = self.client.snapshot(timestamp, options);
        SyncSnapshot::new(snapshot, Arc::clone(&self.runtime))
    }

    /// **beyond** A snapshot `staleness` in the past, read by any replica
    /// whose safe-ts reached it ([`TransactionClient::stale_snapshot`]).
    pub fn stale_snapshot(
        &self,
        staleness: Duration,
        options: TransactionOptions,
    ) -> Result<SyncSnapshot> {
        let call = "SyncTransactionClient::stale_snapshot";
        let snapshot = self
            .runtime
            .block_on(call, self.client.stale_snapshot(staleness, options))?;
        Ok(SyncSnapshot::new(snapshot, Arc::clone(&self.runtime)))
    }

    /// A fresh timestamp from PD ([`TransactionClient::current_timestamp`]).
    pub fn current_timestamp(&self) -> Result<Timestamp> {
        self.runtime.block_on(
            "SyncTransactionClient::current_timestamp",
            self.client.current_timestamp(),
        )
    }

    /// The locks with `start_ts <= safepoint` in `range`
    /// ([`TransactionClient::scan_locks`]).
    pub fn scan_locks(
        &self,
        safepoint: &Timestamp,
        range: impl Into<BoundRange>,
        batch_size: u32,
    ) -> Result<Vec<kvrpcpb::LockInfo>> {
        self.runtime.block_on(
            "SyncTransactionClient::scan_locks",
            self.client.scan_locks(safepoint, range, batch_size),
        )
    }

    /// Resolves `locks`, returning the ones still alive
    /// ([`TransactionClient::resolve_locks`]).
    pub fn resolve_locks(
        &self,
        locks: Vec<kvrpcpb::LockInfo>,
        timestamp: Timestamp,
        backoff: Backoff,
    ) -> Result<Vec<kvrpcpb::LockInfo>> {
        self.runtime.block_on(
            "SyncTransactionClient::resolve_locks",
            self.client.resolve_locks(locks, timestamp, backoff),
        )
    }

    /// Cleans up every lock with `start_ts <= safepoint` in `range`
    /// ([`TransactionClient::cleanup_locks`]).
    pub fn cleanup_locks(
        &self,
        range: impl Into<BoundRange>,
        safepoint: &Timestamp,
        options: ResolveLocksOptions,
    ) -> Result<CleanupLocksResult> {
        self.runtime.block_on(
            "SyncTransactionClient::cleanup_locks",
            self.client.cleanup_locks(range, safepoint, options),
        )
    }

    /// Garbage collection up to `safepoint` ([`TransactionClient::gc`]).
    pub fn gc(&self, safepoint: Timestamp) -> Result<bool> {
        self.runtime
            .block_on("SyncTransactionClient::gc", self.client.gc(safepoint))
    }

    /// Deletes every key in `range` on every store, bypassing MVCC
    /// ([`TransactionClient::unsafe_destroy_range`]).
    pub fn unsafe_destroy_range(&self, range: impl Into<BoundRange>) -> Result<()> {
        self.runtime.block_on(
            "SyncTransactionClient::unsafe_destroy_range",
            self.client.unsafe_destroy_range(range),
        )
    }

    /// What this client's transactions have done
    /// ([`TransactionClient::stats`]).
    pub fn stats(&self) -> TransactionStats {
        self.client.stats()
    }

    /// The keyspace requests use ([`TransactionClient::keyspace`]).
    pub fn keyspace(&self) -> Keyspace {
        self.client.keyspace()
    }

    /// What routing has done so far ([`TransactionClient::routing_stats`]).
    pub fn routing_stats(&self) -> RoutingStats {
        self.client.routing_stats()
    }

    /// **beyond** Each store's last reported slow score, by store id
    /// ([`TransactionClient::store_slow_scores`]).
    pub fn store_slow_scores(&self) -> Vec<(crate::region::StoreId, u32)> {
        self.client.store_slow_scores()
    }
}
