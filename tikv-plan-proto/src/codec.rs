//! The memcomparable "bytes" encoding of transactional keys (API v1), as
//! TiKV stores them and as PD reports Region boundaries (tikv-plan's
//! txn.md, "Key encoding"): the key is cut into
//! groups of 8 bytes, the last group padded with zero bytes, and each group is
//! followed by a marker byte `0xFF - padding`. A key whose length is a multiple
//! of 8 ends with a group of 8 zero bytes and marker `0xF7`. The encoding keeps
//! the byte order of keys, so encoded keys compare as the keys do.
//!
//! ```
//! use tikv_plan_proto::codec::{decode_bytes, encode_bytes};
//! let encoded = encode_bytes(b"abc");
//! assert_eq!(encoded, b"abc\0\0\0\0\0\xfa".to_vec());
//! assert_eq!(decode_bytes(&encoded).unwrap(), b"abc".to_vec());
//! ```

use thiserror::Error;

/// Bytes per group.
const GROUP: usize = 8;
/// The marker of a full group that is followed by another group.
const MARKER_FULL: u8 = 0xFF;

/// Why a byte string is not a valid memcomparable encoding.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum DecodeError {
    /// The input ended inside a group or before the last group.
    #[error("unexpected end of an encoded key after {0} bytes")]
    UnexpectedEof(usize),
    /// A marker byte claims more than 8 padding bytes.
    #[error("invalid marker byte {marker:#04x} at offset {offset}")]
    InvalidMarker {
        /// The marker byte.
        marker: u8,
        /// Its offset in the input.
        offset: usize,
    },
    /// A padding byte is not zero.
    #[error("non-zero padding byte at offset {0}")]
    InvalidPadding(usize),
    /// Bytes follow the last group.
    #[error("{0} trailing bytes after the encoded key")]
    TrailingBytes(usize),
}

/// Encodes `key` in the memcomparable bytes encoding.
pub fn encode_bytes(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity((key.len() / GROUP + 1) * (GROUP + 1));
    let mut chunks = key.chunks_exact(GROUP);
    for chunk in &mut chunks {
        out.extend_from_slice(chunk);
        out.push(MARKER_FULL);
    }
    let rest = chunks.remainder();
    let padding = GROUP - rest.len();
    out.extend_from_slice(rest);
    out.extend(std::iter::repeat_n(0u8, padding));
    // `padding` is 1..=8, so the marker is 0xF7..=0xFE.
    out.push(MARKER_FULL - padding as u8);
    out
}

/// Decodes one encoded key at the start of `input`; returns the key and the
/// number of bytes it took.
pub fn decode_bytes_prefix(input: &[u8]) -> Result<(Vec<u8>, usize), DecodeError> {
    let mut key = Vec::with_capacity(input.len() / (GROUP + 1) * GROUP);
    let mut offset = 0;
    loop {
        let group = input
            .get(offset..offset + GROUP + 1)
            .ok_or(DecodeError::UnexpectedEof(input.len()))?;
        let marker = group[GROUP];
        let padding = usize::from(MARKER_FULL - marker);
        if padding > GROUP {
            return Err(DecodeError::InvalidMarker {
                marker,
                offset: offset + GROUP,
            });
        }
        let (data, pad) = group[..GROUP].split_at(GROUP - padding);
        key.extend_from_slice(data);
        if let Some(i) = pad.iter().position(|b| *b != 0) {
            return Err(DecodeError::InvalidPadding(offset + data.len() + i));
        }
        offset += GROUP + 1;
        if padding > 0 {
            return Ok((key, offset));
        }
    }
}

/// Decodes a whole encoded key: `input` must be exactly one encoding.
pub fn decode_bytes(input: &[u8]) -> Result<Vec<u8>, DecodeError> {
    let (key, used) = decode_bytes_prefix(input)?;
    if used != input.len() {
        return Err(DecodeError::TrailingBytes(input.len() - used));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_keeps_order() {
        let keys: Vec<Vec<u8>> = vec![
            vec![],
            vec![0],
            b"a".to_vec(),
            b"abcdefg".to_vec(),
            b"abcdefgh".to_vec(),
            b"abcdefgh\0".to_vec(),
            b"abcdefghi".to_vec(),
            vec![0xff; 17],
        ];
        for k in &keys {
            assert_eq!(decode_bytes(&encode_bytes(k)).unwrap(), *k);
        }
        let mut sorted = keys.clone();
        sorted.sort();
        let mut by_encoding = keys.clone();
        by_encoding.sort_by_key(|k| encode_bytes(k));
        assert_eq!(sorted, by_encoding);
        assert_eq!(encode_bytes(b""), vec![0, 0, 0, 0, 0, 0, 0, 0, 0xf7]);
        assert_eq!(encode_bytes(b"abcdefgh").len(), 18);
    }

    #[test]
    fn rejects_what_is_not_an_encoding() {
        assert_eq!(decode_bytes(b"P"), Err(DecodeError::UnexpectedEof(1)));
        assert!(matches!(
            decode_bytes(b"a\0\0\0\0\0\0\0\xf0"),
            Err(DecodeError::InvalidMarker { .. })
        ));
        assert_eq!(
            decode_bytes(b"a\0\0\0\0\0\x01\0\xfa"),
            Err(DecodeError::InvalidPadding(6))
        );
        let mut two = encode_bytes(b"a");
        two.push(0);
        assert_eq!(decode_bytes(&two), Err(DecodeError::TrailingBytes(1)));
    }
}
