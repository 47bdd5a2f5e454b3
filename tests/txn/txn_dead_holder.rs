//! What a transaction whose client died, or that waits itself, costs the
//! others: its locks outlive it by 3 s when it dies young (the TTL every
//! lock is given, and the heartbeat's lease grows with the transaction's
//! age), and a prewrite that waits for an older transaction's lock gives
//! up after the lock backoff (wait-die), so a prewrite and a pessimistic
//! transaction waiting for each other — a cycle TiKV's deadlock detector
//! cannot see — never hold each other up for the whole deadline.
//!
//! Against a cluster whose TSO follows tokio's paused clock, so lock TTLs,
//! heartbeats and waits run on one clock.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tikv_plan::codec::encode_bytes;
use tikv_plan::transaction::{HeartbeatOption, DEFAULT_LOCK_TTL, MAX_TTL};
use tikv_plan::{Error, TimestampExt};
use tikv_sim::SimCluster;
use tokio::time::Instant;

use crate::support::{client, optimistic, pessimistic, read};

/// Three stores, Regions split at `splits`, the TSO on tokio's clock.
async fn cluster(splits: &[&str]) -> SimCluster {
    let origin = Instant::now();
    let epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(splits.iter().map(|k| encode_bytes(k.as_bytes())).collect())
        .tso_clock(move || epoch + origin.elapsed())
        .start()
        .await
        .unwrap()
}

/// The TTL of the lock on `key`, in ms from its transaction's start.
fn ttl_of(cluster: &SimCluster, key: &str) -> u64 {
    let locks = cluster.locks(key.as_bytes(), &[key.as_bytes(), b"\0"].concat());
    assert_eq!(locks.len(), 1, "{locks:?}");
    locks[0].lock_ttl
}

