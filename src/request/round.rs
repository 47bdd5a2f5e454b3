//! The state of one candidate round (routing.md, "One round, per shard"):
//! who was tried, what each answered, the hint-driven reordering, what to
//! invalidate when the round ends, which error is strongest, and the busy
//! counts. Every transition is a named method over plain values; the async
//! shell in [`RetryableMultiRegion`](super::RetryableMultiRegion) performs
//! the I/O and feeds the results back in.

use crate::proto::{errorpb, metapb};
use crate::region::{CandidateOrder, RegionWithLeader, StoreId};
use crate::Error;

use super::classify::DispatchFailure;
use super::region_error::{decide_region_error, RegionErrorAction, RegionErrorStep};

/// What a candidate that did not end the round answered.
#[derive(Debug, Clone, PartialEq)]
pub enum CandidateAnswer {
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
    Busy {
        /// The server's estimated wait.
        estimated_wait_ms: u32,
    },
}

/// One candidate that was tried and did not end the round.
#[derive(Debug, Clone, PartialEq)]
pub struct TriedCandidate {
    /// The peer.
    pub peer: metapb::Peer,
    /// Its answer.
    pub answer: CandidateAnswer,
}

/// What the shell does after a candidate's failure was recorded.
#[derive(Debug)]
pub enum CandidateStep {
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
pub struct Accepted {
    /// The peer that accepted.
    pub peer: metapb::Peer,
    /// True when it is not the cached leader: the leader cache must be set to
    /// it before the answer is returned (also for a key error).
    pub update_leader: bool,
}

/// How a round that found no answer ends.
#[derive(Debug)]
pub struct RoundExhausted {
    /// Drop the cached Region before the next round: a routing failure, every
    /// candidate said `NotLeader`, a hint named a peer outside the Region, or
    /// the Region had no candidate at all.
    pub reload_region: bool,
    /// The strongest error the round saw (routing failure > all `NotLeader` >
    /// `ServerIsBusy` > other `NotLeader` > timeout).
    pub strongest: Error,
    /// How many candidates were tried.
    pub tried: usize,
    /// How many answered `ServerIsBusy`.
    pub busy_answers: u32,
}

/// The per-round state. Borrows the cached Region; allocates nothing until a
/// candidate fails, so the fast path costs one leader attempt and no list.
#[derive(Debug)]
pub struct CandidateRound<'r> {
    region: &'r RegionWithLeader,
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
    busy_answers: u32,
}

impl<'r> CandidateRound<'r> {
    /// A round over `region`'s candidates in `order`.
    pub fn new(region: &'r RegionWithLeader, order: CandidateOrder) -> Self {
        CandidateRound {
            region,
            order,
            current: None,
            tried: Vec::new(),
            hinted_next: None,
            hint_outside_region: false,
            routing_error: None,
            not_leader_error: None,
            busy_error: None,
            timeout_error: None,
            busy_answers: 0,
        }
    }

    /// The order of this round.
    pub fn order(&self) -> CandidateOrder {
        self.order
    }

    /// The candidates that were tried and did not end the round, in order.
    pub fn tried(&self) -> &[TriedCandidate] {
        &self.tried
    }

    /// The candidate currently being attempted.
    pub fn current(&self) -> Option<&metapb::Peer> {
        self.current.as_ref()
    }

