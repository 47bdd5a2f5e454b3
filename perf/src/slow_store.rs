//! Follower reads beside a slow store (`--only replicas` and
//! `--only slow-store`): gets at 64 tasks with `ReplicaRead::Follower`
//! while one follower's store adds 20 ms to every request, by two clients
//! side by side on one sim, rotated: one that heeds the stores' slow-store
//! feedback (the default) and one with `Config::slow_store_feedback` off.
//! Both run the batched transport, where TiKV sends the feedback. The sim's
//! `raftstore.inspect-interval` is set to 10 ms (TiKV's default is 100 ms,
//! under which a 20 ms slowdown never times an inspection out), so the slow
//! store's score doubles every 300 ms round, from 1 to 100 in about 2 s.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tikv_plan::{Config, RawClient, ReplicaRead, RpcMode};

use crate::sim::{Control, Sim};
use crate::stats::median;

/// Keys read (all in the one Region).
const KEYS: usize = 256;

/// The clients compared: the name, and whether the preference is on.
const CLIENTS: [(&str, bool); 2] = [
    ("slow-store feedback on (the default)", true),
    ("slow-store feedback off", false),
];

/// One window of one client.
#[derive(Debug, Clone)]
pub struct Cell {
    /// Reads completed per second.
    pub ops_per_sec: f64,
    /// Read latencies, sorted.
    pub latencies: Vec<Duration>,
    /// Of the reads, the share the slow store served.
    pub on_slow: f64,
}

fn key(i: usize) -> Vec<u8> {
    format!("!!s{i:05}").into_bytes()
}

/// `served_as_replica` of a store, from `counters STORE`.
async fn served(control: &mut Control, store: u64) -> Result<u64, String> {
    let lines = control.command(&format!("counters {store}")).await?;
    Ok(lines
        .iter()
        .filter_map(|l| l.strip_prefix("served_as_replica "))
        .filter_map(|n| n.trim().parse::<u64>().ok())
        .sum())
}

/// Runs the comparison: `rounds` rounds of one `window` per client.
pub async fn run(
    sim_binary: &std::path::Path,
    tasks: usize,
    rounds: usize,
    window: Duration,
    slow: Duration,
) -> Result<Vec<(&'static str, Vec<Cell>)>, String> {
    let sim = Sim::start(sim_binary, 1)?;
    let mut control = Control::connect(&sim.control).await?;
    let leader = control.first_leader_store().await?;
    let stores: Vec<u64> = control
        .stores()
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let slow_store = *stores
        .iter()
        .find(|s| **s != leader)
        .ok_or("no follower store")?;
    control.command("health-timing 10 1000").await?;
    let config = Config::default().with_rpc_mode(RpcMode::Batched);
    let mut readers = Vec::new();
    for (_, on) in CLIENTS {
        let client = RawClient::new_with_config(
            vec![sim.pd.clone()],
            config.clone().with_slow_store_feedback(on),
        )
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
        readers.push(client.with_replica_read(ReplicaRead::Follower));
    }
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..KEYS).map(|i| (key(i), vec![b'v'; 100])).collect();
    readers[0]
        .batch_put(pairs)
        .await
        .map_err(|e| format!("cannot load the keys: {e}"))?;
    control
        .command(&format!("slow {slow_store} {}", slow.as_millis()))
        .await?;
    // Until the client that heeds the feedback has heard the store call
    // itself slow (both clients keep reading it meanwhile).
    let heard = Instant::now();
    while readers[0].routing_stats().slow_stores == 0 {
        if heard.elapsed() > Duration::from_secs(60) {
            return Err("the slowed store never reported itself slow".to_owned());
        }
        for reader in &readers {
            reader
                .get(key(0))
                .await
                .map_err(|e| format!("warm-up read: {e}"))?;
        }
    }
    eprintln!(
        "slow store: store {slow_store} reported slow after {:.1} s ({:?})",
        heard.elapsed().as_secs_f64(),
        readers[0].store_slow_scores()
    );
    let mut results: Vec<(&'static str, Vec<Cell>)> = CLIENTS
        .iter()
        .map(|(name, _)| (*name, Vec::new()))
        .collect();
    for round in 0..rounds {
        // The order alternates from round to round.
        for slot in (0..readers.len()).map(|i| (i + round) % readers.len()) {
            let reader = &readers[slot];
            eprintln!("slow store: {}, round {}", CLIENTS[slot].0, round + 1);
            let before: u64 = served(&mut control, slow_store).await?;
            let mut all = Vec::new();
            for s in &stores {
                all.push(served(&mut control, *s).await?);
            }
            let stop = Arc::new(AtomicBool::new(false));
            let mut handles = Vec::new();
            for task in 0..tasks {
                let (reader, stop) = (reader.clone(), stop.clone());
                handles.push(tokio::spawn(async move {
                    let mut rng = fastrand::Rng::with_seed(task as u64);
                    let mut took = Vec::new();
                    while !stop.load(Ordering::Relaxed) {
                        let started = Instant::now();
                        if reader.get(key(rng.usize(0..KEYS))).await.is_ok() {
                            took.push(started.elapsed());
                        }
                    }
                    took
                }));
            }
            let started = Instant::now();
            tokio::time::sleep(window).await;
            stop.store(true, Ordering::Relaxed);
            let mut latencies = Vec::new();
            for h in handles {
                latencies.extend(h.await.unwrap_or_default());
            }
            let elapsed = started.elapsed().as_secs_f64();
            latencies.sort();
            let on_slow = served(&mut control, slow_store).await? - before;
            let mut total = 0;
            for (s, was) in stores.iter().zip(all) {
                total += served(&mut control, *s).await? - was;
            }
            results[slot].1.push(Cell {
                ops_per_sec: latencies.len() as f64 / elapsed,
                latencies,
                on_slow: on_slow as f64 / total.max(1) as f64,
            });
        }
    }
    Ok(results)
}

fn quantile(v: &[Duration], q: f64) -> f64 {
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
}

/// The table of [`run`]: per client, the medians over the rounds.
pub fn table(
    results: &[(&'static str, Vec<Cell>)],
    tasks: usize,
    window: Duration,
    slow: Duration,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Follower reads at {tasks} tasks while one follower's store adds {} ms to every request; {} ms per cell, the two clients rotated; medians over the rounds.\n",
        slow.as_millis(),
        window.as_millis()
    );
    let _ = writeln!(
        out,
        "| client | reads/s | p50 | p99 | p99.9 | reads on the slow store |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|");
    for (name, cells) in results {
        let med = |f: &dyn Fn(&Cell) -> f64| median(&cells.iter().map(f).collect::<Vec<_>>());
        let _ = writeln!(
            out,
            "| {name} | {:.0} | {:.2} ms | {:.2} ms | {:.2} ms | {:.1} % |",
            med(&|c| c.ops_per_sec),
            med(&|c| quantile(&c.latencies, 0.5)),
            med(&|c| quantile(&c.latencies, 0.99)),
            med(&|c| quantile(&c.latencies, 0.999)),
            med(&|c| c.on_slow * 100.0),
        );
    }
    out
}
