//! The transactional API as client-rust applications use it: optimistic,
//! pessimistic, async commit and 1PC transactions, snapshots, scans both
//! ways, a write conflict matched on client-rust's `Error::KeyError`, a
//! duplicate insert, the status state machine, lock maintenance, GC and
//! range destruction.

// client-rust's `Timestamp` is a protobuf message, not `Copy`: its users
// clone it, and this program is written as they write it.
#![allow(clippy::clone_on_copy)]

use tikv_client::transaction::{HeartbeatOption, Mutation, ResolveLocksOptions};
use tikv_client::{
    Backoff, CheckLevel, Config, Error, Key, KvPair, Result, RetryOptions, Snapshot, Timestamp,
    TimestampExt, Transaction, TransactionClient, TransactionOptions, Value,
};

/// The transactional API as a client-rust application uses it.
pub async fn run(pd_endpoints: Vec<String>) -> Result<()> {
    let client = TransactionClient::new(pd_endpoints.clone()).await?;
    let _other = TransactionClient::new_with_config(pd_endpoints, Config::default()).await?;

    let mut txn: Transaction = client.begin_optimistic().await?;
    txn.put("k1".to_owned(), "v1".to_owned()).await?;
    txn.insert(b"k2".to_vec(), b"v2".to_vec()).await?;
    txn.batch_mutate(vec![
        Mutation::Put(Key::from("k3".to_owned()), b"v3".to_vec()),
        Mutation::Delete(Key::from("k4".to_owned())),
    ])
    .await?;
    let value: Option<Value> = txn.get("k1".to_owned()).await?;
    assert_eq!(value, Some(b"v1".to_vec()));
    let commit_ts: Option<Timestamp> = txn.commit().await?;
    assert!(commit_ts.is_some());
    assert!(matches!(
        txn.put("x".to_owned(), "y".to_owned()).await,
        Err(Error::OperationAfterCommitError)
    ));

    let mut txn = client.begin_pessimistic().await?;
    let current: Option<Value> = txn.get_for_update("k1".to_owned()).await?;
    assert_eq!(current, Some(b"v1".to_vec()));
    let pairs: Vec<KvPair> = txn
        .batch_get_for_update(vec!["k2".to_owned(), "k3".to_owned()])
        .await?;
    assert_eq!(pairs.len(), 2);
    txn.lock_keys(vec!["k9".to_owned()]).await?;
    txn.delete("k3".to_owned()).await?;
    let _ttl: u64 = txn.send_heart_beat().await?;
    txn.commit().await?;

    let options = TransactionOptions::new_optimistic()
        .use_async_commit()
        .retry_options(RetryOptions::default_optimistic())
        .heartbeat_option(HeartbeatOption::NoHeartbeat)
        .drop_check(CheckLevel::Warn);
    let mut txn = client.begin_with_options(options).await?;
    txn.put("a1".to_owned(), "async".to_owned()).await?;
    txn.commit().await?;
    let mut txn = client
        .begin_with_options(TransactionOptions::new_optimistic().try_one_pc())
        .await?;
    txn.put("a2".to_owned(), "1pc".to_owned()).await?;
    txn.commit().await?;

    let ts: Timestamp = client.current_timestamp().await?;
    let mut snapshot: Snapshot = client.snapshot(ts.clone(), TransactionOptions::new_optimistic());
    assert!(snapshot.key_exists("k2".to_owned()).await?);
    let got: Vec<KvPair> = snapshot
        .batch_get(vec!["k1".to_owned(), "k2".to_owned()])
        .await?
        .collect();
    assert_eq!(got.len(), 2);
    let keys: Vec<Key> = snapshot.scan_keys("k".to_owned().., 10).await?.collect();
    assert_eq!(
        keys,
        vec![Key::from("k1".to_owned()), Key::from("k2".to_owned())]
    );
    let last: Vec<KvPair> = snapshot.scan_reverse(.., 1).await?.collect();
    assert_eq!(last[0].key(), &Key::from("k2".to_owned()));
    let _: Vec<KvPair> = snapshot
        .scan("a".to_owned().."b".to_owned(), 10)
        .await?
        .collect();
    let _: Vec<Key> = snapshot.scan_keys_reverse(.., 10).await?.collect();
    let _version: u64 = ts.version();

    // Conflicts and duplicate inserts are errors; the loser rolls back.
    let mut t1 = client.begin_optimistic().await?;
    let mut t2 = client.begin_optimistic().await?;
    t1.put("c".to_owned(), "1".to_owned()).await?;
    t2.put("c".to_owned(), "2".to_owned()).await?;
    t1.commit().await?;
    match t2.commit().await {
        Err(Error::KeyError(e)) if e.conflict.is_some() => {}
        other => panic!("expected a write conflict, got {other:?}"),
    }
    t2.rollback().await?;
    let mut t3 = client.begin_optimistic().await?;
    t3.insert("k1".to_owned(), "dup".to_owned()).await?;
    assert!(t3.commit().await.is_err());
    t3.rollback().await?;

    let safepoint = client.current_timestamp().await?;
    let locks = client.scan_locks(&safepoint, .., 100).await?;
    let live = client
        .resolve_locks(locks, safepoint.clone(), Backoff::no_backoff())
        .await?;
    assert!(live.is_empty());
    client
        .cleanup_locks(.., &safepoint, ResolveLocksOptions::default())
        .await?;
    let _moved: bool = client.gc(safepoint).await?;
    client
        .unsafe_destroy_range("a".to_owned().."b".to_owned())
        .await?;
    Ok(())
}
