//! Lock resolution end to end: a crashed writer's locks (2PC and async
//! commit) are resolved once their TTL expires on the simulated TSO clock;
//! a live lock is waited for within the request deadline; concurrent
//! readers share one resolution per (transaction, Region); GC helpers, and
//! GC's cleanup stage as client-rust builds it.

use std::sync::Arc;
use std::time::Duration;

use crate::support::cluster;
use tikv_plan::codec::encode_bytes;
use tikv_plan::pd::PdRpcClient;
use tikv_plan::proto::kvrpcpb::{self, Mutation, Op};
use tikv_plan::region::RegionVerId;
use tikv_plan::request::plan::CleanupLocksResult;
use tikv_plan::request::{Collect, CollectSingle, Keyspace, Plan, PlanBuilder};
use tikv_plan::transaction::gc::TransactionStatusKind;
use tikv_plan::transaction::{LockResolver, ResolveLocksContext, ResolveLocksOptions};
use tikv_plan::transaction_lowering::{new_get_request, new_scan_lock_request};
use tikv_plan::{
    Backoff, Config, Error, Timestamp, TimestampExt, TransactionClient, TransactionOptions,
};
use tikv_sim::SimCluster;

async fn client(cluster: &SimCluster, deadline: Duration) -> TransactionClient {
    TransactionClient::new_with_config(
        cluster.pd_endpoints(),
        Config::default().with_request_deadline(deadline),
    )
    .await
    .unwrap()
}

/// A writer that crashes after prewriting `keys` (all with `primary`),
/// sent by hand to each key's leader. Returns its start ts.
async fn crashed_prewrite(
    cluster: &SimCluster,
    primary: &str,
    keys: &[&str],
    async_commit_secondaries: Option<&[&str]>,
) -> u64 {
    let start = cluster.current_ts();
    for key in keys {
        let region = cluster
            .region_for_key(&encode_bytes(key.as_bytes()))
            .unwrap();
        let store = cluster.leader_of(region.id).unwrap().store_id;
        let mut tikv = cluster.tikv_client(store).await.unwrap();
        let is_primary = *key == primary;
        let request = kvrpcpb::PrewriteRequest {
            context: cluster.context(region.id, store),
            mutations: vec![Mutation {
                op: Op::Put as i32,
                key: key.as_bytes().to_vec(),
                value: format!("crashed-{key}").into_bytes(),
                ..Default::default()
            }],
            primary_lock: primary.as_bytes().to_vec(),
            start_version: start,
            lock_ttl: 3_000,
            min_commit_ts: if async_commit_secondaries.is_some() {
                start + 1
            } else {
                0
            },
            use_async_commit: async_commit_secondaries.is_some(),
            secondaries: match (is_primary, async_commit_secondaries) {
                (true, Some(s)) => s.iter().map(|k| k.as_bytes().to_vec()).collect(),
                _ => Vec::new(),
            },
            ..Default::default()
        };
        let response = tikv.kv_prewrite(request).await.unwrap().into_inner();
        assert!(response.errors.is_empty(), "{response:?}");
    }
    start
}

async fn read(client: &TransactionClient, key: &str) -> tikv_plan::Result<Option<Vec<u8>>> {
    let mut snapshot = client.snapshot(
        client.current_timestamp().await?,
        TransactionOptions::new_optimistic(),
    );
    snapshot.get(key.to_owned()).await
}

#[tokio::test]
async fn a_crashed_writers_lock_is_resolved_after_its_ttl_expires() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_millis(400)).await;
    let start = crashed_prewrite(&cluster, "a", &["a", "z"], None).await;
    assert_eq!(cluster.locks(b"", b"").len(), 2);

    // Alive: the reader waits by the TTL, bounded by its deadline.
    let err = read(&client, "z").await.unwrap_err();
    match &err {
        Error::ResolveLockError(locks) => assert_eq!(locks[0].lock_version, start),
        other => panic!("expected the live lock, got {other:?}"),
    }
    assert!(!cluster.locks(b"", b"").is_empty());

    // The TTL passes on the TSO clock: the reader rolls the writer back.
    cluster.advance_tso_clock(Duration::from_secs(4));
    assert_eq!(read(&client, "z").await.unwrap(), None);
    assert_eq!(read(&client, "a").await.unwrap(), None);
    assert!(cluster.locks(b"", b"").is_empty());
    assert!(cluster
        .versions(b"a")
        .iter()
        .any(|v| v.kind == "rollback" && v.start_ts == start));
    let stats = client.stats().locks;
    assert!(stats.check_txn_status >= 2, "{stats:?}");
    cluster.shutdown().await;
}

