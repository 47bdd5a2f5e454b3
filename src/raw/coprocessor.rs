//! TiKV's raw coprocessor (`RawCoprocessor`): a call to a plugin loaded in
//! each store, by name and a semver requirement on its version, over key
//! ranges. The plugin's request is built per Region, from the Region and
//! the pieces of the ranges inside it.

use std::any::Any;
use std::ops::Range;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel;

use crate::pd::PdClient;
use crate::proto::kvrpcpb;
use crate::proto::metapb;
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::region::RegionWithLeader;
use crate::request::{DefaultProcessor, KvRequest, Process, ResponseWithShard, Shardable};
use crate::store::{GrpcChannel, RegionStore, Request};
use crate::{Key, Result};

/// Builds a plugin request from a Region and the pieces of the ranges in it.
pub(crate) type CoprocessorDataBuilder =
    Arc<dyn Fn(metapb::Region, Vec<Range<Key>>) -> Vec<u8> + Send + Sync>;

/// A `RawCoprocessor` request whose plugin data is built for each Region
/// when the request is targeted at it (see
/// [`new_raw_coprocessor_request`](crate::raw_lowering::new_raw_coprocessor_request)).
/// To the transport it is the wire request itself.
#[derive(Clone)]
pub struct RawCoprocessorRequest {
    pub(crate) inner: kvrpcpb::RawCoprocessorRequest,
    pub(crate) data_builder: CoprocessorDataBuilder,
}

impl std::fmt::Debug for RawCoprocessorRequest {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RawCoprocessorRequest")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl Request for RawCoprocessorRequest {
    async fn dispatch(
        &self,
        client: &TikvClient<Channel>,
        timeout: Duration,
    ) -> Result<Box<dyn Any + Send>> {
        self.inner.dispatch(client, timeout).await
    }

    fn label(&self) -> &'static str {
        self.inner.label()
    }

    /// The wire request: mocks and the batched transport see it as such.
    fn as_any(&self) -> &dyn Any {
        self.inner.as_any()
    }

    fn context(&self) -> Option<&kvrpcpb::Context> {
        self.inner.context.as_ref()
    }

    fn set_context(&mut self, context: kvrpcpb::Context) {
        self.inner.context = Some(context);
    }

    fn context_mut(&mut self) -> Option<&mut kvrpcpb::Context> {
        self.inner.context.as_mut()
    }
}

impl KvRequest for RawCoprocessorRequest {
    type Response = kvrpcpb::RawCoprocessorResponse;

    fn describe(&self) -> String {
        format!(
            "raw_coprocessor {} {:?} over {} ranges",
            self.inner.copr_name,
            self.inner.copr_version_req,
            self.inner.ranges.len()
        )
    }
}

impl crate::request::TypedCall for RawCoprocessorRequest {
    fn dispatch_typed<'a>(
        &'a mut self,
        grpc: &'a GrpcChannel,
        timeout: Option<Duration>,
    ) -> impl std::future::Future<Output = Option<Result<Self::Response>>> + Send + 'a {
        crate::store::send_typed(&self.inner, grpc, timeout)
    }
}

#[async_trait]
impl Shardable for RawCoprocessorRequest {
    type Shard = Vec<kvrpcpb::KeyRange>;

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        crate::request::plan::shard::key_range_shards(pd_client, &self.inner.ranges).await
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        self.inner.ranges = shard;
    }

    /// Built without the ranges and data: only the shard's own are copied.
    fn clone_then_apply_shard(&self, shard: Self::Shard) -> Self {
        let mut request = RawCoprocessorRequest {
            inner: kvrpcpb::RawCoprocessorRequest {
                ranges: Vec::new(),
                data: Vec::new(),
                ..self.inner.clone()
            },
            data_builder: Arc::clone(&self.data_builder),
        };
        request.apply_shard(shard);
        request
    }

    /// Targets the Region's peer and builds the plugin's data for the
    /// Region and its pieces of the ranges.
    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        crate::request::set_context_for_store(&mut self.inner, store);
        let ranges = self.inner.ranges.iter().map(key_range).collect();
        self.inner.data = (self.data_builder)(store.region_with_leader.region.clone(), ranges);
        Ok(())
    }
}

impl crate::request::ShardPayload for RawCoprocessorRequest {}

/// A wire range as a key range (an empty end: the end of the key space).
pub(crate) fn key_range(range: &kvrpcpb::KeyRange) -> Range<Key> {
    Key::from(range.start_key.clone())..Key::from(range.end_key.clone())
}

/// Each Region's coprocessor answer with the ranges it was asked about, in
/// Region order (client-rust's processor for `RawCoprocessor`, after
/// `preserve_shard` and `retry_multi_region`); a Region's failure or its
/// plugin's error fails the call.
impl
    Process<Vec<Result<ResponseWithShard<kvrpcpb::RawCoprocessorResponse, Vec<kvrpcpb::KeyRange>>>>>
    for DefaultProcessor
{
    type Out = Vec<(Vec<Range<Key>>, Vec<u8>)>;

    fn process(
        &self,
        input: Result<
            Vec<Result<ResponseWithShard<kvrpcpb::RawCoprocessorResponse, Vec<kvrpcpb::KeyRange>>>>,
        >,
    ) -> Result<Self::Out> {
        crate::request::collect_in_order(input?)?
            .into_iter()
            .map(|ResponseWithShard(response, ranges)| {
                let response = crate::request::no_key_errors(response)?;
                Ok((ranges.iter().map(key_range).collect(), response.data))
            })
            .collect()
    }
}
