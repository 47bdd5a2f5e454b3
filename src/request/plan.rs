//! Plan stages: [`Dispatch`] sends one request to one store,
//! [`RetryableMultiRegion`] shards it and runs candidate rounds per shard,
//! [`MergeResponse`], [`ProcessResponse`] and [`ExtractError`] shape the
//! results.

use std::collections::VecDeque;
use std::marker::PhantomData;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Semaphore;

use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::region::{CandidateOrder, RegionWithLeader};
use crate::store::{KvClient, RegionStore};
use crate::{Error, Result};

use super::classify::{classify_dispatch_error, DispatchFailure};
use super::region_error::{RegionErrorAction, RegionErrorStep};
use super::round::{BusyProbeCount, CandidateRound, CandidateStep};
use super::routing_state::{BusyVerdict, Counter, ProbeOutcome, ProbeTicket, RoutingState};
use super::traits::{strongest_shard_error, HasKeyErrors, HasRegionError, KvRequest, Shardable};

/// A stage of a request plan. Executing it runs the request to completion.
#[async_trait]
pub trait Plan: Sized + Clone + Sync + Send + 'static {
    /// What the plan produces.
    type Result: Send;

    /// Runs the plan.
    async fn execute(&self) -> Result<Self::Result>;
}

/// Sends a request to the store client set by `apply_store`, and downcasts
/// the answer to the request's response type.
#[derive(Clone)]
pub struct Dispatch<Req: KvRequest> {
    /// The request.
    pub request: Req,
    /// The client of the target store; set by [`Shardable::apply_store`].
    pub kv_client: Option<Arc<dyn KvClient + Send + Sync>>,
}

