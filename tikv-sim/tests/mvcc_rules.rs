//! The simulated cluster's MVCC against TiKV's own rules
//! (`src/storage/txn/actions/` and `src/storage/txn/commands/` of TiKV):
//! overlapped rollbacks, resent prewrites (async commit, 1PC, after a
//! commit or a rollback), CheckTxnStatus' answers and TTLs, and the other
//! transactional commands' answers. Driven over real gRPC with the raw
//! protobuf messages.

mod txn_support;

use std::time::Duration;

use tikv_sim::proto::kvrpcpb::{self, Action, Mutation, Op};
use tikv_sim::SimCluster;
use txn_support::*;

/// `WriteConflict.reason` of kvproto.
const REASON_PESSIMISTIC_RETRY: i32 = 2;
const REASON_SELF_ROLLED_BACK: i32 = 3;

/// `PessimisticAction` values of a prewrite.
const DO_PESSIMISTIC_CHECK: i32 = 1;

/// One Region, three replicas.
async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap()
}

/// An async-commit prewrite of `keys` (the first is the primary).
fn async_req(keys: &[&[u8]], start: u64) -> kvrpcpb::PrewriteRequest {
    let mut req = prewrite_req(keys.iter().map(|k| put(k, b"v")).collect(), keys[0], start);
    req.use_async_commit = true;
    req.secondaries = keys[1..].iter().map(|k| k.to_vec()).collect();
    req
}

