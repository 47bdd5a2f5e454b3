//! One deterministic run: the chaos suite's raw workers, its
//! transactional workloads, or both side by side on disjoint keys, with
//! its cluster-state faults, inside turmoil; network faults scheduled by
//! the simulation's driver; and the same history checks (linearizability
//! for raw KV, anomalies for transactions). Everything that varies comes
//! from the seed, so a run replays: the same seed gives the same
//! histories, byte for byte.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tikv_plan::__internals::with_transport;
use tikv_plan::{Config, RawClient, TransactionClient};
use tikv_sim::codec::encode_bytes;
use tikv_sim::SimCluster;

use super::kinds::{DstWorkload, NetFault};
use super::report::DstReport;
use super::{host_cluster, pd_host, store_host, transport};
use crate::txn::{drops_fired, TxnChaosConfig, TxnChaosReport, TxnKeys, TxnWorkloadRun};
use crate::txn_history::TxnRecorder;
use crate::{
    check_history, key_set, mix_seed, read_back, task_clients, CheckOptions, FaultKind, Injector,
    InjectorConfig, OpRecord, OpResult, Recorder, Worker, WriteMode, FINAL_READER,
};

/// Where the TSO's clock starts, in every run: 2026-01-01 00:00 UTC. A
/// run's timestamps depend on its seed alone.
const EPOCH: Duration = Duration::from_secs(1_767_225_600);

/// The client host's name.
pub const CLIENT: &str = "client";

/// The chaos suite's cluster faults that change the cluster's state rather
/// than its network (the simulated network has its own, [`NetFault`]),
/// with their default weights: the transactional ones first
/// ([`FaultKind::TXN`]: TSO jumps, dropped answers of transactional
/// requests; only a run with transactions applies them), then the raw
/// suite's.
pub fn state_faults() -> Vec<(FaultKind, u32)> {
    let txn = InjectorConfig::txn_kinds()
        .into_iter()
        .filter(|(kind, _)| FaultKind::TXN.contains(kind));
    // The transactional kinds first: a short run tries the kinds in this
    // order before it draws by weight.
    txn.chain(InjectorConfig::all_kinds())
        .filter(|(kind, _)| {
            FaultKind::TXN.contains(kind)
                || matches!(
                    kind,
                    FaultKind::Slow
                        | FaultKind::Crash
                        | FaultKind::Restart
                        | FaultKind::DiskFull
                        | FaultKind::ProposeDelay
                        | FaultKind::SlowMerge
                        | FaultKind::BusyZero
                        | FaultKind::BusyWait
                        | FaultKind::TransferFresh
                        | FaultKind::TransferStale
                        | FaultKind::ColdAccept
                        | FaultKind::ColdNotLeaderFirst
                        | FaultKind::Split
                        | FaultKind::Merge
                        | FaultKind::PeerMove
                        | FaultKind::HangRespond
                        | FaultKind::PdHang
                )
        })
        .collect()
}

