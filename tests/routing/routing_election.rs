//! A store crashes and its Regions elect new leaders (tikv-sim's
//! elections, drawn as raft-rs draws them): every call in the window ends
//! within its deadline, succeeding or with a retryable error, the client's
//! load on PD stays bounded, and once the leaders are elected every call
//! succeeds again. On tokio's paused clock.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tikv_plan::{Config, Failure, RawClient};
use tikv_sim::{RaftTiming, SimCluster};
use tokio::time::Instant;

/// Elections 1 to 2 s after a leader dies.
fn timing() -> RaftTiming {
    RaftTiming::scaled(Duration::from_millis(100))
}

const DEADLINE: Duration = Duration::from_millis(400);

fn key(i: usize) -> Vec<u8> {
    format!("k{i:02}").into_bytes()
}

/// PD calls that load Regions.
fn region_loads(calls: &BTreeMap<String, u64>) -> u64 {
    [
        "GetRegion",
        "GetRegionByID",
        "ScanRegions",
        "BatchScanRegions",
    ]
    .iter()
    .map(|m| calls.get(*m).copied().unwrap_or(0))
    .sum()
}

/// A 3-store cluster of `regions` Regions electing on `raft`, and a raw
/// client of `config` (with 200 ms RPC and 100 ms connect bounds) that has
/// written "0" to each Region's key.
async fn loaded_cluster(
    regions: usize,
    raft: RaftTiming,
    config: Config,
) -> (Arc<SimCluster>, RawClient) {
    let cluster = Arc::new(
        SimCluster::builder()
            .stores(3)
            .replicas(3)
            .split_keys((1..regions).map(key).collect())
            .raft_timing(raft)
            .start()
            .await
            .unwrap(),
    );
    let config = config
        .with_timeout(Duration::from_millis(200))
        .with_connect_timeout(Duration::from_millis(100));
    let client = RawClient::new_with_config(cluster.pd_endpoints(), config)
        .await
        .unwrap();
    for i in 0..regions {
        client.put(key(i), b"0".to_vec()).await.unwrap();
    }
    (cluster, client)
}

#[tokio::test(start_paused = true)]
async fn calls_in_an_election_window_end_in_their_deadline_and_pd_load_stays_bounded() {
    let regions = 20;
    let config = Config::default().with_request_deadline(DEADLINE);
    let (cluster, client) = loaded_cluster(regions, timing(), config).await;
    let dead = 1;
    let led: Vec<u64> = cluster
        .regions()
        .iter()
        .filter(|r| cluster.leader_of(r.id).unwrap().store_id == dead)
        .map(|r| r.id)
        .collect();
    assert!(led.len() >= 4, "store {dead} leads {} Regions", led.len());

    // PD answers a Region load in 5 ms, so loads of one Region can overlap
    // if the client lets them.
    cluster.set_pd_region_load_delay(Duration::from_millis(5));
    cluster.reset_counters();
    let crashed = Instant::now();
    cluster.store_down(dead).await;
    let window = timing().election_timeout() * 2;
    let mut tasks = Vec::new();
    for t in 0..16 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            // (how long the call took, whether it succeeded)
            let mut calls = Vec::new();
            let mut i = t;
            while crashed.elapsed() < window + Duration::from_millis(500) {
                let k = key(i % regions);
                let began = Instant::now();
                let result = if i % 2 == 0 {
                    client.get(k).await.map(|_| ())
                } else {
                    client.put(k, b"1".to_vec()).await
                };
                let took = began.elapsed();
                if let Err(e) = &result {
                    // A failure in the window is one the caller may
                    // retry: out of time, never a wrong answer.
                    let retryable = matches!(
                        e.failure(),
                        Some(
                            Failure::DeadlineExceeded { .. }
                                | Failure::RetriesExhausted { .. }
                                | Failure::Undetermined { .. }
                        )
                    );
                    assert!(retryable, "{e}");
                }
                calls.push((began - crashed, took, result.is_ok()));
                i += 7;
                // A paced workload: on the paused clock a call served at
                // once takes no time, and time moves only when every task
                // waits.
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            calls
        }));
    }
    let mut calls = Vec::new();
    for t in tasks {
        calls.extend(t.await.unwrap());
    }
    let calls_to_pd = cluster.pd_calls();
    assert!(cluster.regions_electing().is_empty(), "all elected");

    // Every call ended within its deadline (and a little scheduling).
    let slowest = calls.iter().map(|c| c.1).max().unwrap();
    assert!(
        slowest <= DEADLINE + Duration::from_millis(20),
        "{slowest:?}"
    );
    // After the last election, every call succeeded.
    let elected_by = timing().election_timeout() * 2;
    let late: Vec<_> = calls.iter().filter(|c| c.0 > elected_by).collect();
    assert!(!late.is_empty());
    assert!(
        late.iter().all(|c| c.2),
        "a call after the elections failed"
    );
    // Some calls failed in the window: the dead store's Regions had no
    // leader to serve them.
    assert!(calls.iter().any(|c| !c.2));

    // PD: never two loads of one Region at once (single flight), and at
    // most one load per Region per 10 ms of the window while 16 tasks
    // hammered the leaderless Regions.
    assert_eq!(cluster.pd_most_region_loads_at_once(), 1);
    let loads = region_loads(&calls_to_pd);
    let window_ms = u64::try_from(crashed.elapsed().as_millis()).unwrap();
    let bound = led.len() as u64 * window_ms / 10;
    assert!(
        loads <= bound,
        "{loads} Region loads in {window_ms} ms for {} Regions (bound {bound}): {calls_to_pd:?}",
        led.len()
    );
    eprintln!(
        "election window: {} calls, {} failed, {loads} Region loads from PD in {window_ms} ms ({:?})",
        calls.len(),
        calls.iter().filter(|c| !c.2).count(),
        calls_to_pd
    );
    cluster.shutdown().await;
}

