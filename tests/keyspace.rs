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
use tikv_sim::SimCluster;

/// An API v2 cluster with keyspaces `a` (id 1) and `b` (id 2) and Regions
/// split between the keyspaces' prefixes.
async fn v2_cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .keyspace("b", 2)
        .split_keys(vec![b"r\0\0\x01m".to_vec(), b"r\0\0\x02".to_vec()])
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
