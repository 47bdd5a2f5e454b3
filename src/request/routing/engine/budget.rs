//! A shard's retry budget: the Region backoff's attempts, and the wait for
//! an election ([routing.md, "A Region with no
//! leader"](crate::spec::routing#a-region-with-no-leader)).
//!
//! When a store dies, the Regions it led have no leader until their
//! followers' election timeouts run out: TiKV draws each from one to two
//! election timeouts (10 to 20 s with its defaults). Every round in that
//! window ends with every voter saying `NotLeader` and naming nobody alive.
//! Counted against the Region backoff (about 1.5 s of sleeps with
//! client-rust's default), such rounds fail a call long before the Region
//! has a leader again; waited out on a schedule of their own, bounded in
//! time and by the call's deadline, the call finds the new leader.

use std::time::Duration;

use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::request::routing::engine::{Next, ShardMachine};
use crate::{Error, Failure};

/// The delays between leaderless rounds: 2 ms doubling to 500 ms (client-go
/// backs off `NotLeader` without a leader on its Region-scheduling
/// schedule, 2 ms to 500 ms). Without jitter, so simulations replay.
const LEADERLESS_BACKOFF: Backoff = Backoff::no_jitter_backoff(2, 500, u32::MAX);

/// One shard's wait for an election (a piece split off a shard inherits
/// what is left of it).
#[derive(Debug, Clone)]
pub(crate) struct ElectionWait {
    /// How long the shard may wait in all (zero: never; every round counts
    /// against the Region backoff, as in client-rust).
    limit: Duration,
    /// When the first leaderless round ended.
    since: Option<Instant>,
    backoff: Backoff,
}

impl ElectionWait {
    /// A shard that may spend up to `limit` waiting for elections.
    pub(crate) fn new(limit: Duration) -> Self {
        ElectionWait {
            limit,
            since: None,
            backoff: LEADERLESS_BACKOFF,
        }
    }

    /// A round that found no leader ended at `now`: the sleep before the
    /// next round, spent from this wait instead of the Region backoff, or
    /// `None` once the wait is used up (the Region backoff takes over).
    pub(crate) fn next_delay(&mut self, now: Instant) -> Option<Duration> {
        if self.limit.is_zero() {
            return None;
        }
        let since = *self.since.get_or_insert(now);
        let waited = now.saturating_duration_since(since);
        let left = self.limit.checked_sub(waited).filter(|l| !l.is_zero())?;
        let delay = self.backoff.next_delay_duration()?;
        Some(delay.min(left))
    }
}

impl ShardMachine<'_> {
    /// Spends one attempt of the Region backoff. `None` when it is spent.
    pub(super) fn spend_attempt(&mut self) -> Option<Duration> {
        let delay = self.backoff.next_delay_duration()?;
        self.attempts += 1;
        Some(delay)
    }

    /// The shard gives up: its budget is spent; `last` is the strongest
    /// error its last round saw.
    pub(super) fn exhausted(&mut self, last: Error) -> Next {
        let region_id = self.region.id();
        let attempts = self.attempts;
        self.request.observer.shard_exhausted();
        self.done(Err(Error::from(Failure::RetriesExhausted {
            region_id,
            attempts,
            last: Box::new(last),
        })))
    }

    /// A round ended without an answer: sleep before the next one, or give
    /// up. A round that found no leader sleeps on the election wait while
    /// it lasts, so an election does not spend the Region backoff; a caller
    /// that asked for no retries at all (`Backoff::no_backoff`) gets none.
    pub(super) fn after_round(&mut self, leaderless: bool, last: Error) -> Next {
        let election = if leaderless && !self.backoff.is_none() {
            self.election.next_delay(self.now)
        } else {
            None
        };
        if election.is_some() {
            self.attempts += 1;
        }
        match election.or_else(|| self.spend_attempt()) {
            None => self.exhausted(last),
            Some(delay) => self.sleep(delay, last),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_limit_never_waits() {
        let mut wait = ElectionWait::new(Duration::ZERO);
        assert_eq!(wait.next_delay(Instant::now()), None);
    }

    #[test]
    fn delays_double_to_half_a_second_and_stop_at_the_limit() {
        let start = Instant::now();
        let mut wait = ElectionWait::new(Duration::from_secs(3));
        let mut now = start;
        let mut delays = Vec::new();
        while let Some(d) = wait.next_delay(now) {
            delays.push(d.as_millis());
            now += d;
        }
        assert_eq!(&delays[..9], &[2, 4, 8, 16, 32, 64, 128, 256, 500]);
        // The waits add up to the limit exactly: the last is cut to fit.
        assert_eq!(now - start, Duration::from_secs(3));
        assert!(delays[9..].iter().all(|&d| d <= 500));
    }

    #[test]
    fn the_limit_counts_from_the_first_leaderless_round() {
        let start = Instant::now();
        let mut wait = ElectionWait::new(Duration::from_secs(1));
        assert_eq!(wait.next_delay(start), Some(Duration::from_millis(2)));
        // Rounds in between that found a leader (or other errors) do not
        // restart the clock.
        assert_eq!(
            wait.next_delay(start + Duration::from_millis(999)),
            Some(Duration::from_millis(1))
        );
        assert_eq!(wait.next_delay(start + Duration::from_secs(1)), None);
    }
}
