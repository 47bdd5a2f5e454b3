//! TiFlash beside TiKV (docs/routing.md, "TiFlash stores and peers"): PD
//! lists TiFlash stores (`engine=tiflash`) and Regions carry TiFlash
//! learners, yet no TiKV request ever goes there: not in a fallback round,
//! not as a replica read (`ReplicaRead::Learner` included), not through a
//! proxy, not in a store-wide operation. Against the simulator over real
//! gRPC, the TiFlash store's counters stay at zero; the rule's corner
//! cases (a TiFlash store offered as a voter) on the mock.

use std::time::Duration;

use tikv_plan::pd::{PdClient, PdRpcClient};
use tikv_plan::{Backoff, Config, Failure, RawClient, ReplicaRead, RpcMode, TransactionClient};
use tikv_sim::{ClientCut, RegionLayout, SimCluster, SimPeer};

/// The TiFlash store of [`cluster`].
const TIFLASH: u64 = 4;

/// Three TiKV stores (store 1 leads the one Region) and TiFlash store 4
/// holding a learner of it.
async fn cluster() -> SimCluster {
    SimCluster::builder()
        .stores(3)
        .tiflash_stores(1)
        .replicas(3)
        .start()
        .await
        .unwrap()
}

fn config(mode: RpcMode) -> Config {
    let mut config = Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_request_deadline(Duration::from_secs(10))
        .with_connect_timeout(Duration::from_millis(200))
        .with_rpc_mode(mode);
    config.forwarding_probe_interval = Duration::from_millis(20);
    config
}

async fn raw(cluster: &SimCluster, mode: RpcMode) -> RawClient {
    RawClient::new_with_config(cluster.pd_endpoints(), config(mode))
        .await
        .unwrap()
}

/// Asserts that no call of any kind reached the TiFlash store.
fn untouched(cluster: &SimCluster, store: u64, what: &str) {
    let counters = cluster.counters(store);
    assert_eq!(
        counters.total_requests(),
        0,
        "{what}: TiFlash store {store} was sent {:?}",
        counters.entries()
    );
    assert_eq!(counters.batch_streams(), 0, "{what}: a stream was opened");
}

#[tokio::test]
async fn the_pd_client_never_dials_a_tiflash_store_and_refuses_to_map_one() {
    let cluster = cluster().await;
    let pd = std::sync::Arc::new(
        PdRpcClient::connect(&cluster.pd_endpoints(), &config(RpcMode::Unary))
            .await
            .unwrap(),
    );
    let stores = pd.all_stores().await.unwrap();
    let mut ids: Vec<u64> = stores.iter().map(|s| s.meta.id).collect();
    ids.sort_unstable();
    assert_eq!(
        ids,
        vec![1, 2, 3],
        "PD lists 4 stores; TiFlash's is left out"
    );
    let tiflash_addr = cluster.store_addr(TIFLASH).unwrap();
    let region = pd.region_for_key(b"k").await.unwrap();
    let learner = *region
        .region
        .peers
        .iter()
        .find(|p| p.store_id == TIFLASH)
        .unwrap();
    let refused = pd
        .clone()
        .map_peer_to_store(region, learner)
        .await
        .unwrap_err();
    match refused.failure() {
        Some(Failure::NotTiKvStore { store_id, engine }) => {
            assert_eq!((*store_id, engine.as_str()), (TIFLASH, "tiflash"));
        }
        other => panic!("{refused}: {other:?}"),
    }
    assert_eq!(pd.connect_counts(&tiflash_addr).attempts, 0);
    assert!(!pd.has_connection(&tiflash_addr));
    // The store's labels are known now: a replica read will not pick it.
    let labels = pd.store_labels(TIFLASH).unwrap();
    assert!(labels
        .iter()
        .any(|l| l.key == "engine" && l.value == "tiflash"));
    untouched(&cluster, TIFLASH, "all_stores and mapping");
}

#[tokio::test]
async fn a_fallback_round_tries_tikv_voters_only() {
    for mode in [RpcMode::Unary, RpcMode::Batched] {
        let cluster = cluster().await;
        let region = cluster.regions()[0].id;
        let client = raw(&cluster, mode).await;
        client.put("k".to_owned(), "v".to_owned()).await.unwrap();
        // The leader's store dies; store 2 leads, PD still names store 1.
        cluster.store_down(1).await;
        cluster.transfer_leader(region, 2, false).unwrap();
        assert_eq!(
            client.get("k".to_owned()).await.unwrap(),
            Some(b"v".to_vec()),
            "{mode:?}"
        );
        client.put("k".to_owned(), "w".to_owned()).await.unwrap();
        // Every TiKV store gone: the request fails, still never at TiFlash.
        cluster.store_down(2).await;
        cluster.store_down(3).await;
        let short = client.with_backoff(Backoff::no_jitter_backoff(2, 20, 2));
        assert!(short.get("k".to_owned()).await.is_err(), "{mode:?}");
        untouched(&cluster, TIFLASH, &format!("{mode:?} fallback"));
        cluster.shutdown().await;
    }
}

