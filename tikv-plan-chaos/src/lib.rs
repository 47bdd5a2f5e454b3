//! # tikv-plan-chaos
//!
//! The chaos suites of tikv-plan (not published): seeded workloads of
//! tikv-plan clients against a simulated cluster ([`tikv_sim`]) under
//! seeded faults, a recorded history, and checkers for it. `cargo run -p
//! tikv-plan-chaos -- raw|txn --seed S --seconds N` runs one; the
//! transactional suite is [`txn`], and `dst|dst-explore` run the
//! deterministic simulation ([`dst`]).
//!
//! The raw suite (this module): a seeded workload of concurrent
//! [`RawClient`]s against a [`SimCluster`] while a seeded [`Injector`]
//! applies and heals the cluster's faults ([`FaultKind::ALL`]; lagging
//! replicas too in a run with replica reads), then a check of the recorded
//! history.
//!
//! What is checked ([`check`]): each key's history is linearizable as a
//! register with compare-and-set and delete (undetermined and abandoned
//! writes may take effect at any time after their invoke, or never); the
//! reads after healing reflect every acknowledged write; no value is applied
//! twice (so no compare-and-swap is); no operation outlives its bound (the
//! client's request deadline plus one RPC timeout and a second of slack;
//! scans walk Regions one plan at a time, so theirs is per Region); no task
//! panics; the cluster's TiFlash store ([`TIFLASH_STORES`]) receives no
//! call.
//!
//! ```no_run
//! # async fn demo() -> tikv_plan_chaos::Result<()> {
//! use std::time::Duration;
//! use tikv_plan_chaos::{run, ChaosConfig};
//!
//! let report = run(ChaosConfig {
//!     seed: 7,
//!     duration: Duration::from_secs(10),
//!     ..ChaosConfig::default()
//! })
//! .await?;
//! println!("{}", report.summary());
//! assert!(report.is_clean());
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod check;
pub mod dst;
mod error;
pub mod history;
pub mod inject;
mod timeline;
pub mod txn;
pub mod txn_check;
pub mod txn_history;
mod txn_report;
mod worker;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// How far past its request deadline a client call may end before the
/// suites count it late: the time to notice the deadline and unwind
/// (timers on a loaded 2-core machine fire late by tens of milliseconds).
pub const DEADLINE_MARGIN: std::time::Duration = std::time::Duration::from_millis(250);

/// TiFlash stores every chaos cluster runs beside its TiKV stores, as most
/// TiDB clusters do: PD lists them and every Region has a learner there,
/// and no TiKV request may ever reach them (a run is clean only if none
/// did; docs/routing.md, "TiFlash stores and peers").
pub const TIFLASH_STORES: u64 = 1;

/// Raft's timing in chaos runs: TiKV's tick counts on a 40 ms tick, so a
/// crashed store's Regions elect 0.4 to 0.8 s after it dies, within the
/// faults' lengths; a new leader syncs its max ts in 10 ms.
pub const RAFT_TIMING: tikv_sim::RaftTiming =
    tikv_sim::RaftTiming::scaled(Duration::from_millis(40))
        .with_max_ts_sync(Duration::from_millis(10));

pub use check::{check_history, CheckOptions, CheckReport, WriteMode};
pub use error::{Error, Result};
pub use history::{OpKind, OpRecord, OpResult, Recorder, FINAL_READER};
pub use inject::{FaultKind, FaultWindow, Injector, InjectorConfig, DEFAULT_SCHEDULER_PAUSE};

use tikv_plan::{Config, RawClient};
use tikv_sim::{Outcome, SimCluster};
pub(crate) use worker::{read_back, task_clients, Worker};

