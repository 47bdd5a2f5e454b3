//! Pessimistic transactions, heartbeats, async commit, 1PC and GC end to
//! end against the simulated cluster.

use std::time::Duration;

use crate::support::{cluster, pessimistic, read};
use tikv_plan::transaction::HeartbeatOption;
use tikv_plan::{Config, Error, KvPair, TimestampExt, TransactionClient, TransactionOptions};
use tikv_sim::{Outcome, SimCluster};

async fn client(cluster: &SimCluster, deadline: Duration) -> TransactionClient {
    TransactionClient::new_with_config(
        cluster.pd_endpoints(),
        Config::default().with_request_deadline(deadline),
    )
    .await
    .unwrap()
}

/// Waits (bounded) until the background secondary commits are done.
async fn settle(client: &TransactionClient) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while client.stats().secondary_commits_pending > 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "secondaries never finished"
        );
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

fn total(cluster: &SimCluster, method: &str) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count(method, Outcome::Ok))
        .sum()
}

#[tokio::test]
async fn pessimistic_locks_conflict_and_roll_back() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_millis(300)).await;
    let mut setup = client.begin_optimistic().await.unwrap();
    setup.put("k".to_owned(), "0".to_owned()).await.unwrap();
    setup.commit().await.unwrap();

    let mut t1 = client.begin_with_options(pessimistic()).await.unwrap();
    assert_eq!(
        t1.get_for_update("k".to_owned()).await.unwrap(),
        Some(b"0".to_vec())
    );
    t1.lock_keys(vec!["z".to_owned()]).await.unwrap();
    let locks = cluster.locks(b"", b"");
    assert_eq!(locks.len(), 2, "locked at once, before commit: {locks:?}");

    // A second pessimistic writer waits for the live lock, then gives up
    // at its deadline with a typed error, holding nothing.
    let mut t2 = client.begin_with_options(pessimistic()).await.unwrap();
    let err = t2.put("k".to_owned(), "t2".to_owned()).await.unwrap_err();
    match &err {
        Error::PessimisticLockError { inner, .. } => {
            assert!(matches!(**inner, Error::ResolveLockError(_)), "{inner:?}")
        }
        other => panic!("expected a pessimistic lock error, got {other:?}"),
    }
    assert_eq!(cluster.locks(b"", b"").len(), 2);

    // t1 rolls back: its locks go; t2 can lock and commit.
    t1.rollback().await.unwrap();
    assert!(cluster.locks(b"", b"").is_empty());
    t2.put("k".to_owned(), "t2".to_owned()).await.unwrap();
    let pairs = t2
        .batch_get_for_update(vec!["k".to_owned(), "none".to_owned()])
        .await
        .unwrap();
    assert_eq!(pairs, vec![KvPair::new("k", "t2")]);
    t2.commit().await.unwrap();
    assert_eq!(read(&client, "k").await, Some(b"t2".to_vec()));
    settle(&client).await;
    assert!(cluster.locks(b"", b"").is_empty());

    // Locks without writes are released by the commit.
    let mut t3 = client.begin_with_options(pessimistic()).await.unwrap();
    t3.lock_keys(vec!["a".to_owned(), "y".to_owned()])
        .await
        .unwrap();
    t3.commit().await.unwrap();
    settle(&client).await;
    assert!(cluster.locks(b"", b"").is_empty());
    assert_eq!(client.stats().secondary_commit_failures, 0);
    assert!(
        client.stats().secondary_commits >= 2,
        "{:?}",
        client.stats()
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_dropped_pessimistic_transaction_releases_its_locks() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
    txn.lock_keys(vec!["a".to_owned(), "b".to_owned()])
        .await
        .unwrap();
    assert_eq!(cluster.locks(b"", b"").len(), 2);
    drop(txn);
    // A writer does not wait for the dropped one's 20 s TTL.
    let mut next = client.begin_with_options(pessimistic()).await.unwrap();
    next.put("a".to_owned(), "mine".to_owned()).await.unwrap();
    next.commit().await.unwrap();
    settle(&client).await;
    assert_eq!(read(&client, "a").await, Some(b"mine".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test]
async fn pessimistic_reads_for_update_see_the_latest_commit() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    let mut t1 = client.begin_with_options(pessimistic()).await.unwrap();
    // Committed after t1 began: a plain read misses it, a locking read
    // (at a fresh for_update_ts) sees it.
    let mut other = client.begin_optimistic().await.unwrap();
    other.put("k".to_owned(), "later".to_owned()).await.unwrap();
    other.commit().await.unwrap();
    assert_eq!(t1.get("k".to_owned()).await.unwrap(), None);
    assert_eq!(
        t1.get_for_update("k".to_owned()).await.unwrap(),
        Some(b"later".to_vec())
    );
    assert_eq!(
        t1.get("k".to_owned()).await.unwrap(),
        Some(b"later".to_vec())
    );
    t1.put("k".to_owned(), "mine".to_owned()).await.unwrap();
    t1.commit().await.unwrap();
    assert_eq!(read(&client, "k").await, Some(b"mine".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test]
async fn heartbeats_keep_the_primary_alive_and_stop_with_the_transaction() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    let options =
        pessimistic().heartbeat_option(HeartbeatOption::FixedTime(Duration::from_millis(10)));
    let mut txn = client.begin_with_options(options).await.unwrap();
    assert!(matches!(
        txn.send_heart_beat().await,
        Err(Error::NoPrimaryKey)
    ));
    txn.put("k".to_owned(), "v".to_owned()).await.unwrap();
    let ttl = txn.send_heart_beat().await.unwrap();
    assert!(ttl >= tikv_plan::transaction::MAX_TTL, "{ttl}");
    // Wait (bounded) until the automatic heartbeat has run twice.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while client.stats().heartbeats < 2 {
        assert!(tokio::time::Instant::now() < deadline, "no heartbeats");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    txn.commit().await.unwrap();
    let after_commit = client.stats().heartbeats;
    // Ten intervals later, none was sent after the end.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(client.stats().heartbeats <= after_commit + 1);
    let settled = client.stats().heartbeats;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(client.stats().heartbeats, settled);
    assert_eq!(client.stats().heartbeat_failures, 0);
    cluster.shutdown().await;
}

#[tokio::test]
async fn async_commit_commits_at_prewrite_and_one_pc_in_one_round() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;

    let options = TransactionOptions::new_optimistic().use_async_commit();
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("z".to_owned(), "2".to_owned()).await.unwrap();
    cluster.reset_counters();
    let commit_ts = txn.commit().await.unwrap().unwrap();
    assert!(commit_ts.version() > txn.start_timestamp().version());
    assert_eq!(read(&client, "a").await, Some(b"1".to_vec()));
    assert_eq!(read(&client, "z").await, Some(b"2".to_vec()));
    let versions = cluster.versions(b"z");
    assert_eq!(versions[0].commit_ts, commit_ts.version(), "{versions:?}");

    // 1PC: one Region, one prewrite, no commit RPC.
    let options = TransactionOptions::new_optimistic().try_one_pc();
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("b".to_owned(), "1pc".to_owned()).await.unwrap();
    txn.put("c".to_owned(), "1pc".to_owned()).await.unwrap();
    settle(&client).await;
    cluster.reset_counters();
    let commit_ts = txn.commit().await.unwrap().unwrap();
    assert_eq!(total(&cluster, "kv_prewrite"), 1);
    assert_eq!(total(&cluster, "kv_commit"), 0);
    assert!(cluster.locks(b"", b"").is_empty());
    assert_eq!(cluster.versions(b"c")[0].commit_ts, commit_ts.version());

    // 1PC over two Regions falls back to 2PC: atomic, with a commit.
    let options = TransactionOptions::new_optimistic().try_one_pc();
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("d".to_owned(), "2pc".to_owned()).await.unwrap();
    txn.put("y".to_owned(), "2pc".to_owned()).await.unwrap();
    cluster.reset_counters();
    let commit_ts = txn.commit().await.unwrap().unwrap();
    assert!(total(&cluster, "kv_commit") >= 1);
    assert_eq!(read(&client, "y").await, Some(b"2pc".to_vec()));
    assert_eq!(cluster.versions(b"d")[0].commit_ts, commit_ts.version());
    cluster.shutdown().await;
}

#[tokio::test]
async fn gc_resolves_old_locks_and_moves_the_safe_point() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put("a".to_owned(), "v".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    let safepoint = client.current_timestamp().await.unwrap();
    assert!(client.gc(safepoint).await.unwrap());
    assert_eq!(cluster.gc_safe_point(), safepoint.version());
    // PD never moves it back.
    let older = tikv_plan::Timestamp::from_version(safepoint.version() - 1);
    assert!(!client.gc(older).await.unwrap());
    assert_eq!(read(&client, "a").await, Some(b"v".to_vec()));
    cluster.shutdown().await;
}

/// A pessimistic lock that finds a write committed after its for_update_ts
/// in every Region it locks (each Region reports its own conflict, so the
/// error is `MultipleKeyErrors`) is retried at a fresh for_update_ts, as a
/// conflict in one Region is, instead of failing the lock.
#[tokio::test]
async fn a_conflict_in_every_region_of_a_lock_retries_at_a_fresh_timestamp() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_secs(10)).await;
    let mut t1 = client.begin_with_options(pessimistic()).await.unwrap();
    t1.lock_keys(vec!["a".to_owned(), "z".to_owned()])
        .await
        .unwrap();

    // t2 asks for both keys while t1 holds them: it waits on t1's locks.
    let tried = |cluster: &SimCluster| {
        cluster
            .store_ids()
            .into_iter()
            .map(|s| {
                let counters = cluster.counters(s);
                counters.count("kv_pessimistic_lock", Outcome::Ok)
                    + counters.count("kv_pessimistic_lock", Outcome::KeyError)
            })
            .sum::<u64>()
    };
    let before = tried(&cluster);
    let waiter = client.clone();
    let t2 = tokio::spawn(async move {
        let mut t2 = waiter.begin_with_options(pessimistic()).await.unwrap();
        let locked = t2.lock_keys(vec!["a".to_owned(), "z".to_owned()]).await;
        (t2, locked)
    });
    // Both Regions have answered t2 with t1's lock.
    let bound = tokio::time::Instant::now() + Duration::from_secs(5);
    while tried(&cluster) < before + 2 {
        assert!(tokio::time::Instant::now() < bound, "t2 never tried");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    // t1 writes both keys and commits after t2's for_update_ts: when t2's
    // lock goes again, both Regions answer with a write conflict.
    t1.put("a".to_owned(), "t1".to_owned()).await.unwrap();
    t1.put("z".to_owned(), "t1".to_owned()).await.unwrap();
    t1.commit().await.unwrap();

    let (mut t2, locked) = t2.await.unwrap();
    locked.expect("a write conflict in every Region is retried at a fresh for_update_ts");
    assert_eq!(
        t2.get_for_update("a".to_owned()).await.unwrap(),
        Some(b"t1".to_vec())
    );
    t2.put("z".to_owned(), "t2".to_owned()).await.unwrap();
    t2.commit().await.unwrap();
    settle(&client).await;
    assert_eq!(read(&client, "z").await, Some(b"t2".to_vec()));
    cluster.shutdown().await;
}
