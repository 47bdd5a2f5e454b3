//! [`RawClient`]: the raw key-value API. Every method, scans included, runs
//! through the request plan, so every RPC routes leader-first with voter
//! fallback ([routing.md](crate::spec::routing)).
//!
//! This file is over 800 lines with its unit tests, which sit beside the code
//! as client-rust and tokio keep them; the code is under 800.

use std::collections::BTreeMap;
use std::ops::{Bound, Range};
use std::sync::Arc;

use futures::{Stream, TryStreamExt};

use super::checksum::{new_raw_checksum_request, MergeChecksum, RawChecksum};
use super::requests::{
    new_cas_request, new_raw_batch_delete_request, new_raw_batch_get_request,
    new_raw_batch_put_request, new_raw_batch_scan_request, new_raw_delete_range_request,
    new_raw_delete_request, new_raw_get_key_ttl_request, new_raw_get_request, new_raw_put_request,
    new_raw_scan_request,
};
use crate::backoff::Backoff;
use crate::pd::{PdClient, PdRpcClient};
use crate::proto::{kvrpcpb, metapb};
use crate::request::plan::call_deadline;
use crate::request::plan::scan::{disjoint_layers, page_of, scan_pages};
use crate::request::{call_plan, CallSettings};
use crate::request::{CodecPdClient, EncodeKeyspace, KeyMode, Keyspace, TruncateKeyspace};
use crate::request::{
    Collect, CollectError, CollectSingle, DefaultProcessor, HasRegionError, Merge, Plan,
    PlanBuilder, Process, RoutingState,
};
use crate::request::{FastDispatch, ShardPayload, Stage, TypedCall};
use crate::Failure;

mod extensions;
use crate::{BoundRange, ColumnFamily, Config, Error, Key, KvPair, ReplicaRead, Result, Value};

/// The largest `limit` a scan accepts; larger limits are an
/// [`Failure::InvalidArgument`](crate::Failure::InvalidArgument). Scan in pages to read more.
pub const MAX_RAW_KV_SCAN_LIMIT: u32 = 10240;

/// How many uncached Regions a forward scan loads from PD at once.
const SCAN_PREFETCH_REGIONS: usize = 16;

/// A raw key-value client. Cheap to clone; clones share connections, caches
/// and routing state.
///
/// ```no_run
/// # async fn run() -> tikv_plan::Result<()> {
/// use tikv_plan::RawClient;
/// let client = RawClient::new(vec!["127.0.0.1:2379"]).await?;
/// client.put("key".to_owned(), "value".to_owned()).await?;
/// assert_eq!(client.get("key".to_owned()).await?, Some(b"value".to_vec()));
/// # Ok(()) }
/// ```
pub struct RawClient<PdC: PdClient = PdRpcClient> {
    /// The PD client, seen through the key codec of this client's keyspace:
    /// raw keys route by themselves in API v1, by their memcomparable
    /// encoding in API v2, as TiKV checks them.
    pub(super) rpc: Arc<CodecPdClient<PdC>>,
    routing: Arc<RoutingState>,
    cf: Option<ColumnFamily>,
    backoff: Backoff,
    atomic: bool,
    keyspace: Keyspace,
    /// `Config::at_least_once_writes`: re-send writes that may have been
    /// delivered (never compare-and-swap).
    at_least_once_writes: bool,
    /// Which replica reads may go to first ([`RawClient::with_replica_read`]).
    replica_read: ReplicaRead,
    /// The tags every request carries (`Config::request_tags`,
    /// [`RawClient::with_request_tags`]), as context fields built once.
    tags: Arc<crate::config::WireTags>,
}

impl<PdC: PdClient> Clone for RawClient<PdC> {
    fn clone(&self) -> Self {
        RawClient {
            rpc: Arc::clone(&self.rpc),
            routing: Arc::clone(&self.routing),
            cf: self.cf,
            backoff: self.backoff.clone(),
            atomic: self.atomic,
            keyspace: self.keyspace,
            at_least_once_writes: self.at_least_once_writes,
            replica_read: self.replica_read,
            tags: Arc::clone(&self.tags),
        }
    }
}

