//! The state of one candidate round ([routing.md, "One round, per
//! shard"](crate::spec::routing#one-round-per-shard)): who was tried, what each
//! answered, the hint-driven reordering, what to invalidate when the round
//! ends, and which error is strongest. Every transition is a named method over
//! plain values; the shard's retry engine
//! ([`ShardMachine`](super::engine::ShardMachine)) owns the round together with
//! the Region it walks, and passes that Region in.
//!
//! This file is over 800 lines with its unit tests, which sit beside the code
//! as client-rust and tokio keep them; the code is under 800.

use crate::proto::{errorpb, metapb};
use crate::region::store_engine::is_not_tikv_refusal;
use crate::region::{CandidateOrder, RegionWithLeader, StoreId};
use crate::Error;

use super::region_error::{decide_region_error, RegionErrorAction, RegionErrorStep};
use crate::classify::DispatchFailure;
use crate::Failure;

/// What a candidate that did not end the round answered.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum CandidateAnswer {
    /// Its store could not be mapped (lookup or connection).
    MappingFailed,
    /// The transport failed (or the connection could not be opened) during
    /// the RPC.
    TransportFailed,
    /// The RPC timed out (client timeout or `DeadlineExceeded`).
    TimedOut,
    /// It answered `NotLeader`, with the hint it gave.
    NotLeader {
        /// The leader it named, if any.
        hint: Option<metapb::Peer>,
    },
    /// It answered `ServerIsBusy`.
    Busy,
    /// Its store does not run TiKV (a TiFlash store): nothing was sent.
    NotTiKv,
}

impl CandidateAnswer {
    /// True when the candidate could not answer at all.
    fn is_silence(&self) -> bool {
        matches!(
            self,
            CandidateAnswer::MappingFailed
                | CandidateAnswer::TransportFailed
                | CandidateAnswer::TimedOut
        )
    }
}

/// One candidate that was tried and did not end the round.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct TriedCandidate {
    /// The peer.
    pub(crate) peer: metapb::Peer,
    /// True when it was the cached leader.
    pub(crate) was_leader: bool,
    /// Its answer.
    pub(crate) answer: CandidateAnswer,
}

/// What the engine does after a candidate's failure was recorded.
#[derive(Debug)]
pub(crate) enum CandidateStep {
    /// Try the next candidate of this round; first drop the cached store when
    /// given.
    Next {
        /// The store whose cache entry (and connection) to drop.
        invalidate_store: Option<StoreId>,
    },
    /// The round ends on a Region error handled by the Region-error table.
    EndRound {
        /// What to do.
        action: Box<RegionErrorAction>,
        /// The error, for the caller if the action returns it.
        error: Box<errorpb::Error>,
    },
    /// Return this error to the caller at once, without replay.
    Fail(Error),
}

/// The candidate that accepted the request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Accepted {
    /// The peer that accepted.
    pub(crate) peer: metapb::Peer,
    /// True when it is not the cached leader: the leader cache must be set to
    /// it before the answer is returned (also for a key error).
    pub(crate) update_leader: bool,
    /// A fallback peer named a leader outside the cached Region during the
    /// round: the peer list is stale, so the Region is reloaded after the
    /// round even though it succeeded.
    pub(crate) reload_region: bool,
}

/// How a round that found no answer ends.
#[derive(Debug)]
pub(crate) struct RoundExhausted {
    /// Drop the cached Region before the next round: a routing failure, every
    /// candidate said `NotLeader` (a cached leader that could not answer
    /// counts as one), a hint named a peer outside the Region, or the Region
    /// had no candidate at all.
    pub(crate) reload_region: bool,
    /// The strongest error the round saw (routing failure > all `NotLeader` >
    /// `ServerIsBusy` > other `NotLeader` > timeout).
    pub(crate) strongest: Error,
    /// How many candidates were tried.
    pub(crate) tried: usize,
    /// The cached leader, when this client could not reach its store in
    /// the round (forwarding, when on, looks for it again after a reload).
    pub(crate) unreachable_leader: Option<u64>,
    /// No peer leads the Region as far as the round could see: every
    /// candidate said `NotLeader` (the cached leader may have been silent)
    /// and no hint named a peer the round had not tried. An election is
    /// under way, or the Region has lost its quorum.
    pub(crate) leaderless: bool,
}

/// The per-round state. Holds no copy of the Region (the engine passes it
/// in); allocates nothing until a candidate fails, so the fast path costs one
/// leader attempt and no list.
#[derive(Debug)]
pub(crate) struct CandidateRound {
    order: CandidateOrder,
    current: Option<metapb::Peer>,
    tried: Vec<TriedCandidate>,
    /// **beyond** An untried voter named by a fallback hint goes next.
    hinted_next: Option<metapb::Peer>,
    hint_outside_region: bool,
    routing_error: Option<Error>,
    not_leader_error: Option<Error>,
    busy_error: Option<Error>,
    timeout_error: Option<Error>,
    /// **beyond** Forwarding ([routing.md,
    /// "Forwarding"](crate::spec::routing#forwarding-beyond)).
    forward: Forward,
}

