//! The crate's own way through a plan: what its stages and requests offer
//! the retry stage beyond the public traits, so that a request is sent
//! without a box per stage, without a copy of its payload per shard, and on
//! the typed gRPC path.
//!
//! These traits are sealed: they are `pub` only so that public items may
//! name them in bounds, inside a module no user can reach, so nobody outside
//! the crate implements or calls them. The public traits ([`Plan`],
//! [`Shardable`], [`KvRequest`], [`KvClient`](crate::store::KvClient)) keep
//! client-rust's shape; a user's own request runs through the same stages
//! with the defaults below.

use std::future::Future;
use std::time::Duration;

use crate::pd::PdClient;
use crate::region::RegionWithLeader;
use crate::store::{GrpcChannel, KvRpcClient};
use crate::Result;

use super::traits::{KvRequest, Plan, Shardable};

/// A plan stage as the crate runs it.
pub trait Stage: Plan {
    /// Runs the stage, as [`Plan::execute`] does, as a future of its own
    /// type: a chain of stages is one future, not a box per stage.
    fn run(&self) -> impl Future<Output = Result<Self::Result>> + Send + '_;

    /// Runs the stage once, as the retry loop does per attempt: like
    /// [`run`](Self::run), but the stage may lend its request to the RPC
    /// (the typed path moves it to tonic and takes it back).
    fn run_mut(&mut self) -> impl Future<Output = Result<Self::Result>> + Send + '_ {
        self.run()
    }

    /// [`run_mut`](Self::run_mut), its result in a box: the retry stage
    /// hands a result on through several layers, and a response is large
    /// (its Region error field alone takes some 600 bytes), so it moves as
    /// a pointer. A stage whose transport decodes into a box returns that
    /// one; by default `run_mut`'s result is boxed.
    fn run_boxed(&mut self) -> impl Future<Output = Result<Box<Self::Result>>> + Send + '_ {
        async move { self.run_mut().await.map(Box::new) }
    }

    /// Bounds the stage's next RPC by `bound` (see
    /// [`RequestPolicy::rpc_bound`](crate::request::routing::policy::RequestPolicy::rpc_bound)).
    /// Returns true when the stage hands the bound to its store client,
    /// which then keeps the RPC's only timer; false (the default) when the
    /// caller must bound [`run_mut`](Self::run_mut) itself.
    fn set_rpc_bound(&mut self, bound: Option<Duration>) -> bool {
        let _ = bound;
        false
    }
}

/// A stage the retry stage shards: how it is split and rebuilt per shard.
pub trait ShardStage: Stage + Shardable {
    /// The shards [`Shardable::shards`] would return, when the Region cache
    /// answers them all without waiting; `None` sends the retry stage to
    /// `shards`.
    fn cached_shards<PdC: PdClient>(
        &self,
        pd_client: &PdC,
    ) -> Option<Vec<(Self::Shard, RegionWithLeader)>>;

    /// The stage for one shard, built from the whole stage (`self`) and the
    /// shard's payload, moved in, without a copy of the rest of the payload
    /// ([`Shardable::clone_then_apply_shard`]). `whole` is true when the
    /// shard is the whole request (a prewrite may then commit in one
    /// phase).
    fn for_shard(&self, shard: Self::Shard, whole: bool) -> Self;
}

/// A request as the retry stage shards it: a single-key request answers
/// its shard from the Region cache, and a prewrite knows whether its shard
/// is the whole transaction.
pub trait ShardPayload: Shardable + Clone {
    /// See [`ShardStage::cached_shards`]; `None` by default.
    fn cached_shards<PdC: PdClient>(
        &self,
        pd_client: &PdC,
    ) -> Option<Vec<(Self::Shard, RegionWithLeader)>> {
        let _ = pd_client;
        None
    }

    /// The request for one shard; see [`ShardStage::for_shard`]. By
    /// default [`Shardable::clone_then_apply_shard`].
    fn for_shard(&self, shard: Self::Shard, whole: bool) -> Self {
        let _ = whole;
        self.clone_then_apply_shard(shard)
    }
}

/// A request the crate sends on the typed gRPC path: with its own response
/// type, handed to tonic as its encoding (a large request without a copy of
/// its payload) and kept for a retry.
pub trait TypedCall: KvRequest {
    /// A read that tells TiKV how long the client waits for it
    /// (`Context.max_execution_duration_ms`, set per attempt); false for
    /// writes, which never send it.
    const SERVER_DEADLINE: bool = false;

    /// Sends the request on `grpc`. `timeout` is sent as the call's
    /// `grpc-timeout` (and enforced by tonic); `None` when the channel
    /// enforces the client's timeout itself. `None` (the default) when the
    /// request has no typed call; it is then sent through
    /// [`KvClient::dispatch_within`](crate::store::KvClient::dispatch_within).
    fn dispatch_typed<'a>(
        &'a mut self,
        grpc: &'a GrpcChannel,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Option<Result<Self::Response>>> + Send + 'a {
        let _ = (grpc, timeout);
        std::future::ready(None)
    }

    /// Sends the request on `client`'s batched transport within `bound`,
    /// its answer decoded straight as its response type, in a box (see
    /// [`Stage::run_boxed`]). `None` (the
    /// default, and when the client sends unary calls): the request is sent
    /// through [`KvClient::dispatch_within`](crate::store::KvClient::dispatch_within).
    fn dispatch_batched<'a>(
        &'a mut self,
        client: &'a KvRpcClient,
        bound: Option<Duration>,
    ) -> impl Future<Output = Option<Result<Box<Self::Response>>>> + Send + 'a {
        let _ = (client, bound);
        std::future::ready(None)
    }
}