impl<PdC: PdClient> std::fmt::Debug for RawClient<PdC> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawClient")
            .field("cf", &self.cf)
            .field("backoff", &self.backoff)
            .field("atomic", &self.atomic)
            .field("keyspace", &self.keyspace)
            .field("at_least_once_writes", &self.at_least_once_writes)
            .finish_non_exhaustive()
    }
}

impl RawClient<PdRpcClient> {
    /// Connects to a cluster through its PD endpoints (`host:port`), with the
    /// default [`Config`].
    pub async fn new<S: Into<String>>(pd_endpoints: Vec<S>) -> Result<Self> {
        Self::new_with_config(pd_endpoints, Config::default()).await
    }

    /// Connects to a cluster through its PD endpoints with `config`.
    pub async fn new_with_config<S: Into<String>>(
        pd_endpoints: Vec<S>,
        config: Config,
    ) -> Result<Self> {
        let rpc = Arc::new(PdRpcClient::connect_endpoints(pd_endpoints, &config).await?);
        let keyspace = crate::request::configured_keyspace(&*rpc, &config).await?;
        Ok(Self::new_with_pd_client(rpc, &config).with_keyspace(keyspace))
    }
}

impl<PdC: PdClient> RawClient<PdC> {
    /// A client over any [`PdClient`], for example a
    /// `tikv_plan::mock::MockPdClient` in unit tests.
    pub fn new_with_pd_client(pd_client: Arc<PdC>, config: &Config) -> Self {
        RawClient {
            rpc: Arc::new(CodecPdClient::new(
                pd_client,
                Keyspace::Disable,
                KeyMode::Raw,
            )),
            routing: Arc::new(RoutingState::new(config)),
            cf: None,
            backoff: config.region_backoff.clone(),
            atomic: false,
            keyspace: Keyspace::Disable,
            at_least_once_writes: config.at_least_once_writes,
            replica_read: ReplicaRead::Leader,
            tags: Arc::new(config.wire_tags(&config.request_tags)),
        }
    }

    /// A clone that works in `keyspace`: keys are encoded in its API v2 form
    /// on the way out and decoded on the way back, and in API v2 Regions
    /// are looked up by the keys' memcomparable encoding, as TiKV keeps raw
    /// keys there. [`RawClient::new_with_config`] sets it from
    /// `Config::keyspace`; this is for clients built with
    /// [`new_with_pd_client`](Self::new_with_pd_client).
    pub fn with_keyspace(&self, keyspace: Keyspace) -> Self {
        let mut client = self.clone();
        client.keyspace = keyspace;
        client.rpc = Arc::new(self.rpc.view_for(keyspace, KeyMode::Raw));
        client
    }

    /// The keyspace requests use ([`Keyspace::Disable`]: API v1).
    pub fn keyspace(&self) -> Keyspace {
        self.keyspace
    }

    fn encode_key(&self, key: impl Into<Key>) -> Vec<u8> {
        key.into()
            .encode_keyspace(self.keyspace, KeyMode::Raw)
            .into()
    }

    fn encode_range(&self, range: impl Into<BoundRange>) -> Result<(Vec<u8>, Vec<u8>)> {
        let (start, end) = range
            .into()
            .encode_keyspace(self.keyspace, KeyMode::Raw)
            .into_key_range()?;
        Ok((start.into(), end.into()))
    }

    fn decode_pair(&self, pair: kvrpcpb::KvPair) -> KvPair {
        from_proto_pair(pair).truncate_keyspace(self.keyspace)
    }

    fn decode_key(&self, pair: kvrpcpb::KvPair) -> Key {
        Key::from(pair.key).truncate_keyspace(self.keyspace)
    }

    fn strip_keyspace(&self, pair: KvPair) -> KvPair {
        pair.truncate_keyspace(self.keyspace)
    }

    /// A client that reads and writes column family `cf`.
    pub fn with_cf(&self, cf: ColumnFamily) -> Self {
        RawClient {
            cf: Some(cf),
            ..self.clone()
        }
    }

    /// **beyond** A client whose reads (gets and scans) may be served by a
    /// replica `replica` chooses, through TiKV's read index (linearizable),
    /// else by the leader ([routing.md, "Replica and stale
    /// reads"](crate::spec::routing#replica-and-stale-reads-beyond)).
    pub fn with_replica_read(&self, replica: ReplicaRead) -> Self {
        let replica_read = replica;
        RawClient {
            replica_read,
            ..self.clone()
        }
    }

