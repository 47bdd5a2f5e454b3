//! Regions as the client sees them: ids, versions, the cached leader, and the
//! lazy leader-first candidate order of [routing.md
//! ("Candidates")](crate::spec::routing#candidates).

pub(crate) mod cache;
mod cached;
mod single_flight;
pub(crate) mod store_engine;

pub(crate) use cache::SingleFlight;
pub(crate) use cache::{RegionCache, StoreCache};
pub(crate) use cached::CachedRegion;
pub(crate) use tikv_plan_proto::meta::can_become_leader;
pub(crate) use tikv_plan_proto::meta::{key_in_range, key_in_region};

pub use crate::ids::{RegionId, RegionVerId, StoreId};
use crate::proto::metapb;
#[cfg(test)]
use crate::proto::metapb::PeerRole;
use crate::{Error, Result};

/// A Region together with the peer the client believes leads it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RegionWithLeader {
    /// The Region's metadata as PD reported it.
    pub region: metapb::Region,
    /// The cached leader, if one is known.
    pub leader: Option<metapb::Peer>,
}

impl RegionWithLeader {
    /// Pairs a Region with its leader.
    pub fn new(region: metapb::Region, leader: Option<metapb::Peer>) -> Self {
        RegionWithLeader { region, leader }
    }

    /// The Region id.
    pub fn id(&self) -> RegionId {
        self.region.id
    }

    /// The Region's epoch; a default (zero) epoch when PD sent none.
    pub fn epoch(&self) -> metapb::RegionEpoch {
        self.region.region_epoch.unwrap_or_default()
    }

    /// The Region's id and epoch.
    pub fn ver_id(&self) -> RegionVerId {
        let epoch = self.epoch();
        RegionVerId {
            id: self.region.id,
            conf_ver: epoch.conf_ver,
            ver: epoch.version,
        }
    }

    /// The first key of the Region.
    pub fn start_key(&self) -> &[u8] {
        &self.region.start_key
    }

    /// The end key of the Region (exclusive); empty means the end of the key
    /// space.
    pub fn end_key(&self) -> &[u8] {
        &self.region.end_key
    }

    /// True when `key` lies in `[start_key, end_key)`.
    pub fn contains(&self, key: &[u8]) -> bool {
        key_in_region(&self.region, key)
    }

    /// The store of the cached leader.
    pub fn leader_store_id(&self) -> Result<StoreId> {
        self.leader
            .as_ref()
            .map(|l| l.store_id)
            .ok_or(Error::LeaderNotFound {
                region: self.ver_id(),
            })
    }

    /// The peer of this Region with the given id.
    pub fn peer(&self, peer_id: u64) -> Option<&metapb::Peer> {
        self.region.peers.iter().find(|p| p.id == peer_id)
    }

    /// True when `peer` is one of this Region's peers (same id and store).
    pub fn has_peer(&self, peer: &metapb::Peer) -> bool {
        self.region
            .peers
            .iter()
            .any(|p| p.id == peer.id && p.store_id == peer.store_id)
    }

    /// The candidates of a round in the given order ([routing.md,
    /// "Candidates"](crate::spec::routing#candidates)). Lazy and
    /// allocation-free.
    pub(crate) fn candidates(&self, order: CandidateOrder) -> Candidates<'_> {
        Candidates::new(&self.region.peers, self.leader.as_ref(), order)
    }
}

/// True when epoch `a` is older than epoch `b`: either component is smaller.
/// The one epoch order of the crate: the Region cache refuses an older
/// epoch, and Region errors take only newer ones.
pub(crate) fn epoch_is_older(a: &metapb::RegionEpoch, b: &metapb::RegionEpoch) -> bool {
    a.version < b.version || a.conf_ver < b.conf_ver
}

/// True when epoch `a` is newer than `b`: older in neither component, and
/// not equal. `(version 2, conf_ver 0)` is not newer than `(1, 5)`.
pub(crate) fn epoch_is_newer(a: &metapb::RegionEpoch, b: &metapb::RegionEpoch) -> bool {
    !epoch_is_older(a, b) && a != b
}

/// Clips `[start, end)` to a Region (empty ends are unbounded).
pub(crate) fn clip_to_region(
    start: &[u8],
    end: &[u8],
    region: &RegionWithLeader,
) -> (Vec<u8>, Vec<u8>) {
    let start = start.max(region.start_key()).to_vec();
    let end = match (end.is_empty(), region.end_key().is_empty()) {
        (true, _) => region.end_key().to_vec(),
        (false, true) => end.to_vec(),
        (false, false) => end.min(region.end_key()).to_vec(),
    };
    (start, end)
}

/// In which order a round visits the cached leader and the other voters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CandidateOrder {
    /// The cached leader, then the other voters (the normal round).
    LeaderFirst,
    /// The other voters, then the cached leader (its store is marked
    /// unreachable; [routing.md, "Store
    /// health"](crate::spec::routing#store-health-beyond)).
    LeaderLast,
    /// Only the other voters (the ServerIsBusy(0) probe).
    FollowersOnly,
}

/// Lazy iterator over a Region's candidates. In the normal case only the
/// first item is ever taken, so nothing beyond the leader is inspected.
#[derive(Debug, Clone)]
pub(crate) struct Candidates<'a> {
    peers: &'a [metapb::Peer],
    /// The store of the cached leader, eligible or not: its other peers are
    /// skipped.
    leader_store: Option<StoreId>,
    /// The cached leader, if it is eligible.
    leader: Option<&'a metapb::Peer>,
    order: CandidateOrder,
    leader_yielded: bool,
    next_peer: usize,
}

