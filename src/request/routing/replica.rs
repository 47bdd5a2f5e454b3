//! Replica and stale reads ([routing.md, "Replica and stale
//! reads"](crate::spec::routing#replica-and-stale-reads-beyond)): which
//! peer a read asks first when the caller lets it leave the leader. One
//! attempt goes there, flagged `replica_read` (TiKV's read index: the
//! replica learns the leader's commit point and answers once it has
//! applied it) or `stale_read` (served at or below the replica's safe-ts);
//! whatever that attempt does not answer cleanly goes to the leader as an
//! ordinary leader request, with leader-first voter fallback. Pure and
//! synchronous: the shell sends the attempt.

use crate::proto::metapb::{self, PeerRole};
use crate::region::{RegionWithLeader, StoreId};

/// Which replica a read may be served by (client-go's `ReplicaReadType`).
/// Only reads use it; writes, locks and every fallback attempt go to the
/// leader. The default, [`ReplicaRead::Leader`], is what every read did
/// before this existed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ReplicaRead {
    /// The leader only.
    #[default]
    Leader,
    /// A follower (a voter that does not lead), then the leader.
    Follower,
    /// Any peer that holds data, the leader included, spread evenly; then
    /// the leader.
    Mixed,
    /// The leader while its store is reachable; a follower when it is not.
    PreferLeader,
    /// A learner, then the leader.
    Learner,
}

/// How a request reads: its replica choice and whether it is a stale read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct ReadMode {
    /// Which replica the first attempt may go to.
    pub(crate) replica: ReplicaRead,
    /// A stale read: served by a replica at or below its safe-ts
    /// (`Context.stale_read`), else retried on the leader as a normal read
    /// at the same timestamp.
    pub(crate) stale: bool,
}

impl ReadMode {
    /// True when the request may read from another peer than the leader.
    pub(crate) fn leaves_leader(&self) -> bool {
        self.stale || self.replica != ReplicaRead::Leader
    }
}

/// What an attempt sets in the request's context: the flags of the
/// request as it was built (every attempt that no replica attempt went
/// before), a replica or stale read, or a leader read after one (both
/// flags off).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum ReadFlags {
    /// Leave the context's flags as the request was built.
    #[default]
    AsBuilt,
    /// `replica_read` on, `stale_read` off.
    Replica,
    /// `stale_read` on, `replica_read` off.
    Stale,
    /// Both off: a leader read.
    Leader,
}

impl ReadFlags {
    /// The context's `(replica_read, stale_read)`, or `None` to leave them.
    pub(crate) fn context_flags(self) -> Option<(bool, bool)> {
        match self {
            ReadFlags::AsBuilt => None,
            ReadFlags::Replica => Some((true, false)),
            ReadFlags::Stale => Some((false, true)),
            ReadFlags::Leader => Some((false, false)),
        }
    }
}

