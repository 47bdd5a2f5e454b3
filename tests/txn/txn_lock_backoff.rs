//! The lock backoff bounds a pessimistic lock that meets a live lock, as in
//! client-rust: every attempt waits on the server (TiKV's 1 s by default)
//! and spends one of the backoff's attempts, with the backoff's delays in
//! between, and when they are spent the live lock is the answer
//! (`PessimisticLockError` around `ResolveLockError`). Readers still wait a
//! live lock out by its TTL within the deadline, whatever the backoff.
//!
//! The cases of client-rust 0.4.0's `txn_batch_mutate_pessimistic`,
//! `txn_lock_keys` and `txn_lock_keys_error_handle`, against an API v2
//! cluster whose TSO follows tokio's paused clock (so lock TTLs and
//! heartbeats run on the same clock as the waits).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::support::pessimistic;
use tikv_plan::backoff::DEFAULT_REGION_BACKOFF;
use tikv_plan::codec::encode_bytes;
use tikv_plan::proto::kvrpcpb::{self, ApiVersion};
use tikv_plan::transaction::LockWait;
use tikv_plan::{
    Backoff, Config, Error, Mutation, RetryOptions, TimestampExt, TransactionClient,
    TransactionOptions,
};
use tikv_sim::SimCluster;
use tokio::time::Instant;

/// The wire prefix of the DEFAULT keyspace's transactional keys.
const PREFIX: &[u8] = b"x\0\0\0";

fn wire(key: &str) -> Vec<u8> {
    [PREFIX, key.as_bytes()].concat()
}

/// An API v2 cluster of three stores, split at `splits` of the DEFAULT
/// keyspace, whose TSO follows tokio's clock.
async fn cluster(splits: &[&str]) -> SimCluster {
    let origin = Instant::now();
    let epoch = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .api_version(ApiVersion::V2)
        .split_keys(splits.iter().map(|k| encode_bytes(&wire(k))).collect())
        .tso_clock(move || epoch + origin.elapsed())
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

/// The retry options client-rust's `txn_batch_mutate_pessimistic` gives its
/// transactions: a lock backoff of two 500 ms delays.
fn two_tries_more() -> TransactionOptions {
    pessimistic().retry_options(RetryOptions {
        region_backoff: DEFAULT_REGION_BACKOFF,
        lock_backoff: Backoff::no_jitter_backoff(500, 500, 2),
    })
}

/// The sum of the delays of the default lock backoff (2 ms doubling, at
/// most 500 ms, ten of them).
const DEFAULT_BACKOFF_DELAYS: Duration =
    Duration::from_millis(2 + 4 + 8 + 16 + 32 + 64 + 128 + 256 + 500 + 500);
/// TiKV's default `wait-for-lock-timeout`, which `wait_timeout` 0 asks for.
const SERVER_WAIT: Duration = Duration::from_secs(1);
/// What the client's own steps may add on the paused clock (lock
/// resolution and the release after the failure take no time there, but
/// the TSO's batching does).
const SLACK: Duration = Duration::from_millis(100);

/// The live lock a failed pessimistic lock reports: client-rust's shape,
/// `PessimisticLockError` around `ResolveLockError`.
fn live_lock_of(err: &Error) -> &kvrpcpb::LockInfo {
    match err {
        Error::PessimisticLockError { inner, .. } => match &**inner {
            Error::ResolveLockError(locks) if !locks.is_empty() => &locks[0],
            other => panic!("expected the live lock inside, got {other:?}"),
        },
        other => panic!("expected a pessimistic lock error, got {other:?}"),
    }
}

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

/// client-rust's `txn_batch_mutate_pessimistic`: a lock backoff of two
/// 500 ms delays gives three attempts, each held 1 s by the server, so the
/// blocked mutation fails after 3 x 1 s + 2 x 0.5 s = 4 s (it took the
/// whole 20 s request deadline before). A second one, waiting when the
/// holder rolls back, is woken and succeeds.
#[tokio::test(start_paused = true)]
async fn an_explicit_lock_backoff_bounds_a_blocked_lock_server_waits_included() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    let mut holder = client.begin_with_options(pessimistic()).await.unwrap();
    holder.put("k0".to_owned(), "vv".to_owned()).await.unwrap();
    let mutations = || {
        vec![
            Mutation::Delete("k0".to_owned().into()),
            Mutation::Put("k1".to_owned().into(), "v1".to_owned().into()),
            Mutation::Put("k2".to_owned().into(), "v2".to_owned().into()),
        ]
    };

    let mut blocked = client.begin_with_options(two_tries_more()).await.unwrap();
    let started = Instant::now();
    let err = blocked.batch_mutate(mutations()).await.unwrap_err();
    let took = started.elapsed();
    let lock = live_lock_of(&err);
    assert_eq!(lock.key, wire("k0"));
    assert_eq!(lock.lock_version, holder.start_timestamp().version());
    let expected = 3 * SERVER_WAIT + Duration::from_millis(2 * 500);
    assert!(
        took >= expected && took < expected + SLACK,
        "{took:?}, expected {expected:?}"
    );
    let stats = cluster.lock_wait_stats();
    assert_eq!((stats.waits, stats.timed_out), (3, 3), "{stats:?}");
    // What the failed lock took on k1 and k2 was given back.
    assert!(
        cluster.locks(&wire("k1"), &wire("k3")).is_empty(),
        "{:?}",
        cluster.locks(b"", b"")
    );
    blocked.rollback().await.unwrap();

    let woken = tokio::spawn({
        let client = client.clone();
        async move {
            let mut txn = client.begin_with_options(two_tries_more()).await?;
            txn.batch_mutate(mutations()).await?;
            txn.commit().await
        }
    });
    until_waiting(&cluster, 1).await;
    holder.rollback().await.unwrap();
    woken.await.unwrap().unwrap();
    let mut snapshot = client.snapshot(
        client.current_timestamp().await.unwrap(),
        TransactionOptions::new_optimistic(),
    );
    let mut read = snapshot
        .batch_get(vec!["k0".to_owned(), "k1".to_owned(), "k2".to_owned()])
        .await
        .unwrap()
        .map(|p| (Vec::from(p.0), p.1))
        .collect::<Vec<_>>();
    read.sort();
    assert_eq!(
        read,
        vec![
            (b"k1".to_vec(), b"v1".to_vec()),
            (b"k2".to_vec(), b"v2".to_vec())
        ]
    );
    cluster.shutdown().await;
}