    /// True when the current candidate is the cached leader.
    pub fn current_is_cached_leader(&self) -> bool {
        match (&self.current, &self.region.leader) {
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
    pub fn next_candidate(&mut self) -> Option<metapb::Peer> {
        let next = match self.hinted_next.take() {
            Some(hinted) if !self.was_tried(hinted.id) => Some(hinted),
            _ => self
                .region
                .candidates(self.order)
                .find(|p| !self.was_tried(p.id))
                .copied(),
        };
        self.current = next;
        next
    }

    fn record(&mut self, answer: CandidateAnswer) -> metapb::Peer {
        let peer = self.current.take().unwrap_or_default();
        self.tried.push(TriedCandidate { peer, answer });
        peer
    }

    /// The current candidate's store could not be mapped: the request was
    /// not sent. Next candidate; drop that store.
    pub fn on_mapping_failed(&mut self, error: Error) -> CandidateStep {
        let peer = self.record(CandidateAnswer::MappingFailed);
        self.routing_error.get_or_insert(error);
        CandidateStep::Next {
            invalidate_store: Some(peer.store_id),
        }
    }

    /// The current candidate's RPC failed before any Region response.
    /// `terminal_on_dispatch_error` plans return an undetermined outcome when
    /// the request may have been sent.
    pub fn on_dispatch_failed(
        &mut self,
        error: Error,
        failure: DispatchFailure,
        terminal_on_dispatch_error: bool,
    ) -> CandidateStep {
        if failure == DispatchFailure::Fatal {
            self.current = None;
            return CandidateStep::Fail(error);
        }
        if terminal_on_dispatch_error && failure.may_have_been_sent() {
            self.current = None;
            return CandidateStep::Fail(Error::Undetermined {
                region_id: self.region.id(),
                cause: Box::new(error),
            });
        }
        if failure.is_timeout() {
            self.record(CandidateAnswer::TimedOut);
            self.timeout_error.get_or_insert(error);
            return CandidateStep::Next {
                invalidate_store: None,
            };
        }
        let peer = self.record(CandidateAnswer::TransportFailed);
        self.routing_error.get_or_insert(error);
        CandidateStep::Next {
            invalidate_store: Some(peer.store_id),
        }
    }

    /// The current candidate answered with a Region error.
    pub fn on_region_error(&mut self, error: errorpb::Error) -> CandidateStep {
        let from_leader = self.current_is_cached_leader();
        let region_id = self.region.id();
        if from_leader {
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
                    self.region,
                )
            } else {
                decide_region_error(&error, self.region)
            };
            if action.step == RegionErrorStep::NextCandidate {
                // A leader's hint-less NotLeader: the voters go next, in this
                // very round ([beyond]).
                self.record(CandidateAnswer::NotLeader { hint: None });
                self.not_leader_error
                    .get_or_insert(Error::region_error(region_id, error));
                return CandidateStep::Next {
                    invalidate_store: None,
                };
            }
            if error.server_is_busy.is_some() {
                self.busy_answers += 1;
            }
            return self.end_round(action, error);
        }
        // A fallback peer.
        if let Some(not_leader) = &error.not_leader {
            let hint = not_leader.leader;
            self.record(CandidateAnswer::NotLeader { hint });
            if let Some(hint) = hint {
                self.take_fallback_hint(hint);
            }
            self.not_leader_error
                .get_or_insert(Error::region_error(region_id, error));
            return CandidateStep::Next {
                invalidate_store: None,
            };
        }
        if let Some(busy) = &error.server_is_busy {
            let estimated_wait_ms = busy.estimated_wait_ms;
            self.record(CandidateAnswer::Busy { estimated_wait_ms });
            self.busy_answers += 1;
            self.busy_error
                .get_or_insert(Error::region_error(region_id, error));
            return CandidateStep::Next {
                invalidate_store: None,
            };
        }
        let action = decide_region_error(&error, self.region);
        self.end_round(action, error)
    }

    /// The round ends on a Region error. It ends without success, so a
    /// routing failure seen earlier in it drops the Region route as well
    /// (routing.md, "One round": a transport failure invalidates "the Region
    /// too if the round ends without success"), unless the answer named the
    /// leader to retry at once.
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

