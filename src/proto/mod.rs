//! The TiKV and PD wire protocol: generated from the `.proto` files beside
//! this module, which follow kvproto's package names, message names and field
//! numbers for the raw-KV subset (see [wire.md](crate::spec::wire)).
//!
//! Client stubs are always generated: the client talks to real TiKV and PD.
//! Server stubs (`tikvpb::tikv_server`, `pdpb::pd_server`, ...) are generated
//! only with the `sim` feature, for the simulated cluster and test servers.

#![allow(missing_docs)]
#![allow(clippy::all)]

/// Region and store metadata.
pub mod metapb {
    tonic::include_proto!("metapb");
}

/// Region errors.
pub mod errorpb {
    tonic::include_proto!("errorpb");
}

/// Raw key-value requests and responses, and the request `Context`.
pub mod kvrpcpb {
    tonic::include_proto!("kvrpcpb");
}

/// The TiKV gRPC service (`tikvpb.Tikv`).
pub mod tikvpb {
    tonic::include_proto!("tikvpb");
}

/// The PD gRPC service (`pdpb.PD`).
pub mod pdpb {
    tonic::include_proto!("pdpb");
}

pub mod keyspacepb {
    tonic::include_proto!("keyspacepb");
}
