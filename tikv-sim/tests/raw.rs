//! Every raw method against the simulated stores: semantics, atomic
//! compare-and-swap under concurrency, TTLs.

use std::sync::Arc;
use std::time::Duration;

use tikv_sim::proto::kvrpcpb::{self, KeyRange, KvPair};
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::{Outcome, SimCluster};
use tonic::transport::Channel;

/// A one-Region cluster, its leader's client and a valid context.
async fn single_region() -> (SimCluster, TikvClient<Channel>, kvrpcpb::Context) {
    let cluster = SimCluster::builder().stores(3).start().await.unwrap();
    let region = cluster.regions()[0].clone();
    let leader = cluster.leader_of(region.id).unwrap();
    let client = cluster.tikv_client(leader.store_id).await.unwrap();
    let ctx = cluster.context(region.id, leader.store_id).unwrap();
    (cluster, client, ctx)
}

fn kv(k: &str, v: &str) -> KvPair {
    KvPair {
        error: None,
        key: k.as_bytes().to_vec(),
        value: v.as_bytes().to_vec(),
    }
}

fn keys(pairs: &[KvPair]) -> Vec<String> {
    pairs
        .iter()
        .map(|p| String::from_utf8(p.key.clone()).unwrap())
        .collect()
}

#[tokio::test]
async fn every_raw_method_behaves() {
    let (cluster, mut c, ctx) = single_region().await;
    let ctx = Some(ctx);
    let resp = c
        .raw_batch_put(kvrpcpb::RawBatchPutRequest {
            context: ctx.clone(),
            pairs: vec![
                kv("a", "1"),
                kv("b", "2"),
                kv("c", "3"),
                kv("d", "4"),
                kv("e", "5"),
            ],
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(resp.region_error.is_none() && resp.error.is_empty());

    let got = c
        .raw_batch_get(kvrpcpb::RawBatchGetRequest {
            context: ctx.clone(),
            keys: vec![b"a".to_vec(), b"x".to_vec(), b"c".to_vec()],
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&got.pairs), vec!["a", "c"]);
    assert_eq!(got.pairs[1].value, b"3".to_vec());

    let scan = c
        .raw_scan(kvrpcpb::RawScanRequest {
            context: ctx.clone(),
            start_key: b"b".to_vec(),
            end_key: b"e".to_vec(),
            limit: 10,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&scan.kvs), vec!["b", "c", "d"]);
    let scan = c
        .raw_scan(kvrpcpb::RawScanRequest {
            context: ctx.clone(),
            start_key: b"e".to_vec(),
            end_key: b"a".to_vec(),
            limit: 2,
            key_only: true,
            reverse: true,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&scan.kvs), vec!["d", "c"]);
    assert!(scan.kvs.iter().all(|p| p.value.is_empty()));

    let batch_scan = c
        .raw_batch_scan(kvrpcpb::RawBatchScanRequest {
            context: ctx.clone(),
            ranges: vec![
                KeyRange {
                    start_key: b"a".to_vec(),
                    end_key: b"c".to_vec(),
                },
                KeyRange {
                    start_key: b"d".to_vec(),
                    end_key: Vec::new(),
                },
            ],
            each_limit: 1,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&batch_scan.kvs), vec!["a", "d"]);

    c.raw_delete(kvrpcpb::RawDeleteRequest {
        context: ctx.clone(),
        key: b"a".to_vec(),
        ..Default::default()
    })
    .await
    .unwrap();
    c.raw_batch_delete(kvrpcpb::RawBatchDeleteRequest {
        context: ctx.clone(),
        keys: vec![b"b".to_vec(), b"zz".to_vec()],
        ..Default::default()
    })
    .await
    .unwrap();
    c.raw_delete_range(kvrpcpb::RawDeleteRangeRequest {
        context: ctx.clone(),
        start_key: b"d".to_vec(),
        end_key: Vec::new(),
        cf: String::new(),
    })
    .await
    .unwrap();
    let scan = c
        .raw_scan(kvrpcpb::RawScanRequest {
            context: ctx.clone(),
            start_key: Vec::new(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&scan.kvs), vec!["c"]);
    let get = c
        .raw_get(kvrpcpb::RawGetRequest {
            context: ctx.clone(),
            key: b"a".to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(get.not_found);

    // Column families are separate; unknown ones are key errors.
    c.raw_put(kvrpcpb::RawPutRequest {
        context: ctx.clone(),
        key: b"c".to_vec(),
        value: b"w".to_vec(),
        cf: "write".to_owned(),
        ..Default::default()
    })
    .await
    .unwrap();
    assert_eq!(cluster.value_of(b"c"), Some(b"3".to_vec()));
    let bad = c
        .raw_put(kvrpcpb::RawPutRequest {
            context: ctx.clone(),
            key: b"c".to_vec(),
            cf: "nope".to_owned(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!bad.error.is_empty());
    let leader = cluster.leader_of(cluster.regions()[0].id).unwrap();
    let counters = cluster.counters(leader.store_id);
    assert_eq!(counters.count("raw_put", Outcome::KeyError), 1);
    assert_eq!(counters.count("raw_put", Outcome::Ok), 1);
    assert_eq!(counters.count("raw_scan", Outcome::Ok), 3);
    assert_eq!(counters.replica_reads(), 0);
    cluster.shutdown().await;
}

#[tokio::test]
async fn compare_and_swap_semantics() {
    let (cluster, mut c, ctx) = single_region().await;
    let cas = |prev: Option<&str>, value: &str| kvrpcpb::RawCasRequest {
        context: Some(ctx.clone()),
        key: b"k".to_vec(),
        value: value.as_bytes().to_vec(),
        previous_not_exist: prev.is_none(),
        previous_value: prev.unwrap_or_default().as_bytes().to_vec(),
        ..Default::default()
    };
    let r = c
        .raw_compare_and_swap(cas(None, "1"))
        .await
        .unwrap()
        .into_inner();
    assert!(r.succeed && r.previous_not_exist);
    let r = c
        .raw_compare_and_swap(cas(None, "2"))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.succeed && !r.previous_not_exist);
    assert_eq!(r.previous_value, b"1".to_vec());
    let r = c
        .raw_compare_and_swap(cas(Some("0"), "2"))
        .await
        .unwrap()
        .into_inner();
    assert!(!r.succeed);
    let r = c
        .raw_compare_and_swap(cas(Some("1"), "2"))
        .await
        .unwrap()
        .into_inner();
    assert!(r.succeed);
    assert_eq!(r.previous_value, b"1".to_vec());
    assert_eq!(cluster.value_of(b"k"), Some(b"2".to_vec()));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compare_and_swap_is_atomic_under_concurrency() {
    let (cluster, c, ctx) = single_region().await;
    const TASKS: u64 = 8;
    const INCREMENTS: u64 = 12;
    let ctx = Arc::new(ctx);
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let mut c = c.clone();
        let ctx = ctx.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < INCREMENTS {
                let current = c
                    .raw_get(kvrpcpb::RawGetRequest {
                        context: Some((*ctx).clone()),
                        key: b"n".to_vec(),
                        cf: String::new(),
                    })
                    .await
                    .unwrap()
                    .into_inner();
                let n: u64 = if current.not_found {
                    0
                } else {
                    String::from_utf8(current.value.clone())
                        .unwrap()
                        .parse()
                        .unwrap()
                };
                let r = c
                    .raw_compare_and_swap(kvrpcpb::RawCasRequest {
                        context: Some((*ctx).clone()),
                        key: b"n".to_vec(),
                        value: (n + 1).to_string().into_bytes(),
                        previous_not_exist: current.not_found,
                        previous_value: current.value,
                        ..Default::default()
                    })
                    .await
                    .unwrap()
                    .into_inner();
                if r.succeed {
                    done += 1;
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert_eq!(
        cluster.value_of(b"n"),
        Some((TASKS * INCREMENTS).to_string().into_bytes())
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn ttl_is_honoured() {
    let (cluster, mut c, ctx) = single_region().await;
    // Connected; from here the test clock is paused and moved by hand.
    tokio::time::pause();
    let ctx = Some(ctx);
    c.raw_put(kvrpcpb::RawPutRequest {
        context: ctx.clone(),
        key: b"t".to_vec(),
        value: b"v".to_vec(),
        ttl: 10,
        ..Default::default()
    })
    .await
    .unwrap();
    c.raw_put(kvrpcpb::RawPutRequest {
        context: ctx.clone(),
        key: b"forever".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    })
    .await
    .unwrap();
    let ttl_of = |key: &str| kvrpcpb::RawGetKeyTtlRequest {
        context: ctx.clone(),
        key: key.as_bytes().to_vec(),
        cf: String::new(),
    };
    let r = c.raw_get_key_ttl(ttl_of("t")).await.unwrap().into_inner();
    assert_eq!((r.ttl, r.not_found), (10, false));
    let r = c
        .raw_get_key_ttl(ttl_of("forever"))
        .await
        .unwrap()
        .into_inner();
    assert_eq!((r.ttl, r.not_found), (0, false));

    tokio::time::advance(Duration::from_secs(7)).await;
    let r = c.raw_get_key_ttl(ttl_of("t")).await.unwrap().into_inner();
    assert_eq!(r.ttl, 3);
    tokio::time::advance(Duration::from_secs(3)).await;
    let r = c.raw_get_key_ttl(ttl_of("t")).await.unwrap().into_inner();
    assert!(r.not_found);
    let get = c
        .raw_get(kvrpcpb::RawGetRequest {
            context: ctx.clone(),
            key: b"t".to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(get.not_found);
    // Expired keys do not show up in scans either; CAS with a TTL works.
    let r = c
        .raw_compare_and_swap(kvrpcpb::RawCasRequest {
            context: ctx.clone(),
            key: b"t".to_vec(),
            value: b"again".to_vec(),
            previous_not_exist: true,
            ttl: 5,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(r.succeed && r.previous_not_exist);
    let r = c.raw_get_key_ttl(ttl_of("t")).await.unwrap().into_inner();
    assert_eq!(r.ttl, 5);
    // Batch put with one TTL per pair.
    c.raw_batch_put(kvrpcpb::RawBatchPutRequest {
        context: ctx.clone(),
        pairs: vec![kv("p", "1"), kv("q", "2")],
        ttls: vec![1, 100],
        ..Default::default()
    })
    .await
    .unwrap();
    tokio::time::advance(Duration::from_secs(2)).await;
    let scan = c
        .raw_scan(kvrpcpb::RawScanRequest {
            context: ctx.clone(),
            start_key: b"p".to_vec(),
            end_key: b"r".to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&scan.kvs), vec!["q"]);
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_huge_ttl_keeps_the_key_and_the_store_serving() {
    let (cluster, mut c, ctx) = single_region().await;
    let ctx = Some(ctx);
    let put = c
        .raw_put(kvrpcpb::RawPutRequest {
            context: ctx.clone(),
            key: b"h".to_vec(),
            value: b"v".to_vec(),
            ttl: u64::MAX,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert!(
        put.region_error.is_none() && put.error.is_empty(),
        "{put:?}"
    );
    let r = c
        .raw_get_key_ttl(kvrpcpb::RawGetKeyTtlRequest {
            context: ctx.clone(),
            key: b"h".to_vec(),
            cf: String::new(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!r.not_found && r.ttl > 0, "{r:?}");
    assert_eq!(cluster.value_of(b"h"), Some(b"v".to_vec()));
    cluster.shutdown().await;
}
