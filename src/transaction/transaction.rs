//! [`Transaction`]: reads at the start timestamp, buffered writes, and the
//! commit protocols (two-phase, async commit, 1PC) over the request plan.
//!
//! This file is long because it holds one type's whole life: reads, buffered
//! writes, pessimistic locking and the three commit protocols with their
//! fallbacks share the transaction's state (the primary, the undetermined
//! outcome, the heartbeat). The buffer, the requests and lock resolution are
//! modules of their own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::buffer::{choose_primary, takes_lock, Buffer, BufferedRead};
use super::options::{
    CheckLevel, HeartbeatOption, Mutation, TransactionOptions, DEFAULT_LOCK_TTL, MAX_TTL,
};
use super::requests::{
    as_key_error, new_batch_get_request, new_batch_rollback_request, new_commit_request,
    new_get_request, new_heart_beat_request, new_scan_request, LockItem,
};
use super::{CodecPdClient, TimestampExt};
use crate::backoff::Backoff;
use crate::pd::{PdClient, PdRpcClient, Timestamp};
use crate::proto::kvrpcpb;
use crate::request::plan::call_deadline;
use crate::request::plan::scan::{page_of, scan_pages, ScanPiece};
use crate::request::ClientLockResolver;
use crate::request::{
    CollectError, CollectPieces, CollectSingle, Dispatch, KvRequest, Plan, PlanBuilder,
    ResponseWithShard, RoutingState,
};
use crate::request::{EncodeKeyspace, KeyMode, Keyspace, TruncateKeyspace};
use crate::Failure;
use crate::{BoundRange, Error, Key, KvPair, Result, Value};

/// The largest `limit` a transactional scan accepts.
pub const MAX_TXN_SCAN_LIMIT: u32 = 10240;

/// How many times a pessimistic lock is tried at a fresh `for_update_ts`
/// after write conflicts.
const PESSIMISTIC_LOCK_ATTEMPTS: u32 = 8;

/// True for a write conflict, alone or among several errors: the key
/// errors of one request (`MultipleKeyErrors`, as when every Region of a
/// lock reports its conflict) or several shards' failures.
fn is_write_conflict(e: &Error) -> bool {
    match e {
        Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
            errors.iter().any(is_write_conflict)
        }
        e => as_key_error(e).is_some_and(|k| k.conflict.is_some()),
    }
}

/// How many times a secondary commit is tried in the background.
const SECONDARY_COMMIT_ATTEMPTS: u32 = 3;

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
}

impl<PdC: PdClient> TxnShared<PdC> {
    pub(crate) fn builder<Req: KvRequest>(
        &self,
        request: Req,
    ) -> PlanBuilder<CodecPdClient<PdC>, Dispatch<Req>> {
        PlanBuilder::new(Arc::clone(&self.pd), self.keyspace, request)
            .routing(Arc::clone(&self.routing))
    }

    /// Rolls back prewritten `keys` of transaction `start_ts`, the
    /// transaction's `primary` first: the primary decides a transaction's
    /// fate, so once its rollback is definite the others can never commit.
    /// Should the primary have committed after all, its rollback fails and
    /// the other keys keep their locks (readers commit them from the
    /// primary's record) rather than being rolled back under a committed
    /// primary.
    pub(crate) async fn rollback_prewritten(
        &self,
        start_ts: u64,
        backoff: Backoff,
        primary: Option<Key>,
        keys: Vec<Vec<u8>>,
    ) -> Result<()> {
        let listed = |p: &Key| keys.iter().any(|k| k.as_slice() == p.as_bytes());
        let Some(primary) = primary.filter(|p| keys.len() > 1 && listed(p)) else {
            return self.batch_rollback(start_ts, backoff, keys).await;
        };
        let primary = primary.as_bytes().to_vec();
        let rest: Vec<Vec<u8>> = keys.into_iter().filter(|k| *k != primary).collect();
        self.batch_rollback(start_ts, backoff.clone(), vec![primary])
            .await?;
        self.batch_rollback(start_ts, backoff, rest).await
    }

