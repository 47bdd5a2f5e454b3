//! The transactional chaos suite: seeded transactional workloads against a
//! [`SimCluster`] while the [`Injector`] applies every fault the raw suite
//! uses plus the transactional ones ([`FaultKind::TXN`]: TSO jumps that
//! expire locks, dropped responses of every transactional write RPC), then
//! a check of the recorded history ([`check_txn_history`]).
//!
//! Three workloads run side by side, on disjoint keys:
//!
//! - **list-append**: 1 to 4 reads (`get`, `batch_get`, `scan`,
//!   `get_for_update`) and appends (read the list, write it back with a new
//!   element, unique in the run) over a few list keys, in every mode
//!   ([`TxnMode`]) in turn, plus read-only snapshots; some transactions
//!   lock what they read, write with `insert` or `batch_mutate`, or insert
//!   and delete a scratch key that must never be seen.
//! - **bank**: transfers between two accounts and auditors reading every
//!   account in one snapshot or optimistic transaction.
//! - **long pessimistic** transactions: lock an account pair or a list,
//!   hold the locks while the TSO moves past their TTL (some jump it
//!   themselves), then write and commit. Another transaction resolving the
//!   expired locks and writing in between must make the long one fail; if
//!   it commits anyway, the check finds a lost update.
//!
//! Every transaction is one [`TxnRecord`] holding exactly what the client
//! returned: the reads and writes that succeeded, and `commit()`'s answer
//! (committed with its timestamp, aborted, undetermined) or
//! [`TxnOutcome::Abandoned`] when it outlived its bound (a hang).
//!
//! ```no_run
//! # async fn demo() -> tikv_plan_chaos::Result<()> {
//! use std::time::Duration;
//! use tikv_plan_chaos::txn::{run, TxnChaosConfig};
//!
//! let report = run(TxnChaosConfig {
//!     seed: 7,
//!     duration: Duration::from_secs(10),
//!     ..TxnChaosConfig::default()
//! })
//! .await?;
//! println!("{}", report.summary());
//! print!("{}", report.describe_violations());
//! # Ok(())
//! # }
//! ```
//!
//! This file is long because the three workloads, the final reads and the
//! report of one run share the run's recorder, clients and key layout.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;

use super::history::{undetermined_anywhere, FINAL_READER};
use super::inject::{FaultKind, FaultWindow, Injector, InjectorConfig};
use super::run_injector;
use super::txn_check::{check_txn_history, TxnCheckOptions, TxnCheckReport};
use super::txn_history::{TxnMode, TxnOp, TxnOutcome, TxnRecord, TxnRecorder, TxnWorkload};
use tikv_plan::transaction::HeartbeatOption;
use tikv_plan::{
    CheckLevel, Config, Error, Mutation, ReplicaRead, Result, Snapshot, Timestamp, TimestampExt,
    Transaction, TransactionClient, TransactionOptions,
};
use tikv_sim::codec::encode_bytes;
use tikv_sim::{LockWaitStats, Outcome, SimCluster};

/// The task of the transaction that gives every account its initial
/// balance, before the workload starts.
pub const SETUP_TASK: usize = usize::MAX - 1;

/// The task of the reads after healing ([`FINAL_READER`]).
pub const FINAL_TASK: usize = FINAL_READER;

pub use crate::txn_report::describe_record;

/// The resolved-ts interval of a run with stale reads: a snapshot 500 ms
/// or 2 s back is usually below a replica's safe-ts, one at now never.
const STALE_RESOLVED_TS_INTERVAL: Duration = Duration::from_millis(250);

/// Everything a transactional chaos run can vary.
#[derive(Debug, Clone)]
pub struct TxnChaosConfig {
    /// Seeds the workload and the injector.
    pub seed: u64,
    /// How long the workload runs (healing, final reads and the check come
    /// after).
    pub duration: Duration,
    /// Workload tasks: even ones run list-append, odd ones the bank.
    pub tasks: usize,
    /// Tasks running long pessimistic transactions (besides `tasks`).
    pub long_tasks: usize,
    /// Tasks running pessimistic transfers among the first
    /// [`HOT_ACCOUNTS`] accounts only, locking the two in random order
    /// (besides `tasks`): contended, and prone to deadlock.
    pub hot_tasks: usize,
    /// List keys `list/00`, `list/01`, …
    pub list_keys: usize,
    /// Scratch keys `list/x0`, … (inserted and deleted in one transaction,
    /// never visible).
    pub scratch_keys: usize,
    /// Bank accounts `acct/00`, `acct/01`, …
    pub accounts: usize,
    /// Every account's balance at the start.
    pub initial_balance: i64,
    /// Stores.
    pub stores: u64,
    /// PD members.
    pub pd_members: usize,
    /// Regions at the start (split evenly over the keys, at encoded keys).
    pub regions: usize,
    /// How the clients send requests.
    pub rpc_mode: tikv_plan::RpcMode,
    /// RPC (and connect) timeout of the workload clients.
    pub timeout: Duration,
    /// Request deadline of the workload clients.
    pub deadline: Duration,
    /// The faults and their weights ([`InjectorConfig::txn_kinds`]).
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
    /// A pause drawn from `0..=txn_pause` between one task's transactions.
    pub txn_pause: Duration,
    /// How long a long pessimistic transaction holds its locks, drawn from
    /// this range.
    pub long_hold: (Duration, Duration),
    /// The percentage of long pessimistic transactions that move the TSO
    /// past their lock's TTL themselves right after locking (the others
    /// rely on the injector's TSO jumps).
    pub long_expire_percent: u32,
    /// Read-only snapshots are often stale reads, 0 to 2 s in the past,
    /// served by followers or any replica at their safe-ts (the resolved
    /// ts ticks every 250 ms), and stores lag ([`FaultKind::Lag`], added to
    /// the faults unless they hold it). The checker holds each snapshot to
    /// its own timestamp.
    pub stale_reads: bool,
}

impl Default for TxnChaosConfig {
    fn default() -> Self {
        TxnChaosConfig {
            seed: 1,
            duration: Duration::from_secs(10),
            tasks: 8,
            long_tasks: 2,
            hot_tasks: 4,
            list_keys: 8,
            scratch_keys: 3,
            accounts: 8,
            initial_balance: 100,
            stores: 3,
            pd_members: 3,
            regions: 4,
            rpc_mode: tikv_plan::RpcMode::default(),
            timeout: Duration::from_millis(250),
            deadline: Duration::from_secs(3),
            faults: InjectorConfig::txn_kinds(),
            fault_interval: (Duration::from_millis(20), Duration::from_millis(120)),
            fault_duration: (Duration::from_millis(100), Duration::from_millis(1200)),
            max_splits: 6,
            scheduler: Some(crate::DEFAULT_SCHEDULER_PAUSE),
            txn_pause: Duration::from_millis(3),
            long_hold: (Duration::from_millis(300), Duration::from_millis(1500)),
            long_expire_percent: 50,
            stale_reads: false,
        }
    }
}

