//! Store liveness against the simulator over real gRPC (docs/routing.md,
//! "Store liveness"): the store that led a Region hangs after its
//! leadership moved, PD still naming it; reads waiting on the hung store
//! give up once its probe fails and are answered by the new leader, on
//! both transports.

use std::time::Duration;

use tikv_plan::{Config, RawClient, RpcMode};
use tikv_sim::{HangMode, SimCluster};

#[tokio::test]
async fn reads_hung_on_a_store_that_lost_its_leadership_give_up_and_find_the_new_leader() {
    for mode in [RpcMode::Unary, RpcMode::Batched] {
        for hang in [HangMode::Connect, HangMode::Respond] {
            let cluster = SimCluster::builder()
                .stores(3)
                .replicas(3)
                .start()
                .await
                .unwrap();
            // The RPC timeout is far beyond the probe: a read that gave up
            // did so on the probe's verdict, not on its timeout.
            let config = Config::default()
                .with_timeout(Duration::from_secs(30))
                .with_request_deadline(Duration::from_secs(60))
                .with_connect_timeout(Duration::from_millis(200))
                .with_store_probe_after(Duration::from_millis(100))
                .with_rpc_mode(mode);
            let client = RawClient::new_with_config(cluster.pd_endpoints(), config)
                .await
                .unwrap();
            client.put("a".to_owned(), "1".to_owned()).await.unwrap();
            let region = cluster.region_for_key(b"a").unwrap();
            let old = cluster.leader_of(region.id).unwrap().store_id;
            let new = cluster.store_ids().into_iter().find(|s| *s != old).unwrap();
            cluster.transfer_leader(region.id, new, false).unwrap();
            cluster.store_hang(old, hang);

            let got = client.get("a".to_owned()).await.unwrap();
            assert_eq!(got.as_deref(), Some(&b"1"[..]), "{mode:?} {hang:?}");
            let stats = client.routing_stats();
            assert_eq!(stats.liveness_probes, 1, "{mode:?} {hang:?}: {stats:?}");
            assert_eq!(stats.rpcs_given_up, 1, "{mode:?} {hang:?}: {stats:?}");
            assert_eq!(stats.stores_marked_unreachable, 1, "{mode:?} {hang:?}");
            assert!(client.routing_stats().rpcs_in_flight == 0);
            cluster.store_unhang(old);
        }
    }
}
