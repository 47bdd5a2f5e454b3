//! The cluster changing shape: Region merge, membership changes (add a
//! voter or a learner, promote a learner, remove a peer) and a store moving
//! to a new address. Epochs move as TiKV moves them:
//!
//! * A merge runs PrepareMerge on the source (its version and conf_ver
//!   each go up by one) and then CommitMerge on the target, whose version
//!   becomes one more than the larger of the two versions; the target's
//!   conf_ver is unchanged. The source's peers are destroyed, so its
//!   stores answer `RegionNotFound` for it.
//! * Every conf change moves conf_ver by one and leaves the version alone.
//!   A removed peer is destroyed: its store answers `RegionNotFound`. A
//!   conf change needs the Region's leader, and a removal must leave a
//!   quorum of live voters.
//! * A merge needs both Regions led, with the same peers (store and role)
//!   all up.

use std::net::SocketAddr;

use super::{bind, lock, SimCluster};
use crate::proto::metapb::{self, PeerRole};
use crate::state::{ClusterState, SimRegion};
use crate::{Error, Result};
use tikv_plan_proto::meta::can_become_leader;

fn invalid(message: String) -> Error {
    Error::InvalidArgument(message)
}

/// The Region's peers as (store, role) pairs, sorted: two Regions merge
/// only when these are equal (TiKV's same-peers check).
fn store_set(region: &SimRegion) -> Vec<(u64, i32)> {
    let mut stores: Vec<(u64, i32)> = region
        .meta
        .peers
        .iter()
        .map(|p| (p.store_id, p.role))
        .collect();
    stores.sort_unstable();
    stores
}

/// A conf change is proposed through the leader: a cold Region takes none.
fn needs_leader(region: &SimRegion) -> Result<()> {
    match region.leader {
        Some(_) => Ok(()),
        None => Err(invalid(format!(
            "region {} has no leader; a conf change is proposed through the leader",
            region.meta.id
        ))),
    }
}

fn bump_conf_ver(region: &mut SimRegion) {
    let mut epoch = region.meta.region_epoch.unwrap_or_default();
    epoch.conf_ver += 1;
    region.meta.region_epoch = Some(epoch);
}

impl ClusterState {
    /// Merges Region `source` into the adjacent Region `target`.
    pub(crate) fn merge(&mut self, source_id: u64, target_id: u64) -> Result<()> {
        self.prepare_merge(source_id, target_id)?;
        self.commit_merge(source_id, target_id)
    }

    /// PrepareMerge on `source`, after the merge's checks: its version and
    /// conf_ver go up by one.
    pub(crate) fn prepare_merge(&mut self, source_id: u64, target_id: u64) -> Result<()> {
        if self.raft.in_merge(source_id) || self.raft.in_merge(target_id) {
            return Err(invalid(format!(
                "region {source_id} or {target_id} is already merging; wait for that merge"
            )));
        }
        if source_id == target_id {
            return Err(invalid(format!(
                "region {source_id} cannot merge into itself; name two adjacent regions"
            )));
        }
        let source = self.regions.get(&source_id).ok_or(Error::RegionNotFound {
            region_id: source_id,
        })?;
        let target = self.regions.get(&target_id).ok_or(Error::RegionNotFound {
            region_id: target_id,
        })?;
        let source_below =
            !source.meta.end_key.is_empty() && source.meta.end_key == target.meta.start_key;
        let source_above =
            !target.meta.end_key.is_empty() && target.meta.end_key == source.meta.start_key;
        if !source_below && !source_above {
            return Err(invalid(format!(
                "regions {source_id} and {target_id} are not adjacent; only neighbours merge"
            )));
        }
        if store_set(source) != store_set(target) {
            return Err(invalid(format!(
                "regions {source_id} and {target_id} have different peers (store, role: {:?} and {:?}); move peers first, as PD does",
                store_set(source),
                store_set(target)
            )));
        }
        for (id, region) in [(source_id, source), (target_id, target)] {
            if region.leader.is_none() || self.raft.electing(id) {
                return Err(invalid(format!(
                    "region {id} has no leader; a merge needs both Regions led"
                )));
            }
            // PD's merge checker skips a Region with a down peer, and
            // PrepareMerge waits for every peer to catch up.
            if let Some(down) = region
                .meta
                .peers
                .iter()
                .find(|p| !self.store_up(p.store_id))
            {
                return Err(invalid(format!(
                    "region {id} has a peer on store {}, which is down; a merge needs every peer up",
                    down.store_id
                )));
            }
        }
        let source = self.region_mut(source_id)?;
        let mut epoch = source.meta.region_epoch.unwrap_or_default();
        epoch.version += 1;
        epoch.conf_ver += 1;
        source.meta.region_epoch = Some(epoch);
        Ok(())
    }