/// Voters on 1, 2, 3 (1 leads), a TiKV learner on 4, a TiFlash learner on
/// TiFlash store 5.
async fn learners_cluster() -> SimCluster {
    SimCluster::builder()
        .stores(4)
        .tiflash_stores(1)
        .region_layout(
            0,
            RegionLayout::new(vec![
                SimPeer::voter(1),
                SimPeer::voter(2),
                SimPeer::voter(3),
                SimPeer::learner(4),
                SimPeer::learner(5),
            ]),
        )
        .start()
        .await
        .unwrap()
}

#[tokio::test]
async fn learner_reads_go_to_a_tikv_learner_or_the_leader_never_to_tiflash() {
    for mode in [RpcMode::Unary, RpcMode::Batched] {
        let cluster = learners_cluster().await;
        let writer = raw(&cluster, mode).await;
        writer.put("k".to_owned(), "v".to_owned()).await.unwrap();
        // The stores' labels are not known before the first reads: a read
        // that picks the TiFlash learner is refused at mapping and picks
        // again.
        let learner = writer.with_replica_read(ReplicaRead::Learner);
        for i in 0..10 {
            assert_eq!(
                learner.get("k".to_owned()).await.unwrap(),
                Some(b"v".to_vec()),
                "{mode:?} read {i}"
            );
        }
        assert_eq!(cluster.counters(4).served_as_replica(), 10, "{mode:?}");
        // Mixed and stale-free follower reads spread over data-holding
        // peers: TiKV's only.
        let mixed = writer.with_replica_read(ReplicaRead::Mixed);
        for _ in 0..12 {
            assert_eq!(
                mixed.get("k".to_owned()).await.unwrap(),
                Some(b"v".to_vec())
            );
        }
        let stats = learner.routing_stats();
        assert_eq!(stats.replica_fallbacks, 0, "{mode:?}: {stats:?}");
        // Without its TiKV learner the Region has only TiFlash's: the
        // learner read goes to the leader.
        let region = cluster.regions()[0].id;
        cluster.remove_peer(region, 4).unwrap();
        let leader_gets = cluster.counters(1).total("raw_get");
        for _ in 0..3 {
            assert_eq!(
                learner.get("k".to_owned()).await.unwrap(),
                Some(b"v".to_vec())
            );
        }
        assert!(
            cluster.counters(1).total("raw_get") >= leader_gets + 3,
            "{mode:?}"
        );
        untouched(&cluster, 5, &format!("{mode:?} replica reads"));
        cluster.shutdown().await;
    }
}

#[tokio::test]
async fn forwarding_never_proxies_through_a_tiflash_store() {
    for mode in [RpcMode::Unary, RpcMode::Batched] {
        let cluster = cluster().await;
        let client = raw(&cluster, mode).await;
        client.put("a".to_owned(), "1".to_owned()).await.unwrap();
        cluster
            .cut_store_from_clients(1, Some(ClientCut::Refuse))
            .unwrap();
        // A read first: the cut resets the open connection, and a write
        // met by that is undetermined (never sent again).
        assert_eq!(
            client.get("a".to_owned()).await.unwrap(),
            Some(b"1".to_vec())
        );
        for i in 0..5 {
            client.put("a".to_owned(), i.to_string()).await.unwrap();
            assert_eq!(
                client.get("a".to_owned()).await.unwrap(),
                Some(i.to_string().into_bytes())
            );
        }
        let proxied: u64 = cluster
            .tikv_store_ids()
            .into_iter()
            .map(|s| cluster.counters(s).forwarded().0)
            .sum();
        assert!(proxied > 0, "{mode:?}: a TiKV voter proxied");
        assert_eq!(cluster.counters(TIFLASH).forwarded(), (0, 0));
        untouched(&cluster, TIFLASH, &format!("{mode:?} forwarding"));
        cluster.shutdown().await;
    }
}

#[tokio::test]
async fn store_wide_operations_never_reach_a_tiflash_store() {
    let cluster = SimCluster::builder()
        .stores(3)
        .tiflash_stores(1)
        .split_keys(vec![tikv_sim::codec::encode_bytes(b"m")])
        .replicas(3)
        .start()
        .await
        .unwrap();
    let client = TransactionClient::new_with_config(cluster.pd_endpoints(), config(RpcMode::Unary))
        .await
        .unwrap();
    let mut txn = client.begin_optimistic().await.unwrap();
    txn.put("a".to_owned(), "1".to_owned()).await.unwrap();
    txn.put("x".to_owned(), "2".to_owned()).await.unwrap();
    txn.commit().await.unwrap();
    let safepoint = client.current_timestamp().await.unwrap();
    client.scan_locks(&safepoint, .., 10).await.unwrap();
    client
        .cleanup_locks(.., &safepoint, Default::default())
        .await
        .unwrap();
    client.gc(safepoint).await.unwrap();
    client
        .unsafe_destroy_range("a".to_owned().."z".to_owned())
        .await
        .unwrap();
    for store in cluster.tikv_store_ids() {
        assert_eq!(
            cluster.counters(store).total("unsafe_destroy_range"),
            1,
            "store {store}"
        );
    }
    untouched(
        &cluster,
        TIFLASH,
        "scan_locks, cleanup_locks, gc, unsafe_destroy_range",
    );
    cluster.shutdown().await;
}

