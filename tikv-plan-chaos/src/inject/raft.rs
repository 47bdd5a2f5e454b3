//! The faults of Raft's side (tikv-sim's `raft.rs`): crashes whose Regions
//! elect new leaders, graceful restarts, full disks and slow proposals.

use std::time::Duration;

use tikv_sim::SimCluster;
use tokio::time::Instant;

use super::{FaultKind, Heal, Injector};

/// The pause between a graceful restart's eviction and its store going
/// down: the simulator's `RESTART_DRAIN`, scaled as the chaos runs' Raft
/// clock is.
const RESTART_DRAIN: Duration = Duration::from_millis(100);

impl Injector {
    /// A crash (the store's Regions elect after an election timeout) or a
    /// graceful restart (leaders evicted first), on a random TiKV store,
    /// when no other store is stopped.
    pub(super) async fn crash_or_restart(
        &mut self,
        cluster: &SimCluster,
        kind: FaultKind,
        heal_at: Instant,
        index: usize,
    ) -> Option<String> {
        if self.active.iter().any(|(_, h, _)| h.stops_store()) {
            return None;
        }
        let store = self.random_store(cluster)?;
        if kind == FaultKind::Restart {
            let evicted = cluster.evict_leaders(store).ok()?;
            let moved = evicted.len();
            self.evicted.insert(store, evicted.into_keys().collect());
            // The calls in flight to it are answered before it stops, as
            // TiUP waits to see it lead nothing (scaled down here).
            tokio::time::sleep(RESTART_DRAIN).await;
            cluster.store_down(store).await;
            self.active.push((heal_at, Heal::Returned(store), index));
            Some(format!("store {store} ({moved} leaders evicted)"))
        } else {
            let led = cluster
                .regions()
                .iter()
                .filter(|r| cluster.leader_of(r.id).is_some_and(|p| p.store_id == store))
                .count();
            cluster.store_down(store).await;
            self.active.push((heal_at, Heal::Restarted(store), index));
            Some(format!("store {store} (leading {led} Regions)"))
        }
    }

    /// A full disk, or proposals that wait 5 to 50 ms, on a random TiKV
    /// store not already so.
    pub(super) fn disk_or_proposals(
        &mut self,
        cluster: &SimCluster,
        kind: FaultKind,
        heal_at: Instant,
        index: usize,
    ) -> Option<String> {
        let store = self.random_store(cluster)?;
        if kind == FaultKind::DiskFull {
            if !self.store_is_free(store, |h, s| h == Heal::DiskFree(s)) {
                return None;
            }
            cluster.store_disk_full(store, true).ok()?;
            self.active.push((heal_at, Heal::DiskFree(store), index));
            Some(format!("store {store}"))
        } else {
            if !self.store_is_free(store, |h, s| h == Heal::Unpropose(s)) {
                return None;
            }
            let delay = Duration::from_millis(self.rng.u64(5..=50));
            cluster.store_propose_delay(store, delay).ok()?;
            self.active.push((heal_at, Heal::Unpropose(store), index));
            Some(format!("store {store} +{} ms", delay.as_millis()))
        }
    }

    /// Heals a Raft fault: the store back up (taking back the leaders a
    /// graceful restart evicted, where it still has a voter), its disk
    /// freed, its proposals prompt.
    pub(super) async fn heal_raft(&mut self, cluster: &SimCluster, heal: Heal) {
        match heal {
            Heal::Restarted(store) | Heal::Returned(store) => {
                if let Err(e) = cluster.store_up(store).await {
                    tracing::warn!("chaos: store {store} did not come back up: {e}");
                    return;
                }
                for region in self.evicted.remove(&store).unwrap_or_default() {
                    let _ = cluster.transfer_leader(region, store, true);
                }
            }
            Heal::DiskFree(store) => {
                let _ = cluster.store_disk_full(store, false);
            }
            Heal::Unpropose(store) => {
                let _ = cluster.store_propose_delay(store, Duration::ZERO);
            }
            _ => {}
        }
    }
}
