//! [`SyncRawClient`]: [`RawClient`]'s methods, each blocking its thread.

use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;

use futures::{Stream, StreamExt};

use super::runtime::OwnedRuntime;
use crate::proto::metapb;
use crate::raw::RawChecksum;
use crate::region::StoreId;
use crate::request::{Keyspace, RoutingStats};
use crate::{
    Backoff, BoundRange, ColumnFamily, Config, Key, KvPair, RawClient, ReplicaRead, Result, Value,
};

/// A raw key-value client for programs without an async runtime: every
/// method of [`RawClient`], under the same name, with the same arguments,
/// results and errors, blocking the calling thread until it is done.
///
/// It owns a multi-threaded Tokio runtime, shared by its clones, on which
/// the requests run; dropping the last clone shuts it down without waiting
/// for requests still in flight. Called on a thread inside a Tokio runtime,
/// every method fails with
/// [`Failure::NestedRuntime`](crate::Failure::NestedRuntime) (inside [`Error::GrpcAPI`](crate::Error::GrpcAPI), code `FailedPrecondition`)
/// and sends nothing: use [`RawClient`] there.
///
/// ```no_run
/// # fn run() -> tikv_plan::Result<()> {
/// use tikv_plan::SyncRawClient;
/// let client = SyncRawClient::new(vec!["127.0.0.1:2379"])?;
/// client.put("key".to_owned(), "value".to_owned())?;
/// assert_eq!(client.get("key".to_owned())?, Some(b"value".to_vec()));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct SyncRawClient {
    client: RawClient,
    runtime: Arc<OwnedRuntime>,
}

impl SyncRawClient {
    /// Connects to the cluster whose PD members are `pd_endpoints`, with the
    /// default configuration ([`RawClient::new`]).
    pub fn new<S: Into<String>>(pd_endpoints: Vec<S>) -> Result<Self> {
        Self::connect("SyncRawClient::new", pd_endpoints, Config::default())
    }

    /// Connects with `config` ([`RawClient::new_with_config`]).
    pub fn new_with_config<S: Into<String>>(pd_endpoints: Vec<S>, config: Config) -> Result<Self> {
        Self::connect("SyncRawClient::new_with_config", pd_endpoints, config)
    }

    fn connect<S: Into<String>>(
        call: &'static str,
        pd_endpoints: Vec<S>,
        config: Config,
    ) -> Result<Self> {
        let runtime = OwnedRuntime::start(call)?;
        let client = runtime.block_on(call, RawClient::new_with_config(pd_endpoints, config))?;
        Ok(SyncRawClient { client, runtime })
    }

    /// The async client this one drives. Use it (it is cheap to clone) in
    /// async code; its futures need a Tokio runtime of their own.
    pub fn async_client(&self) -> &RawClient {
        &self.client
    }

    fn derive(&self, client: RawClient) -> Self {
        SyncRawClient {
            client,
            runtime: Arc::clone(&self.runtime),
        }
    }

    /// A clone that works in `keyspace` ([`RawClient::with_keyspace`]).
    pub fn with_keyspace(&self, keyspace: Keyspace) -> Self {
        self.derive(self.client.with_keyspace(keyspace))
    }

    /// The keyspace requests use ([`RawClient::keyspace`]).
    pub fn keyspace(&self) -> Keyspace {
        self.client.keyspace()
    }

    /// A client that reads and writes column family `cf`
    /// ([`RawClient::with_cf`]).
    pub fn with_cf(&self, cf: ColumnFamily) -> Self {
        self.derive(self.client.with_cf(cf))
    }

    /// **beyond** A client whose reads may be served by a replica
    /// ([`RawClient::with_replica_read`]).
    pub fn with_replica_read(&self, replica: ReplicaRead) -> Self {
        self.derive(self.client.with_replica_read(replica))
    }

    /// **beyond** A client whose requests carry `tags`
    /// ([`RawClient::with_request_tags`]).
    pub fn with_request_tags(&self, tags: crate::RequestTags) -> Self {
        self.derive(self.client.with_request_tags(tags))
    }

    /// A client that retries with `backoff` ([`RawClient::with_backoff`]).
    pub fn with_backoff(&self, backoff: Backoff) -> Self {
        self.derive(self.client.with_backoff(backoff))
    }

    /// A client in atomic mode, for compare-and-swap
    /// ([`RawClient::with_atomic_for_cas`]).
    pub fn with_atomic_for_cas(&self) -> Self {
        self.derive(self.client.with_atomic_for_cas())
    }

    /// **beyond** Each store's last reported slow score, by store id
    /// ([`RawClient::store_slow_scores`]).
    pub fn store_slow_scores(&self) -> Vec<(StoreId, u32)> {
        self.client.store_slow_scores()
    }

    /// What routing has done so far ([`RawClient::routing_stats`]).
    pub fn routing_stats(&self) -> RoutingStats {
        self.client.routing_stats()
    }

