//! A store cut off from clients while the cluster keeps it: the network
//! between this client side and one store is broken (a one-sided partition,
//! a firewall), the store keeps leading its Regions, and other stores still
//! reach it, so a call forwarded through one of them
//! (`tikv-forwarded-host`) gets through.

use super::{lock, SimCluster};
use crate::net::ClientCut;
use crate::{Error, Result};

impl SimCluster {
    /// Cuts store `store_id` off from clients (`Some`), or joins them again
    /// (`None`). Every connection a client opens to it, or has open, is
    /// reset ([`ClientCut::Refuse`]) or stops moving bytes
    /// ([`ClientCut::Drop`]); connections from other stores (forwarding)
    /// work, and leadership and PD's view are unchanged. A cluster hosted on
    /// a simulated network ([`SimClusterBuilder::build_hosted`](crate::SimClusterBuilder::build_hosted))
    /// has no listeners to cut: partition the network there instead.
    pub fn cut_store_from_clients(&self, store_id: u64, cut: Option<ClientCut>) -> Result<()> {
        if !self.state().stores.contains_key(&store_id) {
            return Err(Error::StoreNotFound { store_id });
        }
        match lock(&self.shared.stores).get_mut(&store_id) {
            Some(endpoint) => endpoint.set_client_cut(cut),
            None => {
                return Err(Error::InvalidArgument(format!(
                    "store {store_id} is hosted on a network of its own; partition that network instead"
                )))
            }
        }
        tracing::info!("simulated store {store_id}: cut from clients {cut:?}");
        if let Some(store) = self.state().stores.get_mut(&store_id) {
            store.client_cut = cut;
        }
        self.shared.faults_changed();
        Ok(())
    }
}
