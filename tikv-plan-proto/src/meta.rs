//! Facts about Region and peer metadata that a client and a server must
//! agree on: which keys a Region holds, and which peers may lead.

use crate::metapb::{self, PeerRole};

/// True when `key` lies in the Region's `[start_key, end_key)`, an empty end
/// key meaning the end of the key space. The client's cache and the
/// simulated stores share this one definition.
pub fn key_in_region(region: &metapb::Region, key: &[u8]) -> bool {
    key_in_range(&region.start_key, &region.end_key, key)
}

/// True when `key` lies in `[start, end)`, an empty `end` meaning the end of
/// the key space.
pub fn key_in_range(start: &[u8], end: &[u8], key: &[u8]) -> bool {
    key >= start && (end.is_empty() || key < end)
}

/// True when a peer may be asked to act as leader: voters (including the
/// joint-consensus roles) that are not witnesses. A role this crate does
/// not know counts as unable to lead.
pub fn can_become_leader(peer: &metapb::Peer) -> bool {
    PeerRole::try_from(peer.role).is_ok_and(|role| role_can_lead(role, peer.is_witness))
}

/// The rule behind [`can_become_leader`] for a role already decoded (the
/// simulated cluster's layouts hold `PeerRole`s, not wire integers).
pub fn role_can_lead(role: PeerRole, is_witness: bool) -> bool {
    !is_witness
        && matches!(
            role,
            PeerRole::Voter | PeerRole::IncomingVoter | PeerRole::DemotingVoter
        )
}
