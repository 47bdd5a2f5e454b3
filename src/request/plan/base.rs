//! The stages that need no routing: [`Dispatch`]
//! sends one request to one store; [`MergeResponse`], [`ProcessResponse`]
//! and [`ExtractError`] shape the results.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::pd::PdClient;
use crate::region::RegionWithLeader;
use crate::store::{KvClient, RegionStore};
use crate::{Error, Result};

use super::stage::{ShardStage, Stage};
use super::traits::{
    strongest_shard_error, HasKeyErrors, HasRegionError, KvRequest, Plan, Shardable,
};

/// Sends a request to the store client set by `apply_store`, and downcasts
/// the answer to the request's response type.
#[derive(Clone)]
pub struct Dispatch<Req: KvRequest> {
    /// The request.
    pub request: Req,
    /// The client of the target store; set by [`Shardable::apply_store`].
    pub kv_client: Option<Arc<dyn KvClient + Send + Sync>>,
    /// The bound of the next RPC; `None` leaves it to the store client's
    /// own timeout.
    pub(crate) rpc_bound: Option<Duration>,
}

impl<Req: KvRequest> Dispatch<Req> {
    /// A dispatch of `request`, not yet targeted at a store.
    pub fn new(request: Req) -> Self {
        Dispatch {
            request,
            kv_client: None,
            rpc_bound: None,
        }
    }
}

impl<Req: KvRequest + std::fmt::Debug> std::fmt::Debug for Dispatch<Req> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dispatch")
            .field("request", &self.request)
            .field("kv_client", &self.kv_client.is_some())
            .finish()
    }
}

#[async_trait]
impl<Req: KvRequest> Plan for Dispatch<Req> {
    type Result = Req::Response;

    fn describe(&self) -> String {
        self.request.describe()
    }

    fn label(&self) -> &'static str {
        self.request.label()
    }

    async fn execute(&self) -> Result<Self::Result> {
        self.run().await
    }
}

impl<Req: KvRequest> Stage for Dispatch<Req> {
    fn run(&self) -> impl Future<Output = Result<Self::Result>> + Send + '_ {
        crate::telemetry::tikv_rpc(
            self.request.label(),
            send(self.kv_client.as_ref(), &self.request, self.rpc_bound),
        )
    }

    fn set_rpc_bound(&mut self, bound: Option<Duration>) -> bool {
        self.rpc_bound = bound;
        true
    }
}

/// Any request, the caller's own included: its shards are looked up, and
/// each shard's request is the request's
/// [`clone_then_apply_shard`](Shardable::clone_then_apply_shard).
impl<Req: KvRequest + Shardable> ShardStage for Dispatch<Req> {
    fn cached_shards<PdC: PdClient>(
        &self,
        _pd_client: &PdC,
    ) -> Option<Vec<(Self::Shard, RegionWithLeader)>> {
        None
    }

    fn for_shard(&self, shard: Self::Shard, _whole: bool) -> Self {
        Dispatch {
            request: self.request.clone_then_apply_shard(shard),
            kv_client: None,
            rpc_bound: self.rpc_bound,
        }
    }
}

/// Sends `request` with `client` (the store chosen by `apply_store`),
/// bounded by `bound` as well as by the client's own timeout, and downcasts
/// the answer to the request's response type.
pub(crate) async fn send<Req: KvRequest>(
    client: Option<&Arc<dyn KvClient + Send + Sync>>,
    request: &Req,
    bound: Option<Duration>,
) -> Result<Req::Response> {
    send_boxed(client, request, bound).await.map(|b| *b)
}

/// [`send`], the response in the box the store client answered it in.
pub(crate) async fn send_boxed<Req: KvRequest>(
    client: Option<&Arc<dyn KvClient + Send + Sync>>,
    request: &Req,
    bound: Option<Duration>,
) -> Result<Box<Req::Response>> {
    let client = client.ok_or_else(|| Error::InternalError {
        message: format!(
            "{} was dispatched before a store was chosen",
            request.label()
        ),
    })?;
    let response = client.dispatch_within(request, bound).await?;
    response
        .downcast::<Req::Response>()
        .map_err(|_| Error::InternalError {
            message: format!(
                "the store client answered {} with a response of another type",
                request.label()
            ),
        })
}

