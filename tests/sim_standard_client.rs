//! What any standard TiKV client gets from `tikv-sim` over real gRPC beyond
//! point reads and writes: PD's `ScanRegions`, `GetPrevRegion` and keyspace
//! metadata; the stores' `RawChecksum`, TiKV's one-TTL-for-all rule of
//! `RawBatchPut`, and the refusal of a request in another API version.

use tikv_plan::proto::{keyspacepb, kvrpcpb, pdpb};
use tikv_plan::raw::RawChecksum;
use tikv_plan_proto::checksum::pair_checksum;
use tikv_sim::SimCluster;

fn header(cluster: &SimCluster) -> Option<pdpb::RequestHeader> {
    Some(pdpb::RequestHeader {
        cluster_id: cluster.cluster_id(),
        sender_id: 0,
    })
}

/// Four Regions: ["", "d"), ["d", "h"), ["h", "p"), ["p", "").
async fn four_regions() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"d".to_vec(), b"h".to_vec(), b"p".to_vec()])
        .replicas(3)
        .start()
        .await
        .unwrap()
}

fn starts(regions: &[pdpb::Region]) -> Vec<Vec<u8>> {
    regions
        .iter()
        .map(|r| r.region.as_ref().unwrap().start_key.clone())
        .collect()
}

#[tokio::test]
async fn scan_regions_answers_the_regions_of_a_range_with_their_leaders() {
    let cluster = four_regions().await;
    let mut pd = cluster.pd_client(0).await.unwrap();
    let scan = |start: &[u8], end: &[u8], limit: i32| pdpb::ScanRegionsRequest {
        header: header(&cluster),
        start_key: start.to_vec(),
        end_key: end.to_vec(),
        limit,
    };
    // From the Region holding "e" up to (excluding) "p": two Regions.
    let resp = pd
        .scan_regions(scan(b"e", b"p", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(starts(&resp.regions), [b"d".to_vec(), b"h".to_vec()]);
    for r in &resp.regions {
        let region = r.region.as_ref().unwrap();
        assert_eq!(
            r.leader.as_ref().map(|p| p.id),
            cluster.pd_leader_of(region.id).map(|p| p.id)
        );
    }
    // The old form carries the same Regions.
    assert_eq!(resp.region_metas.len(), 2);
    assert_eq!(resp.leaders.len(), 2);
    // Everything, then a limit.
    let all = pd
        .scan_regions(scan(b"", b"", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(all.regions.len(), 4);
    let two = pd
        .scan_regions(scan(b"", b"", 2))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(starts(&two.regions), [b"".to_vec(), b"d".to_vec()]);
    // A range inside one Region, and one starting at the last Region.
    let one = pd
        .scan_regions(scan(b"i", b"j", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(starts(&one.regions), [b"h".to_vec()]);
    let last = pd
        .scan_regions(scan(b"z", b"", 0))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(starts(&last.regions), [b"p".to_vec()]);
    cluster.shutdown().await;
}

#[tokio::test]
async fn get_prev_region_walks_backwards_and_ends_at_the_first_region() {
    let cluster = four_regions().await;
    let mut pd = cluster.pd_client(0).await.unwrap();
    let prev = |key: &[u8]| pdpb::GetRegionRequest {
        header: header(&cluster),
        region_key: key.to_vec(),
        need_buckets: false,
    };
    let resp = pd.get_prev_region(prev(b"i")).await.unwrap().into_inner();
    let region = resp.region.unwrap();
    assert_eq!(
        (region.start_key, region.end_key),
        (b"d".to_vec(), b"h".to_vec())
    );
    assert_eq!(
        resp.leader.map(|p| p.id),
        cluster.pd_leader_of(region.id).map(|p| p.id)
    );
    let resp = pd.get_prev_region(prev(b"h")).await.unwrap().into_inner();
    assert_eq!(resp.region.unwrap().start_key, b"d".to_vec());
    let resp = pd.get_prev_region(prev(b"a")).await.unwrap().into_inner();
    assert!(resp.region.is_none(), "nothing before the first Region");
    cluster.shutdown().await;
}

#[tokio::test]
async fn load_keyspace_resolves_names_and_refuses_unknown_ones() {
    let cluster = SimCluster::builder()
        .stores(1)
        .keyspace("tenant-a", 7)
        .start()
        .await
        .unwrap();
    let mut ks = cluster.keyspace_client(0).await.unwrap();
    let load = |name: &str| keyspacepb::LoadKeyspaceRequest {
        header: header(&cluster),
        name: name.to_owned(),
    };
    let default = ks
        .load_keyspace(load("DEFAULT"))
        .await
        .unwrap()
        .into_inner();
    let meta = default.keyspace.unwrap();
    assert_eq!(
        (meta.id, meta.state),
        (0, keyspacepb::KeyspaceState::Enabled as i32)
    );
    let a = ks
        .load_keyspace(load("tenant-a"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(a.keyspace.unwrap().id, 7);
    let missing = ks.load_keyspace(load("nope")).await.unwrap().into_inner();
    assert!(missing.keyspace.is_none());
    let error = missing.header.unwrap().error.unwrap();
    assert_ne!(error.r#type, pdpb::ErrorType::Ok as i32);
    assert!(error.message.contains("nope"), "{}", error.message);
    // Invalid keyspace ids are refused when the cluster is built.
    assert!(SimCluster::builder()
        .keyspace("x", 1 << 24)
        .start()
        .await
        .is_err());
    cluster.shutdown().await;
}

/// Puts `pairs` with `ttls` in one RawBatchPut to the leader of the only
/// Region.
async fn batch_put(
    cluster: &SimCluster,
    pairs: &[(&str, &str)],
    ttls: Vec<u64>,
) -> kvrpcpb::RawBatchPutResponse {
    let region = cluster.region_for_key(b"").unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    let mut client = cluster.tikv_client(leader.store_id).await.unwrap();
    client
        .raw_batch_put(kvrpcpb::RawBatchPutRequest {
            context: cluster.context(region.id, leader.store_id),
            pairs: pairs
                .iter()
                .map(|(k, v)| kvrpcpb::KvPair {
                    key: k.as_bytes().to_vec(),
                    value: v.as_bytes().to_vec(),
                    ..Default::default()
                })
                .collect(),
            ttls,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

async fn ttl_of(cluster: &SimCluster, key: &str) -> Option<u64> {
    let region = cluster.region_for_key(b"").unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    let mut client = cluster.tikv_client(leader.store_id).await.unwrap();
    let resp = client
        .raw_get_key_ttl(kvrpcpb::RawGetKeyTtlRequest {
            context: cluster.context(region.id, leader.store_id),
            key: key.as_bytes().to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    (!resp.not_found).then_some(resp.ttl)
}

#[tokio::test]
async fn raw_batch_put_applies_a_single_ttl_to_every_pair() {
    let cluster = SimCluster::builder().stores(1).start().await.unwrap();
    let resp = batch_put(&cluster, &[("a", "1"), ("b", "2"), ("c", "3")], vec![100]).await;
    assert!(
        resp.error.is_empty() && resp.region_error.is_none(),
        "{resp:?}"
    );
    for key in ["a", "b", "c"] {
        let ttl = ttl_of(&cluster, key).await.unwrap();
        assert!((99..=100).contains(&ttl), "{key}: {ttl}");
    }
    // One per pair still works; another count is refused with a key error.
    let resp = batch_put(&cluster, &[("d", "1"), ("e", "2")], vec![0, 50]).await;
    assert!(resp.error.is_empty(), "{resp:?}");
    assert_eq!(ttl_of(&cluster, "d").await, Some(0));
    assert!(ttl_of(&cluster, "e").await.unwrap() > 0);
    let resp = batch_put(&cluster, &[("f", "1"), ("g", "2"), ("h", "3")], vec![1, 2]).await;
    assert!(resp.error.contains("ttls"), "{resp:?}");
    cluster.shutdown().await;
}

#[tokio::test]
async fn raw_checksum_is_the_xor_of_pair_crcs_per_region() {
    let cluster = four_regions().await;
    let data = [
        ("a", "1"),
        ("b", "22"),
        ("e", "333"),
        ("f", "4"),
        ("z", "5"),
    ];
    for (k, v) in data {
        let region = cluster.region_for_key(k.as_bytes()).unwrap();
        let leader = cluster.leader_of(region.id).unwrap();
        let mut client = cluster.tikv_client(leader.store_id).await.unwrap();
        client
            .raw_put(kvrpcpb::RawPutRequest {
                context: cluster.context(region.id, leader.store_id),
                key: k.as_bytes().to_vec(),
                value: v.as_bytes().to_vec(),
                ..Default::default()
            })
            .await
            .unwrap();
    }
    // Region ["", "d"): ranges ["", "b\0") and ["b\0", "d") make "a" and "b"
    // in two ranges of one request.
    let region = cluster.region_for_key(b"a").unwrap();
    let leader = cluster.leader_of(region.id).unwrap();
    let mut client = cluster.tikv_client(leader.store_id).await.unwrap();
    let resp = client
        .raw_checksum(kvrpcpb::RawChecksumRequest {
            context: cluster.context(region.id, leader.store_id),
            algorithm: kvrpcpb::ChecksumAlgorithm::Crc64Xor as i32,
            ranges: vec![
                kvrpcpb::KeyRange {
                    start_key: Vec::new(),
                    end_key: b"a\0".to_vec(),
                },
                kvrpcpb::KeyRange {
                    start_key: b"a\0".to_vec(),
                    end_key: b"d".to_vec(),
                },
            ],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        resp.region_error.is_none() && resp.error.is_empty(),
        "{resp:?}"
    );
    assert_eq!(
        resp.checksum,
        pair_checksum(b"a", b"1") ^ pair_checksum(b"b", b"22")
    );
    assert_eq!((resp.total_kvs, resp.total_bytes), (2, 2 + 3));
    let mut expected = RawChecksum::default();
    expected.add(b"a", b"1");
    expected.add(b"b", b"22");
    assert_eq!(expected.crc64_xor, resp.checksum);
    // A range starting outside the Region is a Region error, as for scans.
    let resp = client
        .raw_checksum(kvrpcpb::RawChecksumRequest {
            context: cluster.context(region.id, leader.store_id),
            algorithm: 0,
            ranges: vec![kvrpcpb::KeyRange {
                start_key: b"e".to_vec(),
                end_key: b"f".to_vec(),
            }],
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.region_error.unwrap().key_not_in_region.is_some());
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_request_in_another_api_version_is_refused_before_any_data_is_touched() {
    let v2 = SimCluster::builder()
        .stores(1)
        .api_version(kvrpcpb::ApiVersion::V2)
        .start()
        .await
        .unwrap();
    let region = v2.region_for_key(b"").unwrap();
    let mut client = v2.tikv_client(1).await.unwrap();
    let put = |api_version: kvrpcpb::ApiVersion, key: &[u8]| kvrpcpb::RawPutRequest {
        context: v2.context(region.id, 1).map(|mut c| {
            c.api_version = api_version as i32;
            c
        }),
        key: key.to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    };
    let resp = client
        .raw_put(put(kvrpcpb::ApiVersion::V1, b"k"))
        .await
        .unwrap()
        .into_inner();
    assert!(resp.error.contains("ApiVersionNotMatched"), "{resp:?}");
    assert!(resp.error.contains("with_keyspace"), "{resp:?}");
    assert_eq!(v2.value_of(b"k"), None);
    let resp = client
        .raw_put(put(kvrpcpb::ApiVersion::V2, b"r\0\0\0k"))
        .await
        .unwrap()
        .into_inner();
    assert!(resp.error.is_empty(), "{resp:?}");
    assert_eq!(v2.value_of(b"r\0\0\0k"), Some(b"v".to_vec()));
    // A response type without an error field gets a gRPC status instead.
    let status = client
        .raw_batch_get(kvrpcpb::RawBatchGetRequest {
            context: v2.context(region.id, 1),
            keys: vec![b"k".to_vec()],
            cf: String::new(),
        })
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::InvalidArgument);
    v2.shutdown().await;
}
