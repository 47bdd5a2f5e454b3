//! [`RetryableMultiRegion`]: the async shell around the shard retry engine
//! ([`ShardMachine`](crate::request::routing::engine::ShardMachine)). It shards the request,
//! runs each shard's machine, and performs what the machine decides: maps
//! stores, dispatches, sleeps, reshards, and applies cache and health
//! effects. It makes no routing decision of its own.

use std::collections::VecDeque;
use std::sync::Arc;

use async_trait::async_trait;
use futures::stream::{FuturesUnordered, StreamExt};
use tokio::sync::Semaphore;
use tokio::time::Instant;
use tracing::Instrument;

use super::liveness_probe;
use super::stage::{ShardStage, Stage};
use super::traits::{strongest_shard_error, HasRegionError, Plan, Shardable};
use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::region::RegionWithLeader;
use crate::request::routing::engine;
use crate::request::routing::policy::{Replay, RequestPolicy};
use crate::request::routing::replica::ReadFlags;
use crate::request::routing::state::{BusyVerdict, ProbeOutcome, RoutingState};
use crate::store::RegionStore;
use crate::{Error, Failure, Result};
use engine::scope::{Deadline, RequestScope};
use engine::{Event, Next, ShardMachine};

mod replica;
mod steps;

use steps::Target;

/// Shards a plan by Region and runs leader-first candidate rounds with voter
/// fallback for each shard ([routing.md, "One round, per
/// shard"](crate::spec::routing#one-round-per-shard)). Results come back in
/// shard order.
pub struct RetryableMultiRegion<P: Plan + Shardable, PdC: PdClient> {
    /// The per-shard plan.
    pub(crate) inner: P,
    /// PD and the caches.
    pub pd_client: Arc<PdC>,
    /// The retry schedule of each shard.
    pub backoff: Backoff,
    /// Client-wide routing state; `None` behaves per request like upstream.
    pub(crate) routing: Option<Arc<RoutingState>>,
    /// Replay safety, concurrency and time bounds, as the builder resolved
    /// them; each shard's engine gets a copy.
    pub(crate) policy: RequestPolicy,
    /// Keep every shard's result, errors included, instead of failing the
    /// request on the first error.
    pub preserve_region_results: bool,
}

impl<P: Plan + Shardable, PdC: PdClient> Clone for RetryableMultiRegion<P, PdC> {
    fn clone(&self) -> Self {
        RetryableMultiRegion {
            inner: self.inner.clone(),
            pd_client: Arc::clone(&self.pd_client),
            backoff: self.backoff.clone(),
            routing: self.routing.clone(),
            policy: self.policy,
            preserve_region_results: self.preserve_region_results,
        }
    }
}

