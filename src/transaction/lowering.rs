//! Request constructors with client-rust's signatures
//! (`tikv_client::transaction_lowering`): each turns the client's key and
//! timestamp types into the wire request, for plans built by hand with
//! [`PlanBuilder`](crate::request::PlanBuilder).
//!
//! ```
//! use tikv_plan::transaction_lowering::new_get_request;
//! use tikv_plan::{Timestamp, TimestampExt};
//!
//! let request = new_get_request("k".to_owned().into(), Timestamp::from_version(42));
//! assert_eq!((request.key.as_slice(), request.version), (&b"k"[..], 42));
//! ```
//!
//! What the requests yield in a plan, under client-rust's merge and
//! processor names:
//!
//! | request | plan after `retry_multi_region(backoff)` | result |
//! |---|---|---|
//! | get | `.merge(CollectSingle).post_process_default()` | `Option<Value>` |
//! | batch_get, scan (one Region piece) | `.merge(Collect)` | `Vec<KvPair>` in key order |
//! | scan_lock | `.merge(Collect)` | `Vec<ProtoLockInfo>` |
//! | heart_beat | `.merge(CollectSingle).post_process_default()` | the lock's TTL, ms |
//! | prewrite, commit, rollbacks, pessimistic_lock | `.merge(CollectError)` (after `.preserve_shard()` where the shards matter) | what the store answered |
//! | unsafe_destroy_range (`all_stores` instead of `retry_multi_region`) | `.merge(Collect)` | `()` |
//!
//! A key error in any response (a lock met, a write conflict) is the
//! result's error, never a pair quietly left out (client-rust's merges drop
//! them). Locks are resolved only by a `resolve_lock` stage before the
//! merge.

use super::requests;
use super::TimestampExt;
use crate::proto::kvrpcpb;
use crate::{BoundRange, Key, Timestamp};

/// A range as the wire's `(start, end)`; an unbounded end is empty.
fn range_keys(range: BoundRange) -> (Vec<u8>, Vec<u8>) {
    let (start, end) = range.into_keys();
    (start.into(), end.map(Vec::from).unwrap_or_default())
}

fn keys(keys: impl Iterator<Item = Key>) -> Vec<Vec<u8>> {
    keys.map(Into::into).collect()
}

/// A key to lock pessimistically, with the assertion it carries.
pub trait PessimisticLock: Clone {
    /// The key.
    fn key(self) -> Key;
    /// What the lock asserts about the key's existence.
    fn assertion(&self) -> kvrpcpb::Assertion;
}

impl PessimisticLock for Key {
    fn key(self) -> Key {
        self
    }

    fn assertion(&self) -> kvrpcpb::Assertion {
        kvrpcpb::Assertion::None
    }
}

impl PessimisticLock for (Key, kvrpcpb::Assertion) {
    fn key(self) -> Key {
        self.0
    }

    fn assertion(&self) -> kvrpcpb::Assertion {
        self.1
    }
}

/// A read of `key` at `timestamp`.
pub fn new_get_request(key: Key, timestamp: Timestamp) -> kvrpcpb::GetRequest {
    requests::new_get_request(key.into(), timestamp.version())
}

/// A read of `keys` at `timestamp`.
pub fn new_batch_get_request(
    keys_: impl Iterator<Item = Key>,
    timestamp: Timestamp,
) -> kvrpcpb::BatchGetRequest {
    requests::new_batch_get_request(keys(keys_), timestamp.version())
}

/// A scan of `range` at `timestamp`, at most `limit` pairs. A reverse scan
/// runs from the range's end down to its start, as TiKV expects it.
pub fn new_scan_request(
    range: BoundRange,
    timestamp: Timestamp,
    limit: u32,
    key_only: bool,
    reverse: bool,
) -> kvrpcpb::ScanRequest {
    let (start, end) = range_keys(range);
    let (start, end) = if reverse { (end, start) } else { (start, end) };
    requests::new_scan_request(start, end, timestamp.version(), limit, key_only, reverse)
}

/// A prewrite of `mutations` with `primary_lock` as the primary.
///
/// The transaction's size is unknown here, so it is sent as the largest
/// one: TiKV then never resolves the locks "lite" (one key at a time).
pub fn new_prewrite_request(
    mutations: Vec<kvrpcpb::Mutation>,
    primary_lock: Key,
    start_version: Timestamp,
    lock_ttl: u64,
) -> kvrpcpb::PrewriteRequest {
    kvrpcpb::PrewriteRequest {
        mutations,
        primary_lock: primary_lock.into(),
        start_version: start_version.version(),
        lock_ttl,
        txn_size: u64::MAX,
        ..Default::default()
    }
}

/// A prewrite of a pessimistic transaction: every mutation is checked
/// against the pessimistic lock taken for it.
pub fn new_pessimistic_prewrite_request(
    mutations: Vec<kvrpcpb::Mutation>,
    primary_lock: Key,
    start_version: Timestamp,
    lock_ttl: u64,
    for_update_ts: Timestamp,
) -> kvrpcpb::PrewriteRequest {
    let checks = vec![kvrpcpb::PessimisticAction::DoPessimisticCheck as i32; mutations.len()];
    kvrpcpb::PrewriteRequest {
        for_update_ts: for_update_ts.version(),
        pessimistic_actions: checks,
        ..new_prewrite_request(mutations, primary_lock, start_version, lock_ttl)
    }
}

/// A commit of `keys` at `commit_version`.
pub fn new_commit_request(
    keys_: impl Iterator<Item = Key>,
    start_version: Timestamp,
    commit_version: Timestamp,
) -> kvrpcpb::CommitRequest {
    requests::new_commit_request(
        keys(keys_),
        start_version.version(),
        commit_version.version(),
    )
}