/// What a transactional chaos run did and found.
#[derive(Debug, Clone)]
pub struct TxnChaosReport {
    /// The seed.
    pub seed: u64,
    /// How long the workload ran.
    pub duration: Duration,
    /// Workload transactions (the setup and the final reads not included).
    pub transactions: usize,
    /// Workload transactions by workload, mode and outcome name
    /// (`committed`, `aborted`, `undetermined`, `abandoned`).
    pub by_mode: BTreeMap<(TxnWorkload, TxnMode, &'static str), usize>,
    /// Long pessimistic transactions by outcome name.
    pub long_by_outcome: BTreeMap<&'static str, usize>,
    /// Long pessimistic transactions that moved the TSO past their own
    /// lock's TTL.
    pub forced_expiries: u64,
    /// Workload transactions whose commit ended undetermined.
    pub undetermined: usize,
    /// Faults applied, by kind.
    pub faults: BTreeMap<FaultKind, u64>,
    /// Dropped responses that fired (requests applied whose answer was
    /// dropped).
    pub drops_fired: u64,
    /// Calls the stores forwarded for the clients (`tikv-forwarded-host`).
    pub forwarded: u64,
    /// Reads a replica (not the leader) served: stale snapshot reads.
    pub replica_served: u64,
    /// Calls (and BatchCommands streams) the TiFlash stores received: a
    /// clean run has none.
    pub tiflash_calls: u64,
    /// Every fault as applied, on the history's clock (`--dump` writes
    /// them after the transactions).
    pub fault_windows: Vec<FaultWindow>,
    /// Automatic heartbeats the workload clients sent, and those that
    /// failed.
    pub heartbeats: (u64, u64),
    /// `CheckTxnStatus` calls of the workload clients' lock resolution.
    pub lock_checks: u64,
    /// The stores' lock waiting: requests that waited, were woken, timed
    /// out, or were answered with a deadlock.
    pub lock_waits: LockWaitStats,
    /// Workload transactions that ended aborted by a deadlock.
    pub deadlock_aborts: usize,
    /// The check of the history.
    pub check: TxnCheckReport,
    /// Transactions abandoned past their bound.
    pub hangs: usize,
    /// Record ids of those transactions (the first 20).
    pub hang_records: Vec<usize>,
    /// Workload or injector tasks that panicked.
    pub panics: usize,
    /// Client calls (each `get`, `put`, `commit`, `rollback`, `begin`...)
    /// that took longer than the clients' request deadline plus
    /// [`DEADLINE_MARGIN`](crate::DEADLINE_MARGIN).
    pub late_calls: u64,
    /// The longest client call, and the deadline it had.
    pub slowest_call: (Duration, Duration),
    /// Where the first late calls are in the workload, and how long each
    /// took.
    pub late_call_sites: Vec<String>,
    /// The history: the setup, the workload, the final reads.
    pub history: Vec<TxnRecord>,
}

/// The name of an outcome, as the report counts it.
pub fn outcome_name(outcome: &TxnOutcome) -> &'static str {
    match outcome {
        TxnOutcome::Committed { .. } => "committed",
        TxnOutcome::Aborted { .. } => "aborted",
        TxnOutcome::Undetermined { .. } => "undetermined",
        TxnOutcome::Abandoned => "abandoned",
    }
}

pub(crate) fn mode_name(mode: TxnMode) -> &'static str {
    match mode {
        TxnMode::Optimistic => "optimistic",
        TxnMode::AsyncCommit => "async_commit",
        TxnMode::OnePc => "one_pc",
        TxnMode::Pessimistic => "pessimistic",
        TxnMode::PessimisticAsyncCommit => "pessimistic_async",
        TxnMode::Snapshot => "snapshot",
        TxnMode::StaleSnapshot => "stale_snapshot",
    }
}

pub(crate) const MODES: [TxnMode; 6] = [
    TxnMode::Optimistic,
    TxnMode::AsyncCommit,
    TxnMode::OnePc,
    TxnMode::Pessimistic,
    TxnMode::PessimisticAsyncCommit,
    TxnMode::Snapshot,
];

pub(crate) const OUTCOMES: [&str; 4] = ["committed", "aborted", "undetermined", "abandoned"];

/// List key `i`: `list/00`, …
pub fn list_key(i: usize) -> Vec<u8> {
    format!("list/{i:02}").into_bytes()
}

/// Scratch key `i`: `list/x0`, … (inside the list range, after the lists).
pub fn scratch_key(i: usize) -> Vec<u8> {
    format!("list/x{i}").into_bytes()
}

/// Account key `i`: `acct/00`, …
pub fn account_key(i: usize) -> Vec<u8> {
    format!("acct/{i:02}").into_bytes()
}

/// The range every list and scratch key lies in: `[list/, list0)`.
fn list_range() -> (Vec<u8>, Vec<u8>) {
    (b"list/".to_vec(), b"list0".to_vec())
}

/// A list as stored: its elements in ASCII, comma separated (`1,5,9`).
pub fn encode_list(list: &[u64]) -> Vec<u8> {
    list.iter()
        .map(|e| e.to_string())
        .collect::<Vec<_>>()
        .join(",")
        .into_bytes()
}

/// A stored list; an element that does not parse reads as `u64::MAX`
/// (never appended, so the check flags it), an empty value as `[]`.
pub fn decode_list(value: &[u8]) -> Vec<u64> {
    if value.is_empty() {
        return Vec::new();
    }
    String::from_utf8_lossy(value)
        .split(',')
        .map(|e| e.parse().unwrap_or(u64::MAX))
        .collect()
}

/// A stored balance; a value that does not parse reads as `i64::MIN`
/// (which breaks the total, so the check flags it).
pub fn decode_balance(value: &[u8]) -> i64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(i64::MIN)
}

/// The options of a transaction of `mode` (not a snapshot).
fn options_for(mode: TxnMode) -> TransactionOptions {
    match mode {
        TxnMode::Optimistic | TxnMode::Snapshot | TxnMode::StaleSnapshot => {
            TransactionOptions::new_optimistic()
        }
        TxnMode::AsyncCommit => TransactionOptions::new_optimistic().use_async_commit(),
        TxnMode::OnePc => TransactionOptions::new_optimistic().try_one_pc(),
        TxnMode::Pessimistic => TransactionOptions::new_pessimistic(),
        TxnMode::PessimisticAsyncCommit => TransactionOptions::new_pessimistic().use_async_commit(),
    }
    // The default drop check (`CheckLevel::Panic`): every transaction is
    // ended by commit or rollback, so a panic is the client's fault.
}

/// The transaction or snapshot a read goes to.
enum Reader<'a> {
    Txn(&'a mut Transaction),
    Snap(&'a mut Snapshot),
}

impl Reader<'_> {
    async fn get(&mut self, key: Vec<u8>) -> Result<Option<Vec<u8>>> {
        match self {
            Reader::Txn(t) => timed(t.get(key)).await,
            Reader::Snap(s) => timed(s.get(key)).await,
        }
    }

    async fn batch_get(&mut self, keys: Vec<Vec<u8>>) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        let pairs: Vec<tikv_plan::KvPair> = match self {
            Reader::Txn(t) => timed(t.batch_get(keys)).await?.collect(),
            Reader::Snap(s) => timed(s.batch_get(keys)).await?.collect(),
        };
        Ok(pairs_map(pairs))
    }

    async fn scan(&mut self, start: Vec<u8>, end: Vec<u8>) -> Result<BTreeMap<Vec<u8>, Vec<u8>>> {
        // Far more than the keys in any range scanned: every absent key
        // really is absent.
        const LIMIT: u32 = 10_000;
        let pairs: Vec<tikv_plan::KvPair> = match self {
            Reader::Txn(t) => timed(t.scan(start..end, LIMIT)).await?.collect(),
            Reader::Snap(s) => timed(s.scan(start..end, LIMIT)).await?.collect(),
        };
        Ok(pairs_map(pairs))
    }
}

