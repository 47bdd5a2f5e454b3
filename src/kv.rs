//! Keys, values and ranges as callers pass them: [`Key`], [`Value`],
//! [`KvPair`], [`BoundRange`] and [`ColumnFamily`].

use std::borrow::Borrow;
use std::fmt;
use std::ops::{
    Bound, Range, RangeBounds, RangeFrom, RangeFull, RangeInclusive, RangeTo, RangeToInclusive,
};

use crate::proto::kvrpcpb;

use crate::Failure;
use crate::{Error, Result};

/// A value: raw bytes.
pub type Value = Vec<u8>;

/// A key: raw bytes, ordered lexicographically. Converts from `Vec<u8>`,
/// `String` and `&'static str`; a `&Vec<u8>` is viewed as a `&Key` without
/// a copy.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash, ref_cast::RefCast)]
#[repr(transparent)]
pub struct Key(Vec<u8>);

impl Key {
    /// The empty key: the start of the key space, or as an end bound, its end.
    pub const EMPTY: Key = Key(Vec::new());

    /// True for the empty key.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The key's length in bytes.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The key in TiKV's memcomparable encoding ([`codec`](crate::codec)):
    /// how a transactional key is stored, and how PD reports the Region
    /// boundaries of a transactional cluster.
    ///
    /// ```
    /// let key = tikv_plan::Key::from("abc");
    /// assert_eq!(Vec::<u8>::from(key.to_encoded()), b"abc\0\0\0\0\0\xfa".to_vec());
    /// ```
    #[must_use]
    pub fn to_encoded(&self) -> Key {
        Key(crate::codec::encode_bytes(&self.0))
    }

    /// The key's bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.0
    }

    /// The smallest key greater than this one: this key followed by a zero
    /// byte.
    pub fn next_key(&self) -> Key {
        let mut bytes = Vec::with_capacity(self.0.len() + 1);
        bytes.extend_from_slice(&self.0);
        bytes.push(0);
        Key(bytes)
    }
}

impl From<Vec<u8>> for Key {
    fn from(v: Vec<u8>) -> Self {
        Key(v)
    }
}

impl From<String> for Key {
    fn from(s: String) -> Self {
        Key(s.into_bytes())
    }
}

impl From<&'static str> for Key {
    fn from(s: &'static str) -> Self {
        Key(s.as_bytes().to_vec())
    }
}

impl From<Key> for Vec<u8> {
    fn from(k: Key) -> Self {
        k.0
    }
}

impl AsRef<Key> for Key {
    fn as_ref(&self) -> &Key {
        self
    }
}

impl AsRef<Key> for Vec<u8> {
    fn as_ref(&self) -> &Key {
        <Key as ref_cast::RefCast>::ref_cast(self)
    }
}

impl<'a> From<&'a Vec<u8>> for &'a Key {
    fn from(bytes: &'a Vec<u8>) -> Self {
        <Key as ref_cast::RefCast>::ref_cast(bytes)
    }
}

impl<'a> From<&'a Key> for &'a [u8] {
    fn from(key: &'a Key) -> Self {
        &key.0
    }
}

impl AsRef<[u8]> for Key {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Bytes as upper-case hex, two digits a byte, no prefix: how client-rust
/// prints keys (and values that are not UTF-8) in `Debug`.
struct UpperHex<'a>(&'a [u8]);

impl fmt::Display for UpperHex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.iter().try_for_each(|b| write!(f, "{b:02X}"))
    }
}

/// `Key(6B31)`: the bytes in upper-case hex, as client-rust prints a key, so
/// logs and snapshot tests read the same with either crate.
impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", UpperHex(&self.0))
    }
}

/// A key and its value.
#[derive(Clone, Default, PartialEq, Eq, Hash)]
pub struct KvPair(pub Key, pub Value);

/// `KvPair(6B31, "v1")`: the key in upper-case hex, the value as quoted text
/// when it is UTF-8 and in hex otherwise, as client-rust prints a pair.
impl fmt::Debug for KvPair {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let KvPair(key, value) = self;
        match std::str::from_utf8(value) {
            Ok(text) => write!(f, "KvPair({}, {text:?})", UpperHex(&key.0)),
            Err(_) => write!(f, "KvPair({}, {})", UpperHex(&key.0), UpperHex(value)),
        }
    }
}

