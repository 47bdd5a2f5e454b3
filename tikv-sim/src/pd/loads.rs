//! Region loads in flight at PD: how many `GetRegion` and `GetRegionByID`
//! calls for one Region PD is answering at once, and the most ever seen,
//! so a test can measure a client's single-flight loads rather than
//! assume them. A delay on every such answer (PD's own latency) lets
//! loads overlap at all: without one the simulated PD answers each at
//! once.

use std::sync::Arc;
use std::time::Duration;

use super::PdService;
use crate::Shared;
use crate::SimCluster;

/// The loads PD is answering, by Region id, and the most at once.
#[derive(Debug, Default)]
pub(crate) struct RegionLoads {
    in_flight: std::collections::BTreeMap<u64, u32>,
    most: u32,
    delay: Duration,
}

/// One load being answered; counted until dropped.
pub(crate) struct Load {
    shared: Arc<Shared>,
    region_id: u64,
}

impl Drop for Load {
    fn drop(&mut self) {
        let mut state = self.shared.lock();
        if let Some(n) = state.pd_region_loads.in_flight.get_mut(&self.region_id) {
            *n = n.saturating_sub(1);
        }
    }
}

impl PdService {
    /// Counts a load of Region `region_id` as in flight, then waits PD's
    /// load delay; the load stays counted until the answer is sent (the
    /// guard dropped).
    pub(crate) async fn load_region(&self, region_id: Option<u64>) -> Option<Load> {
        let region_id = region_id?;
        let delay = {
            let mut state = self.shared.lock();
            let loads = &mut state.pd_region_loads;
            let n = loads.in_flight.entry(region_id).or_default();
            *n += 1;
            loads.most = loads.most.max(*n);
            loads.delay
        };
        let load = Load {
            shared: Arc::clone(&self.shared),
            region_id,
        };
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        Some(load)
    }
}

impl SimCluster {
    /// Delays every `GetRegion` and `GetRegionByID` answer by `delay` (PD's
    /// latency; `Duration::ZERO`, the default, answers at once).
    pub fn set_pd_region_load_delay(&self, delay: Duration) {
        self.state().pd_region_loads.delay = delay;
    }

    /// The most `GetRegion`/`GetRegionByID` calls for one Region PD has
    /// answered at once since the start (or the last
    /// [`reset_counters`](Self::reset_counters)): 1 for a client whose
    /// loads of a Region are single-flight.
    pub fn pd_most_region_loads_at_once(&self) -> u32 {
        self.state().pd_region_loads.most
    }
}

impl RegionLoads {
    /// Forgets the most loads seen at once.
    pub(crate) fn reset_most(&mut self) {
        self.most = 0;
    }
}