fn pairs_map(pairs: Vec<tikv_plan::KvPair>) -> BTreeMap<Vec<u8>, Vec<u8>> {
    pairs
        .into_iter()
        .map(|p| {
            let (k, v): (tikv_plan::Key, tikv_plan::Value) = p.into();
            (k.into(), v)
        })
        .collect()
}

/// What a transaction recorded before it ended (kept outside the timed
/// future so an abandoned transaction keeps its steps).
#[derive(Default)]
struct Draft {
    start_ts: Option<u64>,
    ops: Vec<TxnOp>,
    /// A snapshot at a timestamp in the past (stale reads): recorded as
    /// [`TxnMode::StaleSnapshot`].
    stale: bool,
}

/// Ends a transaction whose body returned `body`: commit on success; on
/// failure roll back (error ignored). An undetermined commit is not rolled
/// back: the transaction is dropped.
async fn finish(mut txn: Transaction, body: Result<()>) -> TxnOutcome {
    if let Err(e) = body {
        let _ = timed(txn.rollback()).await;
        return TxnOutcome::Aborted {
            error: e.to_string(),
        };
    }
    match timed(txn.commit()).await {
        Ok(ts) => TxnOutcome::Committed {
            commit_ts: ts.map(|t| t.version()),
        },
        Err(e) if undetermined_anywhere(&e) => {
            drop(txn);
            TxnOutcome::Undetermined {
                error: e.to_string(),
            }
        }
        Err(e) => {
            let _ = timed(txn.rollback()).await;
            TxnOutcome::Aborted {
                error: e.to_string(),
            }
        }
    }
}

fn aborted(e: &Error) -> TxnOutcome {
    TxnOutcome::Aborted {
        error: e.to_string(),
    }
}

/// The accounts the hot-transfer tasks move money between.
pub const HOT_ACCOUNTS: usize = 3;

/// What a workload task runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    List,
    Bank,
    Long,
    /// Pessimistic transfers over a few accounts.
    Hot,
}

/// Counters the tasks share.
#[derive(Default)]
struct Shared {
    /// Every workload call's latency against the deadline.
    clock: Arc<CallClock>,
    hangs: AtomicU64,
    forced_expiries: AtomicU64,
    /// Transactions whose run or drop panicked (the client's drop check
    /// among them); the task goes on with its next transaction.
    panics: AtomicU64,
}

/// Each client call's latency against the clients' request deadline.
#[derive(Debug, Default)]
struct CallClock {
    deadline: Duration,
    late: AtomicU64,
    slowest_micros: AtomicU64,
    /// The first late calls: where in the workload, and how long they took.
    late_sites: std::sync::Mutex<Vec<String>>,
}

tokio::task_local! {
    /// The clock of the workload task this runs in.
    static CALL_CLOCK: Arc<CallClock>;
}

/// Awaits one client call, timing it on the task's [`CallClock`]: a call
/// must end within its request deadline plus [`DEADLINE_MARGIN`]
/// (`crate::DEADLINE_MARGIN`), whatever the faults.
#[track_caller]
fn timed<F: std::future::Future>(call: F) -> impl std::future::Future<Output = F::Output> {
    let site = std::panic::Location::caller();
    async move {
        let started = tokio::time::Instant::now();
        tracing::debug!("txn chaos: a call at {}:{}", site.file(), site.line());
        let output = call.await;
        let took = started.elapsed();
        let _ = CALL_CLOCK.try_with(|clock| {
            let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
            clock.slowest_micros.fetch_max(micros, Ordering::SeqCst);
            if took > clock.deadline + crate::DEADLINE_MARGIN {
                clock.late.fetch_add(1, Ordering::SeqCst);
                let line = format!("{}:{} took {took:?}", site.file(), site.line());
                tracing::warn!(
                    "txn chaos: the call at {line}, over its deadline of {:?}",
                    clock.deadline
                );
                let mut sites = clock.late_sites.lock().unwrap_or_else(|e| e.into_inner());
                if sites.len() < 20 {
                    sites.push(line);
                }
            }
        });
        output
    }
}

/// One workload task.
struct Worker {
    task: usize,
    role: Role,
    client: TransactionClient,
    cluster: Arc<SimCluster>,
    recorder: Arc<TxnRecorder>,
    shared: Arc<Shared>,
    rng: fastrand::Rng,
    lists: Vec<Vec<u8>>,
    scratch: Vec<Vec<u8>>,
    accounts: Vec<Vec<u8>>,
    /// The last element id this task used.
    seq: u64,
    /// Transactions started (offsets the mode rotation).
    n: usize,
    bound: Duration,
    pause: Duration,
    hold: (Duration, Duration),
    expire_percent: u32,
    /// Snapshots may be stale reads (`TxnChaosConfig::stale_reads`).
    stale_reads: bool,
}