/// What a round knows for forwarding: is the cached leader's store out of
/// this client's reach, which stores proxied to it in this round, and
/// through which the leader goes next.
#[derive(Debug, Default)]
struct Forward {
    /// Forwarding is on for the request.
    allowed: bool,
    /// The cached leader's store could not be reached from this client
    /// (store health, or this round's attempt).
    leader_unreachable: bool,
    /// The next candidate is the cached leader through this store.
    next_via: Option<StoreId>,
    /// The current candidate goes through this store.
    current_via: Option<StoreId>,
    /// The stores that proxied (or were to proxy) to the leader in this
    /// round: each at most once.
    proxies: Vec<StoreId>,
    /// PD still names the cached leader after a reload that followed a
    /// round in which this client could not reach it: a voter that answers
    /// `NotLeader` without a hint may proxy too.
    pd_names_leader: bool,
}

impl CandidateRound {
    /// A round over a Region's candidates in `order`.
    pub(crate) fn new(order: CandidateOrder) -> Self {
        CandidateRound {
            order,
            current: None,
            tried: Vec::new(),
            hinted_next: None,
            hint_outside_region: false,
            routing_error: None,
            not_leader_error: None,
            busy_error: None,
            timeout_error: None,
            forward: Forward::default(),
        }
    }

    /// A round that may forward to the cached leader through a voter's
    /// store once the leader is known to be out of reach and alive.
    pub(crate) fn forwarding(mut self, allowed: bool) -> Self {
        self.forward.allowed = allowed;
        self
    }

    /// Store health says (`unreachable`) the cached leader's store cannot
    /// be reached.
    pub(crate) fn leader_unreachable(mut self, unreachable: bool) -> Self {
        self.forward.leader_unreachable |= unreachable;
        self
    }

    /// PD named (`named`) the cached leader again after a round that could
    /// not reach it: the leader is taken to be alive, as if a voter had
    /// named it.
    pub(crate) fn pd_names_leader(mut self, named: bool) -> Self {
        self.forward.pd_names_leader = named;
        self
    }

    /// The cached leader is reached through `proxy`, when given (a route
    /// remembered client-wide): the round starts with it.
    pub(crate) fn through(mut self, proxy: Option<StoreId>) -> Self {
        if let Some(proxy) = proxy.filter(|_| self.forward.allowed) {
            self.forward.leader_unreachable = true;
            self.forward.next_via = Some(proxy);
        }
        self
    }

    /// The store the current candidate is reached through, when it is the
    /// cached leader forwarded by a proxy.
    pub(crate) fn current_via(&self) -> Option<StoreId> {
        self.forward.current_via
    }

    /// The candidates that were tried and did not end the round, in order.
    #[cfg(test)]
    pub(crate) fn tried(&self) -> &[TriedCandidate] {
        &self.tried
    }

    /// True once a candidate of this round failed to be reached (mapping or
    /// transport): a round that then ends without success drops the Region
    /// route too ([routing.md, "One
    /// round"](crate::spec::routing#one-round-per-shard)).
    pub(crate) fn saw_routing_failure(&self) -> bool {
        self.routing_error.is_some()
    }

    /// True when the current candidate is the cached leader.
    pub(crate) fn current_is_cached_leader(&self, region: &RegionWithLeader) -> bool {
        match (&self.current, &region.leader) {
            (Some(current), Some(leader)) => current.id == leader.id,
            _ => false,
        }
    }

    fn was_tried(&self, peer_id: u64) -> bool {
        self.tried.iter().any(|t| t.peer.id == peer_id)
    }

    /// Picks the next candidate: a hinted voter first, then the Region's
    /// candidates in the round's order, skipping those already tried. `None`
    /// ends the round.
    ///
    /// The cached leader tried through a voter's store counts as tried: that
    /// attempt is the round's try of the leader, and its store is not dialled
    /// directly after it. So while store health marks the leader's store, a
    /// round tries the leader once, after the voters: through a voter's
    /// store when one showed it alive, else directly ([routing.md, "Store
    /// health"](crate::spec::routing#store-health-beyond), which has the
    /// measurement behind it).
    pub(crate) fn next_candidate(&mut self, region: &RegionWithLeader) -> Option<metapb::Peer> {
        self.forward.current_via = None;
        if let Some(proxy) = self.forward.next_via.take() {
            if let Some(leader) = region.leader {
                self.forward.proxies.push(proxy);
                self.forward.current_via = Some(proxy);
                self.current = Some(leader);
                return Some(leader);
            }
        }
        let next = match self.hinted_next.take() {
            Some(hinted) if !self.was_tried(hinted.id) => Some(hinted),
            _ => region
                .candidates(self.order)
                .find(|p| !self.was_tried(p.id))
                .copied(),
        };
        self.current = next;
        next
    }

    fn record(&mut self, region: &RegionWithLeader, answer: CandidateAnswer) -> metapb::Peer {
        let was_leader = self.current_is_cached_leader(region);
        let peer = self.current.take().unwrap_or_default();
        self.tried.push(TriedCandidate {
            peer,
            was_leader,
            answer,
        });
        peer
    }

