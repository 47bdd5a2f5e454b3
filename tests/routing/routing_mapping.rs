//! Store mapping failures in a candidate round (routing.md, "One round, per
//! shard" and "Connections").
#![cfg(feature = "mock")]

use crate::common::*;
use tikv_plan::mock::{self, MappingFailure};
use tikv_plan::proto::metapb;
use tikv_plan::Error;
use tikv_plan::Failure;

#[tokio::test(start_paused = true)]
async fn failed_follower_mapping_does_not_hide_later_voter() {
    let pd = three_voters();
    let routing = routing();
    pd.fail_store_mapping(2, MappingFailure::Refused);
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            unavailable()
        } else {
            accept(peer, req)
        }
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-13");
    assert_eq!(pd.dispatched_peers(), vec![11, 13]);
    assert_eq!(pd.map_calls_to_store(2), 1);
    assert!(
        !pd.is_store_cached(2),
        "the failed store's entry is dropped"
    );
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(13));
}

#[tokio::test(start_paused = true)]
async fn all_mapping_failures_invalidate_region_and_reload_peers() {
    let pd = three_voters();
    let routing = routing();
    for store in 1..=3 {
        pd.fail_store_mapping(store, MappingFailure::Refused);
    }
    // PD moved the Region to stores 4, 5 and 6.
    let mut moved = mock::region(
        1,
        b"",
        b"",
        &[mock::voter(41, 4), mock::voter(51, 5), mock::voter(61, 6)],
        Some(41),
    );
    moved.region.region_epoch = Some(metapb::RegionEpoch {
        conf_ver: 4,
        version: 1,
    });
    pd.set_pd_view(moved);
    pd.set_dispatch_hook(accept);
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-41");
    assert_eq!(pd.invalidate_region_cache_calls(), 1);
    assert_eq!(pd.invalidate_store_cache_calls(), 3);
    assert_eq!(pd.region_reloads(), 1);
    assert_eq!(pd.dispatched_peers(), vec![41]);
    let stats = routing.stats();
    assert_eq!(stats.store_invalidations, 3);
    assert_eq!(stats.region_invalidations, 1);
}

#[tokio::test(start_paused = true)]
async fn connection_setup_is_bounded() {
    // The store client's connect is bounded by the connect timeout; a
    // mapping that ends with `ConnectTimeout` moves the round on at once and
    // is counted.
    let pd = three_voters();
    let routing = routing();
    pd.fail_store_mapping(1, MappingFailure::ConnectTimeout);
    pd.set_dispatch_hook(accept);
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(routing.stats().connect_timeouts, 1);
    assert_eq!(pd.dispatched_peers(), vec![12]);
}

#[tokio::test(start_paused = true)]
async fn store_unknown_to_pd_is_a_mapping_failure() {
    let pd = three_voters();
    let routing = routing();
    pd.set_mapping_hook(|peer| {
        (peer.store_id == 1).then_some(Error::from(Failure::StoreNotFound { store_id: 1 }))
    });
    pd.set_dispatch_hook(accept);
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
}

#[tokio::test(start_paused = true)]
async fn pd_failure_during_mapping_moves_on_without_cooling_the_store() {
    let pd = three_voters();
    let routing = routing();
    pd.set_mapping_hook(|peer| {
        (peer.store_id == 1).then(|| {
            Error::from(Failure::PdUnavailable {
                endpoints: "pd-1".to_owned(),
                message: "no leader".to_owned(),
                source: None,
            })
        })
    });
    pd.set_dispatch_hook(accept);
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.invalidate_store_cache_calls(), 1);
    assert!(
        !routing.is_store_unreachable(1),
        "PD's trouble is not the store's"
    );
}
