//! Keyspaces (TiKV API v2): client-rust's [`Keyspace`], [`KeyMode`],
//! [`EncodeKeyspace`] and [`TruncateKeyspace`].
//!
//! In API v2 every key starts with a four-byte prefix: the mode byte (`r`
//! for raw keys, `x` for transactional keys) and the keyspace id as a 24-bit
//! big-endian number. A keyspace's keys are therefore the range
//! `[prefix(id), prefix(id + 1))`; a client encodes keys and range bounds on
//! the way out and strips the prefix from keys coming back.

use std::ops::{Bound, Range};

use crate::proto::kvrpcpb;
use crate::{BoundRange, Key, KvPair};

/// The mode byte of raw keys in API v2.
pub const RAW_KEY_PREFIX: u8 = b'r';
/// The mode byte of transactional keys in API v2.
pub const TXN_KEY_PREFIX: u8 = b'x';
/// The length of the API v2 key prefix: the mode byte and a 24-bit id.
pub const KEYSPACE_PREFIX_LEN: usize = 4;
/// The largest keyspace id (24 bits).
pub const MAX_KEYSPACE_ID: u32 = (1 << 24) - 1;

/// Which keyspace requests use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub enum Keyspace {
    /// API v1: keys are sent as given.
    Disable,
    /// API v2 with this keyspace: keys carry its prefix.
    Enable {
        /// The keyspace id PD gave for the keyspace's name.
        keyspace_id: u32,
    },
    /// API v2 with keys sent as given: the caller encodes them.
    ApiV2NoPrefix,
}

/// Whether keys are raw or transactional (the API v2 mode byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum KeyMode {
    /// Raw keys (`r`).
    Raw,
    /// Transactional keys (`x`).
    Txn,
}

impl Keyspace {
    /// The API version requests in this keyspace carry in their context.
    pub fn api_version(&self) -> kvrpcpb::ApiVersion {
        match self {
            Keyspace::Disable => kvrpcpb::ApiVersion::V1,
            Keyspace::Enable { .. } | Keyspace::ApiV2NoPrefix => kvrpcpb::ApiVersion::V2,
        }
    }

    /// The keyspace id for `Context.keyspace_id` (0 outside a keyspace).
    pub fn id(&self) -> u32 {
        match self {
            Keyspace::Enable { keyspace_id } => *keyspace_id,
            _ => 0,
        }
    }

    /// Sets `Context.api_version` and `Context.keyspace_id` for this
    /// keyspace.
    pub fn apply_to_context(&self, context: &mut kvrpcpb::Context) {
        context.api_version = self.api_version() as i32;
        context.keyspace_id = self.id();
    }
}

/// The four-byte prefix of keyspace `keyspace_id`'s keys in `mode`.
pub fn keyspace_prefix(keyspace_id: u32, mode: KeyMode) -> [u8; KEYSPACE_PREFIX_LEN] {
    let id = keyspace_id.to_be_bytes();
    let mode = match mode {
        KeyMode::Raw => RAW_KEY_PREFIX,
        KeyMode::Txn => TXN_KEY_PREFIX,
    };
    [mode, id[1], id[2], id[3]]
}

/// The end of a keyspace's key range: the next keyspace's prefix, or, for
/// the last id, the next mode byte.
pub(crate) fn keyspace_end(keyspace_id: u32, mode: KeyMode) -> Vec<u8> {
    if keyspace_id >= MAX_KEYSPACE_ID {
        let prefix = keyspace_prefix(0, mode);
        return vec![prefix[0] + 1];
    }
    keyspace_prefix(keyspace_id + 1, mode).to_vec()
}

/// Adds the keyspace prefix (client-rust's trait).
pub trait EncodeKeyspace {
    /// The value with its keys in `keyspace`'s API v2 form.
    fn encode_keyspace(self, keyspace: Keyspace, key_mode: KeyMode) -> Self;
}

/// Strips the keyspace prefix (client-rust's trait).
pub trait TruncateKeyspace {
    /// The value with the keyspace prefix removed from its keys.
    fn truncate_keyspace(self, keyspace: Keyspace) -> Self;
}

fn encode_bytes(bytes: Vec<u8>, keyspace: Keyspace, mode: KeyMode) -> Vec<u8> {
    let Keyspace::Enable { keyspace_id } = keyspace else {
        return bytes;
    };
    let mut out = Vec::with_capacity(KEYSPACE_PREFIX_LEN + bytes.len());
    out.extend_from_slice(&keyspace_prefix(keyspace_id, mode));
    out.extend_from_slice(&bytes);
    out
}

