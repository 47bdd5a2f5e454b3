//! The raw key-value client and its requests.

mod checksum;
mod client;
mod requests;

pub use crate::kv::ColumnFamily;
pub use checksum::{crc64, new_raw_checksum_request, pair_checksum, MergeChecksum, RawChecksum};
/// client-rust's name for the raw client (`tikv_client::raw::Client`).
pub use client::RawClient as Client;
pub use client::{RawClient, MAX_RAW_KV_SCAN_LIMIT};

pub use requests::*;
