//! Latency of `RawClient::get`, `put` and `scan` (100 pairs) against the
//! simulated cluster, beside a bare tonic call to the same store (the floor:
//! one gRPC round trip with no routing). Run: `cargo bench --bench
//! raw_latency` (one operation: `cargo bench --bench raw_latency -- scan`).
//!
//! One iteration at concurrency N is N requests issued at once by N tasks and
//! awaited together, so the reported time is the latency a request sees when
//! N are in flight.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tikv_plan::proto::kvrpcpb;
use tikv_plan::proto::tikvpb::tikv_client::TikvClient;
use tikv_plan::RawClient;
use tikv_sim::SimCluster;
use tokio::runtime::Runtime;
use tonic::transport::Channel;

const CONCURRENCY: [usize; 2] = [1, 64];
const KEY: &[u8] = b"bench-key";
/// The scan reads `SCAN_LEN` keys `scan-000`.. in one Region.
const SCAN_LEN: u32 = 100;
const SCAN_START: &[u8] = b"scan-";
const SCAN_END: &[u8] = b"scan.";

struct Setup {
    _cluster: SimCluster,
    client: RawClient,
    bare: TikvClient<Channel>,
    context: kvrpcpb::Context,
}

async fn setup() -> Setup {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .expect("start the simulated cluster");
    let client = RawClient::new(cluster.pd_endpoints())
        .await
        .expect("connect the client");
    client
        .put(KEY.to_vec(), b"value".to_vec())
        .await
        .expect("seed the key");
    client
        .batch_put((0..SCAN_LEN).map(|i| (format!("scan-{i:03}").into_bytes(), vec![7u8; 100])))
        .await
        .expect("seed the scanned keys");
    let region = cluster.region_for_key(KEY).expect("a region for the key");
    let leader = cluster.leader_of(region.id).expect("a leader");
    let addr = cluster
        .store_addr(leader.store_id)
        .expect("the leader's store");
    let bare = TikvClient::connect(format!("http://{addr}"))
        .await
        .expect("connect to the store");
    let context = kvrpcpb::Context {
        region_id: region.id,
        region_epoch: region.region_epoch,
        peer: Some(leader),
        ..Default::default()
    };
    Setup {
        _cluster: cluster,
        client,
        bare,
        context,
    }
}

/// Runs `iters` rounds of `n` concurrent operations and returns the total
/// time.
async fn rounds<F, Fut>(iters: u64, n: usize, op: F) -> Duration
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    for _ in 0..iters {
        let tasks: Vec<_> = (0..n).map(|_| tokio::spawn(op())).collect();
        for t in tasks {
            t.await.expect("task");
        }
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = Runtime::new().expect("tokio runtime");
    let s = Arc::new(rt.block_on(setup()));
    for op in ["get", "put", "scan"] {
        let mut group = c.benchmark_group(op);
        group
            .sample_size(30)
            .measurement_time(Duration::from_secs(5))
            .warm_up_time(Duration::from_secs(1));
        for n in CONCURRENCY {
            group.bench_with_input(BenchmarkId::new("tikv-plan", n), &n, |b, &n| {
                b.to_async(&rt).iter_custom(|iters| {
                    let s = s.clone();
                    async move {
                        rounds(iters, n, || {
                            let s = s.clone();
                            async move {
                                if op == "scan" {
                                    let pairs = s
                                        .client
                                        .scan(SCAN_START.to_vec()..SCAN_END.to_vec(), SCAN_LEN)
                                        .await
                                        .expect("scan");
                                    assert_eq!(pairs.len() as u32, SCAN_LEN);
                                } else if op == "get" {
                                    s.client.get(KEY.to_vec()).await.expect("get");
                                } else {
                                    s.client
                                        .put(KEY.to_vec(), b"value".to_vec())
                                        .await
                                        .expect("put");
                                }
                            }
                        })
                        .await
                    }
                })
            });
            group.bench_with_input(BenchmarkId::new("bare-tonic", n), &n, |b, &n| {
                b.to_async(&rt).iter_custom(|iters| {
                    let s = s.clone();
                    async move {
                        rounds(iters, n, || {
                            let s = s.clone();
                            async move {
                                let mut client = s.bare.clone();
                                if op == "scan" {
                                    let resp = client
                                        .raw_scan(kvrpcpb::RawScanRequest {
                                            context: Some(s.context.clone()),
                                            start_key: SCAN_START.to_vec(),
                                            end_key: SCAN_END.to_vec(),
                                            limit: SCAN_LEN,
                                            ..Default::default()
                                        })
                                        .await
                                        .expect("scan");
                                    assert_eq!(resp.get_ref().kvs.len() as u32, SCAN_LEN);
                                } else if op == "get" {
                                    let resp = client
                                        .raw_get(kvrpcpb::RawGetRequest {
                                            context: Some(s.context.clone()),
                                            key: KEY.to_vec(),
                                            ..Default::default()
                                        })
                                        .await
                                        .expect("get");
                                    assert!(resp.get_ref().region_error.is_none());
                                } else {
                                    let resp = client
                                        .raw_put(kvrpcpb::RawPutRequest {
                                            context: Some(s.context.clone()),
                                            key: KEY.to_vec(),
                                            value: b"value".to_vec(),
                                            ..Default::default()
                                        })
                                        .await
                                        .expect("put");
                                    assert!(resp.get_ref().region_error.is_none());
                                }
                            }
                        })
                        .await
                    }
                })
            });
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
