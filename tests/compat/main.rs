//! Compatibility: client-rust's API and behaviour, key encodings and paths,
//! and the wire protocol.
//!
//! One test binary of several modules, each the file of its name.

mod client_rust_compat;
mod client_rust_compat_txn;
mod parity_keys;
mod parity_paths;
mod wire;
mod wire_txn;