/// `no_resolve_locks()`: a request that meets a lock fails with the lock
/// and resolves nothing, even a lock whose TTL has long expired (which the
/// default options would roll back at once).
#[tokio::test]
async fn no_resolve_locks_returns_the_lock_and_resolves_nothing() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    let start = crashed_prewrite(&cluster, "a", &["a", "z"], None).await;
    cluster.advance_tso_clock(Duration::from_secs(4));
    let options = TransactionOptions::new_optimistic().no_resolve_locks();

    let ts = client.current_timestamp().await.unwrap();
    let mut snapshot = client.snapshot(ts, options.clone());
    match snapshot.get("z".to_owned()).await {
        Err(Error::ResolveLockError(locks)) => {
            assert_eq!(locks.len(), 1, "{locks:?}");
            assert_eq!(locks[0].key, b"z");
            assert_eq!(locks[0].lock_version, start);
        }
        other => panic!("expected the lock, got {other:?}"),
    }
    // A writer meets the lock in its prewrite and gets it back too.
    let mut txn = client.begin_with_options(options).await.unwrap();
    txn.put("a".to_owned(), "mine".to_owned()).await.unwrap();
    assert!(
        matches!(txn.commit().await, Err(Error::ResolveLockError(_))),
        "the prewrite met the crashed writer's lock"
    );
    assert_eq!(cluster.locks(b"", b"").len(), 2, "nothing was resolved");
    assert_eq!(client.stats().locks.check_txn_status, 0);

    // The default options resolve the expired lock.
    assert_eq!(read(&client, "z").await.unwrap(), None);
    assert!(cluster
        .locks(b"", b"")
        .iter()
        .all(|l| l.lock_version != start));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_reader_waits_for_a_live_lock_and_reads_the_commit() {
    let cluster = cluster(&[]).await;
    let client = client(&cluster, Duration::from_secs(10)).await;
    let writer = client.clone();
    let mut txn = writer.begin_optimistic().await.unwrap();
    txn.put("k".to_owned(), "old".to_owned()).await.unwrap();
    txn.commit().await.unwrap();

    // A crashed writer's lock with 3 s of TTL, 2.9 s of which pass on the
    // TSO clock: the reader waits out the last 100 ms by the TTL and then
    // rolls it back.
    let start = crashed_prewrite(&cluster, "k", &["k"], None).await;
    let reader = tokio::spawn({
        let client = client.clone();
        async move { read(&client, "k").await }
    });
    cluster.advance_tso_clock(Duration::from_millis(2_900));
    let value = reader.await.unwrap().unwrap();
    assert_eq!(value, Some(b"old".to_vec()));
    assert!(cluster
        .versions(b"k")
        .iter()
        .any(|v| v.kind == "rollback" && v.start_ts == start));
    cluster.shutdown().await;
}

