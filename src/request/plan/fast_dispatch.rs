//! [`FastDispatch`]: the [`Dispatch`] stage of the
//! crate's own requests. It does what `Dispatch` does, and on top sends
//! the request on the typed gRPC path when the store client offers one,
//! answers a single key's shard from the Region cache, and tells a
//! prewrite whether its shard is the whole transaction.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::pd::PdClient;
use crate::region::RegionWithLeader;
use crate::store::RegionStore;
use crate::{Error, Failure, Result};

use super::base::{send_boxed, Dispatch};
use super::stage::{ShardPayload, ShardStage, Stage, TypedCall};
use super::traits::{Plan, Shardable};

/// Sends one of the crate's own requests to the store client set by
/// `apply_store`: a [`Dispatch`] (whose state, sharding and sending it
/// uses) that takes the typed path when it can, fits a lock request's
/// server-side wait into each attempt's bound, and marks every attempt
/// after the first as a retry (`Context.is_retry_request`, which TiKV reads
/// to check a re-sent pessimistic prewrite against newer writes).
#[derive(Clone)]
pub(crate) struct FastDispatch<Req: TypedCall>(Dispatch<Req>, Sent);

/// Whether a dispatch has sent its request before, and whether a read
/// leaves its deadline out (`Config::server_deadlines` off).
#[derive(Clone, Copy, Default)]
pub(crate) struct Sent(bool, bool);

impl<Req: TypedCall> FastDispatch<Req> {
    /// A dispatch of `request`, not yet targeted at a store.
    pub(crate) fn new(request: Req) -> Self {
        FastDispatch(Dispatch::new(request), Sent::default())
    }

    /// The request, to change before the plan runs (its tags).
    pub(crate) fn request_mut(&mut self) -> &mut Req {
        &mut self.0.request
    }

    /// Leaves a read's deadline out of its context (`Config::server_deadlines`
    /// off: client-rust's wire).
    pub(crate) fn without_server_deadline(&mut self) {
        self.1 .1 = true;
    }

    /// The request and whether a read leaves its deadline out (tests).
    #[cfg(test)]
    pub(crate) fn parts(&self) -> (&Req, bool) {
        (&self.0.request, self.1 .1)
    }

    /// A dispatch of `request` aimed at `client` (tests that send to a
    /// store directly).
    #[cfg(test)]
    pub(crate) fn with_client(
        request: Req,
        client: Arc<dyn crate::store::KvClient + Send + Sync>,
    ) -> Self {
        let mut dispatch = Dispatch::new(request);
        dispatch.kv_client = Some(client);
        FastDispatch(dispatch, Sent::default())
    }

    /// Sends the request: on the typed path when the store client offers
    /// one (the response comes back with its own type, and the request is
    /// encoded once, straight into the HTTP body of the call), else as
    /// [`Dispatch`] does, through the client's `dispatch_within`. The
    /// response comes in a box (see [`Stage::run_boxed`]).
    async fn send_mut(&mut self) -> Result<Box<Req::Response>> {
        let Dispatch {
            request,
            kv_client,
            rpc_bound,
        } = &mut self.0;
        // A lock request's wait on the server fits in this attempt's bound.
        crate::store::fit_server_wait(request, *rpc_bound);
        let typed = kv_client.as_deref().and_then(crate::store::typed_channel);
        // A read tells TiKV how long the client waits for it, so TiKV
        // drops it once the client has given up (`read_deadline`).
        if Req::SERVER_DEADLINE && !self.1 .1 {
            read_deadline(request, *rpc_bound, typed.as_ref().map(|t| t.timeout));
        }
        if std::mem::replace(&mut self.1 .0, true) {
            if let Some(context) = request.context_mut() {
                context.is_retry_request = true;
            }
        }
        if let Some(typed) = typed {
            // One timer: the smaller of the client's timeout and the
            // plan's bound; sent as `grpc-timeout` unless it is the
            // client's own and the channel keeps that one already.
            let (timeout, bounded) = crate::store::call_timeout(*rpc_bound, typed.timeout);
            let header = (bounded || !typed.enforces_timeout).then_some(timeout);
            let label = request.label();
            // Pinned in place: awaited as a temporary, the call's future
            // would take its room twice in this one.
            let call = std::pin::pin!(request.dispatch_typed(typed.grpc, header));
            // tonic's timer starts once the channel is ready: a channel
            // that reconnects first (its connection lost) would add its
            // connect wait. This timer covers the whole call, a moment
            // after tonic's, so an ordinary timeout is still tonic's.
            match crate::store::with_backstop(timeout, call).await {
                Ok(Some(result)) => {
                    return crate::store::timeout_as_error(result, bounded, label, timeout)
                        .map(Box::new)
                }
                Ok(None) => {}
                Err(_) => {
                    return Err(Error::from(Failure::Timeout {
                        what: format!("the {label} request"),
                        after: timeout,
                    }))
                }
            }
        }
        if let Some(client) = kv_client.as_deref().and_then(crate::store::batched_client) {
            // The batched transport, typed: the request encoded straight
            // from its type, its answer decoded straight as its response
            // type, no boxed future or response. Pinned in place, as above.
            let call = std::pin::pin!(request.dispatch_batched(client, *rpc_bound));
            if let Some(result) = call.await {
                return result;
            }
        }
        send_boxed(kv_client.as_ref(), request, *rpc_bound).await
    }
}

