//! [`PlanBuilder`]: composes plan stages in client-rust's vocabulary.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::store::RegionStore;

use super::all_stores::{RetryableAllStores, StoreRequest};
use super::base::{
    DefaultProcessor, Dispatch, ExtractError, Merge, MergeResponse, PreserveShard, Process,
    ProcessResponse,
};
use super::fast_dispatch::FastDispatch;
use super::keyspace::Keyspace;
use super::resolve_lock::{HasLocks, LiveLockWait, LockResolve, ResolveLock};
use super::retry::RetryableMultiRegion;
use super::stage::{ShardPayload, ShardStage, TypedCall};
use super::traits::{HasKeyErrors, HasRegionError, KvRequest, Plan, Shardable};
use crate::request::routing::policy::RequestPolicy;
use crate::request::routing::state::RoutingState;
use crate::Result;

/// Builds a request plan: dispatch, leader-first retries with voter fallback
/// per Region, merging, processing.
///
/// ```
/// # #[cfg(feature = "mock")]
/// # async fn example() -> tikv_plan::Result<()> {
/// use std::sync::Arc;
/// use tikv_plan::mock::{self, MockPdClient};
/// use tikv_plan::proto::kvrpcpb;
/// use tikv_plan::raw_lowering::new_raw_get_request;
/// use tikv_plan::request::{CollectSingle, Keyspace, Plan, PlanBuilder, RoutingState};
/// use tikv_plan::{Backoff, Config};
///
/// // One Region led by peer 11 on store 1, with voters on stores 2 and 3.
/// let pd = Arc::new(MockPdClient::new(vec![mock::region(
///     1, b"", b"", &[mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)], Some(11),
/// )]));
/// pd.set_dispatch_hook(|_peer, _request| {
///     Ok(Box::new(kvrpcpb::RawGetResponse { value: b"v".to_vec(), ..Default::default() }))
/// });
/// let routing = Arc::new(RoutingState::new(&Config::default()));
///
/// let request = new_raw_get_request("k".into(), None);
/// let plan = PlanBuilder::new(pd.clone(), Keyspace::Disable, request)
///     .routing(routing)
///     .retry_multi_region(Backoff::no_jitter_backoff(2, 500, 10))
///     .merge(CollectSingle)
///     .post_process_default()
///     .plan();
/// assert_eq!(plan.execute().await?, Some(b"v".to_vec()));
/// # Ok(())
/// # }
/// # #[cfg(feature = "mock")]
/// # tokio::runtime::Runtime::new().unwrap().block_on(example()).unwrap();
/// ```
pub struct PlanBuilder<PdC: PdClient, P: Plan> {
    pd_client: Arc<PdC>,
    plan: P,
    routing: Option<Arc<RoutingState>>,
    /// The request's policy as the builder's steps set it; the routing
    /// state's defaults fill what is left unset when the retry stage is
    /// built.
    policy: RequestPolicy,
    preserve_region_results: bool,
}

impl<PdC: PdClient, Req: KvRequest> PlanBuilder<PdC, Dispatch<Req>> {
    /// Starts a plan for `request` in `keyspace` (client-rust's signature):
    /// the request's context gets the keyspace's API version and id; its keys
    /// must already be encoded ([`EncodeKeyspace`](crate::request::EncodeKeyspace)).
    /// A request whose replay is unsafe (see
    /// [`KvRequest::terminal_on_dispatch_error`]) starts with
    /// `terminal_on_dispatch_error` and `terminal_on_undetermined` set.
    pub fn new(pd_client: Arc<PdC>, keyspace: Keyspace, mut request: Req) -> Self {
        in_keyspace(keyspace, &mut request);
        let policy = RequestPolicy::for_request(request.terminal_on_dispatch_error());
        PlanBuilder::start(pd_client, Dispatch::new(request), policy)
    }
}