    /// CommitMerge on `target`: it takes the prepared source's range, data
    /// and locks; the source is gone.
    pub(crate) fn commit_merge(&mut self, source_id: u64, target_id: u64) -> Result<()> {
        let Some(mut source) = self.regions.remove(&source_id) else {
            return Err(Error::RegionNotFound {
                region_id: source_id,
            });
        };
        let Some(target) = self.regions.get(&target_id) else {
            // The target is gone meanwhile: the merge rolls back.
            self.regions.insert(source_id, source);
            return Err(Error::RegionNotFound {
                region_id: target_id,
            });
        };
        let source_below =
            !source.meta.end_key.is_empty() && source.meta.end_key == target.meta.start_key;
        self.raft.elections.remove(&source_id);
        self.raft.max_ts_unsynced.remove(&source_id);
        // CommitMerge leaves the target's max ts to sync again.
        let now = self.raft_now();
        self.raft
            .max_ts_unsynced
            .insert(target_id, now + self.raft.timing.max_ts_sync);
        let source_epoch = source.meta.region_epoch.unwrap_or_default();
        let target = self.region_mut(target_id)?;
        let mut epoch = target.meta.region_epoch.unwrap_or_default();
        epoch.version = epoch.version.max(source_epoch.version) + 1;
        target.meta.region_epoch = Some(epoch);
        if source_below {
            target.meta.start_key = std::mem::take(&mut source.meta.start_key);
        } else {
            target.meta.end_key = std::mem::take(&mut source.meta.end_key);
        }
        target.data.absorb(source.data);
        target.mvcc.absorb(source.mvcc);
        // The merged Region's resolved ts is the lower of the two (the
        // source's locks may commit above its own, below the target's).
        target.resolved_ts = target.resolved_ts.min(source.resolved_ts);
        target.applied_index = target.applied_index.max(source.applied_index) + 1;
        self.applied.retain(|(region, _), _| *region != source_id);
        Ok(())
    }

    /// Adds a peer of `role` (voter or learner) on a store that has none of
    /// the Region; returns the new peer's id.
    pub(crate) fn add_peer(
        &mut self,
        region_id: u64,
        store_id: u64,
        role: PeerRole,
    ) -> Result<u64> {
        if !self.stores.contains_key(&store_id) {
            return Err(Error::StoreNotFound { store_id });
        }
        if role != PeerRole::Voter && role != PeerRole::Learner {
            return Err(invalid(format!(
                "a peer is added as a voter or a learner, not {role:?}"
            )));
        }
        if role != PeerRole::Learner && !self.is_tikv_store(store_id) {
            return Err(invalid(format!(
                "store {store_id} is a TiFlash store: it holds learners only (PD places TiFlash replicas as learners)"
            )));
        }
        needs_leader(self.region_mut(region_id)?)?;
        self.raft.refuse_in_merge(region_id, "conf change")?;
        if self
            .region_mut(region_id)?
            .peer_on_store(store_id)
            .is_some()
        {
            return Err(invalid(format!(
                "region {region_id} already has a peer on store {store_id}"
            )));
        }
        let peer_id = self.alloc_id();
        let region = self.region_mut(region_id)?;
        region.meta.peers.push(metapb::Peer {
            id: peer_id,
            store_id,
            role: role as i32,
            is_witness: false,
        });
        bump_conf_ver(region);
        Ok(peer_id)
    }

