//! Transactions in API v2 keyspaces against the simulated cluster: keys
//! travel with the transactional prefix (`x` + keyspace id), Regions split
//! at encoded prefixed keys are followed, results come back without the
//! prefix, and two keyspaces never see each other's keys.

use tikv_plan::codec::encode_bytes;
use tikv_plan::proto::kvrpcpb::ApiVersion;
use tikv_plan::request::Keyspace;
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