#[tokio::test(start_paused = true)]
async fn every_lock_outlives_a_dead_holder_by_3_s_not_20() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster).await;
    // A pessimistic lock, and the prewrites of each kind, stopped before
    // their commit: the TTLs they were written with.
    let mut locker = client.begin_with_options(pessimistic()).await.unwrap();
    locker.lock_keys(vec!["p".to_owned()]).await.unwrap();
    assert!(
        ttl_of(&cluster, "p") <= DEFAULT_LOCK_TTL + 50,
        "{}",
        ttl_of(&cluster, "p")
    );
    locker.rollback().await.unwrap();
    for (name, options) in [
        ("async commit", optimistic().use_async_commit()),
        ("1PC over two Regions", optimistic().try_one_pc()),
        ("optimistic", optimistic()),
    ] {
        let mut txn = client.begin_with_options(options).await.unwrap();
        txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
        txn.put("z".to_owned(), "1".to_owned()).await.unwrap();
        // A pessimistic lock in the way holds the prewrite of "z" back, so
        // "a" can be looked at while prewritten.
        let mut blocker = client.begin_with_options(pessimistic()).await.unwrap();
        blocker.lock_keys(vec!["z".to_owned()]).await.unwrap();
        let committing = tokio::spawn(async move { txn.commit().await });
        tokio::time::sleep(Duration::from_millis(20)).await;
        let ttl = ttl_of(&cluster, "a");
        assert!(
            (DEFAULT_LOCK_TTL..DEFAULT_LOCK_TTL + 100).contains(&ttl),
            "{name}: {ttl}"
        );
        blocker.rollback().await.unwrap();
        committing.await.unwrap().unwrap();
    }
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_pessimistic_lock_of_a_transaction_that_died_young_is_taken_after_3_s() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    // Its client gone: no heartbeat, no rollback.
    let mut dead = client
        .begin_with_options(pessimistic().heartbeat_option(HeartbeatOption::NoHeartbeat))
        .await
        .unwrap();
    dead.lock_keys(vec!["k".to_owned()]).await.unwrap();
    std::mem::forget(dead);

    let asked = Instant::now();
    let mut living = client.begin_with_options(pessimistic()).await.unwrap();
    living.put("k".to_owned(), "mine".to_owned()).await.unwrap();
    living.commit().await.unwrap();
    let took = asked.elapsed();
    // Three server waits of 1 s at most, and the backoff between them.
    assert!(
        took >= Duration::from_millis(DEFAULT_LOCK_TTL - 100)
            && took < Duration::from_millis(4_500),
        "{took:?}"
    );
    assert_eq!(read(&client, "k").await, Some(b"mine".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn the_heartbeat_leases_the_primary_for_about_the_transaction_s_age() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    let mut txn = client.begin_with_options(pessimistic()).await.unwrap();
    let begun = Instant::now();
    txn.lock_keys(vec!["k".to_owned()]).await.unwrap();
    // Heartbeats at 1.5 s (lease 3 s), 3 s (3 s), 4.5 s (4.5 s), ...: the
    // lock stays alive, and outlives a death now by about 4.5 s, not 20.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let age = begun.elapsed().as_millis() as u64;
    let ttl = ttl_of(&cluster, "k");
    assert!(
        ttl > age + 1_000 && ttl <= age + 5_000,
        "ttl {ttl} at {age}"
    );
    assert!(client.stats().heartbeats >= 3, "{:?}", client.stats());
    // A long transaction gets the whole 20 s.
    tokio::time::sleep(Duration::from_secs(60)).await;
    let age = begun.elapsed().as_millis() as u64;
    let ttl = ttl_of(&cluster, "k");
    assert!(
        ttl > age + MAX_TTL / 2 && ttl <= age + MAX_TTL,
        "ttl {ttl} at {age}"
    );
    txn.rollback().await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_prewrite_waiting_for_an_older_transaction_gives_up_and_the_older_commits() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster).await;
    // The older transaction holds a pessimistic lock on "z"; the younger
    // prewrites "a" and meets it; then the older asks for "a". Each waits
    // for the other, both alive (heartbeats), and no detector sees the
    // prewrite's wait.
    let mut older = client.begin_with_options(pessimistic()).await.unwrap();
    let mut younger = client.begin_with_options(optimistic()).await.unwrap();
    assert!(older.start_timestamp().version() < younger.start_timestamp().version());
    older.lock_keys(vec!["z".to_owned()]).await.unwrap();
    younger
        .put("a".to_owned(), "young".to_owned())
        .await
        .unwrap();
    younger
        .put("z".to_owned(), "young".to_owned())
        .await
        .unwrap();
    let committing = tokio::spawn(async move {
        let result = younger.commit().await.map(|_| ());
        (younger, result)
    });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let asked = Instant::now();
    older.put("a".to_owned(), "old".to_owned()).await.unwrap();
    older.put("z".to_owned(), "old".to_owned()).await.unwrap();
    older.commit().await.unwrap();
    let took = asked.elapsed();
    let (_younger, result) = committing.await.unwrap();
    // The younger gave up after the lock backoff (about 1.5 s) and rolled
    // back, the older got "a" as its lock went: well inside the 20 s
    // deadline both would have waited out before.
    assert!(took < Duration::from_secs(3), "{took:?}");
    match result {
        Err(Error::ResolveLockError(locks)) => {
            assert_eq!(locks[0].lock_version, older.start_timestamp().version())
        }
        other => panic!("expected the older lock in the way, got {other:?}"),
    }
    assert_eq!(read(&client, "a").await, Some(b"old".to_vec()));
    assert_eq!(read(&client, "z").await, Some(b"old".to_vec()));
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}

#[tokio::test(start_paused = true)]
async fn a_prewrite_waits_for_a_younger_transactions_lock_past_the_backoff() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster).await;
    let mut older = client.begin_with_options(optimistic()).await.unwrap();
    let mut younger = client.begin_with_options(pessimistic()).await.unwrap();
    younger.lock_keys(vec!["z".to_owned()]).await.unwrap();
    older.put("a".to_owned(), "old".to_owned()).await.unwrap();
    older.put("z".to_owned(), "old".to_owned()).await.unwrap();
    let asked = Instant::now();
    let committing = tokio::spawn(async move { older.commit().await });
    // Longer than the lock backoff (about 1.5 s): the older prewrite waits.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    younger.rollback().await.unwrap();
    committing.await.unwrap().unwrap();
    assert!(asked.elapsed() >= Duration::from_millis(2_500));
    assert_eq!(read(&client, "z").await, Some(b"old".to_vec()));
    cluster.shutdown().await;
}