/// Everything a chaos run can vary.
#[derive(Debug, Clone)]
pub struct ChaosConfig {
    /// Seeds the workload and the injector.
    pub seed: u64,
    /// How long the workload runs (healing and checking come after).
    pub duration: Duration,
    /// Concurrent workload tasks. Task `i` uses: `i % 4 == 0` a client
    /// shared with default timeouts, `1` a client shared with short
    /// timeouts, `2` its own client with short timeouts, `3` its own with
    /// default timeouts.
    pub tasks: usize,
    /// Keys `k000`, `k001`, …
    pub keys: usize,
    /// The first `hot_keys` keys get half of the single-key traffic.
    pub hot_keys: usize,
    /// Stores.
    pub stores: u64,
    /// PD members.
    pub pd_members: usize,
    /// Regions at the start (the key set is split evenly).
    pub regions: usize,
    /// Clients use `Config::at_least_once_writes`.
    pub at_least_once_writes: bool,
    /// How the clients send requests (`Config::rpc_mode`).
    pub rpc_mode: tikv_plan::RpcMode,
    /// RPC timeout of the short-timeout clients.
    pub short_timeout: Duration,
    /// Request deadline of the short-timeout clients.
    pub short_deadline: Duration,
    /// The faults, their weights and pacing.
    pub faults: Vec<(FaultKind, u32)>,
    /// The pause between two injections is drawn from this range.
    pub fault_interval: (Duration, Duration),
    /// How long a healable fault lasts is drawn from this range.
    pub fault_duration: (Duration, Duration),
    /// The most splits.
    pub max_splits: usize,
    /// PD's schedulers moving leaders, merging, splitting and moving peers
    /// for the whole run: the pause between two moves, or `None` for off
    /// ([`InjectorConfig::scheduler`]).
    pub scheduler: Option<(Duration, Duration)>,
    /// A pause drawn from `0..=op_pause` between one task's operations.
    pub op_pause: Duration,
    /// Checker options (the write mode follows `at_least_once_writes`).
    pub check: CheckOptions,
    /// Reads leave the leader: task `i`'s go to the leader, a follower or
    /// any replica first, by `i % 3`, and stores lag
    /// ([`FaultKind::Lag`], added to the faults unless they hold it).
    pub replica_reads: bool,
    /// The simulator serves replica reads without read index, and every
    /// store lags 300 ms for the whole run (no `Lag` fault is applied):
    /// reads the checker must catch (it never happens in TiKV; a run that
    /// shows the check can fail).
    pub naive_replica_reads: bool,
}

impl Default for ChaosConfig {
    fn default() -> Self {
        ChaosConfig {
            seed: 1,
            duration: Duration::from_secs(10),
            tasks: 12,
            keys: 24,
            hot_keys: 4,
            stores: 3,
            pd_members: 3,
            regions: 4,
            at_least_once_writes: false,
            rpc_mode: tikv_plan::RpcMode::default(),
            short_timeout: Duration::from_millis(250),
            short_deadline: Duration::from_secs(3),
            faults: InjectorConfig::all_kinds(),
            fault_interval: (Duration::from_millis(20), Duration::from_millis(120)),
            fault_duration: (Duration::from_millis(100), Duration::from_millis(1200)),
            max_splits: 8,
            scheduler: Some(DEFAULT_SCHEDULER_PAUSE),
            op_pause: Duration::from_millis(2),
            check: CheckOptions::default(),
            replica_reads: false,
            naive_replica_reads: false,
        }
    }
}