/// What a deterministic run varies. Times are simulated.
#[derive(Debug, Clone)]
pub struct DstConfig {
    /// Decides every choice: the network's, the workload's, the faults'.
    pub seed: u64,
    /// Which workloads run.
    pub workload: DstWorkload,
    /// How long the workload runs.
    pub duration: Duration,
    /// Concurrent raw workload tasks (clients as in the chaos suite).
    pub tasks: usize,
    /// Transactional tasks (list-append and bank, as in the
    /// transactional chaos suite).
    pub txn_tasks: usize,
    /// Long pessimistic transaction tasks, besides `txn_tasks`.
    pub txn_long_tasks: usize,
    /// Hot (deadlock-prone) pessimistic transfer tasks.
    pub txn_hot_tasks: usize,
    /// Raw keys `k000`, `k001`, …
    pub keys: usize,
    /// Regions at the start over each workload's keys.
    pub regions: usize,
    /// Stores.
    pub stores: u64,
    /// The network faults the driver may apply.
    pub net_faults: Vec<NetFault>,
    /// The cluster-state faults the injector may apply, with weights.
    pub state_faults: Vec<(FaultKind, u32)>,
    /// The pause between two faults of each source is drawn from this.
    pub fault_interval: (Duration, Duration),
    /// How long a fault lasts is drawn from this.
    pub fault_duration: (Duration, Duration),
    /// PD's schedulers moving leaders, merging, splitting and moving peers
    /// for the whole run: the pause between two moves, or `None` for off
    /// ([`InjectorConfig::scheduler`]).
    pub scheduler: Option<(Duration, Duration)>,
    /// Each message's one-way latency is drawn from this.
    pub latency: (Duration, Duration),
    /// A deliberate bug, for showing the simulation finds one: the clients
    /// re-send writes that may have been delivered
    /// (`Config::at_least_once_writes`), while the check still expects
    /// each write applied at most once.
    pub resend_undetermined_writes: bool,
    /// When set, only the network faults with these indices in the run's
    /// schedule (numbered from 0 in the order the driver draws them) are
    /// applied; the others are drawn and dropped. Same seed, same set:
    /// the same run. What [`shrink`] narrows down.
    pub only_net_faults: Option<BTreeSet<usize>>,
    /// The same for the cluster-state faults, by injection attempt
    /// ([`Injector::only`]).
    pub only_state_faults: Option<BTreeSet<usize>>,
    /// Reads leave the leader: the raw tasks' as in the chaos suite
    /// (`ChaosConfig::replica_reads`), the transactional snapshots as
    /// stale reads (`TxnChaosConfig::stale_reads`), and stores lag
    /// ([`FaultKind::Lag`]).
    pub replica_reads: bool,
}

impl Default for DstConfig {
    fn default() -> Self {
        DstConfig {
            seed: 1,
            workload: DstWorkload::Mixed,
            duration: Duration::from_secs(10),
            tasks: 8,
            txn_tasks: 6,
            txn_long_tasks: 2,
            txn_hot_tasks: 2,
            keys: 16,
            regions: 3,
            stores: 3,
            net_faults: NetFault::ALL.to_vec(),
            state_faults: state_faults(),
            fault_interval: (Duration::from_millis(50), Duration::from_millis(400)),
            fault_duration: (Duration::from_millis(100), Duration::from_secs(2)),
            scheduler: Some(crate::DEFAULT_SCHEDULER_PAUSE),
            latency: (Duration::from_millis(1), Duration::from_millis(5)),
            resend_undetermined_writes: false,
            only_net_faults: None,
            only_state_faults: None,
            replica_reads: false,
        }
    }
}

/// What the client host hands back to the driver.
#[derive(Default)]
struct Outcome {
    history: Vec<OpRecord>,
    txn: Option<TxnChaosReport>,
    /// The simulated time the history's clock started at.
    origin: Duration,
    hangs: u64,
    panics: usize,
    state_faults: BTreeMap<FaultKind, u64>,
    state_log: Vec<(u64, u64, String)>,
    state_applied: Vec<usize>,
}

/// A network fault in force, and how to lift it.
struct Active {
    until: Duration,
    fault: NetFault,
    store: u64,
    /// Its entry in the fault log; `None` for a fault drawn but dropped
    /// (`DstConfig::only_net_faults`), which holds its place in the
    /// schedule without being applied.
    log: Option<usize>,
}

/// The transactional chaos suite's settings for a run's transactional
/// workloads.
fn txn_config(config: &DstConfig) -> TxnChaosConfig {
    TxnChaosConfig {
        seed: config.seed,
        duration: config.duration,
        tasks: config.txn_tasks,
        long_tasks: config.txn_long_tasks,
        hot_tasks: config.txn_hot_tasks,
        stores: config.stores,
        pd_members: 1,
        regions: config.regions,
        timeout: Duration::from_millis(250),
        deadline: Duration::from_secs(3),
        fault_interval: config.fault_interval,
        fault_duration: config.fault_duration,
        stale_reads: config.replica_reads,
        ..TxnChaosConfig::default()
    }
}

