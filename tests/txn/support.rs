//! What the transaction tests share: a simulated cluster split at plain
//! keys, clients of it, the options most tests use, and a read of the
//! latest committed value.

use tikv_plan::codec::encode_bytes;
use tikv_plan::{CheckLevel, Config, TransactionClient, TransactionOptions};
use tikv_sim::SimCluster;

/// Three stores, three replicas, Regions split at the encodings of `splits`.
pub async fn cluster(splits: &[&str]) -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(splits.iter().map(|k| encode_bytes(k.as_bytes())).collect())
        .start()
        .await
        .unwrap()
}

/// A client of `cluster` with `config`.
pub async fn client_with(cluster: &SimCluster, config: Config) -> TransactionClient {
    TransactionClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap()
}

/// A client of `cluster` with the default configuration.
pub async fn client(cluster: &SimCluster) -> TransactionClient {
    client_with(cluster, Config::default()).await
}

/// Optimistic, warning (not panicking) when dropped unfinished.
pub fn optimistic() -> TransactionOptions {
    TransactionOptions::new_optimistic().drop_check(CheckLevel::Warn)
}

/// Pessimistic, warning (not panicking) when dropped unfinished.
pub fn pessimistic() -> TransactionOptions {
    TransactionOptions::new_pessimistic().drop_check(CheckLevel::Warn)
}

/// The latest committed value of `key`, read in a fresh snapshot.
pub async fn read(client: &TransactionClient, key: &str) -> Option<Vec<u8>> {
    let mut snapshot = client.snapshot(
        client.current_timestamp().await.unwrap(),
        TransactionOptions::new_optimistic(),
    );
    snapshot.get(key.to_owned()).await.unwrap()
}
