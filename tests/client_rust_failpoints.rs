//! client-rust's fail points, by their names, driven as client-rust's own
//! fail-point tests drive them: `after-prewrite` (the client stops after
//! prewriting, leaving its locks), `before-commit-secondary` (with the
//! `integration-tests` feature: only part of the secondaries is committed)
//! and `before-cleanup-locks` (the locks are counted, not cleaned). What
//! `cleanup_locks` then does with the locks left behind is the point: 2PC
//! locks roll back whatever their TTL (`async_commit_only` skips them),
//! async-commit locks commit from their secondaries. An API v2 cluster (the
//! keyspace `DEFAULT`) split into several Regions, as client-rust's CI runs.
//!
//! Fail points are process-wide, so this is a binary of its own and its
//! tests take turns.
#![cfg(all(feature = "failpoints", feature = "integration-tests"))]

use std::collections::BTreeSet;

use tikv_plan::codec::encode_bytes;
use tikv_plan::proto::kvrpcpb::ApiVersion;
use tikv_plan::transaction::ResolveLocksOptions;
use tikv_plan::{
    Backoff, CheckLevel, Config, Error, RetryOptions, TransactionClient, TransactionOptions,
};
use tikv_sim::SimCluster;

static FAIL_POINTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// API v2, three stores, the transactional key space of keyspace 0 split
/// at the encodings of `x\0\0\0` followed by 'c', 'f', 'm' and 's'.
async fn cluster() -> SimCluster {
    let mut splits = vec![encode_bytes(b"x\0\0\0"), encode_bytes(b"x\0\0\x01")];
    for c in [b'c', b'f', b'm', b's'] {
        splits.push(encode_bytes(&[b'x', 0, 0, 0, c]));
    }
    splits.sort();
    SimCluster::builder()
        .stores(3)
        .api_version(ApiVersion::V2)
        .split_keys(splits)
        .start()
        .await
        .unwrap()
}

async fn client(cluster: &SimCluster) -> TransactionClient {
    TransactionClient::new_with_config(
        cluster.pd_endpoints(),
        Config::default().with_default_keyspace(),
    )
    .await
    .unwrap()
}

fn keys(txn: usize) -> Vec<String> {
    ["a", "d", "g", "n", "t"]
        .iter()
        .map(|k| format!("{k}{txn}"))
        .collect()
}

/// Four transactions over five Regions, each writing its keys as values;
/// every commit must fail (`fails`) or succeed. Returns every key.
async fn write(client: &TransactionClient, async_commit: bool, fails: bool) -> BTreeSet<String> {
    let mut options = TransactionOptions::new_optimistic()
        .retry_options(RetryOptions::new(
            Backoff::no_jitter_backoff(2, 5000, 20),
            Backoff::no_jitter_backoff(2, 500, 10),
        ))
        .drop_check(CheckLevel::Warn);
    if async_commit {
        options = options.use_async_commit();
    }
    let mut all = BTreeSet::new();
    for t in 0..4 {
        let mut txn = client.begin_with_options(options.clone()).await.unwrap();
        for key in keys(t) {
            txn.put(key.clone(), key.clone()).await.unwrap();
            all.insert(key);
        }
        let result = txn.commit().await;
        assert_eq!(result.is_err(), fails, "{result:?}");
        if fails {
            let message = result.unwrap_err().to_string();
            assert!(message.contains("after-prewrite"), "{message}");
        }
    }
    all
}

async fn lock_count(client: &TransactionClient) -> usize {
    let ts = client.current_timestamp().await.unwrap();
    let locks = client.scan_locks(&ts, .., 1024).await.unwrap();
    locks
        .iter()
        .map(|l| l.key.clone())
        .collect::<BTreeSet<_>>()
        .len()
}

async fn values(client: &TransactionClient, keys: &BTreeSet<String>) -> Vec<Option<Vec<u8>>> {
    let ts = client.current_timestamp().await.unwrap();
    let mut snapshot = client.snapshot(ts, TransactionOptions::new_optimistic());
    let mut found = Vec::new();
    for key in keys {
        found.push(snapshot.get(key.clone()).await.unwrap());
    }
    found
}

/// A fresh cluster and client, and the keys of four transactions written
/// with fail point `name` set to `action` (then off again).
async fn written_with(
    name: &str,
    action: &str,
    async_commit: bool,
    fails: bool,
) -> (SimCluster, TransactionClient, BTreeSet<String>) {
    let cluster = cluster().await;
    let client = client(&cluster).await;
    fail::cfg(name, action).unwrap();
    let keys = write(&client, async_commit, fails).await;
    if fails {
        fail::cfg(name, "off").unwrap();
    }
    (cluster, client, keys)
}