    /// The current candidate's store could not be mapped: the request was
    /// not sent. Next candidate; drop that store (not a TiFlash store's:
    /// it was refused, see `on_not_tikv_store`).
    pub(crate) fn on_mapping_failed(
        &mut self,
        region: &RegionWithLeader,
        error: Error,
    ) -> CandidateStep {
        if is_not_tikv_refusal(&error) {
            return self.on_not_tikv_store(region, error);
        }
        self.unreached(region, CandidateAnswer::MappingFailed, error)
    }

    /// The current candidate's store does not run TiKV (TiFlash): the
    /// mapping refused it and nothing was sent. Next candidate, with no
    /// store dropped and no mark on the leader's reach (forwarding never
    /// aims at a TiFlash store); the refusal counts as a routing failure,
    /// so a round that then finds no answer reloads the Region (a peer
    /// list that offers such a candidate is stale).
    fn on_not_tikv_store(&mut self, region: &RegionWithLeader, error: Error) -> CandidateStep {
        self.record(region, CandidateAnswer::NotTiKv);
        self.routing_error.get_or_insert(error);
        CandidateStep::Next {
            invalidate_store: None,
        }
    }

    /// The current candidate could not be reached (`answer`: mapping or
    /// transport): next candidate, its store dropped, unless it went
    /// through a proxy (the route failed, not the store's own entry).
    fn unreached(
        &mut self,
        region: &RegionWithLeader,
        answer: CandidateAnswer,
        error: Error,
    ) -> CandidateStep {
        let forwarded = self.forward.current_via.is_some();
        self.note_leader_unreachable(region);
        let peer = self.record(region, answer);
        self.routing_error.get_or_insert(error);
        CandidateStep::Next {
            invalidate_store: (!forwarded).then_some(peer.store_id),
        }
    }

    /// The current candidate, the cached leader tried directly, could not
    /// be reached.
    fn note_leader_unreachable(&mut self, region: &RegionWithLeader) {
        if self.forward.current_via.is_none() && self.current_is_cached_leader(region) {
            self.forward.leader_unreachable = true;
        }
    }

    /// The current candidate's RPC failed before any Region response.
    /// `terminal_on_dispatch_error` plans return an undetermined outcome when
    /// the request may have been sent.
    pub(crate) fn on_dispatch_failed(
        &mut self,
        region: &RegionWithLeader,
        error: Error,
        failure: DispatchFailure,
        terminal_on_dispatch_error: bool,
    ) -> CandidateStep {
        if failure == DispatchFailure::Fatal {
            self.current = None;
            return CandidateStep::Fail(error);
        }
        if terminal_on_dispatch_error && failure.may_have_been_sent() {
            let store_id = self.current.take().map(|p| p.store_id).unwrap_or_default();
            return CandidateStep::Fail(Error::from(Failure::Undetermined {
                region_id: region.id(),
                store_id,
                // The plan names the request (its keys or range).
                request: String::new(),
                cause: Box::new(error),
            }));
        }
        if failure.keeps_caches() {
            // A leader that did not answer in time may be cut off from this
            // client (a firewall that drops); a server's own
            // `DeadlineExceeded` is an answer.
            if failure == DispatchFailure::ClientTimeout {
                self.note_leader_unreachable(region);
            }
            self.record(region, CandidateAnswer::TimedOut);
            self.timeout_error.get_or_insert(error);
            return CandidateStep::Next {
                invalidate_store: None,
            };
        }
        self.unreached(region, CandidateAnswer::TransportFailed, error)
    }

    /// The current candidate answered with a Region error.
    pub(crate) fn on_region_error(
        &mut self,
        region: &RegionWithLeader,
        error: errorpb::Error,
    ) -> CandidateStep {
        let region_id = region.id();
        if self.current_is_cached_leader(region) {
            let names_itself = error
                .not_leader
                .as_ref()
                .and_then(|nl| nl.leader.as_ref())
                .zip(self.current.as_ref())
                .is_some_and(|(hint, current)| hint.id == current.id);
            let action = if names_itself {
                // "Not leader, the leader is me": no usable hint.
                decide_region_error(
                    &errorpb::Error {
                        not_leader: Some(errorpb::NotLeader::default()),
                        ..Default::default()
                    },
                    region,
                )
            } else {
                decide_region_error(&error, region)
            };
            if action.step == RegionErrorStep::NextCandidate {
                // A leader's hint-less NotLeader: the voters go next, in this
                // very round ([beyond]).
                self.record(region, CandidateAnswer::NotLeader { hint: None });
                self.not_leader_error
                    .get_or_insert(Error::region_error(region_id, error));
                return CandidateStep::Next {
                    invalidate_store: None,
                };
            }
            return self.end_round(action, error);
        }
        // A fallback peer.
        if let Some(not_leader) = &error.not_leader {
            let hint = not_leader.leader;
            let voter = self.record(region, CandidateAnswer::NotLeader { hint });
            let forwards = self.forward_through(region, hint.as_ref(), voter.store_id);
            if let Some(hint) = hint.filter(|_| !forwards) {
                self.take_fallback_hint(region, hint);
            }
            self.not_leader_error
                .get_or_insert(Error::region_error(region_id, error));
            return CandidateStep::Next {
                invalidate_store: None,
            };
        }
        if error.server_is_busy.is_some() {
            self.record(region, CandidateAnswer::Busy);
            self.busy_error
                .get_or_insert(Error::region_error(region_id, error));
            return CandidateStep::Next {
                invalidate_store: None,
            };
        }
        let action = decide_region_error(&error, region);
        self.end_round(action, error)
    }

