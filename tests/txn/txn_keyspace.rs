//! Transactions in API v2 keyspaces against the simulated cluster: keys
//! travel with the transactional prefix (`x` + keyspace id), Regions split
//! at encoded prefixed keys are followed, results come back without the
//! prefix, and two keyspaces never see each other's keys.

use tikv_plan::codec::encode_bytes;
use tikv_plan::proto::kvrpcpb::ApiVersion;
use tikv_plan::request::Keyspace;
use tikv_plan::Failure;
use tikv_plan::{Config, Key, KvPair, TransactionClient, TransactionOptions};
use tikv_sim::SimCluster;

async fn client_in(cluster: &SimCluster, keyspace: &str) -> TransactionClient {
    TransactionClient::new_with_config(
        cluster.pd_endpoints(),
        Config::default().with_keyspace(keyspace),
    )
    .await
    .unwrap()
}

#[tokio::test]
async fn transactions_stay_in_their_keyspace() {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .keyspace("b", 2)
        .split_keys(vec![
            encode_bytes(b"x\0\0\x01m"),
            encode_bytes(b"x\0\0\x02"),
        ])
        .start()
        .await
        .unwrap();
    let a = client_in(&cluster, "a").await;
    let b = client_in(&cluster, "b").await;
    assert_eq!(a.keyspace(), Keyspace::Enable { keyspace_id: 1 });

    let mut txn = a.begin_optimistic().await.unwrap();
    txn.put("k".to_owned(), "in a".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "in a too".to_owned())
        .await
        .unwrap();
    txn.commit().await.unwrap();
    let mut txn = b
        .begin_with_options(TransactionOptions::new_pessimistic())
        .await
        .unwrap();
    txn.put("k".to_owned(), "in b".to_owned()).await.unwrap();
    txn.commit().await.unwrap();

    // On the wire and in the store: prefixed keys.
    assert_eq!(
        cluster.versions(b"x\0\0\x01z")[0].value.as_deref(),
        Some(&b"in a too"[..])
    );
    assert_eq!(
        cluster.versions(b"x\0\0\x02k")[0].value.as_deref(),
        Some(&b"in b"[..])
    );

    // To the caller: its own keys only, without the prefix.
    let mut snapshot = a.snapshot(
        a.current_timestamp().await.unwrap(),
        TransactionOptions::new_optimistic(),
    );
    assert_eq!(
        snapshot.get("k".to_owned()).await.unwrap(),
        Some(b"in a".to_vec())
    );
    let pairs: Vec<KvPair> = snapshot.scan(.., 10).await.unwrap().collect();
    assert_eq!(
        pairs,
        vec![KvPair::new("k", "in a"), KvPair::new("z", "in a too")]
    );
    let mut in_b = b.begin_optimistic().await.unwrap();
    let keys: Vec<Key> = in_b.scan_keys(.., 10).await.unwrap().collect();
    assert_eq!(keys, vec![Key::from("k")]);
    let got: Vec<KvPair> = in_b
        .batch_get(vec!["k".to_owned(), "z".to_owned()])
        .await
        .unwrap()
        .collect();
    assert_eq!(got, vec![KvPair::new("k", "in b")]);
    in_b.rollback().await.unwrap();
    cluster.shutdown().await;
}

/// client-rust's api-v2-no-prefix mode: API version 2 on the wire, keys as
/// given (the caller puts the prefix on), so one client reaches into any
/// keyspace, and what it writes is what a keyspace client reads.
#[tokio::test]
async fn api_v2_no_prefix_writes_keys_exactly_as_given() {
    let cluster = SimCluster::builder()
        .stores(1)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .start()
        .await
        .unwrap();
    let across = TransactionClient::new_with_config_api_v2_no_prefix(
        cluster.pd_endpoints(),
        Config::default(),
    )
    .await
    .unwrap();
    assert_eq!(across.keyspace(), Keyspace::ApiV2NoPrefix);
    let mut txn = across.begin_optimistic().await.unwrap();
    txn.put(b"x\0\0\x01k".to_vec(), "from outside")
        .await
        .unwrap();
    txn.commit().await.unwrap();

    let a = client_in(&cluster, "a").await;
    let mut reader = a.begin_optimistic().await.unwrap();
    assert_eq!(
        reader.get("k".to_owned()).await.unwrap(),
        Some(b"from outside".to_vec())
    );
    reader.rollback().await.unwrap();
    // Read back by the full key; scans return the full keys.
    let mut again = across.begin_optimistic().await.unwrap();
    let pairs: Vec<KvPair> = again
        .scan(b"x\0\0\x01".to_vec()..b"x\0\0\x02".to_vec(), 10)
        .await
        .unwrap()
        .collect();
    assert_eq!(pairs.len(), 1);
    assert_eq!(pairs[0].key(), &Key::from(b"x\0\0\x01k".to_vec()));
    again.rollback().await.unwrap();

    // The mode and a keyspace of its own contradict each other.
    let err = TransactionClient::new_with_config_api_v2_no_prefix(
        cluster.pd_endpoints(),
        Config::default().with_keyspace("a"),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::InvalidArgument(m)) if m.contains("config.keyspace")),
        "{err:?}"
    );
}