async fn batch_rollback(cluster: &SimCluster, keys: &[&[u8]], start: u64) {
    let (mut c, ctx) = client_for(cluster, keys[0]).await;
    let r = c
        .kv_batch_rollback(kvrpcpb::BatchRollbackRequest {
            context: Some(ctx),
            start_version: start,
            keys: keys.iter().map(|k| k.to_vec()).collect(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.error.is_none(), "{r:?}");
}

async fn check_secondary_locks(
    cluster: &SimCluster,
    keys: &[&[u8]],
    start: u64,
) -> kvrpcpb::CheckSecondaryLocksResponse {
    let (mut c, ctx) = client_for(cluster, keys[0]).await;
    c.kv_check_secondary_locks(kvrpcpb::CheckSecondaryLocksRequest {
        context: Some(ctx),
        keys: keys.iter().map(|k| k.to_vec()).collect(),
        start_version: start,
    })
    .await
    .unwrap()
    .into_inner()
}

async fn pessimistic_lock(
    cluster: &SimCluster,
    key: &[u8],
    start: u64,
    for_update_ts: u64,
) -> kvrpcpb::PessimisticLockResponse {
    let (mut c, ctx) = client_for(cluster, key).await;
    c.kv_pessimistic_lock(kvrpcpb::PessimisticLockRequest {
        context: Some(ctx),
        mutations: vec![Mutation {
            op: Op::PessimisticLock as i32,
            key: key.to_vec(),
            ..Default::default()
        }],
        primary_lock: key.to_vec(),
        start_version: start,
        lock_ttl: 3_000,
        for_update_ts,
        ..Default::default()
    })
    .await
    .unwrap()
    .into_inner()
}

/// A prewrite by a transaction rolled back on `key` must fail, with a
/// write conflict saying it rolled itself back.
async fn assert_late_prewrite_rejected(cluster: &SimCluster, key: &[u8], start: u64) {
    let late = prewrite(cluster, prewrite_req(vec![put(key, b"late")], key, start)).await;
    let conflict = late
        .errors
        .first()
        .and_then(|e| e.conflict.clone())
        .unwrap_or_else(|| panic!("the rolled-back transaction prewrote: {late:?}"));
    assert_eq!(conflict.reason, REASON_SELF_ROLLED_BACK, "{conflict:?}");
    assert!(cluster.locks(b"", b"").is_empty());
    let c = commit(cluster, &[key], start, tso(cluster).await).await;
    assert!(
        c.error
            .as_ref()
            .is_some_and(|e| e.retryable.contains("TxnLockNotFound")),
        "{c:?}"
    );
}

// ---- 1. Overlapped rollbacks ----

/// A commit record already at the rolled-back transaction's start ts: the
/// rollback becomes the record's overlapped-rollback flag.
#[tokio::test]
async fn a_rollback_on_top_of_a_commit_record_is_kept() {
    let cluster = cluster().await;
    for (key, how) in [(b"k1", 0), (b"k2", 1), (b"k3", 2)] {
        let key: &[u8] = key;
        let writer = tso(&cluster).await;
        let rolled = tso(&cluster).await;
        // The writer's async commit lands exactly on `rolled`'s start ts.
        let p = prewrite(&cluster, async_req(&[key], writer)).await;
        assert!(p.errors.is_empty() && p.min_commit_ts <= rolled, "{p:?}");
        assert!(commit(&cluster, &[key], writer, rolled)
            .await
            .error
            .is_none());
        match how {
            0 => batch_rollback(&cluster, &[key], rolled).await,
            1 => {
                let r = check_txn_status(&cluster, key, rolled, |r| r.rollback_if_not_exist = true)
                    .await;
                assert_eq!(r.action, Action::LockNotExistRollback as i32, "{r:?}");
            }
            _ => {
                let r = check_secondary_locks(&cluster, &[key], rolled).await;
                assert_eq!((r.locks.len(), r.commit_ts), (0, 0), "{r:?}");
            }
        }
        // The commit record stays as it was.
        assert_eq!(get(&cluster, key, rolled).await.value, b"v");
        let versions = cluster.versions(key);
        assert_eq!(versions.len(), 1, "{versions:?}");
        assert_eq!(
            (versions[0].commit_ts, versions[0].start_ts),
            (rolled, writer)
        );
        // The rolled-back transaction stays rolled back.
        assert_late_prewrite_rejected(&cluster, key, rolled).await;
        let status = check_txn_status(&cluster, key, rolled, |_| {}).await;
        assert!(status.error.is_none(), "{status:?}");
        assert_eq!((status.lock_ttl, status.commit_version), (0, 0));
        let again = check_secondary_locks(&cluster, &[key], rolled).await;
        assert_eq!((again.locks.len(), again.commit_ts), (0, 0));
        let relock = pessimistic_lock(&cluster, key, rolled, rolled).await;
        assert!(
            relock.errors[0].abort.contains("PessimisticLockRolledBack"),
            "{relock:?}"
        );
    }
    cluster.shutdown().await;
}

/// The rollback comes first, while the other transaction's async-commit
/// lock is on the key; that lock then commits at the rolled-back start ts.
#[tokio::test]
async fn a_commit_on_top_of_a_rollback_record_keeps_the_rollback() {
    let cluster = cluster().await;
    let writer = tso(&cluster).await;
    let p = prewrite(&cluster, async_req(&[b"k"], writer)).await;
    let rolled = tso(&cluster).await;
    assert!(p.min_commit_ts <= rolled);
    let r = check_txn_status(&cluster, b"k", rolled, |r| r.rollback_if_not_exist = true).await;
    assert_eq!(r.action, Action::LockNotExistRollback as i32, "{r:?}");
    assert!(commit(&cluster, &[b"k"], writer, rolled)
        .await
        .error
        .is_none());
    assert_eq!(get(&cluster, b"k", rolled).await.value, b"v");
    assert_late_prewrite_rejected(&cluster, b"k", rolled).await;
    cluster.shutdown().await;
}

// ---- 2. and 3. Resent prewrites ----

#[tokio::test]
async fn a_resent_async_commit_prewrite_answers_the_lock_min_commit_ts() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    let req = async_req(&[b"p", b"s"], start);
    let first = prewrite(&cluster, req.clone()).await;
    assert!(first.errors.is_empty() && first.min_commit_ts > start);
    // A later read raises max_ts; the resend must not move min_commit_ts.
    get(&cluster, b"x", tso(&cluster).await).await;
    let again = prewrite(&cluster, req).await;
    assert!(again.errors.is_empty(), "{again:?}");
    assert_eq!(again.min_commit_ts, first.min_commit_ts);
    for lock in cluster.locks(b"", b"") {
        assert_eq!(lock.min_commit_ts, first.min_commit_ts, "{lock:?}");
    }
    cluster.shutdown().await;
}

/// A lock that fell back to two-phase commit stays so: the resend answers
/// min_commit_ts 0, never a commit ts the locks do not carry.
#[tokio::test]
async fn a_resent_prewrite_of_a_fallen_back_lock_answers_zero() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    let mut req = async_req(&[b"p"], start);
    req.max_commit_ts = start; // min_commit_ts > start: too large
    let first = prewrite(&cluster, req.clone()).await;
    assert!(first.errors.is_empty());
    assert_eq!(first.min_commit_ts, 0);
    req.max_commit_ts = 0;
    let again = prewrite(&cluster, req).await;
    assert!(again.errors.is_empty());
    assert_eq!(again.min_commit_ts, 0, "{again:?}");
    assert!(!cluster.locks(b"", b"")[0].use_async_commit);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_resent_async_commit_prewrite_after_the_commit_answers_the_commit_ts() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    let req = async_req(&[b"p", b"s"], start);
    let first = prewrite(&cluster, req.clone()).await;
    let commit_ts = first.min_commit_ts;
    assert!(commit(&cluster, &[b"p", b"s"], start, commit_ts)
        .await
        .error
        .is_none());
    get(&cluster, b"x", tso(&cluster).await).await;
    let again = prewrite(&cluster, req).await;
    assert!(again.errors.is_empty(), "{again:?}");
    assert_eq!(
        (again.min_commit_ts, again.one_pc_commit_ts),
        (commit_ts, 0)
    );
    assert!(cluster.locks(b"", b"").is_empty());
    for key in [b"p", b"s"] {
        let versions = cluster.versions(key);
        assert_eq!(versions.len(), 1);
        assert_eq!(versions[0].commit_ts, commit_ts);
    }
    // Only the primary committed so far: the same answer.
    let start = tso(&cluster).await;
    let req = async_req(&[b"p2", b"s2"], start);
    let first = prewrite(&cluster, req.clone()).await;
    assert!(commit(&cluster, &[b"p2"], start, first.min_commit_ts)
        .await
        .error
        .is_none());
    get(&cluster, b"x", tso(&cluster).await).await;
    let again = prewrite(&cluster, req).await;
    assert_eq!(again.min_commit_ts, first.min_commit_ts, "{again:?}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_resent_one_pc_prewrite_after_the_commit_answers_the_commit_ts_once() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    let mut req = prewrite_req(vec![put(b"a", b"1"), put(b"b", b"1")], b"a", start);
    req.try_one_pc = true;
    let first = prewrite(&cluster, req.clone()).await;
    let commit_ts = first.one_pc_commit_ts;
    assert!(first.errors.is_empty() && commit_ts > start, "{first:?}");
    get(&cluster, b"x", tso(&cluster).await).await;
    let again = prewrite(&cluster, req).await;
    assert!(again.errors.is_empty(), "{again:?}");
    assert_eq!(
        (again.one_pc_commit_ts, again.min_commit_ts),
        (commit_ts, 0)
    );
    for key in [b"a", b"b"] {
        let versions = cluster.versions(key);
        assert_eq!(versions.len(), 1, "committed twice: {versions:?}");
        assert_eq!(versions[0].commit_ts, commit_ts);
    }

    // The same for a pessimistic 1PC transaction (its locks are gone).
    let start = tso(&cluster).await;
    assert!(pessimistic_lock(&cluster, b"c", start, start)
        .await
        .errors
        .is_empty());
    let mut req = prewrite_req(vec![put(b"c", b"1")], b"c", start);
    req.for_update_ts = start;
    req.pessimistic_actions = vec![DO_PESSIMISTIC_CHECK];
    req.try_one_pc = true;
    let first = prewrite(&cluster, req.clone()).await;
    let commit_ts = first.one_pc_commit_ts;
    assert!(commit_ts > start, "{first:?}");
    get(&cluster, b"x", tso(&cluster).await).await;
    let again = prewrite(&cluster, req).await;
    assert!(again.errors.is_empty(), "{again:?}");
    assert_eq!(again.one_pc_commit_ts, commit_ts);
    assert_eq!(cluster.versions(b"c").len(), 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_resent_prewrite_after_a_rollback_is_rejected() {
    let cluster = cluster().await;
    // Async commit, rolled back by a resolver.
    let start = tso(&cluster).await;
    let req = async_req(&[b"p", b"s"], start);
    prewrite(&cluster, req.clone()).await;
    batch_rollback(&cluster, &[b"p", b"s"], start).await;
    let again = prewrite(&cluster, req).await;
    let conflict = again.errors[0].conflict.clone().unwrap();
    assert_eq!(conflict.reason, REASON_SELF_ROLLED_BACK);
    assert_eq!((again.min_commit_ts, again.one_pc_commit_ts), (0, 0));
    assert!(cluster.locks(b"", b"").is_empty());

    // 1PC whose first attempt never arrived, rolled back by a resolver.
    let start = tso(&cluster).await;
    let r = check_txn_status(&cluster, b"q", start, |r| r.rollback_if_not_exist = true).await;
    assert_eq!(r.action, Action::LockNotExistRollback as i32);
    let mut req = prewrite_req(vec![put(b"q", b"1")], b"q", start);
    req.try_one_pc = true;
    let late = prewrite(&cluster, req).await;
    assert!(late.errors[0].conflict.is_some(), "{late:?}");
    assert_eq!(late.one_pc_commit_ts, 0);
    assert_eq!(cluster.versions(b"q")[0].kind, "rollback");

    // Pessimistic: the missing lock is what the prewrite reports.
    let start = tso(&cluster).await;
    pessimistic_lock(&cluster, b"r", start, start).await;
    batch_rollback(&cluster, &[b"r"], start).await;
    let mut req = prewrite_req(vec![put(b"r", b"1")], b"r", start);
    req.for_update_ts = start;
    req.pessimistic_actions = vec![DO_PESSIMISTIC_CHECK];
    let late = prewrite(&cluster, req).await;
    assert!(
        late.errors[0].abort.contains("PessimisticLockNotFound"),
        "{late:?}"
    );
    cluster.shutdown().await;
}

// ---- 4. CheckTxnStatus ----

#[tokio::test]
async fn check_txn_status_answers_committed_missing_and_rolled_back() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"p", b"v")], b"p", start)).await;
    let commit_ts = tso(&cluster).await;
    commit(&cluster, &[b"p"], start, commit_ts).await;
    let committed = check_txn_status(&cluster, b"p", start, |_| {}).await;
    assert!(committed.error.is_none());
    assert_eq!(
        (committed.commit_version, committed.lock_ttl),
        (commit_ts, 0)
    );
    assert!(committed.lock_info.is_none());

    // Missing, not asked to roll back: TxnNotFound, nothing written.
    let ghost = tso(&cluster).await;
    let missing = check_txn_status(&cluster, b"g", ghost, |_| {}).await;
    let nf = missing.error.unwrap().txn_not_found.unwrap();
    assert_eq!((nf.start_ts, nf.primary_key), (ghost, b"g".to_vec()));
    assert!(cluster.versions(b"g").is_empty());
    assert!(cluster.locks(b"", b"").is_empty());
    // So its prewrite may still come, and succeeds.
    let late = prewrite(&cluster, prewrite_req(vec![put(b"g", b"v")], b"g", ghost)).await;
    assert!(late.errors.is_empty(), "{late:?}");
    batch_rollback(&cluster, &[b"g"], ghost).await;

    // Missing, asked to roll back: a rollback record, TTL 0, commit 0.
    let ghost = tso(&cluster).await;
    let rolled = check_txn_status(&cluster, b"h", ghost, |r| r.rollback_if_not_exist = true).await;
    assert!(rolled.error.is_none());
    assert_eq!(rolled.action, Action::LockNotExistRollback as i32);
    assert_eq!((rolled.lock_ttl, rolled.commit_version), (0, 0));
    let versions = cluster.versions(b"h");
    assert_eq!(
        (versions[0].kind, versions[0].commit_ts),
        ("rollback", ghost)
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn check_txn_status_never_rolls_back_a_live_lock() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"p", b"v")], b"p", start)).await;
    // One millisecond short of (and exactly at) the TTL on the TSO clock.
    cluster.advance_tso_clock(Duration::from_millis(2_990));
    let alive = check_txn_status(&cluster, b"p", start, |r| {
        r.current_ts = (start >> 18).saturating_add(3_000) << 18;
        r.rollback_if_not_exist = true;
    })
    .await;
    assert_eq!(alive.lock_ttl, 3_000, "{alive:?}");
    assert!(alive.lock_info.is_some());
    assert_eq!(cluster.locks(b"", b"").len(), 1);

    // A TTL of u64::MAX never expires, and nothing overflows.
    let forever = tso(&cluster).await;
    let mut req = prewrite_req(vec![put(b"f", b"v")], b"f", forever);
    req.lock_ttl = u64::MAX;
    assert!(prewrite(&cluster, req).await.errors.is_empty());
    cluster.advance_tso_clock(Duration::from_secs(10 * 365 * 24 * 3600));
    for current_ts in [None, Some(u64::MAX)] {
        let r = check_txn_status(&cluster, b"f", forever, |r| {
            if let Some(ts) = current_ts {
                r.current_ts = ts;
            }
        })
        .await;
        assert!(r.error.is_none(), "{r:?}");
        assert_eq!(r.lock_ttl, u64::MAX);
        assert_eq!(r.action, Action::NoAction as i32);
    }
    let (mut c, ctx) = client_for(&cluster, b"f").await;
    let cleanup = c
        .kv_cleanup(kvrpcpb::CleanupRequest {
            context: Some(ctx),
            key: b"f".to_vec(),
            start_version: forever,
            current_ts: tso(&cluster).await,
        })
        .await
        .unwrap()
        .into_inner();
    assert!(cleanup.error.unwrap().locked.is_some());
    assert_eq!(cluster.locks(b"f", b"g").len(), 1);
    cluster.shutdown().await;
}

