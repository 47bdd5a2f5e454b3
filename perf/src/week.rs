//! A week of operations (`--only week`): what a client sees while the
//! cluster is maintained and while a store crashes. Every trial runs on a
//! fresh `tikv-sim` child, one client per trial.
//!
//! - **Rolling restart**: 64 tasks of raw gets and puts, or of 2-key
//!   optimistic transfers, run for a baseline, then through
//!   `rolling-restart DOWN_MS BETWEEN_MS` (each store in turn: PD's
//!   evict-leader moves its leaders off, it goes down, comes back, its
//!   leaders return) and a second after it. Failed calls, and the p99 of
//!   the calls started during the restart against the p99 of those
//!   started in as long a window right before it.
//! - **Crash**: 3000 Regions (each store leads about 1000), the Raft tick
//!   at 100 ms, so an election timeout E is 10 ticks, 1 s. 64 readers read
//!   one key of every Region store 1 leads, round and round; store 1 then
//!   crashes (`down 1`, no eviction) and its Regions elect new leaders
//!   between E and 2E later. The time until every key is readable again,
//!   as a multiple of E, and the PD calls per second meanwhile.

use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clients::{self, Kind};
use crate::csv;
use crate::sim::{Control, RegionLine, Sim};
use crate::workload::{key, value, VALUE_LEN};

/// Concurrent tasks in every scenario.
const TASKS: usize = 64;
/// Regions of a rolling-restart sim: each store leads 8.
const RESTART_REGIONS: usize = 24;
/// Raw keys per Region in a rolling-restart trial.
const KEYS_PER_REGION: usize = 64;
/// Keys each transfer task owns (its transfers never conflict with
/// another task's, so a failed commit is the restart's doing).
const KEYS_PER_TASK: usize = 4;
/// Every account's balance before the first transfer.
const START_BALANCE: i64 = 1000;
/// One call (a get, a put, a whole transfer) longer than this is given up
/// and counted as failed.
const CALL_BOUND: Duration = Duration::from_secs(10);
/// The store that crashes.
const CRASHED_STORE: u64 = 1;
/// The Raft tick of the crash trials.
const CRASH_TICK: Duration = Duration::from_millis(100);
/// `raft-election-timeout-ticks`, TiKV's default, which the sim uses.
const ELECTION_TICKS: u32 = 10;
/// Every key readable this long before a crash trial ends: a later
/// failure would move the figure.
const CONFIRM: Duration = Duration::from_secs(1);

/// The sizes of a run.
#[derive(Debug, Clone)]
pub struct Settings {
    /// Calls before the restart (the window compared is as long as the
    /// restart, taken from the end of this).
    pub baseline: Duration,
    /// How long each store stays down in the rolling restart.
    pub down_ms: u64,
    /// The pause after each store's restart.
    pub between_ms: u64,
    /// Regions of a crash sim (a third led from the crashed store).
    pub crash_regions: usize,
    /// The cap of a crash trial, from the crash.
    pub crash_cap: Duration,
}

impl Settings {
    /// The full sizes, or a smoke run's.
    pub fn new(quick: bool) -> Settings {
        if quick {
            Settings {
                baseline: Duration::from_secs(3),
                down_ms: 300,
                between_ms: 300,
                crash_regions: 300,
                crash_cap: Duration::from_secs(15),
            }
        } else {
            Settings {
                baseline: Duration::from_secs(10),
                down_ms: 1000,
                between_ms: 1000,
                crash_regions: 3000,
                crash_cap: Duration::from_secs(30),
            }
        }
    }

    /// The `key,value` lines of the `-run.csv` files.
    pub fn info(&self) -> Vec<(&'static str, String)> {
        vec![
            ("week_tasks", TASKS.to_string()),
            ("week_baseline_s", self.baseline.as_secs_f64().to_string()),
            ("week_down_ms", self.down_ms.to_string()),
            ("week_between_ms", self.between_ms.to_string()),
            ("week_crash_regions", self.crash_regions.to_string()),
            ("week_crash_tick_ms", CRASH_TICK.as_millis().to_string()),
            ("week_crash_cap_s", self.crash_cap.as_secs().to_string()),
            ("week_call_bound_s", CALL_BOUND.as_secs().to_string()),
        ]
    }
}

/// What the tasks of a rolling-restart trial do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workload {
    /// Raw `get` or `put` (half each) of a random key.
    Raw,
    /// An optimistic transaction moving 1 between two of the task's own
    /// keys: begin, two gets, two puts, commit.
    Transfer,
}

impl Workload {
    fn label(self) -> &'static str {
        match self {
            Workload::Raw => "raw get/put",
            Workload::Transfer => "2-key txn transfer",
        }
    }

    fn name(self) -> &'static str {
        match self {
            Workload::Raw => "raw",
            Workload::Transfer => "transfer",
        }
    }
}

/// The clients this mode compares: tikv-plan's and tikv-client's (the
/// bare call does no routing; tonic's codec adds nothing here).
fn routed(kinds: &[Kind]) -> Vec<Kind> {
    kinds
        .iter()
        .copied()
        .filter(|k| matches!(k, Kind::PlanBatched | Kind::PlanUnary | Kind::Upstream))
        .collect()
}

