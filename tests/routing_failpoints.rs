//! Fail points before store mapping and before dispatch.
#![cfg(all(feature = "mock", feature = "failpoints"))]

mod common;

use common::*;

/// Fail points are process-wide: tests that configure them run one at a
/// time.
static FAIL_POINTS: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(start_paused = true)]
async fn fail_points_before_dispatch_and_mapping_fall_back() {
    let _serial = FAIL_POINTS.lock().await;
    let scenario = fail::FailScenario::setup();
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(accept);

    // The leader's store cannot be mapped once: the round moves to 12.
    fail::cfg("tikv_plan::before_map_store", "1*return->off").unwrap();
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(
        pd.map_calls_to_store(1),
        0,
        "the fail point fired before mapping"
    );
    assert_eq!(pd.dispatched_peers(), vec![12]);

    // The next dispatch (to the new leader 12) fails as a transport failure
    // before it reaches the store; the round goes on in peer order (11 maps
    // fine now).
    fail::cfg("tikv_plan::before_dispatch", "1*return->off").unwrap();
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-11");
    assert_eq!(pd.dispatched_peers(), vec![12, 11]);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(11));
    assert!(
        !pd.is_store_cached(2),
        "the transport failure dropped store 2"
    );

    // A timeout injected before dispatch keeps the caches.
    let invalidations = pd.invalidate_store_cache_calls();
    fail::cfg("tikv_plan::before_dispatch", "1*return(timeout)->off").unwrap();
    get(&pd, &routing).await.unwrap();
    assert_eq!(pd.invalidate_store_cache_calls(), invalidations);
    scenario.teardown();
}
