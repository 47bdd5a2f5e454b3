//! The transactional data of one Region: Percolator's three column families
//! ([txn.md, "The
//! model"](https://github.com/tikv-plan/tikv-plan/blob/main/docs/txn.md#the-model-percolator-as-tikv-runs-it)) over
//! memcomparable-encoded keys, and every transactional command as a plain
//! function over them. No I/O, no clock: lock TTLs are measured against the
//! `current_ts` a request carries, whose physical part comes from the TSO, as
//! TiKV does. All peers of a Region share one `Mvcc`, so it is linearizable
//! under the cluster lock.
//!
//! A command that fails on one key writes nothing (TiKV discards the
//! command's write batch), except resolve-lock, which TiKV also applies
//! key by key.
//!
//! This file is long because it is one state machine: every transactional
//! command over the same three column families and the lookups they share
//! (the lock of a key, its commit or rollback record at a ts); split by
//! command, the invariants each command keeps would be scattered.

// Key errors are the wire message itself (`kvrpcpb::KeyError`), returned
// straight into responses; boxing them would only add noise here.
#![allow(clippy::result_large_err)]

use std::collections::BTreeMap;
use std::ops::Bound;

use super::codec::{decode_bytes, encode_bytes};
use crate::proto::kvrpcpb::{self, KeyError, LockInfo, Op};

/// `WriteConflict.reason` values of kvproto.
const REASON_OPTIMISTIC: i32 = 1;
const REASON_PESSIMISTIC_RETRY: i32 = 2;
const REASON_SELF_ROLLED_BACK: i32 = 3;
const REASON_LAZY_UNIQUENESS_CHECK: i32 = 5;

/// `Context.isolation_level` of read committed: reads ignore locks.
const ISOLATION_READ_COMMITTED: i32 = 1;

/// What a lock is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LockKind {
    Put,
    Delete,
    /// A read lock (`Op::Lock`): committed as a `Lock` write record.
    Lock,
    /// A pessimistic lock, not yet prewritten.
    Pessimistic,
}

impl LockKind {
    fn op(self) -> Op {
        match self {
            LockKind::Put => Op::Put,
            LockKind::Delete => Op::Del,
            LockKind::Lock => Op::Lock,
            LockKind::Pessimistic => Op::PessimisticLock,
        }
    }

    /// Put and Delete locks block readers; Lock and Pessimistic do not.
    fn blocks_readers(self) -> bool {
        matches!(self, LockKind::Put | LockKind::Delete)
    }
}

/// One lock (the `lock` column family).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lock {
    /// The primary key, unencoded, as clients sent it.
    pub(crate) primary: Vec<u8>,
    pub(crate) start_ts: u64,
    /// Milliseconds, measured from the physical part of `start_ts`.
    pub(crate) ttl: u64,
    pub(crate) kind: LockKind,
    pub(crate) for_update_ts: u64,
    pub(crate) min_commit_ts: u64,
    pub(crate) use_async_commit: bool,
    /// Only on an async-commit primary.
    pub(crate) secondaries: Vec<Vec<u8>>,
    pub(crate) txn_size: u64,
}

/// The kind of a write record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteKind {
    Put,
    Delete,
    Lock,
    Rollback,
}

impl WriteKind {
    /// The name the control port prints.
    pub(crate) fn name(self) -> &'static str {
        match self {
            WriteKind::Put => "put",
            WriteKind::Delete => "delete",
            WriteKind::Lock => "lock",
            WriteKind::Rollback => "rollback",
        }
    }
}

/// One write record (the `write` column family), stored at its commit ts
/// (a rollback at the transaction's start ts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Write {
    pub(crate) start_ts: u64,
    pub(crate) kind: WriteKind,
    /// A rollback of the transaction whose start ts is this record's
    /// commit ts was written on top of this commit record (TiKV's
    /// `has_overlapped_rollback`): that transaction is rolled back here,
    /// though its rollback record has no place of its own.
    pub(crate) overlapped_rollback: bool,
}

impl Write {
    fn new(start_ts: u64, kind: WriteKind) -> Write {
        Write {
            start_ts,
            kind,
            overlapped_rollback: false,
        }
    }

    /// Whether this record, found at `start_ts`, says the transaction of
    /// `start_ts` was rolled back on the key.
    fn rolls_back(&self, commit_ts: u64, start_ts: u64) -> bool {
        commit_ts == start_ts && (self.kind == WriteKind::Rollback || self.overlapped_rollback)
    }
}

/// One write record of a key, as [`SimCluster::versions`](super::SimCluster::versions)
/// shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MvccVersion {
    /// The commit ts (a rollback's is its start ts).
    pub commit_ts: u64,
    /// The writing transaction's start ts.
    pub start_ts: u64,
    /// `put`, `delete`, `lock` or `rollback`.
    pub kind: &'static str,
    /// The value of a `put`.
    pub value: Option<Vec<u8>>,
}

/// The transactional data of one Region. Keys are memcomparable-encoded.
#[derive(Debug, Clone, Default)]
pub(crate) struct Mvcc {
    locks: BTreeMap<Vec<u8>, Lock>,
    /// key → commit_ts → write record.
    writes: BTreeMap<Vec<u8>, BTreeMap<u64, Write>>,
    /// key → start_ts → value (the `default` column family).
    data: BTreeMap<Vec<u8>, BTreeMap<u64, Vec<u8>>>,
    /// The largest timestamp any read used: async-commit and 1PC commit
    /// after it, so no reader that already looked misses the commit.
    max_ts: u64,
    /// The locks removed by the command being applied: (encoded key, the
    /// lock's start ts, its commit ts or 0 for a rollback). The store
    /// takes them after each command to wake the lock's waiters.
    released: Vec<(Vec<u8>, u64, u64)>,
}

/// The physical (millisecond) part of a timestamp.
pub(crate) fn physical(ts: u64) -> u64 {
    ts >> 18
}

/// A lock has expired once its TTL has passed since its start, on the
/// physical clock of `current_ts` (TiKV: `physical(start) + ttl <
/// physical(current)`).
pub(crate) fn lock_expired(lock: &Lock, current_ts: u64) -> bool {
    physical(lock.start_ts).saturating_add(lock.ttl) < physical(current_ts)
}

/// The raw key of an encoded one (keys are stored encoded, so this holds).
fn raw_key(encoded: &[u8]) -> Vec<u8> {
    decode_bytes(encoded).unwrap_or_else(|_| encoded.to_vec())
}

fn range_bounds<'a>(low: &'a [u8], high: &'a [u8]) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    let upper = if high.is_empty() {
        Bound::Unbounded
    } else {
        Bound::Excluded(high)
    };
    (Bound::Included(low), upper)
}

// ---- Key errors, as TiKV answers them ----

fn locked_error(lock: &Lock, raw: &[u8]) -> KeyError {
    KeyError {
        locked: Some(lock.info(raw)),
        ..Default::default()
    }
}

fn abort(message: String) -> KeyError {
    KeyError {
        abort: message,
        ..Default::default()
    }
}

fn retryable(message: String) -> KeyError {
    KeyError {
        retryable: message,
        ..Default::default()
    }
}

fn pessimistic_lock_not_found(start_ts: u64, raw: &[u8]) -> KeyError {
    abort(format!(
        "PessimisticLockNotFound {{ start_ts: {start_ts}, key: {raw:?} }}: lock the key before prewriting it with DoPessimisticCheck"
    ))
}

fn write_conflict(
    start_ts: u64,
    conflict: Write,
    conflict_commit_ts: u64,
    raw: &[u8],
    primary: &[u8],
    reason: i32,
) -> KeyError {
    KeyError {
        // TiKV also fills `retryable`, for older clients.
        retryable: format!(
            "WriteConflict {{ start_ts: {start_ts}, conflict_start_ts: {}, conflict_commit_ts: {conflict_commit_ts}, key: {raw:?} }}",
            conflict.start_ts
        ),
        conflict: Some(kvrpcpb::WriteConflict {
            start_ts,
            conflict_ts: conflict.start_ts,
            key: raw.to_vec(),
            primary: primary.to_vec(),
            conflict_commit_ts,
            reason,
        }),
        ..Default::default()
    }
}

fn txn_lock_not_found(start_ts: u64, raw: &[u8]) -> KeyError {
    retryable(format!(
        "TxnLockNotFound {{ start_ts: {start_ts}, key: {raw:?} }}: the transaction's lock is gone (rolled back or never written)"
    ))
}

fn txn_not_found(start_ts: u64, primary: &[u8]) -> KeyError {
    KeyError {
        txn_not_found: Some(kvrpcpb::TxnNotFound {
            start_ts,
            primary_key: primary.to_vec(),
        }),
        ..Default::default()
    }
}

