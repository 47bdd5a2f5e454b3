//! `pd::Cluster` and `pd::PdRpcClient` against a test-only PD over loopback
//! (tests/pd_support): bootstrap, cluster id checks, leader following,
//! bounded failures, lookups, TSO and single-flight Region loads.

// The test PD (tests/pd_support) implements the PD server stubs
// (tikv-plan-proto's `server` feature, on for the tests through tikv-sim).

mod pd_support;

use std::sync::Arc;
use std::time::Instant;

use pd_support::{client, config, dead_address, pd_call_bound, peer, FakePd, SLACK};
use tikv_plan::pd::{PdClient, PdRpcClient};
use tikv_plan::proto::{metapb, pdpb};
use tikv_plan::region::RegionWithLeader;
use tikv_plan::Error;
use tikv_plan::Failure;

#[tokio::test]
async fn bootstrap_skips_dead_endpoints_and_finds_the_leader() {
    let pd = FakePd::start(3, 7).await;
    pd.transfer_leader(1);
    let mut endpoints = vec![dead_address().await, dead_address().await];
    endpoints.extend(pd.endpoints());
    let client = client(&endpoints).await;
    assert_eq!(client.cluster_id(), 7);
    assert_eq!(client.pd_leader(), Some(pd.url(1)));
    assert_eq!(client.pd_stats().leader_connects, 1);
    let region = client.region_for_key(b"a").await.unwrap();
    assert_eq!(region.id(), 2);
}

#[tokio::test]
async fn endpoints_of_two_clusters_are_a_cluster_id_mismatch() {
    let a = FakePd::start(1, 100).await;
    let b = FakePd::start(1, 200).await;
    let endpoints = vec![a.endpoints()[0].clone(), b.endpoints()[0].clone()];
    let err = PdRpcClient::connect(&endpoints, &config())
        .await
        .unwrap_err();
    match err.failure() {
        Some(Failure::ClusterIdMismatch {
            endpoint,
            expected,
            found,
        }) => {
            assert_eq!(*endpoint, b.endpoints()[0]);
            assert_eq!((*expected, *found), (100, 200));
        }
        _ => panic!("expected ClusterIdMismatch, got {err:?}"),
    }
}

#[tokio::test]
async fn cluster_id_zero_or_no_leader_is_not_usable() {
    let zero = FakePd::start(1, 0).await;
    let err = PdRpcClient::connect(&zero.endpoints(), &config())
        .await
        .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::PdUnavailable { message, .. }) if message.contains("cluster id 0")),
        "{err:?}"
    );

    let leaderless = FakePd::start(1, 5).await;
    leaderless.state.lock().unwrap().no_leader = true;
    let err = PdRpcClient::connect(&leaderless.endpoints(), &config())
        .await
        .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::PdUnavailable { message, .. }) if message.contains("no leader")),
        "{err:?}"
    );

    // A usable member next to the unusable one is enough.
    let good = FakePd::start(1, 5).await;
    let mut endpoints = zero.endpoints();
    endpoints.extend(good.endpoints());
    let client = client(&endpoints).await;
    assert_eq!(client.cluster_id(), 5);
}

#[tokio::test]
async fn follows_a_pd_leader_transfer() {
    let pd = FakePd::start(3, 9).await;
    let client = client(&pd.endpoints()).await;
    let first = Arc::clone(&client).get_timestamp().await.unwrap();
    pd.transfer_leader(2);
    // The old leader now answers "not leader" (Unavailable): the client asks
    // the members again and moves to member 2.
    let second = Arc::clone(&client).get_timestamp().await.unwrap();
    assert!((second.physical, second.logical) > (first.physical, first.logical));
    assert_eq!(client.pd_leader(), Some(pd.url(2)));
    assert_eq!(client.pd_stats().leader_connects, 2);
    assert_eq!(client.region_for_id(3).await.unwrap().id(), 3);
}

#[tokio::test]
async fn follows_the_leader_when_the_leader_member_goes_down() {
    let mut pd = FakePd::start(3, 9).await;
    let client = client(&pd.endpoints()).await;
    assert_eq!(client.region_for_key(b"a").await.unwrap().id(), 2);
    pd.transfer_leader(1);
    pd.member_down(0);
    let store = client.store(2).await.unwrap();
    assert_eq!(store.id, 2);
    assert_eq!(client.pd_leader(), Some(pd.url(1)));
}

