//! The data of one Region: a sorted map per column family, with TTLs. All
//! peers of a Region share one `RegionData` (the replicated state machine),
//! so every read sees every acknowledged write.
//!
//! Keys are stored as TiKV stores raw keys ([`RawKeys`]): as given in API
//! v1, memcomparable-encoded in API v2. Region boundaries are compared with
//! the stored keys, so a split or merge moves raw data by the same key
//! order the Region check uses.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::time::Duration;

use tokio::time::Instant;

use crate::codec::{decode_bytes, encode_bytes};
use crate::proto::kvrpcpb::ApiVersion;

/// How a store holds raw keys and checks them against Region boundaries:
/// TiKV's `KvFormat::encode_raw_key`. API v1 (and v1ttl) keeps the key as
/// sent; API v2 stores `Key::from_raw(key)`, the memcomparable encoding
/// (its version timestamp aside), so every Region boundary of an API v2
/// cluster, raw or transactional, is an encoded key. Requests and answers
/// carry the keys as sent either way.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum RawKeys {
    /// API v1: raw keys stored and compared as sent.
    #[default]
    Plain,
    /// API v2: raw keys stored and compared memcomparable-encoded.
    Encoded,
}

impl RawKeys {
    /// The form a store of `api` keeps raw keys in.
    pub(crate) fn of(api: ApiVersion) -> Self {
        match api {
            ApiVersion::V2 => RawKeys::Encoded,
            ApiVersion::V1 | ApiVersion::V1ttl => RawKeys::Plain,
        }
    }

    /// A raw key as stored and as checked against a Region.
    pub(crate) fn stored<'a>(self, key: &'a [u8]) -> Cow<'a, [u8]> {
        match self {
            RawKeys::Plain => Cow::Borrowed(key),
            RawKeys::Encoded => Cow::Owned(encode_bytes(key)),
        }
    }

    /// A range bound as stored: an empty bound stays empty (the open end of
    /// the key space, as a request's empty end key means).
    pub(crate) fn stored_bound<'a>(self, key: &'a [u8]) -> Cow<'a, [u8]> {
        if key.is_empty() {
            Cow::Borrowed(key)
        } else {
            self.stored(key)
        }
    }

    /// A stored key as the client sent it. Every stored key was stored
    /// through [`stored`](Self::stored), so it decodes; one that did not
    /// would be returned as it is.
    pub(crate) fn user(self, stored: Vec<u8>) -> Vec<u8> {
        match self {
            RawKeys::Plain => stored,
            RawKeys::Encoded => decode_bytes(&stored).unwrap_or(stored),
        }
    }
}

/// The column families a raw request may name (an empty name is
/// `default`).
const COLUMN_FAMILIES: [&str; 3] = ["default", "write", "lock"];

/// One stored value and when it expires.
#[derive(Debug, Clone)]
struct Entry {
    value: Vec<u8>,
    expires_at: Option<Instant>,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|at| at > now)
    }
}

/// The key-value data of one Region. Its methods take and return keys as
/// the client sent them, except where they say otherwise: scan bounds are
/// in the stored form, as they are clamped to the Region.
#[derive(Debug, Clone, Default)]
pub(crate) struct RegionData {
    cfs: BTreeMap<&'static str, BTreeMap<Vec<u8>, Entry>>,
    keys: RawKeys,
}

/// A column family name resolved to one of [`COLUMN_FAMILIES`].
pub(crate) fn column_family(cf: &str) -> Result<&'static str, String> {
    let name = if cf.is_empty() { "default" } else { cf };
    COLUMN_FAMILIES
        .iter()
        .find(|c| **c == name)
        .copied()
        .ok_or_else(|| format!("invalid column family {cf:?}: use default, write or lock"))
}

/// The longest TTL the simulation keeps exactly. TiKV saturates the expiry
/// of a huge TTL; an `Instant` cannot reach that far (adding would panic),
/// so longer TTLs are held at this bound, which no test outlives.
const MAX_TTL_SECONDS: u64 = 100 * 365 * 24 * 60 * 60;

fn expiry(ttl_seconds: u64, now: Instant) -> Option<Instant> {
    (ttl_seconds > 0).then(|| now + Duration::from_secs(ttl_seconds.min(MAX_TTL_SECONDS)))
}

/// A key range `[start, end)` where an empty `end` is unbounded.
fn range_bounds<'a>(start: &'a [u8], end: &'a [u8]) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    let upper = if end.is_empty() {
        Bound::Unbounded
    } else {
        Bound::Excluded(end)
    };
    (Bound::Included(start), upper)
}

impl RegionData {
    /// Empty data whose keys are stored in the form `keys`.
    pub(crate) fn new(keys: RawKeys) -> Self {
        RegionData {
            cfs: BTreeMap::new(),
            keys,
        }
    }

