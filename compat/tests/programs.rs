//! Each program of this crate, run against the embedded simulated cluster.

use tikv_client::proto::kvrpcpb::ApiVersion;
use tikv_client::{Config, Key, RawClient};
use tikv_plan_compat::{application, custom_request, lowering, raw_example, transactional};
use tikv_sim::codec::encode_bytes;
use tikv_sim::SimCluster;

#[tokio::test]
async fn client_rust_raw_example_runs_in_the_default_keyspace() {
    let cluster = SimCluster::builder()
        .stores(3)
        .api_version(ApiVersion::V2)
        .split_keys(vec![encode_bytes(b"r\0\0\0k2")])
        .start()
        .await
        .unwrap();
    raw_example::run(raw_example::CommandArgs {
        pd: cluster.pd_endpoints(),
        ..Default::default()
    })
    .await
    .unwrap();
    cluster.shutdown().await;
}

#[tokio::test]
async fn client_rust_style_application_runs() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"m".to_vec(), b"t2".to_vec()])
        .start()
        .await
        .unwrap();
    application::run(cluster.pd_endpoints()).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test]
async fn custom_request_runs_through_plan_builder_in_a_keyspace() {
    let cluster = SimCluster::builder()
        .stores(3)
        .api_version(ApiVersion::V2)
        .keyspace("app", 42)
        .keyspace("other", 43)
        .split_keys(vec![encode_bytes(b"r\0\0\x2am")])
        .start()
        .await
        .unwrap();
    let pd = cluster.pd_endpoints();
    let app = RawClient::new_with_config(pd.clone(), Config::default().with_keyspace("app"))
        .await
        .unwrap();
    // "m" sits exactly at the split: found only by its encoding.
    app.batch_put(vec![
        ("a".to_owned(), "1".to_owned()),
        ("m".to_owned(), "2".to_owned()),
        ("z".to_owned(), "3".to_owned()),
    ])
    .await
    .unwrap();
    let other = RawClient::new_with_config(pd.clone(), Config::default().with_keyspace("other"))
        .await
        .unwrap();
    other.put("b".to_owned(), "3".to_owned()).await.unwrap();
    let asked = ["a", "b", "m", "q", "z"].map(str::to_owned).to_vec();
    let found = custom_request::existing_keys(pd.clone(), "app", asked.clone())
        .await
        .unwrap();
    assert_eq!(
        found,
        ["a", "m", "z"].map(|k| Key::from(k.to_owned())).to_vec()
    );
    let found = custom_request::existing_keys(pd, "other", asked)
        .await
        .unwrap();
    assert_eq!(found, vec![Key::from("b".to_owned())]);
    cluster.shutdown().await;
}

#[tokio::test]
async fn client_rust_style_transactional_application_runs() {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![tikv_client::codec::encode_bytes(b"k2")])
        .start()
        .await
        .unwrap();
    transactional::run(cluster.pd_endpoints()).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test]
async fn plans_built_from_the_lowering_modules_run() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"raw-m".to_vec()])
        .start()
        .await
        .unwrap();
    let plugin = (tikv_sim::COPROCESSOR_PLUGIN, ">=1.0");
    let seen = lowering::run(cluster.pd_endpoints(), plugin).await.unwrap();
    assert_eq!(seen.raw_get.as_deref(), Some(&b"1"[..]));
    let keys = |pairs: &[tikv_client::KvPair]| -> Vec<Key> {
        pairs.iter().map(|p| p.key().clone()).collect()
    };
    assert_eq!(
        keys(&seen.raw_batch_get),
        ["raw-a", "raw-z"].map(|k| Key::from(k.to_owned()))
    );
    assert_eq!(
        keys(&seen.raw_scan_after_delete),
        [Key::from("raw-a".to_owned())],
        "raw-b was deleted by the range"
    );
    let regions: Vec<u64> = cluster.regions().iter().map(|r| r.id).collect();
    let answers: Vec<String> = seen
        .coprocessor
        .iter()
        .map(|d| String::from_utf8(d.clone()).unwrap())
        .collect();
    assert_eq!(
        answers,
        [
            format!("region {}:1", regions[0]),
            format!("region {}:1", regions[1]),
        ]
    );
    assert_eq!(seen.locks_before_commit, 2);
    assert_eq!(seen.txn_get.as_deref(), Some(&b"txn-a value"[..]));
    assert_eq!(
        keys(&seen.txn_batch_get),
        ["txn-a", "txn-b"].map(|k| Key::from(k.to_owned()))
    );
    assert_eq!(keys(&seen.txn_scan), keys(&seen.txn_batch_get));
    assert!(
        cluster.locks(b"", b"").is_empty(),
        "the commit released every lock"
    );
    cluster.shutdown().await;
}

/// A program that matches on client-rust's `Error` exhaustively
/// (`application::explain`) takes client-rust's branch in each situation:
/// a duplicate insert, an insert of an existing key and a write conflict
/// (key errors), and a gRPC failure (every store down).
#[tokio::test]
async fn errors_take_client_rusts_branches() {
    use tikv_client::{Error, TransactionClient};

    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let txns = TransactionClient::new_with_config(cluster.pd_endpoints(), application::config())
        .await
        .unwrap();
    let mut setup = txns.begin_optimistic().await.unwrap();
    setup.put("taken".to_owned(), "v".to_owned()).await.unwrap();
    setup.commit().await.unwrap();

    // Inserting a key twice in one transaction...
    let mut txn = txns.begin_optimistic().await.unwrap();
    txn.insert("new".to_owned(), "v".to_owned()).await.unwrap();
    let err = txn
        .insert("new".to_owned(), "again".to_owned())
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::DuplicateKeyInsertion),
        "{}",
        application::explain(&err)
    );
    txn.rollback().await.unwrap();
    // ... and a key that exists: TiKV's key error, at commit.
    let mut txn = txns.begin_optimistic().await.unwrap();
    txn.insert("taken".to_owned(), "again".to_owned())
        .await
        .unwrap();
    let err = txn.commit().await.unwrap_err();
    assert!(
        matches!(&err, Error::KeyError(e) if e.already_exist.is_some()),
        "{}",
        application::explain(&err)
    );

    let mut first = txns.begin_optimistic().await.unwrap();
    let mut second = txns.begin_optimistic().await.unwrap();
    first.put("k".to_owned(), "1".to_owned()).await.unwrap();
    second.put("k".to_owned(), "2".to_owned()).await.unwrap();
    first.commit().await.unwrap();
    let err = second.commit().await.unwrap_err();
    assert!(
        matches!(&err, Error::KeyError(e) if e.conflict.is_some()),
        "{}",
        application::explain(&err)
    );

    let raw = RawClient::new_with_config(cluster.pd_endpoints(), application::config())
        .await
        .unwrap();
    for store in cluster.store_ids() {
        cluster.store_down(store).await;
    }
    let err = raw.get("k".to_owned()).await.unwrap_err();
    assert!(
        matches!(&err, Error::GrpcAPI(status) if status.code() == tonic::Code::Unavailable),
        "{}",
        application::explain(&err)
    );
    // tikv-plan's account of it: which store could not be reached.
    assert!(err.failure().is_some(), "{err:?}");
    cluster.shutdown().await;
}
