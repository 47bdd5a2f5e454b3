//! [`CachedRegion`]: a Region as the [`RegionCache`](super::RegionCache)
//! holds it, compact and immutable, handed out as `Arc<CachedRegion>` so
//! that a cache hit costs a reference count rather than a copy.

use std::sync::atomic::{AtomicU32, Ordering};

use smallvec::SmallVec;

use super::{key_in_range, RegionId, RegionVerId, RegionWithLeader, StoreId};
use crate::proto::metapb;
use crate::{Error, Result};

/// Key bytes (start and end key together) kept inline; longer pairs take
/// one more allocation. Region boundaries are mostly 16–30 bytes each.
const INLINE_KEY_BYTES: usize = 48;

/// Peers kept inline: three replicas, the usual layout.
const INLINE_PEERS: usize = 3;

/// `leader` when no leader is cached.
const NO_LEADER: u16 = u16::MAX;
/// `leader` when the leader record is not one of the first
/// [`OTHER_LEADER`] `peers` (kept in `other_leader`).
const OTHER_LEADER: u16 = u16::MAX - 1;

/// A Region and its cached leader in the form the Region cache stores:
/// both keys and (up to three) peers in one allocation with the handle's
/// reference count, and only the fields a client reads.
///
/// The cache hands out `Arc<CachedRegion>`: a hit takes a reference count,
/// never a copy. It reads like [`RegionWithLeader`] (`id`, `ver_id`,
/// `start_key`, `contains`, `candidates`, ...);
/// [`to_region_with_leader`](Self::to_region_with_leader) builds the
/// client-rust type where a value is needed. Conversions both ways keep
/// every field but `metapb::Region`'s flashback fields, which a client never
/// reads (they come back zero).
// `repr(C)` puts what a key comparison reads (the start key's length and
// the key bytes) first, right behind the `Arc`'s counts: the start-key
// index compares through the `Arc`, and this keeps each comparison to one
// or two cache lines.
#[repr(C)]
#[derive(Debug, Clone)]
pub struct CachedRegion {
    /// Where the start key ends in `keys`.
    start_len: u32,
    /// When the cache drops this Region unless it is used (see
    /// [`Expiry`]); not part of the Region, so equality ignores it.
    pub(super) expiry: Expiry,
    /// The start key followed by the end key.
    keys: SmallVec<[u8; INLINE_KEY_BYTES]>,
    pub(super) id: RegionId,
    conf_ver: u64,
    version: u64,
    peers: SmallVec<[metapb::Peer; INLINE_PEERS]>,
    /// A leader record that is not one of `peers` (rare: PD names a peer
    /// the Region does not list, or a carried-over record whose role has
    /// since changed).
    other_leader: Option<Box<metapb::Peer>>,
    /// When the cache inserted this Region (its eviction queue's marker);
    /// not part of the Region, so equality ignores it.
    pub(super) stamp: u32,
    /// The leader's index in `peers`, [`NO_LEADER`] or [`OTHER_LEADER`].
    leader: u16,
    /// False when PD sent no epoch (it reads as zero, and converts back to
    /// none).
    has_epoch: bool,
    /// PD reported a down peer: use does not extend the life in the cache,
    /// so the Region is reloaded once its TTL has run out.
    pub(super) expires_anyway: bool,
}

/// A cached Region's deadline, in tenths of a second on the cache's clock
/// (a `u32` of them lasts 13 years). Read on every hit, written at most
/// once a second per Region: a hot Region's cache line is not bounced
/// between cores by every lookup.
#[derive(Debug, Default)]
pub(crate) struct Expiry(AtomicU32);

impl Clone for Expiry {
    fn clone(&self) -> Self {
        Expiry(AtomicU32::new(self.0.load(Ordering::Relaxed)))
    }
}

/// A refresh within this many tenths of a second of the last is skipped.
const REFRESH_STEP: u32 = 10;