// ---- 5. The other commands ----

/// TiKV's `actions/commit.rs`: committing a pessimistic lock that was never
/// prewritten removes it and writes no record.
#[tokio::test]
async fn committing_a_pessimistic_lock_writes_no_record() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    assert!(pessimistic_lock(&cluster, b"p", start, start)
        .await
        .errors
        .is_empty());
    let commit_ts = tso(&cluster).await;
    let c = commit(&cluster, &[b"p"], start, commit_ts).await;
    assert!(c.error.is_none(), "{c:?}");
    assert!(cluster.locks(b"", b"").is_empty());
    assert!(cluster.versions(b"p").is_empty());
    // Nothing says the transaction committed on this key.
    let status = check_txn_status(&cluster, b"p", start, |_| {}).await;
    assert!(status.error.unwrap().txn_not_found.is_some());
    let again = commit(&cluster, &[b"p"], start, commit_ts).await;
    assert!(again.error.unwrap().retryable.contains("TxnLockNotFound"));
    // An older optimistic transaction does not conflict with it.
    let mut late = prewrite_req(vec![put(b"p", b"v")], b"p", start + 1);
    late.lock_ttl = 10;
    assert!(prewrite(&cluster, late).await.errors.is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn commit_answers() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    let mut req = prewrite_req(vec![put(b"a", b"1")], b"a", start);
    req.min_commit_ts = start + 100;
    prewrite(&cluster, req).await;
    let expired = commit(&cluster, &[b"a"], start, start + 99).await;
    let e = expired.error.unwrap().commit_ts_expired.unwrap();
    assert_eq!(
        (e.min_commit_ts, e.attempted_commit_ts),
        (start + 100, start + 99)
    );
    assert!(commit(&cluster, &[b"a"], start, start + 100)
        .await
        .error
        .is_none());
    // Already committed: Ok again.
    let again = commit(&cluster, &[b"a"], start, start + 100).await;
    assert!(again.error.is_none());
    // Rolled back: TxnLockNotFound.
    let rolled = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"b", b"1")], b"b", rolled)).await;
    batch_rollback(&cluster, &[b"b"], rolled).await;
    let late = commit(&cluster, &[b"b"], rolled, tso(&cluster).await).await;
    assert!(late.error.unwrap().retryable.contains("TxnLockNotFound"));
    cluster.shutdown().await;
}