    /// Makes the Region's learner on `store_id` a voter.
    pub(crate) fn promote_learner(&mut self, region_id: u64, store_id: u64) -> Result<()> {
        self.raft.refuse_in_merge(region_id, "conf change")?;
        if !self.is_tikv_store(store_id) {
            return Err(invalid(format!(
                "the learner of region {region_id} on store {store_id} is TiFlash's: a TiFlash learner never becomes a voter"
            )));
        }
        let region = self.region_mut(region_id)?;
        needs_leader(region)?;
        let peer = region
            .meta
            .peers
            .iter_mut()
            .find(|p| p.store_id == store_id && p.role == PeerRole::Learner as i32)
            .ok_or_else(|| {
                invalid(format!(
                    "region {region_id} has no learner on store {store_id}"
                ))
            })?;
        peer.role = PeerRole::Voter as i32;
        bump_conf_ver(region);
        Ok(())
    }

    /// Removes the Region's peer on `store_id`. A leader is not removed in
    /// place: leadership first moves to another voter (as PD transfers it
    /// before removing), and PD hears of the new leader unless its store
    /// is cut off from PD.
    pub(crate) fn remove_peer(&mut self, region_id: u64, store_id: u64) -> Result<()> {
        self.raft.refuse_in_merge(region_id, "conf change")?;
        let cut_off = self.cut_off_from_pd.clone();
        let up: std::collections::BTreeSet<u64> = self
            .stores
            .iter()
            .filter(|(_, s)| s.up)
            .map(|(id, _)| *id)
            .collect();
        let region = self.region_mut(region_id)?;
        needs_leader(region)?;
        let peer = region.peer_on_store(store_id).ok_or_else(|| {
            invalid(format!(
                "region {region_id} has no peer on store {store_id}"
            ))
        })?;
        // The voters left must still make a quorum of live ones: TiKV
        // refuses an unsafe conf change.
        let voters: Vec<metapb::Peer> = region
            .meta
            .peers
            .iter()
            .filter(|p| p.id != peer.id && can_become_leader(p))
            .copied()
            .collect();
        let live = voters.iter().filter(|p| up.contains(&p.store_id)).count();
        if voters.is_empty() || live * 2 <= voters.len() {
            return Err(invalid(format!(
                "removing peer {} of region {region_id} would leave {live} live voter(s) of {}: no quorum; bring stores up or add a voter first",
                peer.id,
                voters.len()
            )));
        }
        if region.leader == Some(peer.id) {
            // PD moves leadership to a live voter first.
            let successor = voters.iter().find(|p| up.contains(&p.store_id)).copied();
            region.leader = successor.map(|p| p.id);
            let told = successor.is_some_and(|p| !cut_off.contains(&p.store_id));
            if region.pd_leader == Some(peer.id) && told {
                region.pd_leader = region.leader;
            }
        } else if region.pd_leader == Some(peer.id) {
            region.pd_leader = region.leader;
        }
        if let Some(cold) = region.cold.as_mut() {
            if cold.old_leader == Some(peer.id) {
                cold.old_leader = None;
            }
        }
        region.meta.peers.retain(|p| p.id != peer.id);
        bump_conf_ver(region);
        Ok(())
    }

    fn store_up(&self, store_id: u64) -> bool {
        self.stores.get(&store_id).is_some_and(|s| s.up)
    }

    /// True when `store_id` runs TiKV (an unknown store counts as TiKV:
    /// the caller reports it missing).
    pub(crate) fn is_tikv_store(&self, store_id: u64) -> bool {
        self.stores
            .get(&store_id)
            .is_none_or(|s| s.engine.is_tikv())
    }
}

