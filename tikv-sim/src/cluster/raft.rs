//! The cluster's Raft side as an operator and a test drive it: election
//! timing, crashes that keep or lose leaders, graceful restarts (PD's
//! evict-leader scheduler first, as TiUP does them), and the windows in
//! which TiKV refuses writes (merges, uninitialized peers, full disks, slow
//! proposals). The state side is in `raft.rs`.
//!
//! A rolling restart as TiUP runs it: add PD's `evict-leader-scheduler`
//! for the store, wait until it leads nothing, stop it, start it, remove
//! the scheduler; PD's balance-leader scheduler then moves leaders back.
//! The evict-leader scheduler transfers each leader to a follower on a
//! healthy store (PD's `evict-leader` picks the target among the Region's
//! followers by its filters); a transfer keeps the pessimistic locks the
//! leader held in memory (TiKV proposes them before it transfers).

use std::collections::BTreeMap;
use std::time::Duration;

use super::{SimCluster, SimClusterBuilder};
use crate::proto::metapb::PeerRole;
use crate::{Error, RaftStats, RaftTiming, Result};
use tikv_plan_proto::meta::can_become_leader;

impl SimClusterBuilder {
    /// Raft's timing: when followers elect after their leader's store dies,
    /// how long a new leader syncs its max ts. Default TiKV's
    /// ([`RaftTiming::tikv`]: elections 10 to 20 s after the death); tests
    /// take [`RaftTiming::scaled`].
    pub fn raft_timing(mut self, timing: RaftTiming) -> Self {
        self.raft_timing = timing;
        self
    }
}

/// How long a graceful restart waits between evicting a store's leaders
/// and stopping it: TiUP polls the store's leader count every 2 s and
/// stops it once it is 0, so the calls in flight to the store are answered
/// (a store that leads nothing answers `NotLeader`) before it goes down.
pub const RESTART_DRAIN: Duration = Duration::from_secs(2);

/// What a graceful restart of one store did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Restart {
    /// The store restarted.
    pub store_id: u64,
    /// Leaders PD's evict-leader scheduler moved off it first.
    pub evicted: usize,
    /// Leaders moved back to it once it was up again.
    pub returned: usize,
}

impl SimCluster {
    /// The cluster's Raft timing.
    pub fn raft_timing(&self) -> RaftTiming {
        self.state().raft.timing
    }

    /// Sets the Raft timing from now on (elections already due keep their
    /// time).
    pub fn set_raft_timing(&self, timing: RaftTiming) {
        self.state().raft.timing = timing;
    }

    /// What Raft has done so far: elections, lost locks, Region errors
    /// answered.
    pub fn raft_stats(&self) -> RaftStats {
        self.state().raft.stats
    }

    /// While `keep` holds, store `store_id`'s Regions keep their leader on
    /// it however long it is down or hung: the cold-Region case (on-demand
    /// Raft), where no follower campaigns and the leader is found dead only
    /// by a client. Elections already counting down go on. Bringing the
    /// store up ([`store_up`](Self::store_up)) ends the keeping.
    pub fn keep_leaders(&self, store_id: u64, keep: bool) -> Result<()> {
        let mut state = self.state();
        state.store_mut(store_id)?;
        if keep {
            state.raft.keep_leaders.insert(store_id);
        } else {
            state.raft.keep_leaders.remove(&store_id);
            if !state.store_alive(store_id) {
                state.store_died(store_id);
            }
        }
        Ok(())
    }

    /// Takes a store down keeping its leaders on it (see
    /// [`keep_leaders`](Self::keep_leaders)) until it is back up.
    pub async fn store_down_cold(&self, store_id: u64) -> Result<()> {
        self.keep_leaders(store_id, true)?;
        self.store_down(store_id).await;
        Ok(())
    }

    /// Whether Region `region_id` is between the death of its leader and
    /// the election of the next: no peer serves it as leader.
    pub fn electing(&self, region_id: u64) -> bool {
        self.state().raft.electing(region_id)
    }

    /// The Regions still electing a leader.
    pub fn regions_electing(&self) -> Vec<u64> {
        self.state().raft.elections.keys().copied().collect()
    }

    /// Moves every leader off store `store_id` as PD's evict-leader
    /// scheduler does: each to a follower voter on a live store (the one
    /// leading fewest Regions), PD told. A Region with no such follower
    /// keeps its leader. Returns the Regions moved, with the store each
    /// went to.
    pub fn evict_leaders(&self, store_id: u64) -> Result<BTreeMap<u64, u64>> {
        let mut state = self.state();
        state.store_mut(store_id)?;
        let mut led: BTreeMap<u64, usize> = BTreeMap::new();
        for region in state.regions.values() {
            if let Some(p) = region.leader.and_then(|id| region.peer(id)) {
                *led.entry(p.store_id).or_default() += 1;
            }
        }
        let regions: Vec<u64> = state
            .regions
            .values()
            .filter(|r| r.led_from(store_id) && !state.raft.electing(r.meta.id))
            .map(|r| r.meta.id)
            .collect();
        let now = state.raft_now();
        let mut moved = BTreeMap::new();
        for region_id in regions {
            let Some(region) = state.regions.get(&region_id) else {
                continue;
            };
            let target = region
                .meta
                .peers
                .iter()
                .filter(|p| p.store_id != store_id && can_become_leader(p))
                .filter(|p| state.store_alive(p.store_id) && state.is_tikv_store(p.store_id))
                .filter(|p| !state.raft.uninitialized.contains_key(&p.id))
                .min_by_key(|p| (led.get(&p.store_id).copied().unwrap_or(0), p.store_id))
                .copied();
            let Some(target) = target else {
                continue;
            };
            let told = !state.cut_off_from_pd.contains(&target.store_id);
            if let Some(region) = state.regions.get_mut(&region_id) {
                region.leader = Some(target.id);
                if told {
                    region.pd_leader = Some(target.id);
                }
            }
            state.raft.on_new_leader(region_id, now);
            *led.entry(target.store_id).or_default() += 1;
            if let Some(n) = led.get_mut(&store_id) {
                *n = n.saturating_sub(1);
            }
            moved.insert(region_id, target.store_id);
        }
        drop(state);
        self.shared.faults_changed();
        Ok(moved)
    }

