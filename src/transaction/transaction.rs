//! [`Transaction`]: one transaction's state (its buffer, options, status,
//! pessimistic locks and an undetermined outcome), shared by every step of
//! its life, and its buffered writes. Each protocol step is a module of its
//! own, an `impl` of the same type: reads, pessimistic locking, the
//! prewrite, commit and its outcome, the heartbeat, rollback and cleanup.
//! The buffer, the requests and lock resolution live outside.

mod commit;
mod heartbeat;
mod locking;
mod prewrite;
mod reads;
mod rollback;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::warn;

use super::buffer::{Buffer, BufferedRead};
use super::options::{CheckLevel, Mutation, TransactionOptions};
use super::{CodecPdClient, TimestampExt};
use crate::backoff::Backoff;
use crate::pd::{PdClient, PdRpcClient, Timestamp};
use crate::request::plan::call_deadline;
use crate::request::ClientLockResolver;
use crate::request::{EncodeKeyspace, KeyMode, Keyspace, TruncateKeyspace};
use crate::request::{FastDispatch, PlanBuilder, RoutingState, TypedCall};
use crate::{Error, Key, KvPair, Result, Value};

/// The largest `limit` a transactional scan accepts.
pub const MAX_TXN_SCAN_LIMIT: u32 = 10240;

/// What the transactional side has done, for tests and monitoring. Counters
/// only grow.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TransactionStats {
    /// Background secondary commits that succeeded (one per transaction).
    pub secondary_commits: u64,
    /// Background secondary commits that failed after their retries (the
    /// transaction is committed; readers resolve the leftover locks).
    pub secondary_commit_failures: u64,
    /// Background secondary commits still running.
    pub secondary_commits_pending: u64,
    /// Rollbacks sent after a failed prewrite.
    pub prewrite_rollbacks: u64,
    /// Heartbeats sent by the automatic heartbeat.
    pub heartbeats: u64,
    /// Automatic heartbeats that failed (logged).
    pub heartbeat_failures: u64,
    /// Lock resolution.
    pub locks: crate::request::locks::client_lock_resolver::LockStats,
}

#[derive(Debug, Default)]
pub(crate) struct TxnCounters {
    secondary_commits: AtomicU64,
    secondary_commit_failures: AtomicU64,
    secondary_commits_pending: AtomicU64,
    prewrite_rollbacks: AtomicU64,
    heartbeats: AtomicU64,
    heartbeat_failures: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// What every transaction of one client shares: PD (with the key codec),
/// routing state, the lock resolver and the counters.
pub(crate) struct TxnShared<PdC: PdClient> {
    pub(crate) pd: Arc<CodecPdClient<PdC>>,
    /// API v1 ([`Keyspace::Disable`]) until transactional keyspaces land.
    pub(crate) keyspace: Keyspace,
    pub(crate) routing: Arc<RoutingState>,
    pub(crate) resolver: Arc<ClientLockResolver<CodecPdClient<PdC>>>,
    pub(crate) request_deadline: Duration,
    pub(crate) counters: TxnCounters,
    /// The client's tags (`Config::request_tags`): a transaction's own
    /// win field by field.
    pub(crate) tags: crate::RequestTags,
    /// `Config::server_deadlines`: reads carry their deadline.
    pub(crate) server_deadlines: bool,
}

impl<PdC: PdClient> TxnShared<PdC> {
    /// The plan of one of a transaction's requests, carrying its tags.
    pub(crate) fn builder<Req: TypedCall>(
        &self,
        request: Req,
        tags: &crate::config::WireTags,
    ) -> PlanBuilder<CodecPdClient<PdC>, FastDispatch<Req>> {
        PlanBuilder::fast(Arc::clone(&self.pd), self.keyspace, request)
            .routing(Arc::clone(&self.routing))
            .tagged(tags)
    }

    /// A timestamp from PD's TSO, by the call's deadline (a call of its
    /// own when asked outside one: `begin`, `current_timestamp`).
    pub(crate) async fn timestamp(&self) -> Result<Timestamp> {
        let timestamp = Arc::clone(&self.pd).get_timestamp();
        call_deadline::within(self.request_deadline, timestamp).await
    }