impl Worker {
    async fn run(mut self, stop: Arc<AtomicBool>) -> Vec<usize> {
        let mut long_records = Vec::new();
        while !stop.load(Ordering::SeqCst) {
            let invoke = self.recorder.now();
            let mut draft = Draft::default();
            let bound = self.bound;
            let started = tokio::time::Instant::now();
            // Each transaction, its drop included (an abandoned one is
            // dropped inside `timeout`), runs under `catch_unwind`: a panic,
            // such as the drop check's, is counted and the task goes on.
            let clock = Arc::clone(&self.shared.clock);
            let ran = CALL_CLOCK
                .scope(
                    clock,
                    AssertUnwindSafe(async {
                        match self.role {
                            Role::List => {
                                let mode = MODES[self.n % MODES.len()];
                                let result =
                                    tokio::time::timeout(bound, self.list_txn(mode, &mut draft))
                                        .await;
                                (TxnWorkload::ListAppend, mode, result)
                            }
                            Role::Bank => {
                                let audit = self.n % 4 == 3;
                                let mode = if audit {
                                    if self.rng.bool() {
                                        TxnMode::Snapshot
                                    } else {
                                        TxnMode::Optimistic
                                    }
                                } else {
                                    MODES[self.n % 5]
                                };
                                let result = if audit {
                                    tokio::time::timeout(bound, self.audit_txn(mode, &mut draft))
                                        .await
                                } else {
                                    tokio::time::timeout(bound, self.transfer_txn(mode, &mut draft))
                                        .await
                                };
                                (TxnWorkload::Bank, mode, result)
                            }
                            Role::Hot => {
                                let mode = if self.n.is_multiple_of(2) {
                                    TxnMode::Pessimistic
                                } else {
                                    TxnMode::PessimisticAsyncCommit
                                };
                                let result = tokio::time::timeout(
                                    bound,
                                    self.transfer_txn(mode, &mut draft),
                                )
                                .await;
                                (TxnWorkload::Bank, mode, result)
                            }
                            Role::Long => {
                                let mode = if self.n.is_multiple_of(2) {
                                    TxnMode::Pessimistic
                                } else {
                                    TxnMode::PessimisticAsyncCommit
                                };
                                let workload = if (self.n / 2).is_multiple_of(2) {
                                    TxnWorkload::Bank
                                } else {
                                    TxnWorkload::ListAppend
                                };
                                let result = tokio::time::timeout(
                                    bound,
                                    self.long_txn(mode, workload, &mut draft),
                                )
                                .await;
                                (workload, mode, result)
                            }
                        }
                    })
                    .catch_unwind(),
                )
                .await;
            self.n += 1;
            let Ok((workload, mode, result)) = ran else {
                if started.elapsed() >= bound {
                    // Abandoned past its bound: the drop check fired on a
                    // transaction the workload gave up on. A hang.
                    self.shared.hangs.fetch_add(1, Ordering::SeqCst);
                } else {
                    self.shared.panics.fetch_add(1, Ordering::SeqCst);
                }
                tracing::warn!("txn chaos: task {} panicked in a transaction", self.task);
                // What it did is unknown: recorded as abandoned, so the
                // check takes either outcome.
                self.recorder.record(TxnRecord {
                    id: 0,
                    task: self.task,
                    workload: TxnWorkload::ListAppend,
                    // A stale snapshot stays one: real time does not bind it.
                    mode: if draft.stale {
                        TxnMode::StaleSnapshot
                    } else {
                        TxnMode::Optimistic
                    },
                    start_ts: draft.start_ts,
                    invoke,
                    complete: None,
                    ops: draft.ops,
                    outcome: TxnOutcome::Abandoned,
                });
                continue;
            };
            let (outcome, complete) = match result {
                Ok(outcome) => (outcome, Some(self.recorder.now())),
                Err(_) => {
                    self.shared.hangs.fetch_add(1, Ordering::SeqCst);
                    tracing::warn!(
                        "txn chaos: task {} abandoned a {} transaction after {bound:?}",
                        self.task,
                        mode_name(mode)
                    );
                    (TxnOutcome::Abandoned, None)
                }
            };
            let mode = if draft.stale {
                TxnMode::StaleSnapshot
            } else {
                mode
            };
            let id = self.recorder.record(TxnRecord {
                id: 0,
                task: self.task,
                workload,
                mode,
                start_ts: draft.start_ts,
                invoke,
                complete,
                ops: draft.ops,
                outcome,
            });
            if self.role == Role::Long {
                long_records.push(id);
            }
            if !self.pause.is_zero() {
                let pause = self.rng.u64(0..=self.pause.as_millis() as u64);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
        long_records
    }

    /// A new element, unique in the run: the task in the high half.
    fn element(&mut self) -> u64 {
        self.seq += 1;
        ((self.task as u64) << 32) | self.seq
    }

    fn pick<'a>(&mut self, keys: &'a [Vec<u8>]) -> &'a [u8] {
        &keys[self.rng.usize(0..keys.len())]
    }

    /// `n` distinct list keys.
    fn distinct_lists(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut all = self.lists.clone();
        self.rng.shuffle(&mut all);
        all.truncate(n.min(all.len()));
        all
    }

    async fn begin(&self, options: TransactionOptions, draft: &mut Draft) -> Result<Transaction> {
        let txn = timed(self.client.begin_with_options(options)).await?;
        draft.start_ts = Some(txn.start_timestamp().version());
        Ok(txn)
    }

    async fn snapshot(&mut self, draft: &mut Draft) -> Result<Snapshot> {
        let now = timed(self.client.current_timestamp()).await?;
        let options = TransactionOptions::new_optimistic().drop_check(CheckLevel::Warn);
        // With stale reads: a fresh snapshot from the leader, or a stale
        // one at now (almost always above every safe-ts: `DataIsNotReady`,
        // then the leader), 500 ms or 2 s back, from a follower or any
        // replica.
        let (back_ms, options) = match self.stale_reads.then(|| self.rng.u32(0..4)) {
            None | Some(0) => (0, options),
            Some(1) => (0, options.stale_read().replica_read(ReplicaRead::Follower)),
            Some(2) => (500, options.stale_read().replica_read(ReplicaRead::Mixed)),
            Some(_) => (
                2000,
                options.stale_read().replica_read(ReplicaRead::Follower),
            ),
        };
        let ts = if back_ms == 0 {
            now
        } else {
            Timestamp {
                physical: now.physical.saturating_sub(back_ms).max(0),
                logical: 0,
                ..now
            }
        };
        draft.start_ts = Some(ts.version());
        draft.stale = back_ms > 0;
        Ok(self.client.snapshot(ts, options))
    }

    /// One list read of `key` by a random method (a `batch_get` adds a
    /// random list or scratch key, a `scan` reads the whole list range),
    /// recorded as what came back.
    async fn read_lists(
        &mut self,
        reader: &mut Reader<'_>,
        key: Vec<u8>,
        draft: &mut Draft,
    ) -> Result<()> {
        match self.rng.u32(0..3) {
            0 => {
                let value = reader.get(key.clone()).await?;
                draft.ops.push(TxnOp::Read {
                    key,
                    list: value.as_deref().map(decode_list),
                    locking: false,
                });
            }
            1 => {
                let other = if self.rng.u32(0..4) == 0 && !self.scratch.is_empty() {
                    let scratch = self.scratch.clone();
                    self.pick(&scratch).to_vec()
                } else {
                    let lists = self.lists.clone();
                    self.pick(&lists).to_vec()
                };
                let mut keys = vec![key];
                if !keys.contains(&other) {
                    keys.push(other);
                }
                let found = reader.batch_get(keys.clone()).await?;
                for key in keys {
                    let list = found.get(&key).map(|v| decode_list(v));
                    draft.ops.push(TxnOp::Read {
                        key,
                        list,
                        locking: false,
                    });
                }
            }
            _ => {
                let (start, end) = list_range();
                let found = reader.scan(start, end).await?;
                for key in &self.lists {
                    draft.ops.push(TxnOp::Read {
                        key: key.clone(),
                        list: found.get(key).map(|v| decode_list(v)),
                        locking: false,
                    });
                }
                // Anything else in the range (a scratch key, which must
                // never be there) is recorded too.
                for (key, value) in &found {
                    if !self.lists.contains(key) {
                        draft.ops.push(TxnOp::Read {
                            key: key.clone(),
                            list: Some(decode_list(value)),
                            locking: false,
                        });
                    }
                }
            }
        }
        Ok(())
    }

    async fn list_txn(&mut self, mode: TxnMode, draft: &mut Draft) -> TxnOutcome {
        if mode == TxnMode::Snapshot {
            let mut snapshot = match self.snapshot(draft).await {
                Ok(s) => s,
                Err(e) => return aborted(&e),
            };
            let n = self.rng.usize(2..=4);
            for key in self.distinct_lists(n) {
                if let Err(e) = self
                    .read_lists(&mut Reader::Snap(&mut snapshot), key, draft)
                    .await
                {
                    return aborted(&e);
                }
            }
            return TxnOutcome::Committed { commit_ts: None };
        }
        let mut txn = match self.begin(options_for(mode), draft).await {
            Ok(t) => t,
            Err(e) => return aborted(&e),
        };
        let body = self.list_body(&mut txn, mode, draft).await;
        finish(txn, body).await
    }