/// Runs the configured workloads in a deterministic simulation and checks
/// their histories. Same `config`, same report.
pub fn run(config: &DstConfig) -> crate::Result<DstReport> {
    let mut keys = key_set(config.keys.max(1));
    if config.workload.txn() {
        // A cluster serving transactions must split at memcomparable
        // encoded keys (the transactional client refuses a Region bound
        // that does not decode), and the raw workload's Regions split at
        // its keys: make them encoded keys too. To the raw workload they
        // are bytes like any other.
        keys = keys.iter().map(|k| encode_bytes(k)).collect();
    }
    let regions = config.regions.clamp(1, keys.len());
    let txn_keys = TxnKeys::new(&txn_config(config));
    let mut split_keys: Vec<Vec<u8>> = Vec::new();
    if config.workload.raw() {
        split_keys.extend((1..regions).filter_map(|i| keys.get(i * keys.len() / regions).cloned()));
    }
    if config.workload.txn() {
        split_keys.extend(txn_keys.split_keys(config.regions));
    }
    split_keys.sort();
    split_keys.dedup();
    let mut sim = turmoil::Builder::new()
        .simulation_duration(config.duration + Duration::from_secs(600))
        .min_message_latency(config.latency.0)
        .max_message_latency(config.latency.1)
        .rng_seed(config.seed)
        .build();
    let builder = SimCluster::builder()
        .stores(config.stores.max(1))
        .split_keys(split_keys)
        .replicas(3)
        .raft_timing(crate::RAFT_TIMING)
        .tso_clock(|| EPOCH + turmoil::sim_elapsed().unwrap_or_default());
    let (cluster, pd) = host_cluster(&mut sim, builder)?;
    let cluster = Arc::new(cluster);

    let stop = Arc::new(AtomicBool::new(false));
    let healed = Arc::new(AtomicBool::new(false));
    // Network faults wait for the transactional setup (every account's
    // first balance), which must not fail; the raw workload needs none.
    let ready = Arc::new(AtomicBool::new(!config.workload.txn()));
    let outcome: Arc<Mutex<Option<Outcome>>> = Arc::default();
    sim.client(
        CLIENT,
        client_host(
            config.clone(),
            keys.clone(),
            txn_keys,
            pd,
            Arc::clone(&cluster),
            Flags {
                stop: Arc::clone(&stop),
                healed: Arc::clone(&healed),
                ready: Arc::clone(&ready),
            },
            Arc::clone(&outcome),
        ),
    );

    let mut rng = fastrand::Rng::with_seed(mix_seed(config.seed, 0x004e_4554));
    let draw = |rng: &mut fastrand::Rng, (low, high): (Duration, Duration)| {
        let (low, high) = (low.as_millis() as u64, high.as_millis() as u64);
        Duration::from_millis(rng.u64(low..=high.max(low)))
    };
    let mut next = ready
        .load(Ordering::SeqCst)
        .then(|| draw(&mut rng, config.fault_interval));
    let mut active: Vec<Active> = Vec::new();
    let mut log: Vec<(Duration, Option<Duration>, String)> = Vec::new();
    let mut counts: BTreeMap<NetFault, u64> = BTreeMap::new();
    // Network faults drawn (and not refused as busy), and those applied.
    let mut drawn = 0;
    let mut net_applied = Vec::new();
    loop {
        let finished = sim
            .step()
            .map_err(|e| crate::Error::Simulation(format!("the simulation failed: {e}")))?;
        if finished {
            break;
        }
        let now = sim.elapsed();
        let ending = now >= config.duration;
        let mut i = 0;
        while i < active.len() {
            if ending || active[i].until <= now {
                let a = active.swap_remove(i);
                if let Some(entry) = a.log.and_then(|at| log.get_mut(at)) {
                    lift(&mut sim, &cluster, &a, config);
                    entry.1 = Some(now);
                }
            } else {
                i += 1;
            }
        }
        if ending {
            if !stop.swap(true, Ordering::SeqCst) {
                healed.store(true, Ordering::SeqCst);
            }
            continue;
        }
        let Some(at) = next else {
            if ready.load(Ordering::SeqCst) {
                next = Some(now + draw(&mut rng, config.fault_interval));
            }
            continue;
        };
        if now < at || config.net_faults.is_empty() {
            continue;
        }
        next = Some(now + draw(&mut rng, config.fault_interval));
        let fault = config.net_faults[rng.usize(0..config.net_faults.len())];
        let store = rng.u64(1..=config.stores.max(1));
        // One network fault per store (and one for PD, one spike) at a time.
        let busy = active.iter().any(|a| match fault {
            NetFault::PartitionPd | NetFault::LatencySpike => a.fault == fault,
            _ => {
                a.store == store
                    && !matches!(a.fault, NetFault::PartitionPd | NetFault::LatencySpike)
            }
        });
        if busy {
            continue;
        }
        let index = drawn;
        drawn += 1;
        let kept = config
            .only_net_faults
            .as_ref()
            .is_none_or(|only| only.contains(&index));
        let what = if kept {
            counts.entry(fault).and_modify(|n| *n += 1).or_insert(1);
            net_applied.push(index);
            Some(apply(&mut sim, &cluster, fault, store, &mut rng))
        } else {
            if fault == NetFault::LatencySpike {
                // The draw `apply` would make, so the schedule stays put.
                rng.u64(50..=400);
            }
            None
        };
        active.push(Active {
            until: now + draw(&mut rng, config.fault_duration),
            fault,
            store,
            log: what.is_some().then_some(log.len()),
        });
        if let Some(what) = what {
            log.push((now, None, format!("n{index} {what}")));
        }
    }
    let end = sim.elapsed();
    drop(sim);

    let Some(outcome) = outcome.lock().map(|mut o| o.take()).unwrap_or_default() else {
        return Err(crate::Error::Simulation(
            "the client host ended without a history".to_owned(),
        ));
    };
    let on_history_clock = |t: Duration| {
        u64::try_from(t.saturating_sub(outcome.origin).as_micros()).unwrap_or(u64::MAX)
    };
    let mut fault_log: Vec<(u64, u64, String)> = log
        .into_iter()
        .map(|(start, stop, what)| {
            (
                on_history_clock(start),
                on_history_clock(stop.unwrap_or(end)),
                what,
            )
        })
        .collect();
    fault_log.extend(outcome.state_log.iter().cloned());
    fault_log.sort();

    let options = CheckOptions {
        mode: WriteMode::AtMostOnce,
        ..CheckOptions::default()
    };
    let checked: &[Vec<u8>] = if config.workload.raw() { &keys } else { &[] };
    let check = check_history(&outcome.history, checked, &options);
    let workload = outcome.history.iter().filter(|r| r.task != FINAL_READER);
    let (mut ops, mut undetermined) = (0, 0);
    for r in workload {
        ops += 1;
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
    let forwarded = cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).forwarded().0)
        .sum();
    Ok(DstReport {
        seed: config.seed,
        forwarded,
        replica_served: crate::replica_served(&cluster),
        workload: config.workload,
        ops,
        undetermined,
        net_faults: counts,
        state_faults: outcome.state_faults,
        fault_log,
        check,
        hangs: usize::try_from(outcome.hangs).unwrap_or(usize::MAX),
        panics: outcome.panics,
        history: outcome.history,
        txn: outcome.txn,
        net_applied,
        state_applied: outcome.state_applied,
        simulated: end,
    })
}