    /// The value of `key` ([`RawClient::get`]).
    pub fn get(&self, key: impl Into<Key>) -> Result<Option<Value>> {
        self.runtime
            .block_on("SyncRawClient::get", self.client.get(key))
    }

    /// The pairs of the keys that exist ([`RawClient::batch_get`]).
    pub fn batch_get(&self, keys: impl IntoIterator<Item = impl Into<Key>>) -> Result<Vec<KvPair>> {
        self.runtime
            .block_on("SyncRawClient::batch_get", self.client.batch_get(keys))
    }

    /// The seconds `key` has left to live ([`RawClient::get_key_ttl_secs`]).
    pub fn get_key_ttl_secs(&self, key: impl Into<Key>) -> Result<Option<u64>> {
        self.runtime.block_on(
            "SyncRawClient::get_key_ttl_secs",
            self.client.get_key_ttl_secs(key),
        )
    }

    /// Writes `value` under `key` ([`RawClient::put`]).
    pub fn put(&self, key: impl Into<Key>, value: impl Into<Value>) -> Result<()> {
        self.runtime
            .block_on("SyncRawClient::put", self.client.put(key, value))
    }

    /// Writes `value` under `key` for `ttl_secs` seconds
    /// ([`RawClient::put_with_ttl`]).
    pub fn put_with_ttl(
        &self,
        key: impl Into<Key>,
        value: impl Into<Value>,
        ttl_secs: u64,
    ) -> Result<()> {
        self.runtime.block_on(
            "SyncRawClient::put_with_ttl",
            self.client.put_with_ttl(key, value, ttl_secs),
        )
    }

    /// Writes every pair ([`RawClient::batch_put`]).
    pub fn batch_put(&self, pairs: impl IntoIterator<Item = impl Into<KvPair>>) -> Result<()> {
        self.runtime
            .block_on("SyncRawClient::batch_put", self.client.batch_put(pairs))
    }

    /// Writes every pair with a time to live
    /// ([`RawClient::batch_put_with_ttl`]).
    pub fn batch_put_with_ttl(
        &self,
        pairs: impl IntoIterator<Item = impl Into<KvPair>>,
        ttls: impl IntoIterator<Item = u64>,
    ) -> Result<()> {
        self.runtime.block_on(
            "SyncRawClient::batch_put_with_ttl",
            self.client.batch_put_with_ttl(pairs, ttls),
        )
    }

    /// Deletes `key` ([`RawClient::delete`]).
    pub fn delete(&self, key: impl Into<Key>) -> Result<()> {
        self.runtime
            .block_on("SyncRawClient::delete", self.client.delete(key))
    }

    /// Deletes every key of `keys` ([`RawClient::batch_delete`]).
    pub fn batch_delete(&self, keys: impl IntoIterator<Item = impl Into<Key>>) -> Result<()> {
        self.runtime.block_on(
            "SyncRawClient::batch_delete",
            self.client.batch_delete(keys),
        )
    }

    /// Deletes every key of `range` ([`RawClient::delete_range`]).
    pub fn delete_range(&self, range: impl Into<BoundRange>) -> Result<()> {
        self.runtime.block_on(
            "SyncRawClient::delete_range",
            self.client.delete_range(range),
        )
    }

    /// Up to `limit` pairs of `range`, ascending ([`RawClient::scan`]).
    pub fn scan(&self, range: impl Into<BoundRange>, limit: u32) -> Result<Vec<KvPair>> {
        self.runtime
            .block_on("SyncRawClient::scan", self.client.scan(range, limit))
    }

    /// Up to `limit` pairs of `range`, descending
    /// ([`RawClient::scan_reverse`]).
    pub fn scan_reverse(&self, range: impl Into<BoundRange>, limit: u32) -> Result<Vec<KvPair>> {
        self.runtime.block_on(
            "SyncRawClient::scan_reverse",
            self.client.scan_reverse(range, limit),
        )
    }

    /// Up to `limit` keys of `range`, ascending ([`RawClient::scan_keys`]).
    pub fn scan_keys(&self, range: impl Into<BoundRange>, limit: u32) -> Result<Vec<Key>> {
        self.runtime.block_on(
            "SyncRawClient::scan_keys",
            self.client.scan_keys(range, limit),
        )
    }

    /// Up to `limit` keys of `range`, descending
    /// ([`RawClient::scan_keys_reverse`]).
    pub fn scan_keys_reverse(&self, range: impl Into<BoundRange>, limit: u32) -> Result<Vec<Key>> {
        self.runtime.block_on(
            "SyncRawClient::scan_keys_reverse",
            self.client.scan_keys_reverse(range, limit),
        )
    }

