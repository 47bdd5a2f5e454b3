//! Latency of a small transaction (begin, get, put, commit) against the
//! simulated cluster, beside a raw put of the same key size (one RPC, the
//! floor). A transaction costs two TSO timestamps, a get, a prewrite and a
//! commit. Run: `cargo bench --bench txn_latency`.
//!
//! One iteration at concurrency N is N operations started at once by N
//! tasks on distinct keys and awaited together.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tikv_plan::codec::encode_bytes;
use tikv_plan::{CheckLevel, RawClient, TransactionClient, TransactionOptions};
use tikv_sim::SimCluster;
use tokio::runtime::Runtime;

const CONCURRENCY: [usize; 2] = [1, 16];

struct Setup {
    _raw_cluster: SimCluster,
    _txn_cluster: SimCluster,
    raw: RawClient,
    txn: TransactionClient,
}

async fn setup() -> Setup {
    let raw_cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .expect("start the raw cluster");
    let txn_cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(vec![encode_bytes(b"k08")])
        .start()
        .await
        .expect("start the transactional cluster");
    let raw = RawClient::new(raw_cluster.pd_endpoints())
        .await
        .expect("connect the raw client");
    let txn = TransactionClient::new(txn_cluster.pd_endpoints())
        .await
        .expect("connect the transactional client");
    Setup {
        _raw_cluster: raw_cluster,
        _txn_cluster: txn_cluster,
        raw,
        txn,
    }
}

async fn small_transaction(client: &TransactionClient, key: String) {
    let options = TransactionOptions::new_optimistic().drop_check(CheckLevel::None);
    let mut txn = client.begin_with_options(options).await.expect("begin");
    let _ = txn.get(key.clone()).await.expect("get");
    txn.put(key, b"value".to_vec()).await.expect("put");
    txn.commit().await.expect("commit");
}

async fn rounds<F, Fut>(iters: u64, n: usize, op: F) -> Duration
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let start = Instant::now();
    for _ in 0..iters {
        let tasks: Vec<_> = (0..n).map(|i| tokio::spawn(op(i))).collect();
        for t in tasks {
            t.await.expect("task");
        }
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = Runtime::new().expect("tokio runtime");
    let s = Arc::new(rt.block_on(setup()));
    let mut group = c.benchmark_group("small_txn");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(5))
        .warm_up_time(Duration::from_secs(1));
    for n in CONCURRENCY {
        group.bench_with_input(BenchmarkId::new("get+put+commit", n), &n, |b, &n| {
            b.to_async(&rt).iter_custom(|iters| {
                let s = s.clone();
                async move {
                    rounds(iters, n, |i| {
                        let s = s.clone();
                        async move { small_transaction(&s.txn, format!("k{i:02}")).await }
                    })
                    .await
                }
            })
        });
        group.bench_with_input(BenchmarkId::new("raw-put", n), &n, |b, &n| {
            b.to_async(&rt).iter_custom(|iters| {
                let s = s.clone();
                async move {
                    rounds(iters, n, |i| {
                        let s = s.clone();
                        async move {
                            s.raw
                                .put(format!("k{i:02}"), b"value".to_vec())
                                .await
                                .expect("raw put")
                        }
                    })
                    .await
                }
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
