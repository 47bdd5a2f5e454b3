//! Raw-KV requests for the plan: constructors, and the `KvRequest`,
//! `Shardable`, `Batchable`, `Merge` and `Process` implementations of every
//! raw request of the wire protocol.
//!
//! Single-key requests are one shard. Batches are split by Region (keys are
//! sorted and deduplicated first), and `batch_put` also by
//! [`RAW_BATCH_PUT_SIZE_LIMIT`]. A scan request covers one Region piece: the
//! first Region of its range in scan direction; the caller continues from the
//! Region boundary. `batch_scan` and `delete_range` split their ranges at
//! Region boundaries.
//!
//! The plan each request takes is in [`lowering`](super::lowering)'s docs.
//!
//! This file is long because it declares every raw request of the wire
//! protocol with its sharding, merging and processing, one section a method.

use std::sync::Arc;

use async_trait::async_trait;

use crate::pd::PdClient;
use crate::proto::kvrpcpb;
use crate::region::RegionWithLeader;
use crate::request::{checked, no_key_errors};
use crate::request::{Batchable, Collect, DefaultProcessor, KvRequest, Merge, Process, Shardable};
use crate::store::{RegionStore, Request as _};
use crate::{Error, Result};
use crate::{Key, KvPair, Value};

use crate::request::plan::shard::{key_ranges_shardable, key_set_shardable, single_key_shardable};
use crate::request::set_context_for_store;
use crate::Failure;

/// The size of the pairs one `raw_batch_put` RPC carries at most (keys plus
/// values, in bytes); a larger batch is split.
pub const RAW_BATCH_PUT_SIZE_LIMIT: u64 = 16 * 1024;

fn cf_name(cf: Option<String>) -> String {
    cf.unwrap_or_default()
}

/// A raw get of `key` in column family `cf` (`None`: the default).
pub fn new_raw_get_request(key: Vec<u8>, cf: Option<String>) -> kvrpcpb::RawGetRequest {
    kvrpcpb::RawGetRequest {
        key,
        cf: cf_name(cf),
        ..Default::default()
    }
}

/// A raw batch get of `keys`.
pub fn new_raw_batch_get_request(
    keys: Vec<Vec<u8>>,
    cf: Option<String>,
) -> kvrpcpb::RawBatchGetRequest {
    kvrpcpb::RawBatchGetRequest {
        keys,
        cf: cf_name(cf),
        ..Default::default()
    }
}

/// A raw put of `key` = `value` with a time-to-live in seconds (0: none).
/// `atomic` marks it for use together with compare-and-swap.
pub fn new_raw_put_request(
    key: Vec<u8>,
    value: Vec<u8>,
    cf: Option<String>,
    ttl: u64,
    atomic: bool,
) -> kvrpcpb::RawPutRequest {
    kvrpcpb::RawPutRequest {
        key,
        value,
        cf: cf_name(cf),
        ttl,
        for_cas: atomic,
        ..Default::default()
    }
}

/// A raw batch put of `pairs`, each with its time-to-live in seconds
/// (`ttls` empty: none; otherwise one per pair).
pub fn new_raw_batch_put_request(
    pairs: Vec<kvrpcpb::KvPair>,
    ttls: Vec<u64>,
    cf: Option<String>,
    atomic: bool,
) -> kvrpcpb::RawBatchPutRequest {
    kvrpcpb::RawBatchPutRequest {
        pairs,
        ttls,
        cf: cf_name(cf),
        for_cas: atomic,
        ..Default::default()
    }
}

/// A raw delete of `key`.
pub fn new_raw_delete_request(
    key: Vec<u8>,
    cf: Option<String>,
    atomic: bool,
) -> kvrpcpb::RawDeleteRequest {
    kvrpcpb::RawDeleteRequest {
        key,
        cf: cf_name(cf),
        for_cas: atomic,
        ..Default::default()
    }
}

/// A raw batch delete of `keys`.
pub fn new_raw_batch_delete_request(
    keys: Vec<Vec<u8>>,
    cf: Option<String>,
    atomic: bool,
) -> kvrpcpb::RawBatchDeleteRequest {
    kvrpcpb::RawBatchDeleteRequest {
        keys,
        cf: cf_name(cf),
        for_cas: atomic,
        ..Default::default()
    }
}