/// A rollback of the locks on `keys`.
pub fn new_batch_rollback_request(
    keys_: impl Iterator<Item = Key>,
    start_version: Timestamp,
) -> kvrpcpb::BatchRollbackRequest {
    requests::new_batch_rollback_request(keys(keys_), start_version.version())
}

/// A rollback of the pessimistic locks on `keys`.
pub fn new_pessimistic_rollback_request(
    keys_: impl Iterator<Item = Key>,
    start_version: Timestamp,
    for_update_ts: Timestamp,
) -> kvrpcpb::PessimisticRollbackRequest {
    kvrpcpb::PessimisticRollbackRequest {
        keys: keys(keys_),
        start_version: start_version.version(),
        for_update_ts: for_update_ts.version(),
        ..Default::default()
    }
}

/// Pessimistic locks on `locks`, without waiting for other transactions'
/// locks; `need_value` asks for the keys' values.
pub fn new_pessimistic_lock_request(
    locks: impl Iterator<Item = impl PessimisticLock>,
    primary_lock: Key,
    start_version: Timestamp,
    lock_ttl: u64,
    for_update_ts: Timestamp,
    need_value: bool,
) -> kvrpcpb::PessimisticLockRequest {
    let mutations = locks
        .map(|lock| {
            let assertion = lock.assertion() as i32;
            kvrpcpb::Mutation {
                op: kvrpcpb::Op::PessimisticLock as i32,
                key: lock.key().into(),
                assertion,
                ..Default::default()
            }
        })
        .collect();
    kvrpcpb::PessimisticLockRequest {
        mutations,
        primary_lock: primary_lock.into(),
        start_version: start_version.version(),
        lock_ttl,
        for_update_ts: for_update_ts.version(),
        return_values: need_value,
        ..Default::default()
    }
}

/// A heartbeat asking TiKV to keep the primary lock alive for `ttl`
/// milliseconds from the transaction's start.
pub fn new_heart_beat_request(
    start_ts: Timestamp,
    primary_lock: Key,
    ttl: u64,
) -> kvrpcpb::TxnHeartBeatRequest {
    requests::new_heart_beat_request(primary_lock.into(), start_ts.version(), ttl)
}

/// A scan of the locks in `range` older than `safepoint`, at most `limit`.
pub fn new_scan_lock_request(
    range: BoundRange,
    safepoint: &Timestamp,
    limit: u32,
) -> kvrpcpb::ScanLockRequest {
    let (start, end) = range_keys(range);
    requests::new_scan_lock_request(start, end, safepoint.version(), limit)
}

/// A destruction of every key in `range`, bypassing Raft (sent to every
/// store).
pub fn new_unsafe_destroy_range_request(range: BoundRange) -> kvrpcpb::UnsafeDestroyRangeRequest {
    let (start_key, end_key) = range_keys(range);
    kvrpcpb::UnsafeDestroyRangeRequest {
        start_key,
        end_key,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ts(version: u64) -> Timestamp {
        Timestamp::from_version(version)
    }

    #[test]
    fn timestamps_become_versions() {
        let commit = new_commit_request(vec![Key::from("a".to_owned())].into_iter(), ts(5), ts(9));
        assert_eq!(
            (
                commit.start_version,
                commit.commit_version,
                commit.keys.len()
            ),
            (5, 9, 1)
        );
        let beat = new_heart_beat_request(ts(5), "p".to_owned().into(), 3000);
        assert_eq!(
            (
                beat.start_version,
                beat.primary_lock.as_slice(),
                beat.advise_lock_ttl
            ),
            (5, &b"p"[..], 3000)
        );
        let locks = new_scan_lock_request(("a".to_owned()..).into(), &ts(77), 10);
        assert_eq!(
            (locks.max_version, locks.end_key.len(), locks.limit),
            (77, 0, 10)
        );
    }

    #[test]
    fn a_pessimistic_prewrite_checks_every_mutation() {
        let mutations = vec![kvrpcpb::Mutation::default(), kvrpcpb::Mutation::default()];
        let prewrite =
            new_pessimistic_prewrite_request(mutations, "p".to_owned().into(), ts(5), 100, ts(8));
        assert_eq!(
            prewrite.pessimistic_actions,
            vec![kvrpcpb::PessimisticAction::DoPessimisticCheck as i32; 2]
        );
        assert_eq!(
            (prewrite.for_update_ts, prewrite.txn_size, prewrite.lock_ttl),
            (8, u64::MAX, 100)
        );
    }

    #[test]
    fn pessimistic_locks_carry_their_assertions() {
        let locks = vec![
            (Key::from("a".to_owned()), kvrpcpb::Assertion::NotExist),
            (Key::from("b".to_owned()), kvrpcpb::Assertion::Exist),
        ];
        let request = new_pessimistic_lock_request(
            locks.into_iter(),
            "a".to_owned().into(),
            ts(5),
            100,
            ts(6),
            true,
        );
        let seen: Vec<_> = request
            .mutations
            .iter()
            .map(|m| (m.key.clone(), m.op, m.assertion))
            .collect();
        let lock = kvrpcpb::Op::PessimisticLock as i32;
        assert_eq!(
            seen,
            vec![
                (b"a".to_vec(), lock, kvrpcpb::Assertion::NotExist as i32),
                (b"b".to_vec(), lock, kvrpcpb::Assertion::Exist as i32),
            ]
        );
        assert!(request.return_values && request.wait_timeout == 0);
        let reverse = new_scan_request(
            ("a".to_owned().."c".to_owned()).into(),
            ts(4),
            2,
            false,
            true,
        );
        assert_eq!(
            (reverse.start_key.as_slice(), reverse.end_key.as_slice()),
            (&b"c"[..], &b"a"[..])
        );
    }
}