/// The peer a read's first attempt goes to and the flags it carries, or
/// `None` when the read goes to the leader as an ordinary request (the
/// mode keeps it there, no peer qualifies, or the chosen peer is the
/// cached leader).
///
/// `spread` picks among equally good peers (a counter, so reads spread);
/// `label_match` says whether a store's labels match the client's local
/// labels (`None`: unknown, or no labels configured; the shell looks the
/// candidates' labels up from PD before it asks, so unknown means PD could
/// not tell in time, and such a store ranks as outside the zone);
/// `unreachable` says a store is marked unreachable (never chosen);
/// `not_tikv` says a store is known to run another engine (a TiFlash store,
/// whose learners serve no TiKV read, `ReplicaRead::Learner` included:
/// never chosen, as in client-go, whose replica selector sees TiKV's peers
/// only); `slow` says the store's own feedback calls it slow.
///
/// The candidates are ranked as client-go's replica selector ranks them
/// (`calculateScore`): a store that is not slow first, then one in the
/// client's zone; the read spreads over the best rank. A slow store is
/// still chosen when every candidate is slow.
pub(crate) fn replica_target(
    region: &RegionWithLeader,
    mode: ReadMode,
    spread: usize,
    label_match: impl Fn(StoreId) -> Option<bool>,
    unreachable: impl Fn(StoreId) -> bool,
    not_tikv: impl Fn(StoreId) -> bool,
    slow: impl Fn(StoreId) -> bool,
) -> Option<(metapb::Peer, ReadFlags)> {
    if !mode.leaves_leader() {
        return None;
    }
    let leader = region.leader.as_ref();
    let is_leader = |p: &metapb::Peer| leader.is_some_and(|l| l.id == p.id);
    let role = |p: &metapb::Peer| PeerRole::try_from(p.role).unwrap_or(PeerRole::Voter);
    let holds_data = |p: &metapb::Peer| !p.is_witness;
    let follower = |p: &metapb::Peer| {
        holds_data(p)
            && !is_leader(p)
            && matches!(
                role(p),
                PeerRole::Voter | PeerRole::IncomingVoter | PeerRole::DemotingVoter
            )
    };
    // A stale read asked of the leader only is spread like a mixed read:
    // every peer serves it at its safe-ts.
    let kind = match mode.replica {
        ReplicaRead::Leader if mode.stale => ReplicaRead::Mixed,
        kind => kind,
    };
    let leader_usable = leader.is_some_and(|l| !unreachable(l.store_id));
    let candidates: Vec<&metapb::Peer> = region
        .region
        .peers
        .iter()
        .filter(|p| !unreachable(p.store_id) && !not_tikv(p.store_id))
        .filter(|p| match kind {
            ReplicaRead::Leader => false,
            ReplicaRead::Follower => follower(p),
            ReplicaRead::Mixed => holds_data(p),
            ReplicaRead::PreferLeader => !leader_usable && follower(p),
            ReplicaRead::Learner => holds_data(p) && !is_leader(p) && role(p) == PeerRole::Learner,
        })
        .collect();
    // A store that is not slow first, then one in the client's zone.
    let rank = |p: &metapb::Peer| {
        (u8::from(!slow(p.store_id)) << 1) | u8::from(label_match(p.store_id) == Some(true))
    };
    let best = candidates.iter().map(|p| rank(p)).max()?;
    let pool: Vec<&metapb::Peer> = candidates.into_iter().filter(|p| rank(p) == best).collect();
    let peer = *pool.get(spread % pool.len().max(1))?;
    if is_leader(peer) {
        return None;
    }
    let flags = if mode.stale {
        ReadFlags::Stale
    } else {
        ReadFlags::Replica
    };
    Some((*peer, flags))
}