/// A raw and a transactional client of one crate.
enum WeekClient {
    Plan(tikv_plan::RawClient, tikv_plan::TransactionClient),
    Upstream(tikv_client::RawClient, tikv_client::TransactionClient),
}

impl WeekClient {
    async fn connect(kind: Kind, pd: &str, zero_wait: bool) -> Result<WeekClient, String> {
        let pd = vec![pd.to_owned()];
        match kind {
            Kind::PlanBatched | Kind::PlanUnary => {
                let mode = if kind == Kind::PlanUnary {
                    tikv_plan::RpcMode::Unary
                } else {
                    tikv_plan::RpcMode::Batched
                };
                let mut config = tikv_plan::Config::default().with_rpc_mode(mode);
                if zero_wait {
                    config = config.with_leaderless_wait(Duration::ZERO);
                }
                let fail = |e: tikv_plan::Error| format!("{} cannot connect: {e}", kind.label());
                let raw = tikv_plan::RawClient::new_with_config(pd.clone(), config.clone())
                    .await
                    .map_err(fail)?;
                let txn = tikv_plan::TransactionClient::new_with_config(pd, config)
                    .await
                    .map_err(fail)?;
                Ok(WeekClient::Plan(raw, txn))
            }
            Kind::Upstream => {
                let fail = |e: tikv_client::Error| format!("tikv-client cannot connect: {e}");
                let raw = tikv_client::RawClient::new(pd.clone())
                    .await
                    .map_err(fail)?;
                let txn = tikv_client::TransactionClient::new(pd)
                    .await
                    .map_err(fail)?;
                Ok(WeekClient::Upstream(raw, txn))
            }
            other => Err(format!("{} takes no part in the week", other.label())),
        }
    }

    async fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, String> {
        match self {
            WeekClient::Plan(raw, _) => raw.get(key.to_vec()).await.map_err(|e| e.to_string()),
            WeekClient::Upstream(raw, _) => raw.get(key.to_vec()).await.map_err(|e| e.to_string()),
        }
    }

    async fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        match self {
            WeekClient::Plan(raw, _) => raw
                .put(key.to_vec(), value.to_vec())
                .await
                .map_err(|e| e.to_string()),
            WeekClient::Upstream(raw, _) => raw
                .put(key.to_vec(), value.to_vec())
                .await
                .map_err(|e| e.to_string()),
        }
    }

    async fn transfer(&self, from: &[u8], to: &[u8]) -> Result<(), String> {
        match self {
            WeekClient::Plan(_, txn) => plan_transfer(txn, from, to).await,
            WeekClient::Upstream(_, txn) => upstream_transfer(txn, from, to).await,
        }
    }

    async fn total(&self, keys: &[Vec<u8>]) -> Result<i64, String> {
        match self {
            WeekClient::Plan(_, txn) => plan_total(txn, keys).await,
            WeekClient::Upstream(_, txn) => upstream_total(txn, keys).await,
        }
    }
}

fn balance(found: Option<Vec<u8>>) -> Result<i64, String> {
    let bytes = found.ok_or("account not found")?;
    let array: [u8; 8] = bytes
        .as_slice()
        .try_into()
        .map_err(|_| format!("balance of {} bytes, want 8", bytes.len()))?;
    Ok(i64::from_be_bytes(array))
}

/// The transfer and the total, written once for both crates, whose
/// transactional APIs match. A transaction given up by [`CALL_BOUND`] is
/// dropped unfinished, so the drop check is off (client-rust panics by
/// default).
macro_rules! transactions {
    ($transfer:ident, $total:ident, $krate:ident) => {
        async fn $transfer(
            c: &$krate::TransactionClient,
            from: &[u8],
            to: &[u8],
        ) -> Result<(), String> {
            let text = |e: $krate::Error| e.to_string();
            let options =
                $krate::TransactionOptions::new_optimistic().drop_check($krate::CheckLevel::None);
            let mut txn = c.begin_with_options(options).await.map_err(text)?;
            let steps = async {
                let a = balance(txn.get(from.to_vec()).await.map_err(text)?)?;
                let b = balance(txn.get(to.to_vec()).await.map_err(text)?)?;
                let a = (a - 1).to_be_bytes().to_vec();
                txn.put(from.to_vec(), a).await.map_err(text)?;
                let b = (b + 1).to_be_bytes().to_vec();
                txn.put(to.to_vec(), b).await.map_err(text)
            }
            .await;
            if let Err(e) = steps {
                let _ = txn.rollback().await;
                return Err(e);
            }
            txn.commit().await.map(|_| ()).map_err(text)
        }

        async fn $total(c: &$krate::TransactionClient, keys: &[Vec<u8>]) -> Result<i64, String> {
            let text = |e: $krate::Error| e.to_string();
            let options =
                $krate::TransactionOptions::new_optimistic().drop_check($krate::CheckLevel::None);
            let mut txn = c.begin_with_options(options).await.map_err(text)?;
            let mut sum = 0;
            for k in keys {
                match txn.get(k.clone()).await {
                    Ok(found) => sum += balance(found)?,
                    Err(e) => {
                        let _ = txn.rollback().await;
                        return Err(text(e));
                    }
                }
            }
            txn.rollback().await.map_err(text)?;
            Ok(sum)
        }
    };
}

