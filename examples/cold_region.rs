//! The two cold-Region failure modes of routing.md, step by step, against
//! the in-process simulated cluster.
//!
//! 1. The cached leader's store is unreachable: the request fails to reach
//!    it and falls back to the Region's other voters, one at a time, as a
//!    leader request; the voter that accepts becomes the cached leader.
//! 2. The old leader is alive but rejects reads with
//!    `ServerIsBusy(estimated_wait_ms = 0)` before its leader check: after two
//!    such answers one followers-only probe finds the new leader.
//!
//! ```text
//! cargo run --example cold_region
//! ```

use std::error::Error;
use std::time::Duration;

use tikv_plan::{Config, RawClient};
use tikv_sim::{ColdMode, Outcome, SimCluster};

async fn cluster() -> Result<SimCluster, Box<dyn Error>> {
    Ok(SimCluster::builder().stores(3).replicas(3).start().await?)
}

fn config() -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(300))
}

fn describe(cluster: &SimCluster, region_id: u64) -> String {
    let truth = cluster
        .leader_of(region_id)
        .map(|p| format!("peer {} on store {}", p.id, p.store_id))
        .unwrap_or_else(|| "none (cold)".to_owned());
    let pd = cluster
        .pd_leader_of(region_id)
        .map(|p| format!("peer {} on store {}", p.id, p.store_id))
        .unwrap_or_else(|| "none".to_owned());
    format!("Raft leader: {truth}; PD says: {pd}")
}

async fn unreachable_leader() -> Result<(), Box<dyn Error>> {
    println!("== Failure mode 1: the cached leader's store is unreachable");
    let cluster = cluster().await?;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config()).await?;
    client.put("greeting", "hello").await?;
    let region = cluster.regions()[0].id;
    let old = cluster.leader_of(region).ok_or("no leader")?.store_id;
    println!("step 1: wrote 'greeting'. {}", describe(&cluster, region));

    cluster.make_cold(region, ColdMode::AcceptAtOnce)?;
    cluster.store_down_cold(old).await?;
    println!(
        "step 2: store {old} went down and the Region went cold. {}",
        describe(&cluster, region)
    );

    let value = client.get("greeting").await?;
    let stats = client.routing_stats();
    println!(
        "step 3: get('greeting') = {:?} after {} fallback attempt(s); {}",
        value.as_deref().map(String::from_utf8_lossy),
        stats.fallback_attempts,
        describe(&cluster, region)
    );

    client.get("greeting").await?;
    let again = client.routing_stats();
    println!(
        "step 4: the next get needed {} more fallback attempt(s): the leader cache healed for every later request",
        again.fallback_attempts - stats.fallback_attempts
    );
    Ok(())
}

async fn busy_old_leader() -> Result<(), Box<dyn Error>> {
    println!("== Failure mode 2: the old leader answers ServerIsBusy(0)");
    let cluster = cluster().await?;
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config()).await?;
    client.put("greeting", "hello").await?;
    let region = cluster.regions()[0].id;
    let old = cluster.leader_of(region).ok_or("no leader")?.store_id;
    cluster.make_cold(region, ColdMode::AcceptAtOnce)?;
    cluster.store_busy(old, Some(0));
    println!(
        "step 1: store {old} is up but rejects reads with ServerIsBusy(0) before its leader check. {}",
        describe(&cluster, region)
    );

    let value = client.get("greeting").await?;
    let busy = cluster
        .counters(old)
        .count("raw_get", Outcome::ServerIsBusy);
    let stats = client.routing_stats();
    println!(
        "step 2: get('greeting') = {:?}; the old leader answered busy {busy} time(s), then {} followers-only probe found the leader. {}",
        value.as_deref().map(String::from_utf8_lossy),
        stats.busy_probes,
        describe(&cluster, region)
    );
    let replica_reads: u64 = cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).replica_reads())
        .sum();
    println!("step 3: requests sent with replica_read set: {replica_reads} (the probe is a leader request)");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    unreachable_leader().await?;
    println!();
    busy_old_leader().await
}