/// Holds a concurrency permit (multi-shard requests) and the in-flight
/// gauge for one RPC.
struct InFlight<'a> {
    _permit: Option<tokio::sync::SemaphorePermit<'a>>,
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
    Done(Result<Box<P::Result>>),
    Split(Vec<(P::Shard, ShardMachine<'r>)>),
}

impl<P, PdC> RetryableMultiRegion<P, PdC>
where
    P: ShardStage,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    /// Sends the piece's request to a mapped candidate, behind the
    /// `before-dispatch` fail point. A multi-shard request holds one permit
    /// while the RPC is in flight; a single shard needs none. The request is
    /// the piece's own, built once: it is aimed at the candidate, not copied.
    /// Returns when the RPC was sent with its outcome.
    ///
    /// Written as an `async` block rather than an `async fn`, as are
    /// [`run_piece`](Self::run_piece) and [`run_shard`](Self::run_shard): an
    /// `async fn` keeps a second copy of its arguments in its future, and
    /// these futures nest (each holds the next), so the copies would add up
    /// on every request.
    #[allow(clippy::too_many_arguments, clippy::manual_async_fn)]
    fn dispatch_candidate<'a>(
        &'a self,
        plan: &'a mut P,
        target: Target,
        permits: Option<&'a Semaphore>,
        deadline_left: Option<std::time::Duration>,
        deadline: Option<Deadline>,
        forwarded: bool,
        now: &'a mut Instant,
    ) -> impl std::future::Future<Output = (Instant, Result<Box<P::Result>>)> + 'a {
        async move {
            if let Err(error) = target.aimed {
                return (*now, Err(error));
            }
            #[cfg(feature = "failpoints")]
            fail::fail_point!("tikv_plan::before_dispatch", |arg| (
                *now,
                Err(fail_point_error("dispatch", target.store_id, arg))
            ));
            let before_permit = *now;
            let permit = match permits {
                None => None,
                Some(permits) => match timed(now, permits.acquire()).await {
                    Ok(permit) => Some(permit),
                    Err(_) => {
                        return (
                            *now,
                            Err(Error::InternalError {
                                message: "the request's permit pool was closed".to_owned(),
                            }),
                        )
                    }
                },
            };
            let routing = self.routing.as_deref();
            if let Some(r) = routing {
                r.rpc_started();
            }
            let _in_flight = InFlight {
                _permit: permit,
                routing,
            };
            // Sent now, not when the shard started waiting for a permit (the
            // clock was read again if it waited): a timeout strike counts
            // RPCs sent one after another.
            let sent_at = *now;
            // What is left of the deadline once the permit is held. A
            // request whose deadline ran out while it waited for the permit
            // is not sent at all (with a zero bound it would end as a
            // timeout that may have reached the store, so a write would be
            // undetermined though nothing left the client).
            let deadline_left = deadline_left
                .map(|left| left.saturating_sub(now.saturating_duration_since(before_permit)));
            if deadline_left.is_some_and(|left| left.is_zero()) {
                let waited = Error::from(Failure::Timeout {
                    what: "a concurrency permit of the request (nothing was sent)".to_owned(),
                    after: now.saturating_duration_since(before_permit),
                });
                return (
                    *now,
                    Err(deadline_exceeded(target.region_id, waited, deadline)),
                );
            }
            // One bound, kept by the store client's own timer when the plan
            // passes it on (with a backstop here near the deadline), else by
            // a timer here.
            let bound = self.policy.rpc_bound(deadline_left);
            let own_timer = if plan.set_rpc_bound(bound.bound) {
                bound.backstop
            } else {
                bound.bound
            };
            // Pinned where it is made: a future bound to a local and then
            // moved into an await is kept twice in this future's state.
            let rpc = std::pin::pin!(plan.run_boxed());
            // Store liveness: an RPC unanswered for a while gets its store
            // probed, and gives up once the store is marked unreachable (a
            // write that must not be sent twice then ends undetermined).
            let watch = self.routing.as_ref().and_then(|r| {
                r.liveness_watch(target.store_id, forwarded)
                    .map(|watch| (watch, r))
            });
            let rpc = std::pin::pin!(async {
                match watch {
                    Some((watch, routing)) => {
                        liveness_probe::watched(rpc, watch, sent_at, routing, &self.pd_client).await
                    }
                    None => rpc.await,
                }
            });
            let result = match own_timer {
                None => timed(now, rpc).await,
                Some(bound) => match timed(now, tokio::time::timeout(bound, rpc)).await {
                    Ok(result) => result,
                    Err(_) => Err(Error::from(Failure::Timeout {
                        what: format!("the request to store {}", target.store_id),
                        after: bound,
                    })),
                },
            };
            (sent_at, result)
        }
    }

    /// Runs one shard to completion. A reload can split the shard; its
    /// pieces are answered in key order.
    // Not `async fn`: see `dispatch_candidate`.
    #[allow(clippy::too_many_arguments, clippy::manual_async_fn)]
    fn run_shard<'a>(
        &'a self,
        whole_plan: &'a P,
        shard: P::Shard,
        region: RegionWithLeader,
        whole: bool,
        permits: Option<&'a Semaphore>,
        scope: &'a RequestScope,
        deadline: Option<Deadline>,
    ) -> impl std::future::Future<Output = Vec<Result<P::Result>>> + 'a {
        async move {
            let mut results = Vec::with_capacity(1);
            // The shard itself, then the pieces a split left, in key order
            // (the queue allocates only when a split happens); a piece of a
            // split is never the whole request. The machine stays here, in
            // this future, and is lent to each piece's: it is large, and a
            // box of its own per request would cost an allocation.
            let mut machine =
                ShardMachine::new(region, self.backoff.clone(), self.policy, deadline, scope);
            let mut piece = Some((shard, whole));
            let mut pieces = VecDeque::new();
            while let Some((shard, whole)) = piece.take() {
                // Pinned in place: awaited as a temporary, the piece's
                // future would take its room twice in this one.
                let end = std::pin::pin!(self.run_piece(
                    whole_plan.for_shard(shard, whole),
                    whole_plan,
                    whole,
                    &mut machine,
                    permits,
                ))
                .await;
                match end {
                    PieceEnd::Done(result) => {
                        let stop = self.policy.terminal_on_undetermined
                            && matches!(&result, Err(e) if e.is_undetermined());
                        // Out of its box here, once, into its slot.
                        results.push(result.map(|answer| *answer));
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
                if let Some((shard, next)) = pieces.pop_front() {
                    machine = next;
                    piece = Some((shard, false));
                }
            }
            results
        }
    }

    /// Drives one piece's machine: performs its effects and steps until it
    /// is done or must be split. `plan` is the piece's request, built once
    /// from the whole plan and re-aimed at each candidate.
    // Not `async fn`: see `dispatch_candidate`.
    #[allow(clippy::manual_async_fn)]
    fn run_piece<'a, 'm>(
        &'a self,
        mut plan: P,
        whole_plan: &'a P,
        whole: bool,
        machine: &'m mut ShardMachine<'a>,
        permits: Option<&'a Semaphore>,
    ) -> impl std::future::Future<Output = PieceEnd<'a, P>> + 'm
    where
        'a: 'm,
    {
        async move {
            let mut event = Event::Start;
            let mut store: Option<Target> = None;
            // Whether the mapped store is reached through a proxy.
            let mut forwarded = false;
            let mut response: Option<Box<P::Result>> = None;
            // The clock, read again only after a step that had to wait (see
            // `timed`): once per attempt on the fast path, after the RPC.
            let mut now = Instant::now();
            // A read that may leave the leader asks a replica first, once;
            // the leader attempts after it carry no read flags. Only a
            // request that may be sent again does (a write given a read
            // mode by a plan of the caller's stays with the leader). Boxed:
            // only such reads pay for its room.
            let mut read_flags = ReadFlags::AsBuilt;
            if self.policy.read.leaves_leader() && self.policy.replay == Replay::Resend {
                let region = machine.region().clone();
                let deadline = machine.deadline();
                let replica =
                    Box::pin(self.try_replica(&mut plan, &region, permits, deadline, &mut now));
                if let Some(answer) = replica.await {
                    return PieceEnd::Done(Ok(answer));
                }
                read_flags = ReadFlags::Leader;
            }
            loop {
                let next = machine.handle(event, now);
                for effect in machine.drain_effects() {
                    timed(&mut now, self.perform(effect)).await;
                }
                event = match next {
                    Next::CheckLeaderStore(store_id) => match self.routing.as_deref() {
                        None => Event::LeaderStore {
                            unreachable: false,
                            proxy: None,
                        },
                        Some(r) => Event::LeaderStore {
                            unreachable: r.is_store_unreachable(store_id),
                            proxy: r.proxy_for(store_id),
                        },
                    },
                    Next::Map { peer, via } => {
                        forwarded = via.is_some();
                        let mapped = match self.cached_client(peer.store_id, via) {
                            Err(error) => Err(error),
                            // The usual case, the store's client cached: the
                            // machine lends its Region to aim the request
                            // and has it back before its next step, so the
                            // Region is not copied.
                            Ok(Some(client)) => {
                                let mut mapped =
                                    RegionStore::new(machine.lend_region(), peer, client);
                                mapped.read = read_flags;
                                let target = Target::aim(&mut plan, &mapped);
                                machine.return_region(mapped.region_with_leader);
                                Ok(target)
                            }
                            Ok(None) => {
                                let mapping = std::pin::pin!(self.look_up_candidate(
                                    machine.region(),
                                    peer,
                                    via,
                                    machine.deadline()
                                ));
                                let mapping = InSpan {
                                    fut: mapping,
                                    span: machine.attempt_span(),
                                };
                                timed(&mut now, mapping).await.map(|mut mapped| {
                                    mapped.read = read_flags;
                                    Target::aim(&mut plan, &mapped)
                                })
                            }
                        };
                        match mapped {
                            Ok(target) => {
                                store = Some(target);
                                Event::Mapped
                            }
                            Err(error) => Event::MappingFailed(error),
                        }
                    }
                    Next::Dispatch { bound } => {
                        let (sent_at, result) = match store.take() {
                            Some(target) => {
                                // Pinned in place and polled in the attempt's
                                // span through a reference: the RPC's future
                                // is not moved again into a wrapper.
                                let rpc = std::pin::pin!(self.dispatch_candidate(
                                    &mut plan,
                                    target,
                                    permits,
                                    bound,
                                    machine.deadline(),
                                    forwarded,
                                    &mut now
                                ));
                                InSpan {
                                    fut: rpc,
                                    span: machine.attempt_span(),
                                }
                                .await
                            }
                            None => (
                                now,
                                Err(Error::InternalError {
                                    message: "the retry engine dispatched before mapping a store"
                                        .to_owned(),
                                }),
                            ),
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
                        timed(&mut now, tokio::time::sleep(delay)).await;
                        Event::Slept
                    }
                    // Split again by Region from the piece's own request (the
                    // only copy of its payload is the new pieces').
                    Next::Reshard => match timed(
                        &mut now,
                        by_deadline(machine.deadline(), plan.shards(&self.pd_client)),
                    )
                    .await
                    {
                        None => {
                            let region_id = machine.region().id();
                            Event::ReshardFailed(deadline_exceeded(
                                region_id,
                                pd_cut_off(
                                    format!("reloading region {region_id}"),
                                    machine.deadline(),
                                ),
                                machine.deadline(),
                            ))
                        }
                        Some(Err(error)) => Event::ReshardFailed(error),
                        Some(Ok(mut new)) if new.len() == 1 => match new.pop() {
                            Some((reloaded_shard, region)) => {
                                plan = whole_plan.for_shard(reloaded_shard, whole);
                                Event::Resharded(region)
                            }
                            None => Event::ReshardFailed(Error::InternalError {
                                message: "a reshard lost its only piece".to_owned(),
                            }),
                        },
                        Some(Ok(new)) if new.is_empty() => {
                            Event::ReshardFailed(Error::InternalError {
                                message: format!(
                                    "reloading region {} left no Region for its keys",
                                    machine.region().id()
                                ),
                            })
                        }
                        Some(Ok(new)) => {
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
                        None => Event::BusyVerdict(BusyVerdict::Ordinary),
                    },
                    Next::WaitForProbe(waiter, bound) => Event::ProbeWaited(match bound {
                        None => timed(&mut now, waiter.outcome()).await,
                        Some(bound) => {
                            timed(&mut now, tokio::time::timeout(bound, waiter.outcome()))
                                .await
                                .unwrap_or(ProbeOutcome::Inconclusive)
                        }
                    }),
                    Next::Done(Ok(())) => {
                        return PieceEnd::Done(response.take().ok_or_else(|| {
                            Error::InternalError {
                                message: "the retry engine accepted no response".to_owned(),
                            }
                        }))
                    }
                    Next::Done(Err(error)) => {
                        // Name the request (its keys or range) for the caller.
                        if let Some(Failure::Undetermined {
                            region_id,
                            store_id,
                            cause,
                            ..
                        }) = error.failure()
                        {
                            return PieceEnd::Done(Err(Error::from(Failure::Undetermined {
                                region_id: *region_id,
                                store_id: *store_id,
                                request: plan.describe(),
                                cause: Box::new(cause.duplicate()),
                            })));
                        }
                        return PieceEnd::Done(Err(error));
                    }
                };
            }
        }
    }
}

#[async_trait]
impl<P, PdC> Plan for RetryableMultiRegion<P, PdC>
where
    P: ShardStage,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    type Result = Vec<Result<P::Result>>;

    async fn execute(&self) -> Result<Self::Result> {
        self.run_shards().await
    }
}

impl<P, PdC> Stage for RetryableMultiRegion<P, PdC>
where
    P: ShardStage,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    /// The retrying future, boxed: it is large (every shard's state), and
    /// the stages that wrap it (merge, process) then hold a pointer, not a
    /// copy of it moved into each of their futures. The box is allocated
    /// before the future is made, so the future is written straight into it
    /// (`Box::pin` would make it on the stack first and copy it over).
    fn run(&self) -> impl std::future::Future<Output = Result<Self::Result>> + Send + '_ {
        Box::into_pin(Box::write(Box::new_uninit(), self.run_shards()))
    }
}

