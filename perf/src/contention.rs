//! Contention between pessimistic transactions, on a sim that holds lock
//! requests as TiKV does (lock waiting, deadlock detection): tikv-plan and
//! tikv-client 0.4.0 side by side.
//!
//! - Deadlock trials: two transactions lock `a` and `z`, then each asks
//!   for the other's key. Measured from the second request: the time to
//!   its answer (a deadlock error, for a client that reports it) and to the
//!   other transaction's commit, after the loser rolled back.
//! - Hot rows: 64 tasks increment counters in pessimistic transactions
//!   (`get_for_update`, `put`, commit), over one counter and over 16:
//!   committed increments per second and the latency of committed
//!   transactions; at the end the counters must sum to the committed
//!   increments (no lost or double increment).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clients::Kind;

/// One deadlock trial's figures.
#[derive(Debug, Clone)]
pub struct DeadlockTrial {
    /// From the second lock request to its answer.
    pub answered: Duration,
    /// Whether that answer was a deadlock error.
    pub deadlock: bool,
    /// From the second lock request to the other transaction's commit, or
    /// why the other transaction failed.
    pub other_committed: Result<Duration, String>,
}

/// One hot-row run's figures.
#[derive(Debug, Clone, Default)]
pub struct HotRun {
    /// Committed increments.
    pub committed: u64,
    /// Transactions that failed (rolled back).
    pub failed: u64,
    /// Commits whose outcome is unknown (tikv-plan's undetermined error).
    pub undetermined: u64,
    /// Wall time of the run.
    pub wall: Duration,
    /// Latencies of committed transactions.
    pub latencies: Vec<Duration>,
    /// The counters' sum at the end.
    pub final_sum: u64,
    /// The first failure, if any.
    pub first_error: Option<String>,
}

impl HotRun {
    /// Committed increments per second.
    pub fn rate(&self) -> f64 {
        self.committed as f64 / self.wall.as_secs_f64().max(1e-9)
    }

    /// The `p`-th percentile of committed transactions' latency.
    pub fn percentile(&self, p: f64) -> Duration {
        let mut sorted = self.latencies.clone();
        sorted.sort();
        if sorted.is_empty() {
            return Duration::ZERO;
        }
        let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
        sorted[i.min(sorted.len() - 1)]
    }

    /// The counters hold exactly the committed increments (within the
    /// undetermined ones, which may or may not have landed).
    pub fn consistent(&self) -> bool {
        self.final_sum >= self.committed && self.final_sum <= self.committed + self.undetermined
    }
}

/// The counter keys of one run.
fn counter_keys(tag: &str, counters: usize) -> Vec<Vec<u8>> {
    (0..counters)
        .map(|i| format!("hot/{tag}/{i:02}").into_bytes())
        .collect()
}

