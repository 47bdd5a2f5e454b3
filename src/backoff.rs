//! Retry delays. The constructors and defaults match what client-rust users
//! know; the delays follow the classic exponential-backoff-with-jitter
//! variants (none, full, equal, decorrelated).

use std::time::Duration;

/// Backoff for Region errors and failed candidate rounds.
pub const DEFAULT_REGION_BACKOFF: Backoff = Backoff::no_jitter_backoff(2, 500, 10);
/// Backoff for store-level failures.
pub const DEFAULT_STORE_BACKOFF: Backoff = Backoff::no_jitter_backoff(2, 1000, 10);
/// A short backoff, for optimistic callers.
pub const OPTIMISTIC_BACKOFF: Backoff = Backoff::no_jitter_backoff(2, 500, 10);
/// A long backoff, for callers that prefer waiting to failing.
pub const PESSIMISTIC_BACKOFF: Backoff = Backoff::no_jitter_backoff(2, 500, 10);

/// How delays grow between attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum BackoffKind {
    /// No retries at all.
    None,
    /// Exponential delays without randomness.
    NoJitter,
    /// A uniform random delay in `[0, exponential]`.
    FullJitter,
    /// Half the exponential delay plus a random half.
    EqualJitter,
    /// A random delay in `[base, 3 * previous]`, capped.
    DecorrelatedJitter,
}

/// A retry budget and delay schedule. `next_delay_duration` returns `None`
/// once the attempts are spent.
///
/// In a configuration file a backoff is its schedule, in kebab-case:
/// `{ "kind": "no-jitter", "base-delay-ms": 2, "max-delay-ms": 500,
/// "max-attempts": 10 }`, with `kind` one of `none`, `no-jitter`,
/// `full-jitter`, `equal-jitter` and `decorrelated-jitter`. A loaded
/// backoff starts with no attempts spent.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(into = "BackoffSchedule", try_from = "BackoffSchedule")]
pub struct Backoff {
    kind: BackoffKind,
    current_attempts: u32,
    max_attempts: u32,
    base_delay_ms: u64,
    current_delay_ms: u64,
    max_delay_ms: u64,
}

/// A [`Backoff`] as a configuration file writes it: the schedule without
/// the attempts spent.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case", deny_unknown_fields)]
struct BackoffSchedule {
    kind: BackoffKind,
    #[serde(default)]
    base_delay_ms: u64,
    #[serde(default)]
    max_delay_ms: u64,
    #[serde(default)]
    max_attempts: u32,
}

impl From<Backoff> for BackoffSchedule {
    fn from(b: Backoff) -> Self {
        BackoffSchedule {
            kind: b.kind,
            base_delay_ms: b.base_delay_ms,
            max_delay_ms: b.max_delay_ms,
            max_attempts: b.max_attempts,
        }
    }
}

// Hidden: the schedule type is serde's view of a backoff, not an API.
#[doc(hidden)]
impl TryFrom<BackoffSchedule> for Backoff {
    type Error = String;

    fn try_from(s: BackoffSchedule) -> Result<Self, String> {
        if s.kind != BackoffKind::None && s.max_delay_ms < s.base_delay_ms {
            return Err(format!(
                "a backoff's max-delay-ms ({}) is below its base-delay-ms ({}); \
                 make max-delay-ms at least base-delay-ms",
                s.max_delay_ms, s.base_delay_ms
            ));
        }
        if s.kind == BackoffKind::None {
            return Ok(Backoff::no_backoff());
        }
        Ok(Backoff::with(
            s.kind,
            s.base_delay_ms,
            s.max_delay_ms,
            s.max_attempts,
        ))
    }
}

impl Backoff {
    const fn with(
        kind: BackoffKind,
        base_delay_ms: u64,
        max_delay_ms: u64,
        max_attempts: u32,
    ) -> Self {
        Backoff {
            kind,
            current_attempts: 0,
            max_attempts,
            base_delay_ms,
            current_delay_ms: base_delay_ms,
            max_delay_ms,
        }
    }

    /// No retries: the first failure is final.
    pub const fn no_backoff() -> Backoff {
        Backoff::with(BackoffKind::None, 0, 0, 0)
    }

    /// Doubling delays from `base_delay_ms` up to `max_delay_ms`, at most
    /// `max_attempts` retries.
    pub const fn no_jitter_backoff(
        base_delay_ms: u64,
        max_delay_ms: u64,
        max_attempts: u32,
    ) -> Backoff {
        Backoff::with(
            BackoffKind::NoJitter,
            base_delay_ms,
            max_delay_ms,
            max_attempts,
        )
    }

