//! The mock PD's cache semantics, which the routing tests rely on.
#![cfg(feature = "mock")]

use std::sync::Arc;

use tikv_plan::mock::{self, MappingFailure, MockPdClient};
use tikv_plan::pd::PdClient;
use tikv_plan::proto::metapb;
use tikv_plan::region::RegionVerId;
use tikv_plan::Error;
use tikv_plan::Failure;

fn pd() -> Arc<MockPdClient> {
    Arc::new(MockPdClient::new(vec![
        mock::region(
            1,
            b"",
            b"m",
            &[mock::voter(11, 1), mock::voter(12, 2)],
            Some(11),
        ),
        mock::region(
            2,
            b"m",
            b"",
            &[mock::voter(21, 1), mock::voter(22, 2)],
            Some(21),
        ),
    ]))
}

#[tokio::test]
async fn update_leader_applies_only_to_the_cached_version_and_its_peers() {
    let pd = pd();
    let ver = pd.cached_region(1).unwrap().ver_id();
    pd.update_leader(ver, mock::voter(12, 2)).await.unwrap();
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
    // A stale version or a foreign peer is ignored.
    let stale = RegionVerId { ver: 0, ..ver };
    pd.update_leader(stale, mock::voter(11, 1)).await.unwrap();
    pd.update_leader(ver, mock::voter(99, 9)).await.unwrap();
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
    assert_eq!(pd.update_leader_calls(), 3);
}

#[tokio::test]
async fn invalidation_and_reload_use_the_pd_view() {
    let pd = pd();
    let mut moved = mock::region(1, b"", b"m", &[mock::voter(13, 3)], Some(13));
    moved.region.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: 2,
        version: 1,
    });
    pd.set_pd_view(moved);
    // The cache still answers until invalidated.
    assert_eq!(
        pd.region_for_key(b"a").await.unwrap().leader.map(|p| p.id),
        Some(11)
    );
    let ver = pd.cached_region(1).unwrap().ver_id();
    pd.invalidate_region_cache(RegionVerId { conf_ver: 0, ..ver })
        .await;
    assert!(
        pd.cached_region(1).is_some(),
        "a stale invalidation is ignored"
    );
    pd.invalidate_region_cache(ver).await;
    assert!(pd.cached_region(1).is_none());
    let reloaded = pd.region_for_key(b"a").await.unwrap();
    assert_eq!(reloaded.leader.map(|p| p.id), Some(13));
    assert_eq!(pd.region_reloads(), 1);
    assert_eq!(pd.invalidate_region_cache_calls(), 2);
}

#[tokio::test]
async fn mapping_counts_and_fails_per_store() {
    let pd = pd();
    let region = pd.region_for_key(b"a").await.unwrap();
    pd.fail_store_mapping(1, MappingFailure::ConnectTimeout);
    let err = pd
        .clone()
        .map_region_to_store(region.clone())
        .await
        .unwrap_err();
    assert!(matches!(
        err.failure(),
        Some(Failure::ConnectTimeout { .. })
    ));
    pd.heal_store(1);
    let store = pd
        .clone()
        .map_region_to_store(region.clone())
        .await
        .unwrap();
    assert_eq!(store.target_peer.id, 11);
    assert!(pd.is_store_cached(1));
    pd.invalidate_store_cache(1).await;
    assert!(!pd.is_store_cached(1));
    assert_eq!(pd.map_region_to_store_calls(), 2);
    assert_eq!(pd.map_peer_to_store_calls(), 2);
    assert_eq!(pd.map_calls_to_store(1), 2);
    assert_eq!(pd.invalidate_store_cache_calls(), 1);
    // Without a dispatch hook the mock answers with a typed error.
    let err = store
        .client
        .dispatch(&tikv_plan::raw_lowering::new_raw_get_request(
            b"a".to_vec().into(),
            None,
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, Error::InternalError { message: _ }));
}

#[tokio::test]
async fn epoch_not_match_regions_replace_overlapping_cache_entries() {
    let pd = pd();
    let mut left = mock::region(
        1,
        b"",
        b"g",
        &[mock::voter(11, 1), mock::voter(12, 2)],
        None,
    );
    let mut right = mock::region(3, b"g", b"m", &[mock::voter(31, 1)], None);
    for r in [&mut left, &mut right] {
        r.region.region_epoch = Some(metapb::RegionEpoch {
            conf_ver: 1,
            version: 2,
        });
    }
    pd.add_regions(vec![left.region, right.region]).await;
    assert_eq!(pd.region_for_key(b"h").await.unwrap().id(), 3);
    assert_eq!(
        pd.cached_leader(1).map(|p| p.id),
        Some(11),
        "the old leader is kept while it is still a peer"
    );
    assert_eq!(pd.region_reloads(), 0);
}

#[tokio::test]
async fn the_mock_orders_epochs_like_the_real_cache() {
    // The mock once compared epochs lexicographically and took
    // (version 2, conf_ver 0) over (1, 5), which the real cache refuses. It
    // now holds the real `RegionCache`.
    let pd = Arc::new(MockPdClient::new(vec![{
        let mut r = mock::region(1, b"", b"", &[mock::voter(11, 1)], Some(11));
        r.region.region_epoch = Some(metapb::RegionEpoch {
            conf_ver: 5,
            version: 1,
        });
        r
    }]));
    let mut odd = mock::region(1, b"", b"", &[mock::voter(11, 1), mock::voter(12, 2)], None);
    odd.region.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: 0,
        version: 2,
    });
    pd.add_regions(vec![odd.region.clone()]).await;
    let cached = pd.cached_region(1).unwrap();
    assert_eq!(cached.epoch().conf_ver, 5, "an older conf_ver is refused");
    assert_eq!(cached.region.peers.len(), 1);
    // A version that is newer in both components is taken.
    odd.region.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: 5,
        version: 2,
    });
    pd.add_regions(vec![odd.region]).await;
    assert_eq!(pd.cached_region(1).unwrap().region.peers.len(), 2);
}
