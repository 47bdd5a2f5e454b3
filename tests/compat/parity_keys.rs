//! tikv-client 0.4.0's key conversions, used as a client-rust program uses
//! them: `&Vec<u8>` viewed as `&Key`, `Key::to_encoded`, a `BoundRange`
//! compared with a pair of bounds, and a `Mutation` put into a keyspace.

use std::ops::Bound;

use tikv_plan::codec::encode_bytes;
use tikv_plan::request::{EncodeKeyspace, KeyMode, Keyspace};
use tikv_plan::transaction::Mutation;
use tikv_plan::{BoundRange, Key};

fn length_of(key: impl AsRef<Key>) -> usize {
    key.as_ref().len()
}

#[test]
fn a_byte_vector_is_viewed_as_a_key_without_a_copy() {
    let bytes = b"account-7".to_vec();
    let key: &Key = (&bytes).into();
    assert_eq!(key, &Key::from("account-7"));
    // The view is the vector's own buffer.
    assert_eq!(<&[u8]>::from(key).as_ptr(), bytes.as_ptr());
    assert_eq!(length_of(bytes.clone()), 9);
    assert_eq!(length_of(Key::from(bytes)), 9);
}

#[test]
fn to_encoded_is_the_memcomparable_encoding() {
    for raw in [&b""[..], b"a", b"12345678", b"\xff\x00key"] {
        let key = Key::from(raw.to_vec());
        assert_eq!(Vec::<u8>::from(key.to_encoded()), encode_bytes(raw));
    }
    // Encoded keys keep the order of the keys.
    let (a, b) = (Key::from("ab"), Key::from("abc"));
    assert!(a < b && a.to_encoded() < b.to_encoded());
}

#[test]
fn a_bound_range_equals_the_bounds_it_was_made_of() {
    let range = BoundRange::from("a".."c");
    assert!(range == (Bound::Included("a"), Bound::Excluded("c")));
    assert!(range != (Bound::Included("a"), Bound::Included("c")));
    let from: BoundRange = ("k".to_owned()..).into();
    assert!(from == (Bound::Included("k".to_owned()), Bound::Unbounded));
}

#[test]
fn a_mutation_in_a_keyspace_gets_the_prefix_on_its_key_only() {
    let keyspace = Keyspace::Enable {
        keyspace_id: 0x01_02_03,
    };
    let put = Mutation::Put(Key::from("k"), b"v".to_vec());
    match put.encode_keyspace(keyspace, KeyMode::Txn) {
        Mutation::Put(key, value) => {
            assert_eq!(Vec::<u8>::from(key), b"x\x01\x02\x03k".to_vec());
            assert_eq!(value, b"v".to_vec());
        }
        other => panic!("a put stays a put: {other:?}"),
    }
    let delete = Mutation::Delete(Key::from("k"));
    match delete.clone().encode_keyspace(keyspace, KeyMode::Raw) {
        Mutation::Delete(key) => assert_eq!(Vec::<u8>::from(key), b"r\x01\x02\x03k".to_vec()),
        other => panic!("a delete stays a delete: {other:?}"),
    }
    assert_eq!(
        delete
            .clone()
            .encode_keyspace(Keyspace::Disable, KeyMode::Txn),
        delete
    );
}
