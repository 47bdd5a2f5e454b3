//! Keyspaces (API v2) end to end against the simulated cluster: the
//! keyspace is loaded from PD by name, keys travel with TiKV's API v2 prefix
//! and come back without it, every request says V2 and its keyspace id, two
//! keyspaces never see each other's keys, and a client in the wrong API
//! version is refused by the store.

use std::sync::Arc;

use tikv_plan::pd::PdRpcClient;
use tikv_plan::proto::kvrpcpb::ApiVersion;
use tikv_plan::request::{EncodeKeyspace, KeyMode, Keyspace};
use tikv_plan::{Config, Error, Key, RawClient};
use tikv_sim::{keyspace_split_keys, KeyspaceMode, SimCluster};

/// An API v2 cluster with keyspaces `a` (id 1) and `b` (id 2) and Regions
/// split inside `a` (at its raw key `m`) and between the keyspaces, at
/// encoded keys as TiKV splits API v2 raw keys.
async fn v2_cluster() -> SimCluster {
    let mut split = keyspace_split_keys(1, KeyspaceMode::Raw, ["m"]);
    split.extend(keyspace_split_keys(2, KeyspaceMode::Raw, [""]));
    SimCluster::builder()
        .stores(3)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .keyspace("b", 2)
        .split_keys(split)
        .start()
        .await
        .unwrap()
}

async fn client_in(cluster: &SimCluster, keyspace: &str) -> RawClient {
    RawClient::new_with_config(
        cluster.pd_endpoints(),
        Config::default().with_keyspace(keyspace),
    )
    .await
    .unwrap()
}

fn keys_of(pairs: &[tikv_plan::KvPair]) -> Vec<Vec<u8>> {
    pairs.iter().map(|p| p.key().as_bytes().to_vec()).collect()
}

#[tokio::test]
async fn keys_are_stored_with_the_api_v2_prefix_and_returned_without_it() {
    let cluster = v2_cluster().await;
    let a = client_in(&cluster, "a").await;
    assert_eq!(a.keyspace(), Keyspace::Enable { keyspace_id: 1 });
    a.put("k", "v").await.unwrap();
    // TiKV's form: 'r', then the id in three big-endian bytes, then the key.
    assert_eq!(cluster.value_of(b"r\0\0\x01k"), Some(b"v".to_vec()));
    assert_eq!(cluster.value_of(b"k"), None);
    assert_eq!(a.get("k").await.unwrap(), Some(b"v".to_vec()));
    let scanned = a.scan(.., 10).await.unwrap();
    assert_eq!(keys_of(&scanned), [b"k".to_vec()]);
    let keys = a.scan_keys_reverse(.., 10).await.unwrap();
    assert_eq!(keys, [Key::from("k")]);
    let got = a.batch_get(vec!["k", "missing"]).await.unwrap();
    assert_eq!(keys_of(&got), [b"k".to_vec()]);
    // The stores run API v2 and refuse anything else (see below), so every
    // request above said V2.
    cluster.shutdown().await;
}