/// A raw scan of one Region piece. Forward: `[start_key, end_key)` (empty
/// `end_key`: unbounded). Reverse (`reverse`): from `start_key` (exclusive
/// upper bound, empty: unbounded) down to `end_key` (inclusive lower bound),
/// as TiKV defines it.
pub fn new_raw_scan_request(
    start_key: Vec<u8>,
    end_key: Vec<u8>,
    limit: u32,
    key_only: bool,
    reverse: bool,
    cf: Option<String>,
) -> kvrpcpb::RawScanRequest {
    kvrpcpb::RawScanRequest {
        start_key,
        end_key,
        limit,
        key_only,
        reverse,
        cf: cf_name(cf),
        ..Default::default()
    }
}

/// A raw batch scan of sorted, non-overlapping `ranges` (`(start, end)`),
/// at most `each_limit` pairs per range and Region.
pub fn new_raw_batch_scan_request(
    ranges: Vec<(Vec<u8>, Vec<u8>)>,
    each_limit: u32,
    key_only: bool,
    cf: Option<String>,
) -> kvrpcpb::RawBatchScanRequest {
    kvrpcpb::RawBatchScanRequest {
        ranges: ranges
            .into_iter()
            .map(|(start_key, end_key)| kvrpcpb::KeyRange { start_key, end_key })
            .collect(),
        each_limit,
        key_only,
        cf: cf_name(cf),
        ..Default::default()
    }
}

/// A raw delete of `[start_key, end_key)` (empty `end_key`: unbounded).
pub fn new_raw_delete_range_request(
    start_key: Vec<u8>,
    end_key: Vec<u8>,
    cf: Option<String>,
) -> kvrpcpb::RawDeleteRangeRequest {
    kvrpcpb::RawDeleteRangeRequest {
        start_key,
        end_key,
        cf: cf_name(cf),
        ..Default::default()
    }
}

/// A raw compare-and-swap: sets `key` to `value` if its current value is
/// `previous_value` (`None`: the key must not exist). Its replay is unsafe,
/// so its plan is terminal on dispatch errors.
pub fn new_cas_request(
    key: Vec<u8>,
    value: Vec<u8>,
    previous_value: Option<Vec<u8>>,
    cf: Option<String>,
) -> kvrpcpb::RawCasRequest {
    let previous_not_exist = previous_value.is_none();
    kvrpcpb::RawCasRequest {
        key,
        value,
        previous_not_exist,
        previous_value: previous_value.unwrap_or_default(),
        cf: cf_name(cf),
        ..Default::default()
    }
}

/// A raw get of the time-to-live of `key`.
pub fn new_raw_get_key_ttl_request(
    key: Vec<u8>,
    cf: Option<String>,
) -> kvrpcpb::RawGetKeyTtlRequest {
    kvrpcpb::RawGetKeyTtlRequest {
        key,
        cf: cf_name(cf),
        ..Default::default()
    }
}

macro_rules! kv_request {
    ($req:ty, $resp:ty) => {
        impl KvRequest for $req {
            type Response = $resp;
        }

        impl crate::request::TypedCall for $req {
            // Raw reads: TiKV bounds their snapshot (a replica's wait for
            // its read index) by the deadline.
            const SERVER_DEADLINE: bool = true;

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
            ) -> impl std::future::Future<Output = Option<Result<Box<Self::Response>>>> + Send + 'a
            {
                crate::store::send_batched(client, self, bound)
            }
        }
    };
}

kv_request!(kvrpcpb::RawGetRequest, kvrpcpb::RawGetResponse);
kv_request!(kvrpcpb::RawBatchGetRequest, kvrpcpb::RawBatchGetResponse);
kv_request!(kvrpcpb::RawScanRequest, kvrpcpb::RawScanResponse);
kv_request!(kvrpcpb::RawBatchScanRequest, kvrpcpb::RawBatchScanResponse);
kv_request!(kvrpcpb::RawGetKeyTtlRequest, kvrpcpb::RawGetKeyTtlResponse);