/// TiKV's `PrewriteMutation::lock_info`: a pessimistic transaction's
/// prewrite that meets another lock is told TTL 0.
#[tokio::test]
async fn a_pessimistic_prewrite_meets_a_lock_with_ttl_zero() {
    let cluster = cluster().await;
    let owner = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"k", b"v")], b"k", owner)).await;
    let other = tso(&cluster).await;
    let mut req = prewrite_req(vec![put(b"k", b"w")], b"k", other);
    req.for_update_ts = other;
    req.pessimistic_actions = vec![0];
    let blocked = prewrite(&cluster, req).await;
    let info = blocked.errors[0].locked.clone().unwrap();
    assert_eq!((info.lock_version, info.lock_ttl), (owner, 0));
    // An optimistic one sees the real TTL.
    let blocked = prewrite(&cluster, prewrite_req(vec![put(b"k", b"w")], b"k", other)).await;
    assert_eq!(blocked.errors[0].locked.clone().unwrap().lock_ttl, 3_000);
    cluster.shutdown().await;
}

/// TiKV's `actions/prewrite.rs`, `check_for_newer_version` for a
/// pessimistic transaction: a key it did not lock is checked only on a
/// retried request, and a newer commit there means a lost lock.
#[tokio::test]
async fn a_pessimistic_prewrite_of_an_unlocked_key_checks_only_on_retry() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    let newer = write(&cluster, b"k", b"newer").await;
    let mut req = prewrite_req(vec![put(b"k", b"mine")], b"k", start);
    req.for_update_ts = start;
    req.pessimistic_actions = vec![0];
    req.context = Some(kvrpcpb::Context {
        is_retry_request: true,
        ..Default::default()
    });
    let retried = prewrite(&cluster, req.clone()).await;
    assert!(
        retried.errors[0].abort.contains("PessimisticLockNotFound"),
        "{retried:?}"
    );
    req.context = None;
    let first = prewrite(&cluster, req).await;
    assert!(first.errors.is_empty(), "{first:?}");
    assert!(newer > start);
    cluster.shutdown().await;
}

