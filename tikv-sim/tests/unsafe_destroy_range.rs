//! `UnsafeDestroyRange` as TiKV serves it: store-wide, without the API
//! version check every other request meets, and never with an empty key.

use tikv_sim::proto::kvrpcpb;
use tikv_sim::SimCluster;

/// TiKV hands UnsafeDestroyRange to its GC worker without checking the
/// request's API version (service/kv.rs), so an API v2 store serves one
/// that names no version; it asserts both keys are non-empty, which the
/// simulated store answers with an error instead of stopping.
#[tokio::test]
async fn unsafe_destroy_range_skips_the_api_version_check_and_refuses_empty_keys() {
    let cluster = SimCluster::builder()
        .stores(1)
        .api_version(kvrpcpb::ApiVersion::V2)
        .start()
        .await
        .unwrap();
    let mut store = cluster.tikv_client(1).await.unwrap();
    let destroy = |start: &[u8], end: &[u8]| kvrpcpb::UnsafeDestroyRangeRequest {
        context: None,
        start_key: start.to_vec(),
        end_key: end.to_vec(),
    };
    let served = store
        .unsafe_destroy_range(destroy(b"x\0\0\0", b"x\0\0\x01"))
        .await
        .unwrap()
        .into_inner();
    assert!(
        served.error.is_empty() && served.region_error.is_none(),
        "{served:?}"
    );
    // Any other request without the store's API version is refused.
    let refused = store
        .kv_scan_lock(kvrpcpb::ScanLockRequest {
            context: cluster.context(cluster.regions()[0].id, 1),
            max_version: u64::MAX,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        format!("{refused:?}").contains("ApiVersionNotMatched"),
        "{refused:?}"
    );
    for (start, end) in [(&b""[..], &b"x"[..]), (&b"x"[..], &b""[..])] {
        let answer = store
            .unsafe_destroy_range(destroy(start, end))
            .await
            .unwrap()
            .into_inner();
        assert!(answer.error.contains("empty"), "{answer:?}");
    }
    cluster.shutdown().await;
}
