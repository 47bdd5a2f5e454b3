//! The simulated cluster and a client inside turmoil: PD and the stores are
//! hosts, the client dials them over turmoil's simulated network, and time
//! is virtual (a timeout of seconds costs no wall time).

use std::time::Duration;

use tikv_plan::__internals::with_transport;
use tikv_plan::{Config, RawClient};
use tikv_plan_chaos::dst::{host_cluster, store_host, transport};
use tikv_sim::{RegionLayout, SimCluster, SimPeer};

/// A millisecond each way on every link, so the assertions below can
/// count round trips.
fn simulation(seed: u64) -> turmoil::Sim<'static> {
    turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(120))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(1))
        .rng_seed(seed)
        .build()
}

/// One Region led from store 1, with voters on stores 2 and 3.
fn one_region() -> tikv_sim::SimClusterBuilder {
    SimCluster::builder().stores(3).region_layout(
        0,
        RegionLayout::new(vec![
            SimPeer::voter(1),
            SimPeer::voter(2),
            SimPeer::voter(3),
        ])
        .leader(1),
    )
}

#[test]
fn a_client_reads_its_writes_over_the_simulated_network() {
    let mut sim = simulation(1);
    let (_cluster, pd) = host_cluster(&mut sim, one_region()).unwrap();
    sim.client("client", async move {
        let client = with_transport(transport(), RawClient::new(pd)).await?;
        for i in 0..20u32 {
            client.put(format!("k{i}"), format!("v{i}")).await?;
        }
        for i in 0..20u32 {
            assert_eq!(
                client.get(format!("k{i}")).await?,
                Some(format!("v{i}").into_bytes())
            );
        }
        Ok(())
    });
    sim.run().unwrap();
}

/// The Region's leader moves to store 2 while PD still names store 1, and
/// the client is cut off from store 1 (its packets are lost, so a connect
/// would wait out its timeout): the read to store 1 gets its store probed
/// after `store_probe_after`, the probe fails after as long again, and the
/// read gives up and fails over to the voters (docs/routing.md, "Store
/// liveness"), well within the connect timeout; the next read goes
/// straight to the new leader.
#[test]
fn a_partition_from_the_stale_leader_fails_over_to_a_voter() {
    let mut sim = simulation(2);
    let (cluster, pd) = host_cluster(&mut sim, one_region()).unwrap();
    sim.client("client", async move {
        let connect_timeout = Duration::from_secs(2);
        let config = Config::default().with_connect_timeout(connect_timeout);
        let client = with_transport(transport(), RawClient::new_with_config(pd, config)).await?;
        client.put("k".to_owned(), "v".to_owned()).await?;

        let region = cluster.region_for_key(b"k").expect("a Region").id;
        cluster.transfer_leader(region, 2, false)?;
        turmoil::partition("client", store_host(1));

        let started = tokio::time::Instant::now();
        assert_eq!(client.get("k".to_owned()).await?, Some(b"v".to_vec()));
        let first = started.elapsed();
        let verdict = Config::default().store_probe_after * 2;
        assert!(
            first >= verdict && first < verdict + Duration::from_millis(100),
            "the failover took {first:?}: the liveness verdict ({verdict:?}) and a few round \
             trips expected, not the connect timeout ({connect_timeout:?})"
        );

        // The cache now routes to store 2 at once.
        let again = tokio::time::Instant::now();
        assert_eq!(client.get("k".to_owned()).await?, Some(b"v".to_vec()));
        assert!(
            again.elapsed() < Duration::from_millis(20),
            "the healed route took {:?}",
            again.elapsed()
        );
        Ok(())
    });
    sim.run().unwrap();
}

/// A store's packets silently stop on the client's idle, already-open
/// connections (held, not refused: nothing tells the client). The
/// connections' HTTP/2 keep-alive finds them dead (a PING after 10 s of
/// silence, unanswered for 3 s), and the next read goes straight to a
/// voter: no request timeout on the dead connection, no connect timeout
/// redialling the store. Without keep-alive on the unary channel the read
/// waited out the request timeout (2 s); with the batched transport, the
/// redial's connect timeout (1 s). In both transports.
#[test]
fn keepalive_finds_a_silent_store_and_the_next_read_goes_straight_to_a_voter() {
    for mode in [tikv_plan::RpcMode::Unary, tikv_plan::RpcMode::Batched] {
        let mut sim = simulation(3);
        let (cluster, pd) = host_cluster(&mut sim, one_region()).unwrap();
        sim.client("client", async move {
            let config = Config::default().with_rpc_mode(mode);
            let client =
                with_transport(transport(), RawClient::new_with_config(pd, config)).await?;
            client.put("k".to_owned(), "v".to_owned()).await?;
            let region = cluster.region_for_key(b"k").expect("a Region").id;
            // The leader moves to store 2; PD and the client still name 1.
            cluster.transfer_leader(region, 2, false)?;
            turmoil::hold("client", store_host(1));
            // Idle past one keep-alive interval and timeout.
            tokio::time::sleep(Duration::from_secs(15)).await;

            let started = tokio::time::Instant::now();
            assert_eq!(client.get("k".to_owned()).await?, Some(b"v".to_vec()));
            let took = started.elapsed();
            assert!(
                took < Duration::from_millis(100),
                "{mode:?}: the read after keep-alive found store 1 dead took {took:?}; \
                 a few round trips expected"
            );
            let stats = client.routing_stats();
            assert!(
                stats.stores_marked_unreachable >= 1,
                "{mode:?}: store 1 is marked unreachable: {stats:?}"
            );
            Ok(())
        });
        sim.run().unwrap();
    }
}