    /// **beyond** A fallback hint never updates the cache. An untried
    /// candidate of this round moves to the front; a tried peer is ignored; a
    /// peer outside the cached Region marks it for reload.
    fn take_fallback_hint(&mut self, hint: metapb::Peer) {
        if !self.region.has_peer(&hint) {
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
            && self.region.leader.is_some_and(|l| l.id == hint.id);
        if names_the_leader_kept_last {
            return;
        }
        let is_remaining_candidate = self
            .region
            .candidates(self.order)
            .any(|p| p.id == hint.id && p.store_id == hint.store_id);
        if is_remaining_candidate {
            self.hinted_next = Some(hint);
        }
    }

    /// The current candidate answered without a Region error (a success or a
    /// key error): it accepted the request as leader.
    pub fn on_accepted(&mut self) -> Accepted {
        let update_leader = !self.current_is_cached_leader();
        let peer = self.current.take().unwrap_or_default();
        Accepted {
            peer,
            update_leader,
        }
    }

    /// Ends a round in which no candidate answered.
    pub fn finish(self) -> RoundExhausted {
        let tried = self.tried.len();
        let all_not_leader = tried > 0
            && self
                .tried
                .iter()
                .all(|t| matches!(t.answer, CandidateAnswer::NotLeader { .. }));
        let routing_failure = self.routing_error.is_some();
        // No candidate at all: the cached peer list is unusable.
        let reload_region =
            routing_failure || all_not_leader || self.hint_outside_region || tried == 0;
        let region_id = self.region.id();
        let busy_answers = self.busy_answers;
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
            .unwrap_or(Error::LeaderNotFound { region_id });
        RoundExhausted {
            reload_region,
            strongest,
            tried,
            busy_answers,
        }
    }
}

/// Per-request `ServerIsBusy(0)` counting (routing.md, "ServerIsBusy(0)
/// follower probe"), used when the shared suspicion is off or absent.
#[derive(Debug, Default, Clone)]
pub struct BusyProbeCount {
    leader_peer_id: Option<u64>,
    zero_wait_answers: u32,
    probed: bool,
}

/// How many `ServerIsBusy(0)` answers from one leader trigger the probe.
pub const BUSY_ANSWERS_BEFORE_PROBE: u32 = 2;

impl BusyProbeCount {
    /// Records a `ServerIsBusy(0)` from the cached leader `leader_peer_id`.
    /// Returns true when a followers-only probe round should run now.
    pub fn record_zero_wait(&mut self, leader_peer_id: u64) -> bool {
        if self.leader_peer_id != Some(leader_peer_id) {
            self.leader_peer_id = Some(leader_peer_id);
            self.zero_wait_answers = 0;
        }
        self.zero_wait_answers += 1;
        !self.probed && self.zero_wait_answers >= BUSY_ANSWERS_BEFORE_PROBE
    }

    /// True once this request has run its probe.
    pub fn probed(&self) -> bool {
        self.probed
    }

