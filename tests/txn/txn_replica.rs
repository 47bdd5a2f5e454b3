//! Transactional reads that leave the leader (docs/routing.md, "Replica and
//! stale reads"): stale snapshots served by followers at their safe-ts,
//! falling back to the leader on `DataIsNotReady`, and replica reads in a
//! transaction that see every committed write under lag.

use std::time::Duration;

use crate::support::{client, cluster, optimistic};
use tikv_plan::codec::encode_bytes;
use tikv_plan::{ReplicaRead, TransactionClient};
use tikv_sim::SimCluster;

async fn put(client: &TransactionClient, key: &str, value: &str) {
    let mut txn = client.begin_with_options(optimistic()).await.unwrap();
    txn.put(key.to_owned(), value.to_owned()).await.unwrap();
    txn.commit().await.unwrap();
}

fn followers(cluster: &SimCluster, key: &str) -> Vec<u64> {
    let region = cluster
        .region_for_key(&encode_bytes(key.as_bytes()))
        .unwrap();
    let leader = cluster.leader_of(region.id).unwrap().store_id;
    cluster
        .store_ids()
        .into_iter()
        .filter(|s| *s != leader)
        .collect()
}

fn served_by(cluster: &SimCluster, stores: &[u64]) -> u64 {
    stores
        .iter()
        .map(|s| cluster.counters(*s).served_as_replica())
        .sum()
}

#[tokio::test]
async fn a_stale_snapshot_is_served_by_a_follower_and_sees_its_timestamp_only() {
    let cluster = cluster(&[]).await;
    // Resolved ts ticks every hour: the safe-ts is the last full hour.
    cluster
        .set_resolved_ts_interval(Duration::from_secs(3600))
        .unwrap();
    let client = client(&cluster).await;
    put(&client, "k", "v1").await;
    cluster.advance_tso_clock(Duration::from_secs(2 * 3600));
    // 90 minutes back: after "v1", before the last tick.
    let mut old = client
        .stale_snapshot(
            Duration::from_secs(90 * 60),
            optimistic().replica_read(ReplicaRead::Follower),
        )
        .await
        .unwrap();
    put(&client, "k", "v2").await;
    let followers = followers(&cluster, "k");
    assert_eq!(old.get("k".to_owned()).await.unwrap(), Some(b"v1".to_vec()));
    assert_eq!(served_by(&cluster, &followers), 1, "a follower served it");
    let stats = client.routing_stats();
    assert_eq!((stats.replica_reads, stats.replica_fallbacks), (1, 0));

    // A snapshot at a fresh timestamp is above every follower's safe-ts:
    // DataIsNotReady, then the leader at the same timestamp.
    let now = client.current_timestamp().await.unwrap();
    let mut fresh = client.snapshot(
        now,
        optimistic()
            .stale_read()
            .replica_read(ReplicaRead::Follower),
    );
    assert_eq!(
        fresh.get("k".to_owned()).await.unwrap(),
        Some(b"v2".to_vec())
    );
    let stats = client.routing_stats();
    assert_eq!((stats.replica_reads, stats.replica_fallbacks), (2, 1));
    assert_eq!(served_by(&cluster, &followers), 1);
}

#[tokio::test]
async fn replica_reads_in_a_transaction_see_every_commit_before_its_start_under_lag() {
    let cluster = cluster(&[]).await;
    let followers = followers(&cluster, "k");
    for f in &followers {
        cluster
            .store_lag(*f, Some(Duration::from_millis(30)))
            .unwrap();
    }
    let client = client(&cluster).await;
    for i in 0..10 {
        put(&client, "k", &i.to_string()).await;
        let mut txn = client
            .begin_with_options(optimistic().replica_read(ReplicaRead::Follower))
            .await
            .unwrap();
        assert_eq!(
            txn.get("k".to_owned()).await.unwrap(),
            Some(i.to_string().into_bytes()),
            "read {i}"
        );
        txn.rollback().await.unwrap();
    }
    assert_eq!(served_by(&cluster, &followers), 10);
}