transactions!(plan_transfer, plan_total, tikv_plan);
transactions!(upstream_transfer, upstream_total, tikv_client);

/// `f`, given up after [`CALL_BOUND`].
async fn bounded<T>(f: impl std::future::Future<Output = Result<T, String>>) -> Result<T, String> {
    match tokio::time::timeout(CALL_BOUND, f).await {
        Ok(result) => result,
        Err(_) => Err(format!("no answer within {CALL_BOUND:?} (given up)")),
    }
}

/// One call of a rolling-restart trial.
#[derive(Debug, Clone, Copy)]
struct Call {
    /// Its start, from the trial's origin.
    start: Duration,
    latency: Duration,
    ok: bool,
}

/// The distinct errors of a trial: text to (count, first seen from the
/// origin).
type Errors = BTreeMap<String, (usize, Duration)>;

/// `text` with what varies between calls of one kind taken out: the key
/// inside `Key(...)` and every run of digits (ids, ports, timestamps).
fn error_kind(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("Key(") {
        out.push_str(&rest[..at + 4]);
        rest = &rest[at + 4..];
        match rest.find(')') {
            Some(end) => {
                out.push_str("..");
                rest = &rest[end..];
            }
            None => rest = "",
        }
    }
    out.push_str(rest);
    let mut kind = String::new();
    for c in out.chars() {
        if c.is_ascii_digit() {
            if !kind.ends_with('N') {
                kind.push('N');
            }
        } else {
            kind.push(c);
        }
    }
    kind.chars().take(240).collect()
}

fn note_error(errors: &mut Errors, text: String, at: Duration) {
    let entry = errors.entry(error_kind(&text)).or_insert((0, at));
    entry.0 += 1;
    entry.1 = entry.1.min(at);
}

fn merge_errors(into: &mut Errors, from: Errors) {
    for (text, (n, at)) in from {
        let entry = into.entry(text).or_insert((0, at));
        entry.0 += n;
        entry.1 = entry.1.min(at);
    }
}

/// The figures of the calls started in one window.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// Its start, from the trial's origin.
    pub from: Duration,
    /// Its length.
    pub length: Duration,
    /// Calls started in it.
    pub calls: usize,
    /// Of those, failed (an error, a wrong answer, or no answer by
    /// [`CALL_BOUND`]).
    pub failed: usize,
    /// Latency percentiles of every call started in it, failed or not.
    pub p50: Duration,
    /// See `p50`.
    pub p99: Duration,
    /// The slowest.
    pub max: Duration,
}

impl Window {
    fn of(calls: &[Call], from: Duration, length: Duration) -> Window {
        let mut latencies: Vec<Duration> = Vec::new();
        let mut failed = 0;
        for c in calls
            .iter()
            .filter(|c| c.start >= from && c.start < from + length)
        {
            latencies.push(c.latency);
            failed += usize::from(!c.ok);
        }
        latencies.sort();
        let at = |q: f64| -> Duration {
            let n = latencies.len();
            if n == 0 {
                return Duration::ZERO;
            }
            latencies[((q * n as f64).ceil() as usize).clamp(1, n) - 1]
        };
        Window {
            from,
            length,
            calls: latencies.len(),
            failed,
            p50: at(0.5),
            p99: at(0.99),
            max: latencies.last().copied().unwrap_or_default(),
        }
    }

    fn per_second(&self) -> f64 {
        self.calls as f64 / self.length.as_secs_f64().max(1e-9)
    }
}

/// A rolling-restart trial.
#[derive(Debug, Clone)]
pub struct Restart {
    /// The client.
    pub kind: Kind,
    /// What its tasks did.
    pub workload: Workload,
    /// As long as the restart, right before it.
    pub before: Window,
    /// From the `rolling-restart` command to its answer.
    pub during: Window,
    /// Failed calls started after the restart.
    pub failed_after: usize,
    /// The sim's answer: `STORE EVICTED RETURNED` per store.
    pub restarts: Vec<String>,
    /// Distinct errors: (text, count, first seen from the restart's start,
    /// in seconds; negative before it).
    pub errors: Vec<(String, usize, f64)>,
    /// Transfers only: the sum of the balances after the trial, and the
    /// sum before.
    pub total: Option<(Result<i64, String>, i64)>,
    /// Calls per 100 ms bucket from the origin: (calls, failed, p99).
    pub buckets: Vec<(usize, usize, Duration)>,
}

/// The keys of a rolling-restart trial: `KEYS_PER_REGION` raw keys per
/// Region; for transfers, `KEYS_PER_TASK` accounts per task, each in
/// another Region.
fn restart_keys(regions: &[RegionLine], workload: Workload) -> Result<Vec<Vec<u8>>, String> {
    let mut keys = Vec::new();
    let count = match workload {
        Workload::Raw => regions.len() * KEYS_PER_REGION,
        Workload::Transfer => TASKS * KEYS_PER_TASK,
    };
    for i in 0..count {
        let region = &regions[i % regions.len()];
        let k = key(&region.key_prefix()?, i);
        if !region.contains(&k) {
            return Err(format!("key {k:?} falls outside Region {}", region.id));
        }
        keys.push(k);
    }
    Ok(keys)
}