impl KvPair {
    /// Pairs a key with a value.
    pub fn new(key: impl Into<Key>, value: impl Into<Value>) -> Self {
        KvPair(key.into(), value.into())
    }

    /// The key.
    pub fn key(&self) -> &Key {
        &self.0
    }

    /// The value.
    pub fn value(&self) -> &Value {
        &self.1
    }

    /// The key, consuming the pair.
    pub fn into_key(self) -> Key {
        self.0
    }

    /// The value, consuming the pair.
    pub fn into_value(self) -> Value {
        self.1
    }

    /// The key, mutably.
    pub fn key_mut(&mut self) -> &mut Key {
        &mut self.0
    }

    /// The value, mutably.
    pub fn value_mut(&mut self) -> &mut Value {
        &mut self.1
    }

    /// Replaces the key.
    pub fn set_key(&mut self, key: impl Into<Key>) {
        self.0 = key.into();
    }

    /// Replaces the value.
    pub fn set_value(&mut self, value: impl Into<Value>) {
        self.1 = value.into();
    }
}

impl<K: Into<Key>, V: Into<Value>> From<(K, V)> for KvPair {
    fn from((k, v): (K, V)) -> Self {
        KvPair(k.into(), v.into())
    }
}

impl From<KvPair> for Key {
    fn from(pair: KvPair) -> Self {
        pair.0
    }
}

impl AsRef<Key> for KvPair {
    fn as_ref(&self) -> &Key {
        &self.0
    }
}

impl AsRef<Value> for KvPair {
    fn as_ref(&self) -> &Value {
        &self.1
    }
}

impl From<kvrpcpb::KvPair> for KvPair {
    fn from(pair: kvrpcpb::KvPair) -> Self {
        KvPair(Key::from(pair.key), pair.value)
    }
}

impl From<KvPair> for kvrpcpb::KvPair {
    fn from(pair: KvPair) -> Self {
        kvrpcpb::KvPair {
            key: pair.0.into(),
            value: pair.1,
            ..Default::default()
        }
    }
}

impl From<KvPair> for (Key, Value) {
    fn from(p: KvPair) -> Self {
        (p.0, p.1)
    }
}

/// A range of keys with any kind of bounds. Converts from Rust's range
/// syntax over anything that converts into a [`Key`]: `"a".."c"`,
/// `"a"..="c"`, `"a"..`, `.."c"`, `..`, or a pair of `Bound`s.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BoundRange {
    /// The start bound.
    pub from: Bound<Key>,
    /// The end bound.
    pub to: Bound<Key>,
}

impl BoundRange {
    /// A range from two bounds.
    pub fn new(from: Bound<Key>, to: Bound<Key>) -> Self {
        BoundRange { from, to }
    }

    /// The whole key space.
    pub fn range_full() -> Self {
        BoundRange::new(Bound::Unbounded, Bound::Unbounded)
    }

    /// A range from `from` to the end of the key space.
    pub fn range_from(from: Key) -> Self {
        BoundRange::new(Bound::Included(from), Bound::Unbounded)
    }

    /// The range as client-rust gives it: the inclusive start and the
    /// exclusive end, `None` (or an empty key) meaning "to the end of the key
    /// space". As in client-rust, `"a"..""` therefore reaches the end.
    pub fn into_keys(self) -> (Key, Option<Key>) {
        let start = match self.from {
            Bound::Included(k) => k,
            Bound::Excluded(k) => k.next_key(),
            Bound::Unbounded => Key::EMPTY,
        };
        let end = match self.to {
            Bound::Included(k) => Some(k.next_key()),
            Bound::Excluded(k) => Some(k),
            Bound::Unbounded => None,
        };
        (start, end)
    }

    /// The range as `[start, end)` on the wire, where an empty `end` means
    /// "to the end of the key space". Fails when the start lies after a
    /// bounded end.
    pub fn into_key_range(self) -> Result<(Key, Key)> {
        let (start, end) = self.into_keys();
        let end = end.unwrap_or_default();
        if !end.is_empty() && start > end {
            return Err(Error::from(Failure::InvalidArgument(format!(
                "the range starts at {start:?}, after its end {end:?}; swap the bounds"
            ))));
        }
        Ok((start, end))
    }
}