#[tokio::test]
async fn pd_down_is_a_typed_error_within_the_bound() {
    let mut pd = FakePd::start(2, 9).await;
    let client = client(&pd.endpoints()).await;
    pd.member_down(0);
    pd.member_down(1);
    let started = Instant::now();
    let err = Arc::clone(&client).get_timestamp().await.unwrap_err();
    let elapsed = started.elapsed();
    match err.failure() {
        Some(Failure::PdUnavailable { endpoints, .. }) => {
            for e in pd.endpoints() {
                assert!(endpoints.contains(&e), "{endpoints}");
            }
        }
        _ => panic!("expected PdUnavailable, got {err:?}"),
    }
    assert!(elapsed < pd_call_bound(&config()) + SLACK, "{elapsed:?}");
}

#[tokio::test]
async fn a_hanging_pd_is_bounded_by_the_timeouts() {
    let pd = FakePd::start(1, 9).await;
    let client = client(&pd.endpoints()).await;
    pd.set_hang(true);
    let started = Instant::now();
    let err = client.region_for_key(b"x").await.unwrap_err();
    let elapsed = started.elapsed();
    assert!(
        matches!(err.failure(), Some(Failure::PdUnavailable { .. })),
        "{err:?}"
    );
    assert!(elapsed >= config().timeout, "{elapsed:?}");
    assert!(elapsed < pd_call_bound(&config()) + SLACK, "{elapsed:?}");
    // Nothing was cached from the failed load.
    assert!(client.cached_regions() == 0);
}

#[tokio::test]
async fn no_endpoint_answers_at_bootstrap() {
    let endpoints = vec![dead_address().await, dead_address().await];
    let started = Instant::now();
    let err = PdRpcClient::connect(&endpoints, &config())
        .await
        .unwrap_err();
    assert!(started.elapsed() < pd_call_bound(&config()) + SLACK);
    match err.failure() {
        Some(Failure::PdUnavailable {
            endpoints: named, ..
        }) => assert_eq!(*named, endpoints.join(", ")),
        _ => panic!("expected PdUnavailable, got {err:?}"),
    }
    let err = PdRpcClient::connect(&[], &config()).await.unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::InvalidArgument(_))),
        "{err:?}"
    );
}

#[tokio::test]
async fn lookups_by_key_and_id_use_the_cache_after_the_first_load() {
    let pd = FakePd::start(1, 9).await;
    let client = client(&pd.endpoints()).await;
    let a = client.region_for_key(b"a").await.unwrap();
    assert_eq!((a.id(), a.leader), (2, Some(peer(21, 1))));
    assert_eq!(client.region_for_key(b"f").await.unwrap().id(), 2);
    assert_eq!(client.region_for_key(b"g").await.unwrap().id(), 3);
    assert_eq!(client.region_for_key(b"zz").await.unwrap().id(), 3);
    assert_eq!(client.region_for_id(2).await.unwrap().id(), 2);
    let stats = client.pd_stats();
    assert_eq!(stats.get_region, 2);
    assert_eq!(stats.get_region_by_id, 0);
    assert_eq!(pd.calls_to("GetRegion"), 2);

    let err = client.region_for_id(77).await.unwrap_err();
    assert!(
        matches!(
            err.failure(),
            Some(Failure::RegionNotFoundInPd { region_id: 77 })
        ),
        "{err:?}"
    );
    pd.state.lock().unwrap().regions.clear();
    client.invalidate_region_cache(a.ver_id()).await;
    let err = client.region_for_key(b"a").await.unwrap_err();
    assert!(
        matches!(&err, Error::RegionForKeyNotFound { key } if key == b"a"),
        "{err:?}"
    );
}

#[tokio::test]
async fn concurrent_region_for_key_calls_share_one_get_region() {
    let pd = FakePd::start(1, 9).await;
    let client = client(&pd.endpoints()).await;
    let lookups = (0..32).map(|_| client.region_for_key(b"same"));
    let regions = futures::future::join_all(lookups).await;
    assert!(regions.iter().all(|r| r.as_ref().unwrap().id() == 3));
    assert_eq!(client.pd_stats().get_region, 1);
    assert_eq!(pd.calls_to("GetRegion"), 1);
    // Same for ids.
    client
        .invalidate_region_cache(regions[0].as_ref().unwrap().ver_id())
        .await;
    let lookups = (0..32).map(|_| client.region_for_id(3));
    let regions = futures::future::join_all(lookups).await;
    assert!(regions.iter().all(|r| r.as_ref().unwrap().id() == 3));
    assert_eq!(client.pd_stats().get_region_by_id, 1);
}

#[tokio::test]
async fn timestamps_are_monotonic() {
    let pd = FakePd::start(1, 9).await;
    let client = client(&pd.endpoints()).await;
    let mut last = pdpb::Timestamp::default();
    for _ in 0..20 {
        let ts = Arc::clone(&client).get_timestamp().await.unwrap();
        assert!(
            (ts.physical, ts.logical) > (last.physical, last.logical),
            "{ts:?} after {last:?}"
        );
        last = ts;
    }
    assert_eq!(client.pd_stats().tso, 20);
}