/// One task's calls until `stop`: task `task` of [`TASKS`].
async fn restart_task(
    client: Arc<WeekClient>,
    workload: Workload,
    keys: Arc<Vec<Vec<u8>>>,
    task: usize,
    origin: Instant,
    stop: Arc<AtomicBool>,
) -> (Vec<Call>, Errors) {
    let mut rng = fastrand::Rng::with_seed(task as u64 + 1);
    let the_value = value();
    let mut calls = Vec::new();
    let mut errors = Errors::new();
    // A transfer task's accounts: every TASKS-th key from its own index,
    // so each lies in another Region.
    let own: Vec<&[u8]> = (0..KEYS_PER_TASK)
        .filter_map(|j| keys.get(task + j * TASKS).map(Vec::as_slice))
        .collect();
    while !stop.load(Ordering::Relaxed) {
        let start = origin.elapsed();
        let result = match workload {
            Workload::Raw => {
                let k = &keys[rng.usize(..keys.len())];
                if rng.bool() {
                    bounded(client.put(k, &the_value)).await
                } else {
                    match bounded(client.get(k)).await {
                        Ok(Some(v)) if v.len() == VALUE_LEN => Ok(()),
                        Ok(other) => {
                            Err(format!("wrong answer: {:?} bytes", other.map(|v| v.len())))
                        }
                        Err(e) => Err(e),
                    }
                }
            }
            Workload::Transfer if own.len() >= 2 => {
                let from = rng.usize(..own.len());
                let to = (from + 1 + rng.usize(..own.len() - 1)) % own.len();
                bounded(client.transfer(own[from], own[to])).await
            }
            Workload::Transfer => Err("fewer than two accounts".to_owned()),
        };
        let latency = origin.elapsed() - start;
        if let Err(e) = &result {
            note_error(&mut errors, e.clone(), start);
        }
        calls.push(Call {
            start,
            latency,
            ok: result.is_ok(),
        });
    }
    (calls, errors)
}

/// Runs [`TASKS`] tasks of `workload` until `stop`, their calls and errors
/// gathered.
fn spawn_tasks(
    client: &Arc<WeekClient>,
    workload: Workload,
    keys: &Arc<Vec<Vec<u8>>>,
    origin: Instant,
    stop: &Arc<AtomicBool>,
) -> tokio::task::JoinSet<(Vec<Call>, Errors)> {
    let mut set = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        set.spawn(restart_task(
            client.clone(),
            workload,
            keys.clone(),
            task,
            origin,
            stop.clone(),
        ));
    }
    set
}

async fn gather(mut set: tokio::task::JoinSet<(Vec<Call>, Errors)>) -> (Vec<Call>, Errors) {
    let mut calls = Vec::new();
    let mut errors = Errors::new();
    // Each task ends after its current call, which CALL_BOUND bounds.
    let _ = tokio::time::timeout(CALL_BOUND + Duration::from_secs(5), async {
        while let Some(joined) = set.join_next().await {
            if let Ok((c, e)) = joined {
                calls.extend(c);
                merge_errors(&mut errors, e);
            }
        }
    })
    .await;
    set.abort_all();
    (calls, errors)
}

/// One rolling-restart trial of `kind` running `workload`.
pub async fn rolling_restart(
    sim_binary: &Path,
    kind: Kind,
    workload: Workload,
    settings: &Settings,
) -> Result<Restart, String> {
    let sim = Sim::start(sim_binary, RESTART_REGIONS)?;
    let mut control = Control::connect(&sim.control).await?;
    let regions = control.regions().await?;
    let keys = restart_keys(&regions, workload)?;
    let loader = clients::loader(&sim.pd).await?;
    let start_total = match workload {
        Workload::Raw => {
            let pairs = keys.iter().map(|k| (k.clone(), value())).collect();
            clients::load(&loader, pairs, 512).await?;
            None
        }
        Workload::Transfer => {
            let start = START_BALANCE.to_be_bytes().to_vec();
            let pairs = keys.iter().map(|k| (k.clone(), start.clone())).collect();
            clients::load_txn(&loader, pairs, 256).await?;
            Some(START_BALANCE * keys.len() as i64)
        }
    };
    drop(loader);

    let client = Arc::new(WeekClient::connect(kind, &sim.pd, false).await?);
    let keys = Arc::new(keys);
    // Warm-up: caches filled, connections open.
    let stop = Arc::new(AtomicBool::new(false));
    let warm = spawn_tasks(&client, workload, &keys, Instant::now(), &stop);
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.store(true, Ordering::Relaxed);
    let (warm_calls, warm_errors) = gather(warm).await;
    if !warm_calls.iter().any(|c| c.ok) {
        return Err(format!(
            "{} cannot run {} on a healthy cluster: {:?}",
            kind.label(),
            workload.label(),
            warm_errors.keys().next()
        ));
    }

    let stop = Arc::new(AtomicBool::new(false));
    let origin = Instant::now();
    let set = spawn_tasks(&client, workload, &keys, origin, &stop);
    tokio::time::sleep(settings.baseline).await;
    let restart_start = origin.elapsed();
    let restarts = control
        .command(&format!(
            "rolling-restart {} {}",
            settings.down_ms, settings.between_ms
        ))
        .await?;
    let restart_end = origin.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let (calls, errors) = gather(set).await;

    let length = restart_end - restart_start;
    let before_from = restart_start.saturating_sub(length);
    let before = Window::of(&calls, before_from, restart_start - before_from);
    let during = Window::of(&calls, restart_start, length);
    let failed_after = calls
        .iter()
        .filter(|c| c.start >= restart_end && !c.ok)
        .count();
    let total = match start_total {
        Some(want) => Some((bounded(client.total(&keys)).await, want)),
        None => None,
    };
    let bucket = Duration::from_millis(100);
    let buckets = (0..)
        .map(|i| bucket * i)
        .take_while(|from| *from < origin.elapsed())
        .map(|from| {
            let w = Window::of(&calls, from, bucket);
            (w.calls, w.failed, w.p99)
        })
        .collect();
    let since = |at: Duration| at.as_secs_f64() - restart_start.as_secs_f64();
    Ok(Restart {
        kind,
        workload,
        before,
        during,
        failed_after,
        restarts,
        errors: errors
            .into_iter()
            .map(|(text, (n, at))| (text, n, since(at)))
            .collect(),
        total,
        buckets,
    })
}

