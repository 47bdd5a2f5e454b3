//! [`SyncTransaction`]: [`Transaction`]'s methods, each blocking its
//! thread.

use std::future::Future;
use std::sync::Arc;

use super::runtime::OwnedRuntime;
use crate::transaction::TransactionStatus;
use crate::{BoundRange, Error, Key, KvPair, Mutation, Result, Timestamp, Transaction, Value};

/// A transaction begun by a
/// [`SyncTransactionClient`](crate::SyncTransactionClient) (client-rust's
/// `SyncTransaction`): every method of [`Transaction`], under the same
/// name, with the same arguments, results and errors, blocking the calling
/// thread until it is done.
///
/// Dropped unfinished, it behaves as a dropped [`Transaction`] does (its
/// pessimistic locks are released in the background, on the client's
/// runtime; its [`CheckLevel`](crate::CheckLevel) decides whether a
/// forgotten commit panics).
pub struct SyncTransaction {
    /// Always `Some` until the drop takes it.
    inner: Option<Transaction>,
    runtime: Arc<OwnedRuntime>,
}

impl SyncTransaction {
    pub(crate) fn new(inner: Transaction, runtime: Arc<OwnedRuntime>) -> Self {
        SyncTransaction {
            inner: Some(inner),
            runtime,
        }
    }

    /// Runs `step` of the transaction on the client's runtime.
    fn run<'a, T, F>(
        &'a mut self,
        call: &'static str,
        step: impl FnOnce(&'a mut Transaction) -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<T>> + 'a,
    {
        let Some(transaction) = self.inner.as_mut() else {
            return Err(Error::InternalError {
                message: format!("{call}: the transaction was already dropped"),
            });
        };
        self.runtime.block_on(call, step(transaction))
    }

    // `inner` is `None` only inside the drop, where nothing calls these
    // two; their fallbacks are never seen.

    /// The transaction's start timestamp ([`Transaction::start_timestamp`]).
    pub fn start_timestamp(&self) -> Timestamp {
        self.inner
            .as_ref()
            .map(Transaction::start_timestamp)
            .unwrap_or_default()
    }

    /// Where the transaction stands ([`Transaction::status`]).
    pub fn status(&self) -> TransactionStatus {
        self.inner
            .as_ref()
            .map(Transaction::status)
            .unwrap_or(TransactionStatus::Rolledback)
    }

    /// The value of `key` ([`Transaction::get`]).
    pub fn get(&mut self, key: impl Into<Key>) -> Result<Option<Value>> {
        self.run("SyncTransaction::get", |t| t.get(key))
    }

    /// The value of `key`, locked ([`Transaction::get_for_update`]).
    pub fn get_for_update(&mut self, key: impl Into<Key>) -> Result<Option<Value>> {
        self.run("SyncTransaction::get_for_update", |t| t.get_for_update(key))
    }

    /// True when `key` exists ([`Transaction::key_exists`]).
    pub fn key_exists(&mut self, key: impl Into<Key>) -> Result<bool> {
        self.run("SyncTransaction::key_exists", |t| t.key_exists(key))
    }

    /// The pairs of the keys that exist ([`Transaction::batch_get`]).
    pub fn batch_get(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.run("SyncTransaction::batch_get", |t| t.batch_get(keys))
    }

    /// The pairs of the keys that exist, locked
    /// ([`Transaction::batch_get_for_update`]).
    pub fn batch_get_for_update(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<Vec<KvPair>> {
        self.run("SyncTransaction::batch_get_for_update", |t| {
            t.batch_get_for_update(keys)
        })
    }

    /// Up to `limit` pairs of `range`, ascending ([`Transaction::scan`]).
    pub fn scan(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.run("SyncTransaction::scan", |t| t.scan(range, limit))
    }

    /// Up to `limit` keys of `range`, ascending ([`Transaction::scan_keys`]).
    pub fn scan_keys(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        self.run("SyncTransaction::scan_keys", |t| t.scan_keys(range, limit))
    }

    /// Up to `limit` pairs of `range`, descending
    /// ([`Transaction::scan_reverse`]).
    pub fn scan_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.run("SyncTransaction::scan_reverse", |t| {
            t.scan_reverse(range, limit)
        })
    }

    /// Up to `limit` keys of `range`, descending
    /// ([`Transaction::scan_keys_reverse`]).
    pub fn scan_keys_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        self.run("SyncTransaction::scan_keys_reverse", |t| {
            t.scan_keys_reverse(range, limit)
        })
    }

    /// Writes `value` under `key` ([`Transaction::put`]).
    pub fn put(&mut self, key: impl Into<Key>, value: impl Into<Value>) -> Result<()> {
        self.run("SyncTransaction::put", |t| t.put(key, value))
    }

    /// Writes `value` under `key`, which must not exist
    /// ([`Transaction::insert`]).
    pub fn insert(&mut self, key: impl Into<Key>, value: impl Into<Value>) -> Result<()> {
        self.run("SyncTransaction::insert", |t| t.insert(key, value))
    }

    /// Deletes `key` ([`Transaction::delete`]).
    pub fn delete(&mut self, key: impl Into<Key>) -> Result<()> {
        self.run("SyncTransaction::delete", |t| t.delete(key))
    }

    /// Applies `mutations` ([`Transaction::batch_mutate`]).
    pub fn batch_mutate(&mut self, mutations: impl IntoIterator<Item = Mutation>) -> Result<()> {
        self.run("SyncTransaction::batch_mutate", |t| {
            t.batch_mutate(mutations)
        })
    }

    /// Locks `keys` without writing them ([`Transaction::lock_keys`]).
    pub fn lock_keys(&mut self, keys: impl IntoIterator<Item = impl Into<Key>>) -> Result<()> {
        self.run("SyncTransaction::lock_keys", |t| t.lock_keys(keys))
    }

    /// Commits; the commit timestamp, or `None` when there was nothing to
    /// write ([`Transaction::commit`]).
    pub fn commit(&mut self) -> Result<Option<Timestamp>> {
        self.run("SyncTransaction::commit", |t| t.commit())
    }

    /// Rolls back ([`Transaction::rollback`]).
    pub fn rollback(&mut self) -> Result<()> {
        self.run("SyncTransaction::rollback", |t| t.rollback())
    }

    /// Extends the primary lock's time to live
    /// ([`Transaction::send_heart_beat`]).
    pub fn send_heart_beat(&mut self) -> Result<u64> {
        self.run("SyncTransaction::send_heart_beat", |t| t.send_heart_beat())
    }
}

impl Drop for SyncTransaction {
    fn drop(&mut self) {
        // Dropped inside the client's runtime, so that an unfinished
        // transaction's lock release is spawned there.
        let _entered = self.runtime.handle().map(|h| h.enter());
        drop(self.inner.take());
    }
}

impl std::fmt::Debug for SyncTransaction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncTransaction")
            .field("transaction", &self.inner)
            .finish()
    }
}