    /// Reads first, then appends, over distinct list keys.
    async fn list_body(
        &mut self,
        txn: &mut Transaction,
        mode: TxnMode,
        draft: &mut Draft,
    ) -> Result<()> {
        let pessimistic = mode.is_pessimistic();
        let n = self.rng.usize(1..=4);
        let mut reads = Vec::new();
        let mut appends = Vec::new();
        for key in self.distinct_lists(n) {
            if self.rng.bool() {
                appends.push(key);
            } else {
                reads.push(key);
            }
        }
        for key in &reads {
            if self.rng.u32(0..4) == 0 {
                // A locking read: at a fresh for_update_ts in a
                // pessimistic transaction, at start_ts (and checked at
                // commit) in an optimistic one.
                let value = timed(txn.get_for_update(key.clone())).await?;
                draft.ops.push(TxnOp::Read {
                    key: key.clone(),
                    list: value.as_deref().map(decode_list),
                    locking: pessimistic,
                });
            } else {
                self.read_lists(&mut Reader::Txn(txn), key.clone(), draft)
                    .await?;
            }
        }
        if !reads.is_empty() && self.rng.u32(0..4) == 0 {
            timed(txn.lock_keys(reads.clone())).await?;
        }
        let batch = appends.len() >= 2 && self.rng.bool();
        let mut pending = Vec::new();
        for key in appends {
            let locking = pessimistic || self.rng.u32(0..4) == 0;
            let value = if locking {
                timed(txn.get_for_update(key.clone())).await?
            } else {
                timed(txn.get(key.clone())).await?
            };
            let read = value.as_deref().map(decode_list);
            draft.ops.push(TxnOp::Read {
                key: key.clone(),
                list: read.clone(),
                locking: pessimistic,
            });
            let element = self.element();
            let mut list = read.unwrap_or_default();
            list.push(element);
            let bytes = encode_list(&list);
            if batch {
                pending.push((key, element, bytes));
                continue;
            }
            if value.is_none() && self.rng.bool() {
                timed(txn.insert(key.clone(), bytes)).await?;
            } else {
                timed(txn.put(key.clone(), bytes)).await?;
            }
            draft.ops.push(TxnOp::Append { key, element });
        }
        if !pending.is_empty() {
            let mutations: Vec<Mutation> = pending
                .iter()
                .map(|(key, _, bytes)| Mutation::Put(key.clone().into(), bytes.clone()))
                .collect();
            timed(txn.batch_mutate(mutations)).await?;
            for (key, element, _) in pending {
                draft.ops.push(TxnOp::Append { key, element });
            }
        }
        if !self.scratch.is_empty() && self.rng.u32(0..8) == 0 {
            // Inserted and deleted in one transaction: never visible.
            let scratch = self.scratch.clone();
            let key = self.pick(&scratch).to_vec();
            let element = self.element();
            timed(txn.insert(key.clone(), encode_list(&[element]))).await?;
            timed(txn.delete(key)).await?;
        }
        Ok(())
    }

    /// Two distinct accounts.
    fn account_pair(&mut self) -> (Vec<u8>, Vec<u8>) {
        let n = self.accounts.len();
        let from = self.rng.usize(0..n);
        let to = (from + self.rng.usize(1..n.max(2))) % n;
        (self.accounts[from].clone(), self.accounts[to].clone())
    }

    async fn transfer_txn(&mut self, mode: TxnMode, draft: &mut Draft) -> TxnOutcome {
        let mut txn = match self.begin(options_for(mode), draft).await {
            Ok(t) => t,
            Err(e) => return aborted(&e),
        };
        let (from, to) = self.account_pair();
        let body = self.transfer_body(&mut txn, mode, from, to, draft).await;
        finish(txn, body).await
    }

    /// Reads two accounts (locking in pessimistic mode) and moves up to 20
    /// from the first to the second.
    async fn transfer_body(
        &mut self,
        txn: &mut Transaction,
        mode: TxnMode,
        from: Vec<u8>,
        to: Vec<u8>,
        draft: &mut Draft,
    ) -> Result<()> {
        let pessimistic = mode.is_pessimistic();
        let (a, b) = if pessimistic {
            let a = timed(txn.get_for_update(from.clone())).await?;
            draft.ops.push(TxnOp::ReadBalance {
                key: from.clone(),
                balance: a.as_deref().map(decode_balance),
                locking: true,
            });
            let b = timed(txn.get_for_update(to.clone())).await?;
            draft.ops.push(TxnOp::ReadBalance {
                key: to.clone(),
                balance: b.as_deref().map(decode_balance),
                locking: true,
            });
            (a, b)
        } else {
            let (a, b) = if self.rng.bool() {
                let mut found = Reader::Txn(txn)
                    .batch_get(vec![from.clone(), to.clone()])
                    .await?;
                (found.remove(&from), found.remove(&to))
            } else {
                let a = timed(txn.get(from.clone())).await?;
                let b = timed(txn.get(to.clone())).await?;
                (a, b)
            };
            for (key, value) in [(&from, &a), (&to, &b)] {
                draft.ops.push(TxnOp::ReadBalance {
                    key: key.clone(),
                    balance: value.as_deref().map(decode_balance),
                    locking: false,
                });
            }
            (a, b)
        };
        let (a, b) = match (
            a.as_deref().map(decode_balance),
            b.as_deref().map(decode_balance),
        ) {
            (Some(a), Some(b)) if a != i64::MIN && b != i64::MIN => (a, b),
            _ => {
                return Err(Error::InternalError {
                    message: "an account is missing or does not hold a number".to_owned(),
                })
            }
        };
        let amount = self.rng.i64(1..=20).min(a.max(0));
        if amount == 0 {
            return Ok(());
        }
        self.write_pair(txn, (from, a - amount), (to, b + amount), draft)
            .await
    }

    /// Writes two balances (`put` twice or one `batch_mutate`).
    async fn write_pair(
        &mut self,
        txn: &mut Transaction,
        first: (Vec<u8>, i64),
        second: (Vec<u8>, i64),
        draft: &mut Draft,
    ) -> Result<()> {
        if self.rng.bool() {
            txn.batch_mutate([
                Mutation::Put(first.0.clone().into(), first.1.to_string().into_bytes()),
                Mutation::Put(second.0.clone().into(), second.1.to_string().into_bytes()),
            ])
            .await?;
            for (key, balance) in [first, second] {
                draft.ops.push(TxnOp::WriteBalance { key, balance });
            }
        } else {
            for (key, balance) in [first, second] {
                timed(txn.put(key.clone(), balance.to_string())).await?;
                draft.ops.push(TxnOp::WriteBalance { key, balance });
            }
        }
        Ok(())
    }

    /// Reads every account in one snapshot or optimistic transaction.
    async fn audit_txn(&mut self, mode: TxnMode, draft: &mut Draft) -> TxnOutcome {
        let accounts = self.accounts.clone();
        let batch = self.rng.bool();
        if mode == TxnMode::Snapshot {
            let mut snapshot = match self.snapshot(draft).await {
                Ok(s) => s,
                Err(e) => return aborted(&e),
            };
            return match read_balances(&mut Reader::Snap(&mut snapshot), &accounts, batch, draft)
                .await
            {
                Ok(()) => TxnOutcome::Committed { commit_ts: None },
                Err(e) => aborted(&e),
            };
        }
        let mut txn = match self.begin(options_for(mode), draft).await {
            Ok(t) => t,
            Err(e) => return aborted(&e),
        };
        let body = read_balances(&mut Reader::Txn(&mut txn), &accounts, batch, draft).await;
        finish(txn, body).await
    }