/// What the readers of a crash trial know of one key.
#[derive(Debug, Clone, Copy, Default)]
struct KeyState {
    /// The end of its last failed read.
    last_failure: Option<Instant>,
    /// The end of the first successful read sent after the store was down
    /// and after its last failure.
    readable_at: Option<Instant>,
}

/// What the readers share.
struct Readers {
    keys: Vec<KeyState>,
    crash: Option<Instant>,
    /// When the `down` command answered.
    down: Option<Instant>,
    failed_after_crash: usize,
    errors: Errors,
}

/// A crash trial.
#[derive(Debug, Clone)]
pub struct Crash {
    /// The client as the table shows it.
    pub client: String,
    /// Keys read, one per Region the crashed store led.
    pub keys: usize,
    /// From the crash until every key was read and stayed readable; `None`
    /// if not by the cap.
    pub readable: Option<Duration>,
    /// Keys readable by the end.
    pub readable_keys: usize,
    /// From the crash until the sim had no Region left electing.
    pub elected: Option<Duration>,
    /// Failed reads after the crash.
    pub failed: usize,
    /// PD calls from the crash until every key was readable (or the cap),
    /// by method, and that window.
    pub pd_calls: Vec<(String, u64)>,
    /// See `pd_calls`.
    pub pd_window: Duration,
    /// Distinct errors: (text, count, first seen from the crash, s).
    pub errors: Vec<(String, usize, f64)>,
    /// When each key became readable again, from the crash, sorted.
    pub readable_at: Vec<Duration>,
}

/// The election timeout of the crash trials.
pub fn election_timeout() -> Duration {
    CRASH_TICK * ELECTION_TICKS
}

async fn pd_calls(control: &mut Control) -> Result<HashMap<String, u64>, String> {
    let mut calls = HashMap::new();
    for line in control.command("pd-calls").await? {
        let mut words = line.split_whitespace();
        if let (Some(method), Some(n)) = (words.next(), words.next().and_then(|n| n.parse().ok())) {
            calls.insert(method.to_owned(), n);
        }
    }
    Ok(calls)
}

