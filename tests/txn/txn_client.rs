//! `TransactionClient` end to end against the simulated cluster (real gRPC
//! on 127.0.0.1): CRUD, read-your-writes, snapshots, scans, inserts,
//! conflicts, batches over many Regions, the undetermined commit, voter
//! fallback, lock resolution, pessimistic transactions, async commit, 1PC.

use std::time::Duration;

use crate::support::{client, client_with, cluster, optimistic, read};
use tikv_plan::codec::encode_bytes;
use tikv_plan::transaction::{as_key_error, TransactionStatus};
use tikv_plan::Failure;
use tikv_plan::{
    CheckLevel, Config, Error, Key, KvPair, Mutation, TimestampExt, TransactionOptions,
};
use tikv_sim::{Outcome, SimCluster};

/// A three-store cluster whose Regions split at the encodings of `splits`.
fn total(cluster: &SimCluster, method: &str, outcome: Outcome) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count(method, outcome))
        .sum()
}

#[tokio::test]
async fn crud_and_read_your_writes() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster).await;

    let mut txn = client.begin_optimistic().await.unwrap();
    assert_eq!(txn.get("a".to_owned()).await.unwrap(), None);
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "26".to_owned()).await.unwrap();
    // Read-your-writes before commit, across Regions.
    assert_eq!(txn.get("a".to_owned()).await.unwrap(), Some(b"1".to_vec()));
    assert!(txn.key_exists("z".to_owned()).await.unwrap());
    // Nobody else sees them yet, and nothing is locked before commit.
    assert_eq!(read(&client, "a").await, None);
    assert!(cluster.locks(b"", b"").is_empty());
    let commit_ts = txn.commit().await.unwrap().expect("a commit ts");
    assert!(commit_ts.version() > txn.start_timestamp().version());
    assert_eq!(txn.status(), TransactionStatus::Committed);

    assert_eq!(read(&client, "a").await, Some(b"1".to_vec()));
    assert_eq!(read(&client, "z").await, Some(b"26".to_vec()));

    let mut txn = client.begin_optimistic().await.unwrap();
    txn.delete("a".to_owned()).await.unwrap();
    txn.batch_mutate(vec![
        Mutation::Put("b".into(), b"2".to_vec()),
        Mutation::Delete("z".into()),
    ])
    .await
    .unwrap();
    assert_eq!(txn.get("a".to_owned()).await.unwrap(), None);
    let pairs: Vec<KvPair> = txn
        .batch_get(vec!["a".to_owned(), "b".to_owned(), "z".to_owned()])
        .await
        .unwrap()
        .collect();
    assert_eq!(pairs, vec![KvPair::new("b", "2")]);
    txn.commit().await.unwrap();
    assert_eq!(read(&client, "a").await, None);
    assert_eq!(read(&client, "b").await, Some(b"2".to_vec()));
    assert_eq!(read(&client, "z").await, None);

    // Operations after commit are typed errors.
    assert!(matches!(
        txn.put("c".to_owned(), "3".to_owned()).await,
        Err(Error::OperationAfterCommitError)
    ));
    assert!(matches!(
        txn.get("b".to_owned()).await,
        Err(Error::OperationAfterCommitError)
    ));
    assert!(matches!(
        txn.commit().await,
        Err(Error::OperationAfterCommitError)
    ));

    // Rollback: nothing written, then no more operations.
    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put("r".to_owned(), "x".to_owned()).await.unwrap();
    txn.rollback().await.unwrap();
    assert!(matches!(
        txn.get("r".to_owned()).await,
        Err(Error::OperationAfterCommitError)
    ));
    assert_eq!(read(&client, "r").await, None);
    // An empty transaction commits to nothing.
    let mut txn = client.begin_optimistic().await.unwrap();
    assert_eq!(txn.commit().await.unwrap(), None);
    cluster.shutdown().await;
}

