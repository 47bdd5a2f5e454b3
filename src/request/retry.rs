//! [`RetryableMultiRegion`]: the async shell around the shard retry engine
//! ([`ShardMachine`](super::engine::ShardMachine)). It shards the request,
//! runs each shard's machine, and performs what the machine decides: maps
//! stores, dispatches, sleeps, reshards, and applies cache and health
//! effects. It makes no routing decision of its own.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Semaphore;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::region::RegionWithLeader;
use crate::store::RegionStore;
use crate::{Error, Result};

use super::engine::{Deadline, Effect, EnginePolicy, Event, Next, RequestScope, ShardMachine};
use super::plan::Plan;
use super::routing_state::{ProbeOutcome, RoutingState};
use super::traits::{strongest_shard_error, HasRegionError, Shardable};

/// Shards a plan by Region and runs leader-first candidate rounds with voter
/// fallback for each shard ([routing.md, "One round, per
/// shard"](crate::spec::routing#one-round-per-shard)). Results come back in
/// shard order.
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
    /// The overall deadline of the request (rounds, sleeps and waits
    /// together); `None` for none.
    pub request_deadline: Option<std::time::Duration>,
    /// A commit point: re-sent like an idempotent request, but a final
    /// failure after an attempt that may have been delivered is
    /// undetermined ([txn.md, "Undetermined, done
    /// right"](crate::spec::txn#behaviour-we-require)).
    pub commit_point: bool,
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
            request_deadline: self.request_deadline,
            commit_point: self.commit_point,
        }
    }
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