impl Lock {
    /// The lock as clients see it.
    pub(crate) fn info(&self, raw: &[u8]) -> LockInfo {
        LockInfo {
            primary_lock: self.primary.clone(),
            lock_version: self.start_ts,
            key: raw.to_vec(),
            lock_ttl: self.ttl,
            txn_size: self.txn_size,
            lock_type: self.kind.op() as i32,
            lock_for_update_ts: self.for_update_ts,
            use_async_commit: self.use_async_commit,
            min_commit_ts: self.min_commit_ts,
            secondaries: self.secondaries.clone(),
            duration_to_last_update_ms: 0,
            is_txn_file: false,
        }
    }
}

/// What a transaction's record on a key says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TxnRecord {
    Committed(u64),
    RolledBack,
    None,
}

/// A status of a transaction found on a secondary key.
enum SecondaryStatus {
    Locked(LockInfo),
    Committed(u64),
    RolledBack,
}

impl Mvcc {
    // ---- Reading the families ----

    /// Drops every pessimistic lock (kept in a leader's memory only, so a
    /// crash loses them); returns how many.
    pub(crate) fn drop_pessimistic_locks(&mut self) -> usize {
        let before = self.locks.len();
        self.locks.retain(|_, l| l.kind != LockKind::Pessimistic);
        before - self.locks.len()
    }

    /// The lock on an encoded key.
    #[cfg(test)]
    pub(crate) fn lock(&self, key: &[u8]) -> Option<&Lock> {
        self.locks.get(key)
    }

    /// Every lock with its encoded key in `[low, high)` (empty `high`:
    /// unbounded), in key order.
    pub(crate) fn locks_in(&self, low: &[u8], high: &[u8]) -> Vec<(Vec<u8>, Lock)> {
        if !high.is_empty() && low >= high {
            return Vec::new();
        }
        self.locks
            .range::<[u8], _>(range_bounds(low, high))
            .map(|(k, l)| (k.clone(), l.clone()))
            .collect()
    }

    /// The write records of an encoded key, newest first, with the value of
    /// each Put.
    pub(crate) fn versions(&self, key: &[u8]) -> Vec<MvccVersion> {
        let Some(writes) = self.writes.get(key) else {
            return Vec::new();
        };
        writes
            .iter()
            .rev()
            .map(|(commit_ts, w)| MvccVersion {
                commit_ts: *commit_ts,
                start_ts: w.start_ts,
                kind: w.kind.name(),
                value: (w.kind == WriteKind::Put)
                    .then(|| self.value_at(key, w.start_ts))
                    .flatten(),
            })
            .collect()
    }

    /// The largest read timestamp seen.
    pub(crate) fn max_ts(&self) -> u64 {
        self.max_ts
    }

    fn value_at(&self, key: &[u8], start_ts: u64) -> Option<Vec<u8>> {
        self.data.get(key)?.get(&start_ts).cloned()
    }

    /// The start ts of the oldest lock that can commit, if any (what holds
    /// the resolved ts back; TiKV's resolver does not track pessimistic
    /// locks, which are prewritten before they commit).
    pub(crate) fn oldest_lock_start_ts(&self) -> Option<u64> {
        self.locks
            .values()
            .filter(|l| l.kind != LockKind::Pessimistic)
            .map(|l| l.start_ts)
            .min()
    }

    /// Raises `max_ts` to `ts` (a read's ts, or a resolved-ts tick): every
    /// transaction prewritten from now on commits above it.
    pub(crate) fn observe_read_ts(&mut self, ts: u64) {
        if ts != u64::MAX {
            self.max_ts = self.max_ts.max(ts);
        }
    }

    /// The newest write record with commit_ts <= ts that is a Put or a
    /// Delete (Lock and Rollback records carry no data).
    fn newest_data_write(&self, key: &[u8], ts: u64) -> Option<(u64, Write)> {
        self.writes
            .get(key)?
            .range(..=ts)
            .rev()
            .find(|(_, w)| matches!(w.kind, WriteKind::Put | WriteKind::Delete))
            .map(|(c, w)| (*c, *w))
    }

    /// The committed value visible at `ts`.
    fn committed_value(&self, key: &[u8], ts: u64) -> Option<Vec<u8>> {
        match self.newest_data_write(key, ts)? {
            (
                _,
                Write {
                    start_ts,
                    kind: WriteKind::Put,
                    ..
                },
            ) => self.value_at(key, start_ts),
            _ => None,
        }
    }

    /// The newest write record of the key, of any transaction and kind
    /// (TiKV's `seek_write` from the maximum ts).
    fn newest_write(&self, key: &[u8]) -> Option<(u64, Write)> {
        self.newest_write_at_or_below(key, u64::MAX)
    }

    /// The newest write record with commit ts <= `ts`.
    fn newest_write_at_or_below(&self, key: &[u8], ts: u64) -> Option<(u64, Write)> {
        self.writes
            .get(key)?
            .range(..=ts)
            .next_back()
            .map(|(c, w)| (*c, *w))
    }

    /// What the transaction of `start_ts` left on `key` (TiKV's
    /// `MvccReader::get_txn_commit_record`): the records are scanned from the
    /// newest down to `start_ts`; a record of this transaction is its
    /// commit or rollback; another transaction's commit record at exactly
    /// `start_ts` carrying the overlapped-rollback flag is its rollback.
    fn txn_record(&self, key: &[u8], start_ts: u64) -> TxnRecord {
        let Some(writes) = self.writes.get(key) else {
            return TxnRecord::None;
        };
        for (&commit_ts, w) in writes.range(start_ts..).rev() {
            if w.start_ts == start_ts {
                return if w.kind == WriteKind::Rollback {
                    TxnRecord::RolledBack
                } else {
                    TxnRecord::Committed(commit_ts)
                };
            }
            if commit_ts == start_ts {
                return if w.overlapped_rollback {
                    TxnRecord::RolledBack
                } else {
                    TxnRecord::None
                };
            }
        }
        TxnRecord::None
    }

    /// Whether a read at `ts` must stop at this lock (TiKV's
    /// `check_ts_conflict`).
    fn blocks_read(lock: &Lock, raw: &[u8], ts: u64, bypass: &[u64]) -> bool {
        if lock.start_ts > ts || !lock.kind.blocks_readers() {
            return false;
        }
        // Its commit ts will exceed the read ts.
        if lock.min_commit_ts > ts {
            return false;
        }
        if bypass.contains(&lock.start_ts) {
            return false;
        }
        // A read at the maximum ts of the primary itself reads the latest
        // committed version.
        !(ts == u64::MAX && lock.primary == raw)
    }

    /// A snapshot read of one key.
    fn read(
        &self,
        key: &[u8],
        raw: &[u8],
        ts: u64,
        ctx: Option<&kvrpcpb::Context>,
    ) -> Result<Option<Vec<u8>>, KeyError> {
        let read_committed = ctx.is_some_and(|c| c.isolation_level == ISOLATION_READ_COMMITTED);
        let bypass = ctx.map(|c| c.resolved_locks.as_slice()).unwrap_or(&[]);
        if !read_committed {
            if let Some(lock) = self.locks.get(key) {
                if Self::blocks_read(lock, raw, ts, bypass) {
                    return Err(locked_error(lock, raw));
                }
            }
        }
        Ok(self.committed_value(key, ts))
    }

    // ---- Writing the families ----

    fn remove_data(&mut self, key: &[u8], start_ts: u64) {
        if let Some(versions) = self.data.get_mut(key) {
            versions.remove(&start_ts);
            if versions.is_empty() {
                self.data.remove(key);
            }
        }
    }

    /// Commits the lock of `start_ts` on `key` at `commit_ts`. A
    /// pessimistic lock that was never prewritten is only removed: TiKV's
    /// `actions/commit.rs` (`commit`) unlocks it and writes no record.
    fn commit_lock(&mut self, key: &[u8], lock: &Lock, commit_ts: u64) {
        let kind = match lock.kind {
            LockKind::Put => WriteKind::Put,
            LockKind::Delete => WriteKind::Delete,
            LockKind::Lock => WriteKind::Lock,
            // TiKV releases it as a rollback (commit ts 0).
            LockKind::Pessimistic => {
                self.unlock(key, 0);
                return;
            }
        };
        let mut write = Write::new(lock.start_ts, kind);
        // Another transaction's rollback recorded at this very ts (its start
        // ts) must survive the commit record that replaces it: TiKV keeps
        // the rollback ts in the lock (`MvccTxn::mark_rollback_on_mismatching_lock`)
        // and sets `has_overlapped_rollback` on the commit record.
        let writes = self.writes.entry(key.to_vec()).or_default();
        if let Some(old) = writes.get(&commit_ts) {
            write.overlapped_rollback = old.rolls_back(commit_ts, commit_ts);
        }
        writes.insert(commit_ts, write);
        self.unlock(key, commit_ts);
    }