impl Expiry {
    /// The deadline.
    pub(crate) fn deadline(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the deadline.
    pub(crate) fn set(&self, deadline: u32) {
        self.0.store(deadline, Ordering::Relaxed);
    }

    /// True while the deadline has not passed at `now`. A live entry that
    /// is not `fixed` gets a new deadline from `refresh` when `now + ttl`
    /// is a second (half the TTL, if that is less) or more past the
    /// current one.
    pub(crate) fn alive_at(
        &self,
        now: u32,
        ttl: u32,
        fixed: bool,
        refresh: impl FnOnce() -> u32,
    ) -> bool {
        let deadline = self.0.load(Ordering::Relaxed);
        if now > deadline {
            return false;
        }
        // A TTL under two seconds refreshes at half its length instead.
        let step = REFRESH_STEP.min(ttl / 2).max(1);
        if !fixed && now.saturating_add(ttl) >= deadline.saturating_add(step) {
            self.0.store(refresh(), Ordering::Relaxed);
        }
        true
    }
}

impl PartialEq for CachedRegion {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
            && self.has_epoch == other.has_epoch
            && self.epoch() == other.epoch()
            && self.start_key() == other.start_key()
            && self.end_key() == other.end_key()
            && self.peers == other.peers
            && self.leader() == other.leader()
    }
}

impl Eq for CachedRegion {}

impl CachedRegion {
    /// The Region id.
    pub fn id(&self) -> RegionId {
        self.id
    }

    /// The Region's epoch; zero when PD sent none.
    pub fn epoch(&self) -> metapb::RegionEpoch {
        metapb::RegionEpoch {
            conf_ver: self.conf_ver,
            version: self.version,
        }
    }

    /// The Region's id and epoch.
    pub fn ver_id(&self) -> RegionVerId {
        RegionVerId {
            id: self.id,
            conf_ver: self.conf_ver,
            ver: self.version,
        }
    }

    /// The first key of the Region.
    pub fn start_key(&self) -> &[u8] {
        self.keys.get(..self.start_len as usize).unwrap_or_default()
    }

    /// The end key of the Region (exclusive); empty means the end of the key
    /// space.
    pub fn end_key(&self) -> &[u8] {
        self.keys.get(self.start_len as usize..).unwrap_or_default()
    }

    /// True when `key` lies in `[start_key, end_key)`.
    pub fn contains(&self, key: &[u8]) -> bool {
        key_in_range(self.start_key(), self.end_key(), key)
    }

    /// The Region's peers, in PD's order.
    pub fn peers(&self) -> &[metapb::Peer] {
        &self.peers
    }

    /// The cached leader, if one is known.
    pub fn leader(&self) -> Option<&metapb::Peer> {
        match self.leader {
            NO_LEADER => None,
            OTHER_LEADER => self.other_leader.as_deref(),
            index => self.peers.get(usize::from(index)),
        }
    }

    /// The store of the cached leader.
    pub fn leader_store_id(&self) -> Result<StoreId> {
        self.leader()
            .map(|l| l.store_id)
            .ok_or(Error::LeaderNotFound {
                region: self.ver_id(),
            })
    }

    /// The peer of this Region with the given id.
    pub fn peer(&self, peer_id: u64) -> Option<&metapb::Peer> {
        self.peers.iter().find(|p| p.id == peer_id)
    }

    /// True when `peer` is one of this Region's peers (same id and store).
    pub fn has_peer(&self, peer: &metapb::Peer) -> bool {
        self.peer_index(peer).is_some()
    }

