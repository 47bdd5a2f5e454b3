//! What stores say about their own health ([routing.md, "Slow-store
//! feedback"](crate::spec::routing#slow-store-feedback-beyond)): TiKV
//! attaches a `HealthFeedback` to some `BatchCommandsResponse`s (the first
//! of a stream, then at most once per `server.health-feedback-interval`,
//! 1 s), carrying its raftstore's slow score, 1 (healthy) to 100. The
//! batched transport hands each one to [`StoreFeedback::record`]; replica
//! reads ask [`StoreFeedback::is_slow`].
//!
//! The rules are client-go's (`internal/locate/store_cache.go`,
//! `StoreHealthStatus`): a store is slow while its score is at least
//! [`SLOW_SCORE_THRESHOLD`] (80); a score not refreshed for
//! [`DECAY_AFTER`] (15 s) decays by a third of a point a second, since a
//! store the client stopped asking (because it was slow) sends no newer
//! word. A feedback older than the one kept (a smaller sequence number)
//! is ignored, unless the kept one is itself past [`DECAY_AFTER`] (a
//! restarted store may count from a smaller number).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use tokio::time::Instant;

use crate::proto::kvrpcpb::HealthFeedback;
use crate::region::StoreId;
use crate::sync::{read, write};

/// The slow score at and above which a store counts as slow (client-go's
/// `tikvSlowScoreSlowThreshold`).
pub const SLOW_SCORE_THRESHOLD: u32 = 80;

/// How long a score stands unrefreshed before it decays (client-go's
/// `tikvSlowScoreActiveUpdateInterval`).
pub const DECAY_AFTER: Duration = Duration::from_secs(15);

/// Points lost per second of decay (client-go's `tikvSlowScoreDecayRate`,
/// 20 a minute).
const DECAY_PER_SECOND: f64 = 20.0 / 60.0;

#[derive(Debug, Clone, Copy)]
struct Latest {
    seq: u64,
    score: u32,
    at: Instant,
}

/// The latest health feedback of each store one client has heard from,
/// shared by its connections (cloning shares it).
#[derive(Debug, Clone, Default)]
pub struct StoreFeedback {
    inner: Arc<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    stores: RwLock<HashMap<StoreId, Latest>>,
    /// How many stores have a score above 1 (none: every check is one
    /// atomic load and no lock).
    raised: AtomicUsize,
}

impl StoreFeedback {
    /// An empty record.
    pub fn new() -> Self {
        Self::default()
    }

    /// Keeps `feedback` when it is newer than the store's last one.
    pub(crate) fn record(&self, feedback: &HealthFeedback) {
        let score = u32::try_from(feedback.slow_score.clamp(1, 100)).unwrap_or(1);
        let now = Instant::now();
        let mut stores = write(&self.inner.stores);
        let latest = Latest {
            seq: feedback.feedback_seq_no,
            score,
            at: now,
        };
        match stores.get_mut(&feedback.store_id) {
            Some(kept) => {
                let stale = now.saturating_duration_since(kept.at) >= DECAY_AFTER;
                if feedback.feedback_seq_no <= kept.seq && !stale {
                    return;
                }
                *kept = latest;
            }
            None => {
                stores.insert(feedback.store_id, latest);
            }
        }
        let raised = stores.values().filter(|l| l.score > 1).count();
        self.inner.raised.store(raised, Ordering::Release);
        drop(stores);
        crate::telemetry::store_slow_score(feedback.store_id, score);
    }

    /// The store's slow score now (1 to 100), decayed when not refreshed
    /// for [`DECAY_AFTER`]; `None` before its first feedback.
    pub fn slow_score(&self, store_id: StoreId) -> Option<u32> {
        let latest = *read(&self.inner.stores).get(&store_id)?;
        Some(decayed(
            latest.score,
            Instant::now().saturating_duration_since(latest.at),
        ))
    }

