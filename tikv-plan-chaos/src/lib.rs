//! # tikv-plan-chaos
//!
//! The chaos suites of tikv-plan (not published): seeded workloads of
//! tikv-plan clients against a simulated cluster ([`tikv_sim`]) under
//! seeded faults, a recorded history, and checkers for it. `cargo run -p
//! tikv-plan-chaos -- raw|txn --seed S --seconds N` runs one.
//!
//! The raw suite (this module): a seeded workload of concurrent
//! [`RawClient`]s against a [`SimCluster`] while a seeded [`Injector`]
//! applies and heals every fault the cluster has, then a check of the
//! recorded history.
//!
//! What is checked ([`check`]): each key's history is linearizable as a
//! register with compare-and-set and delete (undetermined and abandoned
//! writes may take effect at any time after their invoke, or never); the
//! reads after healing reflect every acknowledged write; no value is applied
//! twice (so no compare-and-swap is); no operation outlives its bound (the
//! client's request deadline plus one RPC timeout and a second of slack;
//! scans walk Regions one plan at a time, so theirs is per Region); no task
//! panics.
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

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;

pub use check::{check_history, CheckOptions, CheckReport, WriteMode};
pub use error::{Error, Result};
pub use history::{OpKind, OpRecord, OpResult, Recorder, FINAL_READER};
pub use inject::{FaultKind, FaultWindow, Injector, InjectorConfig};

use tikv_plan::{Config, RawClient};
use tikv_sim::{Outcome, SimCluster};

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
    /// A pause drawn from `0..=op_pause` between one task's operations.
    pub op_pause: Duration,
    /// Checker options (the write mode follows `at_least_once_writes`).
    pub check: CheckOptions,
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
            op_pause: Duration::from_millis(2),
            check: CheckOptions::default(),
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
    /// The check of the history.
    pub check: CheckReport,
    /// Operations that ran past their bound (including abandoned ones).
    pub hangs: usize,
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
    /// No violation, nothing undecided, no hang, no panic.
    pub fn is_clean(&self) -> bool {
        self.check.is_clean() && self.hangs == 0 && self.panics == 0
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
            .map(|k| format!("{k}={}", self.faults.get(k).copied().unwrap_or(0)))
            .collect();
        format!(
            "seed={} seconds={} ops={} undetermined={} faults={} [{}] drops_fired={} non_linearizable_keys={} undecided_keys={} lost_writes={} double_applies={} double_cas={} hangs={} panics={}",
            self.seed,
            self.duration.as_secs(),
            self.ops,
            self.undetermined,
            self.total_faults(),
            faults.join(" "),
            self.drops_fired,
            self.check.non_linearizable.len(),
            self.check.undecided.len(),
            self.check.lost_writes.len(),
            self.check.double_applies.len(),
            self.check.double_cas(),
            self.hangs,
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

/// One workload client and the bound of its operations.
#[derive(Clone)]
struct TaskClient {
    /// In atomic mode, for everything but range deletes.
    client: RawClient,
    /// The same client (shared connections and caches) without atomic
    /// mode: TiKV cannot delete a range atomically.
    plain: RawClient,
    /// The request deadline plus one RPC timeout plus a second.
    bound: Duration,
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
            .pd_members(config.pd_members.max(1))
            .split_keys(split_keys)
            .replicas(3)
            .start()
            .await?,
    );

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
    let connect = |config: Config| {
        let cluster = Arc::clone(&cluster);
        async move {
            let bound = config.request_deadline + config.timeout + Duration::from_secs(1);
            let plain = RawClient::new_with_config(cluster.pd_endpoints(), config).await?;
            let client = plain.with_atomic_for_cas();
            Ok::<_, tikv_plan::Error>(TaskClient {
                client,
                plain,
                bound,
            })
        }
    };
    let shared_default = connect(base.clone()).await?;
    let shared_short = connect(short.clone()).await?;
    let mut clients = Vec::with_capacity(config.tasks);
    for task in 0..config.tasks {
        clients.push(match task % 4 {
            0 => shared_default.clone(),
            1 => shared_short.clone(),
            2 => connect(short.clone()).await?,
            _ => connect(base.clone()).await?,
        });
    }

    let recorder = Arc::new(Recorder::new());
    let stop = Arc::new(AtomicBool::new(false));
    let hangs = Arc::new(AtomicU64::new(0));
    let mut workers = Vec::with_capacity(config.tasks);
    for (task, client) in clients.into_iter().enumerate() {
        let worker = Worker {
            task,
            client,
            cluster: Arc::clone(&cluster),
            recorder: Arc::clone(&recorder),
            rng: fastrand::Rng::with_seed(mix_seed(config.seed, task as u64 + 1)),
            keys: keys.clone(),
            hot_keys: config.hot_keys.min(keys.len()),
            seen: HashMap::new(),
            seq: 0,
            ops: 0,
            pause: config.op_pause,
        };
        let stop = Arc::clone(&stop);
        let hangs = Arc::clone(&hangs);
        workers.push(tokio::spawn(worker.run(stop, hangs)));
    }

    let injector = Injector::new(InjectorConfig {
        seed: mix_seed(config.seed, 0),
        kinds: config.faults.clone(),
        interval: config.fault_interval,
        duration: config.fault_duration,
        max_splits: config.max_splits,
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
    for key in &keys {
        for _attempt in 0..5 {
            let invoke = recorder.now();
            let result = reader.get(key.clone()).await;
            let complete = Some(recorder.now());
            let kind = OpKind::Get { key: key.clone() };
            let ok = result.is_ok();
            let result = match result {
                Ok(v) => OpResult::Value(v),
                Err(e) => OpResult::failed(&e),
            };
            recorder.record(FINAL_READER, invoke, complete, kind, result);
            if ok {
                break;
            }
        }
    }

    let drops_fired = cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count_outcome(Outcome::Dropped))
        .sum();
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
        check,
        hangs: usize::try_from(hangs.load(Ordering::SeqCst)).unwrap_or(usize::MAX),
        hang_records,
        panics,
        history,
        keys,
    })
}