/// client-rust's `txn_lock_keys`: the optimistic half fails at commit at
/// once; in the pessimistic half the default lock backoff (ten delays, 2 ms
/// doubling to 500 ms) gives eleven attempts of 1 s on the server, so the
/// blocked lock fails after 11 s + 1.51 s, as in client-rust (the whole 20 s
/// deadline before). Once the holder rolls back, the same keys lock at once.
#[tokio::test(start_paused = true)]
async fn the_default_lock_backoff_bounds_a_blocked_lock_as_client_rusts_does() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;

    let started = Instant::now();
    let mut t1 = client.begin_optimistic().await.unwrap();
    let mut t2 = client.begin_optimistic().await.unwrap();
    t1.lock_keys(vec!["key1".to_owned(), "key2".to_owned()])
        .await
        .unwrap();
    t2.put("key1".to_owned(), "v".to_owned()).await.unwrap();
    t2.commit().await.unwrap();
    assert!(t1.commit().await.is_err(), "a write conflict at prewrite");
    assert!(started.elapsed() < SLACK, "{:?}", started.elapsed());

    let keys = || vec!["key3".to_owned(), "key4".to_owned()];
    let mut t3 = client.begin_with_options(pessimistic()).await.unwrap();
    let mut t4 = client.begin_with_options(pessimistic()).await.unwrap();
    t3.lock_keys(keys()).await.unwrap();
    let started = Instant::now();
    let err = t4.lock_keys(keys()).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        live_lock_of(&err).lock_version,
        t3.start_timestamp().version()
    );
    let expected = 11 * SERVER_WAIT + DEFAULT_BACKOFF_DELAYS;
    assert!(
        took >= expected && took < expected + SLACK,
        "{took:?}, expected {expected:?}"
    );
    let stats = cluster.lock_wait_stats();
    assert_eq!((stats.waits, stats.timed_out), (11, 11), "{stats:?}");

    t3.rollback().await.unwrap();
    let started = Instant::now();
    t4.lock_keys(keys()).await.unwrap();
    t4.commit().await.unwrap();
    assert!(started.elapsed() < SLACK, "{:?}", started.elapsed());
    assert_eq!(cluster.lock_wait_stats().waits, 11);
    cluster.shutdown().await;
}