    /// Removes the lock on `key`, if any, and notes its release (at
    /// `commit_ts`; 0 for a rollback) for its waiters.
    fn unlock(&mut self, key: &[u8], commit_ts: u64) {
        if let Some(lock) = self.locks.remove(key) {
            self.released.push((key.to_vec(), lock.start_ts, commit_ts));
        }
    }

    /// The locks released since the last call (see `released`).
    pub(crate) fn take_released(&mut self) -> Vec<(Vec<u8>, u64, u64)> {
        std::mem::take(&mut self.released)
    }

    /// Rolls back `start_ts` on `key`: removes its lock and value and
    /// leaves a rollback record, so a late prewrite cannot succeed. Err
    /// when the transaction already committed on this key.
    ///
    /// When another transaction's commit record already sits at `start_ts`,
    /// the rollback is kept as the `overlapped_rollback` flag of that
    /// record. TiKV (`actions/check_txn_status.rs`, `make_rollback`) does
    /// so for protected rollbacks (the primary's, CheckTxnStatus',
    /// CheckSecondaryLocks') and drops unprotected ones; the sim never
    /// collapses rollbacks, so it treats every rollback as protected.
    fn rollback_key(&mut self, key: &[u8], start_ts: u64) -> Result<(), KeyError> {
        if self.locks.get(key).is_some_and(|l| l.start_ts == start_ts) {
            self.unlock(key, 0);
            self.remove_data(key, start_ts);
        } else {
            match self.txn_record(key, start_ts) {
                TxnRecord::Committed(commit_ts) => {
                    return Err(abort(format!(
                        "Committed {{ start_ts: {start_ts}, commit_ts: {commit_ts}, key: {:?} }}: the transaction is already committed",
                        raw_key(key)
                    )))
                }
                TxnRecord::RolledBack => return Ok(()),
                TxnRecord::None => {}
            }
        }
        let writes = self.writes.entry(key.to_vec()).or_default();
        writes
            .entry(start_ts)
            .and_modify(|w| w.overlapped_rollback = true)
            .or_insert(Write::new(start_ts, WriteKind::Rollback));
        Ok(())
    }

    // ---- Commands ----

    /// `KvGet`.
    pub(crate) fn get(
        &mut self,
        req: &kvrpcpb::GetRequest,
        ctx: Option<&kvrpcpb::Context>,
    ) -> kvrpcpb::GetResponse {
        self.observe_read_ts(req.version);
        let key = encode_bytes(&req.key);
        match self.read(&key, &req.key, req.version, ctx) {
            Ok(value) => kvrpcpb::GetResponse {
                not_found: value.is_none(),
                value: value.unwrap_or_default(),
                ..Default::default()
            },
            Err(e) => kvrpcpb::GetResponse {
                error: Some(e),
                ..Default::default()
            },
        }
    }

    /// `KvBatchGet`: a locked key is a pair carrying the lock error.
    pub(crate) fn batch_get(
        &mut self,
        req: &kvrpcpb::BatchGetRequest,
        ctx: Option<&kvrpcpb::Context>,
    ) -> kvrpcpb::BatchGetResponse {
        self.observe_read_ts(req.version);
        let mut pairs = Vec::new();
        for raw in &req.keys {
            let key = encode_bytes(raw);
            match self.read(&key, raw, req.version, ctx) {
                Ok(Some(value)) => pairs.push(kvrpcpb::KvPair {
                    error: None,
                    key: raw.clone(),
                    value,
                }),
                Ok(None) => {}
                Err(e) => pairs.push(kvrpcpb::KvPair {
                    error: Some(e),
                    key: raw.clone(),
                    value: Vec::new(),
                }),
            }
        }
        kvrpcpb::BatchGetResponse {
            pairs,
            ..Default::default()
        }
    }

    /// `KvScan` over the encoded range `[low, high)` (already clamped to
    /// the Region): forward or reverse, at most `limit` pairs (0: no limit);
    /// a blocking lock is a pair carrying the lock error.
    pub(crate) fn scan(
        &mut self,
        req: &kvrpcpb::ScanRequest,
        ctx: Option<&kvrpcpb::Context>,
        low: &[u8],
        high: &[u8],
    ) -> kvrpcpb::ScanResponse {
        self.observe_read_ts(req.version);
        let mut keys: Vec<&Vec<u8>> = Vec::new();
        if high.is_empty() || low < high {
            let bounds = range_bounds(low, high);
            keys.extend(self.writes.range::<[u8], _>(bounds).map(|(k, _)| k));
            keys.extend(self.locks.range::<[u8], _>(bounds).map(|(k, _)| k));
        }
        keys.sort();
        keys.dedup();
        if req.reverse {
            keys.reverse();
        }
        let limit = if req.limit == 0 {
            usize::MAX
        } else {
            req.limit as usize
        };
        let mut pairs = Vec::new();
        for key in keys {
            if pairs.len() >= limit {
                break;
            }
            let raw = raw_key(key);
            match self.read(key, &raw, req.version, ctx) {
                Ok(Some(value)) => pairs.push(kvrpcpb::KvPair {
                    error: None,
                    key: raw,
                    value: if req.key_only { Vec::new() } else { value },
                }),
                Ok(None) => {}
                Err(e) => pairs.push(kvrpcpb::KvPair {
                    error: Some(e),
                    key: raw,
                    value: Vec::new(),
                }),
            }
        }
        kvrpcpb::ScanResponse {
            pairs,
            ..Default::default()
        }
    }

