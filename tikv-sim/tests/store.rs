//! The simulated stores are strict: each wrong context gets the Region
//! error TiKV gives, in TiKV's check order, over real gRPC.

use tikv_sim::proto::{errorpb, kvrpcpb, metapb};
use tikv_sim::{ColdMode, Outcome, RegionLayout, SimCluster, SimPeer};

async fn three_regions() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"g".to_vec(), b"n".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap()
}

/// Sends a raw get for `key` with `ctx` to `store_id`; returns the Region
/// error, if any, and the response.
async fn get(
    cluster: &SimCluster,
    store_id: u64,
    ctx: Option<kvrpcpb::Context>,
    key: &[u8],
) -> kvrpcpb::RawGetResponse {
    let mut client = cluster.tikv_client(store_id).await.unwrap();
    client
        .raw_get(kvrpcpb::RawGetRequest {
            context: ctx,
            key: key.to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner()
}

async fn put(
    cluster: &SimCluster,
    store_id: u64,
    ctx: Option<kvrpcpb::Context>,
    key: &[u8],
    value: &[u8],
) -> kvrpcpb::RawPutResponse {
    let mut client = cluster.tikv_client(store_id).await.unwrap();
    client
        .raw_put(kvrpcpb::RawPutRequest {
            context: ctx,
            key: key.to_vec(),
            value: value.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

fn leader_ctx(cluster: &SimCluster, key: &[u8]) -> (u64, kvrpcpb::Context) {
    let region = cluster.region_for_key(key).unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    (
        leader.store_id,
        cluster.context(region.id, leader.store_id).unwrap(),
    )
}

fn expect_err(resp: &kvrpcpb::RawGetResponse) -> &errorpb::Error {
    resp.region_error
        .as_ref()
        .unwrap_or_else(|| panic!("expected a region error, got {resp:?}"))
}

#[tokio::test]
async fn a_request_for_another_store_gets_store_not_match() {
    let cluster = three_regions().await;
    let (leader_store, ctx) = leader_ctx(&cluster, b"a");
    let other = leader_store % 3 + 1;
    let resp = get(&cluster, other, Some(ctx), b"a").await;
    let e = expect_err(&resp).store_not_match.unwrap();
    assert_eq!(e.request_store_id, leader_store);
    assert_eq!(e.actual_store_id, other);
    assert_eq!(
        cluster
            .counters(other)
            .count("raw_get", Outcome::StoreNotMatch),
        1
    );

    // A context without a peer targets store 0.
    let mut no_peer = cluster
        .context(cluster.region_for_key(b"a").unwrap().id, 1)
        .unwrap();
    no_peer.peer = None;
    let resp = get(&cluster, 1, Some(no_peer), b"a").await;
    assert_eq!(
        expect_err(&resp).store_not_match.unwrap().request_store_id,
        0
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_wrong_peer_id_on_the_right_store_gets_mismatch_peer_id() {
    let cluster = three_regions().await;
    let (store, mut ctx) = leader_ctx(&cluster, b"a");
    let real = ctx.peer.unwrap().id;
    ctx.peer = Some(metapb::Peer {
        id: real + 77,
        store_id: store,
        ..Default::default()
    });
    let resp = get(&cluster, store, Some(ctx), b"a").await;
    let e = expect_err(&resp).mismatch_peer_id.unwrap();
    assert_eq!((e.request_peer_id, e.store_peer_id), (real + 77, real));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_region_without_a_peer_on_the_store_is_not_found() {
    let cluster = SimCluster::builder()
        .stores(2)
        .replicas(1)
        .start()
        .await
        .unwrap();
    let region = cluster.regions()[0].clone();
    assert_eq!(region.peers.len(), 1);
    let mut ctx = cluster.context(region.id, 1).unwrap();
    ctx.peer = Some(metapb::Peer {
        id: 5,
        store_id: 2,
        ..Default::default()
    });
    let resp = get(&cluster, 2, Some(ctx.clone()), b"a").await;
    assert_eq!(
        expect_err(&resp).region_not_found.unwrap().region_id,
        region.id
    );
    ctx.region_id = 4242;
    let resp = get(&cluster, 1, Some(ctx), b"a").await;
    assert_eq!(expect_err(&resp).region_not_found.unwrap().region_id, 4242);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_stale_epoch_gets_epoch_not_match_with_the_current_regions() {
    let cluster = three_regions().await;
    let (store, old_ctx) = leader_ctx(&cluster, b"h");
    let parent = cluster.region_for_key(b"h").unwrap();
    put(&cluster, store, Some(old_ctx.clone()), b"h", b"1").await;
    put(&cluster, store, Some(old_ctx.clone()), b"k", b"2").await;

    let new_id = cluster.split_region(b"j").unwrap();
    let right = cluster.region_for_key(b"k").unwrap();
    let left = cluster.region_for_key(b"h").unwrap();
    // Right-derive: the old id keeps the upper part.
    assert_eq!(right.id, parent.id);
    assert_eq!(left.id, new_id);
    assert_eq!(
        (left.start_key.as_slice(), left.end_key.as_slice()),
        (&b"g"[..], &b"j"[..])
    );
    assert_eq!(
        (right.start_key.as_slice(), right.end_key.as_slice()),
        (&b"j"[..], &b"n"[..])
    );
    let old_version = parent.region_epoch.unwrap().version;
    assert_eq!(left.region_epoch.unwrap().version, old_version + 1);
    assert_eq!(right.region_epoch.unwrap().version, old_version + 1);
    // New peers on the same stores, the same store leads.
    assert_eq!(cluster.leader_of(new_id).unwrap().store_id, store);
    assert_eq!(cluster.pd_leader_of(new_id).unwrap().store_id, store);
    let all_ids: Vec<u64> = cluster
        .regions()
        .iter()
        .flat_map(|r| std::iter::once(r.id).chain(r.peers.iter().map(|p| p.id)))
        .collect();
    let mut unique = all_ids.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(
        unique.len(),
        all_ids.len(),
        "ids must be unique: {all_ids:?}"
    );

    let resp = get(&cluster, store, Some(old_ctx), b"k").await;
    let current = expect_err(&resp)
        .epoch_not_match
        .clone()
        .unwrap()
        .current_regions;
    assert_eq!(current, vec![left.clone(), right.clone()]);

    // Data was split with the Region, and each part serves with its new
    // context.
    let resp = get(&cluster, store, cluster.context(left.id, store), b"h").await;
    assert_eq!(resp.value, b"1".to_vec());
    let resp = get(&cluster, store, cluster.context(right.id, store), b"k").await;
    assert_eq!(resp.value, b"2".to_vec());
    let resp = get(&cluster, store, cluster.context(left.id, store), b"k").await;
    assert!(expect_err(&resp).key_not_in_region.is_some());
    // Splitting at a Region's start is refused.
    assert!(cluster.split_region(b"j").is_err());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_key_outside_the_region_gets_key_not_in_region() {
    let cluster = three_regions().await;
    let (store, ctx) = leader_ctx(&cluster, b"h");
    let resp = get(&cluster, store, Some(ctx.clone()), b"z").await;
    let e = expect_err(&resp).key_not_in_region.clone().unwrap();
    assert_eq!(e.key, b"z".to_vec());
    assert_eq!(e.region_id, ctx.region_id);
    assert_eq!((e.start_key, e.end_key), (b"g".to_vec(), b"n".to_vec()));

    // Batch requests: one stray key is enough.
    let mut client = cluster.tikv_client(store).await.unwrap();
    let resp = client
        .raw_batch_get(kvrpcpb::RawBatchGetRequest {
            context: Some(ctx.clone()),
            keys: vec![b"h".to_vec(), b"a".to_vec()],
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.region_error.unwrap().key_not_in_region.unwrap().key,
        b"a".to_vec()
    );
    // Delete range past the Region's end.
    let resp = client
        .raw_delete_range(kvrpcpb::RawDeleteRangeRequest {
            context: Some(ctx),
            start_key: b"h".to_vec(),
            end_key: b"p".to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.region_error.unwrap().key_not_in_region.is_some());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_follower_answers_not_leader_with_the_leader() {
    let cluster = three_regions().await;
    let region = cluster.region_for_key(b"a").unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    let follower = region.peers.iter().find(|p| p.id != leader.id).unwrap();
    let resp = put(
        &cluster,
        follower.store_id,
        cluster.context(region.id, follower.store_id),
        b"a",
        b"x",
    )
    .await;
    let nl = resp.region_error.unwrap().not_leader.unwrap();
    assert_eq!(nl.region_id, region.id);
    assert_eq!(nl.leader, Some(leader));
    // Nothing was written.
    assert_eq!(cluster.value_of(b"a"), None);
    cluster.shutdown().await;
}

#[tokio::test]
async fn busy_is_answered_before_any_other_check() {
    let cluster = three_regions().await;
    let region = cluster.region_for_key(b"a").unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    let follower = region.peers.iter().find(|p| p.id != leader.id).unwrap();
    cluster.store_busy(follower.store_id, Some(0));
    // A follower that would say NotLeader says ServerIsBusy(0) instead ...
    let resp = get(
        &cluster,
        follower.store_id,
        cluster.context(region.id, follower.store_id),
        b"a",
    )
    .await;
    let busy = expect_err(&resp).server_is_busy.clone().unwrap();
    assert_eq!(busy.estimated_wait_ms, 0);
    // ... and so does a request with a nonsense context.
    let resp = get(&cluster, follower.store_id, None, b"zz").await;
    assert!(expect_err(&resp).server_is_busy.is_some());
    cluster.store_busy(follower.store_id, Some(250));
    let resp = get(&cluster, follower.store_id, None, b"zz").await;
    assert_eq!(
        expect_err(&resp)
            .server_is_busy
            .clone()
            .unwrap()
            .estimated_wait_ms,
        250
    );
    assert_eq!(
        cluster
            .counters(follower.store_id)
            .count("raw_get", Outcome::ServerIsBusy),
        3
    );
    cluster.store_busy(follower.store_id, None);
    let resp = get(
        &cluster,
        follower.store_id,
        cluster.context(region.id, follower.store_id),
        b"a",
    )
    .await;
    assert!(expect_err(&resp).not_leader.is_some());
    cluster.shutdown().await;
}

#[tokio::test]
async fn learners_and_witnesses_never_serve_leader_requests() {
    let cluster = SimCluster::builder()
        .stores(4)
        .region_layout(
            0,
            RegionLayout::new(vec![
                SimPeer::voter(1),
                SimPeer::learner(2),
                SimPeer::witness(3),
                SimPeer::voter(4),
            ])
            .leader(4),
        )
        .start()
        .await
        .unwrap();
    let region = cluster.regions()[0].clone();
    let leader = cluster.leader_of(region.id).unwrap();
    assert_eq!(leader.store_id, 4);
    let resp = get(&cluster, 2, cluster.context(region.id, 2), b"a").await;
    assert_eq!(expect_err(&resp).not_leader.unwrap().leader, Some(leader));
    let resp = get(&cluster, 3, cluster.context(region.id, 3), b"a").await;
    assert_eq!(expect_err(&resp).is_witness.unwrap().region_id, region.id);

    // Even in a cold Region they do not campaign.
    cluster
        .make_cold(region.id, ColdMode::AcceptAtOnce)
        .unwrap();
    let resp = get(&cluster, 2, cluster.context(region.id, 2), b"a").await;
    assert_eq!(expect_err(&resp).not_leader.unwrap().leader, None);
    let resp = get(&cluster, 3, cluster.context(region.id, 3), b"a").await;
    assert!(expect_err(&resp).is_witness.is_some());
    assert_eq!(cluster.leader_of(region.id), None);
    for store in [2, 3] {
        assert_eq!(cluster.counters(store).count_outcome(Outcome::Ok), 0);
    }
    // A learner cannot be made leader, nor a witness.
    assert!(cluster.transfer_leader(region.id, 2, true).is_err());
    assert!(cluster.transfer_leader(region.id, 3, true).is_err());
    // The voter on store 1 campaigns and serves.
    let resp = get(&cluster, 1, cluster.context(region.id, 1), b"a").await;
    assert!(resp.region_error.is_none());
    assert_eq!(cluster.leader_of(region.id).unwrap().store_id, 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_cold_region_campaigns_on_a_leader_request() {
    let cluster = three_regions().await;
    let region = cluster.region_for_key(b"a").unwrap();
    let old = cluster.leader_of(region.id).unwrap();
    let voters: Vec<u64> = region
        .peers
        .iter()
        .filter(|p| p.id != old.id)
        .map(|p| p.store_id)
        .collect();

    // AcceptAtOnce: the voter serves the first request.
    cluster
        .make_cold(region.id, ColdMode::AcceptAtOnce)
        .unwrap();
    assert_eq!(cluster.leader_of(region.id), None);
    assert_eq!(cluster.pd_leader_of(region.id), Some(old));
    let resp = get(
        &cluster,
        old.store_id,
        cluster.context(region.id, old.store_id),
        b"a",
    )
    .await;
    let nl = expect_err(&resp).not_leader.unwrap();
    assert_eq!(nl.leader, None, "the old leader knows no leader");
    let resp = put(
        &cluster,
        voters[0],
        cluster.context(region.id, voters[0]),
        b"a",
        b"1",
    )
    .await;
    assert!(resp.region_error.is_none(), "{resp:?}");
    assert_eq!(cluster.leader_of(region.id).unwrap().store_id, voters[0]);
    // PD still names the old leader.
    assert_eq!(cluster.pd_leader_of(region.id), Some(old));
    // The old leader now knows the new one.
    let resp = get(
        &cluster,
        old.store_id,
        cluster.context(region.id, old.store_id),
        b"a",
    )
    .await;
    assert_eq!(
        expect_err(&resp)
            .not_leader
            .unwrap()
            .leader
            .unwrap()
            .store_id,
        voters[0]
    );

    // NotLeaderFirst: NotLeader without a hint, then it serves.
    cluster
        .make_cold(region.id, ColdMode::NotLeaderFirst)
        .unwrap();
    let resp = get(
        &cluster,
        voters[1],
        cluster.context(region.id, voters[1]),
        b"a",
    )
    .await;
    assert_eq!(expect_err(&resp).not_leader.unwrap().leader, None);
    let resp = get(
        &cluster,
        voters[1],
        cluster.context(region.id, voters[1]),
        b"a",
    )
    .await;
    assert!(resp.region_error.is_none());
    assert_eq!(resp.value, b"1".to_vec());
    assert_eq!(cluster.leader_of(region.id).unwrap().store_id, voters[1]);
    // The previous leader (voters[0]) was the old leader of this cold spell.
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_region_can_start_cold() {
    let cluster = SimCluster::builder()
        .stores(3)
        .region_layout(
            0,
            RegionLayout::new(vec![
                SimPeer::voter(1),
                SimPeer::voter(2),
                SimPeer::voter(3),
            ])
            .leader(1)
            .cold(ColdMode::AcceptAtOnce),
        )
        .start()
        .await
        .unwrap();
    let region = cluster.regions()[0].clone();
    assert_eq!(cluster.leader_of(region.id), None);
    assert_eq!(cluster.pd_leader_of(region.id).unwrap().store_id, 1);
    let resp = get(&cluster, 1, cluster.context(region.id, 1), b"a").await;
    assert_eq!(expect_err(&resp).not_leader.unwrap().leader, None);
    let resp = get(&cluster, 3, cluster.context(region.id, 3), b"a").await;
    assert!(resp.region_error.is_none());
    assert_eq!(cluster.leader_of(region.id).unwrap().store_id, 3);
    cluster.shutdown().await;
}

/// Sends a raw scan to `store_id`.
async fn scan(
    cluster: &SimCluster,
    store_id: u64,
    ctx: kvrpcpb::Context,
    start: &[u8],
    end: &[u8],
    reverse: bool,
) -> kvrpcpb::RawScanResponse {
    let mut client = cluster.tikv_client(store_id).await.unwrap();
    client
        .raw_scan(kvrpcpb::RawScanRequest {
            context: Some(ctx),
            start_key: start.to_vec(),
            end_key: end.to_vec(),
            reverse,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

#[tokio::test]
async fn when_several_checks_fail_the_first_in_tikv_order_answers() {
    let cluster = three_regions().await;
    let region = cluster.region_for_key(b"h").unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    let follower = region
        .peers
        .iter()
        .find(|p| p.id != leader.id)
        .copied()
        .unwrap();
    let stale = |mut ctx: kvrpcpb::Context| {
        ctx.region_epoch = Some(metapb::RegionEpoch {
            conf_ver: 1,
            version: 0,
        });
        ctx
    };

    // Wrong store and stale epoch: StoreNotMatch.
    let leader_ctx = cluster.context(region.id, leader.store_id).unwrap();
    let resp = get(
        &cluster,
        follower.store_id,
        Some(stale(leader_ctx.clone())),
        b"h",
    )
    .await;
    assert!(expect_err(&resp).store_not_match.is_some(), "{resp:?}");
    // Stale epoch and a key outside the Region: EpochNotMatch.
    let resp = get(
        &cluster,
        leader.store_id,
        Some(stale(leader_ctx.clone())),
        b"z",
    )
    .await;
    assert!(expect_err(&resp).epoch_not_match.is_some(), "{resp:?}");
    // A key outside the Region sent to a follower: KeyNotInRegion, not
    // NotLeader (leadership is checked last).
    let follower_ctx = cluster.context(region.id, follower.store_id).unwrap();
    let resp = get(&cluster, follower.store_id, Some(follower_ctx), b"z").await;
    assert!(expect_err(&resp).key_not_in_region.is_some(), "{resp:?}");

    // No peer on this store and a context naming another store:
    // RegionNotFound comes before StoreNotMatch.
    let single = SimCluster::builder()
        .stores(2)
        .replicas(1)
        .start()
        .await
        .unwrap();
    let only = single.regions()[0].clone();
    let owner = only.peers[0].store_id;
    let elsewhere = owner % 2 + 1;
    let resp = get(&single, elsewhere, single.context(only.id, owner), b"a").await;
    assert_eq!(
        expect_err(&resp).region_not_found.unwrap().region_id,
        only.id
    );
    single.shutdown().await;
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_epoch_check_compares_the_version_only_and_a_missing_epoch_is_stale() {
    let cluster = three_regions().await;
    let (store, ctx) = leader_ctx(&cluster, b"h");
    let epoch = ctx.region_epoch.unwrap();

    // TiKV checks only the version for reads and writes: a conf_ver the
    // client has not caught up with is served.
    let mut other_conf_ver = ctx.clone();
    other_conf_ver.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: epoch.conf_ver + 5,
        version: epoch.version,
    });
    let resp = put(&cluster, store, Some(other_conf_ver), b"h", b"1").await;
    assert!(resp.region_error.is_none(), "{resp:?}");

    // A newer version than the store's is as wrong as an older one.
    let mut newer = ctx.clone();
    newer.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: epoch.conf_ver,
        version: epoch.version + 1,
    });
    let resp = get(&cluster, store, Some(newer), b"h").await;
    assert!(expect_err(&resp).epoch_not_match.is_some(), "{resp:?}");

    // No epoch at all reads as version 0.
    let mut missing = ctx;
    missing.region_epoch = None;
    let resp = get(&cluster, store, Some(missing), b"h").await;
    let current = expect_err(&resp)
        .epoch_not_match
        .clone()
        .unwrap()
        .current_regions;
    assert_eq!(
        current.iter().map(|r| r.id).collect::<Vec<_>>(),
        vec![cluster.region_for_key(b"h").unwrap().id]
    );
    assert_eq!(cluster.value_of(b"h"), Some(b"1".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test]
async fn scans_must_start_inside_the_region_and_stay_in_it() {
    let cluster = three_regions().await;
    // Data in all three Regions.
    for key in [b"a", b"h", b"m", b"p"] {
        let (store, ctx) = leader_ctx(&cluster, key);
        put(&cluster, store, Some(ctx), key, b"v").await;
    }
    let (store, ctx) = leader_ctx(&cluster, b"h");
    let keys_of = |resp: &kvrpcpb::RawScanResponse| -> Vec<Vec<u8>> {
        assert!(resp.region_error.is_none(), "{resp:?}");
        resp.kvs.iter().map(|p| p.key.clone()).collect()
    };
    let not_in_region = |resp: &kvrpcpb::RawScanResponse| -> Vec<u8> {
        resp.region_error
            .as_ref()
            .and_then(|e| e.key_not_in_region.clone())
            .unwrap_or_else(|| panic!("expected KeyNotInRegion, got {resp:?}"))
            .key
    };

    // Forward: the start must lie in [g, n); the scan stops at n.
    let resp = scan(&cluster, store, ctx.clone(), b"a", b"z", false).await;
    assert_eq!(not_in_region(&resp), b"a".to_vec());
    let resp = scan(&cluster, store, ctx.clone(), b"h", b"z", false).await;
    assert_eq!(keys_of(&resp), vec![b"h".to_vec(), b"m".to_vec()]);
    let resp = scan(&cluster, store, ctx.clone(), b"g", b"", false).await;
    assert_eq!(keys_of(&resp), vec![b"h".to_vec(), b"m".to_vec()]);
    // Like TiKV, a seek key on the Region's edge is accepted: the scan is
    // empty.
    let resp = scan(&cluster, store, ctx.clone(), b"n", b"z", false).await;
    assert!(keys_of(&resp).is_empty());

    // Reverse: the upper bound must lie in the Region; an unbounded upper
    // bound only fits the last Region. The scan stops at g.
    let resp = scan(&cluster, store, ctx.clone(), b"z", b"a", true).await;
    assert_eq!(not_in_region(&resp), b"z".to_vec());
    let resp = scan(&cluster, store, ctx.clone(), b"", b"a", true).await;
    assert_eq!(not_in_region(&resp), Vec::<u8>::new());
    let resp = scan(&cluster, store, ctx.clone(), b"n", b"a", true).await;
    assert_eq!(keys_of(&resp), vec![b"m".to_vec(), b"h".to_vec()]);
    let resp = scan(&cluster, store, ctx.clone(), b"g", b"a", true).await;
    assert!(keys_of(&resp).is_empty());
    let resp = scan(&cluster, store, ctx.clone(), b"f", b"a", true).await;
    assert_eq!(not_in_region(&resp), b"f".to_vec());

    // Batch scan: one range starting outside is enough.
    let mut client = cluster.tikv_client(store).await.unwrap();
    let resp = client
        .raw_batch_scan(kvrpcpb::RawBatchScanRequest {
            context: Some(ctx),
            ranges: vec![
                kvrpcpb::KeyRange {
                    start_key: b"h".to_vec(),
                    end_key: b"i".to_vec(),
                },
                kvrpcpb::KeyRange {
                    start_key: b"o".to_vec(),
                    end_key: b"q".to_vec(),
                },
            ],
            each_limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        resp.region_error.unwrap().key_not_in_region.unwrap().key,
        b"o".to_vec()
    );
    cluster.shutdown().await;
}