/// TiKV's `acquire_pessimistic_lock`: a commit after for_update_ts is a
/// write conflict even for a rolled-back transaction; otherwise the
/// rollback at its start ts answers PessimisticLockRolledBack.
#[tokio::test]
async fn pessimistic_lock_checks_conflicts_before_its_own_rollback() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    batch_rollback(&cluster, &[b"k"], start).await;
    let newer = write(&cluster, b"k", b"v").await;
    let stale = pessimistic_lock(&cluster, b"k", start, start).await;
    let conflict = stale.errors[0].conflict.clone().unwrap();
    assert_eq!(
        (conflict.conflict_commit_ts, conflict.reason),
        (newer, REASON_PESSIMISTIC_RETRY)
    );
    let fresh = pessimistic_lock(&cluster, b"k", start, tso(&cluster).await).await;
    assert!(
        fresh.errors[0].abort.contains("PessimisticLockRolledBack"),
        "{fresh:?}"
    );
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}

/// TiKV's `commands/pessimistic_rollback.rs`: only locks taken at or before
/// the request's for_update_ts go.
#[tokio::test]
async fn pessimistic_rollback_keeps_newer_locks() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    let later = tso(&cluster).await;
    pessimistic_lock(&cluster, b"a", start, start).await;
    pessimistic_lock(&cluster, b"b", start, later).await;
    let (mut c, ctx) = client_for(&cluster, b"a").await;
    let r = c
        .kv_pessimistic_rollback(kvrpcpb::PessimisticRollbackRequest {
            context: Some(ctx),
            start_version: start,
            for_update_ts: start,
            keys: vec![b"a".to_vec(), b"b".to_vec()],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.errors.is_empty());
    let locks = cluster.locks(b"", b"");
    assert_eq!(locks.len(), 1);
    assert_eq!(
        (locks[0].key.as_slice(), locks[0].lock_for_update_ts),
        (&b"b"[..], later)
    );
    assert!(cluster.versions(b"a").is_empty());
    cluster.shutdown().await;
}