impl<T: Into<Key>> From<Range<T>> for BoundRange {
    fn from(r: Range<T>) -> Self {
        BoundRange::new(
            Bound::Included(r.start.into()),
            Bound::Excluded(r.end.into()),
        )
    }
}

impl<T: Into<Key>> From<RangeInclusive<T>> for BoundRange {
    fn from(r: RangeInclusive<T>) -> Self {
        let (start, end) = r.into_inner();
        BoundRange::new(Bound::Included(start.into()), Bound::Included(end.into()))
    }
}

impl<T: Into<Key>> From<RangeFrom<T>> for BoundRange {
    fn from(r: RangeFrom<T>) -> Self {
        BoundRange::new(Bound::Included(r.start.into()), Bound::Unbounded)
    }
}

impl<T: Into<Key>> From<RangeTo<T>> for BoundRange {
    fn from(r: RangeTo<T>) -> Self {
        BoundRange::new(Bound::Unbounded, Bound::Excluded(r.end.into()))
    }
}

impl<T: Into<Key>> From<RangeToInclusive<T>> for BoundRange {
    fn from(r: RangeToInclusive<T>) -> Self {
        BoundRange::new(Bound::Unbounded, Bound::Included(r.end.into()))
    }
}

impl From<RangeFull> for BoundRange {
    fn from(_: RangeFull) -> Self {
        BoundRange::range_full()
    }
}

impl<T: Into<Key>> From<(Bound<T>, Bound<T>)> for BoundRange {
    fn from((from, to): (Bound<T>, Bound<T>)) -> Self {
        fn map<T: Into<Key>>(b: Bound<T>) -> Bound<Key> {
            match b {
                Bound::Included(k) => Bound::Included(k.into()),
                Bound::Excluded(k) => Bound::Excluded(k.into()),
                Bound::Unbounded => Bound::Unbounded,
            }
        }
        BoundRange::new(map(from), map(to))
    }
}

/// Compares bound by bound with a pair of bounds over anything that
/// converts into a key (client-rust's comparison, so
/// `range == (Included("a"), Unbounded)` reads as it does there).
impl<T: Into<Key> + Clone> PartialEq<(Bound<T>, Bound<T>)> for BoundRange {
    fn eq(&self, other: &(Bound<T>, Bound<T>)) -> bool {
        fn same<T: Into<Key> + Clone>(mine: &Bound<Key>, theirs: &Bound<T>) -> bool {
            match (mine, theirs) {
                (Bound::Included(a), Bound::Included(b))
                | (Bound::Excluded(a), Bound::Excluded(b)) => *a == b.clone().into(),
                (Bound::Unbounded, Bound::Unbounded) => true,
                _ => false,
            }
        }
        same(&self.from, &other.0) && same(&self.to, &other.1)
    }
}

impl<T: Into<Key>> From<(T, Option<T>)> for BoundRange {
    /// `(start, Some(end))` is `[start, end)`; `(start, None)` is `[start, ..)`.
    fn from((start, end): (T, Option<T>)) -> Self {
        let to = match end {
            Some(end) => Bound::Excluded(end.into()),
            None => Bound::Unbounded,
        };
        BoundRange::new(Bound::Included(start.into()), to)
    }
}

impl<T: Into<Key>> From<(T, T)> for BoundRange {
    /// `(start, end)` is `[start, end)`.
    fn from((start, end): (T, T)) -> Self {
        BoundRange::new(Bound::Included(start.into()), Bound::Excluded(end.into()))
    }
}

/// A TiKV column family. Raw requests use `default` unless told otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ColumnFamily {
    /// The `default` column family.
    #[default]
    Default,
    /// The `lock` column family.
    Lock,
    /// The `write` column family.
    Write,
}

impl ColumnFamily {
    /// The name TiKV uses on the wire.
    pub fn as_str(&self) -> &'static str {
        match self {
            ColumnFamily::Default => "default",
            ColumnFamily::Lock => "lock",
            ColumnFamily::Write => "write",
        }
    }

    /// The request field for this column family, without allocating for
    /// the default one: TiKV reads an empty `cf` as `default`, so the
    /// default is sent as `None` (an empty string, which needs no buffer).
    pub fn request_field(cf: Option<ColumnFamily>) -> Option<String> {
        match cf {
            None | Some(ColumnFamily::Default) => None,
            Some(cf) => Some(cf.as_str().to_owned()),
        }
    }
}