impl SimCluster {
    /// Merges Region `source` into the adjacent Region `target`, as PD's
    /// merge does: `target` takes the source's range, data and locks, its
    /// version becomes one more than the larger of the two (the source's
    /// counted after PrepareMerge), its conf_ver is kept; `source` is gone
    /// (its stores answer `RegionNotFound`). Both must be led and have
    /// their peers on the same stores. PD learns of it.
    pub fn merge_regions(&self, source: u64, target: u64) -> Result<()> {
        tracing::info!("simulated region {source} merges into region {target}");
        self.state().merge(source, target)?;
        self.shared.faults_changed();
        Ok(())
    }

    /// Adds a voter or a learner of a Region on `store_id` (conf_ver + 1);
    /// returns the new peer's id. PD learns of it.
    pub fn add_peer(&self, region_id: u64, store_id: u64, role: PeerRole) -> Result<u64> {
        let id = self.state().add_peer(region_id, store_id, role)?;
        self.shared.faults_changed();
        Ok(id)
    }

    /// Promotes a Region's learner on `store_id` to a voter (conf_ver + 1).
    pub fn promote_learner(&self, region_id: u64, store_id: u64) -> Result<()> {
        self.state().promote_learner(region_id, store_id)?;
        self.shared.faults_changed();
        Ok(())
    }

    /// Removes a Region's peer on `store_id` (conf_ver + 1); the store then
    /// answers `RegionNotFound` for the Region. Removing the leader first
    /// moves leadership to a live voter. Refused, as TiKV refuses an unsafe
    /// conf change, when the voters left would not hold a quorum of live
    /// ones, and for a Region without a leader (a conf change is proposed
    /// through it); adding and promoting need a leader too.
    pub fn remove_peer(&self, region_id: u64, store_id: u64) -> Result<()> {
        self.state().remove_peer(region_id, store_id)?;
        self.shared.faults_changed();
        Ok(())
    }

    /// Restarts a store at a new address (`None`: a free port): its
    /// connections reset, it listens only there, and PD's store record
    /// names the new address. Another store may later take the old
    /// address ([`SimCluster::move_store`] again): a request meant for this
    /// store that reaches it gets `StoreNotMatch` (when that store holds the
    /// Region; else `RegionNotFound`, checked first). Returns the new address.
    /// A hosted cluster ([`SimClusterBuilder::build_hosted`](crate::SimClusterBuilder::build_hosted))
    /// has no listener of its own to move.
    pub async fn move_store(&self, store_id: u64, to: Option<SocketAddr>) -> Result<String> {
        if !self.state().stores.contains_key(&store_id) {
            return Err(Error::StoreNotFound { store_id });
        }
        let old = lock(&self.shared.stores)
            .get(&store_id)
            .map(|e| (e.addr(), e.is_up()));
        let Some((old_addr, was_up)) = old else {
            return Err(invalid(format!(
                "store {store_id} is hosted on a network of its own; it has no listener to move"
            )));
        };
        let to = to.unwrap_or_else(|| SocketAddr::new(old_addr.ip(), 0));
        if to == old_addr {
            return Err(invalid(format!("store {store_id} already listens on {to}")));
        }
        // The new address first: a failure leaves the store where it was.
        let listener = bind(to).await?;
        let accept_task = lock(&self.shared.stores)
            .get_mut(&store_id)
            .and_then(|e| e.down());
        if let Some(task) = accept_task {
            let _ = task.await;
        }
        let address = match lock(&self.shared.stores).get_mut(&store_id) {
            Some(e) => e.rebind(listener, was_up)?,
            None => return Err(Error::StoreNotFound { store_id }),
        };
        let address = address.to_string();
        tracing::info!("simulated store {store_id} moves from {old_addr} to {address}");
        if let Some(s) = self.state().stores.get_mut(&store_id) {
            s.address = address.clone();
        }
        self.shared.faults_changed();
        Ok(address)
    }
}