    /// The round ends on a Region error. It ends without success, so a
    /// routing failure seen earlier in it drops the Region route as well
    /// ([routing.md, "One round"](crate::spec::routing#one-round-per-shard): a
    /// transport failure invalidates "the Region too if the round ends without
    /// success"), unless the answer named the leader to retry at once.
    fn end_round(&mut self, mut action: RegionErrorAction, error: errorpb::Error) -> CandidateStep {
        if self.routing_error.is_some() && action.update_leader.is_none() {
            action.invalidate_region = true;
        }
        self.current = None;
        CandidateStep::EndRound {
            action: Box::new(action),
            error: Box::new(error),
        }
    }

    /// **beyond** A voter on `voter_store` named the cached leader (or
    /// named none, while PD still names it), whose store this client cannot
    /// reach: the leader lives, so it goes next, forwarded by that voter's
    /// store (reached just now). Each store proxies at most once a round.
    /// True when the leader goes next so.
    fn forward_through(
        &mut self,
        region: &RegionWithLeader,
        hint: Option<&metapb::Peer>,
        voter_store: StoreId,
    ) -> bool {
        let Some(leader) = region.leader else {
            return false;
        };
        let alive = match hint {
            Some(hint) => hint.id == leader.id,
            None => self.forward.pd_names_leader,
        };
        let usable = self.forward.allowed
            && self.forward.leader_unreachable
            && alive
            && voter_store != leader.store_id
            && !self.forward.proxies.contains(&voter_store);
        if usable {
            self.forward.next_via = Some(voter_store);
        }
        usable
    }

    /// **beyond** A fallback hint never updates the cache. An untried
    /// candidate of this round moves to the front; a tried peer is ignored; a
    /// peer outside the cached Region marks it for reload. A hint naming the
    /// cached leader while it is not a candidate of this round (the busy
    /// probe) or while it is kept last (store health) is ignored too.
    fn take_fallback_hint(&mut self, region: &RegionWithLeader, hint: metapb::Peer) {
        if !region.has_peer(&hint) {
            self.hint_outside_region = true;
            return;
        }
        if self.was_tried(hint.id) {
            return;
        }
        // Store health put the cached leader last because its store is
        // unreachable; voters that still name it must not bring it forward,
        // or every Region led from a dead store pays a connect attempt again
        // (routing.md, "Store health").
        let names_the_leader_kept_last = self.order == CandidateOrder::LeaderLast
            && region.leader.is_some_and(|l| l.id == hint.id);
        if names_the_leader_kept_last {
            return;
        }
        let is_remaining_candidate = region
            .candidates(self.order)
            .any(|p| p.id == hint.id && p.store_id == hint.store_id);
        if is_remaining_candidate {
            self.hinted_next = Some(hint);
        }
    }

    /// The current candidate answered without a Region error (a success or a
    /// key error): it accepted the request as leader.
    pub(crate) fn on_accepted(&mut self, region: &RegionWithLeader) -> Accepted {
        let update_leader = !self.current_is_cached_leader(region);
        let peer = self.current.take().unwrap_or_default();
        Accepted {
            peer,
            update_leader,
            reload_region: self.hint_outside_region,
        }
    }

    /// Ends a round in which no candidate answered.
    pub(crate) fn finish(self, region: &RegionWithLeader) -> RoundExhausted {
        let tried = self.tried.len();
        // "Every voter said NotLeader": each candidate said so, except that
        // a cached leader that could not answer at all (timed out, or its
        // store was unreachable) counts with them. Nobody claimed the Region,
        // so PD's view is needed (routing.md, "One round"; crate docs,
        // "Decisions").
        let said_not_leader =
            |t: &TriedCandidate| matches!(t.answer, CandidateAnswer::NotLeader { .. });
        let all_not_leader = self.tried.iter().any(said_not_leader)
            && self
                .tried
                .iter()
                .all(|t| said_not_leader(t) || (t.was_leader && t.answer.is_silence()));
        let routing_failure = self.routing_error.is_some();
        // No candidate at all: the cached peer list is unusable.
        let reload_region =
            routing_failure || all_not_leader || self.hint_outside_region || tried == 0;
        // A hint inside the Region brought its peer to the front of the
        // round, so by now it was tried; one outside it names a peer the
        // cache does not know, which may well lead.
        let leaderless = all_not_leader && !self.hint_outside_region;
        let unreachable_leader = region
            .leader
            .filter(|_| self.forward.allowed && self.forward.leader_unreachable)
            .map(|l| l.id);
        let CandidateRound {
            routing_error,
            mut not_leader_error,
            busy_error,
            timeout_error,
            ..
        } = self;
        let all_said_not_leader = if all_not_leader {
            not_leader_error.take()
        } else {
            None
        };
        let strongest = routing_error
            .or(all_said_not_leader)
            .or(busy_error)
            .or(not_leader_error)
            .or(timeout_error)
            .unwrap_or(Error::LeaderNotFound {
                region: region.ver_id(),
            });
        RoundExhausted {
            reload_region,
            strongest,
            tried,
            unreachable_leader,
            leaderless,
        }
    }
}