/// One crash trial of `kind`; `zero_wait`: with
/// `Config::leaderless_wait` zero (tikv-plan only), client-rust's rule.
pub async fn crash(
    sim_binary: &Path,
    kind: Kind,
    zero_wait: bool,
    settings: &Settings,
) -> Result<Crash, String> {
    let sim = Sim::start(sim_binary, settings.crash_regions)?;
    let mut control = Control::connect(&sim.control).await?;
    control
        .command(&format!("raft-tick {}", CRASH_TICK.as_millis()))
        .await?;
    let regions = control.regions().await?;
    let mut keys = Vec::new();
    for r in regions
        .iter()
        .filter(|r| r.leader.map(|l| l.store_id) == Some(CRASHED_STORE))
    {
        let k = key(&r.key_prefix()?, 0);
        if !r.contains(&k) {
            return Err(format!("key {k:?} falls outside Region {}", r.id));
        }
        keys.push(k);
    }
    if keys.is_empty() {
        return Err(format!("no Region led from store {CRASHED_STORE}"));
    }
    let loader = clients::loader(&sim.pd).await?;
    let pairs = keys.iter().map(|k| (k.clone(), value())).collect();
    clients::load(&loader, pairs, 256).await?;
    drop(loader);

    let client = Arc::new(WeekClient::connect(kind, &sim.pd, zero_wait).await?);
    let keys = Arc::new(keys);
    // Warm-up: every key read once, so the client caches every leader.
    for chunk in keys.chunks(TASKS) {
        let reads = chunk.iter().map(|k| bounded(client.get(k)));
        for (k, read) in chunk.iter().zip(futures::future::join_all(reads).await) {
            match read {
                Ok(Some(_)) => {}
                other => return Err(format!("warm-up read of {k:?}: {other:?}")),
            }
        }
    }

    let shared = Arc::new(Mutex::new(Readers {
        keys: vec![KeyState::default(); keys.len()],
        crash: None,
        down: None,
        failed_after_crash: 0,
        errors: Errors::new(),
    }));
    let stop = Arc::new(AtomicBool::new(false));
    let mut set = tokio::task::JoinSet::new();
    for task in 0..TASKS {
        let (client, keys, shared, stop) =
            (client.clone(), keys.clone(), shared.clone(), stop.clone());
        set.spawn(async move {
            // Task `task` reads keys task, task + TASKS, ... in turn.
            let mine: Vec<usize> = (task..keys.len()).step_by(TASKS).collect();
            for i in mine.iter().cycle() {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let sent = Instant::now();
                let read = bounded(client.get(&keys[*i])).await;
                let done = Instant::now();
                let Ok(mut s) = shared.lock() else { return };
                let crash = s.crash;
                let after_crash = crash.is_some_and(|c| done > c);
                match read {
                    Ok(Some(_)) => {
                        let down = s.down;
                        let state = &mut s.keys[*i];
                        let fresh = down.is_some_and(|d| sent >= d)
                            && state.last_failure.is_none_or(|f| sent >= f);
                        if fresh && state.readable_at.is_none() {
                            state.readable_at = Some(done);
                        }
                    }
                    failed => {
                        s.keys[*i] = KeyState {
                            last_failure: Some(done),
                            readable_at: None,
                        };
                        if after_crash {
                            s.failed_after_crash += 1;
                            let text = match failed {
                                Err(e) => e,
                                Ok(_) => "key not found".to_owned(),
                            };
                            let at = crash.map(|c| done - c).unwrap_or_default();
                            note_error(&mut s.errors, text, at);
                        }
                    }
                }
            }
        });
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let pd_before = pd_calls(&mut control).await?;
    // Times run from the command's sending; a read counts as the key's
    // recovery only if it was sent once the store was surely down (the
    // command answered): one sent between the two may have been served
    // before the crash.
    let crashed = Instant::now();
    if let Ok(mut s) = shared.lock() {
        s.crash = Some(crashed);
    }
    control.command(&format!("down {CRASHED_STORE}")).await?;
    let down = Instant::now();
    if let Ok(mut s) = shared.lock() {
        s.down = Some(down);
    }
    let mut elected = None;
    let mut pd_after: Option<(HashMap<String, u64>, Duration)> = None;
    let readable = loop {
        tokio::time::sleep(Duration::from_millis(20)).await;
        if elected.is_none() && control.command("electing").await?.is_empty() {
            elected = Some(crashed.elapsed());
        }
        let latest = shared.lock().ok().and_then(|s| {
            s.keys
                .iter()
                .map(|k| k.readable_at)
                .collect::<Option<Vec<_>>>()
                .and_then(|at| at.into_iter().max())
        });
        match latest {
            Some(at) => {
                if pd_after.is_none() {
                    pd_after = Some((pd_calls(&mut control).await?, crashed.elapsed()));
                }
                if at.elapsed() >= CONFIRM {
                    break Some(at - crashed);
                }
            }
            None => pd_after = None,
        }
        if crashed.elapsed() >= settings.crash_cap {
            break None;
        }
    };
    stop.store(true, Ordering::Relaxed);
    let (pd_after, pd_window) = match pd_after {
        Some(after) => after,
        None => (pd_calls(&mut control).await?, crashed.elapsed()),
    };
    let _ = tokio::time::timeout(CALL_BOUND + Duration::from_secs(5), async {
        while set.join_next().await.is_some() {}
    })
    .await;
    set.abort_all();

    let mut pd: Vec<(String, u64)> = pd_after
        .into_iter()
        .map(|(method, n)| {
            let before = pd_before.get(&method).copied().unwrap_or(0);
            (method, n.saturating_sub(before))
        })
        .filter(|(_, n)| *n > 0)
        .collect();
    pd.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let s = shared.lock().map_err(|_| "a reader panicked".to_owned())?;
    let mut readable_at: Vec<Duration> = s
        .keys
        .iter()
        .filter_map(|k| k.readable_at.map(|at| at - crashed))
        .collect();
    readable_at.sort();
    Ok(Crash {
        client: if zero_wait {
            format!("{}, leaderless_wait 0", kind.label())
        } else {
            kind.label().to_owned()
        },
        keys: keys.len(),
        readable,
        readable_keys: readable_at.len(),
        elected,
        failed: s.failed_after_crash,
        pd_calls: pd,
        pd_window,
        errors: s
            .errors
            .iter()
            .map(|(text, (n, at))| (text.clone(), *n, at.as_secs_f64()))
            .collect(),
        readable_at,
    })
}

fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms >= 100.0 {
        format!("{ms:.0} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// The rolling-restart table and the errors under it.
pub fn restart_table(runs: &[Restart], settings: &Settings) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "#### Rolling restart ({TASKS} tasks; each store: leaders evicted, down {} ms, up, \
         leaders back, then {} ms)\n",
        settings.down_ms, settings.between_ms
    );
    let _ = writeln!(
        out,
        "| workload | client | restart took | calls before / during | failed before / during / after \
         | p50 before / during | p99 before | p99 during | p99 during / before | max during | calls/s before / during |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for r in runs {
        let ratio = r.during.p99.as_secs_f64() / r.before.p99.as_secs_f64().max(1e-9);
        let _ = writeln!(
            out,
            "| {} | {} | {:.2} s | {} / {} | {} / {} / {} | {} / {} | {} | {} | {ratio:.1}x | {} | {:.0} / {:.0} |",
            r.workload.label(),
            r.kind.label(),
            r.during.length.as_secs_f64(),
            r.before.calls,
            r.during.calls,
            r.before.failed,
            r.during.failed,
            r.failed_after,
            ms(r.before.p50),
            ms(r.during.p50),
            ms(r.before.p99),
            ms(r.during.p99),
            ms(r.during.max),
            r.before.per_second(),
            r.during.per_second(),
        );
    }
    let _ = writeln!(out);
    for r in runs {
        if let Some((total, want)) = &r.total {
            let text = match total {
                Ok(sum) if sum == want => format!("balances sum to {sum}, as before"),
                Ok(sum) => format!("balances sum to {sum}, want {want}: MONEY CHANGED"),
                Err(e) => format!("the balances could not be read: {e}"),
            };
            let _ = writeln!(out, "- {}, transfers: {text}.", r.kind.label());
        }
        for (text, n, at) in &r.errors {
            let _ = writeln!(
                out,
                "- {}, {}: {n} x `{text}`, first {at:+.2} s from the restart's start",
                r.kind.label(),
                r.workload.label(),
            );
        }
    }
    if let Some(r) = runs.first() {
        let _ = writeln!(
            out,
            "- the sim's answer (store, leaders evicted, leaders returned): {}",
            r.restarts.join("; ")
        );
    }
    out
}

/// The crash table and the errors under it.
pub fn crash_table(runs: &[Crash], settings: &Settings) -> String {
    let e = election_timeout();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "#### Crash of a store leading {} Regions ({} Regions, Raft tick {} ms: E = {} ms; {TASKS} \
         readers; cap {} s)\n",
        runs.first().map(|r| r.keys).unwrap_or(0),
        settings.crash_regions,
        CRASH_TICK.as_millis(),
        e.as_millis(),
        settings.crash_cap.as_secs()
    );
    let _ = writeln!(
        out,
        "| client | every key readable again | in E | last Region elected (sim) | in E \
         | failed reads | PD calls in the window | PD calls/s | PD calls by method |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|");
    let in_e = |d: Duration| d.as_secs_f64() / e.as_secs_f64();
    for r in runs {
        let (readable, readable_e) = match r.readable {
            Some(d) => (
                format!("{:.2} s", d.as_secs_f64()),
                format!("{:.2}", in_e(d)),
            ),
            None => (
                format!(
                    "not in {} s ({} of {} keys)",
                    settings.crash_cap.as_secs(),
                    r.readable_keys,
                    r.keys
                ),
                "-".to_owned(),
            ),
        };
        let (elected, elected_e) = match r.elected {
            Some(d) => (
                format!("{:.2} s", d.as_secs_f64()),
                format!("{:.2}", in_e(d)),
            ),
            None => ("not by the end".to_owned(), "-".to_owned()),
        };
        let total: u64 = r.pd_calls.iter().map(|(_, n)| n).sum();
        let methods: Vec<String> = r.pd_calls.iter().map(|(m, n)| format!("{m} {n}")).collect();
        let _ = writeln!(
            out,
            "| {} | {readable} | {readable_e} | {elected} | {elected_e} | {} | {total} in {:.2} s \
             | {:.0} | {} |",
            r.client,
            r.failed,
            r.pd_window.as_secs_f64(),
            total as f64 / r.pd_window.as_secs_f64().max(1e-9),
            methods.join(", ")
        );
    }
    let _ = writeln!(out);
    for r in runs {
        let at = |q: f64| -> String {
            let n = r.readable_at.len();
            if n == 0 {
                return "-".to_owned();
            }
            let i = ((q * n as f64).ceil() as usize).clamp(1, n) - 1;
            format!("{:.2} s", r.readable_at[i].as_secs_f64())
        };
        let _ = writeln!(
            out,
            "- {}: keys readable again: first {}, half {}, 99 % {}",
            r.client,
            at(0.0),
            at(0.5),
            at(0.99)
        );
        for (text, n, at) in &r.errors {
            let _ = writeln!(
                out,
                "- {}: {n} x `{text}`, first {at:.2} s after the crash",
                r.client
            );
        }
    }
    out
}

