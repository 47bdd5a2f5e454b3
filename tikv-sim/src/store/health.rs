//! A store's health feedback, as TiKV computes and sends it.
//!
//! **The slow score** (TiKV `components/health_controller/src/slow_score.rs`,
//! `SlowScore`, ticked by the PD worker of `raftstore/src/store/worker/pd.rs`
//! and kept as the raftstore's score in `health_controller/src/lib.rs`): every
//! `raftstore.inspect-interval` (100 ms) the store inspects its own latency; an
//! inspection that takes the interval or longer, or has not finished by the
//! next tick, times out. Every 30 ticks (a round) the score, which starts at 1,
//! is updated the AIMD way: with timeouts it grows by a factor of
//! `1 + min(ratio, 0.1) / 0.1` (so it doubles once a tenth of the round's
//! inspections time out), capped at 100; without any it falls by
//! `100 * round / 5 min`, never below 1.
//!
//! Here a store's inspections take as long as its added latency
//! ([`SimCluster::store_slow`](crate::SimCluster::store_slow)), so all of a
//! round's inspections time out when that latency is at least the inspect
//! interval, and none do otherwise. The score is computed lazily, a whole
//! round at a time, whenever it is read; a change of latency first brings it
//! up to date under the old latency.
//!
//! **The feedback** (TiKV's kv service, `service/kv.rs`,
//! `HealthFeedbackAttacher::attach_if_needed`): each BatchCommands stream
//! attaches `HealthFeedback { store_id, feedback_seq_no, slow_score }` to its
//! first response message and then to the first one after each
//! `server.health-feedback-interval` (1 s; zero turns it off); the sequence
//! number grows by one per feedback across the store's streams (TiKV starts it
//! at its start time in unix milliseconds; the simulator at 1: only its order
//! matters), and the score goes out truncated to an integer.

use std::time::Duration;

use tokio::time::Instant;

use crate::proto::kvrpcpb::HealthFeedback;

/// TiKV's `raftstore.inspect-interval` default.
pub const DEFAULT_INSPECT_INTERVAL: Duration = Duration::from_millis(100);
/// TiKV's `server.health-feedback-interval` default.
pub const DEFAULT_HEALTH_FEEDBACK_INTERVAL: Duration = Duration::from_secs(1);
/// Ticks per update of the score (TiKV's `DISK_ROUND_TICKS`).
const ROUND_TICKS: u32 = 30;
/// The time the score takes to fall from 100 to 1 with no timeout (TiKV's
/// `DISK_RECOVERY_INTERVALS`).
const RECOVERY: Duration = Duration::from_secs(5 * 60);
/// The score's bounds.
const MIN_SCORE: f64 = 1.0;
const MAX_SCORE: f64 = 100.0;

/// A store's slow score and its feedback settings.
#[derive(Debug, Clone)]
pub(crate) struct StoreHealth {
    value: f64,
    /// When the round under way began.
    round_start: Instant,
    inspect_interval: Duration,
    /// `None`: feedback is off.
    pub(crate) feedback_interval: Option<Duration>,
    next_seq: u64,
}

impl StoreHealth {
    /// A healthy store (score 1) with TiKV's default timing.
    pub(crate) fn new(now: Instant) -> Self {
        StoreHealth {
            value: MIN_SCORE,
            round_start: now,
            inspect_interval: DEFAULT_INSPECT_INTERVAL,
            feedback_interval: Some(DEFAULT_HEALTH_FEEDBACK_INTERVAL),
            next_seq: 1,
        }
    }

    /// New timing (the score so far is kept, brought up to `now` first
    /// under the old timing with the store's latency `slow`).
    pub(crate) fn set_timing(
        &mut self,
        now: Instant,
        slow: Duration,
        inspect_interval: Duration,
        feedback_interval: Option<Duration>,
    ) {
        self.catch_up(now, slow);
        self.inspect_interval = inspect_interval.max(Duration::from_micros(100));
        self.feedback_interval = feedback_interval.filter(|i| !i.is_zero());
        self.round_start = now;
    }

    fn round(&self) -> Duration {
        self.inspect_interval * ROUND_TICKS
    }

