//! An election under way: a Region's voters have stopped hearing from its
//! leader (its store died, or was cut off from them) and have not chosen
//! another yet. In TiKV such a follower answers a leader request with
//! `NotLeader` naming no one: it knows no leader to point at. It does not
//! take the request as a reason to campaign either; the election runs on
//! Raft's own clock, which a test plays with
//! [`transfer_leader`](SimCluster::transfer_leader) (the winner), or not at
//! all when the old leader comes back and is heard again.

use super::SimCluster;
use crate::Result;

impl SimCluster {
    /// Starts an election in Region `region_id`: until
    /// [`transfer_leader`](SimCluster::transfer_leader) names its winner,
    /// every peer but the leader answers a leader request with `NotLeader`
    /// without a hint, and no voter campaigns (even in a cold Region). The
    /// leader, when its store is up, still serves; PD's view is unchanged.
    pub fn start_election(&self, region_id: u64) -> Result<()> {
        tracing::info!("simulated region {region_id}: its voters lost the leader (election)");
        self.state().region_mut(region_id)?.electing = true;
        self.shared.faults_changed();
        Ok(())
    }
}