/// Applies `fault` (to `store` where it names one); returns what it did.
fn apply(
    sim: &mut turmoil::Sim<'_>,
    cluster: &SimCluster,
    fault: NetFault,
    store: u64,
    rng: &mut fastrand::Rng,
) -> String {
    let host = store_host(store);
    match fault {
        NetFault::PartitionStore => sim.partition(CLIENT, host.as_str()),
        NetFault::OneWayToStore => sim.partition_oneway(CLIENT, host.as_str()),
        NetFault::OneWayFromStore => sim.partition_oneway(host.as_str(), CLIENT),
        NetFault::PartitionPd => sim.partition(CLIENT, pd_host(0).as_str()),
        NetFault::HoldStore => sim.hold(CLIENT, host.as_str()),
        NetFault::LatencySpike => {
            let max = Duration::from_millis(rng.u64(50..=400));
            sim.set_max_message_latency(max);
            return format!("{} up to {} ms", fault.name(), max.as_millis());
        }
        NetFault::CrashStore => sim.crash(host.as_str()),
        NetFault::PartitionStorePd => {
            sim.partition(host.as_str(), pd_host(0).as_str());
            cluster.set_store_cut_off_from_pd(store, true);
        }
    }
    match fault {
        NetFault::PartitionPd => format!("{} pd0", fault.name()),
        NetFault::PartitionStorePd => format!("{} {host} pd0", fault.name()),
        _ => format!("{} {host}", fault.name()),
    }
}

