//! The memcomparable key encoding (from [`tikv_plan_proto::codec`]) and
//! the Region boundaries it makes. PD holds every Region boundary as TiKV
//! keeps the keys: encoded for transactional keys, and in API v2 for raw
//! keys too (TiKV stores a raw key as `ApiV2::encode_raw_key`, its
//! encoding), while API v1 raw keys are plain bytes. So
//! [`SimClusterBuilder::split_keys`](crate::SimClusterBuilder::split_keys),
//! [`SimCluster::split_region`](crate::SimCluster::split_region) and the
//! control port's `split` take boundaries in that form; in API v2,
//! [`keyspace_split_keys`] makes them from a keyspace's keys.
//!
//! ```
//! use tikv_sim::codec::{encode_bytes, keyspace_split_keys, KeyspaceMode};
//! // Keyspace 1's raw keys split at "m": the boundary is the encoding of
//! // the prefixed key, as PD reports it.
//! let split = keyspace_split_keys(1, KeyspaceMode::Raw, ["m"]);
//! assert_eq!(split, vec![encode_bytes(b"r\0\0\x01m")]);
//! ```

pub use tikv_plan_proto::codec::{decode_bytes, decode_bytes_prefix, encode_bytes, DecodeError};

/// Which of a keyspace's two key spaces (API v2's mode byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyspaceMode {
    /// Raw keys, prefixed `r`.
    Raw,
    /// Transactional keys, prefixed `x`.
    Txn,
}

/// `key` of keyspace `keyspace_id` as a client sends it in API v2: the mode
/// byte, the id as three big-endian bytes, then the key. The id's top byte
/// is dropped (ids are 24 bits).
pub fn keyspace_key(keyspace_id: u32, mode: KeyspaceMode, key: &[u8]) -> Vec<u8> {
    let id = keyspace_id.to_be_bytes();
    let mode = match mode {
        KeyspaceMode::Raw => b'r',
        KeyspaceMode::Txn => b'x',
    };
    let mut out = Vec::with_capacity(4 + key.len());
    out.extend_from_slice(&[mode, id[1], id[2], id[3]]);
    out.extend_from_slice(key);
    out
}

/// Region boundaries at `keys` of keyspace `keyspace_id`'s `mode` key
/// space, in the form PD holds them in API v2: the encoding of each
/// prefixed key ([`keyspace_key`]). The empty key is the keyspace's start.
pub fn keyspace_split_keys<K: AsRef<[u8]>>(
    keyspace_id: u32,
    mode: KeyspaceMode,
    keys: impl IntoIterator<Item = K>,
) -> Vec<Vec<u8>> {
    keys.into_iter()
        .map(|key| encode_bytes(&keyspace_key(keyspace_id, mode, key.as_ref())))
        .collect()
}
