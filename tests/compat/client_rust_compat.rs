//! Code written the way client-rust's `RawClient` is used compiles against
//! `tikv_plan::RawClient` unchanged (only the import differs), and runs
//! against the simulated cluster.

use tikv_plan::{Backoff, ColumnFamily, Config, Key, KvPair, RawClient, Result, Value};
use tikv_sim::SimCluster;

/// Application code as a client-rust user writes it.
async fn application(pd_endpoints: Vec<String>) -> Result<()> {
    let client = RawClient::new(pd_endpoints.clone()).await?;
    let client = client
        .with_cf(ColumnFamily::Default)
        .with_backoff(Backoff::no_jitter_backoff(2, 500, 10));
    let _other = RawClient::new_with_config(pd_endpoints, Config::default()).await?;

    client.put("k1".to_owned(), "v1".to_owned()).await?;
    client.put(b"k2".to_vec(), b"v2".to_vec()).await?;
    client
        .put_with_ttl("k3".to_owned(), "v3".to_owned(), 60)
        .await?;
    let value: Option<Value> = client.get("k1".to_owned()).await?;
    assert_eq!(value, Some(b"v1".to_vec()));
    let ttl: Option<u64> = client.get_key_ttl_secs("k3".to_owned()).await?;
    assert!(ttl.is_some());

    let pairs: Vec<KvPair> = client
        .batch_get(vec!["k1".to_owned(), "k2".to_owned()])
        .await?;
    assert_eq!(pairs.len(), 2);
    let kvs = vec![
        KvPair::from(("b1".to_owned(), "x".to_owned())),
        KvPair::new("b2", "y"),
    ];
    client.batch_put(kvs).await?;
    client
        .batch_put(vec![("b3".to_owned(), "z".to_owned())])
        .await?;

    let scanned: Vec<KvPair> = client.scan("b".to_owned().."c".to_owned(), 10).await?;
    assert_eq!(scanned.len(), 3);
    let keys: Vec<Key> = client
        .scan_keys("a".to_owned()..="z".to_owned(), 10)
        .await?;
    assert_eq!(keys.len(), 6);
    let reversed = client.scan_reverse(.., 2).await?;
    assert_eq!(reversed[0].key(), &Key::from("k3"));
    let batch = client
        .batch_scan(
            vec![
                "b".to_owned().."c".to_owned(),
                "k".to_owned().."l".to_owned(),
            ],
            1,
        )
        .await?;
    assert_eq!(batch.len(), 2);
    let _keys: Vec<Key> = client.batch_scan_keys(vec![("a", "z")], 5).await?;

    client.delete("k1".to_owned()).await?;
    client.batch_delete(vec!["k2".to_owned()]).await?;
    client.delete_range("b".to_owned().."c".to_owned()).await?;
    assert!(client.scan(.., 10).await?.len() == 1);

    let cas = client.with_atomic_for_cas();
    let (previous, swapped): (Option<Value>, bool) = cas
        .compare_and_swap("c".to_owned(), None, "1".to_owned())
        .await?;
    assert_eq!((previous, swapped), (None, true));
    let (previous, swapped) = cas
        .compare_and_swap("c".to_owned(), Some(b"1".to_vec()), "2".to_owned())
        .await?;
    assert_eq!((previous, swapped), (Some(b"1".to_vec()), true));
    Ok(())
}

#[tokio::test]
async fn client_rust_style_code_compiles_and_runs() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"f".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap();
    application(cluster.pd_endpoints()).await.unwrap();
}
