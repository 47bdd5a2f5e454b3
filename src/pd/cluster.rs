//! Connection to the PD leader (in progress).

pub use crate::proto::pdpb::Timestamp;

/// The PD cluster connection (in progress).
#[derive(Debug, Default)]
pub struct Cluster {}