    /// Locks an account pair or a list, holds the locks (the TSO moves
    /// past their TTL meanwhile, sometimes by this task's own jump), then
    /// writes and commits.
    async fn long_txn(
        &mut self,
        mode: TxnMode,
        workload: TxnWorkload,
        draft: &mut Draft,
    ) -> TxnOutcome {
        let hold = {
            let (low, high) = (
                self.hold.0.as_millis() as u64,
                self.hold.1.as_millis() as u64,
            );
            Duration::from_millis(self.rng.u64(low..=high.max(low)))
        };
        let mut options = options_for(mode);
        if self.rng.bool() {
            // Heartbeats while the locks are held (they may be dropped).
            options = options.heartbeat_option(HeartbeatOption::FixedTime(
                (hold / 3).max(Duration::from_millis(50)),
            ));
        }
        let mut txn = match self.begin(options, draft).await {
            Ok(t) => t,
            Err(e) => return aborted(&e),
        };
        let body = self.long_body(&mut txn, workload, hold, draft).await;
        finish(txn, body).await
    }

    async fn long_body(
        &mut self,
        txn: &mut Transaction,
        workload: TxnWorkload,
        hold: Duration,
        draft: &mut Draft,
    ) -> Result<()> {
        match workload {
            TxnWorkload::Bank => {
                let (from, to) = self.account_pair();
                let a = timed(txn.get_for_update(from.clone())).await?;
                let a = a.as_deref().map(decode_balance);
                draft.ops.push(TxnOp::ReadBalance {
                    key: from.clone(),
                    balance: a,
                    locking: true,
                });
                let b = timed(txn.get_for_update(to.clone())).await?;
                let b = b.as_deref().map(decode_balance);
                draft.ops.push(TxnOp::ReadBalance {
                    key: to.clone(),
                    balance: b,
                    locking: true,
                });
                self.hold(hold).await;
                let (a, b) = match (a, b) {
                    (Some(a), Some(b)) if a != i64::MIN && b != i64::MIN => (a, b),
                    _ => {
                        return Err(Error::InternalError {
                            message: "an account is missing or does not hold a number".to_owned(),
                        })
                    }
                };
                let amount = self.rng.i64(1..=20);
                self.write_pair(txn, (from, a - amount), (to, b + amount), draft)
                    .await
            }
            TxnWorkload::ListAppend => {
                let lists = self.lists.clone();
                let key = self.pick(&lists).to_vec();
                let value = timed(txn.get_for_update(key.clone())).await?;
                let read = value.as_deref().map(decode_list);
                draft.ops.push(TxnOp::Read {
                    key: key.clone(),
                    list: read.clone(),
                    locking: true,
                });
                self.hold(hold).await;
                let element = self.element();
                let mut list = read.unwrap_or_default();
                list.push(element);
                timed(txn.put(key.clone(), encode_list(&list))).await?;
                draft.ops.push(TxnOp::Append { key, element });
                Ok(())
            }
        }
    }

    /// Holds the locks for `hold`; first, sometimes, moves the TSO past
    /// the pessimistic lock TTL so that they are expired for everyone who
    /// meets them meanwhile.
    async fn hold(&mut self, hold: Duration) {
        if self.rng.u32(0..100) < self.expire_percent {
            let ttl = Duration::from_millis(tikv_plan::transaction::MAX_TTL);
            self.cluster
                .advance_tso_clock(ttl + Duration::from_secs(self.rng.u64(1..=10)));
            self.shared.forced_expiries.fetch_add(1, Ordering::SeqCst);
        }
        tokio::time::sleep(hold).await;
    }
}

/// Reads `accounts` (one `batch_get`, or a `get` each) and records every
/// balance (absent ones as `None`).
async fn read_balances(
    reader: &mut Reader<'_>,
    accounts: &[Vec<u8>],
    batch: bool,
    draft: &mut Draft,
) -> Result<()> {
    if batch {
        let found = reader.batch_get(accounts.to_vec()).await?;
        for key in accounts {
            draft.ops.push(TxnOp::ReadBalance {
                key: key.clone(),
                balance: found.get(key).map(|v| decode_balance(v)),
                locking: false,
            });
        }
    } else {
        for key in accounts {
            let value = reader.get(key.clone()).await?;
            draft.ops.push(TxnOp::ReadBalance {
                key: key.clone(),
                balance: value.as_deref().map(decode_balance),
                locking: false,
            });
        }
    }
    Ok(())
}

/// The keys of a transactional run: lists, scratch keys and accounts.
#[derive(Debug, Clone)]
pub(crate) struct TxnKeys {
    pub(crate) lists: Vec<Vec<u8>>,
    pub(crate) scratch: Vec<Vec<u8>>,
    pub(crate) accounts: Vec<Vec<u8>>,
}

impl TxnKeys {
    pub(crate) fn new(config: &TxnChaosConfig) -> Self {
        TxnKeys {
            lists: (0..config.list_keys.max(1)).map(list_key).collect(),
            scratch: (0..config.scratch_keys).map(scratch_key).collect(),
            accounts: (0..config.accounts.max(2)).map(account_key).collect(),
        }
    }

    /// Every key as stores see it (encoded), in key order (accounts sort
    /// before lists).
    pub(crate) fn encoded(&self) -> Vec<Vec<u8>> {
        let mut all: Vec<Vec<u8>> = self
            .accounts
            .iter()
            .chain(&self.lists)
            .chain(&self.scratch)
            .map(|k| encode_bytes(k))
            .collect();
        all.sort();
        all
    }

    /// The encoded keys that split the keys evenly into `regions` Regions.
    pub(crate) fn split_keys(&self, regions: usize) -> Vec<Vec<u8>> {
        let all = self.encoded();
        let regions = regions.clamp(1, all.len());
        (1..regions)
            .filter_map(|i| all.get(i * all.len() / regions).cloned())
            .collect()
    }
}

/// The workload tasks of a transactional run, under way.
pub(crate) struct TxnWorkloadRun {
    recorder: Arc<TxnRecorder>,
    shared: Arc<Shared>,
    clients: Vec<TransactionClient>,
    workers: Vec<tokio::task::JoinHandle<Vec<usize>>>,
}

/// What a transactional run's workload left, before the check.
pub(crate) struct TxnRan {
    recorder: Arc<TxnRecorder>,
    shared: Arc<Shared>,
    clients: Vec<TransactionClient>,
    long_records: Vec<usize>,
    /// Workload tasks that panicked.
    pub(crate) panics: usize,
}