impl<Req: KvRequest> Dispatch<Req> {
    /// A dispatch of `request`, not yet targeted at a store.
    pub fn new(request: Req) -> Self {
        Dispatch {
            request,
            kv_client: None,
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

    async fn execute(&self) -> Result<Self::Result> {
        let client = self.kv_client.as_ref().ok_or_else(|| {
            Error::Internal(format!(
                "{} was dispatched before a store was chosen",
                self.request.label()
            ))
        })?;
        let response = client.dispatch(&self.request).await?;
        response
            .downcast::<Req::Response>()
            .map(|b| *b)
            .map_err(|_| {
                Error::Internal(format!(
                    "the store client answered {} with a response of another type",
                    self.request.label()
                ))
            })
    }
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

#[async_trait]
impl<P: Plan + Shardable> Plan for PreserveShard<P> {
    type Result = ResponseWithShard<P::Result, P::Shard>;

    async fn execute(&self) -> Result<Self::Result> {
        let shard = self.shard.clone().ok_or_else(|| {
            Error::Internal(
                "PreserveShard ran without a shard; use it under RetryableMultiRegion".to_owned(),
            )
        })?;
        let response = self.inner.execute().await?;
        Ok(ResponseWithShard(response, shard))
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

/// Shards a plan by Region and runs leader-first candidate rounds with voter
/// fallback for each shard (routing.md, "One round, per shard"). Results come
/// back in shard order.
pub struct RetryableMultiRegion<P: Plan + Shardable, PdC: PdClient> {
    /// The per-shard plan.
    pub inner: P,
    /// PD and the caches.
    pub pd_client: Arc<PdC>,
    /// The retry schedule of each shard.
    pub backoff: Backoff,
    /// Client-wide routing state; `None` behaves per request like upstream.
    pub routing: Option<Arc<RoutingState>>,
    /// Once the request may have been sent, a dispatch error is returned as
    /// undetermined, never replayed.
    pub terminal_on_dispatch_error: bool,
    /// An undetermined outcome ends the whole request at once and wins over
    /// determinate errors of other shards.
    pub terminal_on_undetermined: bool,
    /// Keep every shard's result, errors included, instead of failing the
    /// request on the first error.
    pub preserve_region_results: bool,
    /// How many RPCs the request may have in flight at once.
    pub max_concurrency: usize,
    /// A bound on each RPC on top of the store client's own (which
    /// [`TikvConnect`](crate::store::TikvConnect) sets); `None` leaves it to
    /// the store client.
    pub request_timeout: Option<std::time::Duration>,
}

impl<P: Plan + Shardable, PdC: PdClient> Clone for RetryableMultiRegion<P, PdC> {
    fn clone(&self) -> Self {
        RetryableMultiRegion {
            inner: self.inner.clone(),
            pd_client: Arc::clone(&self.pd_client),
            backoff: self.backoff.clone(),
            routing: self.routing.clone(),
            terminal_on_dispatch_error: self.terminal_on_dispatch_error,
            terminal_on_undetermined: self.terminal_on_undetermined,
            preserve_region_results: self.preserve_region_results,
            max_concurrency: self.max_concurrency,
            request_timeout: self.request_timeout,
        }
    }
}

/// How one candidate round of a shard ended.
enum RoundEnd<T> {
    Accepted(T),
    Failed(Error),
    RegionError(Box<RegionErrorAction>, Box<crate::proto::errorpb::Error>),
    Exhausted(super::round::RoundExhausted),
}

/// Holds a concurrency permit and the in-flight gauge for one RPC.
struct InFlight<'a> {
    _permit: tokio::sync::SemaphorePermit<'a>,
    routing: Option<&'a RoutingState>,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.routing {
            r.rpc_ended();
        }
    }
}

/// One piece of a shard still to be answered, with its retry budget.
struct Piece<S> {
    shard: S,
    region: RegionWithLeader,
    backoff: Backoff,
    busy: BusyProbeCount,
}

impl<P, PdC> RetryableMultiRegion<P, PdC>
where
    P: Plan + Shardable,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    fn count(&self, counter: Counter) {
        if let Some(r) = &self.routing {
            r.count(counter);
        }
    }

    fn candidate_order(&self, region: &RegionWithLeader, probe: bool) -> CandidateOrder {
        if probe {
            return CandidateOrder::FollowersOnly;
        }
        let leader_unreachable = match (&self.routing, &region.leader) {
            (Some(r), Some(leader)) => r.is_store_unreachable(leader.store_id),
            _ => false,
        };
        if leader_unreachable {
            CandidateOrder::LeaderLast
        } else {
            CandidateOrder::LeaderFirst
        }
    }

    async fn invalidate_store(&self, store_id: u64) {
        self.count(Counter::StoreInvalidation);
        self.pd_client.invalidate_store_cache(store_id).await;
    }

    async fn invalidate_region(&self, region: &RegionWithLeader) {
        self.count(Counter::RegionInvalidation);
        self.pd_client
            .invalidate_region_cache(region.ver_id())
            .await;
    }

    /// Maps a candidate to its store, behind the `before-map-store` fail
    /// point.
    async fn map_candidate(
        &self,
        region: &RegionWithLeader,
        peer: crate::proto::metapb::Peer,
    ) -> Result<RegionStore> {
        fail::fail_point!("tikv_plan::before_map_store", |arg| Err(fail_point_error(
            "mapping",
            peer.store_id,
            arg
        )));
        Arc::clone(&self.pd_client)
            .map_peer_to_store(region.clone(), peer)
            .await
    }

    /// Sends the shard to a mapped candidate, holding one permit while the
    /// RPC is in flight, behind the `before-dispatch` fail point.
    async fn dispatch_candidate(
        &self,
        shard: &P::Shard,
        store: &RegionStore,
        permits: &Semaphore,
    ) -> Result<P::Result> {
        let mut plan = self.inner.clone();
        plan.apply_shard(shard.clone());
        plan.apply_store(store)?;
        fail::fail_point!("tikv_plan::before_dispatch", |arg| Err(fail_point_error(
            "dispatch",
            store.store_id(),
            arg
        )));
        let permit = permits
            .acquire()
            .await
            .map_err(|_| Error::Internal("the request's permit pool was closed".to_owned()))?;
        let routing = self.routing.as_deref();
        if let Some(r) = routing {
            r.rpc_started();
        }
        let _in_flight = InFlight {
            _permit: permit,
            routing,
        };
        match self.request_timeout {
            None => plan.execute().await,
            Some(bound) => match tokio::time::timeout(bound, plan.execute()).await {
                Ok(result) => result,
                Err(_) => Err(Error::Timeout {
                    what: format!("the request to store {}", store.store_id()),
                    after: bound,
                }),
            },
        }
    }

    /// One candidate round: tries candidates one at a time until one
    /// answers, the round decides to end, or none is left.
    async fn run_round(
        &self,
        shard: &P::Shard,
        region: &RegionWithLeader,
        order: CandidateOrder,
        permits: &Semaphore,
    ) -> RoundEnd<P::Result> {
        let mut round = CandidateRound::new(region, order);
        while let Some(peer) = round.next_candidate() {
            let is_leader = round.current_is_cached_leader();
            log::debug!(
                "region {}: trying peer {} on store {} ({})",
                region.id(),
                peer.id,
                peer.store_id,
                if is_leader {
                    "cached leader"
                } else {
                    "fallback"
                }
            );
            if !is_leader {
                self.count(Counter::FallbackAttempt);
            }
            let store = match self.map_candidate(region, peer).await {
                Ok(store) => store,
                Err(error) => {
                    if matches!(error, Error::ConnectTimeout { .. }) {
                        self.count(Counter::ConnectTimeout);
                    }
                    log::debug!(
                        "region {}: mapping store {} failed: {error}",
                        region.id(),
                        peer.store_id
                    );
                    // Every mapping failure moves on (the request was not
                    // sent); only a failure to reach the store itself makes
                    // it cool down, not, say, PD being unavailable.
                    if let Some(r) = &self.routing {
                        if classify_dispatch_error(&error) == DispatchFailure::NotSent {
                            r.store_failed(peer.store_id);
                        }
                    }
                    if let CandidateStep::Next {
                        invalidate_store: Some(store_id),
                    } = round.on_mapping_failed(error)
                    {
                        self.invalidate_store(store_id).await;
                    }
                    continue;
                }
            };
            match self.dispatch_candidate(shard, &store, permits).await {
                Err(error) => {
                    let failure = classify_dispatch_error(&error);
                    log::debug!(
                        "region {}: peer {} on store {} failed ({failure:?}): {error}",
                        region.id(),
                        peer.id,
                        peer.store_id
                    );
                    if let Some(r) = &self.routing {
                        if failure.invalidates_store() {
                            r.store_failed(peer.store_id);
                        } else if failure.is_timeout() {
                            r.store_timed_out(peer.store_id);
                        }
                    }
                    match round.on_dispatch_failed(error, failure, self.terminal_on_dispatch_error)
                    {
                        CandidateStep::Next { invalidate_store } => {
                            if let Some(store_id) = invalidate_store {
                                self.invalidate_store(store_id).await;
                            }
                        }
                        CandidateStep::Fail(error) => return RoundEnd::Failed(error),
                        CandidateStep::EndRound { action, error } => {
                            return RoundEnd::RegionError(action, error)
                        }
                    }
                }
                Ok(mut response) => {
                    if let Some(r) = &self.routing {
                        r.store_answered(peer.store_id);
                    }
                    let Some(region_error) = response.region_error() else {
                        let accepted = round.on_accepted();
                        if accepted.update_leader {
                            // A key error proves acceptance too: the cache is
                            // set before anything is returned.
                            log::info!(
                                "region {}: peer {} on store {} accepted the request; it is now the cached leader",
                                region.id(),
                                accepted.peer.id,
                                accepted.peer.store_id
                            );
                            self.count(Counter::FallbackSuccess);
                            if let Err(e) = self
                                .pd_client
                                .update_leader(region.ver_id(), accepted.peer)
                                .await
                            {
                                log::debug!(
                                    "region {}: could not update the leader cache: {e}",
                                    region.id()
                                );
                            }
                        }
                        return RoundEnd::Accepted(response);
                    };
                    log::debug!(
                        "region {}: peer {} answered {}",
                        region.id(),
                        peer.id,
                        crate::describe_region_error(&region_error)
                    );
                    match round.on_region_error(region_error) {
                        CandidateStep::Next { invalidate_store } => {
                            if let Some(store_id) = invalidate_store {
                                self.invalidate_store(store_id).await;
                            }
                        }
                        CandidateStep::Fail(error) => return RoundEnd::Failed(error),
                        CandidateStep::EndRound { action, error } => {
                            if action.invalidate_store {
                                self.invalidate_store(peer.store_id).await;
                            }
                            return RoundEnd::RegionError(action, error);
                        }
                    }
                }
            }
        }
        let exhausted = round.finish();
        log::warn!(
            "region {}: no candidate answered ({} tried): {}",
            region.id(),
            exhausted.tried,
            exhausted.strongest
        );
        RoundEnd::Exhausted(exhausted)
    }

    /// Splits one piece again by Region (after a reload or a split), from
    /// the caches.
    async fn reshard(&self, shard: P::Shard) -> Result<Vec<(P::Shard, RegionWithLeader)>> {
        let mut plan = self.inner.clone();
        plan.apply_shard(shard);
        plan.shards(&self.pd_client).await
    }

    /// Runs one shard to completion: rounds with backoff, as a loop. A
    /// reload can split the shard; its pieces are answered in key order.
    async fn run_shard(
        &self,
        shard: P::Shard,
        region: RegionWithLeader,
        permits: &Semaphore,
    ) -> Vec<Result<P::Result>> {
        let mut results = Vec::with_capacity(1);
        // The shard itself, then the pieces a split left, in key order (the
        // queue allocates only when a split happens).
        let mut first = Some(Piece {
            shard,
            region,
            backoff: self.backoff.clone(),
            busy: BusyProbeCount::default(),
        });
        let mut pieces = VecDeque::new();
        while let Some(piece) = first.take().or_else(|| pieces.pop_front()) {
            match self.run_piece(piece, permits).await {
                PieceEnd::Done(result) => {
                    let stop = self.terminal_on_undetermined
                        && matches!(&result, Err(e) if e.is_undetermined());
                    results.push(result);
                    if stop {
                        return results;
                    }
                }
                PieceEnd::Split(new_pieces) => {
                    for piece in new_pieces.into_iter().rev() {
                        pieces.push_front(piece);
                    }
                }
            }
        }
        results
    }

    /// Rounds for one piece until it is answered, fails, or must be split
    /// again after a cache reload.
    async fn run_piece(&self, piece: Piece<P::Shard>, permits: &Semaphore) -> PieceEnd<P> {
        let Piece {
            mut shard,
            mut region,
            mut backoff,
            mut busy,
        } = piece;
        // `Some` while the next round is the followers-only busy probe; the
        // inner ticket is the shared one, when the suspicion is shared.
        let mut probe: Option<Option<ProbeTicket>> = None;
        let mut attempts: u32 = 1;
        loop {
            let probing = probe.is_some();
            let order = self.candidate_order(&region, probing);
            let end = self.run_round(&shard, &region, order, permits).await;
            // The probe round is over: it found the leader, or it was
            // inconclusive. (A ticket dropped unfinished, by cancellation,
            // proves nothing and leaves the shared count alone.)
            if let Some(ticket) = probe.take().flatten() {
                ticket.finish(match &end {
                    RoundEnd::Accepted(_) => ProbeOutcome::FoundLeader,
                    _ => ProbeOutcome::Inconclusive,
                });
            }
            match end {
                RoundEnd::Accepted(response) => return PieceEnd::Done(Ok(response)),
                RoundEnd::Failed(error) => return PieceEnd::Done(Err(error)),
                RoundEnd::Exhausted(exhausted) => {
                    if probing {
                        // Inconclusive: the cached leader stays and the
                        // ordinary busy backoff resumes (routing.md,
                        // "ServerIsBusy(0) follower probe").
                        log::debug!("region {}: busy probe was inconclusive", region.id());
                    } else if exhausted.reload_region {
                        self.invalidate_region(&region).await;
                    }
                    let Some(delay) = backoff.next_delay_duration() else {
                        return PieceEnd::Done(Err(Error::RetriesExhausted {
                            region_id: region.id(),
                            attempts,
                            last: Box::new(exhausted.strongest),
                        }));
                    };
                    attempts += 1;
                    tokio::time::sleep(delay).await;
                }
                RoundEnd::RegionError(action, error) => {
                    let region_id = region.id();
                    let exhausted = |attempts| {
                        PieceEnd::Done(Err(Error::RetriesExhausted {
                            region_id,
                            attempts,
                            last: Box::new(Error::region_error(region_id, (*error).clone())),
                        }))
                    };
                    // Newer Regions go in before the stale one is dropped:
                    // the cache carries its leader over to a new version that
                    // still has that peer (the stale version is then already
                    // replaced, and dropping it by its old epoch is a no-op).
                    if !action.insert_regions.is_empty() {
                        self.pd_client
                            .add_regions(action.insert_regions.clone())
                            .await;
                    }
                    if action.invalidate_region {
                        self.invalidate_region(&region).await;
                    }
                    match action.step {
                        RegionErrorStep::Return | RegionErrorStep::NextCandidate => {
                            return PieceEnd::Done(Err(Error::region_error(region_id, *error)));
                        }
                        RegionErrorStep::RetryNow => {
                            if let Some(leader) = action.update_leader {
                                if let Err(e) =
                                    self.pd_client.update_leader(region.ver_id(), leader).await
                                {
                                    log::debug!("region {region_id}: leader update failed: {e}");
                                }
                                // The hint is authoritative for this request
                                // even if the shared cache moved on.
                                region.leader = Some(leader);
                            }
                            // No sleep, but the attempt counts, so ping-pong
                            // hints cannot loop forever.
                            if backoff.next_delay_duration().is_none() {
                                return exhausted(attempts);
                            }
                            attempts += 1;
                            if action.update_leader.is_some() {
                                continue;
                            }
                        }
                        RegionErrorStep::Backoff { at_least } => {
                            let mut sleep = true;
                            if action.busy_zero_wait {
                                match self.on_busy_zero_wait(&region, &mut busy) {
                                    BusyNext::Probe(ticket) => {
                                        self.count(Counter::BusyProbe);
                                        log::debug!(
                                            "region {region_id}: ServerIsBusy(0) from the cached leader again; probing its followers"
                                        );
                                        probe = Some(ticket);
                                        continue;
                                    }
                                    BusyNext::Wait(waiter) => {
                                        // The prober's answer is everyone's:
                                        // a found leader is in the cache.
                                        sleep = waiter.outcome().await != ProbeOutcome::FoundLeader;
                                    }
                                    BusyNext::Ordinary => {}
                                }
                            }
                            let Some(delay) = backoff.next_delay_duration() else {
                                return exhausted(attempts);
                            };
                            attempts += 1;
                            if sleep {
                                tokio::time::sleep(delay.max(at_least.unwrap_or_default())).await;
                            }
                        }
                    }
                }
            }
            // The next round starts from the (possibly reloaded) Region; a
            // reload may have split the piece.
            match self.reshard(shard.clone()).await {
                Err(e) => return PieceEnd::Done(Err(e)),
                Ok(mut new) if new.len() == 1 => {
                    if let Some((reloaded_shard, reloaded)) = new.pop() {
                        shard = reloaded_shard;
                        region = reloaded;
                    }
                }
                Ok(new) => {
                    return PieceEnd::Split(
                        new.into_iter()
                            .map(|(shard, region)| Piece {
                                shard,
                                region,
                                backoff: backoff.clone(),
                                // One probe per request, splits included; the
                                // count restarts anyway for another leader.
                                busy: busy.clone(),
                            })
                            .collect(),
                    );
                }
            }
        }
    }

    fn on_busy_zero_wait(&self, region: &RegionWithLeader, busy: &mut BusyProbeCount) -> BusyNext {
        let Some(leader) = region.leader else {
            return BusyNext::Ordinary;
        };
        match &self.routing {
            Some(routing) if routing.shares_busy_probe() => {
                let may_probe = !busy.probed();
                match routing.busy_zero_wait(region.id(), leader.id, may_probe) {
                    BusyVerdict::Ordinary => BusyNext::Ordinary,
                    BusyVerdict::Probe(ticket) => {
                        busy.mark_probed();
                        BusyNext::Probe(Some(ticket))
                    }
                    BusyVerdict::WaitForProbe(waiter) => BusyNext::Wait(waiter),
                }
            }
            _ => {
                if busy.record_zero_wait(leader.id) {
                    busy.mark_probed();
                    BusyNext::Probe(None)
                } else {
                    BusyNext::Ordinary
                }
            }
        }
    }
}

enum BusyNext {
    Ordinary,
    Probe(Option<ProbeTicket>),
    Wait(super::routing_state::ProbeWaiter),
}

enum PieceEnd<P: Plan + Shardable> {
    Done(Result<P::Result>),
    Split(Vec<Piece<P::Shard>>),
}

#[async_trait]
impl<P, PdC> Plan for RetryableMultiRegion<P, PdC>
where
    P: Plan + Shardable,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    type Result = Vec<Result<P::Result>>;

