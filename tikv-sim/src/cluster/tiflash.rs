//! TiFlash stores beside the TiKV ones, as most TiDB clusters run them.
//!
//! TiFlash's proxy registers each TiFlash store with PD under the label
//! `engine=tiflash` (pingcap/tiflash, `getProxyLabelByDisaggregatedMode`;
//! the proxy's `engine-label`), and PD's placement rules put a table's
//! TiFlash replicas there as learners: the `engine` label is exclusive
//! (PD's `isExclusiveLabel`), so only a rule naming it places a peer on
//! such a store, and TiFlash's rules place learners. A TiFlash learner
//! never votes, never leads and is never promoted; its store answers every
//! TiKV request with gRPC `Unimplemented` (`store/tiflash.rs`).
//!
//! Here, [`SimClusterBuilder::tiflash_stores`] adds such stores after the
//! TiKV ones, and every Region the builder lays out (not the explicit
//! [`RegionLayout`](super::RegionLayout)s, which name their own peers)
//! gets a learner on each, after its voters. Splits give the new Region
//! the same learners; merges need them equal on both sides, as any peer.

use std::time::Duration;

use tonic::service::Routes;

use super::{SimCluster, SimClusterBuilder, SimPeer};
use crate::counters::StoreCounters;
use crate::state::SimStore;
use crate::store::{StoreService, TiFlashServer};
use crate::{Error, Result};
use tikv_plan_proto::meta::{StoreEngine, ENGINE_LABEL_KEY};

impl SimClusterBuilder {
    /// Adds `n` TiFlash stores (default 0) after the TiKV stores: ids
    /// `stores + 1 ..= stores + n`, labelled `engine=tiflash` by PD, with
    /// a learner of every Region laid out by [`replicas`](Self::replicas)
    /// on each. Their servers answer every TiKV request with gRPC
    /// `Unimplemented`, as TiFlash does. An explicit
    /// [`region_layout`](Self::region_layout) may place learners there
    /// ([`SimPeer::learner`]); never a voter or a witness.
    pub fn tiflash_stores(mut self, n: u64) -> Self {
        self.tiflash_stores = n;
        self
    }

    /// The engine of store `store_id` of the cluster being built.
    pub(super) fn engine_of(&self, store_id: u64) -> StoreEngine {
        if store_id > self.stores {
            StoreEngine::TiFlash
        } else {
            StoreEngine::TiKv
        }
    }

    /// Every store id of the cluster being built: TiKV's, then TiFlash's.
    pub(super) fn all_store_ids(&self) -> std::ops::RangeInclusive<u64> {
        1..=self.stores + self.tiflash_stores
    }

    /// The peers of Region `index` when no layout names them: `replicas`
    /// voters round-robin over the TiKV stores, then a learner on each
    /// TiFlash store.
    pub(super) fn default_peers(&self, index: usize, replicas: usize) -> Vec<SimPeer> {
        let n = self.stores;
        (0..replicas)
            .map(|j| SimPeer::voter((index as u64 + j as u64) % n + 1))
            .chain((n + 1..=n + self.tiflash_stores).map(SimPeer::learner))
            .collect()
    }

    /// Why a layout's peer on a TiFlash store is refused, if it is: only
    /// learners live there.
    pub(super) fn tiflash_peer_refusal(&self, index: usize, peer: &SimPeer) -> Option<String> {
        let tiflash = self.engine_of(peer.store_id) != StoreEngine::TiKv;
        let learner = peer.role == crate::proto::metapb::PeerRole::Learner && !peer.is_witness;
        (tiflash && !learner).then(|| {
            format!(
                "region {index}: store {} is a TiFlash store, which holds only learners",
                peer.store_id
            )
        })
    }
}

/// A store of `engine`, up and without faults.
pub(super) fn new_store(engine: StoreEngine) -> SimStore {
    SimStore {
        address: String::new(),
        up: true,
        hang: None,
        slow: Duration::ZERO,
        busy: None,
        drop_next: Vec::new(),
        client_cut: None,
        lag: None,
        labels: Vec::new(),
        engine,
        counters: StoreCounters::default(),
        health: crate::store::StoreHealth::new(tokio::time::Instant::now()),
    }
}

/// The gRPC service of TiFlash store `store_id`.
pub(super) fn tiflash_routes(shared: &std::sync::Arc<super::Shared>, store_id: u64) -> Routes {
    Routes::new(TiFlashServer::new(StoreService {
        shared: shared.clone(),
        store_id,
    }))
}

/// The refusal of a label PD reserves (`engine`, which TiKV and TiFlash
/// set and PD's API refuses to change), if `key` is one.
pub(super) fn reserved_label(key: &str) -> Result<()> {
    if key == ENGINE_LABEL_KEY {
        return Err(Error::InvalidArgument(format!(
            "label key {key:?} is reserved: the store's engine sets it (PD refuses it too); \
             add TiFlash stores with SimClusterBuilder::tiflash_stores"
        )));
    }
    Ok(())
}

impl SimCluster {
    /// The engine store `store_id` runs (`None`: no such store).
    pub fn store_engine(&self, store_id: u64) -> Option<StoreEngine> {
        self.state().stores.get(&store_id).map(|s| s.engine)
    }

    /// The ids of the TiKV stores, ascending ([`store_ids`](Self::store_ids)
    /// lists TiFlash's too).
    pub fn tikv_store_ids(&self) -> Vec<u64> {
        self.store_ids_of(true)
    }

    /// The ids of the TiFlash stores, ascending
    /// ([`SimClusterBuilder::tiflash_stores`]).
    pub fn tiflash_store_ids(&self) -> Vec<u64> {
        self.store_ids_of(false)
    }

    fn store_ids_of(&self, tikv: bool) -> Vec<u64> {
        self.state()
            .stores
            .iter()
            .filter(|(_, s)| s.engine.is_tikv() == tikv)
            .map(|(id, _)| *id)
            .collect()
    }
}