impl TxnWorkloadRun {
    /// Connects the workload's clients with `connect`, gives every account
    /// its balance, and starts every task; they run until `stop`.
    pub(crate) async fn start<F, Fut>(
        config: &TxnChaosConfig,
        keys: &TxnKeys,
        cluster: &Arc<SimCluster>,
        connect: F,
        stop: &Arc<AtomicBool>,
        recorder: Arc<TxnRecorder>,
    ) -> crate::Result<Self>
    where
        F: Fn(Config) -> Fut,
        Fut: std::future::Future<Output = Result<TransactionClient>>,
    {
        let client_config = Config::default()
            .with_rpc_mode(config.rpc_mode)
            .with_timeout(config.timeout)
            .with_connect_timeout(config.timeout)
            .with_request_deadline(config.deadline);
        if config.stale_reads {
            cluster
                .set_resolved_ts_interval(STALE_RESOLVED_TS_INTERVAL)
                .map_err(|e| Error::InternalError {
                    message: format!("the simulator refused the resolved-ts interval: {e}"),
                })?;
        }
        let shared_client = connect(client_config.clone()).await?;
        setup_accounts(
            &shared_client,
            &recorder,
            &keys.accounts,
            config.initial_balance,
        )
        .await?;

        // A transaction makes a handful of requests, each bounded by the
        // deadline, and lock waits are bounded by it too; long ones also
        // hold.
        let bound = config.deadline * 10 + config.long_hold.1 + Duration::from_secs(5);
        let shared = Arc::new(Shared {
            clock: Arc::new(CallClock {
                deadline: config.deadline,
                ..CallClock::default()
            }),
            ..Shared::default()
        });
        let mut clients = vec![shared_client.clone()];
        let mut workers = Vec::new();
        for task in 0..config.tasks + config.long_tasks + config.hot_tasks {
            let role = if task >= config.tasks + config.long_tasks {
                Role::Hot
            } else if task >= config.tasks {
                Role::Long
            } else if task % 2 == 0 {
                Role::List
            } else {
                Role::Bank
            };
            // Every third task has a client of its own; the rest share one.
            let client = if task % 3 == 2 {
                let own = connect(client_config.clone()).await?;
                clients.push(own.clone());
                own
            } else {
                shared_client.clone()
            };
            let worker = Worker {
                task,
                role,
                client,
                cluster: Arc::clone(cluster),
                recorder: Arc::clone(&recorder),
                shared: Arc::clone(&shared),
                rng: fastrand::Rng::with_seed(mix_seed(config.seed, task as u64 + 1)),
                lists: keys.lists.clone(),
                scratch: keys.scratch.clone(),
                accounts: if role == Role::Hot {
                    keys.accounts.iter().take(HOT_ACCOUNTS).cloned().collect()
                } else {
                    keys.accounts.clone()
                },
                seq: 0,
                n: task,
                bound,
                pause: config.txn_pause,
                hold: config.long_hold,
                expire_percent: config.long_expire_percent,
                stale_reads: config.stale_reads,
            };
            workers.push(tokio::spawn(worker.run(Arc::clone(stop))));
        }
        Ok(TxnWorkloadRun {
            recorder,
            shared,
            clients,
            workers,
        })
    }

    /// Waits for every task to end its transaction once told to stop.
    pub(crate) async fn join(self) -> TxnRan {
        let mut long_records = Vec::new();
        let mut panics = 0;
        for worker in self.workers {
            match worker.await {
                Ok(ids) => long_records.extend(ids),
                Err(e) => panics += usize::from(e.is_panic()),
            }
        }
        TxnRan {
            recorder: self.recorder,
            shared: self.shared,
            clients: self.clients,
            long_records,
            panics,
        }
    }
}

impl TxnRan {
    /// Once every fault is healed and every transaction has ended: reads
    /// every key in one snapshot with a fresh client from `connect`. Locks
    /// left behind (undetermined or abandoned transactions) expire first:
    /// the reader resolves them instead of waiting.
    pub(crate) async fn read_back<F, Fut>(
        &self,
        config: &TxnChaosConfig,
        keys: &TxnKeys,
        cluster: &SimCluster,
        connect: F,
    ) -> crate::Result<()>
    where
        F: FnOnce(Config) -> Fut,
        Fut: std::future::Future<Output = Result<TransactionClient>>,
    {
        cluster.advance_tso_clock(Duration::from_millis(tikv_plan::transaction::MAX_TTL) * 3);
        let reader_config = Config::default()
            .with_rpc_mode(config.rpc_mode)
            .with_request_deadline(Duration::from_secs(10));
        let reader = connect(reader_config).await?;
        final_reads(
            &reader,
            &self.recorder,
            &keys.lists,
            &keys.scratch,
            &keys.accounts,
        )
        .await;
        Ok(())
    }

    /// Checks the history and counts what the run did; `faults` are the
    /// faults applied, `drops_fired` the dropped answers that fired and
    /// `panics` those of tasks besides the workload's (the injector's).
    pub(crate) fn report(
        self,
        config: &TxnChaosConfig,
        keys: &TxnKeys,
        faults: BTreeMap<FaultKind, u64>,
        drops_fired: u64,
        lock_waits: LockWaitStats,
        panics: usize,
    ) -> TxnChaosReport {
        let mut heartbeats = (0, 0);
        let mut lock_checks = 0;
        for client in &self.clients {
            let stats = client.stats();
            heartbeats.0 += stats.heartbeats;
            heartbeats.1 += stats.heartbeat_failures;
            lock_checks += stats.locks.check_txn_status;
        }
        let history = self.recorder.records();
        let options = TxnCheckOptions {
            bank_accounts: keys.accounts.clone(),
            bank_total: config.initial_balance * keys.accounts.len() as i64,
        };
        let check = check_txn_history(&history, &options);

        let mut by_mode = BTreeMap::new();
        let mut undetermined = 0;
        let mut deadlock_aborts = 0;
        let mut transactions = 0;
        let mut hang_records = Vec::new();
        for r in history
            .iter()
            .filter(|r| r.task != FINAL_TASK && r.task != SETUP_TASK)
        {
            transactions += 1;
            *by_mode
                .entry((r.workload, r.mode, outcome_name(&r.outcome)))
                .or_insert(0) += 1;
            match &r.outcome {
                TxnOutcome::Undetermined { .. } => undetermined += 1,
                TxnOutcome::Aborted { error } if error.contains("deadlock") => deadlock_aborts += 1,
                TxnOutcome::Abandoned if hang_records.len() < 20 => hang_records.push(r.id),
                _ => {}
            }
        }
        let mut long_by_outcome = BTreeMap::new();
        for id in &self.long_records {
            if let Some(r) = history.get(*id) {
                *long_by_outcome.entry(outcome_name(&r.outcome)).or_insert(0) += 1;
            }
        }
        TxnChaosReport {
            seed: config.seed,
            duration: config.duration,
            transactions,
            by_mode,
            long_by_outcome,
            forced_expiries: self.shared.forced_expiries.load(Ordering::SeqCst),
            undetermined,
            faults,
            drops_fired,
            forwarded: 0,
            replica_served: 0,
            tiflash_calls: 0,
            fault_windows: Vec::new(),
            heartbeats,
            lock_checks,
            lock_waits,
            deadlock_aborts,
            check,
            hangs: usize::try_from(self.shared.hangs.load(Ordering::SeqCst)).unwrap_or(usize::MAX),
            hang_records,
            late_calls: self.shared.clock.late.load(Ordering::SeqCst),
            late_call_sites: self
                .shared
                .clock
                .late_sites
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            slowest_call: (
                Duration::from_micros(self.shared.clock.slowest_micros.load(Ordering::SeqCst)),
                self.shared.clock.deadline,
            ),
            panics: self.panics
                + panics
                + usize::try_from(self.shared.panics.load(Ordering::SeqCst)).unwrap_or(usize::MAX),
            history,
        }
    }
}