/// `scan_locks` hands back keys as the caller wrote them (client-rust
/// strips the keyspace prefix too), and `resolve_locks` takes them in that
/// form.
#[tokio::test]
async fn scan_locks_returns_keys_without_the_keyspace_prefix() {
    let cluster = SimCluster::builder()
        .stores(1)
        .replicas(1)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .start()
        .await
        .unwrap();
    let client = client_in(&cluster, "a").await;
    let mut txn = client
        .begin_with_options(TransactionOptions::new_pessimistic())
        .await
        .unwrap();
    txn.lock_keys(vec!["p".to_owned(), "q".to_owned()])
        .await
        .unwrap();
    // In the store the locks sit under the prefixed keys.
    assert_eq!(cluster.locks(b"x\0\0\x01", b"x\0\0\x02").len(), 2);

    let safepoint = client.current_timestamp().await.unwrap();
    let locks = client.scan_locks(&safepoint, .., 10).await.unwrap();
    let keys: Vec<&[u8]> = locks.iter().map(|l| &l.key[..]).collect();
    assert_eq!(keys, [&b"p"[..], &b"q"[..]], "{locks:?}");
    assert!(locks.iter().all(|l| l.primary_lock == b"p"), "{locks:?}");

    // Alive: given back unresolved, in the caller's form.
    let live = client
        .resolve_locks(locks.clone(), safepoint, tikv_plan::Backoff::no_backoff())
        .await
        .unwrap();
    assert_eq!(live, locks);

    txn.rollback().await.unwrap();
    let safepoint = client.current_timestamp().await.unwrap();
    assert!(client
        .scan_locks(&safepoint, .., 10)
        .await
        .unwrap()
        .is_empty());
    cluster.shutdown().await;
}

/// `unsafe_destroy_range` in a keyspace reaches every store of an API v2
/// cluster (the request carries the keyspace's context, as every other
/// one), clears only its keyspace even when unbounded (`..` ends at the
/// keyspace's end), and an unbounded range without a keyspace is refused
/// before anything is sent: TiKV stops on an empty key there.
#[tokio::test]
async fn unsafe_destroy_range_stays_in_its_keyspace_and_never_sends_an_empty_key() {
    let cluster = SimCluster::builder()
        .stores(3)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .keyspace("b", 2)
        .split_keys(vec![
            encode_bytes(b"x\0\0\x01m"),
            encode_bytes(b"x\0\0\x02"),
        ])
        .start()
        .await
        .unwrap();
    let a = client_in(&cluster, "a").await;
    let b = client_in(&cluster, "b").await;
    for client in [&a, &b] {
        let mut txn = client.begin_optimistic().await.unwrap();
        for key in ["c", "p", "y"] {
            txn.put(key.to_owned(), "v".to_owned()).await.unwrap();
        }
        txn.commit().await.unwrap();
    }
    a.unsafe_destroy_range(..).await.unwrap();
    for key in ["c", "p", "y"] {
        let (in_a, in_b) = (
            [b"x\0\0\x01".as_slice(), key.as_bytes()].concat(),
            [b"x\0\0\x02".as_slice(), key.as_bytes()].concat(),
        );
        assert!(cluster.versions(&in_a).is_empty(), "{key} left in a");
        assert_eq!(cluster.versions(&in_b).len(), 1, "{key} gone from b");
    }

    let v1 = SimCluster::builder().stores(1).start().await.unwrap();
    let plain = TransactionClient::new(v1.pd_endpoints()).await.unwrap();
    let error = plain.unsafe_destroy_range(..).await.unwrap_err();
    assert!(
        matches!(error.failure(), Some(Failure::InvalidArgument(_))),
        "{error}"
    );
    assert!(error.to_string().contains("bounded range"), "{error}");
    assert_eq!(
        v1.counters(1).total("unsafe_destroy_range"),
        0,
        "nothing sent"
    );
    plain
        .unsafe_destroy_range("a".to_owned().."b".to_owned())
        .await
        .unwrap();
    v1.shutdown().await;
    cluster.shutdown().await;
}
