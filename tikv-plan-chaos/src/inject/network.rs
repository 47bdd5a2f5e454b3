//! Faults of the network between the client and the stores that leave the
//! cluster itself whole: a store cut off from clients while it keeps
//! leading and the other stores still reach it.

use tikv_sim::{ClientCut, SimCluster};
use tokio::time::Instant;

use super::{Heal, Injector};

impl Injector {
    /// Cuts a random store off from clients until `heal_at`, its new
    /// connections refused or silently dropped (one store at a time, so a
    /// voter is always left to forward through).
    pub(super) fn cut_clients(
        &mut self,
        cluster: &SimCluster,
        heal_at: Instant,
        index: usize,
    ) -> Option<String> {
        if self
            .active
            .iter()
            .any(|(_, h, _)| matches!(h, Heal::Uncut(_)))
        {
            return None;
        }
        let store = self.random_store(cluster)?;
        let cut = if self.rng.bool() {
            ClientCut::Refuse
        } else {
            ClientCut::Drop
        };
        cluster.cut_store_from_clients(store, Some(cut)).ok()?;
        self.active.push((heal_at, Heal::Uncut(store), index));
        Some(format!("store {store} {cut:?}"))
    }
}