/// The rule on the mock, where a store's labels are known from the start
/// and a Region can be given shapes PD never makes.
#[cfg(feature = "mock")]
mod on_the_mock {
    use std::sync::Arc;

    use crate::common::*;
    use tikv_plan::mock::{self, MockPdClient};
    use tikv_plan::raw_lowering::new_raw_get_request;
    use tikv_plan::request::{CollectSingle, Keyspace, Plan, PlanBuilder};
    use tikv_plan::ReplicaRead;

    /// Voters 11@1 (leader), 12@2, 13@3; store 2 labelled TiFlash.
    fn tiflash_voter() -> Arc<MockPdClient> {
        let pd = three_voters();
        pd.set_store_labels(2, &[("engine", "tiflash")]);
        pd
    }

    #[tokio::test(start_paused = true)]
    async fn a_tiflash_store_offered_as_a_voter_is_skipped_unsent_and_unblamed() {
        let pd = tiflash_voter();
        let routing = routing();
        pd.set_dispatch_hook(|peer, req| {
            if peer.id == 11 {
                unavailable()
            } else {
                accept(peer, req)
            }
        });
        assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-13");
        assert_eq!(pd.dispatched_peers(), vec![11, 13]);
        assert_eq!(pd.dispatches_to_store(2), 0);
        assert_eq!(pd.map_calls_to_store(2), 1, "refused at mapping");
        assert_eq!(
            pd.invalidate_store_cache_calls(),
            1,
            "the leader's store only"
        );
        assert!(!routing.is_store_unreachable(2), "a refusal is no failure");
        assert_leader_requests_only(&pd);
    }

    #[tokio::test(start_paused = true)]
    async fn a_round_of_tiflash_stores_only_sends_nothing_and_reloads() {
        let pd = Arc::new(MockPdClient::new(vec![mock::region(
            1,
            b"",
            b"",
            &[mock::voter(11, 1), mock::voter(12, 2)],
            Some(11),
        )]));
        pd.set_store_labels(1, &[("engine", "tiflash")]);
        pd.set_store_labels(2, &[("engine", "tiflash_compute")]);
        pd.set_dispatch_hook(accept);
        let result = get_with(
            &pd,
            Some(&routing()),
            tikv_plan::Backoff::no_backoff(),
            b"k",
        )
        .await;
        let error = result.unwrap_err();
        assert!(error.to_string().contains("not TiKV"), "{error}");
        assert_eq!(pd.dispatches(), 0);
        assert_eq!(pd.invalidate_store_cache_calls(), 0);
        assert_eq!(
            pd.invalidate_region_cache_calls(),
            1,
            "a peer list offering only TiFlash stores is reloaded"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn replica_reads_pick_tikv_learners_only() {
        // Leader 11@1, voter 12@2, TiKV learner 14@4, TiFlash learner 15@5.
        let pd = Arc::new(MockPdClient::new(vec![mock::region(
            1,
            b"",
            b"",
            &[
                mock::voter(11, 1),
                mock::voter(12, 2),
                mock::learner(14, 4),
                mock::learner(15, 5),
            ],
            Some(11),
        )]));
        pd.set_store_labels(5, &[("engine", "tiflash")]);
        pd.set_dispatch_hook(accept);
        let routing = routing();
        for kind in [ReplicaRead::Learner, ReplicaRead::Mixed] {
            for _ in 0..8 {
                PlanBuilder::new(
                    pd.clone(),
                    Keyspace::Disable,
                    new_raw_get_request(b"k".to_vec().into(), None),
                )
                .routing(routing.clone())
                .replica_read(kind)
                .retry_multi_region(backoff())
                .merge(CollectSingle)
                .post_process_default()
                .plan()
                .execute()
                .await
                .unwrap();
            }
        }
        assert_eq!(pd.dispatches_to_store(5), 0);
        assert_eq!(
            pd.map_calls_to_store(5),
            0,
            "known by its labels: not even mapped"
        );
        let learner_reads = pd.dispatch_log().iter().filter(|d| d.peer.id == 14).count();
        assert!(learner_reads >= 8, "{learner_reads}");
    }
}
