//! Slow-store feedback against the simulator over real gRPC (docs/routing.md,
//! "Slow-store feedback"): the stores' health feedback arrives on the
//! BatchCommands streams, the client keeps each store's latest slow score,
//! and replica reads pass over a store that calls itself slow while
//! another replica is not slow; leader requests never look at it.

use std::time::Duration;

use tikv_plan::{Config, RawClient, ReplicaRead, RpcMode};
use tikv_sim::SimCluster;

/// Upper bound for anything that must happen; tests end far sooner.
const PATIENCE: Duration = Duration::from_secs(20);

/// Three stores, one Region led from store 1; slow scores move in rounds
/// of 30 × 2 ms and every message carries feedback, so a test sees a
/// store become slow in well under a second.
async fn cluster() -> SimCluster {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap();
    cluster.store_health_timing(Duration::from_millis(2), Some(Duration::from_millis(1)));
    cluster
}

fn config() -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_request_deadline(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_millis(200))
        .with_rpc_mode(RpcMode::Batched)
}

fn replica_gets(cluster: &SimCluster, store: u64) -> u64 {
    cluster.counters(store).served_as_replica()
}

#[tokio::test]
async fn follower_reads_pass_over_a_store_that_reports_itself_slow() {
    let cluster = cluster().await;
    assert_eq!(
        cluster.leader_of(cluster.regions()[0].id).unwrap().store_id,
        1
    );
    cluster.store_slow(2, Duration::from_millis(5));
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config())
        .await
        .unwrap();
    client.put("k".to_owned(), "v".to_owned()).await.unwrap();
    let reader = client.with_replica_read(ReplicaRead::Follower);
    // Reads spread over stores 2 and 3 until store 2's score, doubling
    // each round while it is slow, reaches 80.
    tokio::time::timeout(PATIENCE, async {
        while reader.routing_stats().slow_stores == 0 {
            reader.get("k".to_owned()).await.unwrap();
        }
    })
    .await
    .expect("store 2 reported itself slow");
    let scores = reader.store_slow_scores();
    let score_of = |s: u64| scores.iter().find(|(id, _)| *id == s).map(|(_, x)| *x);
    assert!(score_of(2).is_some_and(|x| x >= 80), "{scores:?}");
    assert!(score_of(3).is_some_and(|x| x < 80), "{scores:?}");
    let (two, three) = (replica_gets(&cluster, 2), replica_gets(&cluster, 3));
    for _ in 0..20 {
        assert_eq!(
            reader.get("k".to_owned()).await.unwrap(),
            Some(b"v".to_vec())
        );
    }
    assert_eq!(replica_gets(&cluster, 2) - two, 0, "none on the slow store");
    assert_eq!(replica_gets(&cluster, 3) - three, 20, "all on store 3");
    // A leader read is not moved: it still goes to store 1.
    let leader_gets = cluster.counters(1).total("raw_get");
    client.get("k".to_owned()).await.unwrap();
    assert_eq!(cluster.counters(1).total("raw_get"), leader_gets + 1);
    cluster.shutdown().await;
}

#[tokio::test]
async fn with_the_preference_off_the_feedback_is_kept_but_reads_still_spread() {
    let cluster = cluster().await;
    cluster.store_slow(2, Duration::from_millis(5));
    let reader = RawClient::new_with_config(
        cluster.pd_endpoints(),
        config().with_slow_store_feedback(false),
    )
    .await
    .unwrap()
    .with_replica_read(ReplicaRead::Follower);
    tokio::time::timeout(PATIENCE, async {
        while reader.routing_stats().slow_stores == 0 {
            reader.get("k".to_owned()).await.unwrap();
        }
    })
    .await
    .expect("store 2 reported itself slow");
    let two = replica_gets(&cluster, 2);
    for _ in 0..20 {
        reader.get("k".to_owned()).await.unwrap();
    }
    assert_eq!(replica_gets(&cluster, 2) - two, 10, "every other read");
    cluster.shutdown().await;
}