/// Elections 2 to 4 s after a leader dies: the first always comes later
/// than client-rust's Region backoff (about 1.5 s of sleeps) gives up.
fn slow_timing() -> RaftTiming {
    RaftTiming::scaled(Duration::from_millis(200))
}

/// Crashes store 1 while 8 tasks read every key, round and round, with a
/// deadline longer than any election (5 s against 2E = 4 s) and the
/// election wait `wait`. The reads that succeeded, the failures, and the
/// longest read.
async fn reads_through_a_crash(wait: Duration) -> (usize, Vec<(bool, String)>, Duration) {
    let regions = 12;
    let config = Config::default()
        .with_request_deadline(Duration::from_secs(5))
        .with_leaderless_wait(wait);
    let (cluster, client) = loaded_cluster(regions, slow_timing(), config).await;
    let crashed = Instant::now();
    cluster.store_down(1).await;
    let window = slow_timing().election_timeout() * 2 + Duration::from_millis(500);
    let mut tasks = Vec::new();
    for t in 0..8 {
        let client = client.clone();
        tasks.push(tokio::spawn(async move {
            let (mut ok, mut failed, mut longest) = (0, Vec::new(), Duration::ZERO);
            let mut i = t;
            while crashed.elapsed() < window {
                let began = Instant::now();
                match client.get(key(i % regions)).await {
                    Ok(found) => {
                        assert_eq!(found.as_deref(), Some(&b"0"[..]));
                        ok += 1;
                    }
                    Err(e) => {
                        let gave_up = matches!(e.failure(), Some(Failure::RetriesExhausted { .. }));
                        failed.push((gave_up, e.to_string()));
                    }
                }
                longest = longest.max(began.elapsed());
                i += 5;
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            (ok, failed, longest)
        }));
    }
    let (mut ok, mut failed, mut longest) = (0, Vec::new(), Duration::ZERO);
    for t in tasks {
        let (o, f, l) = t.await.unwrap();
        ok += o;
        failed.extend(f);
        longest = longest.max(l);
    }
    assert!(cluster.regions_electing().is_empty(), "all elected");
    cluster.shutdown().await;
    (ok, failed, longest)
}

#[tokio::test(start_paused = true)]
async fn with_the_default_wait_reads_ride_out_an_election_and_without_it_they_fail() {
    let (ok, failed, longest) = reads_through_a_crash(Config::default().leaderless_wait).await;
    assert!(
        failed.is_empty(),
        "{} of {} reads failed: {:?}",
        failed.len(),
        ok + failed.len(),
        &failed[..failed.len().min(3)]
    );
    // Some read waited through an election (2 to 4 s), within its deadline.
    assert!(
        longest >= slow_timing().election_timeout() - Duration::from_millis(400),
        "{longest:?}"
    );
    assert!(longest < Duration::from_secs(5), "{longest:?}");

    // client-rust's rule: every leaderless round spends the Region backoff
    // (about 1.5 s of sleeps), shorter than the window.
    let (ok, failed, longest) = reads_through_a_crash(Duration::ZERO).await;
    assert!(
        !failed.is_empty(),
        "no read gave up without the election wait: {ok} reads, longest {longest:?}"
    );
    // Each gave up with its budget spent, a retryable error.
    assert!(failed.iter().all(|(gave_up, _)| *gave_up), "{failed:?}");
    eprintln!(
        "without the wait: {} of {} reads failed, e.g. {}",
        failed.len(),
        ok + failed.len(),
        failed[0].1
    );
}
