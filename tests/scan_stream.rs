//! `RawClient::scan_stream`: a range of any size, read in pages through the
//! plan, forward and reverse, across Regions and keyspaces, lazily.

use futures::{StreamExt, TryStreamExt};
use tikv_plan::proto::kvrpcpb::ApiVersion;
use tikv_plan::Failure;
use tikv_plan::{Config, Error, KvPair, RawClient};
use tikv_sim::codec::encode_bytes;
use tikv_sim::{Outcome, SimCluster};

fn key(i: usize) -> String {
    format!("k{i:06}")
}

/// Three Regions split inside the data.
async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .split_keys(vec![key(4000).into_bytes(), key(9000).into_bytes()])
        .start()
        .await
        .unwrap()
}

fn scans(cluster: &SimCluster) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count("raw_scan", Outcome::Ok))
        .sum()
}

fn keys(pairs: &[KvPair]) -> Vec<String> {
    pairs
        .iter()
        .map(|p| String::from_utf8(p.key().as_bytes().to_vec()).unwrap())
        .collect()
}

#[tokio::test]
async fn reads_more_than_the_scan_limit_in_pages_both_ways() {
    let cluster = cluster().await;
    let client = RawClient::new(cluster.pd_endpoints()).await.unwrap();
    let n = 12_000;
    client
        .batch_put((0..n).map(|i| (key(i), format!("v{i}"))))
        .await
        .unwrap();
    let expected: Vec<String> = (0..n).map(key).collect();

    let forward: Vec<KvPair> = client.scan_stream(.., 5000).try_collect().await.unwrap();
    assert_eq!(keys(&forward), expected);
    assert_eq!(forward[17].value(), b"v17");

    let mut reversed = expected.clone();
    reversed.reverse();
    let backward: Vec<KvPair> = client
        .scan_stream_reverse(.., 4096)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(keys(&backward), reversed);

    // A bounded range, with a page size that divides it exactly.
    let some: Vec<KvPair> = client
        .scan_stream(key(3990)..key(4010), 10)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(keys(&some), (3990..4010).map(key).collect::<Vec<_>>());
    let some: Vec<KvPair> = client
        .scan_stream_reverse(key(8995)..=key(9004), 3)
        .try_collect()
        .await
        .unwrap();
    assert_eq!(
        keys(&some),
        (8995..=9004).rev().map(key).collect::<Vec<_>>()
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn pages_are_read_only_when_the_stream_is_polled() {
    let cluster = cluster().await;
    let client = RawClient::new(cluster.pd_endpoints()).await.unwrap();
    client
        .batch_put((0..100).map(|i| (key(i), "v".to_owned())))
        .await
        .unwrap();
    cluster.reset_counters();
    let stream = client.scan_stream(.., 10);
    assert_eq!(scans(&cluster), 0, "nothing is read before the first poll");
    let first: Vec<KvPair> = stream.take(15).try_collect().await.unwrap();
    assert_eq!(keys(&first), (0..15).map(key).collect::<Vec<_>>());
    assert_eq!(scans(&cluster), 2, "two pages of 10 for 15 pairs");
    cluster.shutdown().await;
}

#[tokio::test]
async fn bad_page_sizes_are_typed_errors() {
    let cluster = cluster().await;
    let client = RawClient::new(cluster.pd_endpoints()).await.unwrap();
    let err = client
        .scan_stream(.., 0)
        .try_collect::<Vec<_>>()
        .await
        .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::InvalidArgument(_))),
        "{err}"
    );
    let err = client
        .scan_stream_reverse(.., 10_241)
        .try_collect::<Vec<_>>()
        .await
        .unwrap_err();
    assert!(matches!(err, Error::MaxScanLimitExceeded { .. }), "{err}");
    let err = client
        .scan_stream("z".."a", 10)
        .try_collect::<Vec<_>>()
        .await
        .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::InvalidArgument(_))),
        "{err}"
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_stream_stays_inside_its_keyspace() {
    let cluster = SimCluster::builder()
        .stores(3)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .keyspace("b", 2)
        .split_keys(vec![
            encode_bytes(b"r\0\0\x01k000005"),
            encode_bytes(b"r\0\0\x02"),
        ])
        .start()
        .await
        .unwrap();
    let in_ks = |name: &str| {
        RawClient::new_with_config(
            cluster.pd_endpoints(),
            Config::default().with_keyspace(name),
        )
    };
    let (a, b) = (in_ks("a").await.unwrap(), in_ks("b").await.unwrap());
    a.batch_put((0..10).map(|i| (key(i), "a".to_owned())))
        .await
        .unwrap();
    b.batch_put((0..3).map(|i| (key(i), "b".to_owned())))
        .await
        .unwrap();
    let got: Vec<KvPair> = a.scan_stream(.., 4).try_collect().await.unwrap();
    assert_eq!(keys(&got), (0..10).map(key).collect::<Vec<_>>());
    let got: Vec<KvPair> = b.scan_stream_reverse(.., 2).try_collect().await.unwrap();
    assert_eq!(keys(&got), [key(2), key(1), key(0)]);
    cluster.shutdown().await;
}