impl<P, PdC> RetryableMultiRegion<P, PdC>
where
    P: ShardStage,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    /// What [`execute`](Plan::execute) and [`Stage::run`] do, as a future
    /// of its own type: a client's call awaits it inside its other stages'
    /// futures, without the box (and the copy of this future into it) that
    /// the trait method costs. It runs in the request's `request` span.
    fn run_shards(
        &self,
    ) -> impl std::future::Future<Output = Result<Vec<Result<P::Result>>>> + Send + '_ {
        let span = tracing::debug_span!(
            "request",
            method = self.inner.label(),
            regions = tracing::field::Empty,
            outcome = tracing::field::Empty
        );
        async move {
            let scope = &RequestScope::new(self.inner.label());
            // The plan's own deadline, cut to the client call's when the
            // plan runs inside one (a scan's pages, a commit's phases):
            // then the deadline's length is what was left of the call's.
            let now = Instant::now();
            let own = self.policy.deadline.map(|length| now + length);
            let at = match (own, super::call_deadline::current()) {
                (Some(own), Some(call)) => Some(own.min(call)),
                (own, call) => own.or(call),
            };
            let deadline = at.map(|at| Deadline {
                at,
                length: at.saturating_duration_since(now),
            });
            let shards = match self.inner.cached_shards(&*self.pd_client) {
                Some(shards) => Ok(shards),
                // Finding the Regions (PD calls, possibly to a PD that does
                // not answer) counts against the request's deadline too.
                None => match by_deadline(deadline, self.inner.shards(&self.pd_client)).await {
                    Some(shards) => shards,
                    // No Region is known yet: region 0 in the error.
                    None => Err(deadline_exceeded(
                        0,
                        pd_cut_off(
                            format!("finding the Regions of the {} request", self.inner.label()),
                            deadline,
                        ),
                        deadline,
                    )),
                },
            };
            let mut shards = scope.observer.sharded(shards, RegionWithLeader::id)?;
            // Each shard's request is built from the whole plan and the
            // shard's own payload (`ShardStage::for_shard`), never from a
            // copy of the whole request.
            let whole_plan = &self.inner;
            if shards.len() == 1 {
                // One shard (every single-key request): run it in place, without
                // the per-shard task of `FuturesUnordered`, the move of the
                // shard's future into it, and the concurrency bound (its pieces
                // run one after another).
                if let Some((shard, region)) = shards.pop() {
                    // Pinned in place (see `run_shard`).
                    let results = std::pin::pin!(
                        self.run_shard(whole_plan, shard, region, true, None, scope, deadline)
                    )
                    .await;
                    return self.finish(results);
                }
            }
            let permits = Semaphore::new(self.policy.concurrency());
            let permits = Some(&permits);
            let mut slots: Vec<Option<Vec<Result<P::Result>>>> = Vec::with_capacity(shards.len());
            slots.resize_with(shards.len(), || None);
            let mut running: FuturesUnordered<_> = shards
                .into_iter()
                .enumerate()
                .map(|(index, (shard, region))| async move {
                    let shard =
                        std::pin::pin!(self
                            .run_shard(whole_plan, shard, region, false, permits, scope, deadline));
                    (index, shard.await)
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
        .instrument(span)
    }
}

impl<P, PdC> RetryableMultiRegion<P, PdC>
where
    P: ShardStage,
    P::Result: HasRegionError,
    PdC: PdClient,
{
    /// With `terminal_on_undetermined`, fails with the first undetermined
    /// outcome among `results` (taking it out); otherwise does nothing.
    fn return_undetermined(&self, results: &mut Vec<Result<P::Result>>) -> Result<()> {
        if self.policy.terminal_on_undetermined {
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

/// `fut`, cut off at the request's deadline (if it has one): `None` when
/// the deadline came first. For the shell's waits on PD, which the
/// machine's own deadline checks, made between steps, cannot end.
async fn by_deadline<F: std::future::Future>(
    deadline: Option<Deadline>,
    fut: F,
) -> Option<F::Output> {
    match deadline {
        None => Some(fut.await),
        Some(deadline) => tokio::time::timeout_at(deadline.at, fut).await.ok(),
    }
}

/// A wait for PD that `by_deadline` cut off: what it was waiting for, and
/// the deadline's length.
fn pd_cut_off(what: String, deadline: Option<Deadline>) -> Error {
    Error::from(Failure::Timeout {
        what: format!("{what} in PD"),
        after: deadline.map(|d| d.length).unwrap_or_default(),
    })
}

/// The request's deadline ran out in Region `region_id` (0: before any
/// Region was known), `last` the error it ended on.
fn deadline_exceeded(region_id: u64, last: Error, deadline: Option<Deadline>) -> Error {
    Error::from(Failure::DeadlineExceeded {
        region_id,
        deadline: deadline.map(|d| d.length).unwrap_or_default(),
        last: Box::new(last),
    })
}

/// Awaits `fut`, and reads the clock into `now` again only if `fut` had to
/// wait (was pending at least once): a step that finished at once took no
/// time worth a clock read (under tokio's paused clock, none at all). The
/// retry loop so reads the clock once per attempt on the fast path (after
/// the RPC), instead of once per step. A future of its own rather than an
/// `async fn`, which would hold `fut` twice (argument and pinned local).
fn timed<F: std::future::Future>(now: &mut Instant, fut: F) -> Timed<'_, F> {
    Timed {
        fut,
        now,
        waited: false,
    }
}

pin_project_lite::pin_project! {
    /// The future of [`timed`].
    struct Timed<'n, F> {
        #[pin]
        fut: F,
        now: &'n mut Instant,
        waited: bool,
    }
}

impl<F: std::future::Future> std::future::Future for Timed<'_, F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.project();
        match this.fut.poll(cx) {
            std::task::Poll::Pending => {
                *this.waited = true;
                std::task::Poll::Pending
            }
            std::task::Poll::Ready(output) => {
                if *this.waited {
                    **this.now = Instant::now();
                }
                std::task::Poll::Ready(output)
            }
        }
    }
}

