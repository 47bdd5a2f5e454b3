//! Pessimistic transactions against a simulator that holds lock requests
//! as TiKV does (waiting for the lock's release up to the server's wait,
//! detecting deadlocks): a deadlock reaches the caller at once in
//! client-rust's shape, a woken lock request is retried at a new
//! `for_update_ts`, the wait is the caller's choice, and a request the
//! server holds as asked is never taken for a dead store.

use std::time::Duration;

use crate::support::{client_with, cluster, pessimistic, read};
use tikv_plan::transaction::LockWait;
use tikv_plan::{Config, Error, TimestampExt, TransactionOptions};
use tikv_sim::{key_hash, SimCluster};

/// Waits (on the paused clock) until `n` lock requests wait on the server.
async fn until_waiting(cluster: &SimCluster, n: usize) {
    for _ in 0..10_000 {
        if cluster.lock_waiters() == n {
            return;
        }
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    panic!("{} waiters, expected {n}", cluster.lock_waiters());
}

#[tokio::test(start_paused = true)]
async fn a_deadlock_fails_the_closing_lock_at_once_and_the_other_transaction_commits() {
    let cluster = cluster(&["m"]).await;
    let client = client_with(&cluster, Config::default()).await;
    let mut t1 = client.begin_with_options(pessimistic()).await.unwrap();
    let mut t2 = client.begin_with_options(pessimistic()).await.unwrap();
    t1.lock_keys(vec!["a".to_owned()]).await.unwrap();
    t2.lock_keys(vec!["z".to_owned()]).await.unwrap();
    let (t1_ts, t2_ts) = (
        t1.start_timestamp().version(),
        t2.start_timestamp().version(),
    );

    // t1 asks for `z` and waits on the server for t2.
    let t1_task = tokio::spawn(async move {
        t1.put("z".to_owned(), "t1".to_owned()).await?;
        t1.put("a".to_owned(), "t1".to_owned()).await?;
        t1.commit().await?;
        Ok::<_, Error>(())
    });
    until_waiting(&cluster, 1).await;

    // t2 asks for `a`: the cycle closes; t2 is told at once.
    let asked = tokio::time::Instant::now();
    let err = t2.put("a".to_owned(), "t2".to_owned()).await.unwrap_err();
    assert!(
        asked.elapsed() < Duration::from_millis(100),
        "{:?}",
        asked.elapsed()
    );
    assert!(
        matches!(err, Error::PessimisticLockError { .. }),
        "client-rust's shape: {err:?}"
    );
    let deadlock = err.deadlock().expect("a deadlock").clone();
    assert_eq!(deadlock.lock_ts, t1_ts);
    assert_eq!(deadlock.lock_key, b"a");
    assert_eq!(deadlock.deadlock_key_hash, key_hash(b"z"));
    let chain: Vec<(u64, u64)> = deadlock
        .wait_chain
        .iter()
        .map(|e| (e.txn, e.wait_for_txn))
        .collect();
    assert_eq!(chain, vec![(t1_ts, t2_ts), (t2_ts, t1_ts)]);
    assert!(err.to_string().contains("deadlock"), "{err}");

    // t2 rolls back, as the docs say to; t1 is woken, retries its lock at
    // a new for_update_ts and commits, well within one server wait; then
    // t2's work runs again.
    t2.rollback().await.unwrap();
    t1_task.await.unwrap().unwrap();
    assert!(
        asked.elapsed() < Duration::from_secs(1),
        "{:?}",
        asked.elapsed()
    );
    assert_eq!(read(&client, "a").await, Some(b"t1".to_vec()));
    assert_eq!(read(&client, "z").await, Some(b"t1".to_vec()));
    // The loser runs again, now alone, and commits.
    let mut again = client.begin_with_options(pessimistic()).await.unwrap();
    again.put("z".to_owned(), "t2".to_owned()).await.unwrap();
    again.put("a".to_owned(), "t2".to_owned()).await.unwrap();
    again.commit().await.unwrap();
    assert_eq!(read(&client, "a").await, Some(b"t2".to_vec()));
    let stats = cluster.lock_wait_stats();
    assert_eq!((stats.deadlocks, stats.woken), (1, 1));
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_lock_woken_by_the_holders_commit_is_retried_and_reads_the_commit() {
    let cluster = cluster(&[]).await;
    let client = client_with(&cluster, Config::default()).await;
    let mut holder = client.begin_with_options(pessimistic()).await.unwrap();
    holder
        .put("k".to_owned(), "holder".to_owned())
        .await
        .unwrap();

    let reader_client = client.clone();
    let reader = tokio::spawn(async move {
        let mut txn = reader_client
            .begin_with_options(pessimistic())
            .await
            .unwrap();
        let seen = txn.get_for_update("k".to_owned()).await?;
        txn.rollback().await?;
        Ok::<_, Error>(seen)
    });
    until_waiting(&cluster, 1).await;
    holder.commit().await.unwrap();
    // Woken with a write conflict, the lock is taken again at a fresh
    // for_update_ts and reads the holder's value.
    assert_eq!(reader.await.unwrap().unwrap(), Some(b"holder".to_vec()));
    assert_eq!(cluster.lock_wait_stats().woken, 1);
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_request_held_longer_than_the_rpc_timeout_is_asked_to_wait_less_not_timed_out() {
    let cluster = cluster(&[]).await;
    // A 300 ms RPC timeout, below the server's 1 s default wait.
    let config = Config::default()
        .with_timeout(Duration::from_millis(300))
        .with_request_deadline(Duration::from_secs(3));
    let client = client_with(&cluster, config).await;
    let mut holder = client.begin_with_options(pessimistic()).await.unwrap();
    holder.lock_keys(vec!["k".to_owned()]).await.unwrap();

    let mut waiter = client.begin_with_options(pessimistic()).await.unwrap();
    let err = waiter
        .put("k".to_owned(), "w".to_owned())
        .await
        .unwrap_err();
    // The live lock is the answer, not a timeout: every wait the client
    // asked for fitted in its RPCs, and no store was suspected.
    match &err {
        Error::PessimisticLockError { inner, .. } => {
            assert!(matches!(**inner, Error::ResolveLockError(_)), "{inner:?}")
        }
        other => panic!("expected a pessimistic lock error, got {other:?}"),
    }
    let routing = client.routing_stats();
    assert_eq!(routing.fallback_attempts, 0, "{routing:?}");
    assert_eq!(routing.store_invalidations, 0, "{routing:?}");
    assert_eq!(routing.region_invalidations, 0, "{routing:?}");
    assert_eq!(routing.stores_marked_unreachable, 0, "{routing:?}");
    let stats = cluster.lock_wait_stats();
    assert!(
        stats.waits > 0 && stats.timed_out == stats.waits,
        "{stats:?}"
    );
    waiter.rollback().await.unwrap();
    holder.rollback().await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_lock_wait_is_the_callers_choice() {
    let cluster = cluster(&[]).await;
    let config = Config::default().with_request_deadline(Duration::from_millis(500));
    let client = client_with(&cluster, config).await;
    let mut holder = client.begin_with_options(pessimistic()).await.unwrap();
    holder.lock_keys(vec!["k".to_owned()]).await.unwrap();

    // No wait: the server answers at once, and the client polls the live
    // lock by its lock backoff (1.51 s of delays), here cut by its deadline.
    let mut no_wait = client
        .begin_with_options(pessimistic().lock_wait(LockWait::NoWait))
        .await
        .unwrap();
    let err = no_wait.lock_keys(vec!["k".to_owned()]).await.unwrap_err();
    assert!(matches!(err, Error::PessimisticLockError { .. }), "{err:?}");
    assert_eq!(cluster.lock_wait_stats().waits, 0);
    no_wait.rollback().await.unwrap();

    // A short wait: every request waits at most that long on the server.
    let mut short = client
        .begin_with_options(pessimistic().lock_wait(LockWait::Timeout(Duration::from_millis(40))))
        .await
        .unwrap();
    let started = tokio::time::Instant::now();
    let err = short.lock_keys(vec!["k".to_owned()]).await.unwrap_err();
    assert!(matches!(err, Error::PessimisticLockError { .. }), "{err:?}");
    let stats = cluster.lock_wait_stats();
    assert!(
        stats.waits >= 2,
        "several short waits within 500 ms: {stats:?}"
    );
    assert!(started.elapsed() <= Duration::from_millis(600));
    short.rollback().await.unwrap();
    holder.rollback().await.unwrap();
    // Client-rust's default: the server's default wait.
    assert_eq!(
        TransactionOptions::new_pessimistic().lock_wait_policy(),
        LockWait::ServerDefault
    );
    assert_eq!(LockWait::ServerDefault.wait_timeout(), 0);
    assert_eq!(LockWait::NoWait.wait_timeout(), -1);
    cluster.shutdown().await;
}
