//! The faults PD's schedulers make: Regions merging, peers moving, and a
//! store restarting at a new address. Together with leader transfers and
//! splits they keep the cluster changing shape for the whole run.

use std::time::Duration;

use tikv_plan::proto::metapb::PeerRole;
use tikv_sim::SimCluster;

use tokio::time::Instant;

use super::{FaultKind, Heal, Injector};

/// The most a step of a peer move waits before the next, so clients see
/// the Region between steps (a learner not yet promoted, a peer short).
const STEP_PAUSE_MS: u64 = 30;

/// The replicas every chaos cluster keeps of each Region.
const REPLICAS: usize = 3;

/// What PD's schedulers do, drawn evenly by [`Injector::scheduler_move`].
const SCHEDULER_MOVES: [FaultKind; 4] = [
    FaultKind::TransferFresh,
    FaultKind::Merge,
    FaultKind::Split,
    FaultKind::PeerMove,
];

/// The default pause between two scheduler moves: about four a second.
pub const DEFAULT_SCHEDULER_PAUSE: (Duration, Duration) =
    (Duration::from_millis(50), Duration::from_millis(450));

impl Injector {
    /// When the scheduler moves next, if it runs.
    pub(super) fn next_scheduler_move(&mut self) -> Option<Instant> {
        let range = self.config.scheduler?;
        Some(Instant::now() + self.draw(range))
    }

    /// One move of PD's schedulers: an injection attempt like any fault's
    /// (counted, logged and shrunk the same way).
    pub(super) async fn scheduler_move(&mut self, cluster: &SimCluster) {
        let kind = SCHEDULER_MOVES[self.rng.usize(0..SCHEDULER_MOVES.len())];
        self.apply(cluster, kind).await;
    }

    /// Merges a random led Region into its right neighbour (or its left one
    /// at the end of the key space). As PD's merge checker does, the
    /// source's peers first move to the target's stores, one conf change at
    /// a time. `None` when the pair cannot merge (a cold Region, say).
    pub(super) async fn merge(&mut self, cluster: &SimCluster) -> Option<String> {
        self.merge_in(cluster, None).await
    }

    /// A merge as [`merge`](Self::merge), taking `window` between
    /// PrepareMerge and CommitMerge when given (writes to the source are
    /// refused meanwhile).
    pub(super) async fn merge_in(
        &mut self,
        cluster: &SimCluster,
        window: Option<Duration>,
    ) -> Option<String> {
        let mut ordered = cluster.regions();
        if ordered.len() < 2 {
            return None;
        }
        ordered.sort_by(|a, b| a.start_key.cmp(&b.start_key));
        let i = self.rng.usize(0..ordered.len());
        let neighbour = if i + 1 < ordered.len() { i + 1 } else { i - 1 };
        let (source, target) = (ordered.get(i)?, ordered.get(neighbour)?);
        let stores = |r: &tikv_plan::proto::metapb::Region| tikv_peer_stores(cluster, r);
        let (from, to) = (stores(source), stores(target));
        let missing = to.iter().filter(|s| !from.contains(s));
        let extra = from.iter().filter(|s| !to.contains(s));
        for (arriving, leaving) in missing.zip(extra).map(|(a, l)| (*a, *l)) {
            self.move_one_peer(cluster, source.id, leaving, arriving)
                .await?;
        }
        let merged = match window {
            Some(window) => cluster.merge_regions_after(source.id, target.id, window),
            None => cluster.merge_regions(source.id, target.id),
        };
        merged.ok().map(|()| match window {
            Some(w) => format!(
                "region {} into {} in {} ms",
                source.id,
                target.id,
                w.as_millis()
            ),
            None => format!("region {} into {}", source.id, target.id),
        })
    }

    /// Moves a Region's peer from store `leaving` to store `arriving`: a
    /// learner there, promoted, then the old peer removed, with a pause
    /// after each step. `None` when a step is refused.
    async fn move_one_peer(
        &mut self,
        cluster: &SimCluster,
        region: u64,
        leaving: u64,
        arriving: u64,
    ) -> Option<()> {
        cluster.add_peer(region, arriving, PeerRole::Learner).ok()?;
        self.step_pause().await;
        cluster.promote_learner(region, arriving).ok()?;
        self.step_pause().await;
        cluster.remove_peer(region, leaving).ok()?;
        self.step_pause().await;
        Some(())
    }

    /// Moves one peer of a random Region, as PD's balance scheduler does,
    /// in three conf changes with pauses between: a learner on a store
    /// without a peer is added, promoted, and another peer removed. When
    /// every store has a peer, a random peer is removed first and its
    /// store gets a new one (a new peer id) as a learner, then promoted.
    pub(super) async fn peer_move(&mut self, cluster: &SimCluster) -> Option<String> {
        let region = self.random_region(cluster)?;
        let meta = cluster.region(region)?;
        // TiFlash's learners stay where PD's placement rules put them.
        let peers = tikv_peer_stores(cluster, &meta);
        let free: Vec<u64> = cluster
            .tikv_store_ids()
            .into_iter()
            .filter(|s| !peers.contains(s))
            .collect();
        let leaving = *peers.get(self.rng.usize(0..peers.len().max(1)))?;
        if free.is_empty() {
            cluster.remove_peer(region, leaving).ok()?;
            self.step_pause().await;
            cluster.add_peer(region, leaving, PeerRole::Learner).ok()?;
            self.step_pause().await;
            cluster.promote_learner(region, leaving).ok()?;
            return Some(format!("region {region}: peer on store {leaving} replaced"));
        }
        let arriving = free[self.rng.usize(0..free.len())];
        if peers.len() < REPLICAS {
            // A Region short of a replica (a move cut short by a merge) gets
            // one back, as PD's replica checker adds it.
            cluster.add_peer(region, arriving, PeerRole::Learner).ok()?;
            self.step_pause().await;
            cluster.promote_learner(region, arriving).ok()?;
            return Some(format!("region {region}: a peer added on store {arriving}"));
        }
        self.move_one_peer(cluster, region, leaving, arriving)
            .await?;
        Some(format!(
            "region {region} from store {leaving} to store {arriving}"
        ))
    }

    /// Restarts a random serving store at a new port: PD names the new
    /// address, the old one is closed. A store that is down or hung stays
    /// where it is (`None`), and so does every store of a cluster hosted on
    /// a simulated network.
    pub(super) async fn store_move(&mut self, cluster: &SimCluster) -> Option<String> {
        let store = self.random_store(cluster)?;
        let stopped = self
            .active
            .iter()
            .any(|(_, h, _)| matches!(h, Heal::StoreUp(s) | Heal::Unhang(s) if *s == store));
        if stopped {
            return None;
        }
        let address = cluster.move_store(store, None).await.ok()?;
        Some(format!("store {store} to {address}"))
    }

    async fn step_pause(&mut self) {
        let pause = Duration::from_millis(self.rng.u64(0..=STEP_PAUSE_MS));
        tokio::time::sleep(pause).await;
    }
}

/// The TiKV stores holding a peer of `region` (its TiFlash learners left
/// out: PD moves TiKV's peers, and never onto a TiFlash store).
fn tikv_peer_stores(cluster: &SimCluster, region: &tikv_plan::proto::metapb::Region) -> Vec<u64> {
    region
        .peers
        .iter()
        .map(|p| p.store_id)
        .filter(|s| cluster.store_engine(*s).is_none_or(|e| e.is_tikv()))
        .collect()
}