fn decode(value: Option<Vec<u8>>) -> u64 {
    value
        .and_then(|v| String::from_utf8(v).ok())
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// The deadlock trial and the hot-row run, written once for both crates,
/// whose transactional APIs match.
macro_rules! contention_runner {
    ($deadlock:ident, $hot:ident, $krate:ident, $undetermined:expr) => {
        pub async fn $deadlock(
            client: &$krate::TransactionClient,
            trial: usize,
        ) -> Result<DeadlockTrial, String> {
            let text = |e: $krate::Error| e.to_string();
            let a = format!("deadlock/{trial:04}/a").into_bytes();
            let z = format!("deadlock/{trial:04}/z").into_bytes();
            let mut t1 = client.begin_pessimistic().await.map_err(text)?;
            let mut t2 = client.begin_pessimistic().await.map_err(text)?;
            t1.lock_keys(vec![a.clone()]).await.map_err(text)?;
            t2.lock_keys(vec![z.clone()]).await.map_err(text)?;
            let (t1_z, t1_a) = (z.clone(), a.clone());
            let first = tokio::spawn(async move {
                let body = async {
                    t1.lock_keys(vec![t1_z]).await?;
                    t1.put(t1_a, b"t1".to_vec()).await?;
                    t1.commit().await?;
                    Ok::<_, $krate::Error>(())
                }
                .await;
                if body.is_err() {
                    let _ = t1.rollback().await;
                }
                (body.map_err(|e| e.to_string()), Instant::now())
            });
            // t1's request reaches the server and waits there by then.
            tokio::time::sleep(Duration::from_millis(100)).await;
            let asked = Instant::now();
            let second = t2.lock_keys(vec![a]).await;
            let answered = asked.elapsed();
            let deadlock = match &second {
                Ok(()) => false,
                Err(e) => e.to_string().to_lowercase().contains("deadlock"),
            };
            let _ = t2.rollback().await;
            let (first, committed_at) = first.await.map_err(|e| e.to_string())?;
            Ok(DeadlockTrial {
                answered,
                deadlock,
                other_committed: first.map(|()| committed_at.saturating_duration_since(asked)),
            })
        }

        pub async fn $hot(
            client: &$krate::TransactionClient,
            tag: &str,
            counters: usize,
            tasks: usize,
            window: Duration,
        ) -> Result<HotRun, String> {
            let keys = Arc::new(counter_keys(tag, counters));
            let committed = Arc::new(AtomicU64::new(0));
            let failed = Arc::new(AtomicU64::new(0));
            let undetermined = Arc::new(AtomicU64::new(0));
            let latencies = Arc::new(Mutex::new(Vec::new()));
            let first_error = Arc::new(Mutex::new(None::<String>));
            let started = Instant::now();
            let stop_at = started + window;
            let mut running = Vec::new();
            for task in 0..tasks {
                let client = client.clone();
                let keys = Arc::clone(&keys);
                let (committed, failed, undetermined) = (
                    Arc::clone(&committed),
                    Arc::clone(&failed),
                    Arc::clone(&undetermined),
                );
                let (latencies, first_error) = (Arc::clone(&latencies), Arc::clone(&first_error));
                running.push(tokio::spawn(async move {
                    let mut rng = fastrand::Rng::with_seed(task as u64 + 1);
                    while Instant::now() < stop_at {
                        let key = keys[rng.usize(..keys.len())].clone();
                        let begun = Instant::now();
                        let mut txn = match client.begin_pessimistic().await {
                            Ok(txn) => txn,
                            Err(e) => {
                                failed.fetch_add(1, Ordering::Relaxed);
                                first_error.lock().unwrap().get_or_insert(e.to_string());
                                continue;
                            }
                        };
                        let body = async {
                            let value = decode(txn.get_for_update(key.clone()).await?);
                            txn.put(key.clone(), (value + 1).to_string().into_bytes())
                                .await?;
                            Ok::<_, $krate::Error>(())
                        }
                        .await;
                        if let Err(e) = body {
                            let _ = txn.rollback().await;
                            failed.fetch_add(1, Ordering::Relaxed);
                            first_error.lock().unwrap().get_or_insert(e.to_string());
                            continue;
                        }
                        match txn.commit().await {
                            Ok(_) => {
                                committed.fetch_add(1, Ordering::Relaxed);
                                latencies.lock().unwrap().push(begun.elapsed());
                            }
                            Err(e) => {
                                if ($undetermined)(&e) {
                                    undetermined.fetch_add(1, Ordering::Relaxed);
                                } else {
                                    failed.fetch_add(1, Ordering::Relaxed);
                                }
                                first_error.lock().unwrap().get_or_insert(e.to_string());
                            }
                        }
                    }
                }));
            }
            for task in running {
                task.await.map_err(|e| e.to_string())?;
            }
            let wall = started.elapsed();
            let ts = client
                .current_timestamp()
                .await
                .map_err(|e| e.to_string())?;
            let mut snapshot = client.snapshot(ts, $krate::TransactionOptions::new_optimistic());
            let mut final_sum = 0;
            for key in keys.iter() {
                final_sum += decode(snapshot.get(key.clone()).await.map_err(|e| e.to_string())?);
            }
            let latencies = latencies.lock().unwrap().clone();
            let first_error = first_error.lock().unwrap().clone();
            Ok(HotRun {
                committed: committed.load(Ordering::Relaxed),
                failed: failed.load(Ordering::Relaxed),
                undetermined: undetermined.load(Ordering::Relaxed),
                wall,
                latencies,
                final_sum,
                first_error,
            })
        }
    };
}

contention_runner!(
    plan_deadlock,
    plan_hot,
    tikv_plan,
    |e: &tikv_plan::Error| e.undetermined_anywhere()
);
contention_runner!(
    upstream_deadlock,
    upstream_hot,
    tikv_client,
    |_: &tikv_client::Error| false
);

/// Runs the deadlock trials and the hot-row runs for each client on one
/// sim and prints their tables.
pub async fn run(
    sim_binary: &std::path::Path,
    kinds: &[Kind],
    trials: usize,
    window: Duration,
) -> Result<(), String> {
    let sim = crate::sim::Sim::start(sim_binary, 8)?;
    let pd = sim.pd.clone();
    let mut deadlocks: Vec<(Kind, Vec<DeadlockTrial>)> = Vec::new();
    let mut hot: Vec<(Kind, usize, HotRun)> = Vec::new();
    let routed: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|k| !k.is_hand_routed())
        .collect();
    for &kind in &routed {
        eprintln!("contention: {}", kind.label());
        let tag = format!("{kind:?}");
        let mut trials_of = Vec::new();
        match kind {
            Kind::Upstream => {
                let client = tikv_client::TransactionClient::new(vec![pd.clone()])
                    .await
                    .map_err(|e| e.to_string())?;
                for trial in 0..trials {
                    trials_of.push(upstream_deadlock(&client, trial).await?);
                }
                for counters in [1, 16] {
                    let run =
                        upstream_hot(&client, &format!("{tag}-{counters}"), counters, 64, window)
                            .await?;
                    hot.push((kind, counters, run));
                }
            }
            _ => {
                let mode = if kind == Kind::PlanBatched {
                    tikv_plan::RpcMode::Batched
                } else {
                    tikv_plan::RpcMode::Unary
                };
                let config = tikv_plan::Config::default().with_rpc_mode(mode);
                let client =
                    tikv_plan::TransactionClient::new_with_config(vec![pd.clone()], config)
                        .await
                        .map_err(|e| e.to_string())?;
                for trial in 0..trials {
                    trials_of.push(plan_deadlock(&client, trial + 1000 * kind as usize).await?);
                }
                for counters in [1, 16] {
                    let run = plan_hot(&client, &format!("{tag}-{counters}"), counters, 64, window)
                        .await?;
                    hot.push((kind, counters, run));
                }
            }
        }
        deadlocks.push((kind, trials_of));
    }
    println!("{}", deadlock_table(&deadlocks));
    println!("{}", hot_table(&hot));
    Ok(())
}