impl<PdC: PdClient, Req: TypedCall> PlanBuilder<PdC, FastDispatch<Req>> {
    /// [`new`](PlanBuilder::new) for the crate's own requests: the plan
    /// sends the request on the typed gRPC path when it can, and shards it
    /// without copying its payload.
    pub(crate) fn fast(pd_client: Arc<PdC>, keyspace: Keyspace, mut request: Req) -> Self {
        in_keyspace(keyspace, &mut request);
        let policy = RequestPolicy::for_request(request.terminal_on_dispatch_error());
        PlanBuilder::start(pd_client, FastDispatch::new(request), policy)
    }
}

impl<PdC: PdClient, Req: KvRequest> PlanBuilder<PdC, Dispatch<Req>> {
    /// **beyond** Tags the request (resource group, request source,
    /// transaction source, resource group tag; [`RequestTags`](crate::RequestTags)):
    /// the set ones replace the context's, the unset ones leave it as it
    /// is. Every attempt and shard carries them.
    pub fn request_tags(mut self, tags: &crate::RequestTags) -> Self {
        tag_request(&tags.wire(), &mut self.plan.request);
        self
    }
}

impl<PdC: PdClient, Req: TypedCall> PlanBuilder<PdC, FastDispatch<Req>> {
    /// [`request_tags`](PlanBuilder::request_tags) for the crate's own
    /// requests, with the tags' context fields built once per client or
    /// transaction.
    pub(crate) fn tagged(mut self, tags: &crate::config::WireTags) -> Self {
        if tags.no_server_deadline {
            self.plan.without_server_deadline();
        }
        tag_request(tags, self.plan.request_mut());
        self
    }
}

/// What a client's call sets on its plan (the raw client's calls), for
/// [`call_plan`].
pub(crate) struct CallSettings<'a> {
    /// The client-wide routing state.
    pub(crate) routing: &'a Arc<RoutingState>,
    /// The tags every request of the client carries.
    pub(crate) tags: &'a crate::config::WireTags,
    /// `Config::at_least_once_writes`.
    pub(crate) at_least_once: bool,
    /// A read's replica choice; `None` for a write.
    pub(crate) replica: Option<crate::ReplicaRead>,
    /// Each shard's retry schedule.
    pub(crate) backoff: &'a Backoff,
}

/// The plan [`call_plan`] builds: the crate's dispatch, retried per Region,
/// merged by `M`, processed by default.
pub(crate) type CallPlan<PdC, Req, M> = ProcessResponse<
    MergeResponse<RetryableMultiRegion<FastDispatch<Req>, PdC>, <Req as KvRequest>::Response, M>,
    DefaultProcessor,
>;

/// The plan `PlanBuilder::fast(..).routing(..).tagged(..)`, then
/// `at_least_once` and `replica_read` as `settings` say, then
/// `retry_multi_region(..).merge(merge).post_process_default().plan()`
/// would build, built in one place: each builder step moves the whole plan
/// (its request's context alone is some 300 bytes), about ten copies per
/// call that this makes once.
pub(crate) fn call_plan<PdC, Req, M>(
    pd_client: &Arc<PdC>,
    keyspace: Keyspace,
    mut request: Req,
    settings: &CallSettings<'_>,
    merge: M,
) -> CallPlan<PdC, Req, M>
where
    PdC: PdClient,
    Req: TypedCall + ShardPayload,
    M: Merge<Req::Response>,
    DefaultProcessor: Process<M::Out>,
{
    in_keyspace(keyspace, &mut request);
    let mut policy = RequestPolicy::for_request(request.terminal_on_dispatch_error());
    if settings.at_least_once {
        policy.at_least_once();
    }
    if let Some(replica) = settings.replica {
        policy.read.replica = replica;
    }
    tag_request(settings.tags, &mut request);
    let mut dispatch = FastDispatch::new(request);
    if settings.tags.no_server_deadline {
        dispatch.without_server_deadline();
    }
    ProcessResponse {
        inner: MergeResponse {
            inner: RetryableMultiRegion {
                inner: dispatch,
                pd_client: Arc::clone(pd_client),
                backoff: settings.backoff.clone(),
                routing: Some(Arc::clone(settings.routing)),
                policy: policy.or_defaults(settings.routing.policy_defaults()),
                preserve_region_results: false,
            },
            merge,
            phantom: PhantomData,
        },
        processor: DefaultProcessor,
    }
}

