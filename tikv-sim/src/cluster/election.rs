//! An election a test runs by hand: a Region's followers have stopped
//! hearing from its leader and campaign, and no one wins until the test
//! names the winner with [`transfer_leader`](SimCluster::transfer_leader)
//! (or never, when the old leader comes back and is heard again). raft-rs
//! clears a (pre)candidate's leader, so each follower answers a leader
//! request with `NotLeader` naming no one, and a request is no reason for
//! it to campaign further. The elections that follow a store's death on
//! their own (`raft.rs`) are timed by Raft's clock instead, their
//! followers still naming the dead leader until one of them campaigns.

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
        self.state().region_mut(region_id)?.campaigning = true;
        self.shared.faults_changed();
        Ok(())
    }
}
