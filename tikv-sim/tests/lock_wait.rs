//! Lock waiting and deadlock detection of the simulated stores, as TiKV's
//! lock manager does them (legacy wake-up mode), driven over real gRPC on
//! 127.0.0.1 with the generated stubs. Waits run on tokio's paused clock:
//! a request's wait ends at its deadline or when a release wakes it,
//! whichever the clock reaches first.

mod txn_support;

use std::time::Duration;

use tikv_sim::proto::kvrpcpb::{self, write_conflict::Reason, KeyError, Mutation, Op};
use tikv_sim::{key_hash, LockWaitConfig, LockWaitStats, SimCluster};
use tokio::task::JoinHandle;
use txn_support::*;

/// A cluster whose Regions split at the encodings of `plain_splits`.
async fn cluster(plain_splits: &[&[u8]]) -> SimCluster {
    cluster_split_at(plain_splits).await
}

/// A pessimistic lock request of transaction `start` for `keys`.
fn lock_request(keys: &[&[u8]], start: u64, wait_timeout: i64) -> kvrpcpb::PessimisticLockRequest {
    kvrpcpb::PessimisticLockRequest {
        mutations: keys
            .iter()
            .map(|k| Mutation {
                op: Op::PessimisticLock as i32,
                key: k.to_vec(),
                ..Default::default()
            })
            .collect(),
        primary_lock: keys[0].to_vec(),
        start_version: start,
        for_update_ts: start,
        lock_ttl: 3_000,
        wait_timeout,
        ..Default::default()
    }
}

/// Sends `request` to the leader of its first key's Region.
async fn send_lock(
    cluster: &SimCluster,
    request: kvrpcpb::PessimisticLockRequest,
) -> kvrpcpb::PessimisticLockResponse {
    let key = request.mutations[0].key.clone();
    let (mut client, ctx) = client_for(cluster, &key).await;
    client
        .kv_pessimistic_lock(kvrpcpb::PessimisticLockRequest {
            context: Some(ctx),
            ..request
        })
        .await
        .unwrap()
        .into_inner()
}

/// Sends `request` in a task of its own: it may wait.
async fn spawn_lock(
    cluster: &SimCluster,
    request: kvrpcpb::PessimisticLockRequest,
) -> JoinHandle<kvrpcpb::PessimisticLockResponse> {
    let (mut client, ctx) = client_for(cluster, &request.mutations[0].key).await;
    tokio::spawn(async move {
        client
            .kv_pessimistic_lock(kvrpcpb::PessimisticLockRequest {
                context: Some(ctx),
                ..request
            })
            .await
            .unwrap()
            .into_inner()
    })
}

/// Takes a lock that must be granted at once.
async fn take(cluster: &SimCluster, keys: &[&[u8]], start: u64, first: bool) {
    let mut request = lock_request(keys, start, -1);
    request.is_first_lock = first;
    let response = send_lock(cluster, request).await;
    assert!(response.errors.is_empty(), "{:?}", response.errors);
}

/// Two Regions split at `m`; transaction `t1` holds `a` and `t2` holds
/// `z`, each as its first lock.
async fn two_holders() -> (SimCluster, u64, u64) {
    let cluster = cluster(&[b"m"]).await;
    let (t1, t2) = (tso(&cluster).await, tso(&cluster).await);
    take(&cluster, &[b"a"], t1, true).await;
    take(&cluster, &[b"z"], t2, true).await;
    (cluster, t1, t2)
}

/// Waits (on the paused clock) until `n` requests wait for locks.
async fn until_waiting(cluster: &SimCluster, n: usize) {
    for _ in 0..10_000 {
        if cluster.lock_waiters() == n {
            return;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_micros(100)).await;
    }
    panic!("{} waiters, expected {n}", cluster.lock_waiters());
}

/// Rolls back transaction `start`'s pessimistic locks on `keys`.
async fn pessimistic_rollback(cluster: &SimCluster, keys: &[&[u8]], start: u64) {
    let (mut client, ctx) = client_for(cluster, keys[0]).await;
    client
        .kv_pessimistic_rollback(kvrpcpb::PessimisticRollbackRequest {
            context: Some(ctx),
            start_version: start,
            for_update_ts: start,
            keys: keys.iter().map(|k| k.to_vec()).collect(),
        })
        .await
        .unwrap();
}

