//! The retry engine of one shard, as a pure state machine (sans-IO, in the
//! spirit of quinn-proto).
//!
//! [`ShardMachine`] owns the whole retry state of a shard: the Region it
//! routes to, the backoff budget and attempt count, the current candidate
//! round, the per-shard busy count and the busy probe it runs. The async
//! shell ([`RetryableMultiRegion`](crate::request::RetryableMultiRegion)) feeds it
//! [`Event`]s (a store was mapped, a candidate answered, a sleep finished,
//! ...) and does what it answers: the next I/O step as a [`Next`], and the
//! cache and health work as [`Effect`]s, drained in order before the step.
//! Every routing decision is made here, synchronously; the shell has no
//! routing `if` of its own.
//!
//! The transitions, in one place:
//!
//! | state | event | next |
//! |---|---|---|
//! | new round | (cached leader known, not probing) | [`Next::CheckLeaderStore`] |
//! | new round | [`Event::LeaderStore`] / none needed | `Map` the first candidate (the leader through a remembered proxy first), or end the round |
//! | mapping a candidate | [`Event::Mapped`] | [`Next::Dispatch`] |
//! | mapping a candidate | [`Event::MappingFailed`] | next candidate (store dropped; a TiFlash store is skipped, kept) |
//! | RPC in flight | [`Event::Answered`] without Region error | [`Next::Done`] (leader cache set first) |
//! | RPC in flight | [`Event::Answered`] with a Region error | next candidate, or the Region-error table |
//! | RPC in flight | [`Event::DispatchFailed`] | next candidate, or fail (fatal / undetermined) |
//! | round exhausted | — | reload if the round says so, then `Sleep` or give up |
//! | busy(0) from the leader | — | [`Next::ReportBusy`] (shared) or the local count |
//! | busy verdict | [`Event::BusyVerdict`] | probe round, wait for another's probe, or back off |
//! | sleeping | [`Event::Slept`] | [`Next::Reshard`] |
//! | resharding | [`Event::Resharded`] | new round on the reloaded Region |
//!
//! The decisions this crate makes where [routing.md](crate::spec::routing)
//! leaves room are listed in the [`request`](crate::request) module docs, "Decisions".
//!
//! This file is long because it is the whole retry state machine of a shard:
//! every routing decision in one place, by design
//! ([routing.md](crate::spec::routing)); its table tests are in
//! `engine_tests.rs`.

use std::time::Duration;

use smallvec::SmallVec;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::proto::{errorpb, metapb};
use crate::region::store_engine::store_unreached;
use crate::region::{CandidateOrder, RegionVerId, RegionWithLeader, StoreId};
use crate::Error;

use super::policy::RequestPolicy;
use super::region_error::{RegionErrorAction, RegionErrorStep};
use super::round::{BusyProbeCount, CandidateRound, CandidateStep};
use super::state::{BusyVerdict, ProbeOutcome, ProbeTicket, ProbeWaiter};
use crate::classify::{classify_dispatch_error, DispatchFailure};
use crate::telemetry::Counter;
use crate::Failure;

mod budget;
pub(crate) mod scope;
use budget::ElectionWait;
use scope::{Deadline, RequestScope};

/// What happened, fed to [`ShardMachine::handle`].
#[derive(Debug)]
pub(crate) enum Event {
    /// Start the shard (or a piece split off it).
    Start,
    /// Answer to [`Next::CheckLeaderStore`]: is the cached leader's store
    /// cooling down?
    LeaderStore {
        /// True when store health marks it unreachable.
        unreachable: bool,
        /// The store that proxies requests to it, while this client
        /// reaches it only that way (forwarding).
        proxy: Option<StoreId>,
    },
    /// The candidate's store was mapped: dispatch.
    Mapped,
    /// The candidate's store could not be mapped.
    MappingFailed(Error),
    /// The candidate answered; a Region error, if any, taken out of the
    /// response (the shell keeps the response).
    Answered {
        /// The Region error it carried (boxed: the fast path has none, and
        /// the event stays small).
        region_error: Option<Box<errorpb::Error>>,
        /// When the RPC was sent.
        sent_at: Instant,
    },
    /// The RPC failed before any response.
    DispatchFailed {
        /// The error.
        error: Error,
        /// When the RPC was sent (a timeout strike counts only for an RPC
        /// sent after the store's previous strike).
        sent_at: Instant,
    },
    /// A [`Next::Sleep`] is over.
    Slept,
    /// Answer to [`Next::ReportBusy`].
    BusyVerdict(BusyVerdict),
    /// Answer to [`Next::WaitForProbe`].
    ProbeWaited(ProbeOutcome),
    /// Answer to [`Next::Reshard`] when the piece still covers one Region.
    Resharded(RegionWithLeader),
    /// [`Next::Reshard`] failed (the caches could not be reloaded).
    ReshardFailed(Error),
}