    /// A client that retries with `backoff`.
    pub fn with_backoff(&self, backoff: Backoff) -> Self {
        RawClient {
            backoff,
            ..self.clone()
        }
    }

    /// A client in atomic mode: writes are ordered with compare-and-swap, which
    /// requires this mode.
    pub fn with_atomic_for_cas(&self) -> Self {
        RawClient {
            atomic: true,
            ..self.clone()
        }
    }

    fn cf_name(&self) -> Option<String> {
        ColumnFamily::request_field(self.cf)
    }

    /// The builder of a read: it may go to a replica first.
    fn read_builder<Req: TypedCall>(
        &self,
        request: Req,
    ) -> PlanBuilder<CodecPdClient<PdC>, FastDispatch<Req>> {
        self.builder(request).replica_read(self.replica_read)
    }

    fn builder<Req: TypedCall>(
        &self,
        request: Req,
    ) -> PlanBuilder<CodecPdClient<PdC>, FastDispatch<Req>> {
        let builder = PlanBuilder::fast(Arc::clone(&self.rpc), self.keyspace, request)
            .routing(Arc::clone(&self.routing))
            .tagged(&self.tags);
        if self.at_least_once_writes {
            builder.at_least_once()
        } else {
            builder
        }
    }

    /// Runs `request` through the plan with fallback (a read's first
    /// attempt may go to a replica as `replica` says; `None` for a write),
    /// merges its shards' answers with `merge` and applies the default
    /// processing.
    async fn run<Req, M>(
        &self,
        request: Req,
        replica: Option<ReplicaRead>,
        merge: M,
    ) -> Result<<DefaultProcessor as Process<M::Out>>::Out>
    where
        Req: TypedCall + ShardPayload,
        Req::Response: HasRegionError + Sync,
        M: Merge<Req::Response>,
        DefaultProcessor: Process<M::Out>,
    {
        // Built in place, before the first await (`call_plan`: the builder's
        // steps would each move it). Its stages run as one future
        // (`Stage::run`), without the box of each stage's `Plan::execute`:
        // the retrying stage's future is the one boxed, so the caller's
        // future stays small (a caller moves it at least twice).
        let plan = {
            let settings = CallSettings {
                routing: &self.routing,
                tags: &self.tags,
                at_least_once: self.at_least_once_writes,
                replica,
                backoff: &self.backoff,
            };
            call_plan(&self.rpc, self.keyspace, request, &settings, merge)
        };
        plan.run().await
    }

    /// The value of `key`, or `None` when it does not exist.
    pub async fn get(&self, key: impl Into<Key>) -> Result<Option<Value>> {
        let request = new_raw_get_request(self.encode_key(key), self.cf_name());
        self.run(request, Some(self.replica_read), CollectSingle)
            .await
    }

    /// The values of the keys that exist, in key order.
    pub async fn batch_get(
        &self,
        keys: impl IntoIterator<Item = impl Into<Key>>,
    ) -> Result<Vec<KvPair>> {
        let keys: Vec<Vec<u8>> = keys.into_iter().map(|k| self.encode_key(k)).collect();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let request = new_raw_batch_get_request(keys, self.cf_name());
        let pairs = self.run(request, Some(self.replica_read), Collect).await?;
        Ok(pairs.into_iter().map(|p| self.strip_keyspace(p)).collect())
    }

    /// The remaining time-to-live of `key` in seconds (0: it never expires),
    /// or `None` when it does not exist.
    pub async fn get_key_ttl_secs(&self, key: impl Into<Key>) -> Result<Option<u64>> {
        let request = new_raw_get_key_ttl_request(self.encode_key(key), self.cf_name());
        self.run(request, Some(self.replica_read), CollectSingle)
            .await
    }

    /// Sets `key` to `value`.
    pub async fn put(&self, key: impl Into<Key>, value: impl Into<Value>) -> Result<()> {
        self.put_with_ttl(key, value, 0).await
    }

