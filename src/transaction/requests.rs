//! Transactional requests for the plan: constructors, and the `KvRequest`,
//! `Shardable` and `Batchable` implementations of every transactional
//! request the client sends (their responses' checks are read from the
//! wire table, in `request/plan/responses.rs`) ([wire.md](crate::spec::wire#transactional-kvrpcpb-for-txnmd) has
//! their fields, [txn.md](crate::spec::txn) their meaning).
//!
//! Keys on the wire are the caller's keys; the Regions the plan shards by
//! come from [`CodecPdClient`](super::CodecPdClient), which looks keys up by
//! their memcomparable encoding and decodes the boundaries, so a shard's
//! keys always lie in its Region.
//!
//! Replay: every request here is idempotent at TiKV for the same start and
//! commit timestamps ([txn.md, "Behaviour we
//! require"](crate::spec::txn#behaviour-we-require)), so fallback may re-send
//! each of them; the commit point is marked per plan with
//! [`PlanBuilder::commit_point`](crate::request::PlanBuilder::commit_point).
//!
//! This file is long because it declares every transactional request the
//! client sends with its sharding and error accessors, one section a method.

use std::sync::Arc;

use async_trait::async_trait;

use crate::pd::PdClient;
use crate::proto::kvrpcpb;
use crate::region::RegionWithLeader;
use crate::request::plan::shard::{key_set_shardable, single_key_shardable};
use crate::request::{set_context_for_store, Batchable, KvRequest, Shardable};
use crate::store::{RegionStore, Request as _};
use crate::{Error, Key, Result};

/// The size of the mutations (keys plus values, in bytes) one prewrite,
/// commit or pessimistic-lock RPC carries at most; larger sets are split
/// (client-rust's `TXN_COMMIT_BATCH_SIZE`).
pub const TXN_COMMIT_BATCH_SIZE: u64 = 16 * 1024;

/// The `KeyError` inside an error, if it is one ([`Error::KeyError`]; its
/// message says what happened: locked, write conflict, already exists, ...;
/// see [`describe_key_error`](crate::describe_key_error)). Several key
/// errors come as [`Error::MultipleKeyErrors`] or [`Error::ExtractedErrors`],
/// whose pieces this takes one at a time.
pub fn as_key_error(e: &Error) -> Option<&kvrpcpb::KeyError> {
    match e {
        Error::KeyError(k) => Some(k),
        _ => None,
    }
}

/// "key k" or "3 keys [a, b, c]", at most eight keys spelt out.
fn describe_keys<'a>(keys: impl IntoIterator<Item = &'a Vec<u8>>) -> String {
    const SHOWN: usize = 8;
    let keys: Vec<&Vec<u8>> = keys.into_iter().collect();
    let mut shown: Vec<String> = keys
        .iter()
        .take(SHOWN)
        .map(|k| format!("{:?}", Key::from((*k).clone())))
        .collect();
    if keys.len() > SHOWN {
        shown.push(format!("and {} more", keys.len() - SHOWN));
    }
    match keys.len() {
        1 => format!("key {}", shown.join("")),
        n => format!("{n} keys [{}]", shown.join(", ")),
    }
}

macro_rules! txn_request {
    (read $req:ty, $resp:ty, |$r:ident| $describe:expr) => {
        txn_request!(@impl $req, $resp, |$r| $describe, true);
    };
    ($req:ty, $resp:ty, |$r:ident| $describe:expr) => {
        txn_request!(@impl $req, $resp, |$r| $describe, false);
    };
    (@impl $req:ty, $resp:ty, |$r:ident| $describe:expr, $read:expr) => {
        impl KvRequest for $req {
            type Response = $resp;

            fn describe(&self) -> String {
                let $r = self;
                format!("{} of {}", self.label(), $describe)
            }
        }

        impl crate::request::TypedCall for $req {
            const SERVER_DEADLINE: bool = $read;

            fn dispatch_typed<'a>(
                &'a mut self,
                grpc: &'a crate::store::GrpcChannel,
                timeout: Option<std::time::Duration>,
            ) -> impl std::future::Future<Output = Option<Result<Self::Response>>> + Send + 'a {
                crate::store::send_typed(self, grpc, timeout)
            }
            fn dispatch_batched<'a>(
                &'a mut self,
                client: &'a crate::store::KvRpcClient,
                bound: Option<std::time::Duration>,
            ) -> impl std::future::Future<Output = Option<Result<Box<Self::Response>>>> + Send + 'a {
                crate::store::send_batched(client, self, bound)
            }
        }
    };
}

