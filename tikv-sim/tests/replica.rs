//! Reads served by replicas, as TiKV serves them: lagging replicas, read
//! index for `replica_read`, safe-ts and `DataIsNotReady` for `stale_read`,
//! and store labels from PD.

mod txn_support;

use std::time::Duration;

use tikv_sim::proto::kvrpcpb;
use tikv_sim::proto::pdpb;
use tikv_sim::{ColdMode, Outcome, SimCluster};
use txn_support::{commit, prewrite, prewrite_req, put, tso, write};

/// One Region on three stores; store 1 leads. Returns the cluster, the
/// Region id and a follower's store.
async fn one_region() -> (SimCluster, u64, u64) {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap();
    let region = cluster.regions()[0].id;
    let leader = cluster.leader_of(region).unwrap().store_id;
    let follower = (1..=3).find(|s| *s != leader).unwrap();
    (cluster, region, follower)
}

fn flagged(
    cluster: &SimCluster,
    region: u64,
    store: u64,
    replica: bool,
    stale: bool,
) -> kvrpcpb::Context {
    kvrpcpb::Context {
        replica_read: replica,
        stale_read: stale,
        ..cluster.context(region, store).unwrap()
    }
}

async fn raw_put(cluster: &SimCluster, region: u64, key: &[u8], value: &[u8]) {
    let leader = cluster.leader_of(region).unwrap().store_id;
    let mut c = cluster.tikv_client(leader).await.unwrap();
    let resp = c
        .raw_put(kvrpcpb::RawPutRequest {
            context: cluster.context(region, leader),
            key: key.to_vec(),
            value: value.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        resp.region_error.is_none() && resp.error.is_empty(),
        "{resp:?}"
    );
}

async fn raw_get(
    cluster: &SimCluster,
    store: u64,
    ctx: kvrpcpb::Context,
    key: &[u8],
) -> kvrpcpb::RawGetResponse {
    let mut c = cluster.tikv_client(store).await.unwrap();
    c.raw_get(kvrpcpb::RawGetRequest {
        context: Some(ctx),
        key: key.to_vec(),
        cf: String::new(),
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test]
async fn a_lagging_replica_serves_stale_data_only_to_a_read_without_read_index() {
    let (cluster, region, follower) = one_region().await;
    raw_put(&cluster, region, b"k", b"old").await;
    // The follower's applied state stops at "old" for an hour.
    cluster
        .store_lag(follower, Some(Duration::from_secs(3600)))
        .unwrap();
    raw_put(&cluster, region, b"k", b"new").await;

    cluster.naive_replica_reads(true);
    let naive = raw_get(
        &cluster,
        follower,
        flagged(&cluster, region, follower, true, false),
        b"k",
    )
    .await;
    assert_eq!(
        naive.value, b"old",
        "served from the lagging state: {naive:?}"
    );

    // A leader request to the follower is refused as ever.
    let plain = raw_get(
        &cluster,
        follower,
        flagged(&cluster, region, follower, false, false),
        b"k",
    )
    .await;
    assert!(plain.region_error.unwrap().not_leader.is_some());
    let counters = cluster.counters(follower);
    assert_eq!(counters.served_as_replica(), 1);
}

#[tokio::test]
async fn a_replica_read_waits_for_its_read_index_and_sees_every_finished_write() {
    let (cluster, region, follower) = one_region().await;
    raw_put(&cluster, region, b"k", b"old").await;
    cluster
        .store_lag(follower, Some(Duration::from_millis(200)))
        .unwrap();
    raw_put(&cluster, region, b"k", b"new").await;
    let read = raw_get(
        &cluster,
        follower,
        flagged(&cluster, region, follower, true, false),
        b"k",
    )
    .await;
    assert!(read.region_error.is_none(), "{read:?}");
    assert_eq!(
        read.value, b"new",
        "the read index covers the finished write"
    );
    assert_eq!(cluster.counters(follower).served_as_replica(), 1);
    assert_eq!(
        cluster.counters(follower).replica_reads(),
        1,
        "a read that waited is counted once"
    );

    // Lag lifted: served at once from the Region's state.
    cluster.store_lag(follower, None).unwrap();
    raw_put(&cluster, region, b"k", b"newer").await;
    let read = raw_get(
        &cluster,
        follower,
        flagged(&cluster, region, follower, true, false),
        b"k",
    )
    .await;
    assert_eq!(read.value, b"newer");
}

#[tokio::test]
async fn a_replica_far_behind_its_read_index_answers_read_index_not_ready() {
    let (cluster, region, follower) = one_region().await;
    cluster
        .store_lag(follower, Some(Duration::from_secs(3600)))
        .unwrap();
    for i in 0..99u32 {
        raw_put(&cluster, region, b"k", &i.to_be_bytes()).await;
    }
    // 99 writes behind: it waits for its read index to be applied (an
    // hour here), so the call is still pending when the test stops it.
    let mut c = cluster.tikv_client(follower).await.unwrap();
    let waiting = c.raw_get(kvrpcpb::RawGetRequest {
        context: Some(flagged(&cluster, region, follower, true, false)),
        key: b"k".to_vec(),
        cf: String::new(),
    });
    assert!(
        tokio::time::timeout(Duration::from_millis(300), waiting)
            .await
            .is_err(),
        "a replica 99 writes behind waits"
    );
    // The hundredth write puts it out of reach.
    raw_put(&cluster, region, b"k", b"last").await;
    let read = raw_get(
        &cluster,
        follower,
        flagged(&cluster, region, follower, true, false),
        b"k",
    )
    .await;
    let error = read.region_error.expect("a Region error");
    let not_ready = error.read_index_not_ready.expect("ReadIndexNotReady");
    assert_eq!(not_ready.region_id, region);
    assert_eq!(
        cluster
            .counters(follower)
            .count("raw_get", Outcome::ReadIndexNotReady),
        1
    );
}

#[tokio::test]
async fn a_replica_read_with_no_leader_answers_not_leader_without_a_hint() {
    let (cluster, region, follower) = one_region().await;
    cluster.make_cold(region, ColdMode::AcceptAtOnce).unwrap();
    let read = raw_get(
        &cluster,
        follower,
        flagged(&cluster, region, follower, true, false),
        b"k",
    )
    .await;
    let not_leader = read
        .region_error
        .and_then(|e| e.not_leader)
        .expect("NotLeader");
    assert_eq!(not_leader.leader, None);
}

#[tokio::test]
async fn a_replica_read_reaching_the_leader_is_a_leader_read() {
    let (cluster, region, _) = one_region().await;
    let leader = cluster.leader_of(region).unwrap().store_id;
    raw_put(&cluster, region, b"k", b"v").await;
    let read = raw_get(
        &cluster,
        leader,
        flagged(&cluster, region, leader, true, false),
        b"k",
    )
    .await;
    assert_eq!(read.value, b"v");
    assert_eq!(cluster.counters(leader).served_as_replica(), 0);
}

async fn kv_get(
    cluster: &SimCluster,
    store: u64,
    ctx: kvrpcpb::Context,
    key: &[u8],
    version: u64,
) -> kvrpcpb::GetResponse {
    let mut c = cluster.tikv_client(store).await.unwrap();
    c.kv_get(kvrpcpb::GetRequest {
        context: Some(ctx),
        key: key.to_vec(),
        version,
    })
    .await
    .unwrap()
    .into_inner()
}

#[tokio::test]
async fn a_stale_read_is_served_up_to_the_safe_ts_and_answers_data_is_not_ready_above_it() {
    let (cluster, region, follower) = one_region().await;
    cluster
        .set_resolved_ts_interval(Duration::from_millis(100))
        .unwrap();
    let key = b"k";
    let first = write(&cluster, key, b"v1").await;
    cluster.advance_tso_clock(Duration::from_millis(500));
    let safe = cluster.safe_ts(region, follower).unwrap();
    assert!(safe > first, "no lock holds it back: {safe} > {first}");
    let ctx = flagged(&cluster, region, follower, false, true);
    let read = kv_get(&cluster, follower, ctx.clone(), key, safe).await;
    assert!(read.region_error.is_none(), "{read:?}");
    assert_eq!(read.value, b"v1");

    // Above the safe-ts: DataIsNotReady, carrying it.
    let ahead = tso(&cluster).await + (10_000 << 18);
    let read = kv_get(&cluster, follower, ctx, key, ahead).await;
    let not_ready = read
        .region_error
        .and_then(|e| e.data_is_not_ready)
        .expect("DataIsNotReady");
    assert_eq!(not_ready.region_id, region);
    assert!(not_ready.safe_ts >= safe && not_ready.safe_ts < ahead);
    assert_eq!(
        cluster
            .counters(follower)
            .count("kv_get", Outcome::DataIsNotReady),
        1
    );

    // The leader serves the same read as a normal read.
    let leader = cluster.leader_of(region).unwrap().store_id;
    let read = kv_get(
        &cluster,
        leader,
        flagged(&cluster, region, leader, false, true),
        key,
        ahead,
    )
    .await;
    assert!(read.region_error.is_none(), "{read:?}");
    assert_eq!(read.value, b"v1");
}

#[tokio::test]
async fn a_lock_holds_the_safe_ts_back_until_it_is_resolved() {
    let (cluster, region, follower) = one_region().await;
    cluster
        .set_resolved_ts_interval(Duration::from_millis(100))
        .unwrap();
    let key = b"k";
    let start = tso(&cluster).await;
    let p = prewrite(&cluster, prewrite_req(vec![put(key, b"v")], key, start)).await;
    assert!(p.errors.is_empty(), "{p:?}");
    cluster.advance_tso_clock(Duration::from_secs(5));
    let held = cluster.safe_ts(region, follower).unwrap();
    assert!(
        held <= start,
        "the lock at {start} holds the safe-ts at {held}"
    );
    let commit_ts = tso(&cluster).await;
    assert!(commit(&cluster, &[key], start, commit_ts)
        .await
        .error
        .is_none());
    cluster.advance_tso_clock(Duration::from_secs(5));
    let safe = cluster.safe_ts(region, follower).unwrap();
    assert!(safe > commit_ts, "resolved: {safe} > {commit_ts}");
    let read = kv_get(
        &cluster,
        follower,
        flagged(&cluster, region, follower, false, true),
        key,
        safe,
    )
    .await;
    assert_eq!(read.value, b"v");
}

#[tokio::test]
async fn a_lagging_replica_has_the_safe_ts_of_what_it_applied() {
    let (cluster, region, follower) = one_region().await;
    cluster
        .set_resolved_ts_interval(Duration::from_millis(100))
        .unwrap();
    let key = b"k";
    write(&cluster, key, b"v1").await;
    cluster.advance_tso_clock(Duration::from_secs(1));
    cluster
        .store_lag(follower, Some(Duration::from_secs(3600)))
        .unwrap();
    let frozen = cluster.safe_ts(region, follower).unwrap();
    let second = write(&cluster, key, b"v2").await;
    cluster.advance_tso_clock(Duration::from_secs(1));
    assert_eq!(
        cluster.safe_ts(region, follower).unwrap(),
        frozen,
        "it applies nothing new"
    );
    let leader = cluster.leader_of(region).unwrap().store_id;
    assert!(cluster.safe_ts(region, leader).unwrap() > second);
    // At its safe-ts the lagging replica is right; above it, not ready.
    let ctx = flagged(&cluster, region, follower, false, true);
    assert_eq!(
        kv_get(&cluster, follower, ctx.clone(), key, frozen)
            .await
            .value,
        b"v1"
    );
    let read = kv_get(&cluster, follower, ctx, key, second).await;
    assert!(read
        .region_error
        .and_then(|e| e.data_is_not_ready)
        .is_some());
}

#[tokio::test]
async fn pd_reports_store_labels() {
    let (cluster, _, _) = one_region().await;
    cluster
        .set_store_labels(2, &[("zone", "z2"), ("host", "h2")])
        .unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    let store = pd
        .get_store(pdpb::GetStoreRequest {
            header: Some(pdpb::RequestHeader {
                cluster_id: cluster.cluster_id(),
                sender_id: 0,
            }),
            store_id: 2,
        })
        .await
        .unwrap()
        .into_inner()
        .store
        .unwrap();
    let labels: Vec<(String, String)> =
        store.labels.into_iter().map(|l| (l.key, l.value)).collect();
    assert_eq!(
        labels,
        vec![
            ("zone".to_owned(), "z2".to_owned()),
            ("host".to_owned(), "h2".to_owned())
        ]
    );
    assert!(cluster.set_store_labels(9, &[]).is_err());
}

#[tokio::test]
async fn a_lagging_replica_that_has_not_applied_a_split_refuses_reads_of_the_new_shape() {
    let (cluster, region, follower) = one_region().await;
    raw_put(&cluster, region, b"m", b"v").await;
    cluster
        .store_lag(follower, Some(Duration::from_secs(3600)))
        .unwrap();
    cluster.split_region(b"g").unwrap();
    // The Region keeps its id for [g, ""), with a new version the
    // follower has not applied.
    let ctx = flagged(&cluster, region, follower, true, false);
    let read = raw_get(&cluster, follower, ctx, b"m").await;
    let error = read.region_error.expect("a Region error");
    assert!(error.read_index_not_ready.is_some(), "{error:?}");
    let ctx = flagged(&cluster, region, follower, false, true);
    let read = raw_get(&cluster, follower, ctx, b"m").await;
    assert!(read.region_error.and_then(|e| e.epoch_not_match).is_some());
    // Caught up: both served.
    cluster.store_lag(follower, None).unwrap();
    for (replica, stale) in [(true, false), (false, true)] {
        let ctx = flagged(&cluster, region, follower, replica, stale);
        let read = raw_get(&cluster, follower, ctx, b"m").await;
        assert_eq!(read.value, b"v", "{read:?}");
    }
}

#[tokio::test]
async fn the_control_port_drives_lag_labels_the_resolved_ts_and_naive_reads() {
    let (cluster, region, follower) = one_region().await;
    let run = |line: String| {
        let cluster = &cluster;
        async move { tikv_sim::control::execute(cluster, &line).await }
    };
    raw_put(&cluster, region, b"k", b"old").await;
    assert_eq!(run(format!("lag {follower} 3600000")).await, "ok\n");
    raw_put(&cluster, region, b"k", b"new").await;
    assert_eq!(run("naive-replica-reads on".to_owned()).await, "ok\n");
    let ctx = flagged(&cluster, region, follower, true, false);
    assert_eq!(
        raw_get(&cluster, follower, ctx.clone(), b"k").await.value,
        b"old"
    );
    assert_eq!(run("naive-replica-reads off".to_owned()).await, "ok\n");
    assert_eq!(run(format!("unlag {follower}")).await, "ok\n");
    assert_eq!(raw_get(&cluster, follower, ctx, b"k").await.value, b"new");
    let counters = run(format!("counters {follower}")).await;
    assert!(counters.contains("served_as_replica 2\n"), "{counters}");
    assert_eq!(
        run(format!("labels {follower} zone=z2 host=h9")).await,
        "ok\n"
    );
    assert!(run(format!("labels {follower} zone"))
        .await
        .starts_with("error:"));
    assert_eq!(run("resolved-ts-interval 100".to_owned()).await, "ok\n");
    assert!(run("resolved-ts-interval 0".to_owned())
        .await
        .starts_with("error:"));
    assert!(run("naive-replica-reads maybe".to_owned())
        .await
        .starts_with("error:"));
}

#[tokio::test]
async fn a_lagging_store_that_stops_leading_has_applied_what_it_led() {
    let (cluster, region, follower) = one_region().await;
    let leader = cluster.leader_of(region).unwrap().store_id;
    // The leader's store lags from now on, but leads: it applies all.
    cluster
        .store_lag(leader, Some(Duration::from_secs(3600)))
        .unwrap();
    raw_put(&cluster, region, b"k", b"led").await;
    cluster.transfer_leader(region, follower, false).unwrap();
    cluster.naive_replica_reads(true);
    let ctx = flagged(&cluster, region, leader, true, false);
    let read = raw_get(&cluster, leader, ctx.clone(), b"k").await;
    assert_eq!(read.value, b"led", "what it applied while it led");
    // From then on it lags.
    raw_put(&cluster, region, b"k", b"later").await;
    assert_eq!(raw_get(&cluster, leader, ctx, b"k").await.value, b"led");
}