/// Per-shard `ServerIsBusy(0)` counting ([routing.md, "ServerIsBusy(0)
/// follower probe"](crate::spec::routing#serverisbusy0-follower-probe)), used
/// when the shared suspicion is off or absent. The one-probe-per-request budget
/// is the request's, not the shard's.
#[derive(Debug, Default, Clone)]
pub(crate) struct BusyProbeCount {
    leader_peer_id: Option<u64>,
    zero_wait_answers: u32,
}

/// How many `ServerIsBusy(0)` answers from one leader trigger the probe.
pub(crate) const BUSY_ANSWERS_BEFORE_PROBE: u32 = 2;

impl BusyProbeCount {
    /// Records a `ServerIsBusy(0)` from the cached leader `leader_peer_id`.
    /// Returns true when enough answers came from it for a probe.
    pub(crate) fn record_zero_wait(&mut self, leader_peer_id: u64) -> bool {
        if self.leader_peer_id != Some(leader_peer_id) {
            self.leader_peer_id = Some(leader_peer_id);
            self.zero_wait_answers = 0;
        }
        self.zero_wait_answers += 1;
        self.zero_wait_answers >= BUSY_ANSWERS_BEFORE_PROBE
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::metapb::PeerRole;

    /// The round together with the Region it walks, as the engine holds them.
    struct Round<'a> {
        region: &'a RegionWithLeader,
        round: CandidateRound,
    }

    impl<'a> Round<'a> {
        fn new(region: &'a RegionWithLeader, order: CandidateOrder) -> Self {
            Round {
                region,
                round: CandidateRound::new(order),
            }
        }
        fn next_candidate(&mut self) -> Option<metapb::Peer> {
            self.round.next_candidate(self.region)
        }
        fn on_mapping_failed(&mut self, e: Error) -> CandidateStep {
            self.round.on_mapping_failed(self.region, e)
        }
        fn on_dispatch_failed(&mut self, e: Error, f: DispatchFailure, t: bool) -> CandidateStep {
            self.round.on_dispatch_failed(self.region, e, f, t)
        }
        fn on_region_error(&mut self, e: errorpb::Error) -> CandidateStep {
            self.round.on_region_error(self.region, e)
        }
        fn on_accepted(&mut self) -> Accepted {
            self.round.on_accepted(self.region)
        }
        fn finish(self) -> RoundExhausted {
            self.round.finish(self.region)
        }
        fn tried(&self) -> &[TriedCandidate] {
            self.round.tried()
        }
    }

    fn peer(id: u64, store: u64) -> metapb::Peer {
        metapb::Peer {
            id,
            store_id: store,
            role: PeerRole::Voter as i32,
            is_witness: false,
        }
    }

    fn region(n: u64, leader: Option<u64>) -> RegionWithLeader {
        let peers: Vec<_> = (1..=n).map(|i| peer(10 + i, i)).collect();
        let leader = leader.map(|i| peer(10 + i, i));
        RegionWithLeader::new(
            metapb::Region {
                id: 1,
                peers,
                ..Default::default()
            },
            leader,
        )
    }

    fn not_leader(hint: Option<metapb::Peer>) -> errorpb::Error {
        errorpb::Error {
            not_leader: Some(errorpb::NotLeader {
                region_id: 1,
                leader: hint,
            }),
            ..Default::default()
        }
    }