/// `cleanup_locks` of async-commit locks leaves none, and every key holds
/// its value: the transactions were committed.
async fn cleanup_commits_them(client: &TransactionClient, keys: &BTreeSet<String>) {
    let safepoint = client.current_timestamp().await.unwrap();
    client
        .cleanup_locks(.., &safepoint, options(true))
        .await
        .unwrap();
    assert_eq!(lock_count(client).await, 0);
    let expected: Vec<_> = keys.iter().map(|k| Some(k.as_bytes().to_vec())).collect();
    assert_eq!(values(client, keys).await, expected);
}

fn options(async_commit_only: bool) -> ResolveLocksOptions {
    ResolveLocksOptions {
        async_commit_only,
        ..Default::default()
    }
}

#[tokio::test]
async fn two_phase_locks_left_after_prewrite_are_rolled_back_whatever_their_ttl() {
    let _serial = FAIL_POINTS.lock().await;
    let scenario = fail::FailScenario::setup();
    let (cluster, client, keys) = written_with("after-prewrite", "return", false, true).await;
    assert_eq!(lock_count(&client).await, keys.len());

    // Skipped: none is an async-commit lock.
    let safepoint = client.current_timestamp().await.unwrap();
    let skipped = client
        .cleanup_locks(.., &safepoint, options(true))
        .await
        .unwrap();
    assert_eq!(skipped.resolved_locks, 0);
    assert_eq!(lock_count(&client).await, keys.len());

    // Live (their TTL is seconds away), and rolled back all the same.
    let cleaned = client
        .cleanup_locks(.., &safepoint, options(false))
        .await
        .unwrap();
    assert_eq!(cleaned.resolved_locks, keys.len());
    assert_eq!(lock_count(&client).await, 0);
    assert!(values(&client, &keys).await.iter().all(Option::is_none));
    scenario.teardown();
    cluster.shutdown().await;
}

#[tokio::test]
async fn async_commit_locks_left_after_prewrite_are_committed_from_their_secondaries() {
    let _serial = FAIL_POINTS.lock().await;
    let scenario = fail::FailScenario::setup();
    let (cluster, client, keys) = written_with("after-prewrite", "return", true, true).await;
    assert_eq!(lock_count(&client).await, keys.len());
    cleanup_commits_them(&client, &keys).await;
    scenario.teardown();
    cluster.shutdown().await;
}

#[tokio::test]
async fn before_commit_secondary_commits_only_the_share_it_is_given() {
    let _serial = FAIL_POINTS.lock().await;
    let scenario = fail::FailScenario::setup();
    let (cluster, client, keys) =
        written_with("before-commit-secondary", "return(40)", true, false).await;
    // Each transaction of five keys commits two of them in the background
    // (40%) and leaves three locked, once its background commit is done.
    while client.stats().secondary_commits_pending > 0 {
        tokio::task::yield_now().await;
    }
    assert_eq!(client.stats().secondary_commits, 4);
    let left = lock_count(&client).await;
    assert_eq!(left, 12);
    fail::cfg("before-commit-secondary", "off").unwrap();
    cleanup_commits_them(&client, &keys).await;
    scenario.teardown();
    cluster.shutdown().await;
}

#[tokio::test]
async fn before_cleanup_locks_counts_the_locks_and_leaves_them() {
    let _serial = FAIL_POINTS.lock().await;
    let scenario = fail::FailScenario::setup();
    let (cluster, client, keys) = written_with("after-prewrite", "return", true, true).await;
    fail::cfg("before-cleanup-locks", "return").unwrap();
    let safepoint = client.current_timestamp().await.unwrap();
    let result = client
        .cleanup_locks(
            ..,
            &safepoint,
            ResolveLocksOptions {
                async_commit_only: false,
                batch_size: 2,
            },
        )
        .await
        .unwrap();
    fail::cfg("before-cleanup-locks", "off").unwrap();
    assert_eq!(result.resolved_locks, keys.len());
    assert_eq!(lock_count(&client).await, keys.len());
    scenario.teardown();
    cluster.shutdown().await;
}

/// Without the fail points configured, the same writes commit, and the
/// error of a stopped commit is client-rust's `StringError`.
#[tokio::test]
async fn the_after_prewrite_error_is_client_rusts() {
    let _serial = FAIL_POINTS.lock().await;
    let scenario = fail::FailScenario::setup();
    let cluster = cluster().await;
    let client = client(&cluster).await;
    let keys = write(&client, false, false).await;
    assert_eq!(lock_count(&client).await, 0);
    fail::cfg("after-prewrite", "return").unwrap();
    let mut txn = client
        .begin_with_options(TransactionOptions::new_optimistic().drop_check(CheckLevel::Warn))
        .await
        .unwrap();
    txn.put("z".to_owned(), "v".to_owned()).await.unwrap();
    let error = txn.commit().await.unwrap_err();
    fail::cfg("after-prewrite", "off").unwrap();
    assert!(
        matches!(&error, Error::StringError(m) if m == "failpoint: after-prewrite return error"),
        "{error:?}"
    );
    assert!(!keys.is_empty());
    scenario.teardown();
    cluster.shutdown().await;
}
