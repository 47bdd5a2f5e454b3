//! What a request gives each shard's engine: the scope the shards share
//! (the one busy probe, the observer) and the deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;

/// What the whole request (all its shards) shares: the one busy probe it may
/// run ([routing.md](crate::spec::routing#serverisbusy0-follower-probe): "At
/// most one probe per request").
#[derive(Debug, Default)]
pub(crate) struct RequestScope {
    probed: AtomicBool,
    /// The request's method, latency and outcome.
    pub(crate) observer: crate::telemetry::RequestObserver,
}

impl RequestScope {
    /// The scope of a request of `method` (`raw_get`, ...).
    pub(crate) fn new(method: &'static str) -> Self {
        RequestScope {
            probed: AtomicBool::new(false),
            observer: crate::telemetry::RequestObserver::new(method),
        }
    }

    pub(super) fn probed(&self) -> bool {
        self.probed.load(Ordering::Relaxed)
    }

    /// Takes the request's one probe; false when it was taken already.
    pub(super) fn take_probe(&self) -> bool {
        !self.probed.swap(true, Ordering::Relaxed)
    }
}

/// The request's overall deadline: when it ends, and the configured length
/// (for the error message).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    /// When the request must be finished.
    pub(crate) at: Instant,
    /// The configured deadline.
    pub(crate) length: Duration,
}