/// The next I/O step for the shell.
#[derive(Debug)]
pub(crate) enum Next {
    /// Ask store health whether this store is cooling down; answer with
    /// [`Event::LeaderStore`].
    CheckLeaderStore(StoreId),
    /// Map this peer to its store, or (`via`) the cached leader to a
    /// client of the store that forwards to the leader's; answer with
    /// [`Event::Mapped`] or [`Event::MappingFailed`].
    Map {
        /// The candidate.
        peer: metapb::Peer,
        /// The store that forwards to it, when it is reached so.
        via: Option<StoreId>,
    },
    /// Send the shard to the store just mapped, within `bound` (the time
    /// left before the request's deadline, if it has one; the shell takes the
    /// smaller of it and the RPC timeout); answer with [`Event::Answered`]
    /// or [`Event::DispatchFailed`].
    Dispatch {
        /// The time left before the request's deadline.
        bound: Option<Duration>,
    },
    /// Sleep, then answer [`Event::Slept`].
    Sleep(Duration),
    /// Split the piece again from the caches; answer with
    /// [`Event::Resharded`] (one Region), [`Event::ReshardFailed`], or split
    /// the piece with [`ShardMachine::fork`].
    Reshard,
    /// Record a `ServerIsBusy(0)` in the shared suspicion; answer with
    /// [`Event::BusyVerdict`].
    ReportBusy {
        /// The Region.
        region_id: u64,
        /// The cached leader that answered busy.
        leader_peer_id: u64,
        /// False once the request ran its one probe.
        may_probe: bool,
    },
    /// Wait for another request's probe of this Region, at most `bound`
    /// (the time left before the deadline); answer with
    /// [`Event::ProbeWaited`] (inconclusive when the bound ran out).
    WaitForProbe(ProbeWaiter, Option<Duration>),
    /// The shard is finished: `Ok` returns the response of the candidate
    /// that just answered, `Err` this error.
    Done(Result<(), Error>),
}

/// Cache, health and counter work, performed by the shell in order.
#[derive(Debug)]
pub(crate) enum Effect {
    /// Drop the store's cache entry and connection (counted).
    InvalidateStore(StoreId),
    /// Drop this version of the Region from the cache (counted).
    InvalidateRegion(RegionVerId),
    /// Insert Regions newer than the cache (from `EpochNotMatch`); done
    /// before the stale one is dropped, so the cached leader carries over.
    InsertRegions(Vec<metapb::Region>),
    /// Set the Region's cached leader.
    UpdateLeader(RegionVerId, metapb::Peer),
    /// The store could not be reached: it cools down.
    StoreFailed(StoreId),
    /// The store timed out an RPC sent at `sent_at`.
    StoreTimedOut {
        /// The store.
        store_id: StoreId,
        /// When the RPC was sent.
        sent_at: Instant,
    },
    /// The store answered an RPC sent at `sent_at`.
    StoreAnswered {
        /// The store.
        store_id: StoreId,
        /// When the RPC was sent.
        sent_at: Instant,
    },
    /// Bump a routing counter.
    Count(Counter),
    /// A request reached `target` through `proxy`: every request to
    /// `target` goes that way from now on.
    ProxyWorked {
        /// The store this client cannot reach.
        target: StoreId,
        /// The store that forwarded.
        proxy: StoreId,
    },
    /// `proxy` did not get a request through to `target`.
    ProxyFailed {
        /// The store this client cannot reach.
        target: StoreId,
        /// The store that was to forward.
        proxy: StoreId,
    },
    /// The busy probe round ended: tell the waiters.
    FinishProbe(ProbeTicket, ProbeOutcome),
}

/// The effects of one transition; four fit without allocating.
pub(crate) type Effects = SmallVec<[Effect; 4]>;