/// Strips the prefix; a key shorter than a prefix (which a store of the
/// keyspace never returns) is left as it is rather than panicking.
fn truncate_bytes(mut bytes: Vec<u8>, keyspace: Keyspace) -> Vec<u8> {
    if matches!(keyspace, Keyspace::Enable { .. }) && bytes.len() >= KEYSPACE_PREFIX_LEN {
        bytes.drain(..KEYSPACE_PREFIX_LEN);
    }
    bytes
}

impl EncodeKeyspace for Key {
    fn encode_keyspace(self, keyspace: Keyspace, key_mode: KeyMode) -> Self {
        Key::from(encode_bytes(self.into(), keyspace, key_mode))
    }
}

impl EncodeKeyspace for KvPair {
    fn encode_keyspace(self, keyspace: Keyspace, key_mode: KeyMode) -> Self {
        KvPair(self.0.encode_keyspace(keyspace, key_mode), self.1)
    }
}

impl EncodeKeyspace for BoundRange {
    /// An unbounded start becomes the keyspace's first key; an unbounded or
    /// empty end becomes the keyspace's end, so `..` covers exactly the
    /// keyspace.
    fn encode_keyspace(self, keyspace: Keyspace, key_mode: KeyMode) -> Self {
        let Keyspace::Enable { keyspace_id } = keyspace else {
            return self;
        };
        let encode = |k: Key| k.encode_keyspace(keyspace, key_mode);
        let from = match self.from {
            Bound::Included(k) => Bound::Included(encode(k)),
            Bound::Excluded(k) => Bound::Excluded(encode(k)),
            Bound::Unbounded => Bound::Included(encode(Key::EMPTY)),
        };
        let to = match self.to {
            Bound::Included(k) if !k.is_empty() => Bound::Included(encode(k)),
            Bound::Excluded(k) if !k.is_empty() => Bound::Excluded(encode(k)),
            _ => Bound::Excluded(Key::from(keyspace_end(keyspace_id, key_mode))),
        };
        BoundRange::new(from, to)
    }
}

impl TruncateKeyspace for Key {
    fn truncate_keyspace(self, keyspace: Keyspace) -> Self {
        Key::from(truncate_bytes(self.into(), keyspace))
    }
}

impl TruncateKeyspace for KvPair {
    fn truncate_keyspace(self, keyspace: Keyspace) -> Self {
        KvPair(self.0.truncate_keyspace(keyspace), self.1)
    }
}

impl TruncateKeyspace for Range<Key> {
    fn truncate_keyspace(self, keyspace: Keyspace) -> Self {
        self.start.truncate_keyspace(keyspace)..self.end.truncate_keyspace(keyspace)
    }
}

/// A lock's own key, its primary and its secondaries lose the prefix.
impl TruncateKeyspace for kvrpcpb::LockInfo {
    fn truncate_keyspace(mut self, keyspace: Keyspace) -> Self {
        self.key = truncate_bytes(std::mem::take(&mut self.key), keyspace);
        self.primary_lock = truncate_bytes(std::mem::take(&mut self.primary_lock), keyspace);
        for secondary in &mut self.secondaries {
            *secondary = truncate_bytes(std::mem::take(secondary), keyspace);
        }
        self
    }
}

/// A lock's own key, its primary and its secondaries get the prefix.
impl EncodeKeyspace for kvrpcpb::LockInfo {
    fn encode_keyspace(mut self, keyspace: Keyspace, key_mode: KeyMode) -> Self {
        let encode = |bytes: &mut Vec<u8>| {
            *bytes = encode_bytes(std::mem::take(bytes), keyspace, key_mode);
        };
        encode(&mut self.key);
        encode(&mut self.primary_lock);
        self.secondaries.iter_mut().for_each(encode);
        self
    }
}

impl<T: EncodeKeyspace> EncodeKeyspace for Vec<T> {
    fn encode_keyspace(self, keyspace: Keyspace, key_mode: KeyMode) -> Self {
        if !matches!(keyspace, Keyspace::Enable { .. }) {
            return self;
        }
        self.into_iter()
            .map(|item| item.encode_keyspace(keyspace, key_mode))
            .collect()
    }
}

impl<T: TruncateKeyspace> TruncateKeyspace for Vec<T> {
    fn truncate_keyspace(self, keyspace: Keyspace) -> Self {
        if !matches!(keyspace, Keyspace::Enable { .. }) {
            return self;
        }
        self.into_iter()
            .map(|item| item.truncate_keyspace(keyspace))
            .collect()
    }
}

/// The keyspace `config` names, resolved through PD
/// ([`load_keyspace`]), or [`Keyspace::Disable`] (API v1) when it names none.
pub(crate) async fn configured_keyspace<PdC: crate::pd::PdClient>(
    pd: &PdC,
    config: &crate::Config,
) -> crate::Result<Keyspace> {
    match &config.keyspace {
        None => Ok(Keyspace::Disable),
        Some(name) => load_keyspace(pd, name).await,
    }
}

