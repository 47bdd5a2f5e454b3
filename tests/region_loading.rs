//! Loading Regions in bulk: a request over many uncached Regions costs O(1)
//! PD round trips (`ScanRegions`), not one `GetRegion` per Region; a PD
//! without `ScanRegions` still works, one Region at a time. Also the range
//! checksum and the gRPC decoding limit, which walk the same Regions.

use std::sync::Arc;

use tikv_plan::pd::PdRpcClient;
use tikv_plan::raw::RawChecksum;
use tikv_plan::Failure;
use tikv_plan::{Config, RawClient};
use tikv_plan_proto::checksum::pair_checksum;
use tikv_sim::SimCluster;

fn key(i: usize) -> Vec<u8> {
    format!("k{i:05}").into_bytes()
}

/// 1000 Regions, one key each: Region i holds `k{i:05}`.
async fn thousand_regions() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(1)
        .split_keys((1..1000).map(key).collect())
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn batch_get_over_a_thousand_uncached_regions_costs_o1_pd_round_trips() {
    let cluster = thousand_regions().await;
    // Write through one client, read through a fresh one with a cold cache.
    let writer = RawClient::new(cluster.pd_endpoints()).await.unwrap();
    writer
        .batch_put((0..1000).map(|i| (key(i), b"v".to_vec())))
        .await
        .unwrap();

    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap(),
    );
    let reader = RawClient::new_with_pd_client(Arc::clone(&pd), &Config::default());
    let before = pd.pd_stats();
    let pairs = reader.batch_get((0..1000).map(key)).await.unwrap();
    assert_eq!(pairs.len(), 1000);
    let after = pd.pd_stats();
    let region_calls = (after.get_region - before.get_region)
        + (after.get_region_by_id - before.get_region_by_id)
        + (after.scan_regions - before.scan_regions);
    assert!(
        region_calls <= 2,
        "1000 cold Regions took {region_calls} PD Region calls: {after:?}"
    );
    assert_eq!(after.scan_regions - before.scan_regions, 1, "{after:?}");
    assert_eq!(pd.cached_regions(), 1000);
    // A second pass needs PD for nothing.
    let again = pd.pd_stats();
    reader.batch_get((0..1000).map(key)).await.unwrap();
    assert_eq!(pd.pd_stats().scan_regions, again.scan_regions);
    assert_eq!(pd.pd_stats().get_region, again.get_region);
    cluster.shutdown().await;
}

#[tokio::test]
async fn scans_and_range_deletes_over_cold_caches_load_regions_in_bulk() {
    let cluster = thousand_regions().await;
    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap(),
    );
    let client = RawClient::new_with_pd_client(Arc::clone(&pd), &Config::default());
    // A forward scan over 40 Regions: a few bulk loads, not 40 lookups.
    client
        .batch_put((0..40).map(|i| (key(i), b"v".to_vec())))
        .await
        .unwrap();
    let cold = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap(),
    );
    let scanner = RawClient::new_with_pd_client(Arc::clone(&cold), &Config::default());
    let pairs = scanner.scan(key(0)..key(40), 100).await.unwrap();
    assert_eq!(pairs.len(), 40);
    let stats = cold.pd_stats();
    assert!(
        stats.get_region + stats.scan_regions <= 4,
        "40 Regions scanned with {stats:?}"
    );
    // A reverse scan and a range delete over the rest of the key space.
    let reverse = scanner.scan_reverse(.., 5).await.unwrap();
    assert_eq!(reverse[0].key().as_bytes(), key(39));
    scanner.delete_range(..).await.unwrap();
    assert!(scanner.scan(.., 10).await.unwrap().is_empty());
    let stats = cold.pd_stats();
    assert!(
        stats.get_region + stats.scan_regions <= 8,
        "1000 Regions walked with {stats:?}"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn checksum_of_a_range_across_regions_matches_the_data() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"g".to_vec(), b"n".to_vec()])
        .start()
        .await
        .unwrap();
    let client = RawClient::new(cluster.pd_endpoints()).await.unwrap();
    let data: Vec<(String, String)> = ('a'..='z')
        .map(|c| (format!("{c}1"), format!("value-{c}")))
        .collect();
    client.batch_put(data.clone()).await.unwrap();
    let mut expected = RawChecksum::default();
    for (k, v) in &data {
        expected.add(k.as_bytes(), v.as_bytes());
    }
    assert_eq!(client.checksum(..).await.unwrap(), expected);
    // A sub-range spanning the split at "g".
    let sub = client.checksum("f".."h").await.unwrap();
    assert_eq!(
        sub.crc64_xor,
        pair_checksum(b"f1", b"value-f") ^ pair_checksum(b"g1", b"value-g")
    );
    assert_eq!((sub.total_kvs, sub.total_bytes), (2, 2 * (2 + 7)));
    assert_eq!(
        client.checksum("x".."x").await.unwrap(),
        RawChecksum::default()
    );
    // After a split the answer is the same.
    cluster.split_region(b"q").unwrap();
    assert_eq!(client.checksum(..).await.unwrap(), expected);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_response_over_the_decoding_limit_is_a_typed_error_naming_the_knob() {
    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let big = vec![7u8; 64 * 1024];
    let writer = RawClient::new(cluster.pd_endpoints()).await.unwrap();
    writer.put("big", big.clone()).await.unwrap();
    let config = Config::default().with_grpc_max_decoding_message_size(16 * 1024);
    assert_eq!(
        Config::default().grpc_max_decoding_message_size,
        4 * 1024 * 1024
    );
    let small = RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap();
    // Small answers (PD's included) still decode.
    small.put("k", "v").await.unwrap();
    let err = small.get("big").await.unwrap_err();
    match err.failure() {
        Some(Failure::GrpcMessageTooLarge { limit, .. }) => assert_eq!(*limit, 16 * 1024),
        _ => panic!("expected GrpcMessageTooLarge, got {err:?}"),
    }
    assert!(
        err.to_string().contains("grpc_max_decoding_message_size"),
        "{err}"
    );
    assert_eq!(writer.get("big").await.unwrap(), Some(big));
    cluster.shutdown().await;
}