fn only_error(response: &kvrpcpb::PessimisticLockResponse) -> &KeyError {
    match response.errors.as_slice() {
        [error] => error,
        other => panic!("expected one key error, got {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_waiter_woken_by_a_commit_fails_with_a_write_conflict_naming_the_commit() {
    let cluster = cluster(&[]).await;
    // The holder prewrites `k` (a lock of the optimistic kind waits too).
    let holder = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"k", b"v")], b"k", holder)).await;
    let waiter = tso(&cluster).await;
    let asked = tokio::time::Instant::now();
    let waiting = spawn_lock(&cluster, lock_request(&[b"k"], waiter, 0)).await;
    until_waiting(&cluster, 1).await;
    let commit_ts = tso(&cluster).await;
    let committed = commit(&cluster, &[b"k"], holder, commit_ts).await;
    assert!(committed.error.is_none());

    let response = waiting.await.unwrap();
    let conflict = only_error(&response)
        .conflict
        .clone()
        .expect("a write conflict");
    assert_eq!(conflict.start_ts, waiter);
    assert_eq!(conflict.conflict_ts, holder);
    assert_eq!(conflict.conflict_commit_ts, commit_ts);
    assert_eq!(conflict.key, b"k");
    assert_eq!(conflict.primary, b"k");
    assert_eq!(conflict.reason, Reason::PessimisticRetry as i32);
    assert!(!only_error(&response).retryable.is_empty());
    // Woken by the commit, well before the 1 s wait ran out.
    assert!(asked.elapsed() < Duration::from_secs(1));
    assert_eq!(cluster.lock_waiters(), 0);
    let stats = cluster.lock_wait_stats();
    assert_eq!((stats.waits, stats.woken, stats.timed_out), (1, 1, 0));
}

#[tokio::test(start_paused = true)]
async fn a_rollback_wakes_with_commit_ts_zero_and_the_others_follow_after_the_delay() {
    let cluster = cluster(&[]).await;
    let holder = tso(&cluster).await;
    take(&cluster, &[b"k"], holder, true).await;
    // Three waiters, the middle start ts arriving last.
    let (a, b, c) = (
        tso(&cluster).await,
        tso(&cluster).await,
        tso(&cluster).await,
    );
    let first = spawn_lock(&cluster, lock_request(&[b"k"], a, 0)).await;
    until_waiting(&cluster, 1).await;
    let third = spawn_lock(&cluster, lock_request(&[b"k"], c, 0)).await;
    until_waiting(&cluster, 2).await;
    let second = spawn_lock(&cluster, lock_request(&[b"k"], b, 0)).await;
    until_waiting(&cluster, 3).await;

    let released = tokio::time::Instant::now();
    pessimistic_rollback(&cluster, &[b"k"], holder).await;
    // The smallest start ts at once, the others after the wake-up delay.
    let response = first.await.unwrap();
    let conflict = only_error(&response).conflict.clone().unwrap();
    assert_eq!(
        (conflict.conflict_ts, conflict.conflict_commit_ts),
        (holder, 0)
    );
    assert_eq!(cluster.lock_waiters(), 2);
    for waiting in [second, third] {
        let response = waiting.await.unwrap();
        let conflict = only_error(&response).conflict.clone().unwrap();
        assert_eq!(
            (conflict.conflict_ts, conflict.conflict_commit_ts),
            (holder, 0)
        );
    }
    assert!(released.elapsed() >= Duration::from_millis(20));
    assert!(released.elapsed() < Duration::from_secs(1));
    assert_eq!(cluster.lock_wait_stats().woken, 3);
}

#[tokio::test(start_paused = true)]
async fn a_delayed_wake_up_spares_waiters_that_came_after_the_release() {
    let cluster = cluster(&[]).await;
    let holder = tso(&cluster).await;
    take(&cluster, &[b"k"], holder, true).await;
    let (a, b) = (tso(&cluster).await, tso(&cluster).await);
    let first = spawn_lock(&cluster, lock_request(&[b"k"], a, 0)).await;
    until_waiting(&cluster, 1).await;
    let second = spawn_lock(&cluster, lock_request(&[b"k"], b, 0)).await;
    until_waiting(&cluster, 2).await;
    pessimistic_rollback(&cluster, &[b"k"], holder).await;
    let woken = first.await.unwrap();
    assert!(only_error(&woken).conflict.is_some());
    // A newcomer after the release finds the key free and takes it at
    // once; the next one must wait.
    let late = tso(&cluster).await;
    take(&cluster, &[b"k"], late, true).await;
    let later = tso(&cluster).await;
    let newest = spawn_lock(&cluster, lock_request(&[b"k"], later, 0)).await;
    until_waiting(&cluster, 2).await;
    // `b` waited before the release and is woken after the delay; the
    // newest came after it and keeps waiting until its own timeout.
    let response = second.await.unwrap();
    assert!(only_error(&response).conflict.is_some());
    assert_eq!(cluster.lock_waiters(), 1);
    let response = newest.await.unwrap();
    let lock = only_error(&response)
        .locked
        .clone()
        .expect("timed out on the lock");
    assert_eq!(lock.lock_version, late);
}