fn mix_seed(seed: u64, stream: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03)
}

/// One workload task.
struct Worker {
    task: usize,
    client: TaskClient,
    cluster: Arc<SimCluster>,
    recorder: Arc<Recorder>,
    rng: fastrand::Rng,
    keys: Vec<Vec<u8>>,
    hot_keys: usize,
    /// The last value this task saw per key (its compare-and-swap guess).
    seen: HashMap<Vec<u8>, Option<Vec<u8>>>,
    seq: u64,
    /// Operations started so far.
    ops: usize,
    pause: Duration,
}

impl Worker {
    async fn run(mut self, stop: Arc<AtomicBool>, hangs: Arc<AtomicU64>) {
        while !stop.load(Ordering::SeqCst) {
            let kind = self.next_op();
            let bound = self.bound_of(&kind);
            let invoke = self.recorder.now();
            // Generous: an operation past `bound` is already a failure;
            // this only keeps a stuck one from stalling the run.
            let give_up = bound * 2 + Duration::from_secs(5);
            let client = match kind {
                OpKind::DeleteRange { .. } => self.client.plain.clone(),
                _ => self.client.client.clone(),
            };
            let call = perform(client, kind.clone());
            let result = match tokio::time::timeout(give_up, call).await {
                Ok(result) => result,
                Err(_) => OpResult::Abandoned,
            };
            let complete = self.recorder.now();
            let took = Duration::from_micros(complete.saturating_sub(invoke));
            let abandoned = matches!(result, OpResult::Abandoned);
            if took > bound || abandoned {
                hangs.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(
                    "chaos: task {} {} took {took:?}, over its bound of {bound:?}",
                    self.task,
                    kind.name()
                );
            }
            self.remember(&kind, &result);
            let complete = (!abandoned).then_some(complete);
            self.recorder
                .record(self.task, invoke, complete, kind, result);
            if !self.pause.is_zero() {
                let pause = self.rng.u64(0..=self.pause.as_millis() as u64);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    }

    /// The bound of one operation: scans walk Regions one plan at a time,
    /// so theirs is per Region the range overlaps (one more for a split
    /// during the walk).
    fn bound_of(&self, kind: &OpKind) -> Duration {
        match kind {
            OpKind::Scan { start, end, .. } => {
                let overlapping = self
                    .cluster
                    .regions()
                    .iter()
                    .filter(|r| {
                        (r.end_key.is_empty() || r.end_key.as_slice() > start.as_slice())
                            && (end.is_empty() || r.start_key.as_slice() < end.as_slice())
                    })
                    .count() as u32;
                self.client.bound * (overlapping + 1)
            }
            _ => self.client.bound,
        }
    }

    fn value(&mut self) -> Vec<u8> {
        self.seq += 1;
        format!("t{}-{}", self.task, self.seq).into_bytes()
    }

    fn key_index(&mut self) -> usize {
        if self.hot_keys > 0 && self.rng.bool() {
            self.rng.usize(0..self.hot_keys)
        } else {
            self.rng.usize(0..self.keys.len())
        }
    }

    fn key(&mut self) -> Vec<u8> {
        let i = self.key_index();
        self.keys[i].clone()
    }

    fn distinct_keys(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(n);
        for _ in 0..n * 3 {
            if out.len() >= n {
                break;
            }
            let k = self.key();
            if !out.contains(&k) {
                out.push(k);
            }
        }
        out
    }

    /// A range `[keys[i], keys[i + span])` (unbounded past the last key).
    fn range(&mut self, max_span: usize) -> (Vec<u8>, Vec<u8>) {
        let n = self.keys.len();
        let i = self.rng.usize(0..n);
        let span = self.rng.usize(1..=max_span.max(1));
        let end = self.keys.get(i + span).cloned().unwrap_or_default();
        (self.keys[i].clone(), end)
    }

    fn next_op(&mut self) -> OpKind {
        // The first operations of a task go through every kind once, so
        // even a short run tries them all.
        const EVERY_KIND: [u32; 9] = [0, 20, 30, 38, 57, 65, 73, 76, 78];
        let roll = match EVERY_KIND.get(self.ops) {
            Some(roll) => *roll,
            None => self.rng.u32(0..100),
        };
        self.ops += 1;
        match roll {
            0..20 => OpKind::Get { key: self.key() },
            20..30 => {
                let n = self.rng.usize(2..=4);
                OpKind::BatchGet {
                    keys: self.distinct_keys(n),
                }
            }
            30..38 => {
                let (start, end) = self.range(10);
                OpKind::Scan {
                    start,
                    end,
                    limit: self.rng.u32(1..=12),
                }
            }
            38..57 => OpKind::Put {
                key: self.key(),
                value: self.value(),
            },
            57..65 => {
                let n = self.rng.usize(2..=3);
                let keys = self.distinct_keys(n);
                OpKind::BatchPut {
                    pairs: keys.into_iter().map(|k| (k, self.value())).collect(),
                }
            }
            65..73 => OpKind::Delete { key: self.key() },
            73..76 => {
                let n = self.rng.usize(2..=3);
                OpKind::BatchDelete {
                    keys: self.distinct_keys(n),
                }
            }
            76..78 => {
                let (start, end) = self.range(3);
                OpKind::DeleteRange { start, end }
            }
            _ => {
                let key = self.key();
                let expected = if self.rng.u32(0..100) < 85 {
                    self.seen.get(&key).cloned().flatten()
                } else {
                    None
                };
                OpKind::Cas {
                    key,
                    expected,
                    new: self.value(),
                }
            }
        }
    }

    /// Updates this task's guess of each key's value.
    fn remember(&mut self, kind: &OpKind, result: &OpResult) {
        match (kind, result) {
            (OpKind::Get { key }, OpResult::Value(v)) => {
                self.seen.insert(key.clone(), v.clone());
            }
            (OpKind::BatchGet { .. } | OpKind::Scan { .. }, OpResult::Pairs(pairs)) => {
                for (k, v) in pairs {
                    self.seen.insert(k.clone(), Some(v.clone()));
                }
            }
            (OpKind::Put { key, value }, OpResult::Done) => {
                self.seen.insert(key.clone(), Some(value.clone()));
            }
            (OpKind::Delete { key }, OpResult::Done) => {
                self.seen.insert(key.clone(), None);
            }
            (OpKind::Cas { key, new, .. }, OpResult::Cas { previous, swapped }) => {
                let now = if *swapped {
                    Some(new.clone())
                } else {
                    previous.clone()
                };
                self.seen.insert(key.clone(), now);
            }
            _ => {}
        }
    }
}

/// Calls the client for one operation.
fn perform(client: RawClient, kind: OpKind) -> BoxFuture<'static, OpResult> {
    async move {
        let outcome = match kind {
            OpKind::Get { key } => client.get(key).await.map(OpResult::Value),
            OpKind::BatchGet { keys } => client.batch_get(keys).await.map(pairs_result),
            OpKind::Scan { start, end, limit } => {
                let range: tikv_plan::BoundRange = if end.is_empty() {
                    (start..).into()
                } else {
                    (start..end).into()
                };
                client.scan(range, limit).await.map(pairs_result)
            }
            OpKind::Put { key, value } => client.put(key, value).await.map(|()| OpResult::Done),
            OpKind::BatchPut { pairs } => client.batch_put(pairs).await.map(|()| OpResult::Done),
            OpKind::Delete { key } => client.delete(key).await.map(|()| OpResult::Done),
            OpKind::BatchDelete { keys } => {
                client.batch_delete(keys).await.map(|()| OpResult::Done)
            }
            OpKind::DeleteRange { start, end } => {
                let range: tikv_plan::BoundRange = if end.is_empty() {
                    (start..).into()
                } else {
                    (start..end).into()
                };
                client.delete_range(range).await.map(|()| OpResult::Done)
            }
            OpKind::Cas { key, expected, new } => client
                .compare_and_swap(key, expected, new)
                .await
                .map(|(previous, swapped)| OpResult::Cas { previous, swapped }),
        };
        match outcome {
            Ok(result) => result,
            Err(e) => OpResult::failed(&e),
        }
    }
    .boxed()
}

fn pairs_result(pairs: Vec<tikv_plan::KvPair>) -> OpResult {
    OpResult::Pairs(
        pairs
            .into_iter()
            .map(|p| {
                let (k, v): (tikv_plan::Key, tikv_plan::Value) = p.into();
                (k.into(), v)
            })
            .collect(),
    )
}