txn_request!(
    read kvrpcpb::GetRequest,
    kvrpcpb::GetResponse,
    |r| describe_keys([&r.key])
);
txn_request!(read kvrpcpb::BatchGetRequest, kvrpcpb::BatchGetResponse, |r| {
    describe_keys(&r.keys)
});
txn_request!(read kvrpcpb::ScanRequest, kvrpcpb::ScanResponse, |r| format!(
    "range from {:?}",
    Key::from(r.start_key.clone())
));
txn_request!(kvrpcpb::PrewriteRequest, kvrpcpb::PrewriteResponse, |r| {
    format!(
        "{} of transaction {}",
        describe_keys(r.mutations.iter().map(|m| &m.key)),
        r.start_version
    )
});
txn_request!(
    kvrpcpb::CommitRequest,
    kvrpcpb::CommitResponse,
    |r| format!(
        "{} of transaction {} at {}",
        describe_keys(&r.keys),
        r.start_version,
        r.commit_version
    )
);
txn_request!(
    kvrpcpb::BatchRollbackRequest,
    kvrpcpb::BatchRollbackResponse,
    |r| format!(
        "{} of transaction {}",
        describe_keys(&r.keys),
        r.start_version
    )
);
txn_request!(
    kvrpcpb::PessimisticLockRequest,
    kvrpcpb::PessimisticLockResponse,
    |r| format!(
        "{} of transaction {}",
        describe_keys(r.mutations.iter().map(|m| &m.key)),
        r.start_version
    )
);
txn_request!(
    kvrpcpb::PessimisticRollbackRequest,
    kvrpcpb::PessimisticRollbackResponse,
    |r| format!(
        "{} of transaction {}",
        describe_keys(&r.keys),
        r.start_version
    )
);
txn_request!(
    kvrpcpb::TxnHeartBeatRequest,
    kvrpcpb::TxnHeartBeatResponse,
    |r| format!(
        "primary {:?} of transaction {}",
        Key::from(r.primary_lock.clone()),
        r.start_version
    )
);
txn_request!(
    kvrpcpb::CheckTxnStatusRequest,
    kvrpcpb::CheckTxnStatusResponse,
    |r| format!(
        "primary {:?} of transaction {}",
        Key::from(r.primary_key.clone()),
        r.lock_ts
    )
);
txn_request!(
    kvrpcpb::CheckSecondaryLocksRequest,
    kvrpcpb::CheckSecondaryLocksResponse,
    |r| format!(
        "{} of transaction {}",
        describe_keys(&r.keys),
        r.start_version
    )
);
txn_request!(
    kvrpcpb::ResolveLockRequest,
    kvrpcpb::ResolveLockResponse,
    |r| match r.txn_infos.len() {
        0 => format!("transaction {}", r.start_version),
        n => format!("{n} transactions"),
    }
);
txn_request!(kvrpcpb::ScanLockRequest, kvrpcpb::ScanLockResponse, |r| {
    format!("range from {:?}", Key::from(r.start_key.clone()))
});

single_key_shardable!(
    kvrpcpb::GetRequest => key,
    kvrpcpb::TxnHeartBeatRequest => primary_lock,
    kvrpcpb::CheckTxnStatusRequest => primary_key,
);