/// Sets `tags` on `request`'s context; nothing at all when no tag is set.
fn tag_request<Req: KvRequest>(tags: &crate::config::WireTags, request: &mut Req) {
    if tags.is_empty() {
        return;
    }
    if let Some(context) = request.context_mut() {
        tags.apply(context);
        return;
    }
    let mut context = request.context().cloned().unwrap_or_default();
    tags.apply(&mut context);
    request.set_context(context);
}

/// Gives `request`'s context the keyspace's API version and id.
fn in_keyspace<Req: KvRequest>(keyspace: Keyspace, request: &mut Req) {
    // API v1 needs nothing: the default context already says V1.
    if keyspace != Keyspace::Disable {
        let mut context = request.context().cloned().unwrap_or_default();
        keyspace.apply_to_context(&mut context);
        request.set_context(context);
    }
}

impl<PdC: PdClient, P: Plan> PlanBuilder<PdC, P> {
    fn start(pd_client: Arc<PdC>, plan: P, policy: RequestPolicy) -> Self {
        PlanBuilder {
            pd_client,
            plan,
            routing: None,
            policy,
            preserve_region_results: false,
        }
    }
}

impl<PdC: PdClient, Req: KvRequest> PlanBuilder<PdC, Dispatch<Req>> {
    /// Aims the request at one Region on one given store, without routing
    /// or retries (client-rust's stage; for requests whose caller already
    /// chose the store, such as lock resolution).
    pub async fn single_region_with_store(mut self, store: RegionStore) -> Result<Self> {
        super::traits::set_context_for_store(&mut self.plan.request, &store);
        self.plan.kv_client = Some(store.client);
        Ok(self)
    }
}

impl<PdC: PdClient, P: Plan> PlanBuilder<PdC, P> {
    /// Wraps the plan built so far in the next stage, moving it (a stage
    /// never needs a copy of the request).
    pub(in crate::request) fn map_plan<Q: Plan>(
        self,
        wrap: impl FnOnce(P) -> Q,
    ) -> PlanBuilder<PdC, Q> {
        PlanBuilder {
            pd_client: self.pd_client,
            plan: wrap(self.plan),
            routing: self.routing,
            policy: self.policy,
            preserve_region_results: self.preserve_region_results,
        }
    }

    /// The PD client the plan routes through.
    pub(in crate::request) fn pd_client(&self) -> &Arc<PdC> {
        &self.pd_client
    }

    /// The client-wide routing state, when [`routing`](Self::routing) gave one.
    pub(in crate::request) fn routing_state(&self) -> Option<&Arc<RoutingState>> {
        self.routing.as_ref()
    }

    /// Shares the client-wide routing state (store health, busy suspicion,
    /// counters). Without it the plan behaves per request like upstream.
    pub fn routing(mut self, routing: Arc<RoutingState>) -> Self {
        self.routing = Some(routing);
        self
    }

    /// Once the request may have been sent, dispatch errors are returned as
    /// undetermined and never replayed on another peer.
    pub fn terminal_on_dispatch_error(mut self) -> Self {
        self.policy.never_resend();
        self
    }

    /// An undetermined outcome ends the request at once and wins over
    /// determinate errors of other shards.
    pub fn terminal_on_undetermined(mut self) -> Self {
        self.policy.terminal_on_undetermined = true;
        self
    }

    /// Keeps every shard's result, errors included, instead of failing the
    /// request when one shard fails.
    pub fn preserve_region_results(mut self) -> Self {
        self.preserve_region_results = true;
        self
    }

    /// Bounds the RPCs this request has in flight at once (default: the
    /// routing state's `Config::max_concurrency`, else the config default).
    pub fn max_concurrency(mut self, limit: usize) -> Self {
        self.policy.max_concurrency = Some(limit.max(1));
        self
    }

