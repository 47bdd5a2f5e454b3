//! One deterministic run of the raw workload: the chaos suite's workers
//! and its cluster-state faults inside turmoil, network faults scheduled by
//! the simulation's driver, and the same history check. Everything that
//! varies comes from the seed, so a run replays: the same seed gives the
//! same history, byte for byte.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tikv_plan::__internals::with_transport;
use tikv_plan::{Config, RawClient};
use tikv_sim::SimCluster;

use super::{host_cluster, pd_host, store_host, transport};
use crate::{
    check_history, key_set, mix_seed, read_back, task_clients, CheckOptions, CheckReport,
    FaultKind, Injector, InjectorConfig, OpRecord, OpResult, Recorder, Worker, WriteMode,
    FINAL_READER,
};

/// The client host's name.
pub const CLIENT: &str = "client";

/// A fault of the simulated network, scheduled by the driver between
/// simulation steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NetFault {
    /// The client and one store lose every message between them.
    PartitionStore,
    /// The client's messages to one store are lost; the store's arrive.
    OneWayToStore,
    /// One store's messages to the client are lost; the client's arrive.
    OneWayFromStore,
    /// The client and PD lose every message between them.
    PartitionPd,
    /// Messages between the client and one store are held, then all
    /// delivered when the fault ends: a latency spike on one link.
    HoldStore,
    /// Every link's latency may reach 50–400 ms for a while.
    LatencySpike,
    /// One store's host crashes (its connections die with it) and restarts
    /// when the fault ends, serving the data it had.
    CrashStore,
}

impl NetFault {
    /// Every kind.
    pub const ALL: [NetFault; 7] = [
        NetFault::PartitionStore,
        NetFault::OneWayToStore,
        NetFault::OneWayFromStore,
        NetFault::PartitionPd,
        NetFault::HoldStore,
        NetFault::LatencySpike,
        NetFault::CrashStore,
    ];

    /// Its name in summaries.
    pub fn name(self) -> &'static str {
        match self {
            NetFault::PartitionStore => "partition_store",
            NetFault::OneWayToStore => "one_way_to_store",
            NetFault::OneWayFromStore => "one_way_from_store",
            NetFault::PartitionPd => "partition_pd",
            NetFault::HoldStore => "hold_store",
            NetFault::LatencySpike => "latency_spike",
            NetFault::CrashStore => "crash_store",
        }
    }
}

/// The chaos suite's cluster faults that change the cluster's state rather
/// than its network (the simulated network has its own, [`NetFault`]),
/// with their default weights.
pub fn state_faults() -> Vec<(FaultKind, u32)> {
    InjectorConfig::all_kinds()
        .into_iter()
        .filter(|(kind, _)| {
            matches!(
                kind,
                FaultKind::Slow
                    | FaultKind::BusyZero
                    | FaultKind::BusyWait
                    | FaultKind::TransferFresh
                    | FaultKind::TransferStale
                    | FaultKind::ColdAccept
                    | FaultKind::ColdNotLeaderFirst
                    | FaultKind::Split
                    | FaultKind::HangRespond
            )
        })
        .collect()
}

/// What a deterministic run varies. Times are simulated.
#[derive(Debug, Clone)]
pub struct DstConfig {
    /// Decides every choice: the network's, the workload's, the faults'.
    pub seed: u64,
    /// How long the workload runs.
    pub duration: Duration,
    /// Concurrent workload tasks (clients as in the chaos suite).
    pub tasks: usize,
    /// Keys `k000`, `k001`, …
    pub keys: usize,
    /// Regions at the start.
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
    /// Each message's one-way latency is drawn from this.
    pub latency: (Duration, Duration),
    /// A deliberate bug, for showing the simulation finds one: the clients
    /// re-send writes that may have been delivered
    /// (`Config::at_least_once_writes`), while the check still expects
    /// each write applied at most once.
    pub resend_undetermined_writes: bool,
}