/// Lifts a network fault.
fn lift(sim: &mut turmoil::Sim<'_>, cluster: &SimCluster, active: &Active, config: &DstConfig) {
    let host = store_host(active.store);
    match active.fault {
        NetFault::PartitionStore => sim.repair(CLIENT, host.as_str()),
        NetFault::OneWayToStore => sim.repair_oneway(CLIENT, host.as_str()),
        NetFault::OneWayFromStore => sim.repair_oneway(host.as_str(), CLIENT),
        NetFault::PartitionPd => sim.repair(CLIENT, pd_host(0).as_str()),
        NetFault::HoldStore => sim.release(CLIENT, host.as_str()),
        NetFault::LatencySpike => sim.set_max_message_latency(config.latency.1),
        NetFault::CrashStore => sim.bounce(host.as_str()),
        NetFault::PartitionStorePd => {
            sim.repair(host.as_str(), pd_host(0).as_str());
            cluster.set_store_cut_off_from_pd(active.store, false);
        }
    }
}

/// The signals between the driver and the client host.
struct Flags {
    /// Set by the driver when the workload's time is up.
    stop: Arc<AtomicBool>,
    /// Set by the driver once it lifted every network fault.
    healed: Arc<AtomicBool>,
    /// Set by the client host once the workload runs: network faults wait
    /// for it.
    ready: Arc<AtomicBool>,
}