#[tokio::test]
async fn update_leader_and_add_regions_follow_the_cache_rules() {
    let pd = FakePd::start(1, 9).await;
    let client = client(&pd.endpoints()).await;
    let region = client.region_for_key(b"a").await.unwrap();
    let ver = region.ver_id();
    client.update_leader(ver, peer(22, 2)).await.unwrap();
    assert_eq!(
        client.region_for_key(b"a").await.unwrap().leader,
        Some(peer(22, 2))
    );
    // Not a peer of the Region: ignored.
    client.update_leader(ver, peer(99, 9)).await.unwrap();
    assert_eq!(
        client.region_for_key(b"a").await.unwrap().leader,
        Some(peer(22, 2))
    );
    // EpochNotMatch regions: an older one is ignored, a newer split is taken.
    let mut stale = region.region.clone();
    stale.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: 1,
        version: 0,
    });
    client.add_regions(vec![stale]).await;
    assert_eq!(client.region_for_key(b"c").await.unwrap().end_key(), b"g");
    let mut left = region.region.clone();
    left.end_key = b"c".to_vec();
    left.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: 1,
        version: 2,
    });
    let mut right = left.clone();
    right.id = 4;
    right.start_key = b"c".to_vec();
    right.end_key = b"g".to_vec();
    client.add_regions(vec![left, right]).await;
    let got: RegionWithLeader = client.region_for_key(b"a").await.unwrap();
    assert_eq!(got.end_key(), b"c");
    assert_eq!(got.leader, Some(peer(22, 2)));
    assert_eq!(client.region_for_key(b"d").await.unwrap().id(), 4);
    assert_eq!(client.pd_stats().get_region, 1);
}

#[tokio::test]
async fn all_stores_excludes_tombstones_and_stores_can_be_missing() {
    let pd = FakePd::start(1, 9).await;
    // Real listeners so the store connections open.
    let mut listeners = Vec::new();
    for id in 1..=3 {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        pd.set_store(metapb::Store {
            id,
            address: l.local_addr().unwrap().to_string(),
            state: if id == 3 {
                metapb::StoreState::Tombstone as i32
            } else {
                metapb::StoreState::Up as i32
            },
            ..Default::default()
        });
        listeners.push(l);
    }
    let client = client(&pd.endpoints()).await;
    let stores = client.all_stores().await.unwrap();
    let mut ids: Vec<u64> = stores.iter().map(|s| s.meta.id).collect();
    ids.sort();
    assert_eq!(ids, vec![1, 2]);

    let region = client.region_for_key(b"a").await.unwrap();
    let err = Arc::clone(&client)
        .map_peer_to_store(region.clone(), peer(23, 3))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.failure(),
            Some(Failure::Pd {
                error_type: pdpb::ErrorType::StoreTombstone,
                ..
            })
        ),
        "{err:?}"
    );
    let err = Arc::clone(&client)
        .map_peer_to_store(region, peer(40, 4))
        .await
        .unwrap_err();
    assert!(
        matches!(
            err.failure(),
            Some(Failure::Pd {
                error_type: pdpb::ErrorType::Unknown,
                ..
            })
        ),
        "{err:?}"
    );
}

#[tokio::test]
async fn concurrent_callers_share_a_failed_leader_discovery() {
    // During a PD outage K concurrent callers wait about one
    // caller's bound, not K of them: a caller that waited for a discovery
    // takes its failure instead of running another.
    let pd = FakePd::start(1, 9).await;
    let client = client(&pd.endpoints()).await;
    pd.set_hang(true);
    let members_before = pd.calls_to("GetMembers");
    let started = Instant::now();
    let lookups = (0..8u8).map(|i| {
        let client = Arc::clone(&client);
        async move { client.region_for_key(&[b'k', i]).await }
    });
    for result in futures::future::join_all(lookups).await {
        assert!(
            matches!(
                result.as_ref().err().and_then(|e| e.failure()),
                Some(Failure::PdUnavailable { .. })
            ),
            "{result:?}"
        );
    }
    let elapsed = started.elapsed();
    assert!(
        elapsed < pd_call_bound(&config()) + SLACK,
        "8 callers took {elapsed:?}"
    );
    // About one discovery per retry round (a caller arriving just after one
    // finished starts the next), not one per caller and round (8 x 4 = 32).
    let asked = pd.calls_to("GetMembers") - members_before;
    assert!(asked < 16, "{asked} GetMembers calls");
}