    /// Sets `key` to `value`, expiring after `ttl_secs` seconds (0: never).
    pub async fn put_with_ttl(
        &self,
        key: impl Into<Key>,
        value: impl Into<Value>,
        ttl_secs: u64,
    ) -> Result<()> {
        let request = new_raw_put_request(
            self.encode_key(key),
            value.into(),
            self.cf_name(),
            ttl_secs,
            self.atomic,
        );
        self.run(request, None, CollectSingle).await
    }

    /// Sets every pair. When a key appears twice, the later value wins.
    pub async fn batch_put(
        &self,
        pairs: impl IntoIterator<Item = impl Into<KvPair>>,
    ) -> Result<()> {
        self.batch_put_inner(pairs.into_iter().map(|p| (p.into(), 0)).collect(), false)
            .await
    }

    /// Sets every pair with its own time-to-live in seconds (0: never); `ttls`
    /// must have one entry per pair.
    pub async fn batch_put_with_ttl(
        &self,
        pairs: impl IntoIterator<Item = impl Into<KvPair>>,
        ttls: impl IntoIterator<Item = u64>,
    ) -> Result<()> {
        let pairs: Vec<KvPair> = pairs.into_iter().map(Into::into).collect();
        let ttls: Vec<u64> = ttls.into_iter().collect();
        if pairs.len() != ttls.len() {
            return Err(Error::from(Failure::InvalidArgument(format!(
                "batch_put_with_ttl got {} pairs but {} TTLs; pass one TTL per pair",
                pairs.len(),
                ttls.len()
            ))));
        }
        self.batch_put_inner(pairs.into_iter().zip(ttls).collect(), true)
            .await
    }

    async fn batch_put_inner(&self, items: Vec<(KvPair, u64)>, with_ttl: bool) -> Result<()> {
        // Later duplicates win, as if the pairs were put one after another.
        let mut unique: BTreeMap<Key, (Value, u64)> = BTreeMap::new();
        for (KvPair(key, value), ttl) in items {
            unique.insert(
                key.encode_keyspace(self.keyspace, KeyMode::Raw),
                (value, ttl),
            );
        }
        if unique.is_empty() {
            return Ok(());
        }
        let mut pairs = Vec::with_capacity(unique.len());
        let mut ttls = Vec::with_capacity(if with_ttl { unique.len() } else { 0 });
        for (key, (value, ttl)) in unique {
            pairs.push(kvrpcpb::KvPair {
                key: key.into(),
                value,
                ..Default::default()
            });
            if with_ttl {
                ttls.push(ttl);
            }
        }
        let request = new_raw_batch_put_request(pairs, ttls, self.cf_name(), self.atomic);
        self.run(request, None, CollectError).await
    }

    /// Deletes `key` (deleting a missing key is not an error).
    pub async fn delete(&self, key: impl Into<Key>) -> Result<()> {
        let request = new_raw_delete_request(self.encode_key(key), self.cf_name(), self.atomic);
        self.run(request, None, CollectSingle).await
    }

    /// Deletes every key.
    ///
    /// Refused with [`Error::UnsupportedMode`] in atomic mode, as in
    /// client-rust (before any key is looked at).
    pub async fn batch_delete(&self, keys: impl IntoIterator<Item = impl Into<Key>>) -> Result<()> {
        if self.atomic {
            return Err(Error::UnsupportedMode);
        }
        let keys: Vec<Vec<u8>> = keys.into_iter().map(|k| self.encode_key(k)).collect();
        if keys.is_empty() {
            return Ok(());
        }
        let request = new_raw_batch_delete_request(keys, self.cf_name(), self.atomic);
        self.run(request, None, CollectError).await
    }

    /// Deletes every key in `range`. As in client-rust, `..` and `"".."""`
    /// delete the whole key space (in a keyspace: the whole keyspace).
    ///
    /// Refused with [`Error::UnsupportedMode`] in atomic mode, as in
    /// client-rust: TiKV has no atomic range delete, so it could interleave
    /// with compare-and-swap.
    pub async fn delete_range(&self, range: impl Into<BoundRange>) -> Result<()> {
        if self.atomic {
            return Err(Error::UnsupportedMode);
        }
        let (start, end) = self.encode_range(range)?;
        if !end.is_empty() && start == end {
            return Ok(());
        }
        let request = new_raw_delete_range_request(start, end, self.cf_name());
        self.run(request, None, CollectError).await
    }