    pub(crate) fn stats(&self) -> TransactionStats {
        let c = &self.counters;
        TransactionStats {
            secondary_commits: c.secondary_commits.load(Ordering::Relaxed),
            secondary_commit_failures: c.secondary_commit_failures.load(Ordering::Relaxed),
            secondary_commits_pending: c.secondary_commits_pending.load(Ordering::Relaxed),
            prewrite_rollbacks: c.prewrite_rollbacks.load(Ordering::Relaxed),
            heartbeats: c.heartbeats.load(Ordering::Relaxed),
            heartbeat_failures: c.heartbeat_failures.load(Ordering::Relaxed),
            locks: self.resolver.stats(),
        }
    }
}

/// Where a transaction is in its life. Operations are allowed only while
/// `Active` (or `ReadOnly`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransactionStatus {
    /// A snapshot: reads only.
    ReadOnly,
    /// Reads and writes allowed.
    Active,
    /// `commit` was called (and may have failed).
    StartedCommit,
    /// Committed.
    Committed,
    /// `rollback` was called (and may have failed).
    StartedRollback,
    /// Rolled back.
    Rolledback,
}

/// A transaction: reads see the database at its start timestamp plus its
/// own writes; writes are buffered and written at [`commit`](Self::commit).
///
/// Every RPC goes through the request plan (leader-first with voter
/// fallback). The commit is reported honestly: when the commit point may
/// have been applied without an answer, `commit` returns
/// [`Error::UndeterminedError`], never success or a plain failure.
pub struct Transaction<PdC: PdClient = PdRpcClient> {
    shared: Arc<TxnShared<PdC>>,
    timestamp: Timestamp,
    buffer: Buffer,
    options: TransactionOptions,
    status: TransactionStatus,
    /// Tells the heartbeat task the transaction ended (dropping it does too).
    ended: watch::Sender<bool>,
    heartbeat_started: bool,
    start_instant: Instant,
    /// Keys locked pessimistically (prewritten with `DoPessimisticCheck`).
    pessimistic_locked: std::collections::BTreeSet<Key>,
    /// Set when a commit ended undetermined: the error, printed. The
    /// transaction then refuses `commit` and `rollback`.
    undetermined: Option<String>,
    /// `commit` or `rollback` was called, whatever it returned: the caller
    /// tried to end the transaction, so dropping it is no mistake to report.
    end_requested: bool,
}

impl<PdC: PdClient> Transaction<PdC> {
    pub(crate) fn new(
        shared: Arc<TxnShared<PdC>>,
        timestamp: Timestamp,
        mut options: TransactionOptions,
    ) -> Self {
        options.tags = options.tags.or(&shared.tags);
        let mut wire = options.tags.wire();
        wire.no_server_deadline = !shared.server_deadlines;
        options.wire_tags = Arc::new(wire);
        let status = if options.read_only {
            TransactionStatus::ReadOnly
        } else {
            TransactionStatus::Active
        };
        Transaction {
            shared,
            timestamp,
            buffer: Buffer::default(),
            options,
            status,
            ended: watch::channel(false).0,
            heartbeat_started: false,
            start_instant: Instant::now(),
            pessimistic_locked: Default::default(),
            undetermined: None,
            end_requested: false,
        }
    }

    /// The start timestamp: reads see the data committed before it.
    pub fn start_timestamp(&self) -> Timestamp {
        self.timestamp
    }

    /// Where the transaction is in its life.
    pub fn status(&self) -> TransactionStatus {
        self.status
    }

    fn start_ts(&self) -> u64 {
        self.timestamp.version()
    }

    fn region_backoff(&self) -> Backoff {
        self.options.retry_options.region_backoff.clone()
    }

    fn lock_backoff(&self) -> Backoff {
        self.options.retry_options.lock_backoff.clone()
    }

    fn check_allow_operation(&self) -> Result<()> {
        match self.status {
            TransactionStatus::ReadOnly | TransactionStatus::Active => Ok(()),
            _ => Err(Error::OperationAfterCommitError),
        }
    }

    fn check_writable(&self) -> Result<()> {
        self.check_allow_operation()?;
        if self.options.read_only {
            return Err(Error::InvalidTransactionType);
        }
        Ok(())
    }

    fn is_pessimistic(&self) -> bool {
        self.options.is_pessimistic()
    }

    /// The caller's key as it goes on the wire (with the keyspace prefix in
    /// API v2). The buffer holds wire keys.
    fn wire_key(&self, key: impl Into<Key>) -> Key {
        key.into()
            .encode_keyspace(self.shared.keyspace, KeyMode::Txn)
    }