impl Default for DstConfig {
    fn default() -> Self {
        DstConfig {
            seed: 1,
            duration: Duration::from_secs(10),
            tasks: 8,
            keys: 16,
            regions: 3,
            stores: 3,
            net_faults: NetFault::ALL.to_vec(),
            state_faults: state_faults(),
            fault_interval: (Duration::from_millis(50), Duration::from_millis(400)),
            fault_duration: (Duration::from_millis(100), Duration::from_secs(2)),
            latency: (Duration::from_millis(1), Duration::from_millis(5)),
            resend_undetermined_writes: false,
        }
    }
}

/// What a deterministic run did and found.
#[derive(Debug, Clone)]
pub struct DstReport {
    /// The seed.
    pub seed: u64,
    /// Workload operations (final reads not included).
    pub ops: usize,
    /// Operations that ended undetermined.
    pub undetermined: usize,
    /// Network faults applied, by kind.
    pub net_faults: BTreeMap<NetFault, u64>,
    /// Cluster-state faults applied, by kind.
    pub state_faults: BTreeMap<FaultKind, u64>,
    /// Every fault: start and end (µs on the history's clock) and what.
    pub fault_log: Vec<(u64, u64, String)>,
    /// The check of the history.
    pub check: CheckReport,
    /// Operations past their bound (abandoned ones included).
    pub hangs: usize,
    /// Workload tasks that panicked.
    pub panics: usize,
    /// The history, final reads included.
    pub history: Vec<OpRecord>,
    /// Simulated time the whole run took.
    pub simulated: Duration,
}

impl DstReport {
    /// No violation, nothing undecided, no hang, no panic.
    pub fn is_clean(&self) -> bool {
        self.check.is_clean() && self.hangs == 0 && self.panics == 0
    }

    /// The history, one record per line: what `same seed, same history`
    /// compares.
    pub fn history_text(&self) -> String {
        let mut out = String::new();
        for record in &self.history {
            let _ = writeln!(out, "{record}");
        }
        out
    }

    /// One line of counts.
    pub fn summary(&self) -> String {
        let net: Vec<String> = self
            .net_faults
            .iter()
            .map(|(k, n)| format!("{}={n}", k.name()))
            .collect();
        let state: Vec<String> = self
            .state_faults
            .iter()
            .map(|(k, n)| format!("{k}={n}"))
            .collect();
        format!(
            "seed={} simulated={:.1}s ops={} undetermined={} net=[{}] state=[{}] non_linearizable_keys={} undecided_keys={} lost_writes={} double_applies={} hangs={} panics={} verdict={}",
            self.seed,
            self.simulated.as_secs_f64(),
            self.ops,
            self.undetermined,
            net.join(" "),
            state.join(" "),
            self.check.non_linearizable.len(),
            self.check.undecided.len(),
            self.check.lost_writes.len(),
            self.check.double_applies.len(),
            self.hangs,
            self.panics,
            if self.is_clean() { "clean" } else { "VIOLATION" },
        )
    }

    /// A readable trace of the first violation: what the checker found,
    /// then every record and fault within a second of it, in time order.
    pub fn trace(&self) -> String {
        let mut out = String::new();
        let first = self
            .check
            .non_linearizable
            .first()
            .and_then(|v| v.stuck_at.first().copied())
            .or_else(|| self.check.lost_writes.first().map(|l| l.write))
            .or_else(|| {
                self.check
                    .double_applies
                    .first()
                    .and_then(|d| d.writer.or(d.observations.first().copied()))
            });
        // An operation over its bound is no checker finding: anchor the
        // trace on the longest one instead.
        let longest = || {
            self.history
                .iter()
                .filter(|r| r.task != FINAL_READER)
                .max_by_key(|r| r.complete.unwrap_or(u64::MAX).saturating_sub(r.invoke))
        };
        let (at, what) = match first.and_then(|id| self.history.get(id)) {
            Some(at) => (at, "first violation at"),
            None if self.hangs > 0 => match longest() {
                Some(at) => (at, "over its bound (the longest operation)"),
                None => return "no violation\n".to_owned(),
            },
            None if !self.is_clean() => {
                return format!(
                    "{}\nno single operation to point at: undecided keys {:?}, {} panics\n",
                    self.summary(),
                    self.check
                        .undecided
                        .iter()
                        .map(|k| String::from_utf8_lossy(k).into_owned())
                        .collect::<Vec<_>>(),
                    self.panics
                )
            }
            None => return "no violation\n".to_owned(),
        };
        let _ = writeln!(out, "{}", self.summary());
        let _ = writeln!(out, "{what}: {at}");
        let from = at.invoke.saturating_sub(1_000_000);
        let to = at.complete.unwrap_or(at.invoke) + 1_000_000;
        let mut lines: Vec<(u64, String)> = Vec::new();
        for r in &self.history {
            let end = r.complete.unwrap_or(u64::MAX);
            if end >= from && r.invoke <= to {
                lines.push((r.invoke, format!("  op    {r}")));
            }
        }
        for (start, end, what) in &self.fault_log {
            if *end >= from && *start <= to {
                lines.push((*start, format!("  fault [{start}..{end}µs] {what}")));
            }
        }
        lines.sort();
        for (_, line) in lines {
            let _ = writeln!(out, "{line}");
        }
        out
    }
}