    /// True while the store's slow score is at least
    /// [`SLOW_SCORE_THRESHOLD`].
    pub fn is_slow(&self, store_id: StoreId) -> bool {
        if self.inner.raised.load(Ordering::Acquire) == 0 {
            return false;
        }
        self.slow_score(store_id)
            .is_some_and(|s| s >= SLOW_SCORE_THRESHOLD)
    }

    /// Every store heard from, with its slow score now, by store id.
    pub fn scores(&self) -> Vec<(StoreId, u32)> {
        let now = Instant::now();
        let mut scores: Vec<(StoreId, u32)> = read(&self.inner.stores)
            .iter()
            .map(|(id, l)| (*id, decayed(l.score, now.saturating_duration_since(l.at))))
            .collect();
        scores.sort_unstable();
        scores
    }

    /// How many stores are slow now.
    pub fn slow_stores(&self) -> u64 {
        if self.inner.raised.load(Ordering::Acquire) == 0 {
            return 0;
        }
        let slow = self
            .scores()
            .iter()
            .filter(|(_, s)| *s >= SLOW_SCORE_THRESHOLD)
            .count();
        slow as u64
    }
}

/// `score` after `since` without a newer feedback: unchanged for
/// [`DECAY_AFTER`], then down by [`DECAY_PER_SECOND`] for the whole time,
/// never below 1 (client-go's linear decay, applied when it first runs).
fn decayed(score: u32, since: Duration) -> u32 {
    if since < DECAY_AFTER {
        return score;
    }
    let left = f64::from(score) - DECAY_PER_SECOND * since.as_secs_f64();
    if left <= 1.0 {
        1
    } else {
        left.round() as u32
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn feedback(store_id: u64, seq: u64, score: i32) -> HealthFeedback {
        HealthFeedback {
            store_id,
            feedback_seq_no: seq,
            slow_score: score,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn the_newest_feedback_wins_and_eighty_is_slow() {
        let f = StoreFeedback::new();
        assert_eq!(f.slow_score(1), None);
        assert!(!f.is_slow(1));
        f.record(&feedback(1, 10, 79));
        assert!(!f.is_slow(1), "79 is not slow");
        f.record(&feedback(1, 11, 80));
        assert!(f.is_slow(1), "80 is");
        f.record(&feedback(1, 9, 1));
        assert_eq!(f.slow_score(1), Some(80), "an older feedback is ignored");
        f.record(&feedback(2, 1, 100));
        assert_eq!(f.scores(), vec![(1, 80), (2, 100)]);
        assert_eq!(f.slow_stores(), 2);
        f.record(&feedback(1, 12, 1));
        assert!(!f.is_slow(1));
        assert_eq!(f.slow_stores(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn scores_out_of_range_are_clamped() {
        let f = StoreFeedback::new();
        f.record(&feedback(1, 1, 1000));
        f.record(&feedback(2, 1, -5));
        assert_eq!(f.scores(), vec![(1, 100), (2, 1)]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unrefreshed_score_decays_after_fifteen_seconds() {
        let f = StoreFeedback::new();
        f.record(&feedback(1, 5, 100));
        tokio::time::advance(DECAY_AFTER - Duration::from_millis(1)).await;
        assert_eq!(f.slow_score(1), Some(100), "not yet");
        tokio::time::advance(Duration::from_millis(1)).await;
        assert_eq!(f.slow_score(1), Some(95), "15 s at 20 a minute");
        assert!(f.is_slow(1));
        // 60 s: 100 - 20 = 80, still slow; 63 s: 79, no longer.
        tokio::time::advance(Duration::from_secs(45)).await;
        assert_eq!(f.slow_score(1), Some(80));
        tokio::time::advance(Duration::from_secs(3)).await;
        assert!(!f.is_slow(1));
        tokio::time::advance(Duration::from_secs(3600)).await;
        assert_eq!(f.slow_score(1), Some(1), "never below 1");
        // A restarted store counts from a smaller number: taken once the
        // kept feedback is past the decay point.
        f.record(&feedback(1, 2, 90));
        assert_eq!(f.slow_score(1), Some(90));
    }
}
