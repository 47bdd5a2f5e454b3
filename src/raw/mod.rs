//! The raw key-value client and its requests.

mod client;
mod requests;

pub(crate) use client::validate_pd_endpoints;
pub use client::{RawClient, MAX_RAW_KV_SCAN_LIMIT};

pub use requests::*;
