//! The main job: raw KV through leader loss.
//!
//! With no arguments it starts a simulated cluster in-process (3 stores,
//! 4 Regions, 3 voters each), writes and reads keys, then takes down the
//! store that leads a Region while PD keeps pointing at it (a cold Region:
//! its voters have no leader until a request wakes one), keeps reading and
//! writing through voter fallback, and prints what routing did.
//!
//! `--pd HOST:PORT` runs the reads and writes against a real cluster instead
//! (no fault is injected there).
//!
//! ```text
//! cargo run --example raw
//! cargo run --example raw -- --pd 127.0.0.1:2379
//! ```

use std::error::Error;
use std::time::{Duration, Instant};

use tikv_plan::{Backoff, Config, RawClient};
use tikv_sim::{ColdMode, SimCluster};

const KEYS: usize = 40;

fn key(i: usize) -> String {
    // Spread over the printable key space so every Region gets some.
    let first = (b'A' + (i * 57 / KEYS) as u8) as char;
    format!("{first}key{i:03}")
}

fn config() -> Config {
    Config::default()
        .with_timeout(Duration::from_millis(500))
        .with_connect_timeout(Duration::from_millis(300))
        .with_region_backoff(Backoff::no_jitter_backoff(2, 100, 10))
}

/// Writes `pairs`. A write is never sent twice once it may have reached a
/// store: when its outcome is undetermined (say, the store died with the
/// request on the wire), the keys are read back and only what is missing is
/// written again — the caller decides, knowing the state.
async fn put_all(client: &RawClient, pairs: &[(String, String)]) -> Result<(), Box<dyn Error>> {
    let mut todo = pairs.to_vec();
    for _ in 0..3 {
        let result = if todo.len() == 1 {
            client.put(todo[0].0.clone(), todo[0].1.clone()).await
        } else {
            client.batch_put(todo.clone()).await
        };
        match result {
            Ok(()) => return Ok(()),
            Err(e) if e.is_undetermined() => {
                let found = client
                    .batch_get(todo.iter().map(|(k, _)| k.clone()))
                    .await?;
                todo.retain(|(k, v)| {
                    !found.iter().any(|p| {
                        AsRef::<[u8]>::as_ref(p.key()) == k.as_bytes() && p.value() == v.as_bytes()
                    })
                });
                println!(
                    "  a write's outcome was undetermined ({e}); read back: {} of its keys still to write",
                    todo.len()
                );
                if todo.is_empty() {
                    return Ok(());
                }
            }
            Err(e) => return Err(e.into()),
        }
    }
    Err(format!("{} keys still unwritten after three tries", todo.len()).into())
}

async fn write_and_read(client: &RawClient, round: &str) -> Result<(), Box<dyn Error>> {
    let started = Instant::now();
    let pairs: Vec<(String, String)> = (0..KEYS)
        .map(|i| (key(i), format!("{round}-{i}")))
        .collect();
    put_all(client, &pairs).await?;
    for (k, v) in &pairs {
        let got = client.get(k.clone()).await?;
        if got.as_deref() != Some(v.as_bytes()) {
            return Err(format!("{k}: expected {v:?}, read {got:?}").into());
        }
        put_all(client, &[(k.clone(), format!("{v}-again"))]).await?;
    }
    let scanned = client.scan(.., KEYS as u32 * 2).await?;
    if scanned.len() != KEYS {
        return Err(format!("scan returned {} keys, expected {KEYS}", scanned.len()).into());
    }
    println!(
        "  {round}: batch_put {KEYS} keys, {KEYS} gets, {KEYS} puts, one scan of {} keys: all correct in {:?}",
        scanned.len(),
        started.elapsed()
    );
    Ok(())
}

fn print_stats(client: &RawClient) {
    let s = client.routing_stats();
    println!(
        "  routing stats: fallback attempts {}, fallback successes {}, busy probes {}, region invalidations {}, store invalidations {}, connect timeouts {}, stores marked unreachable {}, undetermined writes {}",
        s.fallback_attempts,
        s.fallback_successes,
        s.busy_probes,
        s.region_invalidations,
        s.store_invalidations,
        s.connect_timeouts,
        s.stores_marked_unreachable,
        s.undetermined_writes
    );
}

async fn against_real_cluster(pd: String) -> Result<(), Box<dyn Error>> {
    println!("Connecting to PD at {pd}");
    let client = RawClient::new_with_config(vec![pd], config()).await?;
    write_and_read(&client, "real").await?;
    print_stats(&client);
    Ok(())
}

async fn against_simulated_cluster() -> Result<(), Box<dyn Error>> {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(vec![b"M".to_vec(), b"Z".to_vec(), b"g".to_vec()])
        .replicas(3)
        .start()
        .await?;
    println!(
        "Simulated cluster: PD at {}, stores {:?}",
        cluster.pd_addr(),
        cluster.store_ids()
    );
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config()).await?;

    println!("1. Healthy cluster");
    write_and_read(&client, "healthy").await?;
    print_stats(&client);

    let victim = cluster
        .leader_of(cluster.regions()[0].id)
        .ok_or("the first Region has no leader")?
        .store_id;
    let mut cold = Vec::new();
    for region in cluster.regions() {
        if cluster.leader_of(region.id).map(|p| p.store_id) == Some(victim) {
            cluster.make_cold(region.id, ColdMode::NotLeaderFirst)?;
            cold.push(region.id);
        }
    }
    cluster.store_down_cold(victim).await?;
    println!(
        "2. Store {victim} is down; Regions {cold:?} lost their leader, and PD still names a peer on store {victim} as their leader"
    );
    write_and_read(&client, "leader-lost").await?;
    print_stats(&client);
    for id in &cold {
        let leader = cluster.leader_of(*id).map(|p| p.store_id);
        println!("  Region {id}: new leader on store {leader:?} (PD still says store {victim})");
    }

    let before = client.routing_stats();
    println!("3. Again, with the healed leader cache");
    write_and_read(&client, "healed").await?;
    print_stats(&client);
    let after = client.routing_stats();
    println!(
        "  fallback attempts during step 3: {} (the cache sends requests straight to the new leaders)",
        after.fallback_attempts - before.fallback_attempts
    );
    let replica_reads: u64 = cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).replica_reads())
        .sum();
    println!("  follower reads served by any store: {replica_reads} (every request stayed a leader request)");
    if after.fallback_successes == 0 {
        return Err("expected at least one fallback success".into());
    }
    cluster.shutdown().await;
    println!("Done.");
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    match (args.next().as_deref(), args.next()) {
        (None, _) => against_simulated_cluster().await,
        (Some("--pd"), Some(pd)) => against_real_cluster(pd).await,
        _ => Err("usage: raw [--pd HOST:PORT]".into()),
    }
}