    /// Up to `limit` pairs of `range`, in ascending key order.
    pub async fn scan(&self, range: impl Into<BoundRange>, limit: u32) -> Result<Vec<KvPair>> {
        let pairs = self.scan_inner(range.into(), limit, false, false).await?;
        Ok(pairs.into_iter().map(|p| self.decode_pair(p)).collect())
    }

    /// Up to `limit` pairs of `range`, in descending key order (from the end
    /// of the range down).
    pub async fn scan_reverse(
        &self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<Vec<KvPair>> {
        let pairs = self.scan_inner(range.into(), limit, false, true).await?;
        Ok(pairs.into_iter().map(|p| self.decode_pair(p)).collect())
    }

    /// Up to `limit` keys of `range`, in ascending order.
    pub async fn scan_keys(&self, range: impl Into<BoundRange>, limit: u32) -> Result<Vec<Key>> {
        let pairs = self.scan_inner(range.into(), limit, true, false).await?;
        Ok(pairs.into_iter().map(|p| self.decode_key(p)).collect())
    }

    /// Every pair of `range`, in ascending key order, as a stream: pages of
    /// `page_size` pairs (1 to 10,240, TiKV's limit) are read one after
    /// another through the plan, each continuing after the last key of the
    /// one before, across Regions, so a range of any size can be read
    /// without the scan limit. The next page is read only when the stream is
    /// polled past the current one; dropping the stream stops it.
    ///
    /// ```no_run
    /// # async fn run(client: tikv_plan::RawClient) -> tikv_plan::Result<()> {
    /// use futures::TryStreamExt;
    /// let pairs: Vec<_> = client.scan_stream("a".."z", 1000).try_collect().await?;
    /// # Ok(()) }
    /// ```
    pub fn scan_stream(
        &self,
        range: impl Into<BoundRange>,
        page_size: u32,
    ) -> impl Stream<Item = Result<KvPair>> + Send + 'static {
        self.page_stream(range.into(), page_size, false)
    }