/// Resolves a keyspace name through PD; a keyspace that exists but is not
/// enabled cannot be used either.
pub(crate) async fn load_keyspace<PdC: crate::pd::PdClient>(
    pd: &PdC,
    name: &str,
) -> crate::Result<Keyspace> {
    let meta = pd.load_keyspace(name).await?;
    if meta.state != crate::proto::keyspacepb::KeyspaceState::Enabled as i32 {
        return Err(crate::Error::KeyspaceNotFound(name.to_owned()));
    }
    if meta.id > MAX_KEYSPACE_ID {
        return Err(crate::Error::InternalError {
            message: format!(
                "PD gave keyspace {name:?} the id {}, which does not fit 24 bits",
                meta.id
            ),
        });
    }
    Ok(Keyspace::Enable {
        keyspace_id: meta.id,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const KS: Keyspace = Keyspace::Enable {
        keyspace_id: 0x00AB_CDEF,
    };

    #[test]
    fn prefixes_are_the_mode_byte_and_a_24_bit_big_endian_id() {
        assert_eq!(keyspace_prefix(0, KeyMode::Raw), [b'r', 0, 0, 0]);
        assert_eq!(keyspace_prefix(1, KeyMode::Raw), [b'r', 0, 0, 1]);
        assert_eq!(keyspace_prefix(0x0001_0203, KeyMode::Txn), [b'x', 1, 2, 3]);
        assert_eq!(keyspace_end(7, KeyMode::Raw), vec![b'r', 0, 0, 8]);
        assert_eq!(keyspace_end(MAX_KEYSPACE_ID, KeyMode::Raw), vec![b's']);
    }

    #[test]
    fn keys_and_pairs_round_trip() {
        let key = Key::from("k").encode_keyspace(KS, KeyMode::Raw);
        assert_eq!(key.as_bytes(), [b'r', 0xAB, 0xCD, 0xEF, b'k']);
        assert_eq!(key.truncate_keyspace(KS), Key::from("k"));
        let pair = KvPair::new("k", "v").encode_keyspace(KS, KeyMode::Txn);
        assert_eq!(pair.key().as_bytes()[0], b'x');
        assert_eq!(pair.truncate_keyspace(KS), KvPair::new("k", "v"));
        // Outside a keyspace nothing changes.
        let plain = Key::from("k").encode_keyspace(Keyspace::Disable, KeyMode::Raw);
        assert_eq!(plain, Key::from("k"));
        let plain = Key::from("k").encode_keyspace(Keyspace::ApiV2NoPrefix, KeyMode::Raw);
        assert_eq!(
            plain.truncate_keyspace(Keyspace::ApiV2NoPrefix),
            Key::from("k")
        );
        // A short key is left alone rather than panicking.
        assert_eq!(Key::from("ab").truncate_keyspace(KS), Key::from("ab"));
    }

    #[test]
    fn ranges_stay_inside_the_keyspace() {
        let ks = Keyspace::Enable { keyspace_id: 5 };
        let keys = |r: BoundRange| {
            let (s, e) = r
                .encode_keyspace(ks, KeyMode::Raw)
                .into_key_range()
                .unwrap();
            (Vec::from(s), Vec::from(e))
        };
        let start = vec![b'r', 0, 0, 5];
        let end = vec![b'r', 0, 0, 6];
        assert_eq!(keys((..).into()), (start.clone(), end.clone()));
        assert_eq!(keys(("".."").into()), (start.clone(), end.clone()));
        assert_eq!(
            keys(("a"..).into()),
            ([&start[..], b"a"].concat(), end.clone())
        );
        assert_eq!(
            keys(("a".."c").into()),
            ([&start[..], b"a"].concat(), [&start[..], b"c"].concat())
        );
        assert_eq!(
            keys((..="c").into()),
            (start.clone(), [&start[..], b"c\0"].concat())
        );
        let ranges =
            vec![Key::from(vec![b'r', 0, 0, 5, b'a'])..Key::from(vec![b'r', 0, 0, 5, b'b'])];
        assert_eq!(
            ranges.truncate_keyspace(ks),
            vec![Key::from("a")..Key::from("b")]
        );
    }

    #[test]
    fn contexts_carry_the_api_version_and_id() {
        let mut ctx = kvrpcpb::Context::default();
        KS.apply_to_context(&mut ctx);
        assert_eq!(ctx.api_version, kvrpcpb::ApiVersion::V2 as i32);
        assert_eq!(ctx.keyspace_id, 0x00AB_CDEF);
        Keyspace::Disable.apply_to_context(&mut ctx);
        assert_eq!((ctx.api_version, ctx.keyspace_id), (0, 0));
    }
}