/// `week-restart.csv`: per trial and 100 ms bucket, the calls started in
/// it, the failed ones and their p99.
fn restart_csv(runs: &[Restart]) -> String {
    let mut out =
        "client,workload,bucket_start_s,calls,failed,p99_ms,restart_start_s,restart_end_s\n"
            .to_owned();
    for r in runs {
        for (i, (calls, failed, p99)) in r.buckets.iter().enumerate() {
            let _ = writeln!(
                out,
                "{},{},{:.1},{calls},{failed},{:.3},{:.3},{:.3}",
                csv::field(r.kind.label()),
                r.workload.name(),
                i as f64 / 10.0,
                p99.as_secs_f64() * 1e3,
                r.during.from.as_secs_f64(),
                (r.during.from + r.during.length).as_secs_f64(),
            );
        }
    }
    out
}

/// `week-crash.csv`: per trial and key, when it was readable again.
fn crash_csv(runs: &[Crash]) -> String {
    let mut out = "client,keys,election_timeout_ms,key,readable_ms\n".to_owned();
    for r in runs {
        for (i, at) in r.readable_at.iter().enumerate() {
            let _ = writeln!(
                out,
                "{},{},{},{},{:.3}",
                csv::field(&r.client),
                r.keys,
                election_timeout().as_millis(),
                i + 1,
                at.as_secs_f64() * 1e3
            );
        }
    }
    out
}