#[tokio::test(start_paused = true)]
async fn a_wait_runs_out_at_the_server_default_or_the_shorter_asked_time_with_the_lock() {
    let cluster = cluster(&[]).await;
    let holder = tso(&cluster).await;
    take(&cluster, &[b"k"], holder, true).await;
    for (wait_timeout, waited) in [
        (0, Duration::from_secs(1)),
        (300, Duration::from_millis(300)),
        // Capped at the server's setting.
        (5_000, Duration::from_secs(1)),
    ] {
        let waiter = tso(&cluster).await;
        let started = tokio::time::Instant::now();
        let response = send_lock(&cluster, lock_request(&[b"k"], waiter, wait_timeout)).await;
        let lock = only_error(&response).locked.clone().expect("the lock");
        assert_eq!(lock.lock_version, holder);
        assert_eq!(lock.key, b"k");
        let elapsed = started.elapsed();
        assert!(
            elapsed >= waited && elapsed < waited + Duration::from_millis(50),
            "wait_timeout {wait_timeout}: answered after {elapsed:?}"
        );
    }
    // A negative wait_timeout does not wait at all.
    let started = tokio::time::Instant::now();
    let response = send_lock(&cluster, lock_request(&[b"k"], tso(&cluster).await, -1)).await;
    assert!(only_error(&response).locked.is_some());
    assert!(started.elapsed() < Duration::from_millis(10));
    // A configured server default.
    cluster.set_lock_wait_config(LockWaitConfig {
        wait_for_lock_timeout: Duration::from_millis(200),
        ..LockWaitConfig::default()
    });
    let started = tokio::time::Instant::now();
    let response = send_lock(&cluster, lock_request(&[b"k"], tso(&cluster).await, 0)).await;
    assert!(only_error(&response).locked.is_some());
    let elapsed = started.elapsed();
    assert!(elapsed >= Duration::from_millis(200) && elapsed < Duration::from_millis(250));
    assert_eq!(
        cluster.lock_wait_stats(),
        LockWaitStats {
            waits: 4,
            woken: 0,
            timed_out: 4,
            deadlocks: 0
        }
    );
}

#[tokio::test(start_paused = true)]
async fn a_multi_key_request_waits_on_its_first_locked_key_holding_none() {
    let cluster = cluster(&[]).await;
    let holder = tso(&cluster).await;
    take(&cluster, &[b"b"], holder, true).await;
    let waiter = tso(&cluster).await;
    let waiting = spawn_lock(&cluster, lock_request(&[b"a", b"b", b"c"], waiter, 0)).await;
    until_waiting(&cluster, 1).await;
    // `a` is free meanwhile: the waiter took nothing.
    let other = tso(&cluster).await;
    take(&cluster, &[b"a"], other, true).await;
    pessimistic_rollback(&cluster, &[b"a"], other).await;
    pessimistic_rollback(&cluster, &[b"b"], holder).await;
    let response = waiting.await.unwrap();
    assert_eq!(only_error(&response).conflict.clone().unwrap().key, b"b");
}

#[tokio::test(start_paused = true)]
async fn two_transactions_waiting_for_each_other_are_a_deadlock_for_the_second() {
    // `a` and `z` in different Regions (and leaders on different stores).
    let (cluster, t1, t2) = two_holders().await;
    // t1 waits for t2's `z`: not its first lock, so it joins the graph.
    let mut request = lock_request(&[b"z"], t1, 0);
    request.primary_lock = b"a".to_vec();
    let t1_waits = spawn_lock(&cluster, request).await;
    until_waiting(&cluster, 1).await;
    // t2 asks for t1's `a`: the cycle closes, t2 is told at once.
    let asked = tokio::time::Instant::now();
    let mut request = lock_request(&[b"a"], t2, 0);
    request.primary_lock = b"z".to_vec();
    let response = send_lock(&cluster, request).await;
    assert!(asked.elapsed() < Duration::from_millis(10));
    let deadlock = only_error(&response).deadlock.clone().expect("a deadlock");
    assert_eq!(deadlock.lock_ts, t1);
    assert_eq!(deadlock.lock_key, b"a");
    // The key t2 holds that t1 waits for.
    assert_eq!(deadlock.deadlock_key_hash, key_hash(b"z"));
    let chain: Vec<(u64, u64, Vec<u8>, u64)> = deadlock
        .wait_chain
        .iter()
        .map(|e| (e.txn, e.wait_for_txn, e.key.clone(), e.key_hash))
        .collect();
    assert_eq!(
        chain,
        vec![
            (t1, t2, b"z".to_vec(), key_hash(b"z")),
            (t2, t1, b"a".to_vec(), key_hash(b"a")),
        ]
    );
    // t1 still waits; t2 gives up and rolls back, which wakes t1.
    assert_eq!(cluster.lock_waiters(), 1);
    pessimistic_rollback(&cluster, &[b"z"], t2).await;
    let response = t1_waits.await.unwrap();
    assert!(only_error(&response).conflict.is_some());
    assert_eq!(cluster.lock_wait_stats().deadlocks, 1);
}