key_set_shardable!(
    batch_size: Some(TXN_COMMIT_BATCH_SIZE);
    kvrpcpb::BatchGetRequest { version },
    kvrpcpb::CommitRequest { start_version, commit_version, is_txn_file },
    kvrpcpb::BatchRollbackRequest { start_version, is_txn_file },
    kvrpcpb::PessimisticRollbackRequest { start_version, for_update_ts },
    kvrpcpb::CheckSecondaryLocksRequest { start_version },
);

/// A mutation of a prewrite together with its pessimistic action and its
/// `for_update_ts` constraint.
#[derive(Debug, Clone, PartialEq)]
pub struct PrewriteItem {
    /// The mutation.
    pub mutation: kvrpcpb::Mutation,
    /// Its `PessimisticAction` (as the wire's `i32`).
    pub pessimistic_action: i32,
    /// The `expected_for_update_ts` of a `ForUpdateTsConstraint` naming
    /// this mutation, if the request has one. A constraint names its
    /// mutation by index, so each shard numbers them afresh.
    pub expected_for_update_ts: Option<u64>,
}

/// The `for_update_ts_constraints` of a shard's mutations, by their index in
/// the shard.
fn shard_constraints(
    shard: &[PrewriteItem],
) -> Vec<kvrpcpb::prewrite_request::ForUpdateTsConstraint> {
    shard
        .iter()
        .enumerate()
        .filter_map(|(index, item)| {
            Some(kvrpcpb::prewrite_request::ForUpdateTsConstraint {
                index: u32::try_from(index).ok()?,
                expected_for_update_ts: item.expected_for_update_ts?,
            })
        })
        .collect()
}

impl AsRef<[u8]> for PrewriteItem {
    fn as_ref(&self) -> &[u8] {
        &self.mutation.key
    }
}

impl Batchable for kvrpcpb::PrewriteRequest {
    type Item = PrewriteItem;

    fn item_size(item: &PrewriteItem) -> u64 {
        (item.mutation.key.len() + item.mutation.value.len()) as u64
    }
}

#[async_trait]
impl Shardable for kvrpcpb::PrewriteRequest {
    type Shard = Vec<PrewriteItem>;

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        let mut expected = vec![None; self.mutations.len()];
        for c in &self.for_update_ts_constraints {
            if let Some(slot) = expected.get_mut(c.index as usize) {
                *slot = Some(c.expected_for_update_ts);
            }
        }
        let mut items: Vec<PrewriteItem> = self
            .mutations
            .iter()
            .zip(expected)
            .enumerate()
            .map(|(i, (m, expected_for_update_ts))| PrewriteItem {
                mutation: m.clone(),
                pessimistic_action: self.pessimistic_actions.get(i).copied().unwrap_or(0),
                expected_for_update_ts,
            })
            .collect();
        items.sort_by(|a, b| a.mutation.key.cmp(&b.mutation.key));
        items.dedup_by(|a, b| a.mutation.key == b.mutation.key);
        let groups = pd_client.group_keys_by_region(items).await?;
        let mut shards = Vec::new();
        for (region, items) in groups {
            for batch in Self::batches(items, TXN_COMMIT_BATCH_SIZE) {
                shards.push((batch, region.clone()));
            }
        }
        Ok(shards)
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        let with_actions = !self.pessimistic_actions.is_empty();
        self.pessimistic_actions = if with_actions {
            shard.iter().map(|i| i.pessimistic_action).collect()
        } else {
            Vec::new()
        };
        // 1PC is atomic only for the whole transaction in one request: a
        // piece of it (several Regions, batches, or a split) uses 2PC.
        if shard.len() < self.mutations.len() {
            self.try_one_pc = false;
        }
        // TiKV keeps the secondaries on the primary's lock only.
        if !shard.iter().any(|i| i.mutation.key == self.primary_lock) {
            self.secondaries.clear();
        }
        self.for_update_ts_constraints = shard_constraints(&shard);
        self.mutations = shard.into_iter().map(|i| i.mutation).collect();
    }

    /// Built from the shard's items, without a copy of the other
    /// mutations. 1PC stays requested only when the shard holds every
    /// mutation (the shards are deduplicated: a request whose keys repeat is
    /// not the whole transaction in one piece); the secondaries only on the
    /// primary's shard.
    fn clone_then_apply_shard(&self, shard: Self::Shard) -> Self {
        let complete = shard.len() == self.mutations.len();
        let holds_primary = shard.iter().any(|i| i.mutation.key == self.primary_lock);
        let pessimistic_actions = if self.pessimistic_actions.is_empty() {
            Vec::new()
        } else {
            shard.iter().map(|i| i.pessimistic_action).collect()
        };
        let for_update_ts_constraints = shard_constraints(&shard);
        kvrpcpb::PrewriteRequest {
            context: self.context.clone(),
            mutations: shard.into_iter().map(|i| i.mutation).collect(),
            primary_lock: self.primary_lock.clone(),
            start_version: self.start_version,
            lock_ttl: self.lock_ttl,
            skip_constraint_check: self.skip_constraint_check,
            pessimistic_actions,
            txn_size: self.txn_size,
            for_update_ts: self.for_update_ts,
            min_commit_ts: self.min_commit_ts,
            use_async_commit: self.use_async_commit,
            secondaries: if holds_primary {
                self.secondaries.clone()
            } else {
                Vec::new()
            },
            try_one_pc: self.try_one_pc && complete,
            max_commit_ts: self.max_commit_ts,
            assertion_level: self.assertion_level,
            for_update_ts_constraints,
            txn_file_chunks: self.txn_file_chunks.clone(),
        }
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        set_context_for_store(self, store);
        Ok(())
    }
}