    /// Bounds each RPC of the plan (default: the routing state's
    /// `Config::timeout`; without routing state, only the store client's own
    /// bound applies). An RPC that exceeds it counts as a client timeout:
    /// next candidate, caches kept. The whole request is bounded by
    /// [`request_deadline`](Self::request_deadline).
    pub fn rpc_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.policy.rpc_timeout = Some(timeout);
        self
    }

    /// Bounds the whole request: rounds, backoff sleeps and waits together
    /// (default: the routing state's `Config::request_deadline`; without
    /// routing state, none). Run inside a client call (a plan a client
    /// method builds), the call's own deadline cuts it too. A request that
    /// runs out ends with
    /// [`Failure::DeadlineExceeded`](crate::Failure::DeadlineExceeded).
    pub fn request_deadline(mut self, deadline: std::time::Duration) -> Self {
        self.policy.deadline = Some(deadline);
        self
    }

    /// At-least-once: a request that may have reached a store is re-sent
    /// after a failure instead of ending undetermined (clears
    /// `terminal_on_dispatch_error` and `terminal_on_undetermined`). For
    /// idempotent writes of callers that prefer availability; see
    /// [`Config::at_least_once_writes`](crate::Config::at_least_once_writes).
    pub fn at_least_once(mut self) -> Self {
        self.policy.at_least_once();
        self
    }

    /// Marks the request as a transaction's commit point (the primary's
    /// commit; a prewrite under async commit or 1PC): it may be re-sent, as
    /// TiKV answers it idempotently, but once an attempt may have reached a
    /// store without an answer, a final failure is
    /// [`Failure::Undetermined`](crate::Failure::Undetermined) instead of a plain
    /// error that would invite a blind retry ([txn.md, "Undetermined, done
    /// right"](crate::spec::txn#behaviour-we-require)). A definite answer
    /// (success or a key error) clears it.
    pub fn commit_point(mut self) -> Self {
        self.policy.mark_commit_point();
        self
    }

    /// **beyond** Lets a read's first attempt go to a replica of the
    /// Region (`replica_read`, TiKV's read index: linearizable) as `replica`
    /// chooses; whatever that attempt does not answer cleanly goes to the
    /// leader as usual ([routing.md, "Replica and stale
    /// reads"](crate::spec::routing#replica-and-stale-reads-beyond)). Only
    /// a request that may be sent again (a read) leaves the leader; on any
    /// other it changes nothing.
    pub fn replica_read(mut self, replica: crate::ReplicaRead) -> Self {
        self.policy.read.replica = replica;
        self
    }

    /// **beyond** Makes a read a stale read (`stale_read`): its first
    /// attempt may be served by a replica whose safe-ts is at or above the
    /// read's timestamp, and on `DataIsNotReady` (or any other failure) it
    /// is read on the leader as a normal read at the same timestamp. For
    /// reads at a timestamp in the past; like
    /// [`replica_read`](Self::replica_read), only a request that may be
    /// sent again takes it.
    pub fn stale_read(mut self) -> Self {
        self.policy.read.stale = true;
        self
    }

    /// Keeps the shard each response answers.
    pub fn preserve_shard(self) -> PlanBuilder<PdC, PreserveShard<P>>
    where
        P: Shardable,
    {
        self.map_plan(|inner| PreserveShard { inner, shard: None })
    }

    /// Shards the plan by Region and retries each shard with leader-first
    /// candidate rounds and `backoff` between rounds.
    pub fn retry_multi_region(
        self,
        backoff: Backoff,
    ) -> PlanBuilder<PdC, RetryableMultiRegion<P, PdC>>
    where
        P: ShardStage,
        P::Result: HasRegionError,
    {
        let policy = self.resolved_policy();
        let pd_client = Arc::clone(&self.pd_client);
        let routing = self.routing.clone();
        let preserve_region_results = self.preserve_region_results;
        self.map_plan(|inner| RetryableMultiRegion {
            inner,
            pd_client,
            backoff,
            routing,
            policy,
            preserve_region_results,
        })
    }

    /// The policy as set, with the routing state's defaults for what is
    /// unset (without routing state: no RPC timeout or deadline of the
    /// plan's own, the config's default concurrency).
    fn resolved_policy(&self) -> RequestPolicy {
        match &self.routing {
            Some(routing) => self.policy.or_defaults(routing.policy_defaults()),
            None => self.policy,
        }
    }

    /// [`resolve_lock`](Self::resolve_lock) with a resolver of the caller's
    /// (the transactional client's, shared by all its requests, so a
    /// resolution is shared per transaction and Region).
    pub(crate) fn resolve_lock_with(
        self,
        resolver: Arc<dyn LockResolve>,
        caller_start_ts: u64,
        backoff: Backoff,
    ) -> PlanBuilder<PdC, ResolveLock<P, PdC>>
    where
        P::Result: HasLocks,
    {
        let deadline = self.resolved_policy().deadline_or_default();
        self.map_plan(|inner| ResolveLock {
            inner,
            resolver,
            caller_start_ts,
            deadline,
            backoff,
            live_locks: LiveLockWait::ByTtl,
            pd: std::marker::PhantomData,
        })
    }

    /// [`retry_multi_region`](Self::retry_multi_region) that keeps every
    /// Region's result, failures included, instead of stopping at the first
    /// failure (client-rust's name for
    /// [`preserve_region_results`](Self::preserve_region_results)).
    pub fn retry_multi_region_preserve_results(
        self,
        backoff: Backoff,
    ) -> PlanBuilder<PdC, RetryableMultiRegion<P, PdC>>
    where
        P: ShardStage,
        P::Result: HasRegionError,
    {
        self.preserve_region_results().retry_multi_region(backoff)
    }

    /// Sends the plan to every store PD knows (client-rust's stage for
    /// store-wide requests); see [`RetryableAllStores`].
    pub fn all_stores(self, backoff: Backoff) -> PlanBuilder<PdC, RetryableAllStores<P, PdC>>
    where
        P: StoreRequest,
        P::Result: HasKeyErrors + HasRegionError,
    {
        let pd_client = Arc::clone(&self.pd_client);
        self.map_plan(|inner| RetryableAllStores {
            inner,
            pd_client,
            backoff,
        })
    }

    /// Merges the shards' results with `merge`.
    pub fn merge<In, M>(self, merge: M) -> PlanBuilder<PdC, MergeResponse<P, In, M>>
    where
        In: Send + Sync + 'static,
        M: Merge<In>,
        P: Plan<Result = Vec<Result<In>>>,
    {
        self.map_plan(|inner| MergeResponse {
            inner,
            merge,
            phantom: PhantomData,
        })
    }

    /// Processes the result with `processor`.
    pub fn post_process<Pr: Process<P::Result>>(
        self,
        processor: Pr,
    ) -> PlanBuilder<PdC, ProcessResponse<P, Pr>> {
        self.map_plan(|inner| ProcessResponse { inner, processor })
    }

    /// Processes the result with the [`DefaultProcessor`] of its type.
    pub fn post_process_default(self) -> PlanBuilder<PdC, ProcessResponse<P, DefaultProcessor>>
    where
        DefaultProcessor: Process<P::Result>,
    {
        self.post_process(DefaultProcessor)
    }

    /// Turns key errors inside the result into an `Err`.
    pub fn extract_error(self) -> PlanBuilder<PdC, ExtractError<P>>
    where
        P::Result: HasKeyErrors,
    {
        self.map_plan(|inner| ExtractError { inner })
    }

    /// The finished plan.
    pub fn plan(self) -> P {
        self.plan
    }
}

