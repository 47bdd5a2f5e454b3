//! The transactional methods of the simulated store: each is a
//! [`StoreCommand`], so it runs the same checks and faults as the raw
//! methods, then one function of [`Mvcc`](crate::mvcc::Mvcc). Keys are
//! checked against the Region on their memcomparable encoding, as TiKV
//! does for transactional requests (Region boundaries are encoded keys).

use tokio::time::Instant;

use super::{first_outside, scan_bounds, scan_start_outside, StoreCommand, WaitAnswer};
use crate::codec::encode_bytes;
use crate::data::RawKeys;
use crate::lock_wait::WaitAsk;
use crate::proto::{kvrpcpb, metapb};
use crate::state::SimRegion;

/// The first key (as sent, unencoded) whose encoding lies outside the
/// Region.
fn first_encoded_outside<'a>(
    region: &metapb::Region,
    keys: impl IntoIterator<Item = &'a [u8]>,
) -> Option<Vec<u8>> {
    keys.into_iter()
        .find(|k| first_outside(region, [encode_bytes(k).as_slice()]).is_some())
        .map(<[u8]>::to_vec)
}

/// A range bound's encoding; empty stays empty (unbounded).
fn encode_bound(key: &[u8]) -> Vec<u8> {
    if key.is_empty() {
        Vec::new()
    } else {
        encode_bytes(key)
    }
}

/// A scan's or delete-range's first bound must lie in the Region (edges
/// included), checked on its encoding; answers with the key as sent.
fn encoded_scan_start_outside(
    region: &metapb::Region,
    start: &[u8],
    reverse: bool,
) -> Option<Vec<u8>> {
    scan_start_outside(region, &encode_bound(start), reverse).map(|_| start.to_vec())
}

/// The encoded range `[low, high)` of a scan, clamped to the Region.
fn encoded_scan_bounds(
    region: &metapb::Region,
    start: &[u8],
    end: &[u8],
    reverse: bool,
) -> (Vec<u8>, Vec<u8>) {
    scan_bounds(region, &encode_bound(start), &encode_bound(end), reverse)
}

/// Implements a transactional command whose keys are `$keys` (an
/// expression over `self` yielding `&[u8]`s) and whose work is `$apply`.
macro_rules! txn_command {
    ($req:ty,
     keys: |$s:ident| $keys:expr,
     apply: |$s2:ident, $region:ident| $apply:expr) => {
        impl StoreCommand for $req {
            fn key_outside(&self, region: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
                let $s = self;
                first_encoded_outside(region, $keys)
            }
            fn apply(&self, $region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
                let $s2 = self;
                Ok($apply)
            }
        }
    };
}

impl StoreCommand for kvrpcpb::GetRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(self.version)
    }
    fn checks_deadline(&self) -> bool {
        true
    }
    fn key_outside(&self, region: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
        first_encoded_outside(region, [self.key.as_slice()])
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        Ok(region.mvcc.get(self, self.context.as_ref()))
    }
}

impl StoreCommand for kvrpcpb::BatchGetRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(self.version)
    }
    fn checks_deadline(&self) -> bool {
        true
    }
    fn key_outside(&self, region: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
        first_encoded_outside(region, self.keys.iter().map(Vec::as_slice))
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        Ok(region.mvcc.batch_get(self, self.context.as_ref()))
    }
}

impl StoreCommand for kvrpcpb::ScanRequest {
    fn read_ts(&self) -> Option<u64> {
        Some(self.version)
    }
    fn key_outside(&self, region: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
        encoded_scan_start_outside(region, &self.start_key, self.reverse)
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let (low, high) =
            encoded_scan_bounds(&region.meta, &self.start_key, &self.end_key, self.reverse);
        Ok(region.mvcc.scan(self, self.context.as_ref(), &low, &high))
    }
}

impl StoreCommand for kvrpcpb::PrewriteRequest {
    fn key_outside(&self, region: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
        first_encoded_outside(region, self.mutations.iter().map(|m| m.key.as_slice()))
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        Ok(region.mvcc.prewrite(self))
    }
    fn needs_max_ts(&self, _: kvrpcpb::ApiVersion) -> bool {
        self.use_async_commit || self.try_one_pc
    }
}

txn_command!(kvrpcpb::CommitRequest,
    keys: |s| s.keys.iter().map(Vec::as_slice),
    apply: |s, region| region.mvcc.commit(s));

txn_command!(kvrpcpb::BatchRollbackRequest,
    keys: |s| s.keys.iter().map(Vec::as_slice),
    apply: |s, region| region.mvcc.batch_rollback(s));

txn_command!(kvrpcpb::CleanupRequest,
    keys: |s| [s.key.as_slice()],
    apply: |s, region| region.mvcc.cleanup(s));

txn_command!(kvrpcpb::CheckTxnStatusRequest,
    keys: |s| [s.primary_key.as_slice()],
    apply: |s, region| region.mvcc.check_txn_status(s));

