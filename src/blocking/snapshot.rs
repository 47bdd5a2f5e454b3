//! [`SyncSnapshot`]: [`Snapshot`]'s reads, each blocking its thread.

use std::sync::Arc;

use super::runtime::OwnedRuntime;
use crate::{BoundRange, Key, KvPair, Result, Snapshot, Value};

/// A read-only view at one timestamp, from a
/// [`SyncTransactionClient`](crate::SyncTransactionClient) (client-rust's
/// `SyncSnapshot`): every read of [`Snapshot`], under the same name, with
/// the same arguments, results and errors, blocking the calling thread
/// until it is done.
pub struct SyncSnapshot {
    snapshot: Snapshot,
    runtime: Arc<OwnedRuntime>,
}

impl SyncSnapshot {
    pub(crate) fn new(snapshot: Snapshot, runtime: Arc<OwnedRuntime>) -> Self {
        SyncSnapshot { snapshot, runtime }
    }

    /// The value of `key` ([`Snapshot::get`]).
    pub fn get(&mut self, key: impl Into<Key>) -> Result<Option<Value>> {
        self.runtime
            .block_on("SyncSnapshot::get", self.snapshot.get(key))
    }

    /// True when `key` exists ([`Snapshot::key_exists`]).
    pub fn key_exists(&mut self, key: impl Into<Key>) -> Result<bool> {
        self.runtime
            .block_on("SyncSnapshot::key_exists", self.snapshot.key_exists(key))
    }

    /// The pairs of the keys that exist ([`Snapshot::batch_get`]).
    pub fn batch_get(
        &mut self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.runtime
            .block_on("SyncSnapshot::batch_get", self.snapshot.batch_get(keys))
    }

    /// Up to `limit` pairs of `range`, ascending ([`Snapshot::scan`]).
    pub fn scan(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.runtime
            .block_on("SyncSnapshot::scan", self.snapshot.scan(range, limit))
    }

    /// Up to `limit` keys of `range`, ascending ([`Snapshot::scan_keys`]).
    pub fn scan_keys(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        self.runtime.block_on(
            "SyncSnapshot::scan_keys",
            self.snapshot.scan_keys(range, limit),
        )
    }

    /// Up to `limit` pairs of `range`, descending
    /// ([`Snapshot::scan_reverse`]).
    pub fn scan_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = KvPair>> {
        self.runtime.block_on(
            "SyncSnapshot::scan_reverse",
            self.snapshot.scan_reverse(range, limit),
        )
    }

    /// Up to `limit` keys of `range`, descending
    /// ([`Snapshot::scan_keys_reverse`]).
    pub fn scan_keys_reverse(
        &mut self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<impl Iterator<Item = Key>> {
        self.runtime.block_on(
            "SyncSnapshot::scan_keys_reverse",
            self.snapshot.scan_keys_reverse(range, limit),
        )
    }
}

impl std::fmt::Debug for SyncSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncSnapshot").finish_non_exhaustive()
    }
}