    async fn execute(&self) -> Result<Self::Result> {
        let mut shards = self.inner.shards(&self.pd_client).await?;
        let permits = Semaphore::new(self.max_concurrency.max(1));
        let permits = &permits;
        if shards.len() == 1 {
            // One shard (every single-key request): run it in place, without
            // the per-shard task of `FuturesUnordered` and the move of the
            // shard's future into it.
            if let Some((shard, region)) = shards.pop() {
                let results = self.run_shard(shard, region, permits).await;
                return self.finish(results);
            }
        }
        let mut slots: Vec<Option<Vec<Result<P::Result>>>> = Vec::with_capacity(shards.len());
        slots.resize_with(shards.len(), || None);
        let mut running: FuturesUnordered<_> = shards
            .into_iter()
            .enumerate()
            .map(|(index, (shard, region))| async move {
                (index, self.run_shard(shard, region, permits).await)
            })
            .collect();
        while let Some((index, mut results)) = running.next().await {
            // Returned at once; the other shards are dropped here, which
            // stops their rounds.
            self.return_undetermined(&mut results)?;
            if let Some(slot) = slots.get_mut(index) {
                *slot = Some(results);
            }
        }
        let results: Vec<Result<P::Result>> = slots.into_iter().flatten().flatten().collect();
        self.finish(results)
    }
}

