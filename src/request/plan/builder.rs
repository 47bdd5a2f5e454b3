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
use super::stage::{ShardStage, TypedCall};
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