    /// Every pair of `range`, ascending, read a page of `page_size` pairs
    /// at a time as the iterator is advanced ([`RawClient::scan_stream`]).
    pub fn scan_stream(&self, range: impl Into<BoundRange>, page_size: u32) -> SyncScanIter {
        SyncScanIter::new(
            "SyncRawClient::scan_stream",
            Box::pin(self.client.scan_stream(range, page_size)),
            Arc::clone(&self.runtime),
        )
    }

    /// Every pair of `range`, descending, a page at a time
    /// ([`RawClient::scan_stream_reverse`]).
    pub fn scan_stream_reverse(
        &self,
        range: impl Into<BoundRange>,
        page_size: u32,
    ) -> SyncScanIter {
        SyncScanIter::new(
            "SyncRawClient::scan_stream_reverse",
            Box::pin(self.client.scan_stream_reverse(range, page_size)),
            Arc::clone(&self.runtime),
        )
    }

    /// Up to `each_limit` pairs from each range ([`RawClient::batch_scan`]).
    pub fn batch_scan(
        &self,
        ranges: impl IntoIterator<Item = impl Into<BoundRange>>,
        each_limit: u32,
    ) -> Result<Vec<KvPair>> {
        self.runtime.block_on(
            "SyncRawClient::batch_scan",
            self.client.batch_scan(ranges, each_limit),
        )
    }

    /// Up to `each_limit` keys from each range
    /// ([`RawClient::batch_scan_keys`]).
    pub fn batch_scan_keys(
        &self,
        ranges: impl IntoIterator<Item = impl Into<BoundRange>>,
        each_limit: u32,
    ) -> Result<Vec<Key>> {
        self.runtime.block_on(
            "SyncRawClient::batch_scan_keys",
            self.client.batch_scan_keys(ranges, each_limit),
        )
    }

    /// TiKV's checksum of `range` ([`RawClient::checksum`]).
    pub fn checksum(&self, range: impl Into<BoundRange>) -> Result<RawChecksum> {
        self.runtime
            .block_on("SyncRawClient::checksum", self.client.checksum(range))
    }

    /// Calls a coprocessor plugin on the stores of `ranges`
    /// ([`RawClient::coprocessor`]). `request_builder` runs on the client's
    /// runtime, where this client's own methods cannot be called.
    // The async method's result type, to the letter (the lint skips
    // `async fn`s).
    #[allow(clippy::type_complexity)]
    pub fn coprocessor(
        &self,
        copr_name: impl Into<String>,
        copr_version_req: impl Into<String>,
        ranges: impl IntoIterator<Item = impl Into<BoundRange>>,
        request_builder: impl Fn(metapb::Region, Vec<Range<Key>>) -> Vec<u8> + Send + Sync + 'static,
    ) -> Result<Vec<(Vec<Range<Key>>, Vec<u8>)>> {
        self.runtime.block_on(
            "SyncRawClient::coprocessor",
            self.client
                .coprocessor(copr_name, copr_version_req, ranges, request_builder),
        )
    }

    /// Sets `key` to `new_value` if it holds `previous_value`
    /// ([`RawClient::compare_and_swap`]; atomic mode only).
    pub fn compare_and_swap(
        &self,
        key: impl Into<Key>,
        previous_value: impl Into<Option<Value>>,
        new_value: impl Into<Value>,
    ) -> Result<(Option<Value>, bool)> {
        self.runtime.block_on(
            "SyncRawClient::compare_and_swap",
            self.client.compare_and_swap(key, previous_value, new_value),
        )
    }
}

/// The pairs of a blocking scan stream ([`SyncRawClient::scan_stream`]),
/// read a page at a time as the iterator is advanced. It ends after the
/// first error; called inside a Tokio runtime, it yields
/// [`Failure::NestedRuntime`](crate::Failure::NestedRuntime) once and
/// ends.
pub struct SyncScanIter {
    call: &'static str,
    stream: Pin<Box<dyn Stream<Item = Result<KvPair>> + Send>>,
    runtime: Arc<OwnedRuntime>,
    done: bool,
}

impl SyncScanIter {
    fn new(
        call: &'static str,
        stream: Pin<Box<dyn Stream<Item = Result<KvPair>> + Send>>,
        runtime: Arc<OwnedRuntime>,
    ) -> Self {
        SyncScanIter {
            call,
            stream,
            runtime,
            done: false,
        }
    }
}

impl Iterator for SyncScanIter {
    type Item = Result<KvPair>;

    fn next(&mut self) -> Option<Result<KvPair>> {
        if self.done {
            return None;
        }
        let stream = &mut self.stream;
        let next = self
            .runtime
            .block_on(self.call, async { Ok(stream.next().await) });
        let item = match next {
            Ok(item) => item,
            Err(refused) => Some(Err(refused)),
        };
        self.done = !matches!(item, Some(Ok(_)));
        item
    }
}

impl std::fmt::Debug for SyncScanIter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SyncScanIter")
            .field("call", &self.call)
            .field("done", &self.done)
            .finish()
    }
}