impl<P, PdC> RetryableMultiRegion<P, PdC>
where
    P: Plan + Shardable,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    /// With `terminal_on_undetermined`, fails with the first undetermined
    /// outcome among `results` (taking it out); otherwise does nothing.
    fn return_undetermined(&self, results: &mut Vec<Result<P::Result>>) -> Result<()> {
        if self.terminal_on_undetermined {
            if let Some(pos) = results
                .iter()
                .position(|r| matches!(r, Err(e) if e.is_undetermined()))
            {
                results.swap_remove(pos)?;
            }
        }
        Ok(())
    }

    /// The request's result from every shard's results, in shard order: an
    /// undetermined outcome first when it is terminal, then all results
    /// (when errors are kept or there are none) or the strongest error.
    fn finish(&self, mut results: Vec<Result<P::Result>>) -> Result<Vec<Result<P::Result>>> {
        self.return_undetermined(&mut results)?;
        if self.preserve_region_results || results.iter().all(Result::is_ok) {
            return Ok(results);
        }
        let errors: Vec<Error> = results.into_iter().filter_map(Result::err).collect();
        Err(strongest_shard_error(errors))
    }
}

/// The error a fail point injects (see the module docs for the arguments).
#[cfg_attr(not(feature = "failpoints"), allow(dead_code))]
fn fail_point_error(stage: &str, store_id: u64, arg: Option<String>) -> Error {
    let what = arg.unwrap_or_default();
    match what.as_str() {
        "timeout" => Error::from(tonic::Status::deadline_exceeded(format!(
            "fail point before {stage} to store {store_id}"
        ))),
        "fatal" => Error::from(tonic::Status::invalid_argument(format!(
            "fail point before {stage} to store {store_id}"
        ))),
        _ if stage == "mapping" => Error::Connect {
            address: format!("store {store_id}"),
            message: "fail point before store mapping".to_owned(),
        },
        _ => Error::from(tonic::Status::unavailable(format!(
            "fail point before {stage} to store {store_id}"
        ))),
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
            return Err(Error::Internal(format!(
                "a single-Region request produced {} results",
                input.len()
            )));
        }
        input
            .pop()
            .unwrap_or_else(|| Err(Error::Internal("no result".to_owned())))
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