    /// Every pair of `range`, in descending key order, as a stream of pages
    /// of `page_size` pairs (see [`scan_stream`](Self::scan_stream)).
    pub fn scan_stream_reverse(
        &self,
        range: impl Into<BoundRange>,
        page_size: u32,
    ) -> impl Stream<Item = Result<KvPair>> + Send + 'static {
        self.page_stream(range.into(), page_size, true)
    }

    fn page_stream(
        &self,
        range: BoundRange,
        page_size: u32,
        reverse: bool,
    ) -> impl Stream<Item = Result<KvPair>> + Send + 'static {
        let client = self.clone();
        let first = (page_size > 0).then_some(range).ok_or_else(|| {
            Error::from(Failure::InvalidArgument(
                "a scan stream needs a page size of at least 1 pair".to_owned(),
            ))
        });
        futures::stream::try_unfold(Some(first), move |next| {
            let client = client.clone();
            async move {
                let range: BoundRange = match next {
                    None => return Ok::<_, Error>(None),
                    Some(range) => range?,
                };
                let page = client
                    .scan_inner(range.clone(), page_size, false, reverse)
                    .await?;
                let page: Vec<KvPair> = page.into_iter().map(|p| client.decode_pair(p)).collect();
                let rest = match page.last() {
                    // A short page is the last one.
                    Some(_) if (page.len() as u32) < page_size => None,
                    None => None,
                    Some(last) => next_page_range(range, last.key(), reverse),
                };
                Ok(Some((page, rest.map(Ok::<BoundRange, Error>))))
            }
        })
        .map_ok(|page| futures::stream::iter(page.into_iter().map(Ok::<KvPair, Error>)))
        .try_flatten()
    }

    /// Up to `limit` keys of `range`, in descending order.
    pub async fn scan_keys_reverse(
        &self,
        range: impl Into<BoundRange>,
        limit: u32,
    ) -> Result<Vec<Key>> {
        let pairs = self.scan_inner(range.into(), limit, true, true).await?;
        Ok(pairs.into_iter().map(|p| self.decode_key(p)).collect())
    }

    /// Walks the Regions of the range one plan at a time, continuing from the
    /// boundary of the piece each plan actually served (which follows splits
    /// seen during retries), until the limit is reached.
    async fn scan_inner(
        &self,
        range: BoundRange,
        limit: u32,
        key_only: bool,
        reverse: bool,
    ) -> Result<Vec<kvrpcpb::KvPair>> {
        check_scan_limit(limit)?;
        let (start, end) = self.encode_range(range)?;
        // One deadline for the whole scan, however many Regions it walks.
        let scan = scan_pages(&start, &end, limit, reverse, |cursor, remaining| {
            let (start, end) = (&start, &end);
            async move {
                if !reverse {
                    // A cold cache loads the next Regions in one PD call, not
                    // one per page. Best effort, and within the request
                    // deadline: with PD out of reach the page's own lookups
                    // (bounded by the deadline too) take over.
                    let prefetch = self
                        .rpc
                        .prefetch_regions(&cursor, end, SCAN_PREFETCH_REGIONS);
                    let _ = call_deadline::bounded(prefetch).await;
                }
                // Reverse: from the cursor (the upper bound) down to the start.
                let bound = if reverse { start } else { end };
                let request = new_raw_scan_request(
                    cursor,
                    bound.clone(),
                    remaining,
                    key_only,
                    reverse,
                    self.cf_name(),
                );
                let pieces = self
                    .read_builder(request)
                    .preserve_shard()
                    .retry_multi_region(self.backoff.clone())
                    .merge(CollectError)
                    .plan()
                    .execute()
                    .await?;
                page_of(pieces, |response| response.kvs)
            }
        });
        call_deadline::within(self.routing.request_deadline(), scan).await
    }

    /// Up to `each_limit` pairs from each range, in the order the ranges are
    /// given (each range's pairs in ascending key order). Ranges may overlap:
    /// as in client-rust, a key in two ranges is returned twice.
    pub async fn batch_scan(
        &self,
        ranges: impl IntoIterator<Item = impl Into<BoundRange>>,
        each_limit: u32,
    ) -> Result<Vec<KvPair>> {
        let pairs = self.batch_scan_inner(ranges, each_limit, false).await?;
        Ok(pairs.into_iter().map(|p| self.strip_keyspace(p)).collect())
    }

    /// Up to `each_limit` keys from each range, in the order the ranges are
    /// given.
    pub async fn batch_scan_keys(
        &self,
        ranges: impl IntoIterator<Item = impl Into<BoundRange>>,
        each_limit: u32,
    ) -> Result<Vec<Key>> {
        let pairs = self.batch_scan_inner(ranges, each_limit, true).await?;
        Ok(pairs
            .into_iter()
            .map(|p| p.into_key().truncate_keyspace(self.keyspace))
            .collect())
    }

    /// Overlapping ranges go to separate layers of disjoint ranges (see
    /// [`disjoint_layers`]); each layer is one batch-scan plan, so the usual
    /// case (disjoint ranges) stays one RPC per Region.
    async fn batch_scan_inner(
        &self,
        ranges: impl IntoIterator<Item = impl Into<BoundRange>>,
        each_limit: u32,
        key_only: bool,
    ) -> Result<Vec<KvPair>> {
        check_scan_limit(each_limit)?;
        let ranges = ranges
            .into_iter()
            .map(|r| self.encode_range(r))
            .collect::<Result<Vec<_>>>()?;
        if each_limit == 0 {
            return Ok(Vec::new());
        }
        // One deadline for every layer's plan.
        call_deadline::within(self.routing.request_deadline(), async {
            self.scan_layers(&ranges, each_limit, key_only).await
        })
        .await
    }

    async fn scan_layers(
        &self,
        ranges: &[(Vec<u8>, Vec<u8>)],
        each_limit: u32,
        key_only: bool,
    ) -> Result<Vec<KvPair>> {
        let mut per_range: Vec<Vec<KvPair>> = vec![Vec::new(); ranges.len()];
        for layer in disjoint_layers(ranges) {
            let layer_ranges: Vec<(Vec<u8>, Vec<u8>)> =
                layer.iter().map(|&i| ranges[i].clone()).collect();
            let request = new_raw_batch_scan_request(
                layer_ranges.clone(),
                each_limit,
                key_only,
                self.cf_name(),
            );
            let pairs = self.run(request, Some(self.replica_read), Collect).await?;
            // TiKV applies `each_limit` per range *and Region*; a range
            // spanning Regions can return more, so cut each range back to its
            // first `each_limit` keys (pairs arrive in key order).
            for pair in pairs {
                let owner = layer_ranges.iter().position(|(s, e)| {
                    let key = pair.key().as_bytes();
                    key >= s.as_slice() && (e.is_empty() || key < e.as_slice())
                });
                if let Some(slot) = owner.map(|k| &mut per_range[layer[k]]) {
                    if (slot.len() as u32) < each_limit {
                        slot.push(pair);
                    }
                }
            }
        }
        Ok(per_range.into_iter().flatten().collect())
    }

    /// TiKV's checksum of `range` (`Crc64_Xor`: the XOR of the CRC-64 of
    /// every key and value, with the pair count and byte total), computed by
    /// the stores, one RPC per Region. Equal data gives equal checksums,
    /// however the Regions split it. In a keyspace, keys are checksummed in
    /// their encoded form, as TiKV stores them.
    pub async fn checksum(&self, range: impl Into<BoundRange>) -> Result<RawChecksum> {
        let (start, end) = self.encode_range(range)?;
        if !end.is_empty() && start == end {
            return Ok(RawChecksum::default());
        }
        let request = new_raw_checksum_request(vec![(start, end)]);
        self.builder(request)
            .retry_multi_region(self.backoff.clone())
            .merge(MergeChecksum)
            .plan()
            .execute()
            .await
    }

    /// Calls the coprocessor plugin `copr_name` of every store that holds
    /// a Region of `ranges`, if the plugin's version meets
    /// `copr_version_req` (semver, e.g. `">=1.0, <2"`; a requirement that
    /// does not parse is [`Error::InvalidSemver`], before any request).
    /// `request_builder` makes the plugin's request for each Region from the
    /// Region and the pieces of the ranges inside it (without the keyspace
    /// prefix). Returns each Region's pieces and the plugin's answer, in
    /// key order. A plugin that is not loaded, or whose version does not
    /// match, answers with an error ([`Error::KvError`]).
    ///
    /// Whether a call reaches the plugin once or more (after a lost answer)
    /// is the plugin's concern, as with any read: the client retries it.
    pub async fn coprocessor(
        &self,
        copr_name: impl Into<String>,
        copr_version_req: impl Into<String>,
        ranges: impl IntoIterator<Item = impl Into<BoundRange>>,
        request_builder: impl Fn(metapb::Region, Vec<Range<Key>>) -> Vec<u8> + Send + Sync + 'static,
    ) -> Result<Vec<(Vec<Range<Key>>, Vec<u8>)>> {
        let copr_version_req = copr_version_req.into();
        semver::VersionReq::parse(&copr_version_req)?;
        let keyspace = self.keyspace;
        let ranges = ranges
            .into_iter()
            .map(|range| range.into().encode_keyspace(keyspace, KeyMode::Raw))
            .collect::<Vec<_>>();
        let request = super::lowering::new_raw_coprocessor_request(
            copr_name.into(),
            copr_version_req,
            ranges.into_iter(),
            move |region, ranges: Vec<Range<Key>>| {
                request_builder(region, ranges.truncate_keyspace(keyspace))
            },
        );
        let answers = self
            .builder(request)
            .preserve_shard()
            .retry_multi_region(self.backoff.clone())
            .post_process_default()
            .plan()
            .execute()
            .await?;
        Ok(answers
            .into_iter()
            .map(|(ranges, data)| (ranges.truncate_keyspace(keyspace), data))
            .collect())
    }

    /// Atomically sets `key` to `new_value` if its current value is
    /// `previous_value` (`None`: the key must not exist). Returns the value
    /// before the call and whether the swap happened.
    ///
    /// Requires atomic mode ([`with_atomic_for_cas`](Self::with_atomic_for_cas)).
    /// Never replayed: when the request may have reached the store but no
    /// answer came back, the result is [`Failure::Undetermined`](crate::Failure::Undetermined).
    pub async fn compare_and_swap(
        &self,
        key: impl Into<Key>,
        previous_value: impl Into<Option<Value>>,
        new_value: impl Into<Value>,
    ) -> Result<(Option<Value>, bool)> {
        if !self.atomic {
            return Err(Error::UnsupportedMode);
        }
        let request = new_cas_request(
            self.encode_key(key),
            new_value.into(),
            previous_value.into(),
            self.cf_name(),
        );
        // Never at-least-once: a replayed swap could apply twice.
        let once = RawClient {
            at_least_once_writes: false,
            ..self.clone()
        };
        once.run(request, None, CollectSingle).await
    }
}