    /// Records that this request is running its one probe.
    pub fn mark_probed(&mut self) {
        self.probed = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::metapb::PeerRole;

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

    fn next_id(round: &mut CandidateRound<'_>) -> Option<u64> {
        round.next_candidate().map(|p| p.id)
    }

    fn is_next(step: &CandidateStep, store: Option<StoreId>) -> bool {
        matches!(step, CandidateStep::Next { invalidate_store } if *invalidate_store == store)
    }

    #[test]
    fn fast_path_accepts_the_leader_without_recording_anything() {
        let r = region(3, Some(1));
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
        assert_eq!(next_id(&mut round), Some(11));
        let accepted = round.on_accepted();
        assert_eq!(accepted.peer.id, 11);
        assert!(!accepted.update_leader);
        assert_eq!(round.tried().len(), 0);
        assert_eq!(round.tried.capacity(), 0, "no candidate list allocated");
    }

    #[test]
    fn routing_failures_move_on_and_invalidate_stores() {
        let r = region(3, Some(1));
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
        assert_eq!(next_id(&mut round), Some(11));
        let s = round.on_mapping_failed(Error::Connect {
            address: "a".into(),
            message: "refused".into(),
        });
        assert!(is_next(&s, Some(1)));
        assert_eq!(next_id(&mut round), Some(12));
        let s = round.on_dispatch_failed(transport(), DispatchFailure::Transport, false);
        assert!(is_next(&s, Some(2)));
        assert_eq!(next_id(&mut round), Some(13));
        let accepted = round.on_accepted();
        assert!(accepted.update_leader);
        assert_eq!(accepted.peer.id, 13);
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
            let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
            for answer in answers {
                round.next_candidate().unwrap();
                let step = match answer {
                    A::Map => round.on_mapping_failed(Error::Connect {
                        address: "a".into(),
                        message: "connect refused".into(),
                    }),
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
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        match round.on_region_error(busy(0)) {
            CandidateStep::EndRound { action, .. } => assert!(action.busy_zero_wait),
            other => panic!("{other:?}"),
        }
        let mut round = CandidateRound::new(&r, CandidateOrder::FollowersOnly);
        assert_eq!(next_id(&mut round), Some(12));
        assert!(is_next(&round.on_region_error(busy(0)), None));
        assert_eq!(next_id(&mut round), Some(13));
    }

    #[test]
    fn leader_hintless_not_leader_moves_to_voters_in_the_same_round() {
        let r = region(3, Some(1));
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        assert!(is_next(&round.on_region_error(not_leader(None)), None));
        assert_eq!(next_id(&mut round), Some(12));
    }

    #[test]
    fn leader_naming_itself_counts_as_no_hint() {
        let r = region(3, Some(1));
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
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
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
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
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
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
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderLast);
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
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
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
        let mut round = CandidateRound::new(&r, CandidateOrder::FollowersOnly);
        round.next_candidate();
        round.on_region_error(busy(0));
        round.next_candidate();
        round.on_region_error(not_leader(Some(peer(99, 9))));
        assert!(round.finish().reload_region);
    }

    #[test]
    fn fallback_other_region_error_ends_the_round_by_the_table() {
        let r = region(3, Some(1));
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
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
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
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
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        round.on_dispatch_failed(timeout(), DispatchFailure::Deadline, false);
        round.next_candidate();
        match round.on_region_error(data_not_ready()) {
            CandidateStep::EndRound { action, .. } => assert!(!action.invalidate_region),
            other => panic!("{other:?}"),
        }
        // A leader tried last after a voter's mapping failure, naming the
        // leader: the hint is followed at once, the Region kept.
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderLast);
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
            let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
            round.next_candidate();
            let step = round.on_dispatch_failed(transport(), failure, true);
            match step {
                CandidateStep::Fail(e) => assert!(undetermined && e.is_undetermined()),
                CandidateStep::Next { .. } => assert!(!undetermined),
                other => panic!("{other:?}"),
            }
        }
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
        round.next_candidate();
        let step = round.on_dispatch_failed(
            Error::from(tonic::Status::invalid_argument("no")),
            DispatchFailure::Fatal,
            false,
        );
        assert!(matches!(step, CandidateStep::Fail(Error::Grpc(_))));
    }

    #[test]
    fn leader_last_and_leaderless_orders() {
        let r = region(3, Some(1));
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderLast);
        assert_eq!(next_id(&mut round), Some(12));
        let accepted = round.on_accepted();
        assert!(accepted.update_leader);

        let r = region(3, None);
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
        assert_eq!(next_id(&mut round), Some(11));
        assert!(round.on_accepted().update_leader);
    }

    #[test]
    fn a_region_without_candidates_is_reloaded() {
        let r = RegionWithLeader::default();
        let mut round = CandidateRound::new(&r, CandidateOrder::LeaderFirst);
        assert_eq!(round.next_candidate(), None);
        let end = round.finish();
        assert!(end.reload_region);
        assert!(matches!(end.strongest, Error::LeaderNotFound { .. }));
    }

    #[test]
    fn busy_probe_count_table() {
        let mut c = BusyProbeCount::default();
        assert!(!c.record_zero_wait(11));
        assert!(c.record_zero_wait(11), "the second answer probes");
        c.mark_probed();
        assert!(!c.record_zero_wait(11), "one probe per request");
        let mut c = BusyProbeCount::default();
        assert!(!c.record_zero_wait(11));
        assert!(!c.record_zero_wait(12), "a new leader restarts the count");
        assert!(c.record_zero_wait(12));
    }
}