impl fmt::Display for ColumnFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl TryFrom<&str> for ColumnFamily {
    type Error = Error;

    fn try_from(name: &str) -> Result<Self> {
        match name {
            "default" => Ok(ColumnFamily::Default),
            "lock" => Ok(ColumnFamily::Lock),
            "write" => Ok(ColumnFamily::Write),
            other => Err(Error::ColumnFamilyError(other.to_owned())),
        }
    }
}

impl TryFrom<String> for ColumnFamily {
    type Error = Error;

    fn try_from(name: String) -> Result<Self> {
        ColumnFamily::try_from(name.as_str())
    }
}

/// Turns a range of borrowed keys (`&str`, `&[u8]`, …) into a
/// [`BoundRange`] of owned ones, as client-rust's `IntoOwnedRange` does:
/// `("a"..="c").into_owned()`.
pub trait IntoOwnedRange {
    /// The owned range.
    fn into_owned(self) -> BoundRange;
}

impl<T: Into<Key> + Borrow<U>, U: ToOwned<Owned = T> + ?Sized> IntoOwnedRange for Range<&U> {
    fn into_owned(self) -> BoundRange {
        (self.start.to_owned()..self.end.to_owned()).into()
    }
}

impl<T: Into<Key> + Borrow<U>, U: ToOwned<Owned = T> + ?Sized> IntoOwnedRange
    for RangeInclusive<&U>
{
    fn into_owned(self) -> BoundRange {
        let (start, end) = self.into_inner();
        (start.to_owned()..=end.to_owned()).into()
    }
}

impl<T: Into<Key> + Borrow<U>, U: ToOwned<Owned = T> + ?Sized> IntoOwnedRange for RangeFrom<&U> {
    fn into_owned(self) -> BoundRange {
        (self.start.to_owned()..).into()
    }
}

impl<T: Into<Key> + Borrow<U>, U: ToOwned<Owned = T> + ?Sized> IntoOwnedRange for RangeTo<&U> {
    fn into_owned(self) -> BoundRange {
        (..self.end.to_owned()).into()
    }
}

impl<T: Into<Key> + Borrow<U>, U: ToOwned<Owned = T> + ?Sized> IntoOwnedRange
    for RangeToInclusive<&U>
{
    fn into_owned(self) -> BoundRange {
        (..=self.end.to_owned()).into()
    }
}

impl IntoOwnedRange for RangeFull {
    fn into_owned(self) -> BoundRange {
        BoundRange::range_full()
    }
}

impl<T: Into<Key> + Borrow<U>, U: ToOwned<Owned = T> + ?Sized> IntoOwnedRange for (&U, &U) {
    fn into_owned(self) -> BoundRange {
        (self.0.to_owned(), self.1.to_owned()).into()
    }
}

impl<T: Into<Key> + Borrow<U>, U: ToOwned<Owned = T> + ?Sized> IntoOwnedRange for (&U, Option<&U>) {
    fn into_owned(self) -> BoundRange {
        (self.0.to_owned(), self.1.map(ToOwned::to_owned)).into()
    }
}

impl RangeBounds<Key> for BoundRange {
    fn start_bound(&self) -> Bound<&Key> {
        self.from.as_ref()
    }

    fn end_bound(&self) -> Bound<&Key> {
        self.to.as_ref()
    }
}

impl From<BoundRange> for kvrpcpb::KeyRange {
    fn from(range: BoundRange) -> Self {
        let (start, end) = range.into_keys();
        kvrpcpb::KeyRange {
            start_key: start.into(),
            end_key: end.unwrap_or_default().into(),
        }
    }
}

