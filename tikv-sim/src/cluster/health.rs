//! A store's health as a test sets and reads it: the timing of its slow
//! score and health feedback, and the score itself (`store/health.rs`
//! models TiKV's).

use std::time::Duration;

use super::SimCluster;

impl SimCluster {
    /// Sets every store's `raftstore.inspect-interval` (TiKV: 100 ms; the
    /// latency at and above which an inspection times out, and a thirtieth
    /// of a round of the slow score) and `server.health-feedback-interval`
    /// (TiKV: 1 s; how often a BatchCommands stream attaches the store's
    /// health feedback after its first message; `None` or zero: never).
    pub fn store_health_timing(
        &self,
        inspect_interval: Duration,
        feedback_interval: Option<Duration>,
    ) {
        let now = tokio::time::Instant::now();
        for s in self.state().stores.values_mut() {
            let slow = s.slow;
            s.health
                .set_timing(now, slow, inspect_interval, feedback_interval);
        }
    }

    /// The store's slow score now, as its next health feedback would
    /// report it (before truncation): 1 (healthy) to 100.
    pub fn store_slow_score(&self, store_id: u64) -> Option<f64> {
        let now = tokio::time::Instant::now();
        let mut state = self.state();
        let s = state.stores.get_mut(&store_id)?;
        let slow = s.slow;
        Some(s.health.score(now, slow))
    }
}