#[tokio::test]
async fn snapshots_read_the_past_and_scans_merge_local_writes() {
    let cluster = cluster(&["c", "f"]).await;
    let client = client(&cluster).await;
    let mut txn = client.begin_optimistic().await.unwrap();
    for k in ["a", "b", "c", "d", "e", "f", "g"] {
        txn.put(k.to_owned(), format!("v{k}")).await.unwrap();
    }
    txn.commit().await.unwrap();
    let before = client.current_timestamp().await.unwrap();

    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put("d".to_owned(), "new".to_owned()).await.unwrap();
    txn.delete("e".to_owned()).await.unwrap();
    txn.commit().await.unwrap();

    let mut old = client.snapshot(before, TransactionOptions::new_optimistic());
    assert_eq!(old.get("d".to_owned()).await.unwrap(), Some(b"vd".to_vec()));
    assert_eq!(old.get("e".to_owned()).await.unwrap(), Some(b"ve".to_vec()));
    let keys: Vec<Key> = old
        .scan_keys("b".to_owned().."g".to_owned(), 10)
        .await
        .unwrap()
        .collect();
    assert_eq!(keys.len(), 5, "{keys:?}");
    let rev: Vec<KvPair> = old.scan_reverse(.., 2).await.unwrap().collect();
    assert_eq!(rev, vec![KvPair::new("g", "vg"), KvPair::new("f", "vf")]);

    // A transaction's scans include its own writes, across three Regions.
    let mut txn = client.begin_with_options(optimistic()).await.unwrap();
    txn.put("bb".to_owned(), "local".to_owned()).await.unwrap();
    txn.delete("f".to_owned()).await.unwrap();
    let pairs: Vec<KvPair> = txn.scan("a".to_owned().., 100).await.unwrap().collect();
    let keys: Vec<&[u8]> = pairs.iter().map(|p| p.key().as_bytes()).collect();
    assert_eq!(keys, vec![&b"a"[..], b"b", b"bb", b"c", b"d", b"g"]);
    let limited: Vec<Key> = txn
        .scan_keys("e".to_owned()..="g".to_owned(), 1)
        .await
        .unwrap()
        .collect();
    assert_eq!(limited, vec![Key::from("g")]);
    let rev: Vec<Key> = txn
        .scan_keys_reverse(..="c".to_owned(), 2)
        .await
        .unwrap()
        .collect();
    assert_eq!(rev, vec![Key::from("c"), Key::from("bb")]);
    txn.rollback().await.unwrap();

    // A snapshot refuses writes.
    let mut ro = client
        .begin_with_options(TransactionOptions::new_optimistic().read_only())
        .await
        .unwrap();
    assert!(matches!(
        ro.put("x".to_owned(), "y".to_owned()).await,
        Err(Error::InvalidTransactionType)
    ));
    assert_eq!(ro.commit().await.unwrap(), None);
    cluster.shutdown().await;
}

#[tokio::test]
async fn insert_of_an_existing_key_fails_and_leaves_no_lock() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster).await;
    let mut txn = client.begin_optimistic().await.unwrap();
    txn.insert("k".to_owned(), "1".to_owned()).await.unwrap();
    assert!(matches!(
        txn.insert("k".to_owned(), "2".to_owned()).await,
        Err(Error::DuplicateKeyInsertion)
    ));
    txn.commit().await.unwrap();

    let mut txn = client.begin_optimistic().await.unwrap();
    txn.insert("k".to_owned(), "again".to_owned())
        .await
        .unwrap();
    txn.put("other".to_owned(), "x".to_owned()).await.unwrap();
    let err = txn.commit().await.unwrap_err();
    assert!(
        as_key_error(&err).is_some_and(|k| k.already_exist.is_some()),
        "{err:?}"
    );
    assert!(err.to_string().contains("already exists"), "{err}");
    // The failed prewrite was rolled back: no lock waits for its TTL.
    assert!(
        cluster.locks(b"", b"").is_empty(),
        "{:?}",
        cluster.locks(b"", b"")
    );
    assert_eq!(client.stats().prewrite_rollbacks, 1);
    assert_eq!(read(&client, "k").await, Some(b"1".to_vec()));
    assert_eq!(read(&client, "other").await, None);

    // Pessimistic: the insert itself finds the key.
    let mut txn = client
        .begin_with_options(TransactionOptions::new_pessimistic().drop_check(CheckLevel::Warn))
        .await
        .unwrap();
    assert!(matches!(
        txn.insert("k".to_owned(), "p".to_owned()).await,
        Err(Error::DuplicateKeyInsertion)
    ));
    txn.rollback().await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test]
async fn optimistic_conflict_fails_the_later_committer() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster).await;
    let mut t1 = client.begin_optimistic().await.unwrap();
    let mut t2 = client.begin_optimistic().await.unwrap();
    t1.put("k".to_owned(), "t1".to_owned()).await.unwrap();
    t2.put("k".to_owned(), "t2".to_owned()).await.unwrap();
    t2.put("z".to_owned(), "t2".to_owned()).await.unwrap();
    t1.commit().await.unwrap();
    let err = t2.commit().await.unwrap_err();
    assert!(
        as_key_error(&err).is_some_and(|k| k.conflict.is_some()),
        "{err:?}"
    );
    assert!(!err.is_undetermined());
    assert!(cluster.locks(b"", b"").is_empty());
    assert_eq!(read(&client, "k").await, Some(b"t1".to_vec()));
    assert_eq!(read(&client, "z").await, None);
    t2.rollback().await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test]