fn millis(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

fn deadlock_table(rows: &[(Kind, Vec<DeadlockTrial>)]) -> String {
    let mut out = String::from(
        "### Deadlock\n\n| client | trials | answered as a deadlock | answer ms (median · max) | other committed | other's commit ms (median · max) |\n|---|---|---|---|---|---|\n",
    );
    let median_max = |mut v: Vec<Duration>| {
        v.sort();
        match (v.get(v.len() / 2), v.last()) {
            (Some(m), Some(x)) => format!("{} · {}", millis(*m), millis(*x)),
            _ => "—".to_owned(),
        }
    };
    for (kind, trials) in rows {
        let commits: Vec<Duration> = trials
            .iter()
            .filter_map(|t| t.other_committed.as_ref().ok().copied())
            .collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            kind.label(),
            trials.len(),
            trials.iter().filter(|t| t.deadlock).count(),
            median_max(trials.iter().map(|t| t.answered).collect()),
            commits.len(),
            median_max(commits.clone()),
        ));
        if let Some(Err(e)) = trials
            .iter()
            .map(|t| &t.other_committed)
            .find(|r| r.is_err())
        {
            out.push_str(&format!(
                "|  | the other's first failure: {} |  |  |  |  |\n",
                e.replace('|', "/").chars().take(200).collect::<String>()
            ));
        }
    }
    out
}

fn hot_table(rows: &[(Kind, usize, HotRun)]) -> String {
    let mut out = String::from(
        "### Hot rows, 64 tasks\n\n| client | counters | committed/s | p50 ms | p99 ms | failed | undetermined | counters = committed |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (kind, counters, run) in rows {
        out.push_str(&format!(
            "| {} | {} | {:.0} | {} | {} | {} | {} | {} |\n",
            kind.label(),
            counters,
            run.rate(),
            millis(run.percentile(0.5)),
            millis(run.percentile(0.99)),
            run.failed,
            run.undetermined,
            if run.consistent() {
                format!("yes ({})", run.final_sum)
            } else {
                format!("NO: {} vs {} committed", run.final_sum, run.committed)
            },
        ));
        if let Some(e) = &run.first_error {
            out.push_str(&format!(
                "|  | first failure: {} |  |  |  |  |  |  |\n",
                e.replace('|', "/").chars().take(160).collect::<String>()
            ));
        }
    }
    out
}
