//! What can stop a chaos run before it reports: the client or the simulated
//! cluster failing to start, or the checker itself failing.

/// Why a chaos run did not produce a report.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The client failed outside the workload (connecting, setting up).
    #[error(transparent)]
    Client(#[from] tikv_plan::Error),
    /// The simulated cluster failed (starting, applying a fault).
    #[error(transparent)]
    Sim(#[from] tikv_sim::Error),
    /// The deterministic simulation failed (a host's error, or no history).
    #[error("{0}")]
    Simulation(String),
    /// The history check could not run.
    #[error("{0}")]
    Check(String),
}

/// A chaos run's result.
pub type Result<T, E = Error> = std::result::Result<T, E>;