/// Polls a pinned future inside `span` (entered for each poll), as
/// `Instrumented` does, but holding the future by reference: wrapping it
/// does not move it.
struct InSpan<'a, F> {
    fut: std::pin::Pin<&'a mut F>,
    span: &'a tracing::Span,
}

impl<F: std::future::Future> std::future::Future for InSpan<'_, F> {
    type Output = F::Output;

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        let this = self.get_mut();
        let _entered = this.span.enter();
        this.fut.as_mut().poll(cx)
    }
}

/// The error a fail point injects (see the module docs for the arguments).
#[cfg(feature = "failpoints")]
fn fail_point_error(stage: &str, store_id: u64, arg: Option<String>) -> Error {
    let what = arg.unwrap_or_default();
    match what.as_str() {
        "timeout" => Error::from(tonic::Status::deadline_exceeded(format!(
            "fail point before {stage} to store {store_id}"
        ))),
        "fatal" => Error::from(tonic::Status::invalid_argument(format!(
            "fail point before {stage} to store {store_id}"
        ))),
        _ if stage == "mapping" => Error::from(Failure::Connect {
            address: format!("store {store_id}"),
            message: "fail point before store mapping".to_owned(),
            source: None,
        }),
        _ => Error::from(tonic::Status::unavailable(format!(
            "fail point before {stage} to store {store_id}"
        ))),
    }
}