impl crate::request::ShardPayload for kvrpcpb::PrewriteRequest {
    /// 1PC only for the whole transaction in one request: not for a shard
    /// of several, nor for a piece a reload split off.
    fn for_shard(&self, shard: Self::Shard, whole: bool) -> Self {
        let mut request = self.clone_then_apply_shard(shard);
        request.try_one_pc &= whole;
        request
    }
}

/// A mutation of a pessimistic lock request, batchable by key size.
#[derive(Debug, Clone, PartialEq)]
pub struct LockItem(pub kvrpcpb::Mutation);

impl AsRef<[u8]> for LockItem {
    fn as_ref(&self) -> &[u8] {
        &self.0.key
    }
}

impl Batchable for kvrpcpb::PessimisticLockRequest {
    type Item = LockItem;

    fn item_size(item: &LockItem) -> u64 {
        item.0.key.len() as u64
    }
}

#[async_trait]
impl Shardable for kvrpcpb::PessimisticLockRequest {
    type Shard = Vec<LockItem>;

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        let mut items: Vec<LockItem> = self.mutations.iter().cloned().map(LockItem).collect();
        items.sort_by(|a, b| a.0.key.cmp(&b.0.key));
        items.dedup_by(|a, b| a.0.key == b.0.key);
        let groups = pd_client.group_keys_by_region(items).await?;
        let mut shards = Vec::new();
        for (region, items) in groups {
            for batch in Self::batches(items, TXN_COMMIT_BATCH_SIZE) {
                shards.push((batch, region.clone()));
            }
        }
        Ok(shards)
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        self.mutations = shard.into_iter().map(|i| i.0).collect();
    }

    /// Built without the mutations: only the shard's own are copied.
    fn clone_then_apply_shard(&self, shard: Self::Shard) -> Self {
        let mut request = kvrpcpb::PessimisticLockRequest {
            context: self.context.clone(),
            mutations: Vec::new(),
            primary_lock: self.primary_lock.clone(),
            start_version: self.start_version,
            lock_ttl: self.lock_ttl,
            for_update_ts: self.for_update_ts,
            is_first_lock: self.is_first_lock,
            wait_timeout: self.wait_timeout,
            force: self.force,
            return_values: self.return_values,
            min_commit_ts: self.min_commit_ts,
            check_existence: self.check_existence,
            lock_only_if_exists: self.lock_only_if_exists,
            wake_up_mode: self.wake_up_mode,
        };
        request.apply_shard(shard);
        request
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        set_context_for_store(self, store);
        Ok(())
    }
}

