//! Unary calls against BatchCommands streams (`Config::rpc_mode`): latency of
//! `RawClient::get` and `put` at several concurrencies against the simulated
//! cluster, to pick the default transport. Run:
//! `cargo bench --bench batch_latency`.
//!
//! One iteration at concurrency N is N requests issued at once by N tasks and
//! awaited together.

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use tikv_plan::{Config, RawClient, RpcMode};
use tikv_sim::SimCluster;
use tokio::runtime::Runtime;

const CONCURRENCY: [usize; 3] = [1, 64, 256];
const KEY: &[u8] = b"bench-key";

struct Setup {
    _cluster: SimCluster,
    clients: Vec<(&'static str, RawClient)>,
}

async fn setup() -> Setup {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .expect("start the simulated cluster");
    let mut clients = Vec::new();
    for (name, mode) in [("unary", RpcMode::Unary), ("batched", RpcMode::Batched)] {
        let config = Config::default().with_rpc_mode(mode);
        let client = RawClient::new_with_config(cluster.pd_endpoints(), config)
            .await
            .expect("connect the client");
        client
            .put(KEY.to_vec(), b"value".to_vec())
            .await
            .expect("seed the key");
        clients.push((name, client));
    }
    Setup {
        _cluster: cluster,
        clients,
    }
}

async fn rounds(iters: u64, n: usize, client: &RawClient, put: bool) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        let tasks: Vec<_> = (0..n)
            .map(|_| {
                let client = client.clone();
                tokio::spawn(async move {
                    if put {
                        client
                            .put(KEY.to_vec(), b"value".to_vec())
                            .await
                            .expect("put");
                    } else {
                        client.get(KEY.to_vec()).await.expect("get");
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.expect("task");
        }
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    let rt = Runtime::new().expect("tokio runtime");
    let s = Arc::new(rt.block_on(setup()));
    for (op, put) in [("get", false), ("put", true)] {
        let mut group = c.benchmark_group(format!("transport-{op}"));
        group
            .sample_size(20)
            .measurement_time(Duration::from_secs(4))
            .warm_up_time(Duration::from_secs(1));
        for n in CONCURRENCY {
            for index in 0..s.clients.len() {
                let name = s.clients[index].0;
                group.bench_with_input(BenchmarkId::new(name, n), &n, |b, &n| {
                    b.to_async(&rt).iter_custom(|iters| {
                        let s = s.clone();
                        async move { rounds(iters, n, &s.clients[index].1, put).await }
                    })
                });
            }
        }
        group.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