#[tokio::test(start_paused = true)]
async fn a_three_transaction_cycle_is_found_and_the_chain_runs_from_the_holder() {
    let cluster = cluster(&[b"h", b"p"]).await;
    let (t1, t2, t3) = (
        tso(&cluster).await,
        tso(&cluster).await,
        tso(&cluster).await,
    );
    take(&cluster, &[b"a"], t1, true).await;
    take(&cluster, &[b"k"], t2, true).await;
    take(&cluster, &[b"x"], t3, true).await;
    let mut asks = Vec::new();
    for (start, key, primary) in [(t1, b"k", b"a"), (t2, b"x", b"k")] {
        let mut request = lock_request(&[key], start, 0);
        request.primary_lock = primary.to_vec();
        asks.push(spawn_lock(&cluster, request).await);
        until_waiting(&cluster, asks.len()).await;
    }
    let mut request = lock_request(&[b"a"], t3, 0);
    request.primary_lock = b"x".to_vec();
    let response = send_lock(&cluster, request).await;
    let deadlock = only_error(&response).deadlock.clone().expect("a deadlock");
    assert_eq!(deadlock.lock_ts, t1);
    assert_eq!(deadlock.deadlock_key_hash, key_hash(b"x"));
    let chain: Vec<(u64, u64)> = deadlock
        .wait_chain
        .iter()
        .map(|e| (e.txn, e.wait_for_txn))
        .collect();
    assert_eq!(chain, vec![(t1, t2), (t2, t3), (t3, t1)]);
    // The others keep waiting until their timeout.
    assert_eq!(cluster.lock_waiters(), 2);
    for ask in asks {
        assert!(only_error(&ask.await.unwrap()).locked.is_some());
    }
}

#[tokio::test(start_paused = true)]
async fn a_first_lock_never_joins_the_graph_so_it_is_never_a_deadlock() {
    let (cluster, t1, t2) = two_holders().await;
    // t1's wait is marked as its first lock (as a client would mark it
    // wrongly here): no edge, so t2's wait closes no cycle.
    let mut request = lock_request(&[b"z"], t1, 0);
    request.is_first_lock = true;
    let t1_waits = spawn_lock(&cluster, request).await;
    until_waiting(&cluster, 1).await;
    let t2_waits = spawn_lock(&cluster, lock_request(&[b"a"], t2, 0)).await;
    until_waiting(&cluster, 2).await;
    for waiting in [t1_waits, t2_waits] {
        assert!(only_error(&waiting.await.unwrap()).locked.is_some());
    }
    assert_eq!(cluster.lock_wait_stats().deadlocks, 0);
}

#[tokio::test(start_paused = true)]
async fn an_edge_goes_when_its_waiter_stops_waiting() {
    let (cluster, t1, t2) = two_holders().await;
    // t1 waited for `z` and gave up (timed out): its edge is gone, so t2's
    // wait for `a` is no deadlock.
    let response = send_lock(&cluster, lock_request(&[b"z"], t1, 100)).await;
    assert!(only_error(&response).locked.is_some());
    let response = send_lock(&cluster, lock_request(&[b"a"], t2, 100)).await;
    assert!(only_error(&response).locked.is_some());
    assert_eq!(cluster.lock_wait_stats().deadlocks, 0);
}

#[tokio::test(start_paused = true)]
async fn a_waiter_whose_client_goes_away_leaves_the_queue() {
    let cluster = cluster(&[]).await;
    let holder = tso(&cluster).await;
    take(&cluster, &[b"k"], holder, true).await;
    let waiting = spawn_lock(&cluster, lock_request(&[b"k"], tso(&cluster).await, 0)).await;
    until_waiting(&cluster, 1).await;
    waiting.abort();
    let _ = waiting.await;
    until_waiting(&cluster, 0).await;
}