    fn busy(wait: u32) -> errorpb::Error {
        errorpb::Error {
            server_is_busy: Some(errorpb::ServerIsBusy {
                estimated_wait_ms: wait,
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn transport() -> Error {
        Error::from(tonic::Status::unavailable("down"))
    }

    fn timeout() -> Error {
        Error::from(tonic::Status::deadline_exceeded("slow"))
    }

    fn next_id(round: &mut Round<'_>) -> Option<u64> {
        round.next_candidate().map(|p| p.id)
    }

    fn is_next(step: &CandidateStep, store: Option<StoreId>) -> bool {
        matches!(step, CandidateStep::Next { invalidate_store } if *invalidate_store == store)
    }

    #[test]
    fn fast_path_accepts_the_leader_without_recording_anything() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        assert_eq!(next_id(&mut round), Some(11));
        let accepted = round.on_accepted();
        assert_eq!(accepted.peer.id, 11);
        assert!(!accepted.update_leader);
        assert_eq!(round.tried().len(), 0);
        assert_eq!(
            round.round.tried.capacity(),
            0,
            "no candidate list allocated"
        );
    }

    #[test]
    fn routing_failures_move_on_and_invalidate_stores() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        assert_eq!(next_id(&mut round), Some(11));
        let s = round.on_mapping_failed(Error::from(Failure::Connect {
            address: "a".into(),
            message: "refused".into(),
            source: None,
        }));
        assert!(is_next(&s, Some(1)));
        assert_eq!(next_id(&mut round), Some(12));
        let s = round.on_dispatch_failed(transport(), DispatchFailure::Transport, false);
        assert!(is_next(&s, Some(2)));
        assert_eq!(next_id(&mut round), Some(13));
        let accepted = round.on_accepted();
        assert!(accepted.update_leader);
        assert_eq!(accepted.peer.id, 13);
    }

    #[test]
    fn a_tiflash_store_refused_at_mapping_is_skipped_kept_and_reloads_the_region() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.round = round.round.forwarding(true);
        assert_eq!(next_id(&mut round), Some(11));
        let refusal = || {
            Error::from(Failure::NotTiKvStore {
                store_id: 1,
                engine: "tiflash".into(),
            })
        };
        let s = round.on_mapping_failed(refusal());
        assert!(is_next(&s, None), "no store dropped for a refusal");
        assert_eq!(round.tried()[0].answer, CandidateAnswer::NotTiKv);
        assert_eq!(next_id(&mut round), Some(12));
        round.on_region_error(not_leader(Some(peer(11, 1))));
        // A voter named the refused leader: it is not forwarded to (its
        // store was refused, not found out of reach).
        assert_eq!(next_id(&mut round), Some(13));
        let s = round.on_mapping_failed(refusal());
        assert!(is_next(&s, None));
        assert_eq!(next_id(&mut round), None);
        let end = round.finish();
        assert!(end.reload_region, "a peer list offering TiFlash is stale");
        assert_eq!(end.unreachable_leader, None);
        assert!(matches!(
            end.strongest.failure(),
            Some(Failure::NotTiKvStore { .. })
        ));
    }

    /// (name, answers of leader and two voters, reload, strongest is routing)
    #[test]
    fn precedence_table() {
        enum A {
            Map,
            Transport,
            Timeout,
            NotLeader,
            Busy,
        }
        let table: Vec<(&str, [A; 3], bool, &str)> = vec![
            (
                "routing beats all",
                [A::Timeout, A::Busy, A::Map],
                true,
                "connect",
            ),
            (
                "transport beats notleader",
                [A::Transport, A::NotLeader, A::NotLeader],
                true,
                "gRPC",
            ),
            (
                "all not leader reloads",
                [A::NotLeader, A::NotLeader, A::NotLeader],
                true,
                "not leader",
            ),
            (
                "busy beats partial notleader",
                [A::Timeout, A::NotLeader, A::Busy],
                false,
                "busy",
            ),
            (
                "partial notleader beats timeout",
                [A::Timeout, A::NotLeader, A::Timeout],
                false,
                "not leader",
            ),
            (
                "timeouts keep caches",
                [A::Timeout, A::Timeout, A::Timeout],
                false,
                "Deadline",
            ),
        ];
        for (name, answers, reload, strongest) in table {
            let r = region(3, Some(1));
            let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
            for answer in answers {
                round.next_candidate().unwrap();
                let step = match answer {
                    A::Map => round.on_mapping_failed(Error::from(Failure::Connect {
                        address: "a".into(),
                        message: "connect refused".into(),
                        source: None,
                    })),
                    A::Transport => {
                        round.on_dispatch_failed(transport(), DispatchFailure::Transport, false)
                    }
                    A::Timeout => {
                        round.on_dispatch_failed(timeout(), DispatchFailure::Deadline, false)
                    }
                    A::NotLeader => round.on_region_error(not_leader(None)),
                    A::Busy => round.on_region_error(busy(0)),
                };
                assert!(matches!(step, CandidateStep::Next { .. }), "{name}");
            }
            assert_eq!(round.next_candidate(), None, "{name}");
            let end = round.finish();
            assert_eq!(end.reload_region, reload, "{name}");
            assert!(
                end.strongest.to_string().contains(strongest),
                "{name}: {}",
                end.strongest
            );
            assert_eq!(end.tried, 3);
        }
    }

    #[test]
    fn leader_busy_ends_the_round_but_fallback_busy_does_not() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        match round.on_region_error(busy(0)) {
            CandidateStep::EndRound { action, .. } => assert!(action.busy_zero_wait),
            other => panic!("{other:?}"),
        }
        let mut round = Round::new(&r, CandidateOrder::FollowersOnly);
        assert_eq!(next_id(&mut round), Some(12));
        assert!(is_next(&round.on_region_error(busy(0)), None));
        assert_eq!(next_id(&mut round), Some(13));
    }