    /// `KvPrewrite`, including async commit and 1PC.
    ///
    /// A resent prewrite is answered as TiKV answers it:
    /// - a key already locked by this transaction is left as it is, and
    ///   its lock's min_commit_ts (0 for a two-phase lock, which makes the
    ///   whole request fall back to two-phase commit) is what the key
    ///   contributes (`actions/prewrite.rs`, `PrewriteMutation::check_lock`:
    ///   `LockStatus::Locked`);
    /// - a transaction already committed on a key answers success and
    ///   writes nothing, with its real commit ts as `min_commit_ts` (async
    ///   commit) and as `one_pc_commit_ts` (1PC) (`commands/prewrite.rs`,
    ///   `Prewriter::prewrite` → `actions/common.rs`,
    ///   `check_committed_record_on_err`, then `write_result` /
    ///   `one_pc_commit` with the returned ts; a 1PC transaction is never
    ///   committed twice);
    /// - a transaction rolled back on a key gets a write conflict
    ///   (`SelfRolledBack`), or `PessimisticLockNotFound` for a key
    ///   prewritten with `DoPessimisticCheck`.
    pub(crate) fn prewrite(&mut self, req: &kvrpcpb::PrewriteRequest) -> kvrpcpb::PrewriteResponse {
        let start_ts = req.start_version;
        let fail = |errors: Vec<KeyError>| kvrpcpb::PrewriteResponse {
            errors,
            ..Default::default()
        };
        // Insert and CheckNotExists read at the start ts: TiKV updates
        // max_ts before anything else.
        if req
            .mutations
            .iter()
            .any(|m| m.op == Op::Insert as i32 || m.op == Op::CheckNotExists as i32)
        {
            self.observe_read_ts(start_ts);
        }
        let mut use_async_commit = req.use_async_commit;
        let mut try_one_pc = req.try_one_pc;
        let mut locked = Vec::new();
        let mut planned: Vec<(Vec<u8>, LockKind, Option<Vec<u8>>)> = Vec::new();
        // The min_commit_ts the keys already done contribute.
        let mut final_min_commit_ts = 0;
        let mut fall_back = false;
        for (i, m) in req.mutations.iter().enumerate() {
            let key = encode_bytes(&m.key);
            let action = req.pessimistic_actions.get(i).copied().unwrap_or(0);
            match self.prewrite_key(req, m, &key, action) {
                Err(e) if e.locked.is_some() => locked.push(e),
                Err(e) => return fail(vec![e]),
                Ok(PrewriteStep::Committed(commit_ts)) => {
                    return kvrpcpb::PrewriteResponse {
                        min_commit_ts: if req.use_async_commit { commit_ts } else { 0 },
                        one_pc_commit_ts: if req.try_one_pc { commit_ts } else { 0 },
                        ..Default::default()
                    };
                }
                Ok(PrewriteStep::Resent(0)) => fall_back = true,
                Ok(PrewriteStep::Resent(min_commit_ts)) => {
                    final_min_commit_ts = final_min_commit_ts.max(min_commit_ts)
                }
                Ok(PrewriteStep::CheckedOnly) => {
                    final_min_commit_ts = final_min_commit_ts
                        .max(req.min_commit_ts)
                        .max(start_ts.saturating_add(1))
                }
                Ok(PrewriteStep::Lock(kind)) => {
                    let value = (kind == LockKind::Put).then(|| m.value.clone());
                    planned.push((key, kind, value));
                }
            }
        }
        if !locked.is_empty() {
            return fail(locked);
        }
        // Each new lock's min_commit_ts (TiKV's `async_commit_timestamps`):
        // above max_ts, the start ts and for_update_ts, and not below the
        // one asked for or a pessimistic lock's pushed one.
        let lock_min_commit_ts: Vec<u64> = planned
            .iter()
            .map(|(key, _, _)| {
                let pushed = self
                    .locks
                    .get(key)
                    .filter(|l| l.start_ts == start_ts && l.kind == LockKind::Pessimistic)
                    .map_or(0, |l| l.min_commit_ts);
                req.min_commit_ts.max(pushed)
            })
            .collect();
        let mut new_min_commit_ts = lock_min_commit_ts.clone();
        if (use_async_commit || try_one_pc) && !fall_back {
            let floor = self
                .max_ts
                .max(start_ts)
                .max(req.for_update_ts)
                .saturating_add(1);
            for ts in &mut new_min_commit_ts {
                *ts = (*ts).max(floor);
                if req.max_commit_ts != 0 && *ts > req.max_commit_ts {
                    // CommitTsTooLarge: TiKV falls back to two-phase commit.
                    fall_back = true;
                }
                final_min_commit_ts = final_min_commit_ts.max(*ts);
            }
        }
        if fall_back {
            // min_commit_ts and one_pc_commit_ts come back 0.
            use_async_commit = false;
            try_one_pc = false;
            final_min_commit_ts = 0;
            new_min_commit_ts = lock_min_commit_ts;
        }
        if try_one_pc {
            for (key, kind, value) in planned {
                if let Some(value) = value {
                    self.data
                        .entry(key.clone())
                        .or_default()
                        .insert(start_ts, value);
                }
                let lock = self.new_lock(req, kind, &key, false, final_min_commit_ts);
                self.commit_lock(&key, &lock, final_min_commit_ts);
            }
            return kvrpcpb::PrewriteResponse {
                min_commit_ts: if use_async_commit {
                    final_min_commit_ts
                } else {
                    0
                },
                one_pc_commit_ts: final_min_commit_ts,
                ..Default::default()
            };
        }
        for ((key, kind, value), min_commit_ts) in planned.into_iter().zip(new_min_commit_ts) {
            if let Some(value) = value {
                self.data
                    .entry(key.clone())
                    .or_default()
                    .insert(start_ts, value);
            } else {
                // A prewrite over a pessimistic lock may turn a Put into a
                // Delete.
                self.remove_data(&key, start_ts);
            }
            let lock = self.new_lock(req, kind, &key, use_async_commit, min_commit_ts);
            self.locks.insert(key, lock);
        }
        kvrpcpb::PrewriteResponse {
            min_commit_ts: if use_async_commit {
                final_min_commit_ts
            } else {
                0
            },
            ..Default::default()
        }
    }

    fn new_lock(
        &self,
        req: &kvrpcpb::PrewriteRequest,
        kind: LockKind,
        key: &[u8],
        use_async_commit: bool,
        min_commit_ts: u64,
    ) -> Lock {
        let is_primary = encode_bytes(&req.primary_lock) == key;
        // A pessimistic lock being replaced may carry a longer TTL (from
        // heartbeats) and a pushed min_commit_ts: keep them.
        let (old_ttl, old_min_commit_ts, old_for_update_ts) = self
            .locks
            .get(key)
            .filter(|l| l.start_ts == req.start_version && l.kind == LockKind::Pessimistic)
            .map(|l| (l.ttl, l.min_commit_ts, l.for_update_ts))
            .unwrap_or((0, 0, 0));
        Lock {
            primary: req.primary_lock.clone(),
            start_ts: req.start_version,
            ttl: req.lock_ttl.max(old_ttl),
            kind,
            for_update_ts: req.for_update_ts.max(old_for_update_ts),
            min_commit_ts: min_commit_ts.max(old_min_commit_ts),
            use_async_commit,
            secondaries: if use_async_commit && is_primary {
                req.secondaries.clone()
            } else {
                Vec::new()
            },
            txn_size: req.txn_size,
        }
    }

    /// What a prewrite does on one key. On an error, a commit record of
    /// this transaction on the key turns it into success (TiKV's
    /// `check_committed_record_on_err`, reached on WriteConflict with a
    /// commit ts above the start ts, PessimisticLockNotFound and
    /// KeyIsLocked; the other errors of a key cannot meet such a record:
    /// they come after the write-conflict check, or hold this
    /// transaction's own pessimistic lock).
    fn prewrite_key(
        &self,
        req: &kvrpcpb::PrewriteRequest,
        m: &kvrpcpb::Mutation,
        key: &[u8],
        action: i32,
    ) -> Result<PrewriteStep, KeyError> {
        let step = self.check_prewrite_key(req, m, key, action);
        if step.is_err() {
            if let TxnRecord::Committed(commit_ts) = self.txn_record(key, req.start_version) {
                return Ok(PrewriteStep::Committed(commit_ts));
            }
        }
        step
    }

    /// Decides what a prewrite does on one key, without changing anything
    /// (TiKV's `actions/prewrite.rs`, `prewrite_with_generation`).
    fn check_prewrite_key(
        &self,
        req: &kvrpcpb::PrewriteRequest,
        m: &kvrpcpb::Mutation,
        key: &[u8],
        action: i32,
    ) -> Result<PrewriteStep, KeyError> {
        let start_ts = req.start_version;
        // TiKV serves a prewrite with a for_update_ts as a pessimistic one.
        let pessimistic_txn = req.for_update_ts != 0;
        let pessimistic_check = action == kvrpcpb::PessimisticAction::DoPessimisticCheck as i32;
        let kind = match Op::try_from(m.op) {
            Ok(Op::Put) | Ok(Op::Insert) => LockKind::Put,
            Ok(Op::Del) => LockKind::Delete,
            Ok(Op::Lock) => LockKind::Lock,
            Ok(Op::CheckNotExists) => LockKind::Lock,
            _ => {
                return Err(abort(format!(
                    "invalid mutation op {} in a prewrite: use Put, Del, Lock, Insert or CheckNotExists",
                    m.op
                )))
            }
        };
        let mut holds_pessimistic_lock = false;
        if let Some(lock) = self.locks.get(key) {
            if lock.start_ts != start_ts {
                // The key was to hold this transaction's pessimistic lock.
                if pessimistic_check {
                    return Err(pessimistic_lock_not_found(start_ts, &m.key));
                }
                // A pessimistic transaction is told not to wait: TiKV
                // answers the lock with TTL 0 (`PrewriteMutation::lock_info`).
                let mut error = locked_error(lock, &m.key);
                if let (true, Some(info)) = (pessimistic_txn, error.locked.as_mut()) {
                    info.lock_ttl = 0;
                }
                return Err(error);
            }
            if lock.kind != LockKind::Pessimistic {
                // A resent prewrite: already done; the lock is not changed.
                return Ok(PrewriteStep::Resent(if lock.use_async_commit {
                    lock.min_commit_ts
                } else {
                    0
                }));
            }
            if !pessimistic_txn {
                return Err(abort(format!(
                    "LockTypeNotMatch {{ start_ts: {start_ts}, key: {:?}, pessimistic: true }}: an optimistic prewrite met this transaction's pessimistic lock",
                    m.key
                )));
            }
            holds_pessimistic_lock = true;
        } else if pessimistic_check {
            // The pessimistic lock is missing. TiKV (`amend_pessimistic_lock`)
            // locks the key anyway when no record of any kind sits at or
            // above the start ts (nothing can have been written since the
            // lock would have been taken); else the lock was lost, unless
            // this transaction already committed the key
            // (`check_committed_record_on_err`).
            if self.newest_write(key).is_some_and(|(c, _)| c >= start_ts) {
                return match self.txn_record(key, start_ts) {
                    TxnRecord::Committed(commit_ts) => Ok(PrewriteStep::Committed(commit_ts)),
                    _ => Err(pessimistic_lock_not_found(start_ts, &m.key)),
                };
            }
        }
        let skip_constraint_check = if !pessimistic_txn {
            req.skip_constraint_check
        } else if pessimistic_check {
            true
        } else if action == kvrpcpb::PessimisticAction::DoConstraintCheck as i32 {
            false
        } else {
            // SkipPessimisticCheck: checked only on a retried request.
            !req.context.as_ref().is_some_and(|c| c.is_retry_request)
        };
        if !skip_constraint_check {
            self.check_for_newer_version(req, m, key, action)?;
        } else if !holds_pessimistic_lock && !pessimistic_txn {
            // An optimistic prewrite told to skip the constraint check
            // (tikv-plan never asks): TiKV would write the lock without
            // looking; the sim still finds this transaction's own commit or
            // rollback record. A pessimistic transaction's key without a
            // lock (an amended one, or `SkipPessimisticCheck` on a request
            // not marked as a retry) is locked without looking, as TiKV
            // does when its cache of committed transactions does not know
            // the transaction: only `Context.is_retry_request` turns the
            // check on.
            match self.txn_record(key, start_ts) {
                TxnRecord::Committed(commit_ts) => return Ok(PrewriteStep::Committed(commit_ts)),
                TxnRecord::RolledBack => {
                    return Err(write_conflict(
                        start_ts,
                        Write::new(start_ts, WriteKind::Rollback),
                        start_ts,
                        &m.key,
                        &req.primary_lock,
                        REASON_SELF_ROLLED_BACK,
                    ))
                }
                TxnRecord::None => {}
            }
        }
        if m.op == Op::CheckNotExists as i32 {
            return Ok(PrewriteStep::CheckedOnly);
        }
        Ok(PrewriteStep::Lock(kind))
    }

