//! The simulated stores' transactional side (Percolator MVCC), driven over
//! real gRPC on 127.0.0.1 with a hand-written client of the raw protobuf
//! messages: the generated tonic stubs, no transactional client library.
//!
//! This file is long because it walks every transactional command of the
//! simulated store over gRPC, each with its success and failure answers.

mod txn_support;

use std::time::Duration;

use tikv_sim::proto::kvrpcpb::{self, Action, KeyError, Mutation, Op};
use tikv_sim::proto::pdpb;
use tikv_sim::{Outcome, SimCluster};
use txn_support::*;

/// A cluster whose Regions split at the encodings of `plain_splits`.
async fn cluster(plain_splits: &[&[u8]]) -> SimCluster {
    cluster_split_at(plain_splits).await
}

fn mutation(op: Op, key: &[u8]) -> Mutation {
    Mutation {
        op: op as i32,
        key: key.to_vec(),
        ..Default::default()
    }
}

async fn resolve(
    cluster: &SimCluster,
    any_key: &[u8],
    start: u64,
    commit: u64,
) -> kvrpcpb::ResolveLockResponse {
    let (mut c, ctx) = client_for(cluster, any_key).await;
    c.kv_resolve_lock(kvrpcpb::ResolveLockRequest {
        context: Some(ctx),
        start_version: start,
        commit_version: commit,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

fn locked(e: &Option<KeyError>) -> kvrpcpb::LockInfo {
    e.as_ref()
        .and_then(|e| e.locked.clone())
        .unwrap_or_else(|| panic!("expected a lock error, got {e:?}"))
}

#[tokio::test]
async fn a_read_at_ts_sees_exactly_the_commits_at_or_below_ts() {
    let cluster = cluster(&[b"m"]).await;
    let c1 = write(&cluster, b"k", b"v1").await;
    let c2 = write(&cluster, b"k", b"v2").await;
    write(&cluster, b"z", b"other region").await;
    assert!(get(&cluster, b"k", c1 - 1).await.not_found);
    assert_eq!(get(&cluster, b"k", c1).await.value, b"v1");
    assert_eq!(get(&cluster, b"k", c2 - 1).await.value, b"v1");
    assert_eq!(get(&cluster, b"k", c2).await.value, b"v2");

    // A delete is a version too.
    let start = tso(&cluster).await;
    prewrite(
        &cluster,
        prewrite_req(vec![mutation(Op::Del, b"k")], b"k", start),
    )
    .await;
    let c3 = tso(&cluster).await;
    assert!(commit(&cluster, &[b"k"], start, c3).await.error.is_none());
    assert!(get(&cluster, b"k", c3).await.not_found);
    assert_eq!(get(&cluster, b"k", c3 - 1).await.value, b"v2");

    // Batch get and scans read the same snapshot.
    for (k, v) in [(b"a", b"1"), (b"b", b"2"), (b"c", b"3")] {
        write(&cluster, k, v).await;
    }
    let now = tso(&cluster).await;
    let (mut client, ctx) = client_for(&cluster, b"a").await;
    let batch = client
        .kv_batch_get(kvrpcpb::BatchGetRequest {
            context: Some(ctx.clone()),
            keys: vec![b"a".to_vec(), b"k".to_vec(), b"c".to_vec()],
            version: now,
        })
        .await
        .unwrap()
        .into_inner();
    let keys: Vec<_> = batch.pairs.iter().map(|p| p.key.clone()).collect();
    assert_eq!(keys, vec![b"a".to_vec(), b"c".to_vec()]);
    let scan = |reverse: bool, limit: u32, key_only: bool, start: &[u8], end: &[u8]| {
        kvrpcpb::ScanRequest {
            context: Some(ctx.clone()),
            start_key: start.to_vec(),
            end_key: end.to_vec(),
            limit,
            version: now,
            key_only,
            reverse,
            sample_step: 0,
        }
    };
    let forward = client
        .kv_scan(scan(false, 10, false, b"", b""))
        .await
        .unwrap()
        .into_inner();
    let got: Vec<(Vec<u8>, Vec<u8>)> = forward
        .pairs
        .iter()
        .map(|p| (p.key.clone(), p.value.clone()))
        .collect();
    assert_eq!(
        got,
        vec![
            (b"a".to_vec(), b"1".to_vec()),
            (b"b".to_vec(), b"2".to_vec()),
            (b"c".to_vec(), b"3".to_vec())
        ],
        "the deleted k and the other Region's z are not listed"
    );
    let reverse = client
        .kv_scan(scan(true, 2, true, b"c", b""))
        .await
        .unwrap()
        .into_inner();
    let got: Vec<(Vec<u8>, Vec<u8>)> = reverse
        .pairs
        .iter()
        .map(|p| (p.key.clone(), p.value.clone()))
        .collect();
    assert_eq!(got, vec![(b"b".to_vec(), vec![]), (b"a".to_vec(), vec![])]);
    let old = client
        .kv_scan(kvrpcpb::ScanRequest {
            version: c1,
            ..scan(false, 0, false, b"", b"")
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(old.pairs.len(), 1, "only k existed at c1: {old:?}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn raw_and_transactional_data_stay_apart() {
    let cluster = cluster(&[]).await;
    write(&cluster, b"k", b"txn").await;
    let (mut c, ctx) = client_for(&cluster, b"k").await;
    let raw = c
        .raw_get(kvrpcpb::RawGetRequest {
            context: Some(ctx.clone()),
            key: b"k".to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(raw.not_found);
    c.raw_put(kvrpcpb::RawPutRequest {
        context: Some(ctx),
        key: b"r".to_vec(),
        value: b"raw".to_vec(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert!(get(&cluster, b"r", u64::MAX - 1).await.not_found);
    assert_eq!(cluster.value_of(b"r"), Some(b"raw".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test]
async fn write_conflict_and_duplicate_insert() {
    let cluster = cluster(&[]).await;
    let early_start = tso(&cluster).await;
    let commit_ts = write(&cluster, b"k", b"v").await;
    let conflict = prewrite(
        &cluster,
        prewrite_req(vec![put(b"k", b"late")], b"k", early_start),
    )
    .await;
    let c = conflict.errors[0]
        .conflict
        .clone()
        .expect("a write conflict");
    assert_eq!(
        (c.start_ts, c.conflict_commit_ts, c.key),
        (early_start, commit_ts, b"k".to_vec())
    );

    let start = tso(&cluster).await;
    let insert = Mutation {
        op: Op::Insert as i32,
        ..put(b"k", b"again")
    };
    let dup = prewrite(
        &cluster,
        prewrite_req(vec![insert, put(b"j", b"x")], b"j", start),
    )
    .await;
    assert_eq!(
        dup.errors[0].already_exist.clone().unwrap().key,
        b"k".to_vec()
    );
    assert!(
        cluster.locks(b"", b"").is_empty(),
        "a failed prewrite writes nothing"
    );
    let check = Mutation {
        op: Op::CheckNotExists as i32,
        ..put(b"k", b"")
    };
    let dup = prewrite(&cluster, prewrite_req(vec![check], b"k", start)).await;
    assert!(dup.errors[0].already_exist.is_some());
    // Insert of a fresh key works; CheckNotExists on a fresh key locks nothing.
    let fresh = prewrite(
        &cluster,
        prewrite_req(
            vec![
                Mutation {
                    op: Op::Insert as i32,
                    ..put(b"n", b"1")
                },
                mutation(Op::CheckNotExists, b"o"),
            ],
            b"n",
            start,
        ),
    )
    .await;
    assert!(fresh.errors.is_empty(), "{fresh:?}");
    let locks = cluster.locks(b"", b"");
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0].key, b"n".to_vec());
    // A prewrite meeting another transaction's lock gets the lock.
    let other = tso(&cluster).await;
    let blocked = prewrite(&cluster, prewrite_req(vec![put(b"n", b"2")], b"n", other)).await;
    assert_eq!(
        blocked.errors[0].locked.clone().unwrap().lock_version,
        start
    );
    // Resending the same prewrite is harmless.
    let resent = prewrite(
        &cluster,
        prewrite_req(
            vec![Mutation {
                op: Op::Insert as i32,
                ..put(b"n", b"1")
            }],
            b"n",
            start,
        ),
    )
    .await;
    assert!(resent.errors.is_empty(), "{resent:?}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_lock_blocks_readers_until_it_is_resolved() {
    let cluster = cluster(&[]).await;
    write(&cluster, b"s", b"old").await;
    let start = tso(&cluster).await;
    let p = prewrite(
        &cluster,
        prewrite_req(vec![put(b"p", b"new"), put(b"s", b"new")], b"p", start),
    )
    .await;
    assert!(p.errors.is_empty());
    let reader = tso(&cluster).await;
    let lock = locked(&get(&cluster, b"s", reader).await.error);
    assert_eq!(
        (lock.primary_lock.as_slice(), lock.lock_version),
        (&b"p"[..], start)
    );
    // A read below the lock's start is not blocked; Lock-type locks never block.
    assert_eq!(get(&cluster, b"s", start - 1).await.value, b"old");
    assert_eq!(
        cluster
            .counters(leader_ctx(&cluster, b"s").0)
            .count("kv_get", Outcome::KeyError),
        1
    );

    // The writer commits its primary; the reader finds it through the
    // primary's status and resolves the secondary.
    let commit_ts = tso(&cluster).await;
    assert!(commit(&cluster, &[b"p"], start, commit_ts)
        .await
        .error
        .is_none());
    assert!(
        get(&cluster, b"s", reader + 10).await.error.is_some(),
        "the secondary is still locked"
    );
    let status = check_txn_status(&cluster, &lock.primary_lock, start, |_| {}).await;
    assert_eq!((status.commit_version, status.lock_ttl), (commit_ts, 0));
    assert!(resolve(&cluster, b"s", start, status.commit_version)
        .await
        .error
        .is_none());
    let after = tso(&cluster).await;
    assert_eq!(get(&cluster, b"s", after).await.value, b"new");
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn an_expired_lock_is_rolled_back_by_check_txn_status() {
    let cluster = cluster(&[]).await;
    let start = tso(&cluster).await;
    prewrite(
        &cluster,
        prewrite_req(vec![put(b"p", b"v"), put(b"s", b"v")], b"p", start),
    )
    .await;

    // Alive: the status shows the lock and its TTL.
    let alive = check_txn_status(&cluster, b"p", start, |_| {}).await;
    assert_eq!(alive.lock_ttl, 3_000);
    assert_eq!(alive.action, Action::NoAction as i32);
    assert_eq!(alive.lock_info.unwrap().lock_version, start);
    let (mut c, ctx) = client_for(&cluster, b"s").await;
    let cleanup = |current_ts| kvrpcpb::CleanupRequest {
        context: Some(ctx.clone()),
        key: b"s".to_vec(),
        start_version: start,
        current_ts,
    };
    let now = tso(&cluster).await;
    assert!(c
        .kv_cleanup(cleanup(now))
        .await
        .unwrap()
        .into_inner()
        .error
        .unwrap()
        .locked
        .is_some());

    // The TSO clock moves past the TTL: no real time passes.
    cluster.advance_tso_clock(Duration::from_millis(3_001));
    let expired = check_txn_status(&cluster, b"p", start, |_| {}).await;
    assert_eq!(expired.action, Action::TtlExpireRollback as i32);
    assert_eq!((expired.lock_ttl, expired.commit_version), (0, 0));
    assert!(expired.lock_info.is_none());
    let again = check_txn_status(&cluster, b"p", start, |_| {}).await;
    assert_eq!(
        (again.action, again.lock_ttl, again.commit_version),
        (0, 0, 0)
    );
    // The writer's commit now fails: rolled back.
    let late = commit(&cluster, &[b"p"], start, tso(&cluster).await).await;
    assert!(late.error.unwrap().retryable.contains("TxnLockNotFound"));
    // The reader resolves the secondary with commit ts 0 (roll back).
    assert!(resolve(&cluster, b"s", start, 0).await.error.is_none());
    assert!(cluster.locks(b"", b"").is_empty());
    assert_eq!(cluster.versions(b"s")[0].kind, "rollback");
    // Cleanup with current_ts 0 of a missing lock leaves a rollback too.
    assert!(c
        .kv_cleanup(cleanup(0))
        .await
        .unwrap()
        .into_inner()
        .error
        .is_none());

    // A transaction that never wrote its primary: TxnNotFound, or a
    // rollback record when asked to.
    let ghost = tso(&cluster).await;
    let missing = check_txn_status(&cluster, b"g", ghost, |_| {}).await;
    assert_eq!(
        missing.error.unwrap().txn_not_found.unwrap().start_ts,
        ghost
    );
    let rolled = check_txn_status(&cluster, b"g", ghost, |r| r.rollback_if_not_exist = true).await;
    assert_eq!(rolled.action, Action::LockNotExistRollback as i32);
    let late = prewrite(&cluster, prewrite_req(vec![put(b"g", b"v")], b"g", ghost)).await;
    assert!(
        late.errors[0].conflict.is_some(),
        "a rolled-back transaction cannot prewrite"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_reader_pushes_min_commit_ts_and_the_commit_below_it_expires() {
    let cluster = cluster(&[]).await;
    let start = tso(&cluster).await;
    let mut req = prewrite_req(vec![put(b"p", b"v")], b"p", start);
    req.min_commit_ts = start + 1;
    prewrite(&cluster, req).await;
    let reader = tso(&cluster).await;
    let pushed = check_txn_status(&cluster, b"p", start, |r| r.caller_start_ts = reader).await;
    assert_eq!(pushed.action, Action::MinCommitTsPushed as i32);
    let min = pushed.lock_info.unwrap().min_commit_ts;
    assert!(min > reader);
    // The reader no longer waits for the lock.
    assert!(get(&cluster, b"p", reader).await.error.is_none());
    let expired = commit(&cluster, &[b"p"], start, reader).await;
    let e = expired.error.unwrap().commit_ts_expired.unwrap();
    assert_eq!((e.attempted_commit_ts, e.min_commit_ts), (reader, min));
    let ok = commit(&cluster, &[b"p"], start, min).await;
    assert!(ok.error.is_none());
    // Committing again is idempotent.
    assert!(commit(&cluster, &[b"p"], start, min).await.error.is_none());
    cluster.shutdown().await;
}

#[tokio::test]
async fn commit_and_rollback_answers() {
    let cluster = cluster(&[]).await;
    let start = tso(&cluster).await;
    prewrite(
        &cluster,
        prewrite_req(vec![put(b"a", b"1"), put(b"b", b"1")], b"a", start),
    )
    .await;
    let (mut c, ctx) = client_for(&cluster, b"a").await;
    let rollback = c
        .kv_batch_rollback(kvrpcpb::BatchRollbackRequest {
            context: Some(ctx.clone()),
            start_version: start,
            keys: vec![b"a".to_vec(), b"b".to_vec()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(rollback.error.is_none());
    let late = commit(&cluster, &[b"a", b"b"], start, tso(&cluster).await).await;
    assert!(late.error.unwrap().retryable.contains("TxnLockNotFound"));
    // Rolling back a committed transaction is refused.
    let committed_start = tso(&cluster).await;
    prewrite(
        &cluster,
        prewrite_req(vec![put(b"c", b"1")], b"c", committed_start),
    )
    .await;
    let commit_ts = tso(&cluster).await;
    commit(&cluster, &[b"c"], committed_start, commit_ts).await;
    let refused = c
        .kv_batch_rollback(kvrpcpb::BatchRollbackRequest {
            context: Some(ctx.clone()),
            start_version: committed_start,
            keys: vec![b"c".to_vec()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(refused.error.unwrap().abort.contains("Committed"));
    let cleanup = c
        .kv_cleanup(kvrpcpb::CleanupRequest {
            context: Some(ctx.clone()),
            key: b"c".to_vec(),
            start_version: committed_start,
            current_ts: 0,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(cleanup.commit_version, commit_ts);
    // A commit ts not above the start ts is refused.
    let bad = commit(&cluster, &[b"c"], committed_start, committed_start).await;
    assert!(bad.error.unwrap().abort.contains("InvalidTxnTso"));
    assert_eq!(
        cluster
            .counters(leader_ctx(&cluster, b"c").0)
            .count("kv_commit", Outcome::KeyError),
        2
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn async_commit_status_comes_from_check_secondary_locks() {
    let cluster = cluster(&[b"m"]).await;
    // A reader at a high ts: async commit must commit above it.
    let high_read = tso(&cluster).await + 1_000;
    get(&cluster, b"s", high_read).await;
    assert_eq!(cluster.max_ts(b"s"), high_read);

    let start = tso(&cluster).await;
    let secondaries = vec![b"s".to_vec()];
    let mut primary = prewrite_req(vec![put(b"a", b"1")], b"a", start);
    primary.use_async_commit = true;
    primary.secondaries = secondaries.clone();
    let mut secondary = prewrite_req(vec![put(b"s", b"1")], b"a", start);
    secondary.use_async_commit = true;
    let p = prewrite(&cluster, primary.clone()).await;
    let s = prewrite(&cluster, secondary.clone()).await;
    assert!(p.min_commit_ts > start);
    assert!(
        s.min_commit_ts > high_read,
        "{} <= {high_read}",
        s.min_commit_ts
    );
    // A resend answers the same min_commit_ts.
    assert_eq!(
        prewrite(&cluster, secondary).await.min_commit_ts,
        s.min_commit_ts
    );
    let info = cluster.locks(b"a", b"b").remove(0);
    assert!(info.use_async_commit);
    assert_eq!(info.secondaries, secondaries);

    // CheckTxnStatus neither rolls back nor pushes an async-commit lock.
    cluster.advance_tso_clock(Duration::from_millis(10_000));
    let status = check_txn_status(&cluster, b"a", start, |_| {}).await;
    assert_eq!(status.action, Action::NoAction as i32);
    assert!(status.lock_info.unwrap().use_async_commit);

    let (mut c, ctx) = client_for(&cluster, b"s").await;
    let check = |start_version| kvrpcpb::CheckSecondaryLocksRequest {
        context: Some(ctx.clone()),
        keys: vec![b"s".to_vec()],
        start_version,
    };
    let all_locked = c
        .kv_check_secondary_locks(check(start))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((all_locked.locks.len(), all_locked.commit_ts), (1, 0));
    let commit_ts = p.min_commit_ts.max(s.min_commit_ts);
    assert!(commit(&cluster, &[b"s"], start, commit_ts)
        .await
        .error
        .is_none());
    let committed = c
        .kv_check_secondary_locks(check(start))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((committed.locks.len(), committed.commit_ts), (0, commit_ts));
    // The resolver commits the primary at that ts.
    assert!(resolve(&cluster, b"a", start, commit_ts)
        .await
        .error
        .is_none());
    assert_eq!(get(&cluster, b"a", commit_ts).await.value, b"1");

    // An orphan: the primary's prewrite names a secondary whose prewrite
    // never arrived. CheckSecondaryLocks finds no lock: the transaction is
    // finished (rolled back), and the late prewrite cannot land.
    let orphan = tso(&cluster).await;
    let mut primary = prewrite_req(vec![put(b"b", b"1")], b"b", orphan);
    primary.use_async_commit = true;
    primary.secondaries = vec![b"t".to_vec()];
    prewrite(&cluster, primary).await;
    let (mut c2, ctx2) = client_for(&cluster, b"t").await;
    let rolled = c2
        .kv_check_secondary_locks(kvrpcpb::CheckSecondaryLocksRequest {
            context: Some(ctx2),
            keys: vec![b"t".to_vec()],
            start_version: orphan,
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!((rolled.locks.len(), rolled.commit_ts), (0, 0));
    let mut late = prewrite_req(vec![put(b"t", b"1")], b"b", orphan);
    late.use_async_commit = true;
    assert!(prewrite(&cluster, late).await.errors[0].conflict.is_some());
    assert!(resolve(&cluster, b"b", orphan, 0).await.error.is_none());
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn one_pc_commits_in_the_prewrite() {
    let cluster = cluster(&[]).await;
    let start = tso(&cluster).await;
    let mut req = prewrite_req(vec![put(b"a", b"1"), put(b"b", b"2")], b"a", start);
    req.try_one_pc = true;
    let resp = prewrite(&cluster, req).await;
    assert!(resp.one_pc_commit_ts > start);
    assert!(cluster.locks(b"", b"").is_empty());
    assert_eq!(get(&cluster, b"b", resp.one_pc_commit_ts).await.value, b"2");
    assert!(
        get(&cluster, b"b", resp.one_pc_commit_ts - 1)
            .await
            .not_found
    );

    // With a max_commit_ts below what 1PC needs, TiKV falls back to 2PC:
    // one_pc_commit_ts 0 and ordinary locks.
    // A read one second ahead of the TSO: 1PC must commit above it.
    let reader = tso(&cluster).await + (1_000 << 18);
    get(&cluster, b"c", reader).await;
    let start = tso(&cluster).await;
    let mut req = prewrite_req(vec![put(b"c", b"3")], b"c", start);
    req.try_one_pc = true;
    req.max_commit_ts = start + 1;
    let fallback = prewrite(&cluster, req).await;
    assert_eq!((fallback.one_pc_commit_ts, fallback.min_commit_ts), (0, 0));
    assert_eq!(cluster.locks(b"", b"").len(), 1);
    cluster.shutdown().await;
}

async fn pessimistic_lock(
    cluster: &SimCluster,
    keys: &[&[u8]],
    start: u64,
    for_update_ts: u64,
    edit: impl FnOnce(&mut kvrpcpb::PessimisticLockRequest),
) -> kvrpcpb::PessimisticLockResponse {
    let (mut c, ctx) = client_for(cluster, keys[0]).await;
    let mut req = kvrpcpb::PessimisticLockRequest {
        context: Some(ctx),
        mutations: keys
            .iter()
            .map(|k| mutation(Op::PessimisticLock, k))
            .collect(),
        primary_lock: keys[0].to_vec(),
        start_version: start,
        lock_ttl: 3_000,
        for_update_ts,
        wait_timeout: 1_000,
        ..Default::default()
    };
    edit(&mut req);
    c.kv_pessimistic_lock(req).await.unwrap().into_inner()
}

#[tokio::test]
async fn pessimistic_locks_conflict_return_values_and_roll_back() {
    let cluster = cluster(&[]).await;
    write(&cluster, b"x", b"old").await;
    let start = tso(&cluster).await;
    let locked_resp = pessimistic_lock(&cluster, &[b"x", b"y"], start, start, |r| {
        r.return_values = true
    })
    .await;
    assert!(locked_resp.errors.is_empty(), "{locked_resp:?}");
    assert_eq!(locked_resp.values, vec![b"old".to_vec(), vec![]]);
    assert_eq!(locked_resp.not_founds, vec![false, true]);
    // A pessimistic lock does not block readers.
    assert_eq!(get(&cluster, b"x", tso(&cluster).await).await.value, b"old");

    // Another transaction is answered at once with the lock (no waiting).
    let other = tso(&cluster).await;
    let conflict = pessimistic_lock(&cluster, &[b"y"], other, other, |_| {}).await;
    assert_eq!(
        conflict.errors[0].locked.clone().unwrap().lock_version,
        start
    );
    let blocked = prewrite(&cluster, prewrite_req(vec![put(b"x", b"z")], b"x", other)).await;
    assert!(blocked.errors[0].locked.is_some());

    // Prewrite with DoPessimisticCheck turns the locks into write locks.
    let mut req = prewrite_req(vec![put(b"x", b"new"), put(b"y", b"new")], b"x", start);
    req.for_update_ts = start;
    req.pessimistic_actions = vec![1, 1];
    assert!(prewrite(&cluster, req).await.errors.is_empty());
    let commit_ts = tso(&cluster).await;
    assert!(commit(&cluster, &[b"x", b"y"], start, commit_ts)
        .await
        .error
        .is_none());

    // A lock at a for_update_ts older than the last commit is a write conflict.
    let stale = tso(&cluster).await;
    write(&cluster, b"x", b"newer").await;
    let wc = pessimistic_lock(&cluster, &[b"x"], stale, stale, |_| {}).await;
    assert!(wc.errors[0].conflict.is_some());
    assert!(cluster.locks(b"", b"").is_empty());

    // Existence checks: check_existence, NotExist assertion, lock only if exists.
    let t = tso(&cluster).await;
    let exist = pessimistic_lock(&cluster, &[b"x", b"q"], t, t, |r| r.check_existence = true).await;
    assert_eq!(exist.not_founds, vec![false, true]);
    assert!(exist.values.is_empty());
    let (mut c, ctx) = client_for(&cluster, b"x").await;
    c.kv_pessimistic_rollback(kvrpcpb::PessimisticRollbackRequest {
        context: Some(ctx.clone()),
        start_version: t,
        for_update_ts: t,
        keys: vec![b"x".to_vec(), b"q".to_vec()],
    })
    .await
    .unwrap();
    assert!(
        cluster.locks(b"", b"").is_empty(),
        "pessimistic rollback removes the locks"
    );
    let t2 = tso(&cluster).await;
    let dup = pessimistic_lock(&cluster, &[b"x"], t2, t2, |r| {
        r.mutations[0].assertion = kvrpcpb::Assertion::NotExist as i32
    })
    .await;
    assert!(dup.errors[0].already_exist.is_some());
    let only = pessimistic_lock(&cluster, &[b"x", b"q"], t2, t2, |r| {
        r.return_values = true;
        r.lock_only_if_exists = true;
    })
    .await;
    assert!(only.errors.is_empty());
    let locks = cluster.locks(b"", b"");
    assert_eq!(locks.len(), 1);
    assert_eq!(locks[0].key, b"x".to_vec());
    assert_eq!(locks[0].lock_type, Op::PessimisticLock as i32);

    // Prewrite with DoPessimisticCheck on a key never locked: TiKV amends
    // the lock when nothing was written to the key at or after the start
    // ts...
    let mut req = prewrite_req(vec![put(b"q", b"v")], b"x", t2);
    req.for_update_ts = t2;
    req.pessimistic_actions = vec![1];
    let amended = prewrite(&cluster, req).await;
    assert!(amended.errors.is_empty(), "{:?}", amended.errors);
    let q = cluster.locks(b"q", b"q\0");
    assert_eq!((q.len(), q[0].lock_version), (1, t2));
    // ...and answers the lost lock when something was.
    write(&cluster, b"w", b"newer").await;
    let mut req = prewrite_req(vec![put(b"w", b"v")], b"x", t2);
    req.for_update_ts = t2;
    req.pessimistic_actions = vec![1];
    let missing = prewrite(&cluster, req).await;
    assert!(missing.errors[0].abort.contains("PessimisticLockNotFound"));
    // A key locked by another transaction is no pessimistic lock of ours.
    let other = tso(&cluster).await;
    let mut req = prewrite_req(vec![put(b"x", b"v")], b"x", other);
    req.for_update_ts = other;
    req.pessimistic_actions = vec![1];
    let stolen = prewrite(&cluster, req).await;
    assert!(stolen.errors[0].abort.contains("PessimisticLockNotFound"));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_heartbeat_extends_the_ttl() {
    let cluster = cluster(&[]).await;
    let start = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"p", b"v")], b"p", start)).await;
    let (mut c, ctx) = client_for(&cluster, b"p").await;
    let beat = |ttl| kvrpcpb::TxnHeartBeatRequest {
        context: Some(ctx.clone()),
        primary_lock: b"p".to_vec(),
        start_version: start,
        advise_lock_ttl: ttl,
        ..Default::default()
    };
    assert_eq!(
        c.kv_txn_heart_beat(beat(10_000))
            .await
            .unwrap()
            .into_inner()
            .lock_ttl,
        10_000
    );
    // A smaller advice never shortens it.
    assert_eq!(
        c.kv_txn_heart_beat(beat(5))
            .await
            .unwrap()
            .into_inner()
            .lock_ttl,
        10_000
    );
    cluster.advance_tso_clock(Duration::from_millis(5_000));
    let alive = check_txn_status(&cluster, b"p", start, |_| {}).await;
    assert_eq!(alive.lock_ttl, 10_000, "3 s would have expired: {alive:?}");
    cluster.advance_tso_clock(Duration::from_millis(6_000));
    let expired = check_txn_status(&cluster, b"p", start, |_| {}).await;
    assert_eq!(expired.action, Action::TtlExpireRollback as i32);
    let gone = c
        .kv_txn_heart_beat(beat(20_000))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(gone.error.unwrap().txn_not_found.unwrap().start_ts, start);
    cluster.shutdown().await;
}

#[tokio::test]
async fn scan_lock_pages_and_gc_with_the_pd_safe_point() {
    let cluster = cluster(&[]).await;
    let start = tso(&cluster).await;
    let keys: Vec<Vec<u8>> = (0..10).map(|i| format!("k{i}").into_bytes()).collect();
    let muts = keys.iter().map(|k| put(k, b"v")).collect();
    prewrite(&cluster, prewrite_req(muts, b"k0", start)).await;
    let newer = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"z", b"v")], b"z", newer)).await;

    // Page through the locks older than `newer`, three at a time.
    let (mut c, ctx) = client_for(&cluster, b"k0").await;
    let mut found = Vec::new();
    let mut next = Vec::new();
    let mut pages = 0;
    loop {
        let page = c
            .kv_scan_lock(kvrpcpb::ScanLockRequest {
                context: Some(ctx.clone()),
                max_version: newer - 1,
                start_key: next.clone(),
                limit: 3,
                end_key: Vec::new(),
            })
            .await
            .unwrap()
            .into_inner();
        pages += 1;
        let full = page.locks.len() == 3;
        for lock in page.locks {
            next = lock.key.clone();
            next.push(0);
            found.push(lock.key);
        }
        if !full {
            break;
        }
    }
    assert_eq!(found, keys);
    assert_eq!(pages, 4);

    // Resolve them, then GC below a safe point published to PD.
    assert!(resolve(&cluster, b"k0", start, 0).await.error.is_none());
    assert!(resolve(&cluster, b"z", newer, 0).await.error.is_none());
    write(&cluster, b"g", b"1").await;
    let c2 = write(&cluster, b"g", b"2").await;
    let safe_point = tso(&cluster).await;
    let mut pd = cluster.pd_client(0).await.unwrap();
    let header = Some(pdpb::RequestHeader {
        cluster_id: cluster.cluster_id(),
        sender_id: 0,
    });
    let updated = pd
        .update_gc_safe_point(pdpb::UpdateGcSafePointRequest { header, safe_point })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(updated.new_safe_point, safe_point);
    c.kv_gc(kvrpcpb::GcRequest {
        context: Some(ctx.clone()),
        safe_point,
    })
    .await
    .unwrap();
    let versions = cluster.versions(b"g");
    assert_eq!(versions.len(), 1, "{versions:?}");
    assert_eq!(versions[0].commit_ts, c2);
    assert!(
        cluster.versions(b"k3").is_empty(),
        "rollback records below the safe point go"
    );
    assert_eq!(get(&cluster, b"g", safe_point).await.value, b"2");
    cluster.shutdown().await;
}

#[tokio::test]
async fn delete_range_and_unsafe_destroy_range() {
    let cluster = cluster(&[b"m"]).await;
    for k in [b"a", b"b", b"c", b"x", b"y"] {
        write(&cluster, k, b"v").await;
    }
    let (mut c, ctx) = client_for(&cluster, b"a").await;
    let deleted = c
        .kv_delete_range(kvrpcpb::DeleteRangeRequest {
            context: Some(ctx.clone()),
            start_key: b"b".to_vec(),
            end_key: b"c".to_vec(),
            notify_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        deleted.error.is_empty() && deleted.region_error.is_none(),
        "{deleted:?}"
    );
    assert!(cluster.versions(b"b").is_empty());
    assert_eq!(cluster.versions(b"c").len(), 1);
    // A range reaching into the next Region is refused on its encoded end.
    let outside = c
        .kv_delete_range(kvrpcpb::DeleteRangeRequest {
            context: Some(ctx),
            start_key: b"a".to_vec(),
            end_key: b"y".to_vec(),
            notify_only: false,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(outside.region_error.unwrap().key_not_in_region.is_some());
    // UnsafeDestroyRange is store-wide: no Region context needed.
    for store in cluster.store_ids() {
        let mut s = cluster.tikv_client(store).await.unwrap();
        let r = s
            .unsafe_destroy_range(kvrpcpb::UnsafeDestroyRangeRequest {
                context: None,
                start_key: b"c".to_vec(),
                end_key: b"y".to_vec(),
            })
            .await
            .unwrap()
            .into_inner();
        assert!(r.error.is_empty() && r.region_error.is_none());
    }
    assert!(cluster.versions(b"c").is_empty() && cluster.versions(b"x").is_empty());
    assert_eq!(cluster.versions(b"y").len(), 1);
    assert_eq!(cluster.versions(b"a").len(), 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn resolve_lock_by_txn_infos_and_by_keys() {
    let cluster = cluster(&[]).await;
    let a = tso(&cluster).await;
    prewrite(
        &cluster,
        prewrite_req(vec![put(b"a1", b"A"), put(b"a2", b"A")], b"a1", a),
    )
    .await;
    let b = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"b1", b"B")], b"b1", b)).await;
    let c = tso(&cluster).await;
    prewrite(
        &cluster,
        prewrite_req(vec![put(b"c1", b"C"), put(b"c2", b"C")], b"c1", c),
    )
    .await;
    let a_commit = tso(&cluster).await;
    let (mut client, ctx) = client_for(&cluster, b"a1").await;
    // One request resolves two transactions: A committed, B rolled back.
    let both = client
        .kv_resolve_lock(kvrpcpb::ResolveLockRequest {
            context: Some(ctx.clone()),
            txn_infos: vec![
                kvrpcpb::TxnInfo {
                    txn: a,
                    status: a_commit,
                    ..Default::default()
                },
                kvrpcpb::TxnInfo {
                    txn: b,
                    status: 0,
                    ..Default::default()
                },
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(both.error.is_none(), "{both:?}");
    let now = tso(&cluster).await;
    assert_eq!(get(&cluster, b"a2", now).await.value, b"A");
    assert!(get(&cluster, b"b1", now).await.not_found);
    assert_eq!(cluster.versions(b"b1")[0].kind, "rollback");
    // C is untouched, then resolved key by key (ResolveLockLite).
    let remaining: Vec<Vec<u8>> = cluster.locks(b"", b"").into_iter().map(|l| l.key).collect();
    assert_eq!(remaining, vec![b"c1".to_vec(), b"c2".to_vec()]);
    let c_commit = tso(&cluster).await;
    let lite = client
        .kv_resolve_lock(kvrpcpb::ResolveLockRequest {
            context: Some(ctx.clone()),
            start_version: c,
            commit_version: c_commit,
            keys: vec![b"c2".to_vec()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(lite.error.is_none());
    assert_eq!(cluster.locks(b"", b"").len(), 1, "only c2 was resolved");
    assert_eq!(cluster.versions(b"c2")[0].commit_ts, c_commit);
    // Committing a key of a transaction that never locked it fails.
    let ghost = client
        .kv_resolve_lock(kvrpcpb::ResolveLockRequest {
            context: Some(ctx),
            start_version: c,
            commit_version: c_commit,
            keys: vec![b"zz".to_vec()],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(ghost.error.unwrap().retryable.contains("TxnLockNotFound"));
    cluster.shutdown().await;
}