/// TiKV's `actions/check_txn_status.rs` with `verify_is_primary`: a lock of
/// the transaction on a key that is not its primary is a `PrimaryMismatch`
/// carrying the lock, except a pessimistic one when the caller is not
/// resolving pessimistic locks: that one is removed (and its waiters
/// woken), and the answer is the missing lock's.
#[tokio::test]
async fn check_txn_status_verifying_the_primary() {
    let cluster = cluster().await;
    let start = tso(&cluster).await;
    // `s` holds a pessimistic lock whose primary is `p`.
    let (mut c, ctx) = client_for(&cluster, b"s").await;
    let locked = c
        .kv_pessimistic_lock(kvrpcpb::PessimisticLockRequest {
            context: Some(ctx),
            mutations: vec![Mutation {
                op: Op::PessimisticLock as i32,
                key: b"s".to_vec(),
                ..Default::default()
            }],
            primary_lock: b"p".to_vec(),
            start_version: start,
            for_update_ts: start,
            lock_ttl: 3_000,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(locked.errors.is_empty());
    let verify = |resolving: bool| {
        move |r: &mut kvrpcpb::CheckTxnStatusRequest| {
            r.verify_is_primary = true;
            r.resolving_pessimistic_lock = resolving;
        }
    };
    // Resolving pessimistic locks: a mismatch, with the lock.
    let mismatch = check_txn_status(&cluster, b"s", start, verify(true)).await;
    let info = mismatch
        .error
        .and_then(|e| e.primary_mismatch)
        .and_then(|m| m.lock_info)
        .expect("a primary mismatch with the lock");
    assert_eq!(
        (info.key.as_slice(), info.primary_lock.as_slice()),
        (&b"s"[..], &b"p"[..])
    );
    assert_eq!(cluster.locks(b"", b"").len(), 1);
    // Otherwise the stale pessimistic lock goes, and the answer is the
    // missing lock's (`TxnNotFound`: `rollback_if_not_exist` is unset).
    let gone = check_txn_status(&cluster, b"s", start, verify(false)).await;
    assert!(cluster.locks(b"", b"").is_empty(), "{gone:?}");
    assert!(
        gone.error
            .as_ref()
            .is_some_and(|e| e.txn_not_found.is_some()),
        "{gone:?}"
    );
    // A prewritten lock is never removed so: always a mismatch.
    let other = tso(&cluster).await;
    prewrite(&cluster, prewrite_req(vec![put(b"t", b"v")], b"q", other)).await;
    let mismatch = check_txn_status(&cluster, b"t", other, verify(false)).await;
    assert!(mismatch.error.and_then(|e| e.primary_mismatch).is_some());
    cluster.shutdown().await;
}