/// What a chaos run did and found.
#[derive(Debug, Clone)]
pub struct ChaosReport {
    /// The seed.
    pub seed: u64,
    /// How long the workload ran.
    pub duration: Duration,
    /// Workload operations (the reads after healing not included).
    pub ops: usize,
    /// Operations by name (`get`, `put`, …) and whether they succeeded.
    pub ops_by_kind: BTreeMap<(&'static str, bool), usize>,
    /// Operations that ended with an undetermined outcome.
    pub undetermined: usize,
    /// Faults applied, by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Every fault applied, in order, its times in microseconds since the
    /// history's time zero (as the records' are).
    pub fault_windows: Vec<FaultWindow>,
    /// Dropped responses that fired (requests applied whose answer was
    /// dropped).
    pub drops_fired: u64,
    /// Calls the stores forwarded for the clients (`tikv-forwarded-host`;
    /// a BatchCommands stream counts once).
    pub forwarded: u64,
    /// Reads a replica (not the leader) served (replica and stale reads).
    pub replica_served: u64,
    /// Calls (and BatchCommands streams) the TiFlash stores received: a
    /// clean run has none.
    pub tiflash_calls: u64,
    /// The check of the history.
    pub check: CheckReport,
    /// Operations that ran past their bound, their client's request
    /// deadline plus [`DEADLINE_MARGIN`] (including abandoned ones).
    pub hangs: usize,
    /// The longest operation of the workload.
    pub slowest_op: std::time::Duration,
    /// Record ids of those operations (the first 20).
    pub hang_records: Vec<usize>,
    /// Workload or injector tasks that panicked.
    pub panics: usize,
    /// The history, final reads included.
    pub history: Vec<OpRecord>,
    /// The key set.
    pub keys: Vec<Vec<u8>>,
}

impl ChaosReport {
    /// No violation, nothing undecided, no hang, no panic, no call at a
    /// TiFlash store.
    pub fn is_clean(&self) -> bool {
        self.check.is_clean() && self.hangs == 0 && self.panics == 0 && self.tiflash_calls == 0
    }

    /// Faults applied, all kinds.
    pub fn total_faults(&self) -> u64 {
        self.faults.values().sum()
    }

    /// One line of counts: ops, faults by kind, non-linearizable keys, lost
    /// writes, double applies (compare-and-swap ones), hangs, panics.
    pub fn summary(&self) -> String {
        let faults: Vec<String> = FaultKind::ALL
            .iter()
            .chain(FaultKind::REPLICA.iter())
            .map(|k| format!("{k}={}", self.faults.get(k).copied().unwrap_or(0)))
            .collect();
        format!(
            "seed={} seconds={} ops={} undetermined={} faults={} [{}] drops_fired={} forwarded={} replica_served={} tiflash_calls={} non_linearizable_keys={} undecided_keys={} lost_writes={} double_applies={} double_cas={} hangs={} slowest_op={:?} panics={}",
            self.seed,
            self.duration.as_secs(),
            self.ops,
            self.undetermined,
            self.total_faults(),
            faults.join(" "),
            self.drops_fired,
            self.forwarded,
            self.replica_served,
            self.tiflash_calls,
            self.check.non_linearizable.len(),
            self.check.undecided.len(),
            self.check.lost_writes.len(),
            self.check.double_applies.len(),
            self.check.double_cas(),
            self.hangs,
            self.slowest_op,
            self.panics,
        )
    }