    /// The form the keys are stored in.
    pub(crate) fn keys(&self) -> RawKeys {
        self.keys
    }

    fn cf(&self, cf: &'static str) -> Option<&BTreeMap<Vec<u8>, Entry>> {
        self.cfs.get(cf)
    }

    fn cf_mut(&mut self, cf: &'static str) -> &mut BTreeMap<Vec<u8>, Entry> {
        self.cfs.entry(cf).or_default()
    }

    /// The live value of `key`.
    pub(crate) fn get(&self, cf: &'static str, key: &[u8], now: Instant) -> Option<Vec<u8>> {
        self.cf(cf)?
            .get(self.keys.stored(key).as_ref())
            .filter(|e| e.live(now))
            .map(|e| e.value.clone())
    }

    /// The remaining TTL of `key` in whole seconds rounded up (0 when it
    /// has none), or None when the key is absent or expired.
    pub(crate) fn ttl(&self, cf: &'static str, key: &[u8], now: Instant) -> Option<u64> {
        let stored = self.keys.stored(key);
        let entry = self.cf(cf)?.get(stored.as_ref()).filter(|e| e.live(now))?;
        Some(match entry.expires_at {
            None => 0,
            Some(at) => {
                let left = at - now;
                left.as_secs() + u64::from(left.subsec_nanos() > 0)
            }
        })
    }

    /// Stores `value` under `key`; `ttl_seconds` 0 means no expiry.
    pub(crate) fn put(
        &mut self,
        cf: &'static str,
        key: Vec<u8>,
        value: Vec<u8>,
        ttl_seconds: u64,
        now: Instant,
    ) {
        let expires_at = expiry(ttl_seconds, now);
        let key = match self.keys {
            RawKeys::Plain => key,
            RawKeys::Encoded => encode_bytes(&key),
        };
        self.cf_mut(cf).insert(key, Entry { value, expires_at });
    }

    /// Removes `key`.
    pub(crate) fn delete(&mut self, cf: &'static str, key: &[u8]) {
        let stored = self.keys.stored(key);
        self.cf_mut(cf).remove(stored.as_ref());
    }

    /// Removes every key in `[start, end)` (an empty `end` is unbounded).
    pub(crate) fn delete_range(&mut self, cf: &'static str, start: &[u8], end: &[u8]) {
        let (start, end) = (self.keys.stored_bound(start), self.keys.stored_bound(end));
        let map = self.cf_mut(cf);
        let doomed: Vec<Vec<u8>> = map
            .range::<[u8], _>(range_bounds(&start, &end))
            .map(|(k, _)| k.clone())
            .collect();
        for key in doomed {
            map.remove(&key);
        }
    }

    /// Live pairs with stored keys in `[low, high)` (bounds in the stored
    /// form, [`RawKeys::stored_bound`]; an empty `high` is unbounded),
    /// ascending, or descending when `reverse`; at most `limit` (0 means no
    /// limit). The keys come back as the client sent them.
    pub(crate) fn scan(
        &self,
        cf: &'static str,
        low: &[u8],
        high: &[u8],
        limit: usize,
        reverse: bool,
        now: Instant,
    ) -> Vec<(Vec<u8>, Vec<u8>)> {
        let Some(map) = self.cf(cf) else {
            return Vec::new();
        };
        if !high.is_empty() && low >= high {
            return Vec::new();
        }
        let limit = if limit == 0 { usize::MAX } else { limit };
        let range = map.range::<[u8], _>(range_bounds(low, high));
        let keys = self.keys;
        let live = |(k, e): (&Vec<u8>, &Entry)| {
            e.live(now).then(|| (keys.user(k.clone()), e.value.clone()))
        };
        if reverse {
            range.rev().filter_map(live).take(limit).collect()
        } else {
            range.filter_map(live).take(limit).collect()
        }
    }

    /// Atomic compare-and-swap: stores `value` when the current value is
    /// `expected` (None: the key must be absent). Returns whether it swapped
    /// and the previous live value.
    pub(crate) fn compare_and_swap(
        &mut self,
        cf: &'static str,
        key: Vec<u8>,
        expected: Option<&[u8]>,
        value: Vec<u8>,
        ttl_seconds: u64,
        now: Instant,
    ) -> (bool, Option<Vec<u8>>) {
        let previous = self.get(cf, &key, now);
        let matches = previous.as_deref() == expected;
        if matches {
            self.put(cf, key, value, ttl_seconds, now);
        }
        (matches, previous)
    }