#[cfg(test)]
mod tests {
    use async_trait::async_trait;

    use super::*;
    use crate::pd::Timestamp;
    use crate::proto::{kvrpcpb, metapb};
    use crate::region::{RegionVerId, RegionWithLeader, StoreId};
    use crate::request::CollectSingle;
    use crate::store::KvRpcClient;
    use crate::{Config, Error, ReplicaRead, RequestTags};

    /// A PD the plans are built with and never asked.
    struct NoPd;

    fn unused<T>() -> Result<T> {
        Err(Error::InternalError {
            message: "not used".to_owned(),
        })
    }

    #[async_trait]
    impl PdClient for NoPd {
        type KvClient = KvRpcClient;

        async fn map_peer_to_store(
            self: Arc<Self>,
            _region: RegionWithLeader,
            _peer: metapb::Peer,
        ) -> Result<RegionStore> {
            unused()
        }
        async fn region_for_key(&self, _key: &[u8]) -> Result<RegionWithLeader> {
            unused()
        }
        async fn region_for_id(&self, _id: crate::region::RegionId) -> Result<RegionWithLeader> {
            unused()
        }
        async fn all_stores(&self) -> Result<Vec<crate::store::Store>> {
            unused()
        }
        async fn get_timestamp(self: Arc<Self>) -> Result<Timestamp> {
            unused()
        }
        async fn update_leader(&self, _ver_id: RegionVerId, _leader: metapb::Peer) -> Result<()> {
            unused()
        }
        async fn invalidate_region_cache(&self, _ver_id: RegionVerId) {}
        async fn invalidate_store_cache(&self, _store_id: StoreId) {}
    }

