//! Transactional requests meet the same Region checks and faults as raw
//! ones, in TiKV's order, over real gRPC; keys are checked on their
//! memcomparable encoding.

use tikv_sim::codec::encode_bytes;
use tikv_sim::proto::kvrpcpb::{self, Mutation, Op};
use tikv_sim::{HangMode, Outcome, SimCluster};

async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![encode_bytes(b"m")])
        .start()
        .await
        .unwrap()
}

fn ctx_for(cluster: &SimCluster, key: &[u8], store: Option<u64>) -> (u64, kvrpcpb::Context) {
    let region = cluster.region_for_key(&encode_bytes(key)).unwrap();
    let store = store.unwrap_or_else(|| cluster.leader_of(region.id).unwrap().store_id);
    (store, cluster.context(region.id, store).unwrap())
}

fn prewrite_req(ctx: kvrpcpb::Context, key: &[u8], start: u64) -> kvrpcpb::PrewriteRequest {
    kvrpcpb::PrewriteRequest {
        context: Some(ctx),
        mutations: vec![Mutation {
            op: Op::Put as i32,
            key: key.to_vec(),
            value: b"v".to_vec(),
            assertion: 0,
        }],
        primary_lock: key.to_vec(),
        start_version: start,
        lock_ttl: 3_000,
        ..Default::default()
    }
}