    /// Moves every key stored below `split_key` (a Region boundary as PD
    /// holds it) into a new `RegionData`, which is returned; keys at or
    /// above it stay.
    pub(crate) fn split_off_below(&mut self, split_key: &[u8]) -> RegionData {
        let mut below = RegionData::new(self.keys);
        for (cf, map) in self.cfs.iter_mut() {
            let upper = map.split_off(split_key);
            let lower = std::mem::replace(map, upper);
            below.cfs.insert(cf, lower);
        }
        below
    }

    /// Takes in the data of an adjacent Region merging into this one.
    pub(crate) fn absorb(&mut self, other: RegionData) {
        for (cf, map) in other.cfs {
            self.cfs.entry(cf).or_default().extend(map);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn ttl_expires_and_rounds_up() {
        let mut data = RegionData::default();
        let now = Instant::now();
        data.put("default", b"k".to_vec(), b"v".to_vec(), 10, now);
        assert_eq!(data.ttl("default", b"k", now), Some(10));
        tokio::time::advance(Duration::from_millis(9_500)).await;
        let now = Instant::now();
        assert_eq!(data.ttl("default", b"k", now), Some(1));
        assert_eq!(data.get("default", b"k", now), Some(b"v".to_vec()));
        tokio::time::advance(Duration::from_millis(500)).await;
        let now = Instant::now();
        assert_eq!(data.get("default", b"k", now), None);
        assert_eq!(data.ttl("default", b"k", now), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_huge_ttl_saturates_instead_of_overflowing() {
        let mut data = RegionData::default();
        let now = Instant::now();
        data.put("default", b"k".to_vec(), b"v".to_vec(), u64::MAX, now);
        assert_eq!(data.get("default", b"k", now), Some(b"v".to_vec()));
        assert_eq!(data.ttl("default", b"k", now), Some(MAX_TTL_SECONDS));
    }

    #[tokio::test(start_paused = true)]
    async fn scan_limit_reverse_and_split() {
        let mut data = RegionData::default();
        let now = Instant::now();
        for k in [b"a", b"b", b"c", b"d"] {
            data.put("default", k.to_vec(), k.to_vec(), 0, now);
        }
        let keys = |v: Vec<(Vec<u8>, Vec<u8>)>| v.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        assert_eq!(
            keys(data.scan("default", b"b", b"", 2, false, now)),
            vec![b"b".to_vec(), b"c".to_vec()]
        );
        assert_eq!(
            keys(data.scan("default", b"a", b"d", 0, true, now)),
            vec![b"c".to_vec(), b"b".to_vec(), b"a".to_vec()]
        );
        let below = data.split_off_below(b"c");
        assert_eq!(
            keys(below.scan("default", b"", b"", 0, false, now)).len(),
            2
        );
        assert_eq!(
            keys(data.scan("default", b"", b"", 0, false, now)),
            vec![b"c".to_vec(), b"d".to_vec()]
        );
        assert!(column_family("nope").is_err());
        assert_eq!(column_family(""), Ok("default"));
    }

    /// API v2: keys are stored encoded, so a split at an encoded boundary
    /// moves exactly the keys whose encoding lies below it, although
    /// compared as sent `m`, `m\0` and `l\xff` all lie below the boundary
    /// `m\0\0\0\0\0\0\0\xf8` (encode_bytes("m")); keys come back as sent.
    #[tokio::test(start_paused = true)]
    async fn encoded_keys_split_scan_and_delete_by_their_encoding() {
        let mut data = RegionData::new(RawKeys::Encoded);
        let now = Instant::now();
        for k in [&b"l\xff"[..], b"m", b"m\0", b"n"] {
            data.put("default", k.to_vec(), k.to_vec(), 0, now);
        }
        assert_eq!(data.get("default", b"m", now), Some(b"m".to_vec()));
        let keys = |v: Vec<(Vec<u8>, Vec<u8>)>| v.into_iter().map(|(k, _)| k).collect::<Vec<_>>();
        let below = data.split_off_below(&encode_bytes(b"m"));
        assert_eq!(below.keys(), RawKeys::Encoded);
        assert_eq!(
            keys(below.scan("default", b"", b"", 0, false, now)),
            vec![b"l\xff".to_vec()]
        );
        let stored = |k: &[u8]| RawKeys::Encoded.stored_bound(k).into_owned();
        assert_eq!(
            keys(data.scan("default", &stored(b"m"), b"", 2, true, now)),
            vec![b"n".to_vec(), b"m\0".to_vec()]
        );
        data.delete_range("default", b"m\0", b"");
        assert_eq!(
            keys(data.scan("default", b"", b"", 0, false, now)),
            vec![b"m".to_vec()]
        );
        assert_eq!(RawKeys::of(ApiVersion::V1), RawKeys::Plain);
        assert_eq!(RawKeys::Plain.stored(b"m"), &b"m"[..]);
    }
}