/// Sets a read's `Context.max_execution_duration_ms` to what this attempt
/// may still take: the smaller of the plan's bound (the RPC timeout, or
/// what is left of the call's deadline) and the store client's own timeout
/// (`own`); nothing when neither is known. Reads only: TiKV checks a read's
/// deadline before it reads and answers `ServerIsBusy` ("deadline is
/// exceeded") once it has passed, which leaves nothing undone; writes keep
/// TiKV's default (no limit sent), as client-rust sends.
fn read_deadline<Req: TypedCall>(
    request: &mut Req,
    bound: Option<Duration>,
    own: Option<Duration>,
) {
    let left = match (bound, own) {
        (Some(bound), Some(own)) => bound.min(own),
        (Some(left), None) | (None, Some(left)) => left,
        (None, None) => return,
    };
    if let Some(context) = request.context_mut() {
        context.max_execution_duration_ms = crate::config::server_deadline_ms(left);
    }
}

// The traits below forward to the `Dispatch` inside, but for `run_mut`
// (the typed path) and `for_shard` (the request's own way to shard).

#[async_trait]
impl<Req: TypedCall> Plan for FastDispatch<Req> {
    type Result = Req::Response;

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn label(&self) -> &'static str {
        self.0.label()
    }

    async fn execute(&self) -> Result<Self::Result> {
        self.0.run().await
    }
}

impl<Req: TypedCall> Stage for FastDispatch<Req> {
    fn run(&self) -> impl Future<Output = Result<Self::Result>> + Send + '_ {
        self.0.run()
    }

    fn run_mut(&mut self) -> impl Future<Output = Result<Self::Result>> + Send + '_ {
        let label = self.0.request.label();
        crate::telemetry::tikv_rpc(label, async move { self.send_mut().await.map(|b| *b) })
    }

    fn run_boxed(&mut self) -> impl Future<Output = Result<Box<Self::Result>>> + Send + '_ {
        crate::telemetry::tikv_rpc(self.0.request.label(), self.send_mut())
    }

    fn set_rpc_bound(&mut self, bound: Option<Duration>) -> bool {
        self.0.set_rpc_bound(bound)
    }
}

impl<Req: TypedCall + ShardPayload> ShardStage for FastDispatch<Req> {
    fn cached_shards<PdC: PdClient>(
        &self,
        pd_client: &PdC,
    ) -> Option<Vec<(Self::Shard, RegionWithLeader)>> {
        ShardPayload::cached_shards(&self.0.request, pd_client)
    }

    fn for_shard(&self, shard: Self::Shard, whole: bool) -> Self {
        let mut dispatch = Dispatch::new(ShardPayload::for_shard(&self.0.request, shard, whole));
        dispatch.rpc_bound = self.0.rpc_bound;
        FastDispatch(dispatch, Sent(false, self.1 .1))
    }
}

#[async_trait]
impl<Req: TypedCall + Shardable> Shardable for FastDispatch<Req> {
    type Shard = Req::Shard;

    async fn shards<PdC: PdClient>(
        &self,
        pd_client: &Arc<PdC>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        self.0.shards(pd_client).await
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        self.0.apply_shard(shard);
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        self.0.apply_store(store)
    }
}