impl<'a> Candidates<'a> {
    fn new(
        peers: &'a [metapb::Peer],
        leader: Option<&'a metapb::Peer>,
        order: CandidateOrder,
    ) -> Self {
        Candidates {
            peers,
            leader_store: leader.map(|l| l.store_id),
            leader: leader.filter(|l| can_become_leader(l)),
            order,
            leader_yielded: false,
            next_peer: 0,
        }
    }

    fn next_follower(&mut self) -> Option<&'a metapb::Peer> {
        while let Some(peer) = self.peers.get(self.next_peer) {
            self.next_peer += 1;
            if !can_become_leader(peer) {
                continue;
            }
            match self.leader_store {
                // Skips the leader itself and any other peer on its store.
                Some(store) if peer.store_id == store => continue,
                _ => return Some(peer),
            }
        }
        None
    }

    fn take_leader(&mut self) -> Option<&'a metapb::Peer> {
        if self.leader_yielded {
            return None;
        }
        self.leader_yielded = true;
        self.leader
    }
}

impl<'a> Iterator for Candidates<'a> {
    type Item = &'a metapb::Peer;

    fn next(&mut self) -> Option<Self::Item> {
        match self.order {
            CandidateOrder::LeaderFirst => self.take_leader().or_else(|| self.next_follower()),
            CandidateOrder::LeaderLast => self.next_follower().or_else(|| self.take_leader()),
            CandidateOrder::FollowersOnly => self.next_follower(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(id: u64, store_id: u64, role: PeerRole) -> metapb::Peer {
        metapb::Peer {
            id,
            store_id,
            role: role as i32,
            is_witness: false,
        }
    }

    fn region(peers: Vec<metapb::Peer>, leader: Option<usize>) -> RegionWithLeader {
        let leader = leader.map(|i| peers[i]);
        RegionWithLeader::new(
            metapb::Region {
                id: 7,
                peers,
                ..Default::default()
            },
            leader,
        )
    }

    fn ids(c: Candidates<'_>) -> Vec<u64> {
        c.map(|p| p.id).collect()
    }

    #[test]
    fn leader_first_then_voters_in_peer_order() {
        let r = region(
            vec![
                peer(1, 1, PeerRole::Voter),
                peer(2, 2, PeerRole::Voter),
                peer(3, 3, PeerRole::Voter),
            ],
            Some(1),
        );
        assert_eq!(
            ids(r.candidates(CandidateOrder::LeaderFirst)),
            vec![2, 1, 3]
        );
        assert_eq!(ids(r.candidates(CandidateOrder::LeaderLast)), vec![1, 3, 2]);
        assert_eq!(ids(r.candidates(CandidateOrder::FollowersOnly)), vec![1, 3]);
    }

    #[test]
    fn learners_and_witnesses_are_never_candidates() {
        let mut witness = peer(3, 3, PeerRole::Voter);
        witness.is_witness = true;
        let r = region(
            vec![
                peer(1, 1, PeerRole::Voter),
                peer(2, 2, PeerRole::Learner),
                witness,
                peer(4, 4, PeerRole::Voter),
            ],
            Some(0),
        );
        assert_eq!(ids(r.candidates(CandidateOrder::LeaderFirst)), vec![1, 4]);
    }

    #[test]
    fn joint_consensus_roles_are_candidates() {
        let r = region(
            vec![
                peer(1, 1, PeerRole::Voter),
                peer(2, 2, PeerRole::IncomingVoter),
                peer(3, 3, PeerRole::DemotingVoter),
                peer(4, 4, PeerRole::Learner),
            ],
            Some(0),
        );
        assert_eq!(
            ids(r.candidates(CandidateOrder::LeaderFirst)),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn peer_on_the_leaders_store_is_skipped() {
        let r = region(
            vec![
                peer(1, 1, PeerRole::Voter),
                peer(2, 1, PeerRole::Voter),
                peer(3, 2, PeerRole::Voter),
            ],
            Some(0),
        );
        assert_eq!(ids(r.candidates(CandidateOrder::LeaderFirst)), vec![1, 3]);
    }

    #[test]
    fn region_without_leader_starts_with_its_first_voter() {
        let r = region(
            vec![
                peer(1, 1, PeerRole::Learner),
                peer(2, 2, PeerRole::Voter),
                peer(3, 3, PeerRole::Voter),
            ],
            None,
        );
        assert_eq!(ids(r.candidates(CandidateOrder::LeaderFirst)), vec![2, 3]);
        assert_eq!(ids(r.candidates(CandidateOrder::FollowersOnly)), vec![2, 3]);
    }

    #[test]
    fn a_learner_named_leader_is_not_a_candidate() {
        let r = region(
            vec![peer(1, 1, PeerRole::Learner), peer(2, 2, PeerRole::Voter)],
            Some(0),
        );
        assert_eq!(ids(r.candidates(CandidateOrder::LeaderFirst)), vec![2]);
    }

    #[test]
    fn missing_epoch_and_leader_do_not_panic() {
        let r = RegionWithLeader::default();
        assert_eq!(r.ver_id(), RegionVerId::default());
        assert!(matches!(
            r.leader_store_id(),
            Err(Error::LeaderNotFound {
                region: RegionVerId { id: 0, .. }
            })
        ));
        assert_eq!(r.candidates(CandidateOrder::LeaderFirst).count(), 0);
    }

    #[test]
    fn contains_respects_half_open_range_and_open_end() {
        let mut r = RegionWithLeader::default();
        r.region.start_key = b"b".to_vec();
        r.region.end_key = b"d".to_vec();
        assert!(!r.contains(b"a"));
        assert!(r.contains(b"b"));
        assert!(r.contains(b"c"));
        assert!(!r.contains(b"d"));
        r.region.end_key.clear();
        assert!(r.contains(b"zzz"));
    }
}
