//! [`PlanBuilder`]: composes plan stages in client-rust's vocabulary.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::Config;

use super::plan::{
    DefaultProcessor, Dispatch, ExtractError, Merge, MergeResponse, Plan, PreserveShard, Process,
    ProcessResponse, RetryableMultiRegion,
};
use super::routing_state::RoutingState;
use super::traits::{HasKeyErrors, HasRegionError, KvRequest, Shardable};
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
/// use tikv_plan::raw::new_raw_get_request;
/// use tikv_plan::request::{CollectSingle, Plan, PlanBuilder, RoutingState};
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
/// let plan = PlanBuilder::new(pd.clone(), new_raw_get_request(b"k".to_vec(), None))
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
    terminal_on_dispatch_error: bool,
    terminal_on_undetermined: bool,
    preserve_region_results: bool,
    max_concurrency: Option<usize>,
}

impl<PdC: PdClient, Req: KvRequest> PlanBuilder<PdC, Dispatch<Req>> {
    /// Starts a plan for `request`. A request whose replay is unsafe (see
    /// [`KvRequest::terminal_on_dispatch_error`]) starts with
    /// `terminal_on_dispatch_error` and `terminal_on_undetermined` set.
    pub fn new(pd_client: Arc<PdC>, request: Req) -> Self {
        let replay_unsafe = request.terminal_on_dispatch_error();
        PlanBuilder {
            pd_client,
            plan: Dispatch::new(request),
            routing: None,
            terminal_on_dispatch_error: replay_unsafe,
            terminal_on_undetermined: replay_unsafe,
            preserve_region_results: false,
            max_concurrency: None,
        }
    }
}

impl<PdC: PdClient, P: Plan> PlanBuilder<PdC, P> {
    fn with_plan<Q: Plan>(self, plan: Q) -> PlanBuilder<PdC, Q> {
        PlanBuilder {
            pd_client: self.pd_client,
            plan,
            routing: self.routing,
            terminal_on_dispatch_error: self.terminal_on_dispatch_error,
            terminal_on_undetermined: self.terminal_on_undetermined,
            preserve_region_results: self.preserve_region_results,
            max_concurrency: self.max_concurrency,
        }
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
        self.terminal_on_dispatch_error = true;
        self
    }

    /// An undetermined outcome ends the request at once and wins over
    /// determinate errors of other shards.
    pub fn terminal_on_undetermined(mut self) -> Self {
        self.terminal_on_undetermined = true;
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
        self.max_concurrency = Some(limit.max(1));
        self
    }

    /// Keeps the shard each response answers.
    pub fn preserve_shard(self) -> PlanBuilder<PdC, PreserveShard<P>>
    where
        P: Shardable,
    {
        let plan = PreserveShard {
            inner: self.plan.clone(),
            shard: None,
        };
        self.with_plan(plan)
    }

    /// Shards the plan by Region and retries each shard with leader-first
    /// candidate rounds and `backoff` between rounds.
    pub fn retry_multi_region(
        self,
        backoff: Backoff,
    ) -> PlanBuilder<PdC, RetryableMultiRegion<P, PdC>>
    where
        P: Shardable,
        P::Result: HasRegionError,
    {
        let max_concurrency = self.max_concurrency.unwrap_or_else(|| {
            self.routing
                .as_ref()
                .map(|r| r.max_concurrency())
                .unwrap_or_else(|| Config::default().max_concurrency)
        });
        let plan = RetryableMultiRegion {
            inner: self.plan.clone(),
            pd_client: Arc::clone(&self.pd_client),
            backoff,
            routing: self.routing.clone(),
            terminal_on_dispatch_error: self.terminal_on_dispatch_error,
            terminal_on_undetermined: self.terminal_on_undetermined,
            preserve_region_results: self.preserve_region_results,
            max_concurrency,
        };
        self.with_plan(plan)
    }

    /// Merges the shards' results with `merge`.
    pub fn merge<In, M>(self, merge: M) -> PlanBuilder<PdC, MergeResponse<P, In, M>>
    where
        In: Send + Sync + 'static,
        M: Merge<In>,
        P: Plan<Result = Vec<Result<In>>>,
    {
        let plan = MergeResponse {
            inner: self.plan.clone(),
            merge,
            phantom: PhantomData,
        };
        self.with_plan(plan)
    }

    /// Processes the result with `processor`.
    pub fn post_process<Pr: Process<P::Result>>(
        self,
        processor: Pr,
    ) -> PlanBuilder<PdC, ProcessResponse<P, Pr>> {
        let plan = ProcessResponse {
            inner: self.plan.clone(),
            processor,
        };
        self.with_plan(plan)
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
        let plan = ExtractError {
            inner: self.plan.clone(),
        };
        self.with_plan(plan)
    }

    /// The finished plan.
    pub fn plan(self) -> P {
        self.plan
    }
}
