//! Explicit Region layouts for [`SimClusterBuilder::region_layout`](super::SimClusterBuilder::region_layout):
//! which stores hold a Region's peers, in which roles, and who leads.

use crate::proto::metapb::PeerRole;
use crate::state::ColdMode;

/// One peer of a Region in an explicit [`RegionLayout`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SimPeer {
    /// The store holding the peer.
    pub store_id: u64,
    /// Voter or learner.
    pub role: PeerRole,
    /// A witness votes but holds no data and never leads.
    pub is_witness: bool,
}

impl SimPeer {
    /// A voter on `store_id`.
    pub fn voter(store_id: u64) -> Self {
        SimPeer {
            store_id,
            role: PeerRole::Voter,
            is_witness: false,
        }
    }

    /// A learner on `store_id`.
    pub fn learner(store_id: u64) -> Self {
        SimPeer {
            store_id,
            role: PeerRole::Learner,
            is_witness: false,
        }
    }

    /// A witness (a voter that never leads) on `store_id`.
    pub fn witness(store_id: u64) -> Self {
        SimPeer {
            store_id,
            role: PeerRole::Voter,
            is_witness: true,
        }
    }

    /// A peer with any role, e.g. `PeerRole::IncomingVoter`.
    pub fn with_role(store_id: u64, role: PeerRole) -> Self {
        SimPeer {
            store_id,
            role,
            is_witness: false,
        }
    }
}

/// An explicit peer list for one Region, with its leader.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionLayout {
    pub(super) peers: Vec<SimPeer>,
    pub(super) leader: Option<u64>,
    pub(super) cold: Option<ColdMode>,
}

impl RegionLayout {
    /// The peers in this order (peer order in the Region's metadata). The
    /// leader defaults to the first voter that is not a witness.
    pub fn new(peers: Vec<SimPeer>) -> Self {
        RegionLayout {
            peers,
            leader: None,
            cold: None,
        }
    }

    /// The peer on `store_id` leads (true leader and PD's view).
    pub fn leader(mut self, store_id: u64) -> Self {
        self.leader = Some(store_id);
        self
    }

    /// The Region starts cold: it has no leader, PD names the would-be
    /// leader (see [`leader`](Self::leader)), and a leader request to a voter
    /// makes it campaign in `mode`.
    pub fn cold(mut self, mode: ColdMode) -> Self {
        self.cold = Some(mode);
        self
    }
}