    /// Full jitter: each delay is uniform in `[0, doubling delay]`.
    pub const fn full_jitter_backoff(
        base_delay_ms: u64,
        max_delay_ms: u64,
        max_attempts: u32,
    ) -> Backoff {
        Backoff::with(
            BackoffKind::FullJitter,
            base_delay_ms,
            max_delay_ms,
            max_attempts,
        )
    }

    /// Equal jitter: half the doubling delay plus a uniform random half.
    pub const fn equal_jitter_backoff(
        base_delay_ms: u64,
        max_delay_ms: u64,
        max_attempts: u32,
    ) -> Backoff {
        Backoff::with(
            BackoffKind::EqualJitter,
            base_delay_ms,
            max_delay_ms,
            max_attempts,
        )
    }

    /// Decorrelated jitter: uniform in `[base, 3 * previous delay]`, capped.
    pub const fn decorrelated_jitter_backoff(
        base_delay_ms: u64,
        max_delay_ms: u64,
        max_attempts: u32,
    ) -> Backoff {
        Backoff::with(
            BackoffKind::DecorrelatedJitter,
            base_delay_ms,
            max_delay_ms,
            max_attempts,
        )
    }

    /// True when this backoff allows no retries.
    pub fn is_none(&self) -> bool {
        self.kind == BackoffKind::None || self.max_attempts == 0
    }

    /// How many delays have been handed out.
    pub fn current_attempts(&self) -> u32 {
        self.current_attempts
    }

    /// The next delay, or `None` when the attempts are spent.
    pub fn next_delay_duration(&mut self) -> Option<Duration> {
        if self.is_none() || self.current_attempts >= self.max_attempts {
            return None;
        }
        self.current_attempts += 1;
        let cap = self.max_delay_ms;
        let delay_ms = match self.kind {
            BackoffKind::None => return None,
            BackoffKind::NoJitter => {
                let d = self.current_delay_ms.min(cap);
                self.current_delay_ms = self.current_delay_ms.saturating_mul(2).min(cap);
                d
            }
            BackoffKind::FullJitter => {
                let d = fastrand::u64(0..=self.current_delay_ms.min(cap));
                self.current_delay_ms = self.current_delay_ms.saturating_mul(2).min(cap);
                d
            }
            BackoffKind::EqualJitter => {
                let exp = self.current_delay_ms.min(cap);
                let half = exp / 2;
                self.current_delay_ms = self.current_delay_ms.saturating_mul(2).min(cap);
                half + fastrand::u64(0..=exp - half)
            }
            BackoffKind::DecorrelatedJitter => {
                let upper = self
                    .current_delay_ms
                    .saturating_mul(3)
                    .min(cap)
                    .max(self.base_delay_ms);
                let d = fastrand::u64(self.base_delay_ms.min(upper)..=upper);
                self.current_delay_ms = d;
                d
            }
        };
        Some(Duration::from_millis(delay_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn no_backoff_never_retries() {
        let mut b = Backoff::no_backoff();
        assert!(b.is_none());
        assert_eq!(b.next_delay_duration(), None);
    }

    #[test]
    fn no_jitter_doubles_up_to_the_cap_and_stops_after_max_attempts() {
        let mut b = Backoff::no_jitter_backoff(2, 10, 5);
        let got: Vec<u64> = std::iter::from_fn(|| b.next_delay_duration())
            .map(|d| d.as_millis() as u64)
            .collect();
        assert_eq!(got, vec![2, 4, 8, 10, 10]);
        assert_eq!(b.current_attempts(), 5);
    }

    #[test]
    fn jittered_delays_stay_within_their_bounds() {
        for _ in 0..200 {
            let mut full = Backoff::full_jitter_backoff(4, 100, 6);
            let mut equal = Backoff::equal_jitter_backoff(4, 100, 6);
            let mut deco = Backoff::decorrelated_jitter_backoff(4, 100, 6);
            let mut exp = 4u64;
            for _ in 0..6 {
                let f = full.next_delay_duration().unwrap().as_millis() as u64;
                assert!(f <= exp.min(100));
                let e = equal.next_delay_duration().unwrap().as_millis() as u64;
                assert!(e >= exp.min(100) / 2 && e <= exp.min(100));
                let d = deco.next_delay_duration().unwrap().as_millis() as u64;
                assert!((4..=100).contains(&d));
                exp *= 2;
            }
            assert_eq!(full.next_delay_duration(), None);
            assert_eq!(equal.next_delay_duration(), None);
            assert_eq!(deco.next_delay_duration(), None);
        }
    }
}