#[async_trait]
impl<Req: KvRequest + Shardable> Shardable for Dispatch<Req> {
    type Shard = Req::Shard;

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        self.request.shards(pd_client).await
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        self.request.apply_shard(shard);
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        self.kv_client = Some(Arc::clone(&store.client));
        self.request.apply_store(store)
    }
}

/// A response together with the shard it answers (see [`PreserveShard`]).
#[derive(Debug, Clone)]
pub struct ResponseWithShard<Resp, Shard>(pub Resp, pub Shard);

impl<Resp: HasRegionError, Shard> HasRegionError for ResponseWithShard<Resp, Shard> {
    fn region_error(&mut self) -> Option<crate::proto::errorpb::Error> {
        self.0.region_error()
    }
}

impl<Resp: HasKeyErrors, Shard> HasKeyErrors for ResponseWithShard<Resp, Shard> {
    fn key_errors(&mut self) -> Option<Vec<Error>> {
        self.0.key_errors()
    }
}

/// Keeps the shard each response answers, for requests whose results must be
/// matched to their piece (scans over several ranges).
#[derive(Clone)]
pub struct PreserveShard<P: Plan + Shardable> {
    /// The inner plan.
    pub inner: P,
    /// The shard last applied.
    pub shard: Option<P::Shard>,
}

impl<P: Plan + Shardable> PreserveShard<P> {
    /// The shard last applied, which the response is paired with.
    fn applied_shard(&self) -> Result<P::Shard> {
        self.shard.clone().ok_or_else(|| Error::InternalError {
            message: "PreserveShard ran without a shard; use it under RetryableMultiRegion"
                .to_owned(),
        })
    }
}

#[async_trait]
impl<P: Plan + Shardable> Plan for PreserveShard<P> {
    type Result = ResponseWithShard<P::Result, P::Shard>;

    async fn execute(&self) -> Result<Self::Result> {
        let shard = self.applied_shard()?;
        let response = self.inner.execute().await?;
        Ok(ResponseWithShard(response, shard))
    }

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn label(&self) -> &'static str {
        self.inner.label()
    }
}

impl<P: Stage + Shardable> Stage for PreserveShard<P> {
    async fn run(&self) -> Result<Self::Result> {
        let shard = self.applied_shard()?;
        let response = self.inner.run().await?;
        Ok(ResponseWithShard(response, shard))
    }

    async fn run_mut(&mut self) -> Result<Self::Result> {
        let shard = self.applied_shard()?;
        let response = self.inner.run_mut().await?;
        Ok(ResponseWithShard(response, shard))
    }

    fn set_rpc_bound(&mut self, bound: Option<Duration>) -> bool {
        self.inner.set_rpc_bound(bound)
    }
}

impl<P: ShardStage + Send + Sync> ShardStage for PreserveShard<P> {
    fn cached_shards<PdC: PdClient>(
        &self,
        pd_client: &PdC,
    ) -> Option<Vec<(Self::Shard, RegionWithLeader)>> {
        self.inner.cached_shards(pd_client)
    }

    fn for_shard(&self, shard: Self::Shard, whole: bool) -> Self {
        PreserveShard {
            shard: Some(shard.clone()),
            inner: self.inner.for_shard(shard, whole),
        }
    }
}

#[async_trait]
impl<P: Plan + Shardable + Send + Sync> Shardable for PreserveShard<P> {
    type Shard = P::Shard;

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        self.inner.shards(pd_client).await
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        self.shard = Some(shard.clone());
        self.inner.apply_shard(shard);
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        self.inner.apply_store(store)
    }
}

/// How many results a merge strategy combines: one per shard.
pub trait Merge<In>: Sized + Clone + Send + Sync + 'static {
    /// The merged result.
    type Out: Send;

    /// Merges the shards' results, in shard order.
    fn merge(&self, input: Vec<Result<In>>) -> Result<Self::Out>;
}

/// Applies a [`Merge`] strategy to a multi-shard plan.
pub struct MergeResponse<P: Plan, In, M: Merge<In>> {
    /// The multi-shard plan.
    pub inner: P,
    /// The strategy.
    pub merge: M,
    /// The per-shard result type.
    pub phantom: PhantomData<fn() -> In>,
}

impl<P: Plan, In, M: Merge<In>> Clone for MergeResponse<P, In, M> {
    fn clone(&self) -> Self {
        MergeResponse {
            inner: self.inner.clone(),
            merge: self.merge.clone(),
            phantom: PhantomData,
        }
    }
}