/// The busy probe a shard is running.
#[derive(Debug)]
enum Probe {
    /// The shared suspicion granted the probe of the Region.
    Shared(ProbeTicket),
    /// The per-shard count decided (no shared suspicion).
    Local,
}

/// Where the machine is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Before the first event, or waiting for a new round to start.
    Idle,
    /// Asked whether the leader's store cools down.
    CheckingLeaderStore,
    /// Mapping the current candidate.
    Mapping,
    /// The current candidate's RPC is in flight.
    Dispatching,
    /// Sleeping between rounds.
    Sleeping,
    /// Reloading the piece's Region(s).
    Resharding,
    /// Asked the shared suspicion about a busy(0) answer.
    ReportingBusy,
    /// Waiting for another request's probe.
    WaitingForProbe,
    /// Finished.
    Done,
}

/// The retry state of one shard (or of a piece a split left), and its one
/// transition function, [`handle`](ShardMachine::handle).
#[derive(Debug)]
pub(crate) struct ShardMachine<'r> {
    region: RegionWithLeader,
    backoff: Backoff,
    /// Rounds that found no leader sleep on this instead of `backoff`.
    election: ElectionWait,
    /// Attempts made so far (1 for the first round; each spent backoff step
    /// or immediate retry adds one).
    attempts: u32,
    policy: RequestPolicy,
    deadline: Option<Deadline>,
    /// The time of the event being handled.
    now: Instant,
    request: &'r RequestScope,
    busy: BusyProbeCount,
    probe: Option<Probe>,
    round: CandidateRound,
    /// The candidate being mapped or dispatched.
    current: Option<metapb::Peer>,
    /// An attempt may have reached a store without an answer coming back
    /// (for commit points): `(region, store, what interrupted it)`.
    maybe_delivered: Option<(u64, StoreId)>,
    /// The server's minimum delay and the Region error that asked for a
    /// backoff, kept while a busy verdict or another request's probe is
    /// awaited.
    pending_backoff: Option<(Option<Duration>, Box<errorpb::Error>)>,
    phase: Phase,
    /// The cached leader the last round could not reach before the Region
    /// was reloaded; when PD names it again, the next round may forward to
    /// it through a voter that names no leader.
    unreachable_leader: Option<u64>,
    /// The round about to start is on a Region PD reloaded still naming
    /// the leader this client could not reach.
    pd_names_leader: bool,
    effects: Effects,
    /// The span of the attempt in flight (mapping and RPC).
    attempt_span: tracing::Span,
}

impl<'r> ShardMachine<'r> {
    /// A machine for a shard on `region`, with the shard's whole retry
    /// budget.
    pub(crate) fn new(
        region: RegionWithLeader,
        backoff: Backoff,
        policy: RequestPolicy,
        deadline: Option<Deadline>,
        request: &'r RequestScope,
    ) -> Self {
        ShardMachine {
            region,
            backoff,
            election: ElectionWait::new(policy.leaderless_wait.unwrap_or_default()),
            attempts: 1,
            policy,
            deadline,
            now: deadline.map_or_else(Instant::now, |d| d.at - d.length),
            request,
            busy: BusyProbeCount::default(),
            probe: None,
            round: CandidateRound::new(CandidateOrder::LeaderFirst),
            current: None,
            maybe_delivered: None,
            pending_backoff: None,
            phase: Phase::Idle,
            unreachable_leader: None,
            pd_names_leader: false,
            effects: Effects::new(),
            attempt_span: tracing::Span::none(),
        }
    }

