//! The memcomparable key encoding of transactional keys (from
//! [`tikv_plan_proto::codec`]): Region boundaries of a transactional
//! cluster are encoded keys.

pub use tikv_plan_proto::codec::{decode_bytes, decode_bytes_prefix, encode_bytes, DecodeError};
