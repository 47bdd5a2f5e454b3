//! [`Snapshot`]: a read-only view of the database at one timestamp.

use super::Transaction;
use crate::pd::{PdClient, PdRpcClient};
use crate::{BoundRange, Key, KvPair, Result, Value};

/// Reads at a fixed timestamp (client-rust's `Snapshot`): a read-only
/// [`Transaction`]. Locks it meets are resolved like a transaction's.
pub struct Snapshot<PdC: PdClient = PdRpcClient> {
    transaction: Transaction<PdC>,
}

impl<PdC: PdClient> Snapshot<PdC> {
    /// Reads through `transaction` (client-rust's constructor): only its
    /// reads are reachable, so nothing is ever written. For a view at a
    /// timestamp, [`TransactionClient::snapshot`](crate::TransactionClient::snapshot)
    /// builds one from a read-only transaction.
    pub fn new(transaction: Transaction<PdC>) -> Self {
        Snapshot { transaction }
    }

    /// The value of `key`, or `None`.
    pub async fn get(&mut self, key: impl Into<Key>) -> Result<Option<Value>> {
        self.transaction.get(key).await
    }

    /// True when `key` exists.
    pub async fn key_exists(&mut self, key: impl Into<Key>) -> Result<bool> {
        self.transaction.key_exists(key).await
    }

    /// The pairs of the keys that exist, in key order.
    pub async fn batch_get(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.transaction.batch_get(keys).await
    }

    /// Up to `limit` pairs in `range`, in key order.
    pub async fn scan(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.transaction.scan(range, limit).await
    }

    /// Up to `limit` keys in `range`, in key order.
    pub async fn scan_keys(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        self.transaction.scan_keys(range, limit).await
    }

    /// Up to `limit` pairs in `range`, in reverse key order.
    pub async fn scan_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.transaction.scan_reverse(range, limit).await
    }

    /// Up to `limit` keys in `range`, in reverse key order.
    pub async fn scan_keys_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        self.transaction.scan_keys_reverse(range, limit).await
    }
}
