//! Replicas as reads see them: stores whose peers apply late, store labels,
//! the resolved-ts interval, and the switch that serves replica reads
//! without read index (see `replica.rs` for what a store answers).

use std::time::Duration;

use tokio::time::Instant;

use super::SimCluster;
use crate::{Error, Result};

impl SimCluster {
    /// Makes store `store_id`'s non-leader peers apply up to `lag` late
    /// (`Some`), or catch up (`None`). Each peer reads from a copy of its
    /// Region taken now and again whenever `lag` has passed, so a read
    /// served from its own state alone may miss writes of the last `lag`;
    /// a replica read (read index) waits for the next copy, and a stale
    /// read is held to the copy's safe-ts. Leaders never lag.
    pub fn store_lag(&self, store_id: u64, lag: Option<Duration>) -> Result<()> {
        let mut state = self.state();
        let store = state.store_mut(store_id)?;
        store.lag = lag.filter(|l| !l.is_zero());
        state.drop_applied(store_id);
        if state.stores.get(&store_id).and_then(|s| s.lag).is_some() {
            let now = Instant::now();
            let regions: Vec<u64> = state
                .regions
                .values()
                .filter(|r| r.peer_on_store(store_id).is_some())
                .map(|r| r.meta.id)
                .collect();
            for region_id in regions {
                state.applied(region_id, store_id, now);
            }
        }
        drop(state);
        tracing::info!("simulated store {store_id}: lag {lag:?}");
        self.shared.faults_changed();
        Ok(())
    }

    /// Sets store `store_id`'s labels (`("zone", "z1")`, ...), which PD
    /// reports with the store, after its engine's (`engine=tiflash` on a
    /// TiFlash store). The `engine` key is refused, as PD refuses it: the
    /// store's engine sets it.
    pub fn set_store_labels(&self, store_id: u64, labels: &[(&str, &str)]) -> Result<()> {
        for (key, _) in labels {
            super::tiflash::reserved_label(key)?;
        }
        let mut state = self.state();
        state.store_mut(store_id)?.labels = labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        Ok(())
    }

    /// Sets TiKV's `resolved-ts.advance-ts-interval` (20 s unless set): how
    /// often a Region's resolved ts, and so its peers' safe-ts, advances.
    pub fn set_resolved_ts_interval(&self, interval: Duration) -> Result<()> {
        if interval.is_zero() {
            return Err(Error::InvalidArgument(
                "the resolved-ts interval must be above zero, as TiKV requires".to_owned(),
            ));
        }
        self.state().resolved_ts_interval = interval;
        Ok(())
    }

    /// Serves replica reads from the peer's own applied state at once,
    /// without read index (`true`): what a follower read that skips read
    /// index returns, stale under lag. For showing that a checker catches
    /// it; never what TiKV does.
    pub fn naive_replica_reads(&self, on: bool) {
        self.state().naive_replica_reads = on;
    }

    /// The safe-ts of store `store_id`'s peer of Region `region_id` now:
    /// the highest ts a stale read there is served at.
    pub fn safe_ts(&self, region_id: u64, store_id: u64) -> Result<u64> {
        let mut state = self.state();
        let region = state
            .regions
            .get(&region_id)
            .ok_or(Error::RegionNotFound { region_id })?;
        if region.peer_on_store(store_id).is_none() {
            return Err(Error::InvalidArgument(format!(
                "region {region_id} has no peer on store {store_id}"
            )));
        }
        Ok(state.safe_ts(region_id, store_id, Instant::now()))
    }
}