/// Raw writes: never re-sent once they may have reached a store ([routing.md,
/// "Replay safety"](crate::spec::routing#replay-safety); a plan can opt into
/// at-least-once with
/// [`PlanBuilder::at_least_once`](crate::request::PlanBuilder::at_least_once)).
/// `$keys` names the keys or range for an undetermined outcome.
macro_rules! write_request {
    ($req:ty, $resp:ty, |$r:ident| $keys:expr) => {
        impl KvRequest for $req {
            type Response = $resp;

            fn terminal_on_dispatch_error(&self) -> bool {
                true
            }

            fn describe(&self) -> String {
                let $r = self;
                format!("{} of {}", self.label(), $keys)
            }
        }

        impl crate::request::TypedCall for $req {
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
            ) -> impl std::future::Future<Output = Option<Result<Box<Self::Response>>>> + Send + 'a
            {
                crate::store::send_batched(client, self, bound)
            }
        }
    };
}

write_request!(kvrpcpb::RawPutRequest, kvrpcpb::RawPutResponse, |r| {
    describe_keys([&r.key])
});
write_request!(
    kvrpcpb::RawBatchPutRequest,
    kvrpcpb::RawBatchPutResponse,
    |r| describe_keys(r.pairs.iter().map(|p| &p.key))
);
write_request!(kvrpcpb::RawDeleteRequest, kvrpcpb::RawDeleteResponse, |r| {
    describe_keys([&r.key])
});
write_request!(
    kvrpcpb::RawBatchDeleteRequest,
    kvrpcpb::RawBatchDeleteResponse,
    |r| describe_keys(&r.keys)
);
write_request!(
    kvrpcpb::RawDeleteRangeRequest,
    kvrpcpb::RawDeleteRangeResponse,
    |r| format!(
        "range [{:?}, {:?})",
        Key::from(r.start_key.clone()),
        Key::from(r.end_key.clone())
    )
);
write_request!(kvrpcpb::RawCasRequest, kvrpcpb::RawCasResponse, |r| {
    describe_keys([&r.key])
});

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

single_key_shardable!(
    kvrpcpb::RawGetRequest => key keeping { cf },
    kvrpcpb::RawPutRequest => key keeping { value, cf, ttl, for_cas },
    kvrpcpb::RawDeleteRequest => key keeping { cf, for_cas },
    kvrpcpb::RawCasRequest => key keeping { value, previous_not_exist, previous_value, cf, ttl },
    kvrpcpb::RawGetKeyTtlRequest => key keeping { cf },
);

key_set_shardable!(
    batch_size: None;
    kvrpcpb::RawBatchGetRequest { cf },
    kvrpcpb::RawBatchDeleteRequest { cf, for_cas },
);

/// A pair to put and its time-to-live (0: none). Key and value are held
/// directly, not as a `KvPair` (whose unused error field makes it ten times
/// larger): a shard is moved through sorting, grouping and batching.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairWithTtl {
    /// The key.
    pub key: Vec<u8>,
    /// The value.
    pub value: Vec<u8>,
    /// Its time-to-live in seconds.
    pub ttl: u64,
}

impl AsRef<[u8]> for PairWithTtl {
    fn as_ref(&self) -> &[u8] {
        &self.key
    }
}

impl Batchable for kvrpcpb::RawBatchPutRequest {
    type Item = PairWithTtl;

    fn item_size(item: &PairWithTtl) -> u64 {
        (item.key.len() + item.value.len()) as u64
    }
}