/// How a piece of a shard ended: answered (or failed), or split by a reload
/// into pieces that run next, in key order.
enum PieceEnd<'r, P: Plan + Shardable> {
    Done(Result<P::Result>),
    Split(Vec<(P::Shard, ShardMachine<'r>)>),
}

impl<P, PdC> RetryableMultiRegion<P, PdC>
where
    P: Plan + Shardable,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    fn policy(&self) -> EnginePolicy {
        EnginePolicy {
            terminal_on_dispatch_error: self.terminal_on_dispatch_error,
            shared_busy_probe: self.routing.as_ref().is_some_and(|r| r.shares_busy_probe()),
            commit_point: self.commit_point,
        }
    }

    /// Performs one effect the engine decided on.
    async fn perform(&self, effect: Effect) {
        let routing = self.routing.as_deref();
        match effect {
            Effect::InvalidateStore(store_id) => {
                self.pd_client.invalidate_store_cache(store_id).await;
            }
            Effect::InvalidateRegion(ver_id) => {
                self.pd_client.invalidate_region_cache(ver_id).await;
            }
            Effect::InsertRegions(regions) => self.pd_client.add_regions(regions).await,
            Effect::UpdateLeader(ver_id, leader) => {
                if let Err(e) = self.pd_client.update_leader(ver_id, leader).await {
                    log::debug!(
                        "region {}: could not update the leader cache: {e}",
                        ver_id.id
                    );
                }
            }
            Effect::StoreFailed(store_id) => {
                if let Some(r) = routing {
                    r.store_failed(store_id);
                }
            }
            Effect::StoreTimedOut { store_id, sent_at } => {
                if let Some(r) = routing {
                    r.store_timed_out(store_id, sent_at);
                }
            }
            Effect::StoreAnswered { store_id, sent_at } => {
                if let Some(r) = routing {
                    r.store_answered(store_id, sent_at);
                }
            }
            Effect::Count(counter) => {
                if let Some(r) = routing {
                    r.count(counter);
                }
            }
            Effect::FinishProbe(ticket, outcome) => ticket.finish(outcome),
        }
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
        deadline_left: Option<std::time::Duration>,
        sent_at: &mut Instant,
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
        // Sent now, not when the shard started waiting for a permit: a
        // timeout strike counts RPCs sent one after another.
        *sent_at = Instant::now();
        // The RPC timeout, cut short by the request's deadline.
        let bound = match (self.request_timeout, deadline_left) {
            (Some(timeout), Some(left)) => Some(timeout.min(left)),
            (timeout, left) => timeout.or(left),
        };
        match bound {
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

    /// Splits one piece again by Region (after a reload or a split), from
    /// the caches.
    async fn reshard(&self, shard: P::Shard) -> Result<Vec<(P::Shard, RegionWithLeader)>> {
        let mut plan = self.inner.clone();
        plan.apply_shard(shard);
        plan.shards(&self.pd_client).await
    }

    /// Runs one shard to completion. A reload can split the shard; its
    /// pieces are answered in key order.
    async fn run_shard(
        &self,
        shard: P::Shard,
        region: RegionWithLeader,
        permits: &Semaphore,
        scope: &RequestScope,
        deadline: Option<Deadline>,
    ) -> Vec<Result<P::Result>> {
        let mut results = Vec::with_capacity(1);
        // The shard itself, then the pieces a split left, in key order (the
        // queue allocates only when a split happens).
        let mut first = Some((
            shard,
            ShardMachine::new(region, self.backoff.clone(), self.policy(), deadline, scope),
        ));
        let mut pieces = VecDeque::new();
        while let Some((shard, machine)) = first.take().or_else(|| pieces.pop_front()) {
            match self.run_piece(shard, machine, permits).await {
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

    /// Drives one piece's machine: performs its effects and steps until it
    /// is done or must be split.
    async fn run_piece<'r>(
        &self,
        mut shard: P::Shard,
        mut machine: ShardMachine<'r>,
        permits: &Semaphore,
    ) -> PieceEnd<'r, P> {
        let mut event = Event::Start;
        let mut store: Option<RegionStore> = None;
        let mut response: Option<P::Result> = None;
        loop {
            let next = machine.handle(event, Instant::now());
            for effect in machine.take_effects() {
                self.perform(effect).await;
            }
            event = match next {
                Next::CheckLeaderStore(store_id) => Event::LeaderStore {
                    unreachable: self
                        .routing
                        .as_ref()
                        .is_some_and(|r| r.is_store_unreachable(store_id)),
                },
                Next::Map(peer) => match self.map_candidate(machine.region(), peer).await {
                    Ok(mapped) => {
                        store = Some(mapped);
                        Event::Mapped
                    }
                    Err(error) => Event::MappingFailed(error),
                },
                Next::Dispatch { bound } => {
                    let mut sent_at = Instant::now();
                    let result = match store.take() {
                        Some(store) => {
                            self.dispatch_candidate(&shard, &store, permits, bound, &mut sent_at)
                                .await
                        }
                        None => Err(Error::Internal(
                            "the retry engine dispatched before mapping a store".to_owned(),
                        )),
                    };
                    match result {
                        Ok(mut answer) => {
                            let region_error = answer.region_error().map(Box::new);
                            response = Some(answer);
                            Event::Answered {
                                region_error,
                                sent_at,
                            }
                        }
                        Err(error) => Event::DispatchFailed { error, sent_at },
                    }
                }
                Next::Sleep(delay) => {
                    tokio::time::sleep(delay).await;
                    Event::Slept
                }
                Next::Reshard => match self.reshard(shard.clone()).await {
                    Err(error) => Event::ReshardFailed(error),
                    Ok(mut new) if new.len() == 1 => match new.pop() {
                        Some((reloaded_shard, region)) => {
                            shard = reloaded_shard;
                            Event::Resharded(region)
                        }
                        None => Event::ReshardFailed(Error::Internal(
                            "a reshard lost its only piece".to_owned(),
                        )),
                    },
                    Ok(new) if new.is_empty() => Event::ReshardFailed(Error::Internal(format!(
                        "reloading region {} left no Region for its keys",
                        machine.region().id()
                    ))),
                    Ok(new) => {
                        return PieceEnd::Split(
                            new.into_iter()
                                .map(|(shard, region)| (shard, machine.fork(region)))
                                .collect(),
                        )
                    }
                },
                Next::ReportBusy {
                    region_id,
                    leader_peer_id,
                    may_probe,
                } => match &self.routing {
                    Some(routing) => Event::BusyVerdict(routing.busy_zero_wait(
                        region_id,
                        leader_peer_id,
                        may_probe,
                    )),
                    None => Event::BusyVerdict(super::routing_state::BusyVerdict::Ordinary),
                },
                Next::WaitForProbe(waiter, bound) => Event::ProbeWaited(match bound {
                    None => waiter.outcome().await,
                    Some(bound) => tokio::time::timeout(bound, waiter.outcome())
                        .await
                        .unwrap_or(ProbeOutcome::Inconclusive),
                }),
                Next::Done(Ok(())) => {
                    return PieceEnd::Done(response.take().ok_or_else(|| {
                        Error::Internal("the retry engine accepted no response".to_owned())
                    }))
                }
                Next::Done(Err(Error::Undetermined {
                    region_id,
                    store_id,
                    request: _,
                    cause,
                })) => {
                    // Name the request (its keys or range) for the caller.
                    let mut plan = self.inner.clone();
                    plan.apply_shard(shard);
                    return PieceEnd::Done(Err(Error::Undetermined {
                        region_id,
                        store_id,
                        request: plan.describe(),
                        cause,
                    }));
                }
                Next::Done(Err(error)) => return PieceEnd::Done(Err(error)),
            };
        }
    }
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
        let scope = RequestScope::default();
        let scope = &scope;
        let deadline = self.request_deadline.map(|length| Deadline {
            at: Instant::now() + length,
            length,
        });
        if shards.len() == 1 {
            // One shard (every single-key request): run it in place, without
            // the per-shard task of `FuturesUnordered` and the move of the
            // shard's future into it.
            if let Some((shard, region)) = shards.pop() {
                let results = self
                    .run_shard(shard, region, permits, scope, deadline)
                    .await;
                return self.finish(results);
            }
        }
        let mut slots: Vec<Option<Vec<Result<P::Result>>>> = Vec::with_capacity(shards.len());
        slots.resize_with(shards.len(), || None);
        let mut running: FuturesUnordered<_> = shards
            .into_iter()
            .enumerate()
            .map(|(index, (shard, region))| async move {
                (
                    index,
                    self.run_shard(shard, region, permits, scope, deadline)
                        .await,
                )
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
