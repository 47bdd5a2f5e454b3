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
/// waits out its timeout): the read fails over to the voters (leader
/// first, then voter fallback) at the cost of one connect timeout, and the
/// next read goes straight to the new leader.
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
        assert!(
            first >= connect_timeout && first < connect_timeout + Duration::from_millis(100),
            "the failover took {first:?}: one connect timeout and a few round trips expected"
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
