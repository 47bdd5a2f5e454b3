//! Replica reads against the simulator over real gRPC (docs/routing.md,
//! "Replica and stale reads"): a raw client that lets reads leave the
//! leader reads from followers through read index (fresh under lag), keeps
//! to its zone's stores when labels say so, falls back to the leader when
//! a replica fails, and sends every write to the leader.

use std::time::Duration;

use tikv_plan::{Config, RawClient, ReplicaRead, RpcMode};
use tikv_sim::{ClientCut, RegionLayout, SimCluster, SimPeer};

/// Three stores, one Region; store 1 leads.
async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap()
}

fn config(mode: RpcMode) -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_request_deadline(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_millis(200))
        .with_rpc_mode(mode)
}

fn gets(cluster: &SimCluster, store: u64) -> u64 {
    cluster.counters(store).total("raw_get")
}

#[tokio::test]
async fn follower_reads_are_served_by_followers_and_see_every_finished_write_under_lag() {
    for mode in [RpcMode::Unary, RpcMode::Batched] {
        let cluster = cluster().await;
        let leader = cluster.leader_of(cluster.regions()[0].id).unwrap().store_id;
        let followers: Vec<u64> = cluster
            .store_ids()
            .into_iter()
            .filter(|s| *s != leader)
            .collect();
        for f in &followers {
            cluster
                .store_lag(*f, Some(Duration::from_millis(30)))
                .unwrap();
        }
        let writer = RawClient::new_with_config(cluster.pd_endpoints(), config(mode))
            .await
            .unwrap();
        let reader = writer.with_replica_read(ReplicaRead::Follower);
        let leader_gets = gets(&cluster, leader);
        for i in 0..20u32 {
            reader.put("k".to_owned(), i.to_string()).await.unwrap();
            let got = reader.get("k".to_owned()).await.unwrap();
            assert_eq!(got, Some(i.to_string().into_bytes()), "{mode:?}: read {i}");
        }
        assert_eq!(
            gets(&cluster, leader),
            leader_gets,
            "{mode:?}: no read on the leader"
        );
        let served: Vec<u64> = followers
            .iter()
            .map(|f| cluster.counters(*f).served_as_replica())
            .collect();
        assert_eq!(served.iter().sum::<u64>(), 20, "{mode:?}: {served:?}");
        assert!(
            served.iter().all(|n| *n > 0),
            "{mode:?}: spread over both: {served:?}"
        );
        assert_eq!(
            cluster.counters(leader).total("raw_put"),
            20,
            "{mode:?}: every write went to the leader"
        );
        let stats = reader.routing_stats();
        assert_eq!((stats.replica_reads, stats.replica_fallbacks), (20, 0));
    }
}

#[tokio::test]
async fn reads_stay_in_the_clients_zone_when_a_store_there_holds_a_replica() {
    let cluster = cluster().await;
    for (store, zone) in [(1, "z1"), (2, "z2"), (3, "z3")] {
        cluster.set_store_labels(store, &[("zone", zone)]).unwrap();
    }
    let client = RawClient::new_with_config(
        cluster.pd_endpoints(),
        config(RpcMode::Batched).with_local_labels([("zone", "z3")]),
    )
    .await
    .unwrap();
    client.put("k".to_owned(), "v".to_owned()).await.unwrap();
    let reader = client.with_replica_read(ReplicaRead::Mixed);
    let before = gets(&cluster, 3);
    for _ in 0..10 {
        assert_eq!(
            reader.get("k".to_owned()).await.unwrap(),
            Some(b"v".to_vec())
        );
    }
    assert_eq!(gets(&cluster, 3) - before, 10, "every read went to zone z3");
}

#[tokio::test]
async fn the_first_follower_read_of_a_fresh_client_stays_in_its_zone() {
    // Each store in its own zone; the client is in z3, where a follower
    // of the one Region lives. Nothing is cached before the first read.
    for mode in [RpcMode::Unary, RpcMode::Batched] {
        for replica in [ReplicaRead::Follower, ReplicaRead::Mixed] {
            let cluster = cluster().await;
            for (store, zone) in [(1, "z1"), (2, "z2"), (3, "z3")] {
                cluster.set_store_labels(store, &[("zone", zone)]).unwrap();
            }
            let reader = RawClient::new_with_config(
                cluster.pd_endpoints(),
                config(mode).with_local_labels([("zone", "z3")]),
            )
            .await
            .unwrap()
            .with_replica_read(replica);
            assert_eq!(reader.get("k".to_owned()).await.unwrap(), None);
            let per_store: Vec<u64> = [1, 2, 3].iter().map(|s| gets(&cluster, *s)).collect();
            assert_eq!(
                per_store,
                vec![0, 0, 1],
                "{mode:?} {replica:?}: the first read went to z3 alone"
            );
            assert_eq!(cluster.counters(3).served_as_replica(), 1);
        }
    }
}