/// What the client host hands back to the driver.
#[derive(Default)]
struct Outcome {
    history: Vec<OpRecord>,
    /// The simulated time the history's clock started at.
    origin: Duration,
    hangs: u64,
    panics: usize,
    state_faults: BTreeMap<FaultKind, u64>,
    state_log: Vec<(u64, u64, String)>,
}

/// A network fault in force, and how to lift it.
struct Active {
    until: Duration,
    fault: NetFault,
    store: u64,
    log: usize,
}

/// Runs the raw workload in a deterministic simulation and checks its
/// history. Same `config`, same report.
pub fn run_raw(config: &DstConfig) -> crate::Result<DstReport> {
    let keys = key_set(config.keys.max(1));
    let regions = config.regions.clamp(1, keys.len());
    let split_keys: Vec<Vec<u8>> = (1..regions)
        .filter_map(|i| keys.get(i * keys.len() / regions).cloned())
        .collect();
    let mut sim = turmoil::Builder::new()
        .simulation_duration(config.duration + Duration::from_secs(600))
        .min_message_latency(config.latency.0)
        .max_message_latency(config.latency.1)
        .rng_seed(config.seed)
        .build();
    let builder = SimCluster::builder()
        .stores(config.stores.max(1))
        .split_keys(split_keys)
        .replicas(3);
    let (cluster, pd) = host_cluster(&mut sim, builder)?;
    let cluster = Arc::new(cluster);

    let stop = Arc::new(AtomicBool::new(false));
    let healed = Arc::new(AtomicBool::new(false));
    let outcome: Arc<Mutex<Option<Outcome>>> = Arc::default();
    sim.client(
        CLIENT,
        client_host(
            config.clone(),
            keys.clone(),
            pd,
            Arc::clone(&cluster),
            Arc::clone(&stop),
            Arc::clone(&healed),
            Arc::clone(&outcome),
        ),
    );

    let mut rng = fastrand::Rng::with_seed(mix_seed(config.seed, 0x004e_4554));
    let draw = |rng: &mut fastrand::Rng, (low, high): (Duration, Duration)| {
        let (low, high) = (low.as_millis() as u64, high.as_millis() as u64);
        Duration::from_millis(rng.u64(low..=high.max(low)))
    };
    let mut next = draw(&mut rng, config.fault_interval);
    let mut active: Vec<Active> = Vec::new();
    let mut log: Vec<(Duration, Option<Duration>, String)> = Vec::new();
    let mut counts: BTreeMap<NetFault, u64> = BTreeMap::new();
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
                lift(&mut sim, &a, config);
                if let Some(entry) = log.get_mut(a.log) {
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
        if now < next || config.net_faults.is_empty() {
            continue;
        }
        next = now + draw(&mut rng, config.fault_interval);
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
        let what = apply(&mut sim, fault, store, &mut rng);
        counts.entry(fault).and_modify(|n| *n += 1).or_insert(1);
        active.push(Active {
            until: now + draw(&mut rng, config.fault_duration),
            fault,
            store,
            log: log.len(),
        });
        log.push((now, None, what));
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
    let check = check_history(&outcome.history, &keys, &options);
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
    Ok(DstReport {
        seed: config.seed,
        ops,
        undetermined,
        net_faults: counts,
        state_faults: outcome.state_faults,
        fault_log,
        check,
        hangs: usize::try_from(outcome.hangs).unwrap_or(usize::MAX),
        panics: outcome.panics,
        history: outcome.history,
        simulated: end,
    })
}

/// Applies `fault` (to `store` where it names one); returns what it did.
fn apply(
    sim: &mut turmoil::Sim<'_>,
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
    }
    match fault {
        NetFault::PartitionPd => format!("{} pd0", fault.name()),
        _ => format!("{} {host}", fault.name()),
    }
}