    /// `call_plan` builds what the builder's steps build, for every setting
    /// a client's call has.
    #[test]
    fn a_call_plan_is_the_plan_the_builder_steps_build() {
        let pd = Arc::new(NoPd);
        let backoff = Backoff::no_jitter_backoff(2, 500, 10);
        let tagged = RequestTags::new()
            .with_resource_group("rg")
            .with_txn_source(3)
            .wire();
        let plain = RequestTags::new().wire();
        let mut no_deadline = RequestTags::new().wire();
        no_deadline.no_server_deadline = true;
        let configs = [
            Config::default(),
            Config::default().with_request_deadline(std::time::Duration::from_secs(3)),
        ];
        let keyspaces = [
            Keyspace::Disable,
            Keyspace::Enable { keyspace_id: 7 },
            Keyspace::ApiV2NoPrefix,
        ];
        let mut compared = 0;
        for config in &configs {
            let routing = Arc::new(RoutingState::new(config));
            for keyspace in keyspaces {
                for tags in [&plain, &tagged, &no_deadline] {
                    for at_least_once in [false, true] {
                        for replica in [None, Some(ReplicaRead::Follower)] {
                            let request = kvrpcpb::RawPutRequest {
                                key: b"k".to_vec(),
                                value: b"v".to_vec(),
                                ..Default::default()
                            };
                            let mut builder =
                                PlanBuilder::fast(Arc::clone(&pd), keyspace, request.clone())
                                    .routing(Arc::clone(&routing))
                                    .tagged(tags);
                            if at_least_once {
                                builder = builder.at_least_once();
                            }
                            if let Some(replica) = replica {
                                builder = builder.replica_read(replica);
                            }
                            let stepped = builder
                                .retry_multi_region(backoff.clone())
                                .merge(CollectSingle)
                                .post_process_default()
                                .plan();
                            let settings = CallSettings {
                                routing: &routing,
                                tags,
                                at_least_once,
                                replica,
                                backoff: &backoff,
                            };
                            let built = call_plan(&pd, keyspace, request, &settings, CollectSingle);
                            let (a, b) = (&stepped.inner.inner, &built.inner.inner);
                            let (a_req, a_quiet) = a.inner.parts();
                            let (b_req, b_quiet) = b.inner.parts();
                            assert_eq!(a_req, b_req);
                            assert_eq!(a_quiet, b_quiet);
                            assert_eq!(format!("{:?}", a.policy), format!("{:?}", b.policy));
                            assert_eq!(format!("{:?}", a.backoff), format!("{:?}", b.backoff));
                            assert!(Arc::ptr_eq(&a.pd_client, &b.pd_client));
                            assert!(Arc::ptr_eq(
                                a.routing.as_ref().unwrap(),
                                b.routing.as_ref().unwrap()
                            ));
                            assert_eq!(a.preserve_region_results, b.preserve_region_results);
                            compared += 1;
                        }
                    }
                }
            }
        }
        assert_eq!(compared, 2 * 3 * 3 * 2 * 2);
    }
}
