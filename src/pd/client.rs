//! The PD client over gRPC (in progress).

/// PD client over gRPC (in progress).
#[derive(Debug, Default)]
pub struct PdRpcClient {}
