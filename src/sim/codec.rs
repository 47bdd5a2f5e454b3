//! The memcomparable key encoding, now a crate-level module
//! ([`crate::codec`]) because the transactional client needs it without
//! the `sim` feature; re-exported here so existing paths keep working.

pub use crate::codec::{decode_bytes, decode_bytes_prefix, encode_bytes, DecodeError};