    /// A pair as the caller sees it (without the keyspace prefix).
    fn caller_pair(&self, pair: KvPair) -> KvPair {
        pair.truncate_keyspace(self.shared.keyspace)
    }

    /// Sets `key` to `value`.
    pub async fn put(&mut self, key: impl Into<Key>, value: impl Into<Value>) -> Result<()> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let key = self.wire_key(key);
            if self.is_pessimistic() {
                self.pessimistic_lock(vec![key.clone()], false).await?;
            }
            self.buffer.put(key, value.into());
            Ok(())
        })
        .await
    }

    /// Inserts `key`: the commit fails if it exists
    /// ([`Error::DuplicateKeyInsertion`] when this transaction wrote it).
    pub async fn insert(&mut self, key: impl Into<Key>, value: impl Into<Value>) -> Result<()> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let key = self.wire_key(key);
            if self.is_pessimistic() {
                let mut locked = self.pessimistic_lock(vec![key.clone()], true).await?;
                if self.buffer.written(&key) == BufferedRead::Unknown
                    && locked.pop().and_then(|p| p.1).is_some()
                {
                    return Err(Error::DuplicateKeyInsertion);
                }
            }
            self.buffer.insert(key, value.into())
        })
        .await
    }

    /// Deletes `key`.
    pub async fn delete(&mut self, key: impl Into<Key>) -> Result<()> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let key = self.wire_key(key);
            if self.is_pessimistic() {
                self.pessimistic_lock(vec![key.clone()], false).await?;
            }
            self.buffer.delete(key);
            Ok(())
        })
        .await
    }

    /// Buffers several puts and deletes (locking them first in a
    /// pessimistic transaction).
    pub async fn batch_mutate(
        &mut self,
        mutations: impl IntoIterator<Item = Mutation>,
    ) -> Result<()> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let mutations: Vec<Mutation> = mutations
                .into_iter()
                .map(|m| match m {
                    Mutation::Put(k, v) => Mutation::Put(self.wire_key(k), v),
                    Mutation::Delete(k) => Mutation::Delete(self.wire_key(k)),
                })
                .collect();
            if self.is_pessimistic() {
                let keys = mutations.iter().map(|m| m.key().clone()).collect();
                self.pessimistic_lock(keys, false).await?;
            }
            for m in mutations {
                match m {
                    Mutation::Put(k, v) => self.buffer.put(k, v),
                    Mutation::Delete(k) => self.buffer.delete(k),
                }
            }
            Ok(())
        })
        .await
    }

    /// After an undetermined commit, `commit` and `rollback` are refused
    /// with an undetermined error that says why.
    fn refuse_if_undetermined(&self, what: &str) -> Result<()> {
        match &self.undetermined {
            None => Ok(()),
            Some(cause) => Err(Error::UndeterminedError(Box::new(Error::StringError(
                format!(
                    "transaction {} cannot {what}: its commit ended undetermined ({cause}); \
                 it may be committed, so neither another commit nor a rollback is safe. \
                 Read its keys in a new transaction to learn the outcome",
                    self.start_ts()
                ),
            )))),
        }
    }

    fn finish(&mut self, status: TransactionStatus) {
        self.status = status;
        let _ = self.ended.send(true);
    }
}

impl<PdC: PdClient> Drop for Transaction<PdC> {
    fn drop(&mut self) {
        let _ = self.ended.send(true);
        if self.status == TransactionStatus::Active {
            self.release_locks_in_background();
        }
        // The check is about the caller's intent: a transaction whose
        // `commit` or `rollback` was called (and failed, say because every
        // store was down) was not forgotten, so it is never reported.
        let unfinished = self.status == TransactionStatus::Active
            && self.buffer.has_mutations()
            && !self.end_requested;
        if !unfinished {
            return;
        }
        match self.options.check_level {
            CheckLevel::Panic if !std::thread::panicking() => {
                panic!(
                    "transaction {} was dropped without commit or rollback (set CheckLevel::Warn or None to allow this)",
                    self.start_ts()
                )
            }
            CheckLevel::Panic | CheckLevel::Warn => warn!(
                "transaction {} was dropped without commit or rollback; its locks expire after their TTL",
                self.start_ts()
            ),
            CheckLevel::None => {}
        }
    }
}

impl<PdC: PdClient> std::fmt::Debug for Transaction<PdC> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Transaction")
            .field("start_ts", &self.start_ts())
            .field("status", &self.status)
            .field("kind", &self.options.kind)
            .finish_non_exhaustive()
    }
}