/// client-rust's `txn_lock_keys_error_handle`: keys in four Regions. t2's
/// lock of `a` (held by t1) and `p` fails after the default backoff, and
/// gives `p` back, so t3 locks `p` and `w` at once; after t1 and t3 roll
/// back, t2 locks again and commits.
#[tokio::test(start_paused = true)]
async fn a_lock_blocked_in_one_region_gives_back_what_it_took_in_another() {
    let cluster = cluster(&["f", "m", "t"]).await;
    let client = client(&cluster).await;
    let (a, h, p, w) = (
        "a".to_owned(),
        "h".to_owned(),
        "p".to_owned(),
        "w".to_owned(),
    );

    let mut t1 = client.begin_with_options(pessimistic()).await.unwrap();
    let mut t2 = client.begin_with_options(pessimistic()).await.unwrap();
    let mut t3 = client.begin_with_options(pessimistic()).await.unwrap();
    t1.lock_keys(vec![a.clone(), h.clone()]).await.unwrap();
    let started = Instant::now();
    let err = t2.lock_keys(vec![a.clone(), p.clone()]).await.unwrap_err();
    let took = started.elapsed();
    let lock = live_lock_of(&err);
    assert_eq!(
        (lock.key.clone(), lock.lock_version),
        (wire("a"), t1.start_timestamp().version())
    );
    let expected = 11 * SERVER_WAIT + DEFAULT_BACKOFF_DELAYS;
    assert!(
        took >= expected && took < expected + SLACK,
        "{took:?}, expected {expected:?}"
    );
    assert!(cluster.locks(&wire("p"), &wire("q")).is_empty());

    let started = Instant::now();
    t3.lock_keys(vec![p.clone(), w.clone()]).await.unwrap();
    assert!(started.elapsed() < SLACK, "{:?}", started.elapsed());
    assert_eq!(cluster.lock_wait_stats().waits, 11, "t3 never waited");

    t1.rollback().await.unwrap();
    t3.rollback().await.unwrap();
    t2.lock_keys(vec![a, p]).await.unwrap();
    t2.commit().await.unwrap();
    cluster.shutdown().await;
}

/// With no wait on the server, the backoff's delays alone bound the lock:
/// three answers at once, 2 x 500 ms between them.
#[tokio::test(start_paused = true)]
async fn without_a_server_wait_the_backoffs_delays_alone_bound_the_lock() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    let mut holder = client.begin_with_options(pessimistic()).await.unwrap();
    holder.lock_keys(vec!["k".to_owned()]).await.unwrap();

    let mut blocked = client
        .begin_with_options(two_tries_more().lock_wait(LockWait::NoWait))
        .await
        .unwrap();
    let started = Instant::now();
    let err = blocked.lock_keys(vec!["k".to_owned()]).await.unwrap_err();
    let took = started.elapsed();
    assert_eq!(
        live_lock_of(&err).lock_version,
        holder.start_timestamp().version()
    );
    let expected = Duration::from_millis(2 * 500);
    assert!(
        took >= expected && took < expected + SLACK,
        "{took:?}, expected {expected:?}"
    );
    assert_eq!(cluster.lock_wait_stats().waits, 0);
    blocked.rollback().await.unwrap();
    holder.rollback().await.unwrap();
    cluster.shutdown().await;
}

/// A writer that crashed after prewriting `key` (its own primary) with a
/// 3 s TTL, sent by hand to the key's leader. Returns its start ts.
async fn crashed_prewrite(cluster: &SimCluster, key: &str) -> u64 {
    let start = cluster.current_ts();
    let region = cluster.region_for_key(&encode_bytes(&wire(key))).unwrap();
    let store = cluster.leader_of(region.id).unwrap().store_id;
    let mut context = cluster.context(region.id, store).unwrap();
    context.api_version = ApiVersion::V2 as i32;
    let request = kvrpcpb::PrewriteRequest {
        context: Some(context),
        mutations: vec![kvrpcpb::Mutation {
            op: kvrpcpb::Op::Put as i32,
            key: wire(key),
            value: b"crashed".to_vec(),
            ..Default::default()
        }],
        primary_lock: wire(key),
        start_version: start,
        lock_ttl: 3_000,
        ..Default::default()
    };
    let mut tikv = cluster.tikv_client(store).await.unwrap();
    let response = tikv.kv_prewrite(request).await.unwrap().into_inner();
    assert!(response.errors.is_empty(), "{response:?}");
    start
}

/// Readers are not bounded by the lock backoff: one with client-rust's
/// two 500 ms delays waits a crashed writer's lock out by its 3 s TTL, rolls
/// it back and reads.
#[tokio::test(start_paused = true)]
async fn a_reader_waits_a_live_lock_out_by_its_ttl_whatever_the_lock_backoff() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster).await;
    let start = crashed_prewrite(&cluster, "k").await;

    let started = Instant::now();
    let mut snapshot = client.snapshot(client.current_timestamp().await.unwrap(), two_tries_more());
    assert_eq!(snapshot.get("k".to_owned()).await.unwrap(), None);
    let took = started.elapsed();
    assert!(
        took >= Duration::from_millis(2_900) && took < Duration::from_secs(4),
        "{took:?}"
    );
    assert!(cluster
        .versions(&wire("k"))
        .iter()
        .any(|v| v.kind == "rollback" && v.start_ts == start));
    cluster.shutdown().await;
}