txn_command!(kvrpcpb::CheckSecondaryLocksRequest,
    keys: |s| s.keys.iter().map(Vec::as_slice),
    apply: |s, region| region.mvcc.check_secondary_locks(s));

txn_command!(kvrpcpb::ResolveLockRequest,
    keys: |s| s.keys.iter().map(Vec::as_slice),
    apply: |s, region| region.mvcc.resolve_lock(s));

impl StoreCommand for kvrpcpb::PessimisticLockRequest {
    fn key_outside(&self, region: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
        first_encoded_outside(region, self.mutations.iter().map(|m| m.key.as_slice()))
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        Ok(region.mvcc.pessimistic_lock(self))
    }
    /// The request stops at the first key locked by another transaction
    /// (taking none of its keys) and may wait for that lock.
    fn lock_wait(&self, response: &Self::Response) -> Option<(WaitAsk, WaitAnswer<Self>)> {
        let [error] = response.errors.as_slice() else {
            return None;
        };
        let lock = error.locked.as_ref()?;
        if lock.lock_version == self.start_version {
            return None;
        }
        let ask = WaitAsk {
            start_ts: self.start_version,
            wait_timeout: self.wait_timeout,
            is_first_lock: self.is_first_lock,
            raw_key: lock.key.clone(),
            encoded_key: encode_bytes(&lock.key),
            primary: self.primary_lock.clone(),
            resource_group_tag: self
                .context
                .as_ref()
                .map(|c| c.resource_group_tag.clone())
                .unwrap_or_default(),
            lock: lock.clone(),
        };
        let answer: WaitAnswer<Self> = |error| kvrpcpb::PessimisticLockResponse {
            errors: vec![error],
            ..Default::default()
        };
        Some((ask, answer))
    }
}

txn_command!(kvrpcpb::PessimisticRollbackRequest,
    keys: |s| s.keys.iter().map(Vec::as_slice),
    apply: |s, region| region.mvcc.pessimistic_rollback(s));

txn_command!(kvrpcpb::TxnHeartBeatRequest,
    keys: |s| [s.primary_lock.as_slice()],
    apply: |s, region| region.mvcc.txn_heart_beat(s));

txn_command!(kvrpcpb::GcRequest,
    keys: |s| { let _ = s; std::iter::empty::<&[u8]>() },
    apply: |s, region| { region.mvcc.gc(s.safe_point); Default::default() });

impl StoreCommand for kvrpcpb::ScanLockRequest {
    fn key_outside(&self, region: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
        encoded_scan_start_outside(region, &self.start_key, false)
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let (low, high) = encoded_scan_bounds(&region.meta, &self.start_key, &self.end_key, false);
        Ok(region.mvcc.scan_lock(self, &low, &high))
    }
}

/// The encoded range of a delete-range request, or an error when it is
/// reversed.
fn delete_range_bounds(start: &[u8], end: &[u8]) -> Result<(Vec<u8>, Vec<u8>), String> {
    if !end.is_empty() && start > end {
        return Err("delete range start key is after its end key".to_owned());
    }
    Ok((encode_bound(start), encode_bound(end)))
}

impl StoreCommand for kvrpcpb::DeleteRangeRequest {
    fn key_outside(&self, region: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
        let (start, end) = (encode_bound(&self.start_key), encode_bound(&self.end_key));
        if first_outside(region, [start.as_slice()]).is_some() {
            return Some(self.start_key.clone());
        }
        // The end may equal the Region's end; an unbounded end only fits
        // the last Region.
        let end_fits = region.end_key.is_empty() || (!end.is_empty() && end <= region.end_key);
        (!end_fits).then(|| self.end_key.clone())
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        let (low, high) = delete_range_bounds(&self.start_key, &self.end_key)?;
        // notify_only: TiKV only tells the engine's observers; no data goes.
        if !self.notify_only {
            region.mvcc.delete_range(&low, &high);
        }
        Ok(Default::default())
    }
}

impl StoreCommand for kvrpcpb::UnsafeDestroyRangeRequest {
    fn key_outside(&self, _: &metapb::Region, _: RawKeys) -> Option<Vec<u8>> {
        None
    }
    fn store_wide(&self) -> bool {
        true
    }
    fn apply(&self, region: &mut SimRegion, _: Instant) -> Result<Self::Response, String> {
        // TiKV asserts both keys are non-empty (a failed assertion stops
        // the store); the simulated store answers with an error instead.
        if self.start_key.is_empty() || self.end_key.is_empty() {
            return Err(
                "UnsafeDestroyRange with an empty start or end key: TiKV would stop on it"
                    .to_owned(),
            );
        }
        let (low, high) = delete_range_bounds(&self.start_key, &self.end_key)?;
        let (low, high) = scan_bounds(&region.meta, &low, &high, false);
        region.mvcc.delete_range(&low, &high);
        Ok(Default::default())
    }
}