#[tokio::test]
async fn transactional_keys_are_checked_on_their_encoding() {
    let cluster = cluster().await;
    // Raw "m" sorts below the boundary encode("m"), so raw clients find it
    // in the first Region; transactional "m" lives in the second.
    let first = cluster.region_for_key(b"m").unwrap();
    let second = cluster.region_for_key(&encode_bytes(b"m")).unwrap();
    assert_ne!(first.id, second.id);
    let (store, ctx) = ctx_for(&cluster, b"a", None);
    let mut c = cluster.tikv_client(store).await.unwrap();
    let start = cluster.current_ts();
    let wrong = c
        .kv_prewrite(prewrite_req(ctx.clone(), b"m", start))
        .await
        .unwrap()
        .into_inner();
    let e = wrong.region_error.unwrap().key_not_in_region.unwrap();
    assert_eq!((e.key, e.region_id), (b"m".to_vec(), first.id));
    assert_eq!(e.end_key, encode_bytes(b"m"));
    let ok = c
        .kv_prewrite(prewrite_req(ctx, b"l\xff\xff", start))
        .await
        .unwrap()
        .into_inner();
    assert!(ok.region_error.is_none() && ok.errors.is_empty(), "{ok:?}");
    // A raw put of "m" with the first Region's context is fine.
    let (store, ctx) = ctx_for(&cluster, b"a", None);
    let raw = cluster
        .tikv_client(store)
        .await
        .unwrap()
        .raw_put(kvrpcpb::RawPutRequest {
            context: Some(ctx),
            key: b"m".to_vec(),
            value: b"raw".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(raw.region_error.is_none());
    // A scan starting in the other Region is refused, one at the edge is served.
    let (store, ctx) = ctx_for(&cluster, b"a", None);
    let mut c = cluster.tikv_client(store).await.unwrap();
    let scan = |start: &[u8]| kvrpcpb::ScanRequest {
        context: Some(ctx.clone()),
        start_key: start.to_vec(),
        version: u64::MAX - 1,
        limit: 10,
        ..Default::default()
    };
    let outside = c.kv_scan(scan(b"n")).await.unwrap().into_inner();
    assert!(outside.region_error.unwrap().key_not_in_region.is_some());
    cluster.shutdown().await;
}

#[tokio::test]
async fn region_errors_come_in_tikv_order_for_transactional_requests() {
    let cluster = cluster().await;
    let region = cluster.region_for_key(&encode_bytes(b"a")).unwrap();
    let leader = cluster.leader_of(region.id).unwrap().store_id;
    let follower = cluster
        .store_ids()
        .into_iter()
        .find(|s| *s != leader)
        .unwrap();
    let get = |ctx: kvrpcpb::Context| kvrpcpb::GetRequest {
        context: Some(ctx),
        key: b"a".to_vec(),
        version: 10,
    };

    // NotLeader with the leader from a follower.
    let (_, fctx) = ctx_for(&cluster, b"a", Some(follower));
    let mut c = cluster.tikv_client(follower).await.unwrap();
    let nl = c.kv_get(get(fctx)).await.unwrap().into_inner();
    assert_eq!(
        nl.region_error
            .unwrap()
            .not_leader
            .unwrap()
            .leader
            .unwrap()
            .store_id,
        leader
    );

    // Busy comes before everything else, even before a stale epoch.
    let (_, ctx) = ctx_for(&cluster, b"a", None);
    let mut stale = ctx.clone();
    stale.region_epoch = Some(tikv_sim::proto::metapb::RegionEpoch {
        conf_ver: 1,
        version: 0,
    });
    let mut c = cluster.tikv_client(leader).await.unwrap();
    cluster.store_busy(leader, Some(30));
    let busy = c.kv_get(get(stale.clone())).await.unwrap().into_inner();
    assert_eq!(
        busy.region_error
            .unwrap()
            .server_is_busy
            .unwrap()
            .estimated_wait_ms,
        30
    );
    cluster.store_busy(leader, None);
    let epoch = c.kv_get(get(stale)).await.unwrap().into_inner();
    assert!(epoch.region_error.unwrap().epoch_not_match.is_some());

    // A split at an encoded key moves transactional data with it.
    let start = cluster.current_ts();
    let p = c
        .kv_prewrite(prewrite_req(ctx.clone(), b"f", start))
        .await
        .unwrap()
        .into_inner();
    assert!(p.errors.is_empty());
    cluster.split_region(&encode_bytes(b"c")).unwrap();
    let old_epoch = c
        .kv_commit(kvrpcpb::CommitRequest {
            context: Some(ctx),
            start_version: start,
            keys: vec![b"f".to_vec()],
            commit_version: start + 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        old_epoch
            .region_error
            .unwrap()
            .epoch_not_match
            .unwrap()
            .current_regions
            .len(),
        2
    );
    let (store, ctx) = ctx_for(&cluster, b"f", None);
    let committed = cluster
        .tikv_client(store)
        .await
        .unwrap()
        .kv_commit(kvrpcpb::CommitRequest {
            context: Some(ctx),
            start_version: start,
            keys: vec![b"f".to_vec()],
            commit_version: start + 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        committed.region_error.is_none() && committed.error.is_none(),
        "{committed:?}"
    );
    assert_eq!(cluster.versions(b"f").len(), 1);
    let counts = cluster.counters(leader);
    assert_eq!(counts.count("kv_get", Outcome::ServerIsBusy), 1);
    assert_eq!(counts.count("kv_get", Outcome::EpochNotMatch), 1);
    assert_eq!(counts.count("kv_commit", Outcome::EpochNotMatch), 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_dropped_commit_response_still_commits() {
    let cluster = cluster().await;
    let (store, ctx) = ctx_for(&cluster, b"k", None);
    let mut c = cluster.tikv_client(store).await.unwrap();
    let start = cluster.current_ts();
    c.kv_prewrite(prewrite_req(ctx.clone(), b"k", start))
        .await
        .unwrap();
    cluster.drop_next_response(store, "kv_commit").unwrap();
    let commit = kvrpcpb::CommitRequest {
        context: Some(ctx),
        start_version: start,
        keys: vec![b"k".to_vec()],
        commit_version: cluster.current_ts(),
        ..Default::default()
    };
    let lost = c.kv_commit(commit.clone()).await;
    assert!(
        lost.is_err(),
        "the client sees a transport failure: {lost:?}"
    );
    // The commit was applied: the outcome was undetermined, not failed.
    assert_eq!(cluster.versions(b"k")[0].commit_ts, commit.commit_version);
    assert!(cluster.locks(b"", b"").is_empty());
    assert_eq!(
        cluster.counters(store).count("kv_commit", Outcome::Dropped),
        1
    );
    // A resend on a new connection is answered, idempotently.
    let mut c = cluster.tikv_client(store).await.unwrap();
    let again = c.kv_commit(commit).await.unwrap().into_inner();
    assert!(again.error.is_none() && again.region_error.is_none());
    assert!(cluster.drop_next_response(store, "kv_nope").is_err());
    cluster.shutdown().await;
}

#[tokio::test]
async fn hung_and_downed_stores_stall_transactional_requests_too() {
    let cluster = cluster().await;
    let (store, ctx) = ctx_for(&cluster, b"k", None);
    let mut c = cluster.tikv_client(store).await.unwrap();
    cluster.store_hang(store, HangMode::Respond);
    let req = kvrpcpb::GetRequest {
        context: Some(ctx),
        key: b"k".to_vec(),
        version: 5,
    };
    let pending = tokio::spawn({
        let mut c = c.clone();
        let req = req.clone();
        async move { c.kv_get(req).await }
    });
    // Wait until the store has the request in its hang, then lift it.
    let mut seen = false;
    for _ in 0..200 {
        if cluster.counters(store).count("kv_get", Outcome::Hung) == 1 {
            seen = true;
            break;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    assert!(seen, "the request reached the hung store");
    cluster.store_unhang(store);
    let answered = pending.await.unwrap().unwrap().into_inner();
    assert!(answered.not_found);
    cluster.store_down(store).await;
    assert!(c.kv_get(req).await.is_err());
    cluster.shutdown().await;
}