    /// A machine for a piece split off this one onto `region`: the same
    /// remaining budget and busy count (one probe per request, splits
    /// included).
    pub(crate) fn fork(&self, region: RegionWithLeader) -> ShardMachine<'r> {
        ShardMachine {
            region,
            backoff: self.backoff.clone(),
            election: self.election.clone(),
            attempts: self.attempts,
            policy: self.policy,
            deadline: self.deadline,
            now: self.now,
            request: self.request,
            busy: self.busy.clone(),
            probe: None,
            round: CandidateRound::new(CandidateOrder::LeaderFirst),
            current: None,
            maybe_delivered: self.maybe_delivered,
            pending_backoff: None,
            phase: Phase::Idle,
            unreachable_leader: None,
            pd_names_leader: false,
            effects: Effects::new(),
            attempt_span: tracing::Span::none(),
        }
    }

    /// The span of the attempt in flight, for the shell to run its store
    /// mapping and RPC in.
    pub(crate) fn attempt_span(&self) -> &tracing::Span {
        &self.attempt_span
    }

    /// The request's deadline, if it has one: the shell cuts its own waits
    /// (PD lookups) off there.
    pub(crate) fn deadline(&self) -> Option<Deadline> {
        self.deadline
    }

    /// The Region the current round routes to.
    pub(crate) fn region(&self) -> &RegionWithLeader {
        &self.region
    }

    /// Lends the shard's Region (to aim a request at a candidate without a
    /// copy); until [`return_region`](Self::return_region) the machine holds
    /// an empty one, so nothing else may be asked of it in between.
    pub(crate) fn lend_region(&mut self) -> RegionWithLeader {
        std::mem::take(&mut self.region)
    }

    /// Takes back the Region [`lend_region`](Self::lend_region) lent.
    pub(crate) fn return_region(&mut self, region: RegionWithLeader) {
        self.region = region;
    }

    /// The effects of the last transition, in the order to perform them,
    /// taken out in place.
    pub(crate) fn drain_effects(&mut self) -> smallvec::Drain<'_, [Effect; 4]> {
        self.effects.drain(..)
    }

    /// The one transition function: what happened in, the next step out
    /// (effects are left in [`drain_effects`](ShardMachine::drain_effects)).
    /// An event that does not fit the current phase is a bug of the shell
    /// and ends the shard with an internal error.
    pub(crate) fn handle(&mut self, event: Event, now: Instant) -> Next {
        self.now = now;
        match (self.phase, event) {
            (Phase::Idle, Event::Start) => self.begin_round(),
            (Phase::CheckingLeaderStore, Event::LeaderStore { unreachable, proxy }) => {
                let order = if unreachable {
                    CandidateOrder::LeaderLast
                } else {
                    CandidateOrder::LeaderFirst
                };
                let pd_names_leader = std::mem::take(&mut self.pd_names_leader);
                self.round = self
                    .new_round(order)
                    .leader_unreachable(unreachable)
                    .pd_names_leader(pd_names_leader)
                    .through(proxy);
                self.next_candidate()
            }
            (Phase::Mapping, Event::Mapped) => {
                if self.time_left() == Some(Duration::ZERO) {
                    // Mapping took the rest of the time: nothing is sent.
                    self.end_attempt("deadline_exceeded");
                    self.current = None;
                    return self.end_at_deadline();
                }
                self.phase = Phase::Dispatching;
                Next::Dispatch {
                    bound: self.time_left(),
                }
            }
            (Phase::Mapping, Event::MappingFailed(error)) => self.on_mapping_failed(error),
            (
                Phase::Dispatching,
                Event::Answered {
                    region_error,
                    sent_at,
                },
            ) => self.on_answered(region_error, sent_at),
            (Phase::Dispatching, Event::DispatchFailed { error, sent_at }) => {
                self.on_dispatch_failed(error, sent_at)
            }
            (Phase::Sleeping, Event::Slept) => {
                self.phase = Phase::Resharding;
                Next::Reshard
            }
            (Phase::Resharding, Event::Resharded(region)) => {
                let unreachable = self.unreachable_leader.take();
                self.pd_names_leader =
                    unreachable.is_some() && region.leader.map(|l| l.id) == unreachable;
                self.region = region;
                self.begin_round()
            }
            (Phase::Resharding, Event::ReshardFailed(error)) => self.done(Err(error)),
            (Phase::ReportingBusy, Event::BusyVerdict(verdict)) => self.on_busy_verdict(verdict),
            (Phase::WaitingForProbe, Event::ProbeWaited(outcome)) => {
                // The prober's answer is everyone's: a found leader is in
                // the cache, so the next round goes there without sleeping.
                self.back_off_after_busy(outcome != ProbeOutcome::FoundLeader)
            }
            (phase, event) => self.done(Err(Error::InternalError {
                message: format!(
                    "the retry engine of region {} got {event:?} while {phase:?}",
                    self.region.id()
                ),
            })),
        }
    }

    fn done(&mut self, result: Result<(), Error>) -> Next {
        // A commit point that may have been applied by an earlier attempt
        // has no definite failure: the outcome is unknown.
        let result = match (result, self.maybe_delivered) {
            (Err(cause), Some((region_id, store_id)))
                if self.policy.commit_point() && !cause.is_undetermined() =>
            {
                Err(Error::from(Failure::Undetermined {
                    region_id,
                    store_id,
                    request: String::new(),
                    cause: Box::new(cause),
                }))
            }
            (result, _) => result,
        };
        self.request
            .observer
            .shard_done(result.as_ref().map(|_| ()));
        if matches!(&result, Err(e) if e.is_undetermined()) {
            self.effects.push(Effect::Count(Counter::Undetermined));
        }
        self.phase = Phase::Done;
        Next::Done(result)
    }

    /// The time left before the deadline (`None`: no deadline).
    fn time_left(&self) -> Option<Duration> {
        self.deadline
            .map(|d| d.at.saturating_duration_since(self.now))
    }

    /// Ends the round and the shard at the deadline, with the round's
    /// strongest error.
    fn end_at_deadline(&mut self) -> Next {
        let round = std::mem::replace(
            &mut self.round,
            CandidateRound::new(CandidateOrder::LeaderFirst),
        );
        self.finish_probe(ProbeOutcome::Inconclusive);
        self.deadline_exceeded(round.finish(&self.region).strongest)
    }

    /// Ends the shard because the deadline ran out, with the strongest
    /// error seen.
    fn deadline_exceeded(&mut self, last: Error) -> Next {
        let region_id = self.region.id();
        let deadline = self.deadline.map(|d| d.length).unwrap_or_default();
        self.done(Err(Error::from(Failure::DeadlineExceeded {
            region_id,
            deadline,
            last: Box::new(last),
        })))
    }

    /// A new round: the probe round (followers only), or the normal one,
    /// whose order depends on the health of the cached leader's store.
    fn begin_round(&mut self) -> Next {
        if self.probe.is_some() {
            return self.start_round(CandidateOrder::FollowersOnly);
        }
        match self.region.leader {
            Some(leader) => {
                self.phase = Phase::CheckingLeaderStore;
                Next::CheckLeaderStore(leader.store_id)
            }
            None => self.start_round(CandidateOrder::LeaderFirst),
        }
    }

    fn start_round(&mut self, order: CandidateOrder) -> Next {
        self.round = self.new_round(order);
        self.next_candidate()
    }

    /// A round in `order`, forwarding when the request may (the busy probe
    /// never targets the leader, forwarded or not).
    fn new_round(&self, order: CandidateOrder) -> CandidateRound {
        CandidateRound::new(order)
            .forwarding(self.policy.forwarding && order != CandidateOrder::FollowersOnly)
    }

    fn next_candidate(&mut self) -> Next {
        if self.time_left() == Some(Duration::ZERO) {
            return self.end_at_deadline();
        }
        let Some(peer) = self.round.next_candidate(&self.region) else {
            return self.round_exhausted();
        };
        let is_leader = self.round.current_is_cached_leader(&self.region);
        let via = self.round.current_via();
        self.attempt_span = crate::telemetry::attempt_span(
            self.request.observer.method(),
            self.region.id(),
            &peer,
            self.attempts,
            is_leader,
        );
        if let Some(proxy) = via {
            crate::telemetry::attempt_via(&self.attempt_span, proxy);
        }
        tracing::debug!(
            parent: &self.attempt_span,
            "region {}: trying peer {} on store {} ({}{})",
            self.region.id(),
            peer.id,
            peer.store_id,
            if is_leader {
                "cached leader"
            } else {
                "fallback"
            },
            via.map(|p| format!(", forwarded through store {p}"))
                .unwrap_or_default()
        );
        if !is_leader {
            self.effects.push(Effect::Count(Counter::FallbackAttempt));
        }
        self.current = Some(peer);
        self.phase = Phase::Mapping;
        if via.is_some() {
            self.effects.push(Effect::Count(Counter::Forwarded));
        }
        Next::Map { peer, via }
    }

    /// The attempt in flight ended with `outcome` (its span closes).
    fn end_attempt(&mut self, outcome: &'static str) {
        let store_id = self.current_store();
        crate::telemetry::attempt_end(&mut self.attempt_span, store_id, outcome);
    }

    fn current_store(&self) -> StoreId {
        self.current.map(|p| p.store_id).unwrap_or_default()
    }

    fn on_mapping_failed(&mut self, error: Error) -> Next {
        if self.time_left() == Some(Duration::ZERO) {
            // The shell cut the store lookup off at the deadline (PD was
            // slow, not the store): no cool-down, no invalidation; the
            // shard ends here.
            self.end_attempt("deadline_exceeded");
            self.current = None;
            self.round = CandidateRound::new(CandidateOrder::LeaderFirst);
            self.finish_probe(ProbeOutcome::Inconclusive);
            return self.deadline_exceeded(error);
        }
        let store_id = self.current_store();
        self.end_attempt(crate::telemetry::mapping_failure(&error));
        if matches!(error.failure(), Some(Failure::ConnectTimeout { .. })) {
            self.effects.push(Effect::Count(Counter::ConnectTimeout));
        }
        tracing::debug!(
            "region {}: mapping store {store_id} failed: {error}",
            self.region.id()
        );
        // Every mapping failure moves on (the request was not sent); only a
        // failure to reach the store itself makes it cool down. Through a
        // proxy, the route failed: the next voter naming the leader proxies.
        if let Some(proxy) = self.round.current_via() {
            self.effects.push(Effect::ProxyFailed {
                target: store_id,
                proxy,
            });
        } else if store_unreached(&error) {
            self.effects.push(Effect::StoreFailed(store_id));
        }
        let step = self.round.on_mapping_failed(&self.region, error);
        self.after_candidate(step)
    }

    fn on_dispatch_failed(&mut self, error: Error, sent_at: Instant) -> Next {
        let store_id = self.current_store();
        let failure = classify_dispatch_error(&error);
        self.end_attempt(crate::telemetry::dispatch_failure(failure));
        tracing::debug!(
            "region {}: peer {} on store {store_id} failed ({failure:?}): {error}",
            self.region.id(),
            self.current.map(|p| p.id).unwrap_or_default(),
        );
        let via = self.round.current_via();
        match (failure, via) {
            // Through a proxy: the route failed (the proxy, or its way to
            // the leader) or went silent; the leader's own health is known
            // already. The next request proves a route again before it
            // sends anything.
            (
                DispatchFailure::NotSent
                | DispatchFailure::Transport
                | DispatchFailure::ClientTimeout,
                Some(proxy),
            ) => {
                self.effects.push(Effect::ProxyFailed {
                    target: store_id,
                    proxy,
                });
            }
            (_, Some(_)) => {}
            (DispatchFailure::NotSent | DispatchFailure::Transport, None) => {
                self.effects.push(Effect::StoreFailed(store_id));
            }
            (DispatchFailure::ClientTimeout, None) => {
                self.effects
                    .push(Effect::StoreTimedOut { store_id, sent_at });
            }
            // The store itself said so: it answered (a timeout strike is
            // for a store that does not answer).
            (DispatchFailure::Deadline, None) => {
                self.effects
                    .push(Effect::StoreAnswered { store_id, sent_at });
            }
            // One stream reset: the store's connection is fine; no verdict.
            (DispatchFailure::StreamReset | DispatchFailure::Fatal, None) => {}
        }
        if failure.may_have_been_sent() && failure != DispatchFailure::Fatal {
            self.maybe_delivered
                .get_or_insert((self.region.id(), store_id));
        }
        let step = self.round.on_dispatch_failed(
            &self.region,
            error,
            failure,
            self.policy.terminal_on_dispatch_error(),
        );
        self.after_candidate(step)
    }

    fn on_answered(&mut self, region_error: Option<Box<errorpb::Error>>, sent_at: Instant) -> Next {
        // Through a proxy, the proxy answered; the leader's store is still
        // out of reach. A Region error that drops a store drops the
        // leader's (`store_id`), never the proxy's.
        let via = self.round.current_via();
        let (answered, store_id) = (via.unwrap_or(self.current_store()), self.current_store());
        self.effects.push(Effect::StoreAnswered {
            store_id: answered,
            sent_at,
        });
        let Some(region_error) = region_error else {
            return self.on_accepted();
        };
        self.end_attempt(crate::telemetry::region_error(&region_error));
        tracing::debug!(
            "region {}: peer {} answered {}",
            self.region.id(),
            self.current.map(|p| p.id).unwrap_or_default(),
            crate::describe_region_error(&region_error)
        );
        let step = self.round.on_region_error(&self.region, *region_error);
        if let CandidateStep::EndRound { action, .. } = &step {
            if action.invalidate_store {
                self.effects.push(Effect::InvalidateStore(store_id));
                self.effects.push(Effect::Count(Counter::StoreInvalidation));
            }
        }
        self.after_candidate(step)
    }

    fn on_accepted(&mut self) -> Next {
        self.end_attempt("ok");
        if let Some(proxy) = self.round.current_via() {
            self.effects.push(Effect::ProxyWorked {
                target: self.current_store(),
                proxy,
            });
        }
        let accepted = self.round.on_accepted(&self.region);
        self.current = None;
        if accepted.update_leader {
            // A key error proves acceptance too: the cache is set before
            // anything is returned.
            tracing::info!(
                "region {}: peer {} on store {} accepted the request; it is now the cached leader",
                self.region.id(),
                accepted.peer.id,
                accepted.peer.store_id
            );
            self.effects.push(Effect::Count(Counter::FallbackSuccess));
            self.effects
                .push(Effect::UpdateLeader(self.region.ver_id(), accepted.peer));
        }
        if accepted.reload_region {
            self.invalidate_region();
        }
        self.finish_probe(ProbeOutcome::FoundLeader);
        self.done(Ok(()))
    }

    /// Carries out a candidate step of the round.
    fn after_candidate(&mut self, step: CandidateStep) -> Next {
        match step {
            CandidateStep::Next { invalidate_store } => {
                if let Some(store_id) = invalidate_store {
                    self.effects.push(Effect::InvalidateStore(store_id));
                    self.effects.push(Effect::Count(Counter::StoreInvalidation));
                }
                self.current = None;
                self.next_candidate()
            }
            CandidateStep::Fail(error) => {
                self.current = None;
                self.finish_probe(ProbeOutcome::Inconclusive);
                // The round ends without success: a routing failure seen in
                // it drops the Region route too.
                if self.round.saw_routing_failure() {
                    self.invalidate_region();
                }
                self.done(Err(error))
            }
            CandidateStep::EndRound { action, error } => {
                let store_id = self.current_store();
                self.current = None;
                self.finish_probe(ProbeOutcome::Inconclusive);
                if action.undetermined {
                    self.maybe_delivered
                        .get_or_insert((self.region.id(), store_id));
                }
                if action.undetermined && self.policy.terminal_on_dispatch_error() {
                    // The store itself cannot tell whether the write was
                    // applied: never re-sent.
                    if action.invalidate_region {
                        self.invalidate_region();
                    }
                    let region_id = self.region.id();
                    return self.done(Err(Error::from(Failure::Undetermined {
                        region_id,
                        store_id,
                        request: String::new(),
                        cause: Box::new(Error::region_error(region_id, *error)),
                    })));
                }
                self.on_region_error_action(*action, error)
            }
        }
    }

    fn invalidate_region(&mut self) {
        self.effects
            .push(Effect::InvalidateRegion(self.region.ver_id()));
        self.effects
            .push(Effect::Count(Counter::RegionInvalidation));
    }

    /// The probe round (if this was one) is over.
    fn finish_probe(&mut self, outcome: ProbeOutcome) {
        match self.probe.take() {
            Some(Probe::Shared(ticket)) => self.effects.push(Effect::FinishProbe(ticket, outcome)),
            Some(Probe::Local) | None => {}
        }
    }

    fn round_exhausted(&mut self) -> Next {
        let round = std::mem::replace(
            &mut self.round,
            CandidateRound::new(CandidateOrder::LeaderFirst),
        );
        let exhausted = round.finish(&self.region);
        tracing::warn!(
            "region {}: no candidate answered ({} tried): {}",
            self.region.id(),
            exhausted.tried,
            exhausted.strongest
        );
        let probing = self.probe.is_some();
        self.finish_probe(ProbeOutcome::Inconclusive);
        if probing {
            // Inconclusive: the cached leader stays and the ordinary busy
            // backoff resumes (routing.md, "ServerIsBusy(0) follower probe").
            tracing::debug!("region {}: busy probe was inconclusive", self.region.id());
        } else if exhausted.reload_region {
            self.invalidate_region();
            self.unreachable_leader = exhausted.unreachable_leader;
        }
        self.after_round(exhausted.leaderless && !probing, exhausted.strongest)
    }

    /// Sleeps before the next round, unless the deadline ends first: then
    /// the shard ends with `last`, the strongest error so far.
    fn sleep(&mut self, delay: Duration, last: Error) -> Next {
        if self.time_left().is_some_and(|left| delay >= left) {
            return self.deadline_exceeded(last);
        }
        self.phase = Phase::Sleeping;
        Next::Sleep(delay)
    }

    fn reshard(&mut self) -> Next {
        self.phase = Phase::Resharding;
        Next::Reshard
    }

    /// The Region-error table's action for the error that ended the round.
    fn on_region_error_action(
        &mut self,
        action: RegionErrorAction,
        error: Box<errorpb::Error>,
    ) -> Next {
        let region_id = self.region.id();
        if !action.insert_regions.is_empty() {
            self.effects
                .push(Effect::InsertRegions(action.insert_regions));
        }
        if action.invalidate_region {
            self.invalidate_region();
        }
        match action.step {
            RegionErrorStep::Return | RegionErrorStep::NextCandidate => {
                self.done(Err(Error::region_error(region_id, *error)))
            }
            RegionErrorStep::RetryNow => {
                if let Some(leader) = action.update_leader {
                    self.effects
                        .push(Effect::UpdateLeader(self.region.ver_id(), leader));
                    // The hint is authoritative for this request even if the
                    // shared cache moved on.
                    self.region.leader = Some(leader);
                }
                // No sleep, but the attempt counts, so ping-pong hints cannot
                // loop forever.
                if self.spend_attempt().is_none() {
                    return self.exhausted(Error::region_error(region_id, *error));
                }
                if action.update_leader.is_some() {
                    self.begin_round()
                } else {
                    self.reshard()
                }
            }
            RegionErrorStep::Backoff { at_least } => {
                self.pending_backoff = Some((at_least, error));
                let leader = self.region.leader.filter(|_| action.busy_zero_wait);
                let Some(leader) = leader else {
                    return self.back_off_after_busy(true);
                };
                if self.policy.shared_busy_probe {
                    self.phase = Phase::ReportingBusy;
                    return Next::ReportBusy {
                        region_id,
                        leader_peer_id: leader.id,
                        may_probe: !self.request.probed(),
                    };
                }
                if self.busy.record_zero_wait(leader.id) && self.request.take_probe() {
                    return self.start_probe(Probe::Local);
                }
                self.back_off_after_busy(true)
            }
        }
    }

    fn start_probe(&mut self, probe: Probe) -> Next {
        self.effects.push(Effect::Count(Counter::BusyProbe));
        tracing::debug!(
            "region {}: ServerIsBusy(0) from the cached leader again; probing its followers",
            self.region.id()
        );
        self.pending_backoff = None;
        self.probe = Some(probe);
        self.begin_round()
    }

    fn on_busy_verdict(&mut self, verdict: BusyVerdict) -> Next {
        match verdict {
            BusyVerdict::Ordinary => self.back_off_after_busy(true),
            BusyVerdict::Probe(ticket) => {
                if !self.request.take_probe() {
                    // Another shard of this request probed since this one
                    // reported: one probe per request. The ticket goes
                    // unused, which frees the Region and keeps the count.
                    drop(ticket);
                    return self.back_off_after_busy(true);
                }
                self.start_probe(Probe::Shared(ticket))
            }
            BusyVerdict::WaitForProbe(waiter) => {
                self.phase = Phase::WaitingForProbe;
                Next::WaitForProbe(waiter, self.time_left())
            }
        }
    }

    /// The ordinary backoff after a Region error that asked for one (busy or
    /// not); `sleep` is false when another request's probe found the leader.
    fn back_off_after_busy(&mut self, sleep: bool) -> Next {
        let (at_least, error) = self.pending_backoff.take().unwrap_or_default();
        let last = Error::region_error(self.region.id(), *error);
        let Some(delay) = self.spend_attempt() else {
            return self.exhausted(last);
        };
        if sleep {
            self.sleep(delay.max(at_least.unwrap_or_default()), last)
        } else {
            self.reshard()
        }
    }
}

#[cfg(test)]
#[path = "engine_tests.rs"]
mod tests;
