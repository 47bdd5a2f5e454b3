//! `PdRpcClient` against the simulated cluster's PD  over
//! loopback: bootstrap with dead endpoints, cluster id check, PD leader
//! transfer and member loss, PD down, lookups, stores, TSO, single-flight.

mod pd_support;

use std::sync::Arc;
use std::time::Instant;

use pd_support::{client, config, dead_address, pd_call_bound, SLACK};
use tikv_plan::pd::{PdClient, PdRpcClient};
use tikv_plan::Failure;
use tikv_sim::SimCluster;

async fn sim(pd_members: usize) -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"g".to_vec()])
        .replicas(3)
        .pd_members(pd_members)
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn bootstrap_with_some_dead_endpoints() {
    let cluster = sim(3).await;
    let mut endpoints = vec![dead_address().await];
    endpoints.extend(cluster.pd_endpoints());
    endpoints.push(dead_address().await);
    let client = client(&endpoints).await;
    assert_eq!(client.cluster_id(), cluster.cluster_id());
    let leader = client.pd_leader().unwrap();
    assert!(leader.ends_with(&cluster.pd_endpoints()[0]), "{leader}");
    assert_eq!(client.region_for_key(b"a").await.unwrap().end_key(), b"g");
}

#[tokio::test]
async fn two_clusters_are_a_cluster_id_mismatch() {
    let a = SimCluster::builder().cluster_id(11).start().await.unwrap();
    let b = SimCluster::builder().cluster_id(12).start().await.unwrap();
    let endpoints = vec![a.pd_addr(), b.pd_addr()];
    let err = PdRpcClient::connect(&endpoints, &config())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.failure(),
            Some(Failure::ClusterIdMismatch {
                expected: 11,
                found: 12,
                ..
            })
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn follows_a_pd_leader_transfer() {
    let cluster = sim(3).await;
    let client = client(&cluster.pd_endpoints()).await;
    let before = Arc::clone(&client).get_timestamp().await.unwrap();
    cluster.pd_transfer_leader(2).unwrap();
    let after = Arc::clone(&client).get_timestamp().await.unwrap();
    assert!((after.physical, after.logical) > (before.physical, before.logical));
    let leader = client.pd_leader().unwrap();
    assert!(leader.ends_with(&cluster.pd_endpoints()[2]), "{leader}");
    assert_eq!(client.pd_stats().leader_connects, 2);
    assert_eq!(client.all_stores().await.unwrap().len(), 3);
}

#[tokio::test]
async fn follows_the_leader_when_the_leader_member_goes_down() {
    let cluster = sim(3).await;
    let client = client(&cluster.pd_endpoints()).await;
    assert!(client.region_for_id(cluster.regions()[0].id).await.is_ok());
    cluster.pd_member_down(0).await.unwrap();
    let region = client.region_for_key(b"x").await.unwrap();
    assert_eq!(region.start_key(), b"g");
    let leader = client.pd_leader().unwrap();
    assert!(!leader.ends_with(&cluster.pd_endpoints()[0]), "{leader}");
}

#[tokio::test]
async fn pd_down_is_a_typed_error_within_the_bound() {
    let cluster = sim(2).await;
    let client = client(&cluster.pd_endpoints()).await;
    cluster.pd_member_down(0).await.unwrap();
    cluster.pd_member_down(1).await.unwrap();
    let started = Instant::now();
    let err = Arc::clone(&client).get_timestamp().await.unwrap_err();
    let elapsed = started.elapsed();
    match err.failure() {
        Some(Failure::PdUnavailable { endpoints, .. }) => {
            assert_eq!(*endpoints, cluster.pd_endpoints().join(", "))
        }
        _ => panic!("expected PdUnavailable, got {err:?}"),
    }
    assert!(elapsed < pd_call_bound(&config()) + SLACK, "{elapsed:?}");
}

#[tokio::test]
async fn lookups_stores_and_timestamps() {
    let cluster = sim(1).await;
    let client = client(&cluster.pd_endpoints()).await;
    for region in cluster.regions() {
        let by_id = client.region_for_id(region.id).await.unwrap();
        assert_eq!(by_id.region, region);
        let by_key = client.region_for_key(&region.start_key).await.unwrap();
        assert_eq!(by_key.id(), region.id);
        assert_eq!(by_key.leader, cluster.pd_leader_of(region.id));
    }
    let err = client.region_for_id(999_999).await.unwrap_err();
    assert!(
        matches!(
            err.failure(),
            Some(Failure::RegionNotFoundInPd { region_id: 999_999 })
        ),
        "{err:?}"
    );
    let stores = client.all_stores().await.unwrap();
    let mut ids: Vec<u64> = stores.iter().map(|s| s.meta.id).collect();
    ids.sort();
    assert_eq!(ids, cluster.store_ids());
    for store in &stores {
        assert_eq!(
            Some(store.meta.address.clone()),
            cluster.store_addr(store.meta.id)
        );
    }
    let mut last = (i64::MIN, i64::MIN);
    for _ in 0..10 {
        let ts = Arc::clone(&client).get_timestamp().await.unwrap();
        assert!((ts.physical, ts.logical) > last, "{ts:?} after {last:?}");
        last = (ts.physical, ts.logical);
    }
}

#[tokio::test]
async fn map_peer_to_store_reaches_every_peer_of_a_region() {
    let cluster = sim(1).await;
    let client = client(&cluster.pd_endpoints()).await;
    let region = client.region_for_key(b"a").await.unwrap();
    for peer in region.region.peers.clone() {
        let store = Arc::clone(&client)
            .map_peer_to_store(region.clone(), peer)
            .await
            .unwrap();
        assert_eq!(store.store_id(), peer.store_id);
        assert_eq!(store.target_peer, peer);
        let address = cluster.store_addr(peer.store_id).unwrap();
        assert_eq!(client.connect_counts(&address).attempts, 1);
    }
    let leader_store = Arc::clone(&client)
        .map_region_to_store(region.clone())
        .await
        .unwrap();
    assert_eq!(Some(leader_store.target_peer), region.leader);
}

#[tokio::test]
async fn concurrent_region_for_key_calls_cause_one_get_region() {
    let cluster = sim(1).await;
    let client = client(&cluster.pd_endpoints()).await;
    let lookups = (0..32).map(|_| client.region_for_key(b"k"));
    let regions = futures::future::join_all(lookups).await;
    assert!(regions
        .iter()
        .all(|r| r.as_ref().unwrap().start_key() == b"g"));
    assert_eq!(client.pd_stats().get_region, 1);
}