/// Both scenarios for every routed client of `kinds`, their tables
/// printed (and CSV files written) as each completes.
pub async fn run(
    sim_binary: &Path,
    kinds: &[Kind],
    quick: bool,
    csv_dir: Option<&Path>,
    info: &str,
) -> Result<(), String> {
    let settings = Settings::new(quick);
    let mut info = info.to_owned();
    for (k, v) in settings.info() {
        let _ = writeln!(info, "{k},{}", csv::field(&v));
    }
    let kinds = routed(kinds);
    let mut restarts = Vec::new();
    for workload in [Workload::Raw, Workload::Transfer] {
        for &kind in &kinds {
            eprintln!("rolling restart: {}, {}", kind.label(), workload.label());
            restarts.push(rolling_restart(sim_binary, kind, workload, &settings).await?);
        }
    }
    println!("{}", restart_table(&restarts, &settings));
    if let Some(dir) = csv_dir {
        csv::write_family(dir, "week-restart", &restart_csv(&restarts), &info)?;
    }
    let mut crashes = Vec::new();
    for &kind in &kinds {
        eprintln!("crash: {}", kind.label());
        crashes.push(crash(sim_binary, kind, false, &settings).await?);
    }
    // Client-rust's rule (every leaderless round spends the Region
    // backoff) beside the election wait.
    if kinds.contains(&Kind::PlanBatched) {
        eprintln!("crash: {}, leaderless_wait 0", Kind::PlanBatched.label());
        crashes.push(crash(sim_binary, Kind::PlanBatched, true, &settings).await?);
    }
    println!("{}", crash_table(&crashes, &settings));
    if let Some(dir) = csv_dir {
        csv::write_family(dir, "week-crash", &crash_csv(&crashes), &info)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(start_ms: u64, latency_ms: u64, ok: bool) -> Call {
        Call {
            start: Duration::from_millis(start_ms),
            latency: Duration::from_millis(latency_ms),
            ok,
        }
    }

    #[test]
    fn a_window_counts_the_calls_started_in_it() {
        let calls: Vec<Call> = (0..100).map(|i| call(i * 10, i + 1, i % 10 != 0)).collect();
        let w = Window::of(&calls, Duration::ZERO, Duration::from_millis(1000));
        assert_eq!((w.calls, w.failed), (100, 10));
        assert_eq!(w.p50, Duration::from_millis(50));
        assert_eq!(w.p99, Duration::from_millis(99));
        assert_eq!(w.max, Duration::from_millis(100));
        let late = Window::of(
            &calls,
            Duration::from_millis(500),
            Duration::from_millis(100),
        );
        assert_eq!((late.calls, late.failed), (10, 1));
        let none = Window::of(&calls, Duration::from_secs(5), Duration::from_secs(1));
        assert_eq!((none.calls, none.p99), (0, Duration::ZERO));
    }

    #[test]
    fn errors_group_by_text_and_keep_the_first_time() {
        let mut errors = Errors::new();
        note_error(&mut errors, "a".to_owned(), Duration::from_secs(2));
        note_error(&mut errors, "a".to_owned(), Duration::from_secs(1));
        let mut more = Errors::new();
        note_error(&mut more, "a".to_owned(), Duration::from_millis(500));
        merge_errors(&mut errors, more);
        assert_eq!(errors.get("a"), Some(&(3, Duration::from_millis(500))));
    }

    #[test]
    fn an_error_kind_leaves_out_keys_and_numbers() {
        assert_eq!(
            error_kind("raw_put of key Key(4C28303031) (region 1044, store 3) at 127.0.0.1:38861"),
            "raw_put of key Key(..) (region N, store N) at N.N.N.N:N"
        );
        assert_eq!(error_kind("Key(unclosed"), "Key(");
    }

    #[test]
    fn balances_are_eight_bytes() {
        assert_eq!(balance(Some(7i64.to_be_bytes().to_vec())), Ok(7));
        assert!(balance(Some(vec![1, 2])).is_err());
        assert!(balance(None).is_err());
    }
}