impl crate::request::ShardPayload for kvrpcpb::PessimisticLockRequest {}

/// A scan (or lock scan) serves one Region piece: the first Region of its
/// range in scan direction; the caller continues from the piece's end.
#[async_trait]
impl Shardable for kvrpcpb::ScanRequest {
    /// The piece as `(start_key, end_key)` in the request's own convention.
    type Shard = (Vec<u8>, Vec<u8>);

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        crate::request::plan::shard::scan_piece(
            pd_client,
            &self.start_key,
            &self.end_key,
            self.reverse,
        )
        .await
    }

    fn apply_shard(&mut self, (start_key, end_key): Self::Shard) {
        self.start_key = start_key;
        self.end_key = end_key;
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        set_context_for_store(self, store);
        Ok(())
    }
}

impl crate::request::ShardPayload for kvrpcpb::ScanRequest {}

#[async_trait]
impl Shardable for kvrpcpb::ScanLockRequest {
    type Shard = (Vec<u8>, Vec<u8>);

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        // Every Region of the range: `limit` is per Region.
        crate::request::plan::shard::range_shards(pd_client, &self.start_key, &self.end_key).await
    }

    fn apply_shard(&mut self, (start_key, end_key): Self::Shard) {
        self.start_key = start_key;
        self.end_key = end_key;
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        set_context_for_store(self, store);
        Ok(())
    }
}

impl crate::request::ShardPayload for kvrpcpb::ScanLockRequest {}

/// A transactional read at `version`.
pub fn new_get_request(key: Vec<u8>, version: u64) -> kvrpcpb::GetRequest {
    kvrpcpb::GetRequest {
        key,
        version,
        ..Default::default()
    }
}

/// A transactional batch read at `version`.
pub fn new_batch_get_request(keys: Vec<Vec<u8>>, version: u64) -> kvrpcpb::BatchGetRequest {
    kvrpcpb::BatchGetRequest {
        keys,
        version,
        ..Default::default()
    }
}

/// A transactional scan of one Region piece at `version` (forward:
/// `[start_key, end_key)`; reverse: from `start_key` exclusive down to
/// `end_key` inclusive, as TiKV defines it).
pub fn new_scan_request(
    start_key: Vec<u8>,
    end_key: Vec<u8>,
    version: u64,
    limit: u32,
    key_only: bool,
    reverse: bool,
) -> kvrpcpb::ScanRequest {
    kvrpcpb::ScanRequest {
        start_key,
        end_key,
        version,
        limit,
        key_only,
        reverse,
        ..Default::default()
    }
}

/// A commit of `keys` of transaction `start_version` at `commit_version`.
pub fn new_commit_request(
    keys: Vec<Vec<u8>>,
    start_version: u64,
    commit_version: u64,
) -> kvrpcpb::CommitRequest {
    kvrpcpb::CommitRequest {
        keys,
        start_version,
        commit_version,
        ..Default::default()
    }
}

/// A rollback of `keys` of transaction `start_version`.
pub fn new_batch_rollback_request(
    keys: Vec<Vec<u8>>,
    start_version: u64,
) -> kvrpcpb::BatchRollbackRequest {
    kvrpcpb::BatchRollbackRequest {
        keys,
        start_version,
        ..Default::default()
    }
}

/// A heartbeat that extends the primary lock's TTL to `advise_lock_ttl` ms.
pub fn new_heart_beat_request(
    primary_lock: Vec<u8>,
    start_version: u64,
    advise_lock_ttl: u64,
) -> kvrpcpb::TxnHeartBeatRequest {
    kvrpcpb::TxnHeartBeatRequest {
        primary_lock,
        start_version,
        advise_lock_ttl,
        ..Default::default()
    }
}