    /// TiKV's `PrewriteMutation::check_for_newer_version`: the newest
    /// record decides (a rollback of this transaction at its start ts, a
    /// commit after the start ts, or, in a pessimistic transaction, after
    /// for_update_ts), then the uniqueness check of Insert, CheckNotExists
    /// and DoConstraintCheck against the newest data.
    fn check_for_newer_version(
        &self,
        req: &kvrpcpb::PrewriteRequest,
        m: &kvrpcpb::Mutation,
        key: &[u8],
        action: i32,
    ) -> Result<(), KeyError> {
        let (start_ts, for_update_ts) = (req.start_version, req.for_update_ts);
        let conflict = |w: Write, commit_ts: u64, reason: i32| {
            write_conflict(start_ts, w, commit_ts, &m.key, &req.primary_lock, reason)
        };
        let Some(writes) = self.writes.get(key) else {
            return Ok(());
        };
        for (&commit_ts, &w) in writes.iter().rev() {
            if w.rolls_back(commit_ts, start_ts) {
                return Err(conflict(w, commit_ts, REASON_SELF_ROLLED_BACK));
            }
            if for_update_ts == 0 {
                if commit_ts > start_ts {
                    return Err(conflict(w, commit_ts, REASON_OPTIMISTIC));
                }
            } else {
                if action == kvrpcpb::PessimisticAction::DoConstraintCheck as i32
                    && commit_ts > start_ts
                {
                    return Err(conflict(w, commit_ts, REASON_LAZY_UNIQUENESS_CHECK));
                }
                if commit_ts > for_update_ts {
                    if w.kind == WriteKind::Rollback {
                        continue;
                    }
                    // The key's pessimistic lock must have been lost.
                    return Err(pessimistic_lock_not_found(start_ts, &m.key));
                }
            }
            let must_not_exist =
                matches!(Op::try_from(m.op), Ok(Op::Insert) | Ok(Op::CheckNotExists))
                    || action == kvrpcpb::PessimisticAction::DoConstraintCheck as i32;
            let exists = match w.kind {
                WriteKind::Put => true,
                WriteKind::Delete => false,
                WriteKind::Lock | WriteKind::Rollback => self
                    .committed_value(key, commit_ts.saturating_sub(1))
                    .is_some(),
            };
            if must_not_exist && exists {
                return Err(KeyError {
                    already_exist: Some(kvrpcpb::AlreadyExist { key: m.key.clone() }),
                    ..Default::default()
                });
            }
            return Ok(());
        }
        Ok(())
    }

    /// `KvCommit`: idempotent after a commit; TxnLockNotFound after a
    /// rollback or when nothing was prewritten; CommitTsExpired below the
    /// lock's min_commit_ts.
    pub(crate) fn commit(&mut self, req: &kvrpcpb::CommitRequest) -> kvrpcpb::CommitResponse {
        let (start_ts, commit_ts) = (req.start_version, req.commit_version);
        let mut planned = Vec::new();
        for raw in &req.keys {
            let key = encode_bytes(raw);
            match self.check_commit_key(&key, raw, start_ts, commit_ts) {
                Ok(Some(lock)) => planned.push((key, lock)),
                Ok(None) => {}
                Err(e) => {
                    return kvrpcpb::CommitResponse {
                        error: Some(e),
                        ..Default::default()
                    }
                }
            }
        }
        for (key, lock) in planned {
            self.commit_lock(&key, &lock, commit_ts);
        }
        kvrpcpb::CommitResponse {
            commit_version: commit_ts,
            ..Default::default()
        }
    }

    /// Whether `start_ts` can commit `key` at `commit_ts`: its lock to
    /// commit, None when it is already committed, or the key error.
    fn check_commit_key(
        &self,
        key: &[u8],
        raw: &[u8],
        start_ts: u64,
        commit_ts: u64,
    ) -> Result<Option<Lock>, KeyError> {
        if commit_ts <= start_ts {
            return Err(abort(format!(
                "InvalidTxnTso {{ start_ts: {start_ts}, commit_ts: {commit_ts} }}: the commit ts must be greater than the start ts"
            )));
        }
        match self.locks.get(key) {
            Some(lock) if lock.start_ts == start_ts => {
                // A pessimistic lock left behind (never prewritten) is
                // checked like any lock, then only removed (`commit_lock`).
                if commit_ts < lock.min_commit_ts {
                    return Err(KeyError {
                        commit_ts_expired: Some(kvrpcpb::CommitTsExpired {
                            start_ts,
                            attempted_commit_ts: commit_ts,
                            key: raw.to_vec(),
                            min_commit_ts: lock.min_commit_ts,
                        }),
                        ..Default::default()
                    });
                }
                Ok(Some(lock.clone()))
            }
            _ => match self.txn_record(key, start_ts) {
                TxnRecord::Committed(_) => Ok(None),
                TxnRecord::RolledBack | TxnRecord::None => Err(txn_lock_not_found(start_ts, raw)),
            },
        }
    }

    /// `KvBatchRollback`.
    pub(crate) fn batch_rollback(
        &mut self,
        req: &kvrpcpb::BatchRollbackRequest,
    ) -> kvrpcpb::BatchRollbackResponse {
        let start_ts = req.start_version;
        let keys: Vec<Vec<u8>> = req.keys.iter().map(|k| encode_bytes(k)).collect();
        for key in &keys {
            let ours = self.locks.get(key).is_some_and(|l| l.start_ts == start_ts);
            if let (false, TxnRecord::Committed(_)) = (ours, self.txn_record(key, start_ts)) {
                let error = self.rollback_key(key, start_ts).err();
                return kvrpcpb::BatchRollbackResponse {
                    error,
                    ..Default::default()
                };
            }
        }
        for key in &keys {
            // Checked above: no key is committed.
            let _ = self.rollback_key(key, start_ts);
        }
        kvrpcpb::BatchRollbackResponse::default()
    }

    /// `KvCleanup`: rolls back one key once its lock has expired at
    /// `current_ts` (0: at once); reports the commit ts when it committed.
    pub(crate) fn cleanup(&mut self, req: &kvrpcpb::CleanupRequest) -> kvrpcpb::CleanupResponse {
        let key = encode_bytes(&req.key);
        if let Some(lock) = self.locks.get(&key) {
            if lock.start_ts == req.start_version
                && req.current_ts != 0
                && !lock_expired(lock, req.current_ts)
            {
                return kvrpcpb::CleanupResponse {
                    error: Some(locked_error(lock, &req.key)),
                    ..Default::default()
                };
            }
        }
        // A committed transaction holds no lock on the key any more.
        if let TxnRecord::Committed(commit_version) = self.txn_record(&key, req.start_version) {
            return kvrpcpb::CleanupResponse {
                commit_version,
                ..Default::default()
            };
        }
        kvrpcpb::CleanupResponse {
            error: self.rollback_key(&key, req.start_version).err(),
            ..Default::default()
        }
    }