    #[cfg(test)]
    /// The candidates of a round in the given order ([routing.md,
    /// "Candidates"](crate::spec::routing#candidates)), exactly as [`RegionWithLeader::candidates`] walks
    /// them. Lazy and allocation-free.
    pub(crate) fn candidates(&self, order: super::CandidateOrder) -> super::Candidates<'_> {
        super::Candidates::new(&self.peers, self.leader(), order)
    }

    /// The Region as the client-rust type, for code that needs a value
    /// (three allocations: both keys and the peer list).
    pub fn to_region_with_leader(&self) -> RegionWithLeader {
        RegionWithLeader::new(
            metapb::Region {
                id: self.id,
                start_key: self.start_key().to_vec(),
                end_key: self.end_key().to_vec(),
                region_epoch: self.has_epoch.then(|| self.epoch()),
                peers: self.peers.to_vec(),
                ..Default::default()
            },
            self.leader().copied(),
        )
    }

    /// Position of `peer` (same id and store) in `peers`.
    fn peer_index(&self, peer: &metapb::Peer) -> Option<usize> {
        self.peers
            .iter()
            .position(|p| p.id == peer.id && p.store_id == peer.store_id)
    }

    /// Sets the leader record: by its position when it is exactly one of
    /// the peers, else kept aside, so the record reads back unchanged.
    pub(crate) fn set_leader(&mut self, leader: Option<metapb::Peer>) {
        self.other_leader = None;
        self.leader = match leader {
            None => NO_LEADER,
            Some(leader) => match self
                .peers
                .iter()
                .position(|p| *p == leader)
                .and_then(|i| u16::try_from(i).ok())
                .filter(|i| *i < OTHER_LEADER)
            {
                Some(index) => index,
                None => {
                    self.other_leader = Some(Box::new(leader));
                    OTHER_LEADER
                }
            },
        };
    }

    /// A copy led by the peer of this Region with `leader`'s id and store
    /// (the peer record this Region holds); `None` when it has no such peer.
    pub(crate) fn led_by(&self, leader: &metapb::Peer) -> Option<CachedRegion> {
        let index = self.peer_index(leader)?;
        let mut led = self.clone();
        led.set_leader(self.peers.get(index).copied());
        Some(led)
    }
}

impl From<RegionWithLeader> for CachedRegion {
    fn from(region: RegionWithLeader) -> Self {
        let RegionWithLeader { region, leader } = region;
        let mut keys = SmallVec::with_capacity(region.start_key.len() + region.end_key.len());
        keys.extend_from_slice(&region.start_key);
        keys.extend_from_slice(&region.end_key);
        let epoch = region.region_epoch.unwrap_or_default();
        let mut cached = CachedRegion {
            // A key longer than 4 GiB cannot come over gRPC.
            start_len: u32::try_from(region.start_key.len()).unwrap_or(u32::MAX),
            expiry: Expiry::default(),
            keys,
            id: region.id,
            conf_ver: epoch.conf_ver,
            version: epoch.version,
            // Copied, not adopted: a decoded list may have spare capacity.
            peers: SmallVec::from_slice(&region.peers),
            other_leader: None,
            stamp: 0,
            leader: NO_LEADER,
            has_epoch: region.region_epoch.is_some(),
            expires_anyway: false,
        };
        cached.set_leader(leader);
        cached
    }
}