async fn batch_prewrite_over_many_regions_and_16k_batches() {
    let splits = ["k20", "k40", "k60", "k80"];
    let cluster = cluster(&splits).await;
    let client = client(&cluster).await;
    let value = vec![7u8; 1024];
    let mut txn = client.begin_optimistic().await.unwrap();
    // 100 keys of 1 KiB over five Regions: 20 KiB per Region, two batches each.
    let keys: Vec<String> = (0..100).map(|i| format!("k{i:02}")).collect();
    for k in &keys {
        txn.put(k.clone(), value.clone()).await.unwrap();
    }
    cluster.reset_counters();
    txn.commit().await.unwrap();
    let prewrites = total(&cluster, "kv_prewrite", Outcome::Ok);
    assert_eq!(prewrites, 10, "five Regions, two 16 KiB batches each");

    let mut check = client.begin_with_options(optimistic()).await.unwrap();
    let pairs: Vec<KvPair> = check.scan("k".to_owned().., 1000).await.unwrap().collect();
    assert_eq!(pairs.len(), 100);
    assert!(pairs.iter().all(|p| p.value() == &value));
    let got = check.batch_get(keys.clone()).await.unwrap().count();
    assert_eq!(got, 100);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_dropped_primary_commit_is_undetermined_and_a_later_read_shows_the_truth() {
    let cluster = cluster(&["m"]).await;
    let config = Config::default()
        .with_timeout(Duration::from_millis(300))
        .with_request_deadline(Duration::from_secs(2));
    let client = client_with(&cluster, config).await;
    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put("a".to_owned(), "committed?".to_owned())
        .await
        .unwrap();
    txn.put("z".to_owned(), "secondary".to_owned())
        .await
        .unwrap();
    // Every commit response is lost; each commit is applied first.
    for store in cluster.store_ids() {
        for _ in 0..200 {
            cluster.drop_next_response(store, "kv_commit").unwrap();
        }
    }
    let err = txn.commit().await.unwrap_err();
    assert!(err.is_undetermined(), "{err:?}");
    assert!(matches!(err, Error::UndeterminedError(_)), "{err:?}");
    // The other voters were tried too: fallback kept the flag.
    assert!(client.routing_stats().fallback_attempts > 0);
    assert!(err.to_string().contains("unknown"), "{err}");
    // The truth: the primary's commit was applied, so the transaction is
    // committed; a reader resolves the secondary's lock from the primary.
    assert_eq!(read(&client, "a").await, Some(b"committed?".to_vec()));
    assert_eq!(read(&client, "z").await, Some(b"secondary".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_transaction_commits_through_voter_fallback_when_the_leader_store_is_down() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    // Warm the caches, then take the leader's store down (PD still names it).
    assert_eq!(read(&client, "k").await, None);
    let region = cluster.region_for_key(&encode_bytes(b"k")).unwrap();
    let leader = cluster.leader_of(region.id).unwrap().store_id;
    cluster.store_down(leader).await;
    let other = cluster
        .store_ids()
        .into_iter()
        .find(|s| *s != leader)
        .unwrap();
    cluster.transfer_leader(region.id, other, false).unwrap();

    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    txn.put("k2".to_owned(), "v2".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    assert!(client.routing_stats().fallback_successes > 0);
    assert_eq!(read(&client, "k").await, Some(b"v".to_vec()));
    assert_eq!(read(&client, "k2").await, Some(b"v2".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_region_split_during_a_transaction_is_followed() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    let mut txn = client.begin_optimistic().await.unwrap();
    // Cache the single Region, then split it at an encoded key.
    assert_eq!(txn.get("a".to_owned()).await.unwrap(), None);
    cluster.split_region(&encode_bytes(b"m")).unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    assert_eq!(read(&client, "a").await, Some(b"1".to_vec()));
    assert_eq!(read(&client, "z").await, Some(b"2".to_vec()));
    let mut check = client.begin_with_options(optimistic()).await.unwrap();
    let keys: Vec<Key> = check.scan_keys(.., 10).await.unwrap().collect();
    assert_eq!(keys, vec![Key::from("a"), Key::from("z")]);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_region_lookup_error_while_sharding_the_prewrite_reaches_the_caller() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster).await;
    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
    // No Region is cached yet, and PD is gone: sharding cannot look them up.
    cluster.pd_member_down(0).await.unwrap();
    let err = txn.commit().await.unwrap_err();
    assert!(!err.is_undetermined(), "{err:?}");
    assert!(
        matches!(err.failure(), Some(Failure::PdUnavailable { .. })),
        "the lookup error itself, not an empty success: {err:?}"
    );
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}