#[tokio::test]
async fn two_keyspaces_never_see_each_others_keys() {
    let cluster = v2_cluster().await;
    let a = client_in(&cluster, "a").await;
    let b = client_in(&cluster, "b").await;
    a.batch_put(vec![("x", "from-a"), ("z", "from-a"), ("n", "from-a")])
        .await
        .unwrap();
    b.batch_put(vec![("x", "from-b"), ("y", "from-b")])
        .await
        .unwrap();
    assert_eq!(a.get("x").await.unwrap(), Some(b"from-a".to_vec()));
    assert_eq!(b.get("x").await.unwrap(), Some(b"from-b".to_vec()));
    assert_eq!(b.get("z").await.unwrap(), None);
    // Unbounded scans stop at the keyspace's end, across Regions.
    assert_eq!(
        keys_of(&a.scan(.., 100).await.unwrap()),
        [b"n".to_vec(), b"x".to_vec(), b"z".to_vec()]
    );
    assert_eq!(
        keys_of(&b.scan_reverse(.., 100).await.unwrap()),
        [b"y".to_vec(), b"x".to_vec()]
    );
    let batch = b.batch_scan(vec![.."y"], 10).await;
    assert_eq!(keys_of(&batch.unwrap()), [b"x".to_vec()]);
    // Deleting "everything" in b leaves a whole.
    b.delete_range(..).await.unwrap();
    assert!(b.scan(.., 100).await.unwrap().is_empty());
    assert_eq!(a.scan(.., 100).await.unwrap().len(), 3);
    // Checksums are per keyspace too.
    assert_eq!(b.checksum(..).await.unwrap().total_kvs, 0);
    assert_eq!(a.checksum(..).await.unwrap().total_kvs, 3);
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_default_keyspace_and_unknown_names() {
    let cluster = v2_cluster().await;
    let client = RawClient::new_with_config(
        cluster.pd_endpoints(),
        Config::default().with_default_keyspace(),
    )
    .await
    .unwrap();
    assert_eq!(client.keyspace(), Keyspace::Enable { keyspace_id: 0 });
    client.put("k", "v").await.unwrap();
    assert_eq!(cluster.value_of(b"r\0\0\0k"), Some(b"v".to_vec()));
    let err = RawClient::new_with_config(
        cluster.pd_endpoints(),
        Config::default().with_keyspace("nope"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, Error::KeyspaceNotFound(ref name) if name == "nope"),
        "{err}"
    );
    assert!(err.to_string().contains("with_keyspace"), "{err}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_client_in_the_wrong_api_version_is_refused_by_the_store() {
    let v2 = v2_cluster().await;
    let v1_client = RawClient::new(v2.pd_endpoints()).await.unwrap();
    let err = v1_client.put("k", "v").await.unwrap_err();
    assert!(err.to_string().contains("ApiVersionNotMatched"), "{err}");
    assert!(matches!(err, Error::KvError { .. }), "{err}");
    v2.shutdown().await;

    let v1 = SimCluster::builder().stores(1).start().await.unwrap();
    let v2_client = client_in(&v1, "DEFAULT").await;
    let err = v2_client.put("k", "v").await.unwrap_err();
    assert!(err.to_string().contains("ApiVersionNotMatched"), "{err}");
    assert_eq!(v1.value_of(b"r\0\0\0k"), None);
    v1.shutdown().await;
}

#[tokio::test]
async fn a_keyspace_client_over_a_given_pd_client() {
    let cluster = v2_cluster().await;
    let pd = PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
        .await
        .unwrap();
    let client = RawClient::new_with_pd_client(Arc::new(pd), &Config::default())
        .with_keyspace(Keyspace::Enable { keyspace_id: 2 });
    client.put("k", "v").await.unwrap();
    let raw = Key::from("k").encode_keyspace(Keyspace::Enable { keyspace_id: 2 }, KeyMode::Raw);
    assert_eq!(cluster.value_of(raw.as_bytes()), Some(b"v".to_vec()));
    cluster.shutdown().await;
}

/// In a keyspace, the coprocessor's builder and its results see the ranges
/// as the caller wrote them; the plugin counts only the keyspace's keys.
#[tokio::test]
async fn coprocessor_ranges_come_without_the_keyspace_prefix() {
    let cluster = v2_cluster().await;
    let a = client_in(&cluster, "a").await;
    let b = client_in(&cluster, "b").await;
    for key in ["c", "d", "x"] {
        a.put(key, "v").await.unwrap();
        b.put(key, "v").await.unwrap();
    }
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let answers = a
        .coprocessor(tikv_sim::COPROCESSOR_PLUGIN, "1", [..], {
            let seen = Arc::clone(&seen);
            move |_, ranges| {
                seen.lock().unwrap().extend(ranges);
                b"n".to_vec()
            }
        })
        .await
        .unwrap();
    // Keyspace a's Regions split at its "m": two calls, three keys in all.
    let expected = [
        vec![Key::from("")..Key::from("m")],
        vec![Key::from("m")..Key::from("")],
    ];
    let ranges: Vec<_> = answers.iter().map(|(r, _)| r.clone()).collect();
    assert_eq!(ranges, expected);
    let data: Vec<&[u8]> = answers.iter().map(|(_, d)| &d[..]).collect();
    assert_eq!(data, [&b"n:2"[..], &b"n:1"[..]]);
    assert_eq!(*seen.lock().unwrap(), expected.concat());
    cluster.shutdown().await;
}

/// Keyspace `a`'s raw keys around two encoded boundaries, `abcd` (its
/// prefixed form fills one encoding group) and `m`, each key with the
/// Region it lives in (0: below `abcd`, 1: below `m`, 2: from `m` up).
/// Compared as sent, `abcd`, `abcd\xfe`, `m` and `m\0` all sort below the
/// boundary they sit at or above: a client routing them by their plain
/// bytes sends them one Region too low.
const AROUND_BOUNDARIES: [(&[u8], usize); 7] = [
    (b"abc", 0),
    (b"abcd", 1),
    (b"abcd\xfe", 1),
    (b"l\xff", 1),
    (b"m", 2),
    (b"m\0", 2),
    (b"z", 2),
];

/// Keyspace `a`'s raw key space split at `abcd` and `m`, and the last of
/// its Regions straddling into keyspace `b` up to `b`'s raw key `c`.
async fn encoded_raw_splits() -> SimCluster {
    let mut split = keyspace_split_keys(1, KeyspaceMode::Raw, ["abcd", "m"]);
    split.extend(keyspace_split_keys(2, KeyspaceMode::Raw, ["c"]));
    SimCluster::builder()
        .stores(3)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .keyspace("b", 2)
        .split_keys(split)
        .start()
        .await
        .unwrap()
}

/// No request of the cluster met `KeyNotInRegion` or `EpochNotMatch`.
fn assert_no_misroutes(cluster: &SimCluster) {
    for store in 1..=3 {
        let counters = cluster.counters(store);
        for outcome in [
            tikv_sim::Outcome::KeyNotInRegion,
            tikv_sim::Outcome::EpochNotMatch,
        ] {
            assert_eq!(
                counters.count_outcome(outcome),
                0,
                "store {store}: {:?}",
                counters.entries()
            );
        }
    }
}

/// API v2 raw keys route by their memcomparable encoding, as TiKV checks
/// them: with the keyspace split at encoded keys right next to the keys
/// used, every raw method reaches the right Region at once (no
/// `KeyNotInRegion`, no `EpochNotMatch`, no Region invalidated).
#[tokio::test]
async fn raw_keys_route_by_their_encoding_in_api_v2() {
    let cluster = encoded_raw_splits().await;
    let a = client_in(&cluster, "a").await;
    let regions = cluster.regions();
    let keys: Vec<&[u8]> = AROUND_BOUNDARIES.iter().map(|(k, _)| *k).collect();
    let owned = |keys: &[&[u8]]| keys.iter().map(|k| k.to_vec()).collect::<Vec<_>>();

    for (key, region) in AROUND_BOUNDARIES {
        a.put(key.to_vec(), key.to_vec()).await.unwrap();
        let stored = Key::from(key.to_vec())
            .encode_keyspace(Keyspace::Enable { keyspace_id: 1 }, KeyMode::Raw);
        let holder = cluster.region_for_key(&tikv_sim::codec::encode_bytes(stored.as_bytes()));
        assert_eq!(holder.map(|r| r.id), Some(regions[region].id), "{key:?}");
        assert_eq!(a.get(key.to_vec()).await.unwrap(), Some(key.to_vec()));
    }
    let got = a.batch_get(owned(&keys)).await.unwrap();
    assert_eq!(keys_of(&got), owned(&keys));
    a.batch_put(keys.iter().map(|k| (k.to_vec(), b"v".to_vec())))
        .await
        .unwrap();
    assert_eq!(a.get(b"abcd".to_vec()).await.unwrap(), Some(b"v".to_vec()));

    // Scans across the Regions, with limits, both ways.
    assert_eq!(keys_of(&a.scan(.., 100).await.unwrap()), owned(&keys));
    let from_abcd = a.scan(b"abcd".to_vec()..=b"m".to_vec(), 4).await.unwrap();
    assert_eq!(keys_of(&from_abcd), owned(&keys[1..5]));
    let top = a.scan_reverse(.., 4).await.unwrap();
    assert_eq!(keys_of(&top), owned(&[b"z", b"m\0", b"m", b"l\xff"]));
    let down_from_m = a.scan_reverse(..b"m\0".to_vec(), 3).await.unwrap();
    assert_eq!(keys_of(&down_from_m), owned(&[b"m", b"l\xff", b"abcd\xfe"]));
    let scanned = a
        .batch_scan(
            vec![b"abc".to_vec()..b"l".to_vec(), b"m".to_vec()..b"n".to_vec()],
            10,
        )
        .await
        .unwrap();
    assert_eq!(
        keys_of(&scanned),
        owned(&[b"abc", b"abcd", b"abcd\xfe", b"m", b"m\0"])
    );
    assert_eq!(a.checksum(..).await.unwrap().total_kvs, 7);
    let counted = a
        .coprocessor(tikv_sim::COPROCESSOR_PLUGIN, "1", [..], |_, _| {
            b"n".to_vec()
        })
        .await
        .unwrap();
    assert_eq!(
        counted,
        [
            (vec![Key::from("")..Key::from("abcd")], b"n:1".to_vec()),
            (vec![Key::from("abcd")..Key::from("m")], b"n:3".to_vec()),
            (vec![Key::from("m")..Key::from("")], b"n:3".to_vec()),
        ]
    );

    // TTL and compare-and-swap at the boundaries.
    a.put_with_ttl(b"abcd".to_vec(), b"t".to_vec(), 600)
        .await
        .unwrap();
    let ttl = a.get_key_ttl_secs(b"abcd".to_vec()).await.unwrap();
    assert!(ttl.is_some_and(|t| t > 0 && t <= 600), "{ttl:?}");
    let cas = a.with_atomic_for_cas();
    let (previous, swapped) = cas
        .compare_and_swap(b"m".to_vec(), Some(b"v".to_vec()), b"w".to_vec())
        .await
        .unwrap();
    assert_eq!((previous, swapped), (Some(b"v".to_vec()), true));
    assert_eq!(a.get(b"m".to_vec()).await.unwrap(), Some(b"w".to_vec()));

    // Deletes: one key, a batch across Regions, a range across Regions.
    a.delete(b"abcd".to_vec()).await.unwrap();
    a.batch_delete(vec![b"abc".to_vec(), b"m\0".to_vec()])
        .await
        .unwrap();
    a.delete_range(b"abcd\xfe".to_vec()..b"m\0".to_vec())
        .await
        .unwrap();
    assert_eq!(keys_of(&a.scan(.., 100).await.unwrap()), [b"z".to_vec()]);

    assert_no_misroutes(&cluster);
    assert_eq!(a.routing_stats().region_invalidations, 0);
    cluster.shutdown().await;
}

/// The Region that straddles keyspaces `a` and `b` is seen by each inside
/// its own keyspace (client-go's clamp), and an API v2 client that writes
/// the prefix itself routes by the encoding too.
#[tokio::test]
async fn a_region_straddling_keyspaces_serves_both() {
    let cluster = encoded_raw_splits().await;
    let a = client_in(&cluster, "a").await;
    let b = client_in(&cluster, "b").await;
    b.batch_put(vec![("a", "b1"), ("b", "b2"), ("c", "b3"), ("d", "b4")])
        .await
        .unwrap();
    a.put("z", "a1").await.unwrap();
    assert_eq!(keys_of(&b.scan(.., 10).await.unwrap()).len(), 4);
    assert_eq!(
        keys_of(&b.scan_reverse(..="c", 10).await.unwrap()),
        [b"c".to_vec(), b"b".to_vec(), b"a".to_vec()]
    );
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    b.coprocessor(tikv_sim::COPROCESSOR_PLUGIN, "1", [..], {
        let seen = Arc::clone(&seen);
        move |region, _| {
            seen.lock()
                .unwrap()
                .push((region.start_key, region.end_key));
            Vec::new()
        }
    })
    .await
    .unwrap();
    // The straddling Region, clamped to b's start, then b's own.
    assert_eq!(
        *seen.lock().unwrap(),
        [
            (b"r\0\0\x02".to_vec(), b"r\0\0\x02c".to_vec()),
            (b"r\0\0\x02c".to_vec(), b"r\0\0\x03".to_vec()),
        ]
    );

    let pd = PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
        .await
        .unwrap();
    let prefixed = RawClient::new_with_pd_client(Arc::new(pd), &Config::default())
        .with_keyspace(Keyspace::ApiV2NoPrefix);
    prefixed
        .put(b"r\0\0\x01m".to_vec(), b"across".to_vec())
        .await
        .unwrap();
    assert_eq!(a.get("m").await.unwrap(), Some(b"across".to_vec()));
    let pairs = prefixed
        .scan(b"r\0\0\x01abcd".to_vec()..b"r\0\0\x02b".to_vec(), 10)
        .await
        .unwrap();
    assert_eq!(
        keys_of(&pairs),
        [
            b"r\0\0\x01m".to_vec(),
            b"r\0\0\x01z".to_vec(),
            b"r\0\0\x02a".to_vec()
        ]
    );
    assert_no_misroutes(&cluster);
    cluster.shutdown().await;
}
