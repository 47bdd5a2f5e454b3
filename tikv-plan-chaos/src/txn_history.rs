//! The history a transactional chaos run records: one [`TxnRecord`] per
//! transaction, with the timestamps the client reported, the reads and
//! writes it made, and how it ended.
//!
//! Two workloads share this shape:
//!
//! - **list-append** (Elle's model): every key holds a list of unique
//!   integers; a transaction reads lists ([`TxnOp::Read`]) and appends
//!   elements ([`TxnOp::Append`], a read-modify-write inside the
//!   transaction). Since every element is appended once, the final lists
//!   give each key's version order, which is what makes cycle search cheap.
//! - **bank**: accounts hold integer balances; transfers read two accounts
//!   and write both ([`TxnOp::ReadBalance`], [`TxnOp::WriteBalance`]);
//!   auditors read every account in one transaction and the total must
//!   never change.

use std::sync::Mutex;
use tokio::time::Instant;

/// Which workload a transaction belongs to (they use disjoint keys).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnWorkload {
    /// Lists of unique integers, appended to.
    ListAppend,
    /// Accounts whose total is constant.
    Bank,
}

/// How the transaction was run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TxnMode {
    /// Optimistic, two-phase commit.
    Optimistic,
    /// Optimistic with async commit.
    AsyncCommit,
    /// Optimistic, one-phase commit tried.
    OnePc,
    /// Pessimistic, two-phase commit.
    Pessimistic,
    /// Pessimistic with async commit.
    PessimisticAsyncCommit,
    /// A read-only snapshot (`TransactionClient::snapshot`).
    Snapshot,
    /// A read-only snapshot at a timestamp taken in the past, read with
    /// stale reads: held to its timestamp, not to real time (it may miss a
    /// commit that completed before it began, if its commit ts is above the
    /// snapshot's).
    StaleSnapshot,
}

impl TxnMode {
    /// True for a snapshot read at a timestamp in the past: real time says
    /// nothing of what it must show.
    pub fn is_stale(self) -> bool {
        self == TxnMode::StaleSnapshot
    }

    /// True for the pessimistic modes.
    pub fn is_pessimistic(self) -> bool {
        matches!(self, TxnMode::Pessimistic | TxnMode::PessimisticAsyncCommit)
    }
}

/// One step of a transaction, as the client saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOp {
    /// A list key was read (`get`, `batch_get`, `scan` or
    /// `get_for_update`). `list` is `None` when the key did not exist.
    /// `locking` marks a pessimistic `get_for_update`, which reads the
    /// latest committed value (at a fresh `for_update_ts`), not the
    /// snapshot at `start_ts`.
    Read {
        /// The key.
        key: Vec<u8>,
        /// The list it held; `None`: absent.
        list: Option<Vec<u64>>,
        /// A locking read (see above).
        locking: bool,
    },
    /// `element` was appended to the list at `key` (the transaction read the
    /// list, possibly with a locking read recorded as a [`TxnOp::Read`]
    /// before this op, and wrote it back with `element` at the end; an
    /// absent key became the list `[element]`). Elements are unique in a
    /// run.
    Append {
        /// The key.
        key: Vec<u8>,
        /// The element.
        element: u64,
    },
    /// A bank account was read; `None`: absent. `locking` as in
    /// [`TxnOp::Read`].
    ReadBalance {
        /// The account's key.
        key: Vec<u8>,
        /// The balance.
        balance: Option<i64>,
        /// A locking read.
        locking: bool,
    },
    /// A bank account was written.
    WriteBalance {
        /// The account's key.
        key: Vec<u8>,
        /// The new balance.
        balance: i64,
    },
}

impl TxnOp {
    /// The key the step is about.
    pub fn key(&self) -> &[u8] {
        match self {
            TxnOp::Read { key, .. }
            | TxnOp::Append { key, .. }
            | TxnOp::ReadBalance { key, .. }
            | TxnOp::WriteBalance { key, .. } => key,
        }
    }

    /// True for the steps that write.
    pub fn is_write(&self) -> bool {
        matches!(self, TxnOp::Append { .. } | TxnOp::WriteBalance { .. })
    }
}

/// How a transaction ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnOutcome {
    /// `commit()` returned `Ok`. `commit_ts` is what it returned (`None`
    /// for a transaction that wrote nothing, and for snapshots).
    Committed {
        /// The commit timestamp `commit()` returned.
        commit_ts: Option<u64>,
    },
    /// A definite failure: nothing the transaction wrote is visible, ever.
    /// Its reads (made before the failure) are still in `ops`.
    Aborted {
        /// The error, printed.
        error: String,
    },
    /// `commit()` returned an undetermined error: either every write took
    /// effect at one commit timestamp, or none did.
    Undetermined {
        /// The error, printed.
        error: String,
    },
    /// The transaction did not finish within the run's bound (a hang); it
    /// is treated like [`TxnOutcome::Undetermined`] by the checks.
    Abandoned,
}

impl TxnOutcome {
    /// True for `Committed`.
    pub fn is_committed(&self) -> bool {
        matches!(self, TxnOutcome::Committed { .. })
    }

    /// True when the writes may or may not have taken effect.
    pub fn is_uncertain(&self) -> bool {
        matches!(
            self,
            TxnOutcome::Undetermined { .. } | TxnOutcome::Abandoned
        )
    }
}

/// One transaction of the history. Times are microseconds since the run
/// started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnRecord {
    /// Position in the history.
    pub id: usize,
    /// The workload task that ran it (`usize::MAX`, like
    /// [`FINAL_READER`](super::FINAL_READER), for the reads after healing).
    pub task: usize,
    /// The workload.
    pub workload: TxnWorkload,
    /// How it ran.
    pub mode: TxnMode,
    /// The start timestamp (`None` when `begin` itself failed).
    pub start_ts: Option<u64>,
    /// When `begin` was called.
    pub invoke: u64,
    /// When the transaction ended (commit, rollback or failure returned);
    /// `None` if it never did.
    pub complete: Option<u64>,
    /// The steps, in the order the client made them. Only the steps that
    /// returned successfully are listed (a read that failed is not).
    pub ops: Vec<TxnOp>,
    /// How it ended.
    pub outcome: TxnOutcome,
}

/// Collects [`TxnRecord`]s from concurrent tasks; assigns ids.
#[derive(Debug)]
pub struct TxnRecorder {
    start: Instant,
    records: Mutex<Vec<TxnRecord>>,
}

impl Default for TxnRecorder {
    fn default() -> Self {
        TxnRecorder::new()
    }
}

impl TxnRecorder {
    /// A recorder whose clock starts now.
    pub fn new() -> Self {
        TxnRecorder::since(Instant::now())
    }

    /// A recorder whose clock started at `start` (another recorder's
    /// [`started`](super::Recorder::started), to put two histories on one
    /// clock). The clock is tokio's, so it is simulated time wherever
    /// tokio's time is.
    pub fn since(start: Instant) -> Self {
        TxnRecorder {
            start,
            records: Mutex::new(Vec::new()),
        }
    }

    /// When the recorder's clock started.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// Microseconds since the recorder was made.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Adds one transaction (its `id` is overwritten); returns its id.
    pub fn record(&self, mut record: TxnRecord) -> usize {
        let mut records = match self.records.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        record.id = records.len();
        let id = record.id;
        records.push(record);
        id
    }

    /// Every record so far, in the order they were added.
    pub fn records(&self) -> Vec<TxnRecord> {
        match self.records.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}
