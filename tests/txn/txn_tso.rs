//! TSO requests from many tasks share one `Tso` stream, batched; the
//! stream follows a PD leader change.

use std::sync::Arc;

use tikv_plan::pd::{PdClient, PdRpcClient};
use tikv_plan::{Config, TimestampExt};
use tikv_sim::SimCluster;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_tasks_share_one_batched_tso_stream() {
    let cluster = SimCluster::builder()
        .stores(1)
        .pd_members(2)
        .start()
        .await
        .unwrap();
    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &Config::default())
            .await
            .unwrap(),
    );
    let tasks: Vec<_> = (0..200)
        .map(|_| {
            let pd = Arc::clone(&pd);
            tokio::spawn(async move { pd.get_timestamp().await.unwrap().version() })
        })
        .collect();
    let mut versions = Vec::new();
    for t in tasks {
        versions.push(t.await.unwrap());
    }
    versions.sort();
    versions.dedup();
    assert_eq!(versions.len(), 200, "every timestamp is unique");
    let stats = pd.tso_stats();
    assert_eq!(stats.streams_opened, 1, "{stats:?}");
    assert_eq!(stats.timestamps, 200);
    assert!(stats.requests < 200, "requests were batched: {stats:?}");

    // A timestamp after the batch is later than all of them.
    let next = Arc::clone(&pd).get_timestamp().await.unwrap().version();
    assert!(next > *versions.last().unwrap());

    // PD's leader moves: the stream breaks, is reopened on the new leader,
    // and timestamps keep increasing.
    cluster.pd_transfer_leader(1).unwrap();
    let after = Arc::clone(&pd).get_timestamp().await.unwrap().version();
    assert!(after > next);
    assert_eq!(pd.tso_stats().streams_opened, 2, "{:?}", pd.tso_stats());
    cluster.shutdown().await;
}