    /// Runs every round that ended by `now`, the store's inspections
    /// taking `slow` each.
    pub(crate) fn catch_up(&mut self, now: Instant, slow: Duration) {
        let round = self.round();
        let timed_out = slow >= self.inspect_interval;
        // Every inspection of the round timed out (ratio 1, over the 0.1
        // threshold): the score doubles; none did: it falls linearly.
        let fall = MAX_SCORE * round.as_secs_f64() / RECOVERY.as_secs_f64();
        while now.saturating_duration_since(self.round_start) >= round {
            self.round_start += round;
            let before = self.value;
            self.value = if timed_out {
                (self.value * 2.0).min(MAX_SCORE)
            } else if fall > self.value - MIN_SCORE {
                MIN_SCORE
            } else {
                self.value - fall
            };
            if self.value == before {
                // Settled at a bound: the rounds left change nothing.
                let left = now.saturating_duration_since(self.round_start);
                let whole = (left.as_nanos() / round.as_nanos().max(1)) as u32;
                self.round_start += round * whole;
                break;
            }
        }
    }

    /// The score now (1 to 100).
    pub(crate) fn score(&mut self, now: Instant, slow: Duration) -> f64 {
        self.catch_up(now, slow);
        self.value
    }

    /// The feedback a stream attaches now.
    pub(crate) fn feedback(
        &mut self,
        store_id: u64,
        now: Instant,
        slow: Duration,
    ) -> HealthFeedback {
        let score = self.score(now, slow);
        let seq = self.next_seq;
        self.next_seq += 1;
        HealthFeedback {
            store_id,
            feedback_seq_no: seq,
            slow_score: score as i32,
        }
    }
}

/// When a stream last attached feedback: TiKV's attacher of one stream.
#[derive(Debug, Default)]
pub(crate) struct Attacher {
    last: Option<Instant>,
}

impl Attacher {
    /// True when the stream's next message carries feedback: its first,
    /// and the first after each `interval`.
    pub(crate) fn due(&self, now: Instant, interval: Option<Duration>) -> bool {
        match (interval, self.last) {
            (None, _) => false,
            (Some(_), None) => true,
            (Some(interval), Some(last)) => now.saturating_duration_since(last) >= interval,
        }
    }

    pub(crate) fn attached(&mut self, now: Instant) {
        self.last = Some(now);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn the_score_doubles_each_slow_round_up_to_100_and_falls_back_slowly() {
        let start = Instant::now();
        let mut h = StoreHealth::new(start);
        let round = DEFAULT_INSPECT_INTERVAL * ROUND_TICKS; // 3 s
        let slow = 100 * MS;
        assert_eq!(h.score(start + round - MS, slow), 1.0, "no round ended yet");
        let scores: Vec<f64> = (1..=8).map(|r| h.score(start + round * r, slow)).collect();
        assert_eq!(scores, vec![2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 100.0, 100.0]);
        // Healthy again: 100 * 3 s / 300 s = 1 point a round.
        let healthy_from = start + round * 8;
        assert_eq!(h.score(healthy_from + round, Duration::ZERO), 99.0);
        assert_eq!(h.score(healthy_from + round * 21, Duration::ZERO), 79.0);
        assert_eq!(h.score(healthy_from + round * 500, Duration::ZERO), 1.0);
    }

    #[test]
    fn latency_under_the_inspect_interval_never_raises_it() {
        let start = Instant::now();
        let mut h = StoreHealth::new(start);
        assert_eq!(h.score(start + Duration::from_secs(600), 99 * MS), 1.0);
        // A shorter interval makes the same latency count.
        h.set_timing(start + Duration::from_secs(600), 99 * MS, 10 * MS, None);
        let t = start + Duration::from_secs(600) + 10 * MS * ROUND_TICKS;
        assert_eq!(h.score(t, 20 * MS), 2.0);
    }

    #[test]
    fn feedback_numbers_grow_and_truncate_the_score() {
        let start = Instant::now();
        let mut h = StoreHealth::new(start);
        let a = h.feedback(7, start, Duration::ZERO);
        let b = h.feedback(7, start, Duration::ZERO);
        assert_eq!((a.store_id, a.slow_score), (7, 1));
        assert_eq!(b.feedback_seq_no, a.feedback_seq_no + 1);
        // The score goes out truncated, as TiKV's `as i32` does.
        h.value = 63.9;
        assert_eq!(h.feedback(7, start, Duration::ZERO).slow_score, 63);
    }

    #[test]
    fn a_stream_attaches_to_its_first_message_then_once_an_interval() {
        let start = Instant::now();
        let mut a = Attacher::default();
        let every = Some(Duration::from_secs(1));
        assert!(a.due(start, every));
        a.attached(start);
        assert!(!a.due(start + 999 * MS, every));
        assert!(a.due(start + 1000 * MS, every));
        assert!(!Attacher::default().due(start, None), "off");
    }
}