/// The dropped answers that fired on every store of `cluster`.
pub(crate) fn drops_fired(cluster: &SimCluster) -> u64 {
    cluster
        .store_ids()
        .into_iter()
        .map(|s| cluster.counters(s).count_outcome(Outcome::Dropped))
        .sum()
}

/// Runs the workloads and the injector, heals, reads every key in one
/// snapshot with a fresh client, and checks the history.
pub async fn run(config: TxnChaosConfig) -> crate::Result<TxnChaosReport> {
    let keys = TxnKeys::new(&config);
    let cluster = Arc::new(
        SimCluster::builder()
            .stores(config.stores.max(1))
            .raft_timing(crate::RAFT_TIMING)
            .tiflash_stores(crate::TIFLASH_STORES)
            .pd_members(config.pd_members.max(1))
            .split_keys(keys.split_keys(config.regions))
            .replicas(3)
            .start()
            .await?,
    );
    let pd = cluster.pd_endpoints();
    let connect = |c: Config| TransactionClient::new_with_config(pd.clone(), c);
    let stop = Arc::new(AtomicBool::new(false));
    let recorder = Arc::new(TxnRecorder::new());
    let origin = recorder.started();
    let workload =
        TxnWorkloadRun::start(&config, &keys, &cluster, connect, &stop, recorder).await?;

    let mut faults = config.faults.clone();
    if config.stale_reads && !faults.iter().any(|(k, _)| *k == FaultKind::Lag) {
        faults.push((FaultKind::Lag, 4));
    }
    let injector = Injector::new(InjectorConfig {
        seed: mix_seed(config.seed, 0),
        kinds: faults,
        interval: config.fault_interval,
        duration: config.fault_duration,
        max_splits: config.max_splits,
        scheduler: config.scheduler,
        keys: keys.encoded(),
    });
    let end = tokio::time::Instant::now() + config.duration;
    let (injector, panics) = run_injector(injector, &cluster, end, &stop).await;
    let ran = workload.join().await;
    // Every fault is healed (the injector's last act) and every
    // transaction has ended.
    ran.read_back(&config, &keys, &cluster, connect).await?;
    let drops = drops_fired(&cluster);
    let forwarded = crate::forwarded(&cluster);
    let replica_served = crate::replica_served(&cluster);
    let tiflash_calls = crate::tiflash_calls(&cluster);
    let lock_waits = cluster.lock_wait_stats();
    cluster.shutdown().await;

    let windows = injector
        .as_ref()
        .map(|i| i.windows_since(origin))
        .unwrap_or_default();
    let faults = injector.map(|i| i.counts().clone()).unwrap_or_default();
    tokio::task::spawn_blocking(move || {
        let mut report = ran.report(&config, &keys, faults, drops, lock_waits, panics);
        report.forwarded = forwarded;
        report.replica_served = replica_served;
        report.tiflash_calls = tiflash_calls;
        report.fault_windows = windows;
        report
    })
    .await
    .map_err(|e| {
        Error::InternalError {
            message: format!("the history check failed: {e}"),
        }
        .into()
    })
}

/// Gives every account `balance` in one optimistic transaction (no fault
/// is active yet), recorded as [`SETUP_TASK`]; a few attempts.
async fn setup_accounts(
    client: &TransactionClient,
    recorder: &TxnRecorder,
    accounts: &[Vec<u8>],
    balance: i64,
) -> Result<()> {
    let mut last = None;
    for _attempt in 0..5 {
        let invoke = recorder.now();
        let mut draft = Draft::default();
        let txn = async {
            let mut txn = client
                .begin_with_options(options_for(TxnMode::Optimistic))
                .await?;
            draft.start_ts = Some(txn.start_timestamp().version());
            let mut body = Ok(());
            for key in accounts {
                if let Err(e) = txn.put(key.clone(), balance.to_string()).await {
                    body = Err(e);
                    break;
                }
                draft.ops.push(TxnOp::WriteBalance {
                    key: key.clone(),
                    balance,
                });
            }
            Ok::<_, Error>(finish(txn, body).await)
        };
        let outcome = match txn.await {
            Ok(outcome) => outcome,
            Err(e) => aborted(&e),
        };
        let committed = outcome.is_committed();
        let uncertain = outcome.is_uncertain();
        last = Some(outcome.clone());
        recorder.record(TxnRecord {
            id: 0,
            task: SETUP_TASK,
            workload: TxnWorkload::Bank,
            mode: TxnMode::Optimistic,
            start_ts: draft.start_ts,
            invoke,
            complete: Some(recorder.now()),
            ops: draft.ops,
            outcome,
        });
        if committed {
            return Ok(());
        }
        if uncertain {
            break;
        }
    }
    Err(Error::InternalError {
        message: format!("could not give the accounts their balance: {last:?}"),
    })
}

/// One snapshot reading every list, scratch key and account, recorded as
/// two [`FINAL_TASK`] records (list-append and bank) with the snapshot's
/// timestamp; a failed attempt is recorded as aborted and retried.
async fn final_reads(
    reader: &TransactionClient,
    recorder: &TxnRecorder,
    lists: &[Vec<u8>],
    scratch: &[Vec<u8>],
    accounts: &[Vec<u8>],
) {
    let list_keys: Vec<Vec<u8>> = lists.iter().chain(scratch).cloned().collect();
    for _attempt in 0..5 {
        let invoke = recorder.now();
        let mut list_draft = Draft::default();
        let mut bank_draft = Draft::default();
        let result = async {
            let ts = reader.current_timestamp().await?;
            list_draft.start_ts = Some(ts.version());
            bank_draft.start_ts = Some(ts.version());
            let mut snapshot = reader.snapshot(
                ts,
                TransactionOptions::new_optimistic().drop_check(CheckLevel::Warn),
            );
            let found = Reader::Snap(&mut snapshot)
                .batch_get(list_keys.clone())
                .await?;
            for key in &list_keys {
                list_draft.ops.push(TxnOp::Read {
                    key: key.clone(),
                    list: found.get(key).map(|v| decode_list(v)),
                    locking: false,
                });
            }
            read_balances(
                &mut Reader::Snap(&mut snapshot),
                accounts,
                true,
                &mut bank_draft,
            )
            .await
        }
        .await;
        let complete = Some(recorder.now());
        let outcome = match &result {
            Ok(()) => TxnOutcome::Committed { commit_ts: None },
            Err(e) => aborted(e),
        };
        for (workload, draft) in [
            (TxnWorkload::ListAppend, list_draft),
            (TxnWorkload::Bank, bank_draft),
        ] {
            recorder.record(TxnRecord {
                id: 0,
                task: FINAL_TASK,
                workload,
                mode: TxnMode::Snapshot,
                start_ts: draft.start_ts,
                invoke,
                complete,
                ops: draft.ops,
                outcome: outcome.clone(),
            });
        }
        if result.is_ok() {
            return;
        }
    }
}

fn mix_seed(seed: u64, stream: u64) -> u64 {
    seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03)
}