#[async_trait]
impl Shardable for kvrpcpb::RawBatchPutRequest {
    type Shard = Vec<PairWithTtl>;

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        if !self.ttls.is_empty() && self.ttls.len() != self.pairs.len() {
            return Err(Error::from(Failure::InvalidArgument(format!(
                "a batch put has {} pairs but {} TTLs; give one TTL per pair or none",
                self.pairs.len(),
                self.ttls.len()
            ))));
        }
        let mut items: Vec<PairWithTtl> = self
            .pairs
            .iter()
            .enumerate()
            .map(|(i, pair)| PairWithTtl {
                key: pair.key.clone(),
                value: pair.value.clone(),
                ttl: self.ttls.get(i).copied().unwrap_or(0),
            })
            .collect();
        // Sorted by key; a later pair for the same key wins.
        items.reverse();
        items.sort_by(|a, b| a.key.cmp(&b.key));
        items.dedup_by(|a, b| a.key == b.key);
        let groups = pd_client.group_keys_by_region(items).await?;
        let mut shards = Vec::new();
        for (region, items) in groups {
            for batch in Self::batches(items, RAW_BATCH_PUT_SIZE_LIMIT) {
                shards.push((batch, region.clone()));
            }
        }
        Ok(shards)
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        let with_ttl = !self.ttls.is_empty();
        self.ttls = if with_ttl {
            shard.iter().map(|p| p.ttl).collect()
        } else {
            Vec::new()
        };
        self.pairs = shard
            .into_iter()
            .map(|p| kvrpcpb::KvPair {
                key: p.key,
                value: p.value,
                ..Default::default()
            })
            .collect();
    }

    /// Built without the pairs (`ttls` keeps one entry when the pairs
    /// carry TTLs, as the mark [`apply_shard`](Shardable::apply_shard)
    /// reads); only the shard's own pairs are copied.
    fn clone_then_apply_shard(&self, shard: Self::Shard) -> Self {
        let mut request = kvrpcpb::RawBatchPutRequest {
            context: self.context.clone(),
            pairs: Vec::new(),
            cf: self.cf.clone(),
            #[allow(deprecated)]
            ttl: self.ttl,
            for_cas: self.for_cas,
            ttls: if self.ttls.is_empty() {
                Vec::new()
            } else {
                vec![0]
            },
        };
        request.apply_shard(shard);
        request
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        set_context_for_store(self, store);
        Ok(())
    }
}

impl crate::request::ShardPayload for kvrpcpb::RawBatchPutRequest {}

#[async_trait]
impl Shardable for kvrpcpb::RawScanRequest {
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

impl crate::request::ShardPayload for kvrpcpb::RawScanRequest {}

key_ranges_shardable!(
    kvrpcpb::RawBatchScanRequest {
        each_limit,
        key_only,
        cf,
        reverse
    },
    kvrpcpb::RawChecksumRequest { algorithm },
);

#[async_trait]
impl Shardable for kvrpcpb::RawDeleteRangeRequest {
    type Shard = (Vec<u8>, Vec<u8>);

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
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

impl crate::request::ShardPayload for kvrpcpb::RawDeleteRangeRequest {}

/// Every shard's pairs in shard order, each converted to the crate's
/// [`KvPair`] as its Region's answer is taken (client-rust's `Out`): the
/// generated pair, with its inline key error, is never copied into a
/// merged vector.
fn collect_pairs<R>(
    input: Vec<Result<R>>,
    pairs: impl Fn(R) -> Vec<kvrpcpb::KvPair>,
) -> Result<Vec<KvPair>> {
    let responses = crate::request::collect_in_order(input)?;
    let parts: Vec<Vec<kvrpcpb::KvPair>> = responses.into_iter().map(pairs).collect();
    let mut all = Vec::with_capacity(parts.iter().map(Vec::len).sum());
    for part in parts {
        all.extend(part.into_iter().map(KvPair::from));
    }
    Ok(all)
}

impl Merge<kvrpcpb::RawBatchGetResponse> for Collect {
    type Out = Vec<KvPair>;

    fn merge(&self, input: Vec<Result<kvrpcpb::RawBatchGetResponse>>) -> Result<Self::Out> {
        collect_pairs(input, |r| r.pairs)
    }
}

impl Merge<kvrpcpb::RawScanResponse> for Collect {
    type Out = Vec<KvPair>;

    fn merge(&self, input: Vec<Result<kvrpcpb::RawScanResponse>>) -> Result<Self::Out> {
        collect_pairs(input, |r| r.kvs)
    }
}

impl Merge<kvrpcpb::RawBatchScanResponse> for Collect {
    type Out = Vec<KvPair>;

    fn merge(&self, input: Vec<Result<kvrpcpb::RawBatchScanResponse>>) -> Result<Self::Out> {
        collect_pairs(input, |r| r.kvs)
    }
}

impl Process<kvrpcpb::RawGetResponse> for DefaultProcessor {
    type Out = Option<Value>;

