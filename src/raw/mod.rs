//! The raw key-value client and its requests.

mod checksum;
mod client;
mod coprocessor;
mod health;
pub mod lowering;
mod requests;

pub use crate::kv::ColumnFamily;
pub use checksum::RawChecksum;
/// client-rust's name for the raw client (`tikv_client::raw::Client`).
pub use client::RawClient as Client;
pub use client::RawClient;