    /// A readable account of every violation: the key, the operations the
    /// search could not place, and the records around them.
    pub fn describe_violations(&self) -> String {
        let mut out = String::new();
        let record = |id: usize| -> String {
            self.history
                .get(id)
                .map(|r| r.to_string())
                .unwrap_or_else(|| format!("#{id}?"))
        };
        for v in &self.check.non_linearizable {
            out.push_str(&format!(
                "not linearizable: key {} ({} ops, {} placed, value then {:?})\n",
                String::from_utf8_lossy(&v.key),
                v.ops,
                v.placed,
                v.value_then.as_deref().map(String::from_utf8_lossy)
            ));
            for id in &v.stuck_at {
                out.push_str(&format!("  next could be: {}\n", record(*id)));
            }
        }
        for l in &self.check.lost_writes {
            out.push_str(&format!(
                "lost write: key {}: {} ; final read {}\n",
                String::from_utf8_lossy(&l.key),
                record(l.write),
                record(l.final_read)
            ));
        }
        for d in &self.check.double_applies {
            out.push_str(&format!(
                "applied twice: key {} value {} by {}\n",
                String::from_utf8_lossy(&d.key),
                String::from_utf8_lossy(&d.value),
                d.writer.map(record).unwrap_or_else(|| "nobody".to_owned())
            ));
            for id in d.observations {
                out.push_str(&format!("  seen: {}\n", record(id)));
            }
        }
        for id in &self.hang_records {
            out.push_str(&format!("over its bound: {}\n", record(*id)));
        }
        if self.tiflash_calls > 0 {
            out.push_str(&format!(
                "the TiFlash stores received {} TiKV call(s)\n",
                self.tiflash_calls
            ));
        }
        out
    }
}

/// Runs `injector` until `end`, then tells the workload to `stop`. Returns
/// the injector (for its counts), or `None` with one panic counted when it
/// died, in which case a fresh one heals every fault so the run can end.
pub(crate) async fn run_injector(
    mut injector: Injector,
    cluster: &Arc<SimCluster>,
    end: tokio::time::Instant,
    stop: &AtomicBool,
) -> (Option<Injector>, usize) {
    let task = {
        let cluster = Arc::clone(cluster);
        tokio::spawn(async move {
            injector.run(&cluster, end).await;
            injector
        })
    };
    let (injector, panics) = match task.await {
        Ok(injector) => (Some(injector), 0),
        Err(e) => (None, usize::from(e.is_panic())),
    };
    stop.store(true, Ordering::SeqCst);
    if injector.is_none() {
        Injector::new(InjectorConfig {
            seed: 0,
            kinds: Vec::new(),
            interval: (Duration::ZERO, Duration::ZERO),
            duration: (Duration::ZERO, Duration::ZERO),
            max_splits: 0,
            scheduler: None,
            keys: Vec::new(),
        })
        .heal_all(cluster)
        .await;
    }
    (injector, panics)
}

/// The key set of a run: `k000`, `k001`, …
pub fn key_set(keys: usize) -> Vec<Vec<u8>> {
    (0..keys).map(|i| format!("k{i:03}").into_bytes()).collect()
}

/// Runs the workload and the injector, heals, reads every key with a fresh
/// client, and checks the history.
pub async fn run(config: ChaosConfig) -> Result<ChaosReport> {
    let keys = key_set(config.keys.max(1));
    let regions = config.regions.clamp(1, keys.len());
    let split_keys: Vec<Vec<u8>> = (1..regions)
        .filter_map(|i| keys.get(i * keys.len() / regions).cloned())
        .collect();
    let cluster = Arc::new(
        SimCluster::builder()
            .stores(config.stores.max(1))
            .raft_timing(RAFT_TIMING)
            .tiflash_stores(TIFLASH_STORES)
            .pd_members(config.pd_members.max(1))
            .split_keys(split_keys)
            .replicas(3)
            .start()
            .await?,
    );

    if config.naive_replica_reads {
        cluster.naive_replica_reads(true);
        for store in cluster.store_ids() {
            cluster.store_lag(store, Some(Duration::from_millis(300)))?;
        }
    }
    let mut faults = config.faults.clone();
    // Naive mode keeps its 300 ms lag on every store: no lag fault changes
    // or lifts it.
    if config.naive_replica_reads {
        faults.retain(|(k, _)| *k != FaultKind::Lag);
    } else if config.replica_reads && !faults.iter().any(|(k, _)| *k == FaultKind::Lag) {
        faults.push((FaultKind::Lag, 4));
    }

    let base = if config.at_least_once_writes {
        Config::default().with_at_least_once_writes()
    } else {
        Config::default()
    }
    .with_rpc_mode(config.rpc_mode);
    let short = base
        .clone()
        .with_timeout(config.short_timeout)
        .with_connect_timeout(config.short_timeout)
        .with_request_deadline(config.short_deadline);
    let clients = task_clients(
        config.tasks,
        &base,
        &short,
        config.replica_reads,
        |config| RawClient::new_with_config(cluster.pd_endpoints(), config),
    )
    .await?;

    let recorder = Arc::new(Recorder::new());
    let stop = Arc::new(AtomicBool::new(false));
    let hangs = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::with_capacity(config.tasks);
    for (task, client) in clients.into_iter().enumerate() {
        let worker = Worker::new(
            task,
            client,
            Arc::clone(&recorder),
            config.seed,
            keys.clone(),
            config.hot_keys,
            config.op_pause,
        );
        let stop = Arc::clone(&stop);
        let hangs = Arc::clone(&hangs);
        workers.push(tokio::spawn(worker.run(stop, hangs)));
    }

    let injector = Injector::new(InjectorConfig {
        seed: mix_seed(config.seed, 0),
        kinds: faults,
        interval: config.fault_interval,
        duration: config.fault_duration,
        max_splits: config.max_splits,
        scheduler: config.scheduler,
        keys: keys.clone(),
    });
    let end = tokio::time::Instant::now() + config.duration;
    let (injector, mut panics) = run_injector(injector, &cluster, end, &stop).await;
    for worker in workers {
        if let Err(e) = worker.await {
            panics += usize::from(e.is_panic());
        }
    }

    // Every fault is healed and every workload call has returned: read
    // every key with a fresh client.
    let reader = RawClient::new_with_config(cluster.pd_endpoints(), base).await?;
    read_back(&reader, &keys, &recorder).await;

    let drops_fired = cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count_outcome(Outcome::Dropped))
        .sum();
    let forwarded = forwarded(&cluster);
    let replica_served = replica_served(&cluster);
    let tiflash_calls = tiflash_calls(&cluster);
    cluster.shutdown().await;

