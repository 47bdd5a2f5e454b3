//! Requests as TiKV's per-source and per-group accounting sees them: the
//! tags each request carried, summed over every store, and the reads
//! stores dropped past their deadline.

use std::collections::BTreeMap;

use super::SimCluster;
use crate::RequestTag;

impl SimCluster {
    /// How many requests arrived with each set of tags (method, resource
    /// group, request source, transaction source, resource group tag),
    /// summed over every store since the start or the last
    /// [`reset_counters`](Self::reset_counters): a test sees with it what a
    /// client sent, whichever store served it and whether it was sent
    /// unary or over BatchCommands.
    pub fn request_tags(&self) -> BTreeMap<RequestTag, u64> {
        let state = self.state();
        let mut sum = BTreeMap::new();
        for store in state.stores.values() {
            for (tag, n) in store.counters.tagged() {
                *sum.entry(tag.clone()).or_insert(0) += n;
            }
        }
        sum
    }

    /// How many requests of `method` arrived in resource group `group`
    /// from source `source` (empty for none), over every store.
    pub fn count_tagged(&self, method: &str, group: &str, source: &str) -> u64 {
        let state = self.state();
        state
            .stores
            .values()
            .map(|s| s.counters.count_tagged(method, group, source))
            .sum()
    }

    /// How many reads the stores dropped unread because their deadline
    /// (`Context.max_execution_duration_ms`) passed first, over every store.
    pub fn deadline_drops(&self) -> u64 {
        let state = self.state();
        state
            .stores
            .values()
            .map(|s| s.counters.deadline_drops())
            .sum()
    }
}