    fn process(&self, mut input: Result<kvrpcpb::RawGetResponse>) -> Result<Self::Out> {
        let r = checked(&mut input)?;
        Ok((!r.not_found).then(|| std::mem::take(&mut r.value)))
    }
}

impl Process<kvrpcpb::RawGetKeyTtlResponse> for DefaultProcessor {
    type Out = Option<u64>;

    fn process(&self, mut input: Result<kvrpcpb::RawGetKeyTtlResponse>) -> Result<Self::Out> {
        let r = checked(&mut input)?;
        Ok((!r.not_found).then_some(r.ttl))
    }
}

impl Process<kvrpcpb::RawCasResponse> for DefaultProcessor {
    /// The previous value (`None` if the key did not exist) and whether the
    /// swap happened.
    type Out = (Option<Value>, bool);

    fn process(&self, input: Result<kvrpcpb::RawCasResponse>) -> Result<Self::Out> {
        let r = no_key_errors(input?)?;
        let previous = (!r.previous_not_exist).then_some(r.previous_value);
        Ok((previous, r.succeed))
    }
}

impl Process<Vec<KvPair>> for DefaultProcessor {
    type Out = Vec<KvPair>;

    fn process(&self, input: Result<Vec<KvPair>>) -> Result<Self::Out> {
        input
    }
}

macro_rules! unit_processor {
    ($($resp:ty),*) => {$(
        impl Process<$resp> for DefaultProcessor {
            type Out = ();

            fn process(&self, mut input: Result<$resp>) -> Result<()> {
                checked(&mut input).map(|_| ())
            }
        }

        impl Process<Vec<$resp>> for DefaultProcessor {
            type Out = ();

            fn process(&self, input: Result<Vec<$resp>>) -> Result<()> {
                no_key_errors(input?).map(|_| ())
            }
        }
    )*};
}

unit_processor!(
    kvrpcpb::RawPutResponse,
    kvrpcpb::RawBatchPutResponse,
    kvrpcpb::RawDeleteResponse,
    kvrpcpb::RawBatchDeleteResponse,
    kvrpcpb::RawDeleteRangeResponse
);

#[cfg(test)]
mod tests {
    use super::*;

    fn pair(key: &[u8], size: usize) -> PairWithTtl {
        PairWithTtl {
            key: key.to_vec(),
            value: vec![0; size],
            ttl: 0,
        }
    }

    #[test]
    fn batch_put_batches_respect_the_size_limit_and_order() {
        let items = vec![
            pair(b"a", 10),
            pair(b"b", 10),
            pair(b"c", 30),
            pair(b"d", 1),
        ];
        let batches = kvrpcpb::RawBatchPutRequest::batches(items, 25);
        let keys: Vec<Vec<&[u8]>> = batches
            .iter()
            .map(|b| b.iter().map(|p| p.key.as_slice()).collect())
            .collect();
        assert_eq!(keys, vec![vec![&b"a"[..], b"b"], vec![b"c"], vec![b"d"]]);
    }

    #[test]
    fn cas_is_terminal_and_encodes_previous_absence() {
        let req = new_cas_request(b"k".to_vec(), b"v".to_vec(), None, None);
        assert!(req.terminal_on_dispatch_error());
        assert!(req.previous_not_exist);
        let req = new_cas_request(b"k".to_vec(), b"v".to_vec(), Some(b"p".to_vec()), None);
        assert!(!req.previous_not_exist);
        assert_eq!(req.previous_value, b"p");
        assert!(!new_raw_get_request(b"k".to_vec(), None).terminal_on_dispatch_error());
    }

    #[test]
    fn default_processors() {
        let got = DefaultProcessor
            .process(Ok(kvrpcpb::RawGetResponse {
                not_found: true,
                ..Default::default()
            }))
            .unwrap();
        assert_eq!(got, None);
        let err = DefaultProcessor
            .process(Ok(kvrpcpb::RawPutResponse {
                error: "bad".into(),
                ..Default::default()
            }))
            .unwrap_err();
        assert!(matches!(err, Error::KvError { .. }));
        let (prev, ok) = DefaultProcessor
            .process(Ok(kvrpcpb::RawCasResponse {
                succeed: true,
                previous_not_exist: true,
                ..Default::default()
            }))
            .unwrap();
        assert_eq!((prev, ok), (None, true));
    }
}