    let history = recorder.records();
    let mut options = config.check;
    options.mode = if config.at_least_once_writes {
        WriteMode::AtLeastOnce
    } else {
        WriteMode::AtMostOnce
    };
    let check = {
        let history = history.clone();
        let keys = keys.clone();
        tokio::task::spawn_blocking(move || check_history(&history, &keys, &options))
            .await
            .map_err(|e| crate::Error::Check(format!("the history check failed: {e}")))?
    };

    let mut ops_by_kind = BTreeMap::new();
    let mut undetermined = 0;
    let mut ops = 0;
    for r in history.iter().filter(|r| r.task != FINAL_READER) {
        ops += 1;
        *ops_by_kind
            .entry((r.kind.name(), r.result.is_ok()))
            .or_insert(0) += 1;
        if matches!(
            r.result,
            OpResult::Failed {
                undetermined: true,
                ..
            }
        ) {
            undetermined += 1;
        }
    }
    let slowest_op = history
        .iter()
        .filter(|r| r.task != FINAL_READER)
        .filter_map(|r| r.complete.map(|c| c.saturating_sub(r.invoke)))
        .max()
        .map(std::time::Duration::from_micros)
        .unwrap_or_default();
    let hang_records = history
        .iter()
        .filter(|r| r.task != FINAL_READER && matches!(r.result, OpResult::Abandoned))
        .map(|r| r.id)
        .take(20)
        .collect();
    Ok(ChaosReport {
        seed: config.seed,
        duration: config.duration,
        ops,
        ops_by_kind,
        undetermined,
        faults: injector
            .as_ref()
            .map(|i| i.counts().clone())
            .unwrap_or_default(),
        fault_windows: injector
            .as_ref()
            .map(|i| i.windows_since(recorder.started()))
            .unwrap_or_default(),
        drops_fired,
        forwarded,
        replica_served,
        tiflash_calls,
        check,
        hangs: usize::try_from(hangs.load(Ordering::SeqCst)).unwrap_or(usize::MAX),
        slowest_op,
        hang_records,
        panics,
        history,
        keys,
    })
}

pub(crate) fn mix_seed(seed: u64, stream: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03)
}

/// The calls every store of `cluster` forwarded for clients.
/// Reads a replica (not the leader) served, over every store.
pub(crate) fn replica_served(cluster: &SimCluster) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).served_as_replica())
        .sum()
}

/// The calls and BatchCommands streams the TiFlash stores of `cluster`
/// received (hangs not counted twice).
pub(crate) fn tiflash_calls(cluster: &SimCluster) -> u64 {
    cluster
        .tiflash_store_ids()
        .into_iter()
        .map(|s| {
            let counters = cluster.counters(s);
            counters.total_requests() + counters.batch_streams()
        })
        .sum()
}

pub(crate) fn forwarded(cluster: &SimCluster) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).forwarded().0)
        .sum()
}