impl From<&CachedRegion> for RegionWithLeader {
    fn from(region: &CachedRegion) -> Self {
        region.to_region_with_leader()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::metapb::PeerRole;
    use crate::region::CandidateOrder;

    fn peer(id: u64, store_id: u64, role: PeerRole) -> metapb::Peer {
        metapb::Peer {
            id,
            store_id,
            role: role as i32,
            is_witness: false,
        }
    }

    fn region(
        start: &[u8],
        end: &[u8],
        peers: Vec<metapb::Peer>,
        leader: Option<metapb::Peer>,
    ) -> RegionWithLeader {
        RegionWithLeader::new(
            metapb::Region {
                id: 7,
                start_key: start.to_vec(),
                end_key: end.to_vec(),
                region_epoch: Some(metapb::RegionEpoch {
                    conf_ver: 3,
                    version: 9,
                }),
                peers,
                ..Default::default()
            },
            leader,
        )
    }

    fn three() -> Vec<metapb::Peer> {
        (1..=3).map(|s| peer(10 + s, s, PeerRole::Voter)).collect()
    }

    #[test]
    fn the_three_replica_shape_takes_one_allocation_of_at_most_184_bytes() {
        // The budget of tests/region_cache_memory.rs rests on this: keys up
        // to 48 bytes and three peers live inside the struct.
        assert!(std::mem::size_of::<CachedRegion>() <= 184);
        let r = CachedRegion::from(region(&[b'k'; 24], &[b'l'; 24], three(), None));
        assert!(!r.keys.spilled());
        assert!(!r.peers.spilled());
    }

    #[test]
    fn converts_back_to_what_it_was_made_from() {
        let peers = three();
        let cases = vec![
            region(b"a", b"m", peers.clone(), Some(peers[1])),
            region(b"", b"", peers.clone(), None),
            // Long keys and many peers spill to the heap.
            region(
                &[1; 40],
                &[2; 60],
                (1..=7).map(|s| peer(s, s, PeerRole::Voter)).collect(),
                None,
            ),
            // A leader that is not a peer, and one whose role differs from
            // the peer's record: both read back as given.
            region(
                b"a",
                b"b",
                peers.clone(),
                Some(peer(99, 9, PeerRole::Voter)),
            ),
            region(
                b"a",
                b"b",
                peers.clone(),
                Some(peer(12, 2, PeerRole::Learner)),
            ),
            RegionWithLeader::default(),
        ];
        for case in cases {
            let cached = CachedRegion::from(case.clone());
            assert_eq!(cached.to_region_with_leader(), case);
            assert_eq!(cached.ver_id(), case.ver_id());
            assert_eq!(cached.epoch(), case.epoch());
            assert_eq!(cached.start_key(), case.start_key());
            assert_eq!(cached.end_key(), case.end_key());
            assert_eq!(cached.leader(), case.leader.as_ref());
        }
    }

    #[test]
    fn flashback_fields_are_dropped() {
        let mut r = region(b"a", b"b", three(), None);
        r.region.is_in_flashback = true;
        r.region.flashback_start_ts = 5;
        let back = CachedRegion::from(r).to_region_with_leader();
        assert!(!back.region.is_in_flashback);
        assert_eq!(back.region.flashback_start_ts, 0);
    }

    #[test]
    fn reads_like_the_region_it_was_made_from() {
        let mut peers = three();
        peers[2].role = PeerRole::Learner as i32;
        let full = region(b"b", b"d", peers.clone(), Some(peers[1]));
        let cached = CachedRegion::from(full.clone());
        for key in [&b"a"[..], b"b", b"c", b"d", b""] {
            assert_eq!(cached.contains(key), full.contains(key), "{key:?}");
        }
        assert_eq!(cached.leader_store_id().unwrap(), 2);
        assert_eq!(cached.peer(13), full.peer(13));
        assert!(cached.has_peer(&peer(11, 1, PeerRole::Learner)));
        assert!(!cached.has_peer(&peer(11, 2, PeerRole::Voter)));
        for order in [
            CandidateOrder::LeaderFirst,
            CandidateOrder::LeaderLast,
            CandidateOrder::FollowersOnly,
        ] {
            let ours: Vec<_> = cached.candidates(order).map(|p| p.id).collect();
            let theirs: Vec<_> = full.candidates(order).map(|p| p.id).collect();
            assert_eq!(ours, theirs, "{order:?}");
        }
        let leaderless = CachedRegion::from(region(b"b", b"d", peers, None));
        assert!(matches!(
            leaderless.leader_store_id(),
            Err(Error::LeaderNotFound { .. })
        ));
    }

    #[test]
    fn led_by_takes_the_peers_own_record() {
        let mut peers = three();
        peers[1].role = PeerRole::IncomingVoter as i32;
        let cached = CachedRegion::from(region(b"a", b"b", peers, None));
        let led = cached.led_by(&peer(12, 2, PeerRole::Voter)).unwrap();
        assert_eq!(
            led.leader().map(|l| l.role),
            Some(PeerRole::IncomingVoter as i32)
        );
        assert!(cached.led_by(&peer(12, 3, PeerRole::Voter)).is_none());
        assert!(cached.leader().is_none(), "the original is unchanged");
    }
}
