//! Reads that leave the leader (`--only replicas`): gets at 64 tasks with
//! every read on the leader, a follower first, or any replica first, side
//! by side on one sim (one Region on three stores), with each store's
//! share of the reads from the sim's counters; then the latency of a
//! stale read (a follower, 1 s back) against a leader read while the
//! leader's store is slowed.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tikv_plan::{
    CheckLevel, Config, RawClient, ReplicaRead, Timestamp, TransactionClient, TransactionOptions,
};

use crate::sim::{Control, Sim};
use crate::stats::median;

/// The replica choices compared.
const MODES: [(ReplicaRead, &str); 3] = [
    (ReplicaRead::Leader, "leader only"),
    (ReplicaRead::Follower, "follower first"),
    (ReplicaRead::Mixed, "any replica first"),
];

/// Keys read (all in the one Region).
const KEYS: usize = 256;

/// One round of one mode.
#[derive(Debug, Clone)]
pub struct Spread {
    /// Reads completed per second.
    pub ops_per_sec: f64,
    /// Reads each store served (`raw_get` answered), by store id.
    pub by_store: Vec<(u64, u64)>,
    /// The leader's store.
    pub leader: u64,
}

fn key(i: usize) -> Vec<u8> {
    format!("!!r{i:05}").into_bytes()
}

/// `raw_get` requests a store answered, from `counters STORE`.
async fn gets(control: &mut Control, store: u64) -> Result<u64, String> {
    let lines = control.command(&format!("counters {store}")).await?;
    Ok(lines
        .iter()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            match (w.next(), w.next(), w.next()) {
                (Some("raw_get"), Some("ok"), Some(n)) => n.parse::<u64>().ok(),
                _ => None,
            }
        })
        .sum())
}