impl From<kvrpcpb::KeyRange> for BoundRange {
    fn from(range: kvrpcpb::KeyRange) -> Self {
        let end = if range.end_key.is_empty() {
            Bound::Unbounded
        } else {
            Bound::Excluded(Key::from(range.end_key))
        };
        BoundRange::new(Bound::Included(Key::from(range.start_key)), end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(r: impl Into<BoundRange>) -> Result<(Vec<u8>, Vec<u8>)> {
        r.into().into_key_range().map(|(s, e)| (s.into(), e.into()))
    }

    #[test]
    fn ranges_become_half_open_key_pairs() {
        assert_eq!(keys("a".."c").unwrap(), (b"a".to_vec(), b"c".to_vec()));
        assert_eq!(keys("a"..="c").unwrap(), (b"a".to_vec(), b"c\0".to_vec()));
        assert_eq!(keys("a"..).unwrap(), (b"a".to_vec(), vec![]));
        assert_eq!(keys(.."c").unwrap(), (vec![], b"c".to_vec()));
        assert_eq!(keys(..="c").unwrap(), (vec![], b"c\0".to_vec()));
        assert_eq!(keys(..).unwrap(), (vec![], vec![]));
        assert_eq!(keys(("a", "c")).unwrap(), (b"a".to_vec(), b"c".to_vec()));
        assert_eq!(keys(("a", None)).unwrap(), (b"a".to_vec(), vec![]));
        assert_eq!(
            keys(("a", Some("c"))).unwrap(),
            (b"a".to_vec(), b"c".to_vec())
        );
        let excl: BoundRange = (Bound::Excluded("a"), Bound::Unbounded).into();
        assert_eq!(excl.into_keys().0.as_bytes(), b"a\0");
    }

    #[test]
    fn inverted_range_is_an_invalid_argument() {
        let err = keys("z".."a").unwrap_err();
        assert!(matches!(err.failure(), Some(Failure::InvalidArgument(_))));
        assert!(err.to_string().contains("swap the bounds"), "{err}");
    }

    #[test]
    fn empty_exclusive_end_reaches_the_end_as_in_client_rust() {
        assert_eq!(keys("a".."").unwrap(), (b"a".to_vec(), vec![]));
        assert_eq!(keys("".."").unwrap(), (vec![], vec![]));
        let (start, end) = BoundRange::from("a".."").into_keys();
        assert_eq!((start, end), (Key::from("a"), Some(Key::EMPTY)));
        assert_eq!(BoundRange::from("a"..).into_keys().1, None);
    }

    #[test]
    fn owned_ranges_and_pair_views() {
        let (start, end) = ("k1"..="k2").into_owned().into_keys();
        assert_eq!(start, Key::from("k1"));
        assert_eq!(end, Some(Key::from(b"k2\0".to_vec())));
        let owned: BoundRange = (..).into_owned();
        assert_eq!(owned, BoundRange::range_full());
        let pair = KvPair::new("k", "v");
        let key: &Key = pair.as_ref();
        assert_eq!(key.len(), 1);
        assert_eq!(Key::from(pair.clone()), Key::from("k"));
        assert!(ColumnFamily::try_from("lock".to_owned()).is_ok());
        assert!(matches!(
            ColumnFamily::try_from("x".to_owned()),
            Err(Error::ColumnFamilyError(_))
        ));
    }

    #[test]
    fn column_family_names_round_trip() {
        for cf in [
            ColumnFamily::Default,
            ColumnFamily::Lock,
            ColumnFamily::Write,
        ] {
            assert_eq!(ColumnFamily::try_from(cf.as_str()).unwrap(), cf);
        }
        assert!(ColumnFamily::try_from("nope").is_err());
        // The default column family costs no string on a request.
        assert_eq!(ColumnFamily::request_field(None), None);
        assert_eq!(
            ColumnFamily::request_field(Some(ColumnFamily::Default)),
            None
        );
        assert_eq!(
            ColumnFamily::request_field(Some(ColumnFamily::Lock)).as_deref(),
            Some("lock")
        );
    }

    #[test]
    fn key_conversions_and_debug() {
        let k: Key = "ab".into();
        assert_eq!(k.as_bytes(), b"ab");
        // client-rust's formats: upper-case hex keys; values as quoted text
        // when UTF-8, else hex.
        assert_eq!(format!("{k:?}"), "Key(6162)");
        assert_eq!(format!("{:?}", Key::from(vec![0u8, 255])), "Key(00FF)");
        assert_eq!(format!("{:?}", Key::from(Vec::<u8>::new())), "Key()");
        let pair = KvPair::new("k1", "v\"1");
        assert_eq!(format!("{pair:?}"), "KvPair(6B31, \"v\\\"1\")");
        let binary = KvPair::new(vec![1u8], vec![0xffu8, 0]);
        assert_eq!(format!("{binary:?}"), "KvPair(01, FF00)");
        let p: KvPair = ("k", "v".to_owned()).into();
        assert_eq!(p.key().as_bytes(), b"k");
        assert_eq!(p.value(), b"v");
    }
}