#[tokio::test]
async fn concurrent_readers_share_one_resolution_per_transaction_and_region() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    let keys = ["a", "b", "c", "d", "e", "f"];
    crashed_prewrite(&cluster, "a", &keys, None).await;
    cluster.advance_tso_clock(Duration::from_secs(4));
    // Slow the Region's leader so every reader meets the locks before the
    // first resolution ends.
    let region = cluster.region_for_key(&encode_bytes(b"a")).unwrap();
    let leader = cluster.leader_of(region.id).unwrap().store_id;
    cluster.store_slow(leader, Duration::from_millis(100));
    let readers: Vec<_> = keys
        .iter()
        .map(|k| {
            let client = client.clone();
            let k = k.to_string();
            tokio::spawn(async move { read(&client, &k).await })
        })
        .collect();
    for r in readers {
        assert_eq!(r.await.unwrap().unwrap(), None);
    }
    let stats = client.stats().locks;
    assert_eq!(stats.resolve_lock_sent, 1, "{stats:?}");
    assert_eq!(
        stats.resolve_lock_shared,
        keys.len() as u64 - 1,
        "{stats:?}"
    );
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_crashed_async_commit_writer_with_a_rolled_back_secondary_ends_rolled_back() {
    let cluster = cluster(&["h", "p"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    // Primary "a" names secondaries "j" and "x"; "j" is prewritten, "x"
    // never is (the writer crashed first).
    let start = crashed_prewrite(&cluster, "a", &["a", "j"], Some(&["j", "x"])).await;
    cluster.advance_tso_clock(Duration::from_secs(4));

    // The reader of "j" finds the async-commit primary expired, asks the
    // secondaries, finds "x" missing: rolled back, never committed.
    assert_eq!(read(&client, "j").await.unwrap(), None);
    assert_eq!(read(&client, "a").await.unwrap(), None);
    assert_eq!(read(&client, "x").await.unwrap(), None);
    assert!(
        cluster.locks(b"", b"").is_empty(),
        "{:?}",
        cluster.locks(b"", b"")
    );
    for key in [b"a".as_slice(), b"j", b"x"] {
        let versions = cluster.versions(key);
        assert!(
            versions
                .iter()
                .all(|v| v.kind == "rollback" && v.start_ts == start),
            "{key:?}: {versions:?}"
        );
    }
    assert!(client.stats().locks.check_secondary_locks >= 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_crashed_async_commit_writer_with_every_lock_in_place_ends_committed() {
    let cluster = cluster(&["h", "p"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    crashed_prewrite(&cluster, "a", &["a", "j", "x"], Some(&["j", "x"])).await;
    cluster.advance_tso_clock(Duration::from_secs(4));
    assert_eq!(
        read(&client, "x").await.unwrap(),
        Some(b"crashed-x".to_vec())
    );
    assert_eq!(
        read(&client, "a").await.unwrap(),
        Some(b"crashed-a".to_vec())
    );
    assert_eq!(
        read(&client, "j").await.unwrap(),
        Some(b"crashed-j".to_vec())
    );
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn scan_cleanup_and_resolve_locks() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    let start = crashed_prewrite(&cluster, "b", &["b", "c", "n"], None).await;
    let safepoint = client.current_timestamp().await.unwrap();
    let locks = client.scan_locks(&safepoint, .., 1).await.unwrap();
    assert_eq!(locks.len(), 3, "{locks:?}");
    // Alive: resolve_locks (a reader's resolution) gives them back...
    let live = client
        .resolve_locks(locks.clone(), safepoint, Backoff::no_backoff())
        .await
        .unwrap();
    assert_eq!(live.len(), 3);
    // ...while cleanup (GC's, as in client-rust) rolls the transaction back
    // whatever its TTL: everything below the safe point goes.
    let result = client
        .cleanup_locks(.., &safepoint, Default::default())
        .await
        .unwrap();
    assert_eq!(result.resolved_locks, 3);
    assert!(cluster.locks(b"", b"").is_empty());
    assert!(cluster.versions(b"n").iter().all(|v| v.start_ts == start));
    // A lock newer than the safe point is not scanned.
    assert!(client
        .scan_locks(&tikv_plan::Timestamp::from_version(start - 1), .., 10)
        .await
        .unwrap()
        .is_empty());
    cluster.shutdown().await;
}

#[tokio::test]
async fn unsafe_destroy_range_deletes_on_every_store() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    let mut txn = client.begin_optimistic().await.unwrap();
    for k in ["a", "b", "n", "z"] {
        txn.put(k.to_owned(), "v".to_owned()).await.unwrap();
    }
    txn.commit().await.unwrap();
    client
        .unsafe_destroy_range("b".to_owned().."z".to_owned())
        .await
        .unwrap();
    assert_eq!(read(&client, "a").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(read(&client, "b").await.unwrap(), None);
    assert_eq!(read(&client, "n").await.unwrap(), None);
    assert_eq!(read(&client, "z").await.unwrap(), Some(b"v".to_vec()));
    cluster.shutdown().await;
}

/// GC's cleanup as client-rust 0.4.0 builds it: a `ScanLock` plan with the
/// `CleanupLocks` stage, under a retry stage that shards it by Region.
async fn gc_cleanup(
    cluster: &SimCluster,
    safepoint: u64,
    ctx: ResolveLocksContext,
    options: ResolveLocksOptions,
) -> tikv_plan::Result<CleanupLocksResult> {
    // A plain PD client: the scan covers everything, and the resolver's
    // requests route by the locks' keys, which sit well inside the Regions
    // these tests split at.
    let pd = Arc::new(PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default()).await?);
    let safepoint = Timestamp::from_version(safepoint);
    let scan = new_scan_lock_request((..).into(), &safepoint, options.batch_size);
    PlanBuilder::new(pd, Keyspace::Disable, scan)
        .cleanup_locks(
            ctx,
            options,
            Backoff::no_jitter_backoff(2, 500, 10),
            Keyspace::Disable,
        )
        .retry_multi_region(Backoff::no_jitter_backoff(2, 500, 10))
        .extract_error()
        .merge(Collect)
        .plan()
        .execute()
        .await
}

#[tokio::test]
async fn gc_cleanup_rolls_back_a_running_transaction_in_every_region() {
    let cluster = cluster(&["m"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    // Alive (TTL 3 s, clock not advanced): one transaction across both
    // Regions, another beside it, so a page of one lock leaves more.
    let start = crashed_prewrite(&cluster, "b", &["b", "n"], None).await;
    let other = crashed_prewrite(&cluster, "c", &["c"], None).await;
    let safepoint = cluster.current_ts();
    // A reader's resolution leaves a live lock in place...
    let locks = client
        .scan_locks(&Timestamp::from_version(safepoint), .., 10)
        .await
        .unwrap();
    let live = client
        .resolve_locks(
            locks,
            Timestamp::from_version(safepoint),
            Backoff::no_backoff(),
        )
        .await
        .unwrap();
    assert_eq!(live.len(), 3);
    // ...GC's rolls the transaction back, a page of one lock at a time.
    let ctx = ResolveLocksContext::default();
    let options = ResolveLocksOptions {
        batch_size: 1,
        ..Default::default()
    };
    let result = gc_cleanup(&cluster, safepoint, ctx.clone(), options)
        .await
        .unwrap();
    assert_eq!(result.resolved_locks, 3);
    assert!(cluster.locks(b"", b"").is_empty());
    for (key, txn) in [(b"b".as_slice(), start), (b"n", start), (b"c", other)] {
        let versions = cluster.versions(key);
        assert!(
            versions
                .iter()
                .all(|v| v.kind == "rollback" && v.start_ts == txn),
            "{key:?}: {versions:?}"
        );
    }
    assert_eq!(read(&client, "b").await.unwrap(), None);
    // The context remembers the decision and the Regions cleaned.
    let status = ctx
        .get_resolved(start)
        .await
        .expect("a final status is kept");
    assert!(matches!(status.kind, TransactionStatusKind::RolledBack));
    for region in cluster.regions() {
        let ver_id = RegionVerId {
            id: region.id,
            conf_ver: region.region_epoch.as_ref().unwrap().conf_ver,
            ver: region.region_epoch.as_ref().unwrap().version,
        };
        assert!(ctx.is_region_cleaned(start, &ver_id).await, "{region:?}");
    }
    // A second run finds nothing.
    let again = gc_cleanup(&cluster, safepoint, ctx, options).await.unwrap();
    assert_eq!(again.resolved_locks, 0);
    cluster.shutdown().await;
}

#[tokio::test]
async fn gc_cleanup_decides_async_commit_by_the_secondaries() {
    let cluster = cluster(&["h", "p"]).await;
    let client = client(&cluster, Duration::from_secs(5)).await;
    // Every lock in place: committed at the largest min_commit_ts.
    let committed = crashed_prewrite(&cluster, "a", &["a", "j", "x"], Some(&["j", "x"])).await;
    let safepoint = cluster.current_ts();
    let result = gc_cleanup(
        &cluster,
        safepoint,
        ResolveLocksContext::default(),
        ResolveLocksOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(result.resolved_locks, 3);
    assert!(cluster.locks(b"", b"").is_empty());
    for key in ["a", "j", "x"] {
        assert_eq!(
            read(&client, key).await.unwrap(),
            Some(format!("crashed-{key}").into_bytes()),
            "{key}"
        );
    }
    // "x" never prewritten: the missing-lock rule rolls the transaction
    // back (client-rust 0.4.0's cleanup would commit it).
    let rolled_back = crashed_prewrite(&cluster, "b", &["b", "k"], Some(&["k", "y"])).await;
    assert!(rolled_back > committed);
    // A 2PC lock beside them, which an async-commit-only cleanup leaves.
    crashed_prewrite(&cluster, "d", &["d"], None).await;
    let result = gc_cleanup(
        &cluster,
        cluster.current_ts(),
        ResolveLocksContext::default(),
        ResolveLocksOptions {
            async_commit_only: true,
            ..Default::default()
        },
    )
    .await
    .unwrap();
    assert_eq!(result.resolved_locks, 2);
    let left: Vec<Vec<u8>> = cluster.locks(b"", b"").into_iter().map(|l| l.key).collect();
    assert_eq!(left, vec![b"d".to_vec()]);
    for key in ["b", "k"] {
        assert_eq!(read(&client, key).await.unwrap(), None, "{key}");
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn gc_lock_resolver_checks_a_transaction_status() {
    let cluster = cluster(&["m"]).await;
    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap(),
    );
    let mut resolver = LockResolver::new(ResolveLocksContext::default());
    // No lock and no record, not rolled back: TxnNotFound, as in client-rust.
    let unknown = cluster.current_ts();
    let answer = resolver
        .check_txn_status(
            Arc::clone(&pd),
            Keyspace::Disable,
            unknown,
            b"q".to_vec(),
            0,
            unknown + 1,
            false,
            false,
            false,
            false,
        )
        .await;
    assert!(matches!(answer, Err(Error::TxnNotFound(_))), "{answer:?}");
    // A live lock is Locked and not expired.
    let start = crashed_prewrite(&cluster, "c", &["c"], None).await;
    let status = resolver
        .check_txn_status(
            Arc::clone(&pd),
            Keyspace::Disable,
            start,
            b"c".to_vec(),
            0,
            cluster.current_ts(),
            false,
            false,
            false,
            false,
        )
        .await
        .unwrap();
    assert!(matches!(
        status.kind,
        TransactionStatusKind::Locked(3_000, _)
    ));
    assert!(!status.is_expired && !status.is_cacheable());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_hand_built_read_resolves_locks_in_client_rusts_order() {
    let cluster = cluster(&["m"]).await;
    crashed_prewrite(&cluster, "e", &["e", "p"], None).await;
    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap(),
    );
    let read = |key: &'static str, lock_backoff: Backoff| {
        let pd = Arc::clone(&pd);
        let ts = Timestamp::from_version(cluster.current_ts());
        async move {
            // client-rust's order: the stage under the retry stage.
            PlanBuilder::new(pd, Keyspace::Disable, new_get_request(key.into(), ts))
                .resolve_lock(ts, lock_backoff, Keyspace::Disable)
                .retry_multi_region(Backoff::no_jitter_backoff(2, 500, 10))
                .merge(CollectSingle)
                .post_process_default()
                .plan()
                .execute()
                .await
        }
    };
    // Without a lock backoff nothing is resolved: the lock is the error.
    let refused = read("e", Backoff::no_backoff()).await;
    assert!(
        matches!(refused, Err(Error::ResolveLockError(ref l)) if l.len() == 1),
        "{refused:?}"
    );
    assert_eq!(cluster.locks(b"", b"").len(), 2);
    // Expired: the reader rolls the writer back and reads past it, in
    // both Regions.
    cluster.advance_tso_clock(Duration::from_secs(4));
    let backoff = Backoff::no_jitter_backoff(2, 500, 10);
    assert_eq!(read("e", backoff.clone()).await.unwrap(), None);
    assert_eq!(read("p", backoff).await.unwrap(), None);
    assert!(cluster.locks(b"", b"").is_empty());
    cluster.shutdown().await;
}