    /// `KvCheckTxnStatus` on a primary key.
    pub(crate) fn check_txn_status(
        &mut self,
        req: &kvrpcpb::CheckTxnStatusRequest,
    ) -> kvrpcpb::CheckTxnStatusResponse {
        use kvrpcpb::Action;
        let key = encode_bytes(&req.primary_key);
        let start_ts = req.lock_ts;
        let answer = |action: Action| kvrpcpb::CheckTxnStatusResponse {
            action: action as i32,
            ..Default::default()
        };
        // TiKV (`commands/check_txn_status.rs`) raises max_ts to the lock
        // ts, the current ts and the caller's start ts: a rollback written
        // here at the lock ts is never overwritten by an async-commit or
        // 1PC commit computed later.
        self.observe_read_ts(start_ts);
        if req.current_ts != u64::MAX {
            self.observe_read_ts(req.current_ts);
        }
        if req.caller_start_ts != u64::MAX {
            self.observe_read_ts(req.caller_start_ts);
        }
        let mut lock = self
            .locks
            .get(&key)
            .filter(|l| l.start_ts == start_ts)
            .cloned();
        // `verify_is_primary`: the key holds a lock of the transaction but
        // not its primary. TiKV removes a pessimistic one (a lock left by a
        // retried statement) unless the caller is resolving pessimistic
        // locks, and then answers as for a missing lock; any other is a
        // `PrimaryMismatch`.
        if let Some(found) = lock
            .as_ref()
            .filter(|l| req.verify_is_primary && l.primary != req.primary_key)
        {
            if req.resolving_pessimistic_lock || found.kind != LockKind::Pessimistic {
                return kvrpcpb::CheckTxnStatusResponse {
                    error: Some(KeyError {
                        primary_mismatch: Some(kvrpcpb::PrimaryMismatch {
                            lock_info: Some(found.info(&req.primary_key)),
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                };
            }
            self.unlock(&key, 0);
            lock = None;
        }
        if let Some(lock) = lock {
            let uncommitted = |lock: &Lock, action: Action| kvrpcpb::CheckTxnStatusResponse {
                lock_ttl: lock.ttl,
                action: action as i32,
                lock_info: Some(lock.info(&req.primary_key)),
                ..Default::default()
            };
            // An async-commit lock is never rolled back or pushed here:
            // that is CheckSecondaryLocks' and ResolveLock's job.
            if lock.use_async_commit && !req.force_sync_commit {
                return uncommitted(&lock, Action::NoAction);
            }
            if lock_expired(&lock, req.current_ts) {
                if req.resolving_pessimistic_lock && lock.kind == LockKind::Pessimistic {
                    self.unlock(&key, 0);
                    return answer(Action::TtlExpirePessimisticRollback);
                }
                let _ = self.rollback_key(&key, start_ts);
                return answer(Action::TtlExpireRollback);
            }
            // A lock with min_commit_ts 0 is never pushed (old clients
            // could not commit it).
            let caller = req.caller_start_ts;
            let mut lock = lock;
            if lock.min_commit_ts != 0 && caller != u64::MAX && caller >= lock.min_commit_ts {
                lock.min_commit_ts = caller.saturating_add(1).max(req.current_ts);
                self.locks.insert(key, lock.clone());
            }
            // The reader may skip the lock whenever the commit will land
            // above its ts; a caller at the maximum ts skips it anyway.
            let pushed = (caller != 0 && lock.min_commit_ts > caller) || caller == u64::MAX;
            let action = if pushed {
                Action::MinCommitTsPushed
            } else {
                Action::NoAction
            };
            return uncommitted(&lock, action);
        }
        match self.txn_record(&key, start_ts) {
            TxnRecord::Committed(commit_version) => kvrpcpb::CheckTxnStatusResponse {
                commit_version,
                ..Default::default()
            },
            TxnRecord::RolledBack => answer(Action::NoAction),
            TxnRecord::None if !req.rollback_if_not_exist => kvrpcpb::CheckTxnStatusResponse {
                error: Some(txn_not_found(start_ts, &req.primary_key)),
                ..Default::default()
            },
            TxnRecord::None if req.resolving_pessimistic_lock => {
                answer(Action::LockNotExistDoNothing)
            }
            TxnRecord::None => {
                let _ = self.rollback_key(&key, start_ts);
                answer(Action::LockNotExistRollback)
            }
        }
    }

    /// `KvCheckSecondaryLocks`: the locks still there, or the commit ts,
    /// or (locks empty and commit ts 0) rolled back. A secondary with no
    /// lock and no record is rolled back here, so it can never commit.
    pub(crate) fn check_secondary_locks(
        &mut self,
        req: &kvrpcpb::CheckSecondaryLocksRequest,
    ) -> kvrpcpb::CheckSecondaryLocksResponse {
        let start_ts = req.start_version;
        // Like TiKV: a commit may not overwrite the protected rollback
        // written here, so later commits go above start_ts.
        self.observe_read_ts(start_ts);
        let mut locks = Vec::new();
        for raw in &req.keys {
            let key = encode_bytes(raw);
            let status = match self.locks.get(&key).filter(|l| l.start_ts == start_ts) {
                Some(lock) if lock.kind == LockKind::Pessimistic => {
                    // The prewrite never came: the transaction cannot commit.
                    let _ = self.rollback_key(&key, start_ts);
                    SecondaryStatus::RolledBack
                }
                Some(lock) => SecondaryStatus::Locked(lock.info(raw)),
                None => match self.txn_record(&key, start_ts) {
                    TxnRecord::Committed(ts) => SecondaryStatus::Committed(ts),
                    TxnRecord::RolledBack => SecondaryStatus::RolledBack,
                    TxnRecord::None => {
                        let _ = self.rollback_key(&key, start_ts);
                        SecondaryStatus::RolledBack
                    }
                },
            };
            match status {
                SecondaryStatus::Locked(info) => locks.push(info),
                SecondaryStatus::Committed(commit_ts) => {
                    return kvrpcpb::CheckSecondaryLocksResponse {
                        commit_ts,
                        ..Default::default()
                    };
                }
                SecondaryStatus::RolledBack => {
                    return kvrpcpb::CheckSecondaryLocksResponse::default();
                }
            }
        }
        kvrpcpb::CheckSecondaryLocksResponse {
            locks,
            ..Default::default()
        }
    }

    /// `KvResolveLock`: commits (commit ts > 0) or rolls back (0) the locks
    /// of the given transactions, on the given keys (ResolveLockLite, one
    /// transaction) or on every lock of the Region. Applied key by key, as
    /// TiKV does; the first error stops it.
    pub(crate) fn resolve_lock(
        &mut self,
        req: &kvrpcpb::ResolveLockRequest,
    ) -> kvrpcpb::ResolveLockResponse {
        let mut txns: BTreeMap<u64, u64> = BTreeMap::new();
        if req.txn_infos.is_empty() {
            txns.insert(req.start_version, req.commit_version);
        } else {
            for t in &req.txn_infos {
                txns.insert(t.txn, t.status);
            }
        }
        let keys: Vec<Vec<u8>> = if req.keys.is_empty() {
            self.locks
                .iter()
                .filter(|(_, l)| txns.contains_key(&l.start_ts))
                .map(|(k, _)| k.clone())
                .collect()
        } else {
            req.keys.iter().map(|k| encode_bytes(k)).collect()
        };
        let lite = !req.keys.is_empty();
        for key in keys {
            let raw = raw_key(&key);
            // Region-wide, each lock names its transaction; a named key
            // (ResolveLockLite) belongs to `start_version`.
            let lock_ts = self
                .locks
                .get(&key)
                .map(|l| l.start_ts)
                .filter(|ts| txns.contains_key(ts));
            let Some(start_ts) = lock_ts.or(lite.then_some(req.start_version)) else {
                continue;
            };
            let commit_ts = txns.get(&start_ts).copied().unwrap_or(0);
            let result = if commit_ts == 0 {
                self.rollback_key(&key, start_ts)
            } else {
                self.check_commit_key(&key, &raw, start_ts, commit_ts)
                    .map(|lock| {
                        if let Some(lock) = lock {
                            self.commit_lock(&key, &lock, commit_ts);
                        }
                    })
            };
            if let Err(e) = result {
                return kvrpcpb::ResolveLockResponse {
                    error: Some(e),
                    ..Default::default()
                };
            }
        }
        kvrpcpb::ResolveLockResponse::default()
    }

    /// `KvPessimisticLock`, without waiting: a lock of another transaction
    /// is answered at once.
    pub(crate) fn pessimistic_lock(
        &mut self,
        req: &kvrpcpb::PessimisticLockRequest,
    ) -> kvrpcpb::PessimisticLockResponse {
        let (start_ts, for_update_ts) = (req.start_version, req.for_update_ts);
        let fail = |e| kvrpcpb::PessimisticLockResponse {
            errors: vec![e],
            ..Default::default()
        };
        if req.lock_only_if_exists && !req.return_values {
            return fail(abort(format!(
                "LockIfExistsFailed {{ start_ts: {start_ts} }}: lock_only_if_exists needs return_values"
            )));
        }
        // Reading values or existence is a read at for_update_ts.
        let reads = req.return_values
            || req.check_existence
            || req
                .mutations
                .iter()
                .any(|m| m.assertion == kvrpcpb::Assertion::NotExist as i32);
        if reads {
            self.observe_read_ts(for_update_ts);
        }
        let mut planned = Vec::new();
        let mut values = Vec::new();
        let mut not_founds = Vec::new();
        for m in &req.mutations {
            if m.op != Op::PessimisticLock as i32 {
                return fail(abort(format!(
                    "invalid mutation op {} in a pessimistic lock request: use PessimisticLock",
                    m.op
                )));
            }
            let key = encode_bytes(&m.key);
            let mut relock = false;
            if let Some(lock) = self.locks.get(&key) {
                if lock.start_ts != start_ts {
                    return fail(locked_error(lock, &m.key));
                }
                if lock.kind != LockKind::Pessimistic {
                    // Already prewritten by this transaction.
                    return fail(abort(format!(
                        "LockTypeNotMatch {{ start_ts: {start_ts}, key: {:?}, pessimistic: false }}: the key is already prewritten",
                        m.key
                    )));
                }
                relock = true;
            }
            if !relock {
                // TiKV's `acquire_pessimistic_lock`: the newest record of
                // any transaction first (a commit after for_update_ts is a
                // conflict), then this transaction's rollback at its start
                // ts (also as an overlapped rollback).
                let rolled_back = || {
                    abort(format!(
                        "PessimisticLockRolledBack {{ start_ts: {start_ts}, key: {:?} }}: the transaction was rolled back",
                        m.key
                    ))
                };
                if let Some((commit_ts, w)) = self.newest_write(&key) {
                    if commit_ts > for_update_ts {
                        return fail(write_conflict(
                            start_ts,
                            w,
                            commit_ts,
                            &m.key,
                            &req.primary_lock,
                            REASON_PESSIMISTIC_RETRY,
                        ));
                    }
                    if w.rolls_back(commit_ts, start_ts) {
                        return fail(rolled_back());
                    }
                    if commit_ts > start_ts {
                        let older = self.newest_write_at_or_below(&key, start_ts);
                        if older.is_some_and(|(c, w)| w.rolls_back(c, start_ts)) {
                            return fail(rolled_back());
                        }
                    }
                }
            }
            let value = self.committed_value(&key, u64::MAX);
            if m.assertion == kvrpcpb::Assertion::NotExist as i32 && value.is_some() {
                return fail(KeyError {
                    already_exist: Some(kvrpcpb::AlreadyExist { key: m.key.clone() }),
                    ..Default::default()
                });
            }
            if req.return_values || req.check_existence {
                not_founds.push(value.is_none());
            }
            let exists = value.is_some();
            if req.return_values {
                values.push(value.unwrap_or_default());
            }
            if req.lock_only_if_exists && !exists {
                continue;
            }
            planned.push(key);
        }
        for key in planned {
            let old_for_update = self.locks.get(&key).map(|l| l.for_update_ts).unwrap_or(0);
            self.locks.insert(
                key,
                Lock {
                    primary: req.primary_lock.clone(),
                    start_ts,
                    ttl: req.lock_ttl,
                    kind: LockKind::Pessimistic,
                    for_update_ts: for_update_ts.max(old_for_update),
                    min_commit_ts: req.min_commit_ts,
                    use_async_commit: false,
                    secondaries: Vec::new(),
                    txn_size: 0,
                },
            );
        }
        kvrpcpb::PessimisticLockResponse {
            values,
            not_founds,
            ..Default::default()
        }
    }

    /// `KVPessimisticRollback`: removes this transaction's pessimistic
    /// locks taken at or before `for_update_ts`; leaves no record.
    pub(crate) fn pessimistic_rollback(
        &mut self,
        req: &kvrpcpb::PessimisticRollbackRequest,
    ) -> kvrpcpb::PessimisticRollbackResponse {
        for raw in &req.keys {
            let key = encode_bytes(raw);
            let doomed = self.locks.get(&key).is_some_and(|l| {
                l.start_ts == req.start_version
                    && l.kind == LockKind::Pessimistic
                    && l.for_update_ts <= req.for_update_ts
            });
            if doomed {
                self.unlock(&key, 0);
            }
        }
        kvrpcpb::PessimisticRollbackResponse::default()
    }

    /// `KvTxnHeartBeat`: extends the primary lock's TTL (never shortens it).
    pub(crate) fn txn_heart_beat(
        &mut self,
        req: &kvrpcpb::TxnHeartBeatRequest,
    ) -> kvrpcpb::TxnHeartBeatResponse {
        let key = encode_bytes(&req.primary_lock);
        match self.locks.get_mut(&key) {
            Some(lock) if lock.start_ts == req.start_version => {
                lock.ttl = lock.ttl.max(req.advise_lock_ttl);
                kvrpcpb::TxnHeartBeatResponse {
                    lock_ttl: lock.ttl,
                    ..Default::default()
                }
            }
            _ => kvrpcpb::TxnHeartBeatResponse {
                error: Some(txn_not_found(req.start_version, &req.primary_lock)),
                ..Default::default()
            },
        }
    }

    /// `KvScanLock` over the encoded range `[low, high)`: locks with
    /// start_ts <= max_version, at most `limit` (0: no limit).
    pub(crate) fn scan_lock(
        &self,
        req: &kvrpcpb::ScanLockRequest,
        low: &[u8],
        high: &[u8],
    ) -> kvrpcpb::ScanLockResponse {
        let limit = if req.limit == 0 {
            usize::MAX
        } else {
            req.limit as usize
        };
        let locks = self
            .locks_in(low, high)
            .into_iter()
            .filter(|(_, l)| l.start_ts <= req.max_version)
            .take(limit)
            .map(|(k, l)| l.info(&raw_key(&k)))
            .collect();
        kvrpcpb::ScanLockResponse {
            locks,
            ..Default::default()
        }
    }

    /// Removes every lock, write record and value of the encoded keys in
    /// `[low, high)` (`KvDeleteRange`, `UnsafeDestroyRange`).
    pub(crate) fn delete_range(&mut self, low: &[u8], high: &[u8]) {
        fn drop_range<V>(map: &mut BTreeMap<Vec<u8>, V>, low: &[u8], high: &[u8]) {
            let doomed: Vec<Vec<u8>> = map
                .range::<[u8], _>(range_bounds(low, high))
                .map(|(k, _)| k.clone())
                .collect();
            for k in doomed {
                map.remove(&k);
            }
        }
        if !high.is_empty() && low >= high {
            return;
        }
        drop_range(&mut self.locks, low, high);
        drop_range(&mut self.writes, low, high);
        drop_range(&mut self.data, low, high);
    }

    /// `KvGC`: drops every version a read at or after `safe_point` can no
    /// longer see: per key, everything older than the newest Put/Delete at
    /// or below the safe point (and that one too when it is a Delete), and
    /// Lock/Rollback records at or below it.
    pub(crate) fn gc(&mut self, safe_point: u64) {
        let keys: Vec<Vec<u8>> = self.writes.keys().cloned().collect();
        for key in keys {
            let newest = self.newest_data_write(&key, safe_point);
            let Some(writes) = self.writes.get_mut(&key) else {
                continue;
            };
            let mut dropped_values = Vec::new();
            writes.retain(|commit_ts, w| {
                if *commit_ts > safe_point {
                    return true;
                }
                let keep = match newest {
                    Some((c, nw)) => *commit_ts == c && nw.kind == WriteKind::Put,
                    None => false,
                };
                if !keep && w.kind == WriteKind::Put {
                    dropped_values.push(w.start_ts);
                }
                keep
            });
            if writes.is_empty() {
                self.writes.remove(&key);
            }
            for start_ts in dropped_values {
                self.remove_data(&key, start_ts);
            }
        }
    }

    /// Moves every key below the encoded `split_key` into a new `Mvcc`
    /// (the Region split off below); both keep `max_ts`.
    pub(crate) fn split_off_below(&mut self, split_key: &[u8]) -> Mvcc {
        fn below<V>(map: &mut BTreeMap<Vec<u8>, V>, split_key: &[u8]) -> BTreeMap<Vec<u8>, V> {
            let upper = map.split_off(split_key);
            std::mem::replace(map, upper)
        }
        Mvcc {
            locks: below(&mut self.locks, split_key),
            writes: below(&mut self.writes, split_key),
            data: below(&mut self.data, split_key),
            max_ts: self.max_ts,
            released: Vec::new(),
        }
    }

    /// Takes in the data, locks and max ts of a Region merging into this one.
    pub(crate) fn absorb(&mut self, other: Mvcc) {
        self.locks.extend(other.locks);
        self.writes.extend(other.writes);
        self.data.extend(other.data);
        self.max_ts = self.max_ts.max(other.max_ts);
    }
}

/// What a prewrite does on one key.
enum PrewriteStep {
    /// Nothing: this transaction's lock is already there (a resent
    /// prewrite); carries its min_commit_ts, 0 for a two-phase lock.
    Resent(u64),
    /// The transaction already committed on the key, at this ts.
    Committed(u64),
    /// CheckNotExists passed: a read at the start ts, nothing written.
    CheckedOnly,
    Lock(LockKind),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(physical_ms: u64, logical: u64) -> u64 {
        physical_ms << 18 | logical
    }

    fn put(key: &[u8], value: &[u8]) -> kvrpcpb::Mutation {
        kvrpcpb::Mutation {
            op: Op::Put as i32,
            key: key.to_vec(),
            value: value.to_vec(),
            assertion: 0,
        }
    }

    fn prewrite(
        m: &mut Mvcc,
        muts: Vec<kvrpcpb::Mutation>,
        start: u64,
    ) -> kvrpcpb::PrewriteResponse {
        let primary = muts[0].key.clone();
        m.prewrite(&kvrpcpb::PrewriteRequest {
            mutations: muts,
            primary_lock: primary,
            start_version: start,
            lock_ttl: 3000,
            ..Default::default()
        })
    }

    fn commit(m: &mut Mvcc, keys: &[&[u8]], start: u64, commit: u64) -> kvrpcpb::CommitResponse {
        m.commit(&kvrpcpb::CommitRequest {
            start_version: start,
            keys: keys.iter().map(|k| k.to_vec()).collect(),
            commit_version: commit,
            ..Default::default()
        })
    }

    fn get(m: &mut Mvcc, key: &[u8], version: u64) -> kvrpcpb::GetResponse {
        m.get(
            &kvrpcpb::GetRequest {
                key: key.to_vec(),
                version,
                ..Default::default()
            },
            None,
        )
    }

    #[test]
    fn snapshot_reads_see_commits_at_or_below_their_ts() {
        let mut m = Mvcc::default();
        assert!(prewrite(&mut m, vec![put(b"k", b"v1")], 10)
            .errors
            .is_empty());
        assert!(commit(&mut m, &[b"k"], 10, 20).error.is_none());
        assert!(prewrite(&mut m, vec![put(b"k", b"v2")], 30)
            .errors
            .is_empty());
        assert!(get(&mut m, b"k", 19).not_found);
        assert_eq!(get(&mut m, b"k", 20).value, b"v1");
        // The lock at 30 blocks a read at 35, not one at 25.
        assert_eq!(get(&mut m, b"k", 25).value, b"v1");
        assert!(get(&mut m, b"k", 35).error.unwrap().locked.is_some());
        assert!(commit(&mut m, &[b"k"], 30, 40).error.is_none());
        assert_eq!(get(&mut m, b"k", 39).value, b"v1");
        assert_eq!(get(&mut m, b"k", 40).value, b"v2");
        assert_eq!(m.max_ts(), 40);
    }

    #[test]
    fn commit_is_idempotent_and_a_rollback_is_final() {
        let mut m = Mvcc::default();
        prewrite(&mut m, vec![put(b"a", b"1")], 10);
        assert!(commit(&mut m, &[b"a"], 10, 11).error.is_none());
        assert!(commit(&mut m, &[b"a"], 10, 11).error.is_none());
        prewrite(&mut m, vec![put(b"b", b"1")], 20);
        let rb = m.batch_rollback(&kvrpcpb::BatchRollbackRequest {
            start_version: 20,
            keys: vec![b"b".to_vec()],
            ..Default::default()
        });
        assert!(rb.error.is_none());
        let err = commit(&mut m, &[b"b"], 20, 21).error.unwrap();
        assert!(err.retryable.contains("TxnLockNotFound"), "{err:?}");
        // A late prewrite of the rolled-back transaction conflicts.
        let late = prewrite(&mut m, vec![put(b"b", b"1")], 20);
        assert!(late.errors[0].conflict.is_some());
    }

    #[test]
    fn write_conflict_and_duplicate_insert() {
        let mut m = Mvcc::default();
        prewrite(&mut m, vec![put(b"k", b"v")], 10);
        commit(&mut m, &[b"k"], 10, 20);
        let conflict = prewrite(&mut m, vec![put(b"k", b"x")], 15);
        let c = conflict.errors[0].conflict.clone().unwrap();
        assert_eq!(
            (c.start_ts, c.conflict_ts, c.conflict_commit_ts),
            (15, 10, 20)
        );
        let insert = kvrpcpb::Mutation {
            op: Op::Insert as i32,
            ..put(b"k", b"y")
        };
        let dup = prewrite(&mut m, vec![insert], 30);
        assert!(dup.errors[0].already_exist.is_some());
        assert!(m.lock(&encode_bytes(b"k")).is_none());
    }

    #[test]
    fn ttl_expiry_is_measured_on_current_ts() {
        let mut m = Mvcc::default();
        let start = ts(1_000, 0);
        prewrite(&mut m, vec![put(b"p", b"v")], start);
        let check = |m: &mut Mvcc, now: u64| {
            m.check_txn_status(&kvrpcpb::CheckTxnStatusRequest {
                primary_key: b"p".to_vec(),
                lock_ts: start,
                caller_start_ts: now,
                current_ts: now,
                ..Default::default()
            })
        };
        let alive = check(&mut m, ts(3_999, 0));
        assert_eq!(alive.lock_ttl, 3000);
        assert!(alive.lock_info.is_some());
        let expired = check(&mut m, ts(4_001, 0));
        assert_eq!(expired.action, kvrpcpb::Action::TtlExpireRollback as i32);
        assert!(m.lock(&encode_bytes(b"p")).is_none());
        let again = check(&mut m, ts(4_002, 0));
        assert_eq!((again.lock_ttl, again.commit_version), (0, 0));
        assert!(again.lock_info.is_none());
    }

    #[test]
    fn gc_keeps_the_newest_visible_version() {
        let mut m = Mvcc::default();
        for (i, v) in [b"1", b"2", b"3"].iter().enumerate() {
            let s = 10 * (i as u64 + 1);
            prewrite(&mut m, vec![put(b"k", *v)], s);
            commit(&mut m, &[b"k"], s, s + 1);
        }
        m.gc(25);
        assert_eq!(get(&mut m, b"k", 25).value, b"2");
        assert_eq!(get(&mut m, b"k", 40).value, b"3");
        assert!(get(&mut m, b"k", 15).not_found);
        assert_eq!(m.versions(&encode_bytes(b"k")).len(), 2);
    }

    #[test]
    fn a_later_rollback_record_conflicts_like_tikv() {
        let mut m = Mvcc::default();
        // Transaction 20 is rolled back on k before it ever wrote there.
        let rb = m.batch_rollback(&kvrpcpb::BatchRollbackRequest {
            start_version: 20,
            keys: vec![b"k".to_vec()],
            ..Default::default()
        });
        assert!(rb.error.is_none());
        let late = prewrite(&mut m, vec![put(b"k", b"v")], 15);
        let c = late.errors[0].conflict.clone().unwrap();
        assert_eq!((c.conflict_ts, c.conflict_commit_ts), (20, 20));
        assert!(late.errors[0].retryable.contains("WriteConflict"));
        assert!(prewrite(&mut m, vec![put(b"k", b"v")], 25)
            .errors
            .is_empty());
    }

    #[test]
    fn a_missing_primary_is_txn_not_found_unless_rollback_is_asked_for() {
        let mut m = Mvcc::default();
        let mut req = kvrpcpb::CheckTxnStatusRequest {
            primary_key: b"p".to_vec(),
            lock_ts: 10,
            caller_start_ts: 30,
            current_ts: 30,
            resolving_pessimistic_lock: true,
            ..Default::default()
        };
        assert!(m
            .check_txn_status(&req)
            .error
            .unwrap()
            .txn_not_found
            .is_some());
        req.rollback_if_not_exist = true;
        let r = m.check_txn_status(&req);
        assert_eq!(r.action, kvrpcpb::Action::LockNotExistDoNothing as i32);
        req.resolving_pessimistic_lock = false;
        let r = m.check_txn_status(&req);
        assert_eq!(r.action, kvrpcpb::Action::LockNotExistRollback as i32);
        assert_eq!(m.versions(&encode_bytes(b"p"))[0].kind, "rollback");
    }
}