/// True when `store` has every label of `wanted` (same key and value).
pub(crate) fn labels_match(store: &[metapb::StoreLabel], wanted: &[metapb::StoreLabel]) -> bool {
    wanted
        .iter()
        .all(|w| store.iter().any(|s| s.key == w.key && s.value == w.value))
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

    /// Leader 11 on store 1, follower 12 on store 2, follower 13 on store
    /// 3, learner 14 on store 4.
    fn region() -> RegionWithLeader {
        let peers = vec![
            peer(11, 1, PeerRole::Voter),
            peer(12, 2, PeerRole::Voter),
            peer(13, 3, PeerRole::Voter),
            peer(14, 4, PeerRole::Learner),
        ];
        let leader = Some(peers[0]);
        RegionWithLeader::new(
            metapb::Region {
                id: 1,
                peers,
                ..Default::default()
            },
            leader,
        )
    }

    fn mode(replica: ReplicaRead, stale: bool) -> ReadMode {
        ReadMode { replica, stale }
    }

    fn target(m: ReadMode, spread: usize) -> Option<(u64, ReadFlags)> {
        replica_target(
            &region(),
            m,
            spread,
            |_| None,
            |_| false,
            |_| false,
            |_| false,
        )
        .map(|(p, f)| (p.id, f))
    }

    #[test]
    fn a_leader_read_stays_with_the_leader() {
        for spread in 0..4 {
            assert_eq!(target(mode(ReplicaRead::Leader, false), spread), None);
        }
    }

    #[test]
    fn follower_reads_spread_over_the_followers_flagged_replica_read() {
        let picked: Vec<_> = (0..4)
            .map(|s| target(mode(ReplicaRead::Follower, false), s))
            .collect();
        assert_eq!(
            picked,
            vec![
                Some((12, ReadFlags::Replica)),
                Some((13, ReadFlags::Replica)),
                Some((12, ReadFlags::Replica)),
                Some((13, ReadFlags::Replica)),
            ]
        );
    }

    #[test]
    fn mixed_reads_include_the_leader_which_is_asked_as_a_leader() {
        let picked: Vec<_> = (0..4)
            .map(|s| target(mode(ReplicaRead::Mixed, false), s).map(|(id, _)| id))
            .collect();
        assert_eq!(picked, vec![None, Some(12), Some(13), Some(14)]);
    }

    #[test]
    fn learner_reads_go_to_learners_only() {
        assert_eq!(
            target(mode(ReplicaRead::Learner, false), 7),
            Some((14, ReadFlags::Replica))
        );
    }

    #[test]
    fn prefer_leader_leaves_the_leader_only_when_its_store_is_unreachable() {
        let m = mode(ReplicaRead::PreferLeader, false);
        assert_eq!(target(m, 0), None);
        let away = replica_target(&region(), m, 1, |_| None, |s| s == 1, |_| false, |_| false);
        assert_eq!(away.map(|(p, _)| p.id), Some(13));
    }

    #[test]
    fn unreachable_stores_and_witnesses_are_never_chosen() {
        let mut r = region();
        r.region.peers[1].is_witness = true;
        let m = mode(ReplicaRead::Follower, false);
        for spread in 0..3 {
            let got = replica_target(&r, m, spread, |_| None, |s| s == 3, |_| false, |_| false);
            assert_eq!(
                got, None,
                "only the witness and an unreachable peer are left"
            );
        }
    }

    #[test]
    fn local_labels_pick_the_peers_in_the_clients_zone_when_there_are_any() {
        let m = mode(ReplicaRead::Follower, false);
        for spread in 0..3 {
            let got = replica_target(
                &region(),
                m,
                spread,
                |s| Some(s == 3),
                |_| false,
                |_| false,
                |_| false,
            );
            assert_eq!(got.map(|(p, _)| p.id), Some(13));
        }
        let none_local = replica_target(
            &region(),
            m,
            0,
            |_| Some(false),
            |_| false,
            |_| false,
            |_| false,
        );
        assert_eq!(none_local.map(|(p, _)| p.id), Some(12), "any follower then");
    }

    #[test]
    fn a_slow_store_is_passed_over_while_another_candidate_is_not_slow() {
        let follower = mode(ReplicaRead::Follower, false);
        let slow3 = |s: StoreId| s == 3;
        for spread in 0..4 {
            let got = replica_target(
                &region(),
                follower,
                spread,
                |_| None,
                |_| false,
                |_| false,
                slow3,
            );
            assert_eq!(got.map(|(p, _)| p.id), Some(12), "spread {spread}");
        }
        // Not slow outranks the client's zone, as in client-go.
        let zone3 = |s: StoreId| Some(s == 3);
        let got = replica_target(&region(), follower, 0, zone3, |_| false, |_| false, slow3);
        assert_eq!(got.map(|(p, _)| p.id), Some(12));
        // Every follower slow: still a follower, in the zone first.
        let all = |s: StoreId| s != 1;
        let got = replica_target(&region(), follower, 0, zone3, |_| false, |_| false, all);
        assert_eq!(got.map(|(p, _)| p.id), Some(13));
        // A mixed read passes over a slow leader; a learner read keeps its
        // only learner even when slow.
        let mixed = mode(ReplicaRead::Mixed, false);
        let slow1 = |s: StoreId| s == 1;
        for spread in 0..6 {
            let got = replica_target(
                &region(),
                mixed,
                spread,
                |_| None,
                |_| false,
                |_| false,
                slow1,
            );
            assert!(got.is_some(), "never the slow leader (spread {spread})");
        }
        let learner = mode(ReplicaRead::Learner, false);
        let got = replica_target(
            &region(),
            learner,
            0,
            |_| None,
            |_| false,
            |_| false,
            |s| s == 4,
        );
        assert_eq!(got.map(|(p, _)| p.id), Some(14));
        // A leader read never looks at slowness.
        let leader = mode(ReplicaRead::Leader, false);
        assert_eq!(
            replica_target(&region(), leader, 0, |_| None, |_| false, |_| false, slow1),
            None
        );
    }

    #[test]
    fn unknown_labels_rank_outside_the_zone_never_as_a_match() {
        let follower = mode(ReplicaRead::Follower, false);
        // Store 2's labels unknown, store 3 known in zone: always 13.
        let labels = |s: StoreId| (s != 2).then_some(s == 3);
        for spread in 0..4 {
            let got = replica_target(
                &region(),
                follower,
                spread,
                labels,
                |_| false,
                |_| false,
                |_| false,
            );
            assert_eq!(got.map(|(p, _)| p.id), Some(13));
        }
    }

    #[test]
    fn tiflash_learners_are_never_chosen() {
        // Learner 15 on store 5, a TiFlash store, beside TiKV learner 14.
        let mut r = region();
        r.region.peers.push(peer(15, 5, PeerRole::Learner));
        let tiflash = |s: StoreId| s == 5;
        for kind in [
            ReplicaRead::Learner,
            ReplicaRead::Mixed,
            ReplicaRead::Follower,
            ReplicaRead::PreferLeader,
        ] {
            for stale in [false, true] {
                for spread in 0..10 {
                    let got = replica_target(
                        &r,
                        mode(kind, stale),
                        spread,
                        |_| None,
                        |_| false,
                        tiflash,
                        |_| false,
                    );
                    assert_ne!(
                        got.map(|(p, _)| p.store_id),
                        Some(5),
                        "{kind:?} stale={stale}"
                    );
                }
            }
        }
        // Even in the client's zone, and with nothing else left.
        let zone = |s: StoreId| Some(s == 5);
        let learner = mode(ReplicaRead::Learner, false);
        let got = replica_target(&r, learner, 0, zone, |_| false, tiflash, |_| false);
        assert_eq!(got.map(|(p, _)| p.id), Some(14));
        let got = replica_target(&r, learner, 0, |_| None, |s| s == 4, tiflash, |_| false);
        assert_eq!(got, None, "no TiKV learner left: the leader reads");
    }

    #[test]
    fn a_stale_read_goes_to_any_peer_flagged_stale_read() {
        let picked: Vec<_> = (0..4)
            .map(|s| target(mode(ReplicaRead::Leader, true), s))
            .collect();
        assert_eq!(
            picked,
            vec![
                None,
                Some((12, ReadFlags::Stale)),
                Some((13, ReadFlags::Stale)),
                Some((14, ReadFlags::Stale)),
            ]
        );
        assert_eq!(
            target(mode(ReplicaRead::Follower, true), 0),
            Some((12, ReadFlags::Stale))
        );
    }

    #[test]
    fn labels_match_needs_every_wanted_label() {
        let l = |k: &str, v: &str| metapb::StoreLabel {
            key: k.to_owned(),
            value: v.to_owned(),
        };
        let store = [l("zone", "z1"), l("host", "h1")];
        assert!(labels_match(&store, &[l("zone", "z1")]));
        assert!(!labels_match(&store, &[l("zone", "z2")]));
        assert!(!labels_match(&store, &[l("zone", "z1"), l("rack", "r1")]));
        assert!(labels_match(&store, &[]));
    }
}