    async fn batch_rollback(
        &self,
        start_ts: u64,
        backoff: Backoff,
        keys: Vec<Vec<u8>>,
    ) -> Result<()> {
        if keys.is_empty() {
            return Ok(());
        }
        self.builder(new_batch_rollback_request(keys, start_ts))
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
        self.builder(request)
            .retry_multi_region(backoff)
            .merge(CollectError)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok(())
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
        options: TransactionOptions,
    ) -> Self {
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

    /// The value of `key`, or `None` when it does not exist.
    pub async fn get(&mut self, key: impl Into<Key>) -> Result<Option<Value>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_allow_operation()?;
            let key = self.wire_key(key);
            if let BufferedRead::Known(v) = self.buffer.get(&key) {
                return Ok(v);
            }
            let value = self.fetch_get(key.clone()).await?;
            self.buffer.cache(key, value.clone());
            Ok(value)
        })
        .await
    }

    /// True when `key` exists.
    pub async fn key_exists(&mut self, key: impl Into<Key>) -> Result<bool> {
        Ok(self.get(key).await?.is_some())
    }

    /// The values of the keys that exist, in key order.
    pub async fn batch_get(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<impl Iterator<Item = KvPair>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_allow_operation()?;
            let mut keys: Vec<Key> = keys.into_iter().map(|k| self.wire_key(k)).collect();
            keys.sort();
            keys.dedup();
            let mut out = Vec::new();
            let mut missing = Vec::new();
            for key in keys {
                match self.buffer.get(&key) {
                    BufferedRead::Known(Some(v)) => out.push(KvPair(key, v)),
                    BufferedRead::Known(None) => {}
                    BufferedRead::Unknown => missing.push(key),
                }
            }
            if !missing.is_empty() {
                let fetched = self.fetch_batch_get(&missing).await?;
                let mut found = std::collections::BTreeMap::new();
                for p in fetched {
                    found.insert(p.0, p.1);
                }
                for key in missing {
                    let value = found.remove(&key);
                    self.buffer.cache(key.clone(), value.clone());
                    if let Some(v) = value {
                        out.push(KvPair(key, v));
                    }
                }
            }
            out.sort_by(|a, b| a.0.cmp(&b.0));
            let out: Vec<KvPair> = out.into_iter().map(|p| self.caller_pair(p)).collect();
            Ok(out.into_iter())
        })
        .await
    }

    /// Up to `limit` pairs in `range`, in key order, with this
    /// transaction's writes applied.
    pub async fn scan(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        Ok(self
            .scan_inner(range.into(), limit, false)
            .await?
            .into_iter())
    }

    /// Up to `limit` keys in `range`, in key order.
    pub async fn scan_keys(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        Ok(self
            .scan_inner(range.into(), limit, false)
            .await?
            .into_iter()
            .map(KvPair::into_key))
    }

    /// Up to `limit` pairs in `range`, in reverse key order.
    pub async fn scan_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        Ok(self
            .scan_inner(range.into(), limit, true)
            .await?
            .into_iter())
    }

    /// Up to `limit` keys in `range`, in reverse key order.
    pub async fn scan_keys_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        Ok(self
            .scan_inner(range.into(), limit, true)
            .await?
            .into_iter()
            .map(KvPair::into_key))
    }

    /// Reads `key` and locks it: pessimistic transactions lock it now at a
    /// fresh `for_update_ts` and read its latest value; optimistic ones lock
    /// it at commit and read at the start ts.
    pub async fn get_for_update(&mut self, key: impl Into<Key>) -> Result<Option<Value>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let key = self.wire_key(key);
            if !self.is_pessimistic() {
                self.buffer.lock(key.clone());
                if let BufferedRead::Known(v) = self.buffer.get(&key) {
                    return Ok(v);
                }
                let value = self.fetch_get(key.clone()).await?;
                self.buffer.cache(key, value.clone());
                return Ok(value);
            }
            let mut values = self.pessimistic_lock(vec![key.clone()], true).await?;
            let value = values.pop().and_then(|p| p.1);
            match self.buffer.written(&key) {
                BufferedRead::Known(v) => Ok(v),
                BufferedRead::Unknown => Ok(value),
            }
        })
        .await
    }

    /// [`get_for_update`](Self::get_for_update) for several keys: the pairs
    /// that exist.
    pub async fn batch_get_for_update(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<Vec<KvPair>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let keys: Vec<Key> = keys.into_iter().map(Into::into).collect();
            if !self.is_pessimistic() {
                for key in &keys {
                    let wire = self.wire_key(key.clone());
                    self.buffer.lock(wire);
                }
                return Ok(self.batch_get(keys).await?.collect());
            }
            let keys: Vec<Key> = keys.into_iter().map(|k| self.wire_key(k)).collect();
            let locked = self.pessimistic_lock(keys, true).await?;
            Ok(locked
                .into_iter()
                .filter_map(|(key, fetched)| {
                    let value = match self.buffer.written(&key) {
                        BufferedRead::Known(v) => v,
                        BufferedRead::Unknown => fetched,
                    };
                    value.map(|v| KvPair(key, v))
                })
                .map(|p| self.caller_pair(p))
                .collect())
        })
        .await
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

    /// Locks keys without writing them: now in a pessimistic transaction,
    /// at commit (as write-conflict checks) in an optimistic one.
    pub async fn lock_keys(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<()> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_writable()?;
            let keys: Vec<Key> = keys.into_iter().map(|k| self.wire_key(k)).collect();
            if self.is_pessimistic() {
                self.pessimistic_lock(keys, false).await?;
            } else {
                for key in keys {
                    self.buffer.lock(key);
                }
            }
            Ok(())
        })
        .await
    }

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

    /// Commits. Returns the commit timestamp (`None` when there was nothing
    /// to write). Returns once the commit point is durable; the remaining
    /// keys are committed in the background (readers resolve them from the
    /// primary meanwhile).
    ///
    /// Errors: [`Error::UndeterminedError`] when the commit point may have
    /// been applied without an answer (read the keys in a new transaction
    /// before retrying); any other error means the transaction did not
    /// commit, and its locks were rolled back.
    pub async fn commit(&mut self) -> Result<Option<Timestamp>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.end_requested = true;
            self.refuse_if_undetermined("commit")?;
            match self.status {
                TransactionStatus::Active | TransactionStatus::StartedCommit => {}
                // Nothing to write: done.
                TransactionStatus::ReadOnly => {
                    self.finish(TransactionStatus::Committed);
                    return Ok(None);
                }
                _ => return Err(Error::OperationAfterCommitError),
            }
            self.status = TransactionStatus::StartedCommit;
            if !self.buffer.has_mutations() {
                self.finish(TransactionStatus::Committed);
                return Ok(None);
            }
            let result = self.two_phase_commit().await;
            match &result {
                Ok(_) => self.finish(TransactionStatus::Committed),
                // Undetermined is terminal: no second commit (it could commit
                // the keys at a second timestamp), no rollback (it could undo
                // part of a committed transaction), no heartbeat.
                Err(e) if e.undetermined_anywhere() => {
                    self.undetermined = Some(e.to_string());
                    let _ = self.ended.send(true);
                }
                // Failed, its locks rolled back: the heartbeat stops, and a
                // retried commit starts a new one.
                Err(_) => {
                    let _ = self.ended.send(true);
                    self.ended = watch::channel(false).0;
                    self.heartbeat_started = false;
                }
            }
            result
        })
        .await
    }

    /// Rolls back: releases this transaction's locks. After a commit that
    /// ended undetermined, a rollback fails if the transaction committed.
    ///
    /// A rollback that fails (no store answered, say) leaves the
    /// transaction as it was, so calling `rollback` again retries it.
    /// Dropping the transaction instead is fine: once `commit` or
    /// `rollback` was called, the drop check ([`CheckLevel`]) never fires,
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
    async fn release_for_rollback(&self, prewritten: bool) -> Result<()> {
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

    // ---- reads ----

    async fn fetch_get(&self, key: Key) -> Result<Option<Value>> {
        self.fetch_get_at(key, self.start_ts()).await
    }

    /// Reads `key` at `ts` (the start ts, or a `for_update_ts` for a key
    /// this transaction holds locked).
    async fn fetch_get_at(&self, key: Key, ts: u64) -> Result<Option<Value>> {
        let response = self
            .shared
            .builder(new_get_request(key.into(), ts))
            .retry_multi_region(self.region_backoff())
            .resolve_lock_with(self.shared.resolver.clone(), ts, self.lock_backoff())
            .merge(CollectSingle)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok((!response.not_found).then_some(response.value))
    }

    async fn fetch_batch_get(&self, keys: &[Key]) -> Result<Vec<KvPair>> {
        let ts = self.start_ts();
        let keys = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
        let responses = self
            .shared
            .builder(new_batch_get_request(keys, ts))
            .retry_multi_region(self.region_backoff())
            .resolve_lock_with(self.shared.resolver.clone(), ts, self.lock_backoff())
            .merge(CollectError)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok(responses
            .into_iter()
            .flat_map(|r| r.pairs)
            .map(|p| KvPair(p.key.into(), p.value))
            .collect())
    }

    async fn scan_inner(
        &mut self,
        range: BoundRange,
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<KvPair>> {
        call_deadline::within(self.shared.request_deadline, async move {
            self.check_allow_operation()?;
            if limit > MAX_TXN_SCAN_LIMIT {
                return Err(Error::from(Failure::InvalidArgument(format!(
                    "scan limit {limit} exceeds the maximum {MAX_TXN_SCAN_LIMIT}; scan in pages"
                ))));
            }
            let range = range.encode_keyspace(self.shared.keyspace, KeyMode::Txn);
            let (start, end) = range.into_key_range()?;
            if limit == 0 || (!end.is_empty() && start == end) {
                return Ok(Vec::new());
            }
            // Fetch enough that the local deletes cannot starve the limit.
            let fetch_limit = limit.saturating_add(self.buffer.deletes_in(&start, &end));
            let fetched = self
                .fetch_scan(start.as_bytes(), end.as_bytes(), fetch_limit, reverse)
                .await?;
            let merged = self
                .buffer
                .merge_scan(fetched, &start, &end, limit, reverse);
            Ok(merged.into_iter().map(|p| self.caller_pair(p)).collect())
        })
        .await
    }

    async fn fetch_scan(
        &self,
        start: &[u8],
        end: &[u8],
        limit: u32,
        reverse: bool,
    ) -> Result<Vec<KvPair>> {
        let ts = self.start_ts();
        scan_pages(start, end, limit, reverse, |cursor, remaining| async move {
            // Reverse: from the cursor (the upper bound) down to the start.
            let bound = if reverse { start } else { end };
            let request = new_scan_request(cursor, bound.to_vec(), ts, remaining, false, reverse);
            let pieces: Vec<ScanPiece<kvrpcpb::ScanResponse>> = self
                .shared
                .builder(request)
                .preserve_shard()
                .retry_multi_region(self.region_backoff())
                .resolve_lock_with(self.shared.resolver.clone(), ts, self.lock_backoff())
                .merge(CollectPieces)
                .plan()
                .execute()
                .await?;
            page_of(pieces, |response| {
                let pairs = response.pairs.into_iter();
                pairs.map(|p| KvPair(p.key.into(), p.value)).collect()
            })
        })
        .await
    }

    // ---- pessimistic locking ----

    /// Locks `keys` pessimistically; with `need_value`, returns each key's
    /// latest value, in the order of `keys` (repeats removed).
    ///
    /// A key this transaction already holds is never locked again
    /// ([txn.md](crate::spec::txn#behaviour-we-require)): a fresh lock at a
    /// newer `for_update_ts` would succeed past a write committed after the
    /// first lock was lost, and the commit would overwrite it. The prewrite's
    /// pessimistic check finds a lost lock instead. Its value, when asked
    /// for, is read at the transaction's latest `for_update_ts`: while the
    /// lock holds, nothing newer can have been committed.
    async fn pessimistic_lock(
        &mut self,
        keys: Vec<Key>,
        need_value: bool,
    ) -> Result<Vec<(Key, Option<Value>)>> {
        let mut seen = std::collections::BTreeSet::new();
        let keys: Vec<Key> = keys
            .into_iter()
            .filter(|k| seen.insert(k.clone()))
            .collect();
        let fresh: Vec<Key> = keys
            .iter()
            .filter(|k| !self.pessimistic_locked.contains(*k))
            .cloned()
            .collect();
        let mut values: std::collections::BTreeMap<Key, Option<Value>> =
            self.lock_fresh_keys(fresh, need_value).await?;
        if need_value {
            for key in &keys {
                if values.contains_key(key) {
                    continue;
                }
                let value = match self.buffer.written(key) {
                    BufferedRead::Known(v) => v,
                    BufferedRead::Unknown => {
                        let v = self
                            .fetch_get_at(key.clone(), self.options.for_update_ts())
                            .await?;
                        self.buffer.lock_with_value(key.clone(), v.clone());
                        v
                    }
                };
                values.insert(key.clone(), value);
            }
        }
        Ok(keys
            .into_iter()
            .map(|k| {
                let v = values.remove(&k).flatten();
                (k, v)
            })
            .collect())
    }

    /// Sends `PessimisticLock` for keys this transaction does not hold yet,
    /// at a fresh `for_update_ts` (again after write conflicts). The first
    /// successful lock fixes the primary; a failed one leaves it unset and
    /// is rolled back with the `for_update_ts` it was sent with.
    async fn lock_fresh_keys(
        &mut self,
        keys: Vec<Key>,
        need_value: bool,
    ) -> Result<std::collections::BTreeMap<Key, Option<Value>>> {
        let mut out = std::collections::BTreeMap::new();
        let Some(first) = keys.first() else {
            return Ok(out);
        };
        let fixed = self.buffer.primary_key().cloned();
        let first_lock = fixed.is_none();
        let primary = fixed.unwrap_or_else(|| first.clone());
        let mutations: Vec<kvrpcpb::Mutation> = keys
            .iter()
            .map(|k| kvrpcpb::Mutation {
                op: kvrpcpb::Op::PessimisticLock as i32,
                key: k.as_bytes().to_vec(),
                ..Default::default()
            })
            .collect();
        // A write committed after our for_update_ts (typically while we
        // waited for its lock) is a conflict TiKV reports; a pessimistic
        // transaction retries at a fresh for_update_ts instead of failing.
        // These keys were never held, so no read of ours is made stale.
        let mut attempts = 0;
        let (result, for_update_ts) = loop {
            attempts += 1;
            let for_update_ts = self.shared.timestamp().await?.version();
            let request = kvrpcpb::PessimisticLockRequest {
                mutations: mutations.clone(),
                primary_lock: primary.as_bytes().to_vec(),
                start_version: self.start_ts(),
                lock_ttl: MAX_TTL,
                for_update_ts,
                is_first_lock: first_lock,
                return_values: need_value,
                min_commit_ts: for_update_ts + 1,
                ..Default::default()
            };
            let result = self
                .shared
                .builder(request)
                .preserve_shard()
                .retry_multi_region(self.region_backoff())
                .resolve_lock_with(self.shared.resolver.clone(), 0, self.lock_backoff())
                .merge(CollectPieces)
                .extract_error()
                .plan()
                .execute()
                .await;
            match result {
                Err(e) if attempts < PESSIMISTIC_LOCK_ATTEMPTS && is_write_conflict(&e) => {
                    debug!(
                        "pessimistic lock of transaction {}: {e}; retrying at a new for_update_ts",
                        self.start_ts()
                    );
                }
                result => break (result, for_update_ts),
            }
        };
        let pieces: Vec<ResponseWithShard<kvrpcpb::PessimisticLockResponse, Vec<LockItem>>> =
            match result {
                Ok(pieces) => pieces,
                Err(e) => {
                    // Release whatever this request locked, with the
                    // for_update_ts it was sent with (TiKV removes only
                    // pessimistic locks at or below it); the locks taken
                    // before stay.
                    let fresh: Vec<Vec<u8>> = keys.iter().map(|k| k.as_bytes().to_vec()).collect();
                    let shared = Arc::clone(&self.shared);
                    let (start_ts, backoff) = (self.start_ts(), self.region_backoff());
                    self.beyond_the_call(async move {
                        let released = shared
                            .pessimistic_rollback(start_ts, backoff, fresh, for_update_ts)
                            .await;
                        if let Err(re) = released {
                            warn!("releasing pessimistic locks after a failed lock: {re}");
                        }
                    })
                    .await;
                    return Err(Error::PessimisticLockError {
                        inner: Box::new(e),
                        success_keys: Vec::new(),
                    });
                }
            };
        self.options.push_for_update_ts(for_update_ts);
        if first_lock {
            self.buffer.set_primary_if_unset(&primary);
        }
        for ResponseWithShard(response, items) in pieces {
            for (i, item) in items.into_iter().enumerate() {
                let key = Key::from(item.0.key);
                let value = if need_value {
                    let not_found = response.not_founds.get(i).copied().unwrap_or(false);
                    match response.values.get(i) {
                        Some(v) if !not_found => Some(v.clone()),
                        _ => None,
                    }
                } else {
                    None
                };
                self.pessimistic_locked.insert(key.clone());
                if need_value {
                    self.buffer.lock_with_value(key.clone(), value.clone());
                } else {
                    self.buffer.lock(key.clone());
                }
                out.insert(key, value);
            }
        }
        if let Some(primary) = self.buffer.primary_key().cloned() {
            self.start_auto_heartbeat(primary, MAX_TTL);
        }
        Ok(out)
    }

    /// Removes this transaction's pessimistic locks on `keys` taken at or
    /// below `for_update_ts`.
    async fn pessimistic_rollback(&self, keys: Vec<Vec<u8>>, for_update_ts: u64) -> Result<()> {
        self.shared
            .pessimistic_rollback(self.start_ts(), self.region_backoff(), keys, for_update_ts)
            .await
    }

    /// Rolls back prewritten `keys`, the transaction's `primary` first:
    /// the primary decides a transaction's fate, so once its rollback is
    /// definite the others can never commit. Should the primary have
    /// committed after all, its rollback fails and the other keys keep
    /// their locks (readers commit them from the primary's record) rather
    /// than being rolled back under a committed primary.
    async fn rollback_prewritten(&self, primary: Option<Key>, keys: Vec<Vec<u8>>) -> Result<()> {
        self.shared
            .rollback_prewritten(self.start_ts(), self.region_backoff(), primary, keys)
            .await
    }

    // ---- commit ----

    async fn two_phase_commit(&mut self) -> Result<Option<Timestamp>> {
        let locked = &self.pessimistic_locked;
        let mutations = self.buffer.mutations(|k| locked.contains(k));
        let Some(primary) = choose_primary(self.buffer.primary_key(), &mutations) else {
            // Only existence checks (keys inserted and deleted again): no
            // lock, nothing to commit; a prewrite still checks them.
            return self.check_not_exists(mutations).await;
        };
        let start_ts = self.start_ts();
        // Async commit counts a transaction committed once every key that
        // takes a lock is prewritten, and a reader meeting its locks may
        // commit it then. A `CheckNotExists` key (inserted and deleted
        // again) takes none, so its check could still fail after that.
        // And a re-sent async-commit or 1PC prewrite of a committed
        // transaction is answered as done only through the commit record
        // of the key it fails on, which a checked-only key never has. Such
        // a transaction commits in two phases instead.
        let has_checked_only_key = !mutations.iter().all(takes_lock);
        let async_commit = self.options.async_commit && !has_checked_only_key;
        let one_pc = self.options.try_one_pc && !has_checked_only_key;
        // The keys that hold a lock once prewritten: the commit batches,
        // the async-commit secondaries and the rollback use only these
        // (a `CheckNotExists` key listed as a secondary has no lock, and a
        // resolver would take it for a rolled-back transaction).
        let keys: Vec<Vec<u8>> = mutations
            .iter()
            .filter(|m| takes_lock(m))
            .map(|m| m.key.clone())
            .collect();
        let pessimistic_actions = if self.is_pessimistic() {
            mutations
                .iter()
                .map(|m| {
                    if self.pessimistic_locked.contains(&Key::from(m.key.clone())) {
                        kvrpcpb::PessimisticAction::DoPessimisticCheck as i32
                    } else {
                        kvrpcpb::PessimisticAction::SkipPessimisticCheck as i32
                    }
                })
                .collect()
        } else {
            Vec::new()
        };
        let secondaries = if async_commit {
            keys.iter()
                .filter(|k| k.as_slice() != primary.as_bytes())
                .cloned()
                .collect()
        } else {
            Vec::new()
        };
        let ttl = if self.is_pessimistic() || async_commit {
            MAX_TTL
        } else {
            DEFAULT_LOCK_TTL
        };
        let lock_ttl = ttl.saturating_add(self.start_instant.elapsed().as_millis() as u64);
        // The heartbeat must come before the prewrite locks expire.
        self.start_auto_heartbeat(primary.clone(), ttl);
        let request = kvrpcpb::PrewriteRequest {
            txn_size: mutations.len() as u64,
            mutations,
            primary_lock: primary.as_bytes().to_vec(),
            start_version: start_ts,
            lock_ttl,
            pessimistic_actions,
            for_update_ts: self.options.for_update_ts(),
            // Readers may push the commit ts above their own start ts
            // instead of waiting for the lock (TiKV's rule for every
            // prewrite, not only async commit).
            min_commit_ts: start_ts + 1,
            use_async_commit: async_commit,
            secondaries,
            try_one_pc: one_pc,
            ..Default::default()
        };
        let mut builder = self.shared.builder(request);
        if async_commit || one_pc {
            // A commit point, but not `terminal_on_dispatch_error`: prewrite
            // is idempotent, so fallback may re-send it; only the outcome
            // must not be hidden. (A key error on a re-sent prewrite is a
            // definite answer: TiKV looks for the transaction's commit
            // record on the failing key before it answers a conflict, and
            // every key here takes a lock, so has one once committed.)
            builder = builder.commit_point();
        }
        let builder = builder
            .preserve_shard()
            .retry_multi_region(self.region_backoff())
            .resolve_lock_with(self.shared.resolver.clone(), 0, self.lock_backoff());
        let prewritten = builder
            .merge(CollectPieces)
            .extract_error()
            .plan()
            .execute()
            .await;
        let responses = match prewritten {
            Ok(r) => r,
            // Every failed piece may have been applied: unknown. (A piece
            // that failed for certain means an async-commit or 1PC
            // transaction can never commit: a resolver finds that key
            // without a lock and rolls the transaction back.)
            Err(e) if all_undetermined(&e) => return Err(undetermined(e)),
            Err(e) => {
                self.rollback_after_failed_prewrite(primary, keys).await;
                return Err(e);
            }
        };
        let outcome = prewrite_outcome(&responses, async_commit, one_pc);
        debug!("transaction {start_ts}: prewrite outcome {outcome:?}");
        match outcome {
            PrewriteOutcome::OnePc(commit_ts) => Ok(Some(Timestamp::from_version(commit_ts))),
            PrewriteOutcome::AsyncCommit(commit_ts) => {
                // Committed at `commit_ts` already; write it down everywhere.
                self.commit_in_background(keys, commit_ts);
                Ok(Some(Timestamp::from_version(commit_ts)))
            }
            PrewriteOutcome::TwoPhase => {
                // Asked for async commit or 1PC: the transaction may be
                // committed already (see below), so failing to get a commit
                // timestamp says nothing about it.
                let mut commit_ts = self
                    .commit_primary(&primary, async_commit || one_pc)
                    .await?;
                if async_commit || one_pc {
                    // Asked for async commit or 1PC and answered as 2PC: a
                    // re-sent prewrite of a transaction already committed
                    // (by an earlier attempt whose answer was lost, or by a
                    // reader resolving it) answers so too, and the primary's
                    // commit then succeeds without writing. The primary's
                    // record holds the real commit ts.
                    commit_ts = self.committed_ts(&primary, commit_ts).await?;
                }
                let secondaries: Vec<Vec<u8>> = keys
                    .into_iter()
                    .filter(|k| k.as_slice() != primary.as_bytes())
                    .collect();
                self.commit_in_background(secondaries, commit_ts);
                Ok(Some(Timestamp::from_version(commit_ts)))
            }
        }
    }

    /// A transaction whose only mutations are `CheckNotExists` (keys it
    /// inserted and deleted again) writes nothing; one prewrite checks the
    /// keys (`AlreadyExist` fails the commit) and leaves no lock.
    async fn check_not_exists(
        &mut self,
        mutations: Vec<kvrpcpb::Mutation>,
    ) -> Result<Option<Timestamp>> {
        let Some(first) = mutations.first().map(|m| m.key.clone()) else {
            return Ok(None);
        };
        let request = kvrpcpb::PrewriteRequest {
            txn_size: mutations.len() as u64,
            mutations,
            primary_lock: first,
            start_version: self.start_ts(),
            lock_ttl: DEFAULT_LOCK_TTL,
            for_update_ts: self.options.for_update_ts(),
            min_commit_ts: self.start_ts() + 1,
            ..Default::default()
        };
        self.shared
            .builder(request)
            .retry_multi_region(self.region_backoff())
            .resolve_lock_with(self.shared.resolver.clone(), 0, self.lock_backoff())
            .merge(CollectError)
            .extract_error()
            .plan()
            .execute()
            .await?;
        Ok(None)
    }

    /// The commit ts the primary's commit record holds (`CheckTxnStatus`,
    /// which neither rolls back nor pushes anything here). `assumed` is
    /// kept when TiKV does not name one.
    ///
    /// The primary is committed when this runs, so no failure here may
    /// read as "not committed": every one is undetermined. No PD call
    /// either: `assumed`, a timestamp just taken, serves as the current
    /// one (it only measures lock TTLs, and the primary holds no lock).
    async fn committed_ts(&self, primary: &Key, assumed: u64) -> Result<u64> {
        let request = kvrpcpb::CheckTxnStatusRequest {
            primary_key: primary.as_bytes().to_vec(),
            lock_ts: self.start_ts(),
            caller_start_ts: 0,
            current_ts: assumed,
            rollback_if_not_exist: false,
            ..Default::default()
        };
        let response = self
            .shared
            .builder(request)
            .retry_multi_region(self.region_backoff())
            .merge(CollectSingle)
            .extract_error()
            .plan()
            .execute()
            .await
            .map_err(|e| {
                // The primary is committed, at a timestamp we cannot name:
                // reported as undetermined (read the keys to learn the
                // state), and no secondary is committed at a guess —
                // readers resolve them from the primary's record.
                Error::UndeterminedError(Box::new(Error::StringError(format!(
                    "transaction {} is committed, but reading back its commit timestamp failed: {e}",
                    self.start_ts()
                ))))
            })?;
        if response.commit_version > 0 && response.commit_version != assumed {
            debug!(
                "transaction {}: committed at {} by an earlier attempt, not {assumed}",
                self.start_ts(),
                response.commit_version
            );
            return Ok(response.commit_version);
        }
        Ok(assumed)
    }

    /// Commits the primary at a fresh timestamp: the commit point.
    /// With `maybe_committed` (the prewrite may have committed it
    /// already), a commit timestamp PD does not give is undetermined.
    async fn commit_primary(&self, primary: &Key, maybe_committed: bool) -> Result<u64> {
        let start_ts = self.start_ts();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let commit_ts = match self.shared.timestamp().await {
                Ok(ts) => ts.version(),
                Err(e) if maybe_committed => {
                    return Err(Error::UndeterminedError(Box::new(Error::StringError(
                        format!(
                            "transaction {start_ts} asked for async commit or 1PC and may be committed already (its prewrite was answered as two-phase), and getting a commit timestamp to settle it failed: {e}"
                        ),
                    ))))
                }
                Err(e) => return Err(e),
            };
            let request =
                new_commit_request(vec![primary.as_bytes().to_vec()], start_ts, commit_ts);
            let result = self
                .shared
                .builder(request)
                .commit_point()
                .retry_multi_region(self.region_backoff())
                .merge(CollectError)
                .extract_error()
                .plan()
                .execute()
                .await;
            match result {
                Ok(_) => return Ok(commit_ts),
                Err(e) if e.is_undetermined() => return Err(undetermined(e)),
                // A reader pushed min_commit_ts above our commit ts: a
                // definite answer, nothing was written; try a later ts.
                Err(e)
                    if attempts < 3
                        && as_key_error(&e).is_some_and(|k| k.commit_ts_expired.is_some()) =>
                {
                    continue
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Best effort: a failed prewrite's locks are rolled back instead of
    /// being left for readers to wait out
    /// ([txn.md](crate::spec::txn#behaviour-we-require)).
    async fn rollback_after_failed_prewrite(&self, primary: Key, keys: Vec<Vec<u8>>) {
        bump(&self.shared.counters.prewrite_rollbacks);
        let shared = Arc::clone(&self.shared);
        let (start_ts, backoff) = (self.start_ts(), self.region_backoff());
        let for_update_ts = self.options.for_update_ts();
        let locked: Vec<Vec<u8>> = self
            .pessimistic_locked
            .iter()
            .map(|k| k.as_bytes().to_vec())
            .collect();
        self.beyond_the_call(async move {
            if let Err(e) = shared
                .rollback_prewritten(start_ts, backoff.clone(), Some(primary), keys)
                .await
            {
                warn!(
                    "rolling back transaction {start_ts} after a failed prewrite failed: {e}; its locks expire after their TTL"
                );
            }
            if let Err(e) = shared
                .pessimistic_rollback(start_ts, backoff, locked, for_update_ts)
                .await
            {
                warn!("releasing pessimistic locks after a failed prewrite failed: {e}");
            }
        })
        .await
    }

    /// Runs `cleanup`, the release of locks a failed write left, on a task
    /// of its own with a deadline of its own: a write that failed because
    /// the call's deadline ran out would otherwise leave its locks, the
    /// cleanup having no time left either. The call waits for it until the
    /// call's own deadline, then returns and leaves it running.
    fn beyond_the_call(
        &self,
        cleanup: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> impl std::future::Future<Output = ()> {
        let task = tokio::spawn(call_deadline::within(self.shared.request_deadline, cleanup));
        async move {
            let _ = call_deadline::bounded(task).await;
        }
    }

    /// Commits `keys` at `commit_ts` on a background task, a bounded number
    /// of times, counting the outcome. Readers that meet the locks first
    /// resolve them from the primary.
    fn commit_in_background(&self, keys: Vec<Vec<u8>>, commit_ts: u64) {
        if keys.is_empty() {
            return;
        }
        let shared = Arc::clone(&self.shared);
        let start_ts = self.start_ts();
        let backoff = self.region_backoff();
        shared
            .counters
            .secondary_commits_pending
            .fetch_add(1, Ordering::Relaxed);
        let bound = shared.request_deadline;
        tokio::spawn(async move {
            let mut last = None;
            for _ in 0..SECONDARY_COMMIT_ATTEMPTS {
                let request = new_commit_request(keys.clone(), start_ts, commit_ts);
                let plan = shared
                    .builder(request)
                    .retry_multi_region(backoff.clone())
                    .merge(CollectError)
                    .extract_error()
                    .plan();
                match tokio::time::timeout(bound, plan.execute()).await {
                    Ok(Ok(_)) => {
                        last = None;
                        break;
                    }
                    Ok(Err(e)) => last = Some(e.to_string()),
                    Err(_) => last = Some(format!("no answer within {bound:?}")),
                }
            }
            match last {
                None => bump(&shared.counters.secondary_commits),
                Some(e) => {
                    bump(&shared.counters.secondary_commit_failures);
                    warn!(
                        "committing the secondaries of transaction {start_ts} at {commit_ts} failed: {e}; \
                         the transaction is committed and readers resolve the remaining locks"
                    );
                }
            }
            shared
                .counters
                .secondary_commits_pending
                .fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// Best effort, for a dropped transaction: releases its pessimistic
    /// locks instead of leaving them for others to wait out.
    fn release_locks_in_background(&self) {
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
        runtime.spawn(async move {
            let released = shared
                .pessimistic_rollback(start_ts, backoff, keys, for_update_ts)
                .await;
            if let Err(e) = released {
                warn!("releasing the locks of dropped transaction {start_ts} failed: {e}");
            }
        });
    }

    /// Keeps `primary`'s lock alive: the first heartbeat comes within half
    /// of `first_ttl_ms` (the TTL the lock was just given), then one every
    /// configured interval.
    fn start_auto_heartbeat(&mut self, primary: Key, first_ttl_ms: u64) {
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
                wait = interval;
                if waited.is_ok() {
                    return;
                }
                if *ended.borrow() {
                    return;
                }
                match send_heart_beat(&shared, &options, primary.clone(), start_ts, start_instant)
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
fn lock_is_gone(e: &Error) -> bool {
    match e {
        Error::KeyError(k) => k.txn_not_found.is_some() || k.retryable.contains("TxnLockNotFound"),
        Error::ExtractedErrors(errors) => !errors.is_empty() && errors.iter().all(lock_is_gone),
        _ => false,
    }
}

/// True when every failure in `e` is undetermined: each failed piece may
/// have been applied. One certain failure among them (a piece that was
/// never applied) is enough to know an async-commit or 1PC transaction did
/// not commit.
fn all_undetermined(e: &Error) -> bool {
    match e {
        e if e.is_undetermined() => true,
        Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
            !errors.is_empty() && errors.iter().all(all_undetermined)
        }
        _ => false,
    }
}

/// client-rust's undetermined error around the plan's.
fn undetermined(e: Error) -> Error {
    match e {
        Error::UndeterminedError(_) => e,
        e => Error::UndeterminedError(Box::new(e)),
    }
}

async fn send_heart_beat<PdC: PdClient>(
    shared: &TxnShared<PdC>,
    options: &TransactionOptions,
    primary: Key,
    start_ts: u64,
    start_instant: Instant,
) -> Result<u64> {
    let ttl = start_instant.elapsed().as_millis() as u64 + MAX_TTL;
    let request = new_heart_beat_request(primary.into(), start_ts, ttl);
    let response = shared
        .builder(request)
        .retry_multi_region(options.retry_options.region_backoff.clone())
        .merge(CollectSingle)
        .extract_error()
        .plan()
        .execute()
        .await?;
    Ok(response.lock_ttl)
}

/// What the prewrite answers mean for the commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PrewriteOutcome {
    /// 1PC succeeded: committed at this ts.
    OnePc(u64),
    /// Async commit succeeded: committed at the largest `min_commit_ts`.
    AsyncCommit(u64),
    /// Commit the primary (2PC, or TiKV fell back from async commit or 1PC:
    /// a `min_commit_ts` or `one_pc_commit_ts` of 0).
    TwoPhase,
}

pub(crate) fn prewrite_outcome<S>(
    responses: &[ResponseWithShard<kvrpcpb::PrewriteResponse, S>],
    async_commit: bool,
    one_pc: bool,
) -> PrewriteOutcome {
    if one_pc && !responses.is_empty() && responses.iter().all(|r| r.0.one_pc_commit_ts > 0) {
        if let [only] = responses {
            return PrewriteOutcome::OnePc(only.0.one_pc_commit_ts);
        }
    }
    if async_commit && !responses.is_empty() && responses.iter().all(|r| r.0.min_commit_ts > 0) {
        let ts = responses
            .iter()
            .map(|r| r.0.min_commit_ts)
            .max()
            .unwrap_or(0);
        return PrewriteOutcome::AsyncCommit(ts);
    }
    PrewriteOutcome::TwoPhase
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_conflict_is_seen_among_several_errors() {
        let conflict = || {
            Error::KeyError(Box::new(kvrpcpb::KeyError {
                conflict: Some(kvrpcpb::WriteConflict::default()),
                ..Default::default()
            }))
        };
        let locked = || {
            Error::KeyError(Box::new(kvrpcpb::KeyError {
                locked: Some(kvrpcpb::LockInfo::default()),
                ..Default::default()
            }))
        };
        assert!(is_write_conflict(&conflict()));
        assert!(!is_write_conflict(&locked()));
        // What `strongest_shard_error` makes of two Regions' conflicts: key
        // errors only, so `MultipleKeyErrors`.
        let two_regions = crate::request::strongest_shard_error(vec![conflict(), conflict()]);
        assert!(matches!(two_regions, Error::MultipleKeyErrors(_)));
        assert!(is_write_conflict(&two_regions));
        assert!(is_write_conflict(&Error::MultipleKeyErrors(vec![
            locked(),
            conflict()
        ])));
        assert!(!is_write_conflict(&Error::MultipleKeyErrors(vec![
            locked(),
            locked()
        ])));
        assert!(is_write_conflict(&Error::ExtractedErrors(vec![
            Error::InternalError {
                message: "x".to_owned()
            },
            conflict()
        ])));
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

    fn answer(
        min_commit_ts: u64,
        one_pc_commit_ts: u64,
    ) -> ResponseWithShard<kvrpcpb::PrewriteResponse, ()> {
        ResponseWithShard(
            kvrpcpb::PrewriteResponse {
                min_commit_ts,
                one_pc_commit_ts,
                ..Default::default()
            },
            (),
        )
    }

    #[test]
    fn zero_timestamps_mean_fallback_to_two_phase() {
        assert_eq!(
            prewrite_outcome(&[answer(10, 0), answer(12, 0)], true, false),
            PrewriteOutcome::AsyncCommit(12)
        );
        assert_eq!(
            prewrite_outcome(&[answer(10, 0), answer(0, 0)], true, false),
            PrewriteOutcome::TwoPhase
        );
        assert_eq!(
            prewrite_outcome(&[answer(0, 9)], false, true),
            PrewriteOutcome::OnePc(9)
        );
        assert_eq!(
            prewrite_outcome(&[answer(0, 0)], false, true),
            PrewriteOutcome::TwoPhase
        );
        // 1PC over two shards would be two commits: never reported as 1PC.
        assert_eq!(
            prewrite_outcome(&[answer(0, 9), answer(0, 9)], false, true),
            PrewriteOutcome::TwoPhase
        );
    }
}