    #[test]
    fn leader_hintless_not_leader_moves_to_voters_in_the_same_round() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        assert!(is_next(&round.on_region_error(not_leader(None)), None));
        assert_eq!(next_id(&mut round), Some(12));
    }

    #[test]
    fn leader_naming_itself_counts_as_no_hint() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        assert!(is_next(
            &round.on_region_error(not_leader(Some(peer(11, 1)))),
            None
        ));
        assert_eq!(next_id(&mut round), Some(12));
    }

    #[test]
    fn leader_hint_inside_the_region_ends_the_round_with_an_update() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        match round.on_region_error(not_leader(Some(peer(13, 3)))) {
            CandidateStep::EndRound { action, .. } => {
                assert_eq!(action.step, RegionErrorStep::RetryNow);
                assert_eq!(action.update_leader, Some(peer(13, 3)));
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn fallback_hint_naming_an_untried_voter_reorders_the_round() {
        let r = region(5, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_mapping_failed(transport());
        assert_eq!(next_id(&mut round), Some(12));
        assert!(is_next(
            &round.on_region_error(not_leader(Some(peer(15, 5)))),
            None
        ));
        assert_eq!(next_id(&mut round), Some(15), "the hinted voter goes next");
        round.on_region_error(not_leader(None));
        assert_eq!(
            next_id(&mut round),
            Some(13),
            "then the usual order resumes"
        );
        round.on_region_error(not_leader(None));
        assert_eq!(next_id(&mut round), Some(14));
        round.on_region_error(not_leader(None));
        assert_eq!(next_id(&mut round), None);
    }

    #[test]
    fn a_hint_naming_a_leader_kept_last_does_not_bring_it_forward() {
        let r = region(4, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderLast);
        assert_eq!(next_id(&mut round), Some(12));
        round.on_region_error(not_leader(Some(peer(11, 1))));
        assert_eq!(next_id(&mut round), Some(13), "the leader stays last");
        // A hint naming another voter still reorders.
        round.on_region_error(not_leader(Some(peer(14, 4))));
        assert_eq!(next_id(&mut round), Some(14));
        round.on_region_error(not_leader(None));
        assert_eq!(next_id(&mut round), Some(11));
    }

    #[test]
    fn fallback_hints_naming_tried_or_foreign_peers() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_mapping_failed(transport());
        round.next_candidate();
        // Names the tried leader: ignored.
        round.on_region_error(not_leader(Some(peer(11, 1))));
        assert_eq!(next_id(&mut round), Some(13));
        // Names a peer outside the Region: reload at the end of the round.
        round.on_region_error(not_leader(Some(peer(99, 9))));
        assert_eq!(next_id(&mut round), None);
        let end = round.finish();
        assert!(end.reload_region);

        // Hint outside the Region alone (no routing failure) also reloads.
        let mut round = Round::new(&r, CandidateOrder::FollowersOnly);
        round.next_candidate();
        round.on_region_error(busy(0));
        round.next_candidate();
        round.on_region_error(not_leader(Some(peer(99, 9))));
        assert!(round.finish().reload_region);
    }

    #[test]
    fn fallback_other_region_error_ends_the_round_by_the_table() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_mapping_failed(transport());
        round.next_candidate();
        let err = errorpb::Error {
            region_not_found: Some(Default::default()),
            ..Default::default()
        };
        match round.on_region_error(err) {
            CandidateStep::EndRound { action, .. } => assert!(action.invalidate_region),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_round_ending_on_a_region_error_after_a_routing_failure_reloads_the_region() {
        let data_not_ready = || errorpb::Error {
            data_is_not_ready: Some(Default::default()),
            ..Default::default()
        };
        let r = region(3, Some(1));
        // The leader's transport failed, a voter ends the round.
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_dispatch_failed(transport(), DispatchFailure::Transport, false);
        round.next_candidate();
        match round.on_region_error(data_not_ready()) {
            CandidateStep::EndRound { action, .. } => {
                assert!(action.invalidate_region, "the round ended without success");
                assert!(!action.invalidate_store);
            }
            other => panic!("{other:?}"),
        }
        // Without a routing failure the table alone decides: caches stay.
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_dispatch_failed(timeout(), DispatchFailure::Deadline, false);
        round.next_candidate();
        match round.on_region_error(data_not_ready()) {
            CandidateStep::EndRound { action, .. } => assert!(!action.invalidate_region),
            other => panic!("{other:?}"),
        }
        // A leader tried last after a voter's mapping failure, naming the
        // leader: the hint is followed at once, the Region kept.
        let mut round = Round::new(&r, CandidateOrder::LeaderLast);
        assert_eq!(next_id(&mut round), Some(12));
        round.on_mapping_failed(transport());
        assert_eq!(next_id(&mut round), Some(13));
        round.on_region_error(busy(0));
        assert_eq!(next_id(&mut round), Some(11));
        match round.on_region_error(not_leader(Some(peer(13, 3)))) {
            CandidateStep::EndRound { action, .. } => {
                assert_eq!(action.step, RegionErrorStep::RetryNow);
                assert!(!action.invalidate_region);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn terminal_on_dispatch_error_is_undetermined_unless_not_sent() {
        let r = region(3, Some(1));
        for (failure, undetermined) in [
            (DispatchFailure::Transport, true),
            (DispatchFailure::ClientTimeout, true),
            (DispatchFailure::Deadline, true),
            (DispatchFailure::NotSent, false),
        ] {
            let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
            round.next_candidate();
            let step = round.on_dispatch_failed(transport(), failure, true);
            match step {
                CandidateStep::Fail(e) => assert!(undetermined && e.is_undetermined()),
                CandidateStep::Next { .. } => assert!(!undetermined),
                other => panic!("{other:?}"),
            }
        }
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        let step = round.on_dispatch_failed(
            Error::from(tonic::Status::invalid_argument("no")),
            DispatchFailure::Fatal,
            false,
        );
        assert!(matches!(step, CandidateStep::Fail(Error::GrpcAPI(_))));
    }

    #[test]
    fn leader_last_and_leaderless_orders() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderLast);
        assert_eq!(next_id(&mut round), Some(12));
        let accepted = round.on_accepted();
        assert!(accepted.update_leader);

        let r = region(3, None);
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        assert_eq!(next_id(&mut round), Some(11));
        assert!(round.on_accepted().update_leader);
    }

    #[test]
    fn a_region_without_candidates_is_reloaded() {
        let r = RegionWithLeader::default();
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        assert_eq!(round.next_candidate(), None);
        let end = round.finish();
        assert!(end.reload_region);
        assert!(matches!(end.strongest, Error::LeaderNotFound { .. }));
    }

    #[test]
    fn busy_probe_count_table() {
        let mut c = BusyProbeCount::default();
        assert!(!c.record_zero_wait(11));
        assert!(c.record_zero_wait(11), "the second answer is enough");
        let mut c = BusyProbeCount::default();
        assert!(!c.record_zero_wait(11));
        assert!(!c.record_zero_wait(12), "a new leader restarts the count");
        assert!(c.record_zero_wait(12));
    }

    #[test]
    fn a_timed_out_leader_counts_with_voters_that_all_said_not_leader() {
        // The gap this closes: leader timed out, every voter said NotLeader
        // without a hint. Nobody claims the Region: reload it.
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_dispatch_failed(timeout(), DispatchFailure::ClientTimeout, false);
        round.next_candidate();
        round.on_region_error(not_leader(None));
        round.next_candidate();
        round.on_region_error(not_leader(None));
        assert_eq!(round.next_candidate(), None);
        let end = round.finish();
        assert!(end.reload_region);
        assert!(
            end.strongest.to_string().contains("not leader"),
            "{}",
            end.strongest
        );
        // A voter that timed out is not a leader that could not answer: the
        // round is a partial NotLeader and keeps the caches.
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_region_error(not_leader(None));
        round.next_candidate();
        round.on_dispatch_failed(timeout(), DispatchFailure::ClientTimeout, false);
        round.next_candidate();
        round.on_region_error(not_leader(None));
        assert!(!round.finish().reload_region);
    }

    #[test]
    fn a_hint_outside_the_region_reloads_even_when_the_round_succeeds() {
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_dispatch_failed(timeout(), DispatchFailure::ClientTimeout, false);
        round.next_candidate();
        round.on_region_error(not_leader(Some(peer(99, 9))));
        round.next_candidate();
        let accepted = round.on_accepted();
        assert!(accepted.update_leader);
        assert!(accepted.reload_region);
    }

    #[test]
    fn a_marked_leader_is_tried_once_a_round_last_directly_or_through_a_voter() {
        let r = region(3, Some(1));
        let marked = |forwarding| Round {
            region: &r,
            round: CandidateRound::new(CandidateOrder::LeaderLast)
                .forwarding(forwarding)
                .leader_unreachable(true),
        };
        // No voter shows the leader alive: it is dialled, last.
        let mut round = marked(true);
        assert_eq!(next_id(&mut round), Some(12));
        round.on_region_error(not_leader(None));
        assert_eq!(next_id(&mut round), Some(13));
        round.on_region_error(not_leader(None));
        assert_eq!(next_id(&mut round), Some(11));
        assert_eq!(round.round.current_via(), None, "directly");
        round.on_mapping_failed(transport());
        assert_eq!(next_id(&mut round), None);

        // The voters name it: it goes through each one's store, and an
        // attempt through a proxy is its try, so it is not dialled after.
        let mut round = marked(true);
        assert_eq!(next_id(&mut round), Some(12));
        round.on_region_error(not_leader(Some(peer(11, 1))));
        assert_eq!(next_id(&mut round), Some(11));
        assert_eq!(round.round.current_via(), Some(2));
        round.on_mapping_failed(transport());
        assert_eq!(next_id(&mut round), Some(13));
        round.on_region_error(not_leader(Some(peer(11, 1))));
        assert_eq!(next_id(&mut round), Some(11));
        assert_eq!(round.round.current_via(), Some(3));
        round.on_mapping_failed(transport());
        assert_eq!(next_id(&mut round), None, "not dialled after its proxies");
        assert_eq!(round.tried().len(), 4);
        assert!(round.finish().reload_region);

        // Without forwarding the same answers leave it last, dialled.
        let mut round = marked(false);
        assert_eq!(next_id(&mut round), Some(12));
        round.on_region_error(not_leader(Some(peer(11, 1))));
        assert_eq!(next_id(&mut round), Some(13));
        round.on_region_error(not_leader(Some(peer(11, 1))));
        assert_eq!(next_id(&mut round), Some(11));
        assert_eq!(round.round.current_via(), None, "directly");
    }

    #[test]
    fn the_busy_probe_ignores_a_hint_naming_the_cached_leader() {
        // Decision: followers naming the busy leader confirm it; the probe
        // round goes on with the followers and never targets the leader.
        let r = region(3, Some(1));
        let mut round = Round::new(&r, CandidateOrder::FollowersOnly);
        assert_eq!(next_id(&mut round), Some(12));
        round.on_region_error(not_leader(Some(peer(11, 1))));
        assert_eq!(next_id(&mut round), Some(13));
        round.on_region_error(not_leader(Some(peer(11, 1))));
        assert_eq!(next_id(&mut round), None, "the leader is never targeted");
    }
}