#[tokio::test]
async fn a_replica_that_fails_sends_the_read_to_the_leader() {
    let cluster = cluster().await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config(RpcMode::Unary))
        .await
        .unwrap();
    client.put("k".to_owned(), "v".to_owned()).await.unwrap();
    let reader = client.with_replica_read(ReplicaRead::Follower);
    // Store 2 is down, store 3 answers every read with a Region error
    // (busy): whichever follower is asked, the leader answers.
    cluster.store_down(2).await;
    cluster.store_busy(3, Some(10));
    for _ in 0..4 {
        assert_eq!(
            reader.get("k".to_owned()).await.unwrap(),
            Some(b"v".to_vec())
        );
    }
    let stats = reader.routing_stats();
    assert!(stats.replica_reads >= 1, "{stats:?}");
    assert_eq!(stats.replica_reads, stats.replica_fallbacks, "{stats:?}");
    assert_eq!(gets(&cluster, 1), 4, "the leader answered each");
    let leader = cluster.counters(1);
    assert_eq!(
        (leader.replica_reads(), leader.stale_reads()),
        (0, 0),
        "no flag reached the leader"
    );
    cluster.store_busy(3, None);
}

#[tokio::test]
async fn learner_reads_are_served_by_the_learner_and_never_by_a_witness() {
    let layout = RegionLayout::new(vec![
        SimPeer::voter(1),
        SimPeer::voter(2),
        SimPeer::witness(3),
        SimPeer::learner(4),
    ])
    .leader(1);
    let cluster = SimCluster::builder()
        .stores(4)
        .region_layout(0, layout)
        .start()
        .await
        .unwrap();
    cluster
        .store_lag(4, Some(Duration::from_millis(30)))
        .unwrap();
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config(RpcMode::Batched))
        .await
        .unwrap();
    let reader = client.with_replica_read(ReplicaRead::Learner);
    for i in 0..8u32 {
        client.put("k".to_owned(), i.to_string()).await.unwrap();
        let got = reader.get("k".to_owned()).await.unwrap();
        assert_eq!(got, Some(i.to_string().into_bytes()), "read {i}");
    }
    assert_eq!(cluster.counters(4).served_as_replica(), 8);
    for store in [1, 2, 3] {
        assert_eq!(gets(&cluster, store), 0, "store {store} served no read");
    }
    assert_eq!(
        cluster.counters(3).total_requests(),
        0,
        "the witness is never asked"
    );
}

#[tokio::test]
async fn prefer_leader_reads_stay_on_the_leader_until_its_store_is_marked_unreachable() {
    let cluster = cluster().await;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config(RpcMode::Unary))
        .await
        .unwrap();
    client.put("k".to_owned(), "v".to_owned()).await.unwrap();
    let reader = client.with_replica_read(ReplicaRead::PreferLeader);
    for _ in 0..4 {
        assert_eq!(
            reader.get("k".to_owned()).await.unwrap(),
            Some(b"v".to_vec())
        );
    }
    assert_eq!(gets(&cluster, 1), 4, "the leader served every read");
    assert_eq!(reader.routing_stats().replica_reads, 0);
    // The client is cut off from the leader's store, which keeps leading:
    // the next read finds it unreachable (and forwards); from then on
    // reads go to a follower first, as replica reads, served through read
    // index from the live leader.
    cluster
        .cut_store_from_clients(1, Some(ClientCut::Refuse))
        .unwrap();
    assert_eq!(
        reader.get("k".to_owned()).await.unwrap(),
        Some(b"v".to_vec())
    );
    let served =
        |c: &SimCluster| c.counters(2).served_as_replica() + c.counters(3).served_as_replica();
    let before = served(&cluster);
    for _ in 0..4 {
        assert_eq!(
            reader.get("k".to_owned()).await.unwrap(),
            Some(b"v".to_vec())
        );
    }
    assert_eq!(served(&cluster) - before, 4, "followers served the reads");
    let stats = reader.routing_stats();
    assert!(stats.replica_reads >= 4, "{stats:?}");
}