/// Lifts a network fault.
fn lift(sim: &mut turmoil::Sim<'_>, active: &Active, config: &DstConfig) {
    let host = store_host(active.store);
    match active.fault {
        NetFault::PartitionStore => sim.repair(CLIENT, host.as_str()),
        NetFault::OneWayToStore => sim.repair_oneway(CLIENT, host.as_str()),
        NetFault::OneWayFromStore => sim.repair_oneway(host.as_str(), CLIENT),
        NetFault::PartitionPd => sim.repair(CLIENT, pd_host(0).as_str()),
        NetFault::HoldStore => sim.release(CLIENT, host.as_str()),
        NetFault::LatencySpike => sim.set_max_message_latency(config.latency.1),
        NetFault::CrashStore => sim.bounce(host.as_str()),
    }
}

/// The client host: the workload's clients and workers, the cluster-state
/// injector, and after the driver heals the network, the final reads.
#[allow(clippy::too_many_arguments)]
async fn client_host(
    config: DstConfig,
    keys: Vec<Vec<u8>>,
    pd: Vec<String>,
    cluster: Arc<SimCluster>,
    stop: Arc<AtomicBool>,
    healed: Arc<AtomicBool>,
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
    let short = base
        .clone()
        .with_timeout(Duration::from_millis(250))
        .with_connect_timeout(Duration::from_millis(250))
        .with_request_deadline(Duration::from_secs(3));
    let clients = task_clients(config.tasks, &base, &short, |config| {
        with_transport(transport(), RawClient::new_with_config(pd.clone(), config))
    })
    .await?;
    let hangs = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::new();
    for (task, client) in clients.into_iter().enumerate() {
        let worker = Worker::new(
            task,
            client,
            Arc::clone(&cluster),
            Arc::clone(&recorder),
            config.seed,
            keys.clone(),
            4,
            Duration::from_millis(2),
        );
        workers.push(tokio::spawn(
            worker.run(Arc::clone(&stop), Arc::clone(&hangs)),
        ));
    }

    let mut injector = Injector::new(InjectorConfig {
        seed: mix_seed(config.seed, 0),
        kinds: config.state_faults.clone(),
        interval: config.fault_interval,
        duration: config.fault_duration,
        max_splits: 4,
        keys: keys.clone(),
    });
    let end = tokio::time::Instant::now() + config.duration;
    injector.run(&cluster, end).await;
    let mut panics = 0;
    for worker in workers {
        if let Err(e) = worker.await {
            panics += usize::from(e.is_panic());
        }
    }
    while !healed.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    // Every fault is lifted: read every key with a fresh client.
    let reader = with_transport(transport(), RawClient::new_with_config(pd, base)).await?;
    read_back(&reader, &keys, &recorder).await;
    let state_log = injector
        .windows_since(recorder.started())
        .into_iter()
        .map(|w| (w.start, w.end, format!("{} {}", w.kind, w.target)))
        .collect();
    let done = Outcome {
        history: recorder.records(),
        origin,
        hangs: hangs.load(Ordering::SeqCst),
        panics,
        state_faults: injector.counts().clone(),
        state_log,
    };
    if let Ok(mut slot) = outcome.lock() {
        *slot = Some(done);
    }
    Ok(())
}