/// Reads at `tasks` tasks for `window` per mode, `rounds` times in
/// rotation, on one sim.
pub async fn spread(
    sim_binary: &std::path::Path,
    tasks: usize,
    rounds: usize,
    window: Duration,
) -> Result<Vec<(&'static str, Vec<Spread>)>, String> {
    let sim = Sim::start(sim_binary, 1)?;
    let mut control = Control::connect(&sim.control).await?;
    let leader = control.first_leader_store().await?;
    let stores: Vec<u64> = control
        .stores()
        .await?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let client = RawClient::new_with_config(vec![sim.pd.clone()], Config::default())
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let pairs: Vec<(Vec<u8>, Vec<u8>)> = (0..KEYS).map(|i| (key(i), vec![b'v'; 100])).collect();
    client
        .batch_put(pairs)
        .await
        .map_err(|e| format!("cannot load the keys: {e}"))?;
    let mut results: Vec<(&'static str, Vec<Spread>)> =
        MODES.iter().map(|(_, name)| (*name, Vec::new())).collect();
    for round in 0..rounds {
        for (slot, (mode, name)) in MODES.iter().enumerate() {
            eprintln!("replica reads: {name}, round {}", round + 1);
            let reader = client.with_replica_read(*mode);
            // Warm: every store's connection and labels cached.
            for i in 0..16 {
                reader
                    .get(key(i))
                    .await
                    .map_err(|e| format!("warm-up read: {e}"))?;
            }
            control.command("reset-counters").await?;
            let done = Arc::new(AtomicU64::new(0));
            let stop = Arc::new(AtomicBool::new(false));
            let mut handles = Vec::new();
            for task in 0..tasks {
                let (reader, done, stop) = (reader.clone(), done.clone(), stop.clone());
                handles.push(tokio::spawn(async move {
                    let mut rng = fastrand::Rng::with_seed(task as u64);
                    while !stop.load(Ordering::Relaxed) {
                        if reader.get(key(rng.usize(0..KEYS))).await.is_ok() {
                            done.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                }));
            }
            let started = Instant::now();
            tokio::time::sleep(window).await;
            stop.store(true, Ordering::Relaxed);
            for h in handles {
                let _ = h.await;
            }
            let took = started.elapsed().as_secs_f64();
            let mut by_store = Vec::new();
            for &s in &stores {
                by_store.push((s, gets(&mut control, s).await?));
            }
            results[slot].1.push(Spread {
                ops_per_sec: done.load(Ordering::Relaxed) as f64 / took,
                by_store,
                leader,
            });
        }
    }
    Ok(results)
}

/// The table of [`spread`]: per mode, median reads/s, the leader store's
/// share of the reads, each store's reads (median), and the throughput as
/// a ratio of leader-only reads.
pub fn spread_table(
    results: &[(&'static str, Vec<Spread>)],
    tasks: usize,
    window: Duration,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Replica reads: gets at {tasks} tasks, {} ms per cell, one Region on three stores (store {} leads); rounds rotate the modes.\n",
        window.as_millis(),
        results
            .first()
            .and_then(|(_, r)| r.first())
            .map_or(0, |s| s.leader)
    );
    let _ = writeln!(out, "| reads | reads/s (median) | served by the leader's store | per store (median) | throughput vs leader only |");
    let _ = writeln!(out, "|---|---|---|---|---|");
    let base = results
        .first()
        .map(|(_, r)| median(&r.iter().map(|s| s.ops_per_sec).collect::<Vec<_>>()))
        .unwrap_or(1.0);
    for (name, rounds) in results {
        let ops = median(&rounds.iter().map(|s| s.ops_per_sec).collect::<Vec<_>>());
        let Some(first) = rounds.first() else {
            continue;
        };
        let per_store: Vec<String> = first
            .by_store
            .iter()
            .map(|(store, _)| {
                let n = median(
                    &rounds
                        .iter()
                        .filter_map(|r| r.by_store.iter().find(|(s, _)| s == store))
                        .map(|(_, n)| *n as f64)
                        .collect::<Vec<_>>(),
                );
                format!("store {store}: {n:.0}")
            })
            .collect();
        let share = median(
            &rounds
                .iter()
                .map(|r| {
                    let total: u64 = r.by_store.iter().map(|(_, n)| n).sum();
                    let led: u64 = r
                        .by_store
                        .iter()
                        .filter(|(s, _)| *s == r.leader)
                        .map(|(_, n)| *n)
                        .sum();
                    led as f64 / total.max(1) as f64
                })
                .collect::<Vec<_>>(),
        );
        let _ = writeln!(
            out,
            "| {name} | {ops:.0} | {:.1} % | {} | {:.2} |",
            share * 100.0,
            per_store.join(", "),
            ops / base
        );
    }
    out
}

/// Latencies (sorted) of `reads` sequential snapshot reads of one key on
/// the leader and as stale reads 1 s back from a follower, while the
/// leader's store adds `slow`.
pub async fn stale_latency(
    sim_binary: &std::path::Path,
    reads: usize,
    slow: Duration,
) -> Result<(Vec<Duration>, Vec<Duration>), String> {
    let sim = Sim::start(sim_binary, 1)?;
    let mut control = Control::connect(&sim.control).await?;
    let leader = control.first_leader_store().await?;
    control.command("resolved-ts-interval 100").await?;
    let client = TransactionClient::new_with_config(vec![sim.pd.clone()], Config::default())
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let options = TransactionOptions::new_optimistic().drop_check(CheckLevel::Warn);
    let mut txn = client
        .begin_with_options(options.clone())
        .await
        .map_err(|e| format!("begin: {e}"))?;
    txn.put(b"!!stale".to_vec(), b"v".to_vec())
        .await
        .map_err(|e| format!("put: {e}"))?;
    txn.commit().await.map_err(|e| format!("commit: {e}"))?;
    // The write is more than the staleness old before the first read.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    control
        .command(&format!("slow {leader} {}", slow.as_millis()))
        .await?;
    let (mut on_leader, mut stale) = (Vec::new(), Vec::new());
    for _ in 0..reads {
        let now = client
            .current_timestamp()
            .await
            .map_err(|e| format!("timestamp: {e}"))?;
        let back = Timestamp {
            physical: now.physical - 1000,
            logical: 0,
            ..now
        };
        let mut leader_read = client.snapshot(now, options.clone());
        let started = Instant::now();
        leader_read
            .get(b"!!stale".to_vec())
            .await
            .map_err(|e| format!("leader read: {e}"))?;
        on_leader.push(started.elapsed());
        let stale_options = options
            .clone()
            .stale_read()
            .replica_read(ReplicaRead::Follower);
        let mut stale_read = client.snapshot(back, stale_options);
        let started = Instant::now();
        stale_read
            .get(b"!!stale".to_vec())
            .await
            .map_err(|e| format!("stale read: {e}"))?;
        stale.push(started.elapsed());
    }
    let stats = client.routing_stats();
    if stats.replica_fallbacks > 0 {
        eprintln!(
            "stale reads: {} of {} went to the leader",
            stats.replica_fallbacks, stats.replica_reads
        );
    }
    on_leader.sort();
    stale.sort();
    Ok((on_leader, stale))
}

/// The table of [`stale_latency`].
pub fn stale_table(on_leader: &[Duration], stale: &[Duration], slow: Duration) -> String {
    let pick = |v: &[Duration], q: f64| -> f64 {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e3)
    };
    let mut out = String::new();
    let _ = writeln!(
        out,
        "Stale reads while the leader's store adds {} ms to every request ({} sequential reads of each; a fresh snapshot read on the leader vs a stale read 1 s back, follower first):\n",
        slow.as_millis(),
        on_leader.len()
    );
    let _ = writeln!(out, "| read | p50 | p99 |");
    let _ = writeln!(out, "|---|---|---|");
    for (name, v) in [
        ("leader, fresh snapshot", on_leader),
        ("stale, 1 s back", stale),
    ] {
        let _ = writeln!(
            out,
            "| {name} | {:.2} ms | {:.2} ms |",
            pick(v, 0.5),
            pick(v, 0.99)
        );
    }
    let _ = writeln!(
        out,
        "\nStale p50 as a fraction of the leader's: {:.3}",
        pick(stale, 0.5) / pick(on_leader, 0.5).max(f64::MIN_POSITIVE)
    );
    out
}
