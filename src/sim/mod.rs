//! The simulated cluster (in progress).
