//! The tests shown in docs/testing.md, kept compiling and passing here.

#![cfg(feature = "mock")]

use std::sync::Arc;

use tikv_plan::mock::{self, MappingFailure, MockPdClient};
use tikv_plan::{Config, RawClient};
use tikv_sim::{ColdMode, SimCluster};

#[tokio::test]
async fn readme_mock_unit_test() {
    // One Region, three voters; PD and the cache say peer 11 on store 1 leads.
    let pd = Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &[mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)],
        Some(11),
    )]));
    // Store 1 refuses connections; every other peer accepts the request.
    pd.fail_store_mapping(1, MappingFailure::Refused);
    pd.set_dispatch_hook(|_peer, request| mock::response_with_region_error(request, None));

    let client = RawClient::new_with_pd_client(pd.clone(), &Config::default());
    client.put("key", "value").await.unwrap();

    // Peer 12 accepted the leader request and is now the cached leader.
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
    assert!(pd.dispatch_log().iter().all(|d| !d.context.replica_read));
}

#[tokio::test]
async fn readme_sim_integration_test() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"m".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap();
    let client = RawClient::new(cluster.pd_endpoints()).await.unwrap();
    client.put("k", "v").await.unwrap();

    // The Region of "k" loses its leader while PD keeps naming it, and the
    // leader's store goes down.
    let region = cluster.region_for_key(b"k").unwrap();
    let old_leader = cluster.leader_of(region.id).unwrap();
    cluster
        .make_cold(region.id, ColdMode::AcceptAtOnce)
        .unwrap();
    cluster.store_down(old_leader.store_id).await;

    assert_eq!(client.get("k").await.unwrap(), Some(b"v".to_vec()));
    assert_eq!(client.routing_stats().fallback_successes, 1);
    assert_ne!(cluster.leader_of(region.id), Some(old_leader));
}
