//! # tikv-plan-proto
//!
//! The subset of TiKV's and PD's wire protocol that
//! [tikv-plan](https://docs.rs/tikv-plan) and [tikv-sim](https://docs.rs/tikv-sim)
//! speak, following kvproto's package names, message names and field numbers,
//! and two wire facts both sides need: TiKV's memcomparable key encoding
//! ([`codec`]) and its raw range checksum ([`checksum`]); which keys a
//! Region holds and which peers may lead ([`meta`]); the table of
//! `tikvpb.Tikv`'s methods ([`methods`], [`kv_methods!`]) that client and
//! simulator both read; and a writer of batched requests and a reader of
//! answers that skip the detours of the generated types ([`requests`],
//! [`answers`]).
//!
//! The Rust code is generated from the `.proto` files in `proto/` and checked
//! in (`src/generated/`), so building this crate runs no `protoc` and no build
//! script; `tests/generated.rs` regenerates it and fails on any difference.
//!
//! ## Features
//!
//! - `server`: the gRPC server stubs (`tikvpb::tikv_server`,
//!   `pdpb::pd_server`, `keyspacepb::keyspace_server`) and tonic's server
//!   stack. Client stubs are always compiled.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod answers;
pub mod checksum;
pub mod codec;
pub mod meta;
pub mod methods;
pub mod requests;

/// Region and store metadata.
#[allow(missing_docs, clippy::all)]
pub mod metapb {
    include!("generated/metapb.rs");
}

/// Region errors.
#[allow(missing_docs, clippy::all)]
pub mod errorpb {
    include!("generated/errorpb.rs");
}

/// Key-value requests and responses (raw and transactional), and the request
/// `Context`.
#[allow(missing_docs, clippy::all)]
pub mod kvrpcpb {
    include!("generated/kvrpcpb.rs");
}

/// The TiKV gRPC service (`tikvpb.Tikv`).
#[allow(missing_docs, clippy::all)]
pub mod tikvpb {
    include!("generated/tikvpb.rs");
}

/// The PD gRPC service (`pdpb.PD`).
#[allow(missing_docs, clippy::all)]
pub mod pdpb {
    include!("generated/pdpb.rs");
}

/// PD's keyspace service (`keyspacepb.Keyspace`), for API v2 keyspaces.
#[allow(missing_docs, clippy::all)]
pub mod keyspacepb {
    include!("generated/keyspacepb.rs");
}

/// The tracing context a request may carry (`kvrpcpb.Context.trace_context`).
#[allow(missing_docs, clippy::all)]
pub mod tracepb {
    include!("generated/tracepb.rs");
}

/// The wait-for edges of a deadlock (`kvrpcpb.Deadlock.wait_chain`).
#[allow(missing_docs, clippy::all)]
pub mod deadlock {
    include!("generated/deadlock.rs");
}

/// A Region's encryption metadata (`metapb.Region.encryption_meta`).
#[allow(missing_docs, clippy::all)]
pub mod encryptionpb {
    include!("generated/encryptionpb.rs");
}

/// Resource consumption (`kvrpcpb.ResourceControlContext.penalty`); PD's
/// resource manager service is not included.
#[allow(missing_docs, clippy::all)]
pub mod resource_manager {
    include!("generated/resource_manager.rs");
}