#[async_trait]
impl<In: Send + 'static, P: Plan<Result = Vec<Result<In>>>, M: Merge<In>> Plan
    for MergeResponse<P, In, M>
{
    type Result = M::Out;

    async fn execute(&self) -> Result<Self::Result> {
        self.merge.merge(self.inner.execute().await?)
    }
}

impl<In: Send + 'static, P: Stage<Result = Vec<Result<In>>>, M: Merge<In>> Stage
    for MergeResponse<P, In, M>
{
    async fn run(&self) -> Result<Self::Result> {
        self.merge.merge(self.inner.run().await?)
    }
}

/// Collects the shards' responses into one value (defined per response
/// type, e.g. all pairs of a batch get).
#[derive(Debug, Clone, Copy, Default)]
pub struct Collect;

/// Expects exactly one shard and returns its response.
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectSingle;

/// Returns every shard's response in shard order, or the strongest error: an
/// undetermined outcome first, else the only error, else all of them.
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectError;

impl<T: Send + 'static> Merge<T> for CollectSingle {
    type Out = T;

    fn merge(&self, mut input: Vec<Result<T>>) -> Result<T> {
        if input.len() != 1 {
            return Err(Error::InternalError {
                message: format!("a single-Region request produced {} results", input.len()),
            });
        }
        input.pop().unwrap_or_else(|| {
            Err(Error::InternalError {
                message: "no result".to_owned(),
            })
        })
    }
}

impl<T: Send + 'static> Merge<T> for CollectError {
    type Out = Vec<T>;

    fn merge(&self, input: Vec<Result<T>>) -> Result<Vec<T>> {
        collect_in_order(input)
    }
}

/// All results in order, or the strongest error.
pub(crate) fn collect_in_order<T>(input: Vec<Result<T>>) -> Result<Vec<T>> {
    let mut oks = Vec::with_capacity(input.len());
    let mut errors = Vec::new();
    for r in input {
        match r {
            Ok(v) => oks.push(v),
            Err(e) => errors.push(e),
        }
    }
    if errors.is_empty() {
        Ok(oks)
    } else {
        Err(strongest_shard_error(errors))
    }
}

/// Turns a plan's result into what the caller wants.
pub trait Process<In>: Sized + Clone + Send + Sync + 'static {
    /// The processed result.
    type Out: Send;

    /// Processes the result.
    fn process(&self, input: Result<In>) -> Result<Self::Out>;
}

/// Applies a [`Process`] step to a plan.
#[derive(Clone)]
pub struct ProcessResponse<P: Plan, Pr: Process<P::Result>> {
    /// The plan.
    pub inner: P,
    /// The processor.
    pub processor: Pr,
}

#[async_trait]
impl<P: Plan, Pr: Process<P::Result>> Plan for ProcessResponse<P, Pr> {
    type Result = Pr::Out;

    async fn execute(&self) -> Result<Self::Result> {
        self.processor.process(self.inner.execute().await)
    }
}

impl<P: Stage, Pr: Process<P::Result>> Stage for ProcessResponse<P, Pr> {
    async fn run(&self) -> Result<Self::Result> {
        self.processor.process(self.inner.run().await)
    }
}

/// The processing each response type has by default (a raw get's value, a
/// CAS's previous value and outcome, ...).
#[derive(Debug, Clone, Copy, Default)]
pub struct DefaultProcessor;

/// Turns key errors carried inside a plan's result into an `Err`.
#[derive(Clone)]
pub struct ExtractError<P: Plan> {
    /// The plan.
    pub inner: P,
}

#[async_trait]
impl<P: Plan> Plan for ExtractError<P>
where
    P::Result: HasKeyErrors,
{
    type Result = P::Result;

    async fn execute(&self) -> Result<Self::Result> {
        let mut result = self.inner.execute().await?;
        match result.key_errors() {
            Some(errors) => Err(strongest_shard_error(errors)),
            None => Ok(result),
        }
    }
}

impl<P: Stage> Stage for ExtractError<P>
where
    P::Result: HasKeyErrors,
{
    async fn run(&self) -> Result<Self::Result> {
        let mut result = self.inner.run().await?;
        match result.key_errors() {
            Some(errors) => Err(strongest_shard_error(errors)),
            None => Ok(result),
        }
    }
}