/// The part of `range` after the page that ended at `last` (forward: from
/// just after it; reverse: up to it, exclusive); `None` when nothing can be
/// left (in reverse, the smallest key, the empty one, was read).
fn next_page_range(range: BoundRange, last: &Key, reverse: bool) -> Option<BoundRange> {
    if reverse {
        if last.is_empty() {
            return None;
        }
        Some(BoundRange::new(range.from, Bound::Excluded(last.clone())))
    } else {
        Some(BoundRange::new(Bound::Excluded(last.clone()), range.to))
    }
}

fn check_scan_limit(limit: u32) -> Result<()> {
    if limit > MAX_RAW_KV_SCAN_LIMIT {
        return Err(Error::MaxScanLimitExceeded {
            limit,
            max_limit: MAX_RAW_KV_SCAN_LIMIT,
        });
    }
    Ok(())
}

fn from_proto_pair(pair: kvrpcpb::KvPair) -> KvPair {
    KvPair(Key::from(pair.key), pair.value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pd_endpoints_are_checked_before_connecting() {
        assert!(matches!(
            crate::pd::validate_pd_endpoints(&[])
                .as_ref()
                .err()
                .and_then(|e| e.failure()),
            Some(Failure::InvalidArgument(_))
        ));
        for bad in [
            "",
            "127.0.0.1",
            "127.0.0.1:",
            ":2379",
            "127.0.0.1:port",
            "127.0.0.1:70000",
            "a b:1",
            "http://x/y:1",
        ] {
            let err = crate::pd::validate_pd_endpoints(&[bad.to_owned()]).unwrap_err();
            assert!(err.to_string().contains("host:port"), "{bad}: {err}");
        }
        for good in [
            "127.0.0.1:2379",
            "pd-0.example:2379",
            "http://127.0.0.1:2379",
            "[::1]:2379",
        ] {
            crate::pd::validate_pd_endpoints(&[good.to_owned()]).unwrap();
        }
    }

    #[test]
    fn scan_limit_over_the_maximum_is_rejected() {
        assert!(check_scan_limit(MAX_RAW_KV_SCAN_LIMIT).is_ok());
        let err = check_scan_limit(MAX_RAW_KV_SCAN_LIMIT + 1).unwrap_err();
        assert!(err.to_string().contains("scan in pages"), "{err}");
        assert!(matches!(
            err,
            Error::MaxScanLimitExceeded {
                limit: 10241,
                max_limit: 10240
            }
        ));
    }

    #[test]
    fn overlapping_ranges_split_into_disjoint_layers() {
        let r = |s: &str, e: &str| (s.as_bytes().to_vec(), e.as_bytes().to_vec());
        // Disjoint (even unsorted) ranges: one layer, sorted by start.
        assert_eq!(
            disjoint_layers(&[r("c", "d"), r("a", "b"), r("b", "c")]),
            vec![vec![1, 2, 0]]
        );
        // client-rust's raw example: k1..=k2, k2..=k3, k1..=k3.
        let ranges = [r("k1", "k2\0"), r("k2", "k3\0"), r("k1", "k3\0")];
        assert_eq!(disjoint_layers(&ranges), vec![vec![0], vec![2], vec![1]]);
        // Unbounded ends overlap everything after them; empty ranges vanish.
        assert_eq!(
            disjoint_layers(&[r("a", ""), r("b", "c"), r("x", "x")]),
            vec![vec![0], vec![1]]
        );
        // The same range twice is two layers.
        assert_eq!(
            disjoint_layers(&[r("a", "b"), r("a", "b")]),
            vec![vec![0], vec![1]]
        );
    }
}