/// A lock scan of `[start_key, end_key)` for locks with `start_ts <=
/// max_version`, at most `limit` per Region.
pub fn new_scan_lock_request(
    start_key: Vec<u8>,
    end_key: Vec<u8>,
    max_version: u64,
    limit: u32,
) -> kvrpcpb::ScanLockRequest {
    kvrpcpb::ScanLockRequest {
        start_key,
        end_key,
        max_version,
        limit,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::request::plan::resolve_lock::HasLocks;
    use crate::request::HasKeyErrors;
    #[cfg(feature = "mock")]
    use crate::request::ShardPayload;

    #[test]
    fn locks_are_taken_out_and_other_errors_stay() {
        let mut response = kvrpcpb::PrewriteResponse {
            errors: vec![
                kvrpcpb::KeyError {
                    locked: Some(kvrpcpb::LockInfo {
                        key: b"a".to_vec(),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                kvrpcpb::KeyError {
                    abort: "no".to_owned(),
                    ..Default::default()
                },
            ],
            ..Default::default()
        };
        let locks = response.take_locks();
        assert_eq!(locks.len(), 1);
        let errors = response.key_errors().unwrap();
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().contains("aborted"), "{}", errors[0]);
    }

    /// A `ForUpdateTsConstraint` names its mutation by index: each shard
    /// gets the constraints of its own mutations, numbered in the shard.
    #[cfg(feature = "mock")]
    #[tokio::test]
    async fn for_update_ts_constraints_follow_their_mutations_into_shards() {
        use crate::mock::{self, MockPdClient};
        use kvrpcpb::prewrite_request::ForUpdateTsConstraint;

        let peers = [mock::voter(11, 1)];
        let pd = Arc::new(MockPdClient::new(vec![
            mock::region(1, b"", b"m", &peers, Some(11)),
            mock::region(2, b"m", b"", &peers, Some(11)),
        ]));
        let put = |key: &[u8]| kvrpcpb::Mutation {
            key: key.to_vec(),
            ..Default::default()
        };
        let constraint = |index, expected_for_update_ts| ForUpdateTsConstraint {
            index,
            expected_for_update_ts,
        };
        let request = kvrpcpb::PrewriteRequest {
            mutations: vec![put(b"z"), put(b"a"), put(b"n"), put(b"b")],
            for_update_ts_constraints: vec![constraint(0, 10), constraint(3, 20)],
            ..Default::default()
        };
        let shards = request.shards(&pd).await.unwrap();
        let built: Vec<_> = shards
            .into_iter()
            .map(|(shard, _)| {
                let mut applied = request.clone();
                applied.apply_shard(shard.clone());
                // Built without a copy of the other mutations, it is the
                // request a whole copy with the shard applied would be.
                assert_eq!(request.clone_then_apply_shard(shard.clone()), applied);
                let built = ShardPayload::for_shard(&request, shard, false);
                assert_eq!(
                    applied.for_update_ts_constraints,
                    built.for_update_ts_constraints
                );
                built
            })
            .collect();
        let keys = |r: &kvrpcpb::PrewriteRequest| {
            r.mutations
                .iter()
                .map(|m| m.key.clone())
                .collect::<Vec<_>>()
        };
        assert_eq!(keys(&built[0]), [b"a".to_vec(), b"b".to_vec()]);
        assert_eq!(built[0].for_update_ts_constraints, [constraint(1, 20)]);
        assert_eq!(keys(&built[1]), [b"n".to_vec(), b"z".to_vec()]);
        assert_eq!(built[1].for_update_ts_constraints, [constraint(1, 10)]);
    }

    #[test]
    fn key_errors_say_what_happened() {
        let e = Error::KeyError(Box::new(kvrpcpb::KeyError {
            already_exist: Some(kvrpcpb::AlreadyExist { key: b"k".to_vec() }),
            ..Default::default()
        }));
        assert!(e.to_string().contains("already exists"), "{e}");
        assert!(as_key_error(&e).unwrap().already_exist.is_some());
    }
}