/// The client host: the workloads' clients and tasks, the cluster-state
/// injector, and after the driver heals the network, the final reads and
/// (for transactions) the check.
async fn client_host(
    config: DstConfig,
    keys: Vec<Vec<u8>>,
    txn_keys: TxnKeys,
    pd: Vec<String>,
    cluster: Arc<SimCluster>,
    flags: Flags,
    outcome: Arc<Mutex<Option<Outcome>>>,
) -> turmoil::Result {
    // The library's own randomness (backoff jitter) comes from this
    // thread's generator: seed it too.
    fastrand::seed(mix_seed(config.seed, 0x0043_4c49));
    let origin = turmoil::sim_elapsed().unwrap_or_default();
    let recorder = Arc::new(Recorder::new());
    let base = if config.resend_undetermined_writes {
        Config::default().with_at_least_once_writes()
    } else {
        Config::default()
    };
    let hangs = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    if config.workload.raw() {
        let short = base
            .clone()
            .with_timeout(Duration::from_millis(250))
            .with_connect_timeout(Duration::from_millis(250))
            .with_request_deadline(Duration::from_secs(3));
        let clients = task_clients(
            config.tasks,
            &base,
            &short,
            config.replica_reads,
            |config| with_transport(transport(), RawClient::new_with_config(pd.clone(), config)),
        )
        .await?;
        for (task, client) in clients.into_iter().enumerate() {
            let worker = Worker::new(
                task,
                client,
                Arc::clone(&recorder),
                config.seed,
                keys.clone(),
                4,
                Duration::from_millis(2),
            );
            workers.push(tokio::spawn(
                worker.run(Arc::clone(&flags.stop), Arc::clone(&hangs)),
            ));
        }
    }
    let txn_config = txn_config(&config);
    let connect_txn = |c: Config| {
        with_transport(
            transport(),
            TransactionClient::new_with_config(pd.clone(), c),
        )
    };
    let txn = if config.workload.txn() {
        let recorder = Arc::new(TxnRecorder::since(recorder.started()));
        let run = TxnWorkloadRun::start(
            &txn_config,
            &txn_keys,
            &cluster,
            connect_txn,
            &flags.stop,
            recorder,
        )
        .await?;
        Some(run)
    } else {
        None
    };
    flags.ready.store(true, Ordering::SeqCst);

    let mut kinds = config.state_faults.clone();
    if config.replica_reads && !kinds.iter().any(|(k, _)| *k == FaultKind::Lag) {
        kinds.push((FaultKind::Lag, 4));
    }
    let mut fault_keys = Vec::new();
    if config.workload.raw() {
        fault_keys.extend(keys.iter().cloned());
    }
    if config.workload.txn() {
        fault_keys.extend(txn_keys.encoded());
    } else {
        kinds.retain(|(kind, _)| !FaultKind::TXN.contains(kind));
    }
    fault_keys.sort();
    let mut injector = Injector::new(InjectorConfig {
        seed: mix_seed(config.seed, 0),
        kinds,
        interval: config.fault_interval,
        duration: config.fault_duration,
        max_splits: 4,
        scheduler: config.scheduler,
        keys: fault_keys,
    });
    if let Some(only) = &config.only_state_faults {
        injector.only(only.clone());
    }
    let end = tokio::time::Instant::now() + config.duration;
    injector.run(&cluster, end).await;
    let mut panics = 0;
    for worker in workers {
        if let Err(e) = worker.await {
            panics += usize::from(e.is_panic());
        }
    }
    let txn = match txn {
        Some(run) => Some(run.join().await),
        None => None,
    };
    while !flags.healed.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Every fault is lifted: read every key with a fresh client.
    if config.workload.raw() {
        let reader =
            with_transport(transport(), RawClient::new_with_config(pd.clone(), base)).await?;
        read_back(&reader, &keys, &recorder).await;
    }
    let txn = match txn {
        Some(ran) => {
            ran.read_back(&txn_config, &txn_keys, &cluster, connect_txn)
                .await?;
            let drops = drops_fired(&cluster);
            let waits = cluster.lock_wait_stats();
            Some(ran.report(
                &txn_config,
                &txn_keys,
                injector.counts().clone(),
                drops,
                waits,
                0,
            ))
        }
        None => None,
    };
    let state_log = injector
        .windows_since(recorder.started())
        .into_iter()
        .map(|w| {
            (
                w.start,
                w.end,
                format!("s{} {} {}", w.attempt, w.kind, w.target),
            )
        })
        .collect();
    let done = Outcome {
        history: recorder.records(),
        txn,
        origin,
        hangs: hangs.load(Ordering::SeqCst),
        panics,
        state_faults: injector.counts().clone(),
        state_log,
        state_applied: injector.applied_attempts(),
    };
    if let Ok(mut slot) = outcome.lock() {
        *slot = Some(done);
    }
    Ok(())
}