    /// Restarts store `store_id` gracefully, as TiUP does: leaders evicted
    /// first ([`evict_leaders`](Self::evict_leaders)), [`RESTART_DRAIN`]
    /// for the calls in flight to be answered, the store down for
    /// `down_for`, up again, then the leaders it gave up moved back (PD's
    /// balance-leader scheduler, once the evict scheduler is removed), to
    /// those Regions that still have a voter there.
    pub async fn restart_store(&self, store_id: u64, down_for: Duration) -> Result<Restart> {
        tracing::info!("simulated store {store_id} restarts gracefully");
        let evicted = self.evict_leaders(store_id)?;
        // TiUP stops the store once it sees it lead nothing, at its next
        // poll: the calls in flight to it are answered meanwhile.
        tokio::time::sleep(RESTART_DRAIN).await;
        self.store_down(store_id).await;
        tokio::time::sleep(down_for).await;
        self.store_up(store_id).await?;
        let mut returned = 0;
        for region_id in evicted.keys() {
            let back = self.transfer_leader(*region_id, store_id, true);
            returned += usize::from(back.is_ok());
        }
        Ok(Restart {
            store_id,
            evicted: evicted.len(),
            returned,
        })
    }

    /// Restarts every TiKV store in turn ([`restart_store`](Self::restart_store)),
    /// each down for `down_for`, waiting `between` after each.
    pub async fn rolling_restart(
        &self,
        down_for: Duration,
        between: Duration,
    ) -> Result<Vec<Restart>> {
        let mut restarts = Vec::new();
        for store_id in self.tikv_store_ids() {
            restarts.push(self.restart_store(store_id, down_for).await?);
            tokio::time::sleep(between).await;
        }
        Ok(restarts)
    }

    /// Merges Region `source` into `target` as a window: PrepareMerge now
    /// (the source's version and conf_ver go up, and it refuses every
    /// write with `ProposalInMergingMode`), CommitMerge `window` later (as
    /// [`merge_regions`](Self::merge_regions)). The same checks as there.
    pub fn merge_regions_after(&self, source: u64, target: u64, window: Duration) -> Result<()> {
        tracing::info!("simulated region {source} starts merging into region {target}");
        let mut state = self.state();
        state.prepare_merge(source, target)?;
        let now = state.raft_now();
        state.raft.merging.insert(source, (target, now + window));
        drop(state);
        self.shared.faults_changed();
        Ok(())
    }

    /// Adds a peer as [`add_peer`](Self::add_peer) does, which stays
    /// uninitialized (its snapshot being applied) for `snapshot`: it
    /// answers every request with `RegionNotInitialized` until then, and
    /// takes no part in elections.
    pub fn add_peer_uninitialized(
        &self,
        region_id: u64,
        store_id: u64,
        role: PeerRole,
        snapshot: Duration,
    ) -> Result<u64> {
        let mut state = self.state();
        let peer_id = state.add_peer(region_id, store_id, role)?;
        let now = state.raft_now();
        state.raft.uninitialized.insert(peer_id, now + snapshot);
        drop(state);
        self.shared.faults_changed();
        Ok(peer_id)
    }

    /// Marks store `store_id`'s disk full, or not: a Region it leads
    /// refuses every write with `DiskFull` (naming the full stores among
    /// its peers); reads are served.
    pub fn store_disk_full(&self, store_id: u64, full: bool) -> Result<()> {
        let mut state = self.state();
        state.store_mut(store_id)?;
        if full {
            state.raft.disk_full.insert(store_id);
        } else {
            state.raft.disk_full.remove(&store_id);
        }
        Ok(())
    }

    /// Makes every write a leader on `store_id` proposes wait `delay`
    /// before it is applied (`Duration::ZERO` ends it): a leader change in
    /// between overtakes it, and it is answered `StaleCommand`, nothing
    /// applied.
    pub fn store_propose_delay(&self, store_id: u64, delay: Duration) -> Result<()> {
        let mut state = self.state();
        state.store_mut(store_id)?;
        if delay.is_zero() {
            state.raft.propose_delay.remove(&store_id);
        } else {
            state.raft.propose_delay.insert(store_id, delay);
        }
        Ok(())
    }

    /// Whether the leader of Region `region_id` has synced its max ts
    /// (async-commit and 1PC prewrites are refused until it has).
    pub fn max_ts_synced(&self, region_id: u64) -> Result<bool> {
        let state = self.state();
        if !state.regions.contains_key(&region_id) {
            return Err(Error::RegionNotFound { region_id });
        }
        Ok(!state.raft.max_ts_unsynced.contains_key(&region_id))
    }
}
