//! TiKV's raw range checksum (`RawChecksum`, algorithm `Crc64_Xor`): the XOR
//! over every pair of the CRC-64 of the key followed by the value, with the
//! pair count and the total key and value bytes. A client merges the
//! Regions' answers with it; a server computes them with it.

/// The checksum of a range (tikv-plan's `RawClient::checksum` answers one):
/// equal data gives equal answers, wherever the Regions split it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct RawChecksum {
    /// XOR of [`pair_checksum`] over every pair.
    pub crc64_xor: u64,
    /// How many pairs the range holds.
    pub total_kvs: u64,
    /// The sum of every key's and value's length in bytes.
    pub total_bytes: u64,
}

impl RawChecksum {
    /// Adds one pair.
    pub fn add(&mut self, key: &[u8], value: &[u8]) {
        self.crc64_xor ^= pair_checksum(key, value);
        self.total_kvs += 1;
        self.total_bytes += (key.len() + value.len()) as u64;
    }

    /// Combines the checksums of two disjoint ranges.
    pub fn merge(&mut self, other: RawChecksum) {
        self.crc64_xor ^= other.crc64_xor;
        self.total_kvs += other.total_kvs;
        self.total_bytes += other.total_bytes;
    }
}

/// The reflected ECMA-182 polynomial of CRC-64/XZ, the CRC TiKV uses
/// (`crc64fast`).
const POLY: u64 = 0xC96C_5795_D787_0F42;

const TABLE: [u64; 256] = {
    let mut table = [0u64; 256];
    let mut i = 0;
    while i < 256 {
        let mut crc = i as u64;
        let mut bit = 0;
        while bit < 8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ POLY
            } else {
                crc >> 1
            };
            bit += 1;
        }
        table[i] = crc;
        i += 1;
    }
    table
};

/// CRC-64/XZ of the concatenation of `parts`.
pub fn crc64(parts: &[&[u8]]) -> u64 {
    let mut crc = !0u64;
    for part in parts {
        for &byte in *part {
            crc = TABLE[((crc ^ byte as u64) & 0xFF) as usize] ^ (crc >> 8);
        }
    }
    !crc
}

/// One pair's contribution: the CRC-64 of the key followed by the value.
pub fn pair_checksum(key: &[u8], value: &[u8]) -> u64 {
    crc64(&[key, value])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_matches_the_xz_check_value() {
        // The standard check input of the CRC catalogue.
        assert_eq!(crc64(&[b"123456789"]), 0x995D_C9BB_DF19_39FA);
        assert_eq!(crc64(&[b"1234", b"56789"]), 0x995D_C9BB_DF19_39FA);
        assert_eq!(crc64(&[]), 0);
    }

    #[test]
    fn checksums_of_disjoint_parts_merge_to_the_whole() {
        let mut whole = RawChecksum::default();
        let (mut left, mut right) = (RawChecksum::default(), RawChecksum::default());
        for (i, (k, v)) in [("a", "1"), ("b", "22"), ("c", "333")].iter().enumerate() {
            whole.add(k.as_bytes(), v.as_bytes());
            let part = if i == 0 { &mut left } else { &mut right };
            part.add(k.as_bytes(), v.as_bytes());
        }
        left.merge(right);
        assert_eq!(left, whole);
        assert_eq!(whole.total_kvs, 3);
        assert_eq!(whole.total_bytes, 3 + 6);
    }
}
