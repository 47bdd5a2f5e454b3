//! Prometheus metrics of a client going through leader loss, served on
//! `/metrics`.
//!
//! Starts the simulated cluster in-process (3 stores, 2 Regions, 3 voters
//! each), writes and reads keys, takes down the store that leads the first
//! Region (which goes cold: its voters have no leader until a request wakes
//! one), reads again through voter fallback, then serves the metrics on
//! 127.0.0.1 until Ctrl-C (or, with `--once`, prints them and exits).
//!
//! ```text
//! cargo run --features prometheus --example metrics
//! curl http://127.0.0.1:9185/metrics
//! cargo run --features prometheus --example metrics -- --once
//! ```

use std::error::Error;
use std::time::Duration;

use tikv_plan::{Config, RawClient};
use tikv_sim::{ColdMode, SimCluster};

const KEYS: usize = 20;

fn key(i: usize) -> String {
    // Half the keys below the split key "M", half above.
    let first = if i.is_multiple_of(2) { 'A' } else { 'T' };
    format!("{first}key{i:02}")
}

async fn traffic(client: &RawClient, round: &str) -> Result<(), Box<dyn Error>> {
    for i in 0..KEYS {
        client.put(key(i), format!("{round}-{i}")).await?;
    }
    for i in 0..KEYS {
        let got = client.get(key(i)).await?;
        if got.as_deref() != Some(format!("{round}-{i}").as_bytes()) {
            return Err(format!("{}: read {got:?}", key(i)).into());
        }
    }
    let all = client.scan(.., KEYS as u32 * 2).await?;
    if all.len() != KEYS {
        return Err(format!("scan found {} keys, expected {KEYS}", all.len()).into());
    }
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let once = std::env::args().any(|a| a == "--once");
    tikv_plan::metrics::register();
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"M".to_vec()])
        .replicas(3)
        .start()
        .await?;
    let config = Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(300));
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config).await?;

    traffic(&client, "healthy").await?;
    println!("1. healthy cluster: {KEYS} puts, {KEYS} gets, one scan");

    let region = cluster.regions()[0].id;
    let victim = cluster
        .leader_of(region)
        .ok_or("the first Region has no leader")?
        .store_id;
    cluster.make_cold(region, ColdMode::AcceptAtOnce)?;
    cluster.store_down_cold(victim).await?;
    traffic(&client, "leader-lost").await?;
    let stats = client.routing_stats();
    println!(
        "2. store {victim} (leader of Region {region}) is down: the same traffic went through voter fallback ({} fallback attempts, {} successes)",
        stats.fallback_attempts, stats.fallback_successes
    );

    if once {
        print!("{}", tikv_plan::metrics::render());
        cluster.shutdown().await;
        return Ok(());
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:9185").await?;
    println!(
        "3. serving http://{}/metrics (Ctrl-C to stop)",
        listener.local_addr()?
    );
    // Serves until the process is stopped; the cluster lives as long.
    tikv_plan::metrics::serve(listener).await;
    cluster.shutdown().await;
    Ok(())
}
