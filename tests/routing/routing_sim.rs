//! The plan end to end over real gRPC on 127.0.0.1: `PdRpcClient` and
//! `TikvConnect` against the simulated cluster, in both failure modes of
//! routing.md ("Why").

use std::sync::Arc;
use std::time::Duration;

use tikv_plan::pd::PdRpcClient;
use tikv_plan::raw_lowering::{new_raw_get_request, new_raw_put_request};
use tikv_plan::request::{CollectSingle, Plan, PlanBuilder, RoutingState};
use tikv_plan::store::TikvConnect;
use tikv_plan::{Backoff, Config};
use tikv_sim::{ColdMode, Outcome, SimCluster};

fn config() -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(200))
}

fn backoff() -> Backoff {
    Backoff::no_jitter_backoff(5, 50, 10)
}

async fn setup() -> (
    SimCluster,
    Arc<PdRpcClient<TikvConnect>>,
    Arc<RoutingState>,
    u64,
) {
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .start()
        .await
        .unwrap();
    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &config())
            .await
            .unwrap(),
    );
    let routing = Arc::new(RoutingState::new(&config()));
    let region_id = cluster.region_for_key(b"k").unwrap().id;
    (cluster, pd, routing, region_id)
}

async fn put(pd: &Arc<PdRpcClient<TikvConnect>>, routing: &Arc<RoutingState>, value: &[u8]) {
    PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_put_request(b"k".to_vec().into(), value.to_vec(), None, 0, false),
    )
    .routing(routing.clone())
    .retry_multi_region(backoff())
    .merge(CollectSingle)
    .post_process_default()
    .plan()
    .execute()
    .await
    .unwrap();
}

async fn get(pd: &Arc<PdRpcClient<TikvConnect>>, routing: &Arc<RoutingState>) -> Option<Vec<u8>> {
    PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_get_request(b"k".to_vec().into(), None),
    )
    .routing(routing.clone())
    .retry_multi_region(backoff())
    .merge(CollectSingle)
    .post_process_default()
    .plan()
    .execute()
    .await
    .unwrap()
}

#[tokio::test]
async fn sim_unreachable_leader_store_falls_back_to_voter() {
    let (cluster, pd, routing, region_id) = setup().await;
    put(&pd, &routing, b"v1").await;
    let leader_store = cluster.leader_of(region_id).unwrap().store_id;
    let next = if leader_store == 3 {
        1
    } else {
        leader_store + 1
    };
    // The leader's store dies; another voter leads, PD still names the old.
    cluster.transfer_leader(region_id, next, false).unwrap();
    cluster.store_down(leader_store).await;
    assert_eq!(get(&pd, &routing).await, Some(b"v1".to_vec()));
    put(&pd, &routing, b"v2").await;
    assert_eq!(cluster.value_of(b"k"), Some(b"v2".to_vec()));
    let stats = routing.stats();
    assert!(stats.fallback_successes >= 1, "{stats:?}");
    for store in cluster.store_ids() {
        assert_eq!(cluster.counters(store).replica_reads(), 0);
        assert_eq!(cluster.counters(store).stale_reads(), 0);
    }
    cluster.shutdown().await;
}

#[tokio::test]
async fn sim_busy_zero_stale_leader_is_probed_past() {
    let (cluster, pd, routing, region_id) = setup().await;
    put(&pd, &routing, b"v1").await;
    let leader_store = cluster.leader_of(region_id).unwrap().store_id;
    // The old leader lost leadership but rejects reads at the read pool
    // with ServerIsBusy(0); PD still names it.
    let next = if leader_store == 3 {
        1
    } else {
        leader_store + 1
    };
    cluster.transfer_leader(region_id, next, false).unwrap();
    cluster.store_busy(leader_store, Some(0));
    assert_eq!(get(&pd, &routing).await, Some(b"v1".to_vec()));
    assert_eq!(routing.stats().busy_probes, 1);
    assert_eq!(
        cluster
            .counters(leader_store)
            .count("raw_get", Outcome::ServerIsBusy),
        2,
        "two busy answers, then the probe"
    );
    // The found leader is cached for everyone: no more busy answers.
    assert_eq!(get(&pd, &routing).await, Some(b"v1".to_vec()));
    assert_eq!(
        cluster
            .counters(leader_store)
            .count("raw_get", Outcome::ServerIsBusy),
        2
    );
    cluster.shutdown().await;
}

#[tokio::test]
async fn sim_cold_region_wakes_through_voters() {
    for mode in [ColdMode::AcceptAtOnce, ColdMode::NotLeaderFirst] {
        let (cluster, pd, routing, region_id) = setup().await;
        put(&pd, &routing, b"v1").await;
        cluster.make_cold(region_id, mode).unwrap();
        assert_eq!(get(&pd, &routing).await, Some(b"v1".to_vec()), "{mode:?}");
        assert!(
            cluster.leader_of(region_id).is_some(),
            "{mode:?}: a voter leads"
        );
        cluster.shutdown().await;
    }
}

async fn get_key(
    pd: &Arc<PdRpcClient<TikvConnect>>,
    routing: &Arc<RoutingState>,
    key: &[u8],
) -> Option<Vec<u8>> {
    PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_get_request(key.to_vec().into(), None),
    )
    .routing(routing.clone())
    .retry_multi_region(backoff())
    .merge(CollectSingle)
    .post_process_default()
    .plan()
    .execute()
    .await
    .unwrap()
}

/// Thirty Regions led from store 1; store 1 dies while PD keeps naming it.
/// Returns the connect attempts to store 1 after it died.
async fn connect_attempts_to_dead_leader_store(config: Config) -> u64 {
    let keys: Vec<Vec<u8>> = (0..30).map(|i| format!("k{i:02}").into_bytes()).collect();
    let cluster = SimCluster::builder()
        .stores(3)
        .replicas(3)
        .split_keys(keys[1..].to_vec())
        .start()
        .await
        .unwrap();
    let pd = Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &config)
            .await
            .unwrap(),
    );
    let routing = Arc::new(RoutingState::new(&config));
    for region in cluster.regions() {
        cluster.transfer_leader(region.id, 1, true).unwrap();
    }
    for key in &keys {
        assert_eq!(get_key(&pd, &routing, key).await, None);
    }
    let address = cluster.store_addr(1).unwrap();
    let before = pd.connect_counts(&address).attempts;
    for region in cluster.regions() {
        cluster.transfer_leader(region.id, 2, false).unwrap();
    }
    cluster.store_down(1).await;
    for key in &keys {
        assert_eq!(get_key(&pd, &routing, key).await, None);
    }
    let attempts = pd.connect_counts(&address).attempts - before;
    cluster.shutdown().await;
    attempts
}

#[tokio::test]
async fn sim_regions_led_from_dead_store_cost_about_one_connect_attempt() {
    let with_health = connect_attempts_to_dead_leader_store(config()).await;
    assert!(with_health <= 1, "store health: {with_health} attempts");
    let upstream = connect_attempts_to_dead_leader_store(config().upstream_routing()).await;
    assert!(upstream >= 29, "upstream: {upstream} attempts");
}
