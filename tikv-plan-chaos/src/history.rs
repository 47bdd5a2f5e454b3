//! The history a chaos run records: one [`OpRecord`] per client operation,
//! with its invoke and complete times, what it asked and what came back.

use std::sync::Mutex;
use tokio::time::Instant;

use tikv_plan::Error;

/// What a client asked for. Keys and values are plain bytes; every value a
/// chaos run writes is unique, which is what makes the check cheap.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpKind {
    /// `get(key)`.
    Get {
        /// The key.
        key: Vec<u8>,
    },
    /// `batch_get(keys)`.
    BatchGet {
        /// The keys.
        keys: Vec<Vec<u8>>,
    },
    /// `scan(start..end, limit)` (an empty `end` is unbounded).
    Scan {
        /// The inclusive lower bound.
        start: Vec<u8>,
        /// The exclusive upper bound; empty: unbounded.
        end: Vec<u8>,
        /// The most pairs asked for.
        limit: u32,
    },
    /// `put(key, value)`.
    Put {
        /// The key.
        key: Vec<u8>,
        /// The value.
        value: Vec<u8>,
    },
    /// `batch_put(pairs)`.
    BatchPut {
        /// The pairs (distinct keys).
        pairs: Vec<(Vec<u8>, Vec<u8>)>,
    },
    /// `delete(key)`.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
    /// `batch_delete(keys)`.
    BatchDelete {
        /// The keys.
        keys: Vec<Vec<u8>>,
    },
    /// `delete_range(start..end)` (an empty `end` is unbounded).
    DeleteRange {
        /// The inclusive lower bound.
        start: Vec<u8>,
        /// The exclusive upper bound; empty: unbounded.
        end: Vec<u8>,
    },
    /// `compare_and_swap(key, expected, new)`.
    Cas {
        /// The key.
        key: Vec<u8>,
        /// The value the key must hold (`None`: it must not exist).
        expected: Option<Vec<u8>>,
        /// The value to set.
        new: Vec<u8>,
    },
}

impl OpKind {
    /// True for the operations that change data.
    pub fn is_write(&self) -> bool {
        !matches!(
            self,
            OpKind::Get { .. } | OpKind::BatchGet { .. } | OpKind::Scan { .. }
        )
    }

    /// True for the writes that may touch keys of several Regions, whose
    /// definite failure does not say which keys were written.
    pub fn is_multi_key_write(&self) -> bool {
        matches!(
            self,
            OpKind::BatchPut { .. } | OpKind::BatchDelete { .. } | OpKind::DeleteRange { .. }
        )
    }

    /// True when the operation reads or writes `key` (a scan or a range
    /// delete: when `key` is in its range).
    pub fn touches(&self, key: &[u8]) -> bool {
        let in_range = |start: &[u8], end: &[u8]| key >= start && (end.is_empty() || key < end);
        match self {
            OpKind::Get { key: k }
            | OpKind::Put { key: k, .. }
            | OpKind::Delete { key: k }
            | OpKind::Cas { key: k, .. } => k.as_slice() == key,
            OpKind::BatchGet { keys } | OpKind::BatchDelete { keys } => {
                keys.iter().any(|k| k.as_slice() == key)
            }
            OpKind::BatchPut { pairs } => pairs.iter().any(|(k, _)| k.as_slice() == key),
            OpKind::Scan { start, end, .. } | OpKind::DeleteRange { start, end } => {
                in_range(start, end)
            }
        }
    }

    /// A short name: `get`, `batch_get`, `scan`, `put`, `batch_put`,
    /// `delete`, `batch_delete`, `delete_range`, `cas`.
    pub fn name(&self) -> &'static str {
        match self {
            OpKind::Get { .. } => "get",
            OpKind::BatchGet { .. } => "batch_get",
            OpKind::Scan { .. } => "scan",
            OpKind::Put { .. } => "put",
            OpKind::BatchPut { .. } => "batch_put",
            OpKind::Delete { .. } => "delete",
            OpKind::BatchDelete { .. } => "batch_delete",
            OpKind::DeleteRange { .. } => "delete_range",
            OpKind::Cas { .. } => "cas",
        }
    }
}

/// What came back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    /// A write succeeded.
    Done,
    /// A `get` answered (`None`: the key does not exist).
    Value(Option<Vec<u8>>),
    /// A `batch_get` or `scan` answered with these pairs.
    Pairs(Vec<(Vec<u8>, Vec<u8>)>),
    /// A compare-and-swap answered: the value before it and whether it
    /// swapped.
    Cas {
        /// The value before the call.
        previous: Option<Vec<u8>>,
        /// Whether the new value was set.
        swapped: bool,
    },
    /// The client returned an error.
    Failed {
        /// The error says the operation may or may not have been applied
        /// ([`Error::is_undetermined`], anywhere in its chain).
        undetermined: bool,
        /// The error, printed.
        message: String,
    },
    /// The operation did not return within the run's generous bound and was
    /// abandoned (counted as a hang).
    Abandoned,
}

impl OpResult {
    /// The result of a failed call.
    pub fn failed(error: &Error) -> Self {
        OpResult::Failed {
            undetermined: undetermined_anywhere(error),
            message: error.to_string(),
        }
    }

    /// True when the call returned successfully.
    pub fn is_ok(&self) -> bool {
        !matches!(self, OpResult::Failed { .. } | OpResult::Abandoned)
    }
}

/// True when `error`, or an error it wraps, says the outcome is unknown.
pub fn undetermined_anywhere(error: &Error) -> bool {
    error.undetermined_anywhere()
}

/// One operation of the history. Times are microseconds since the run
/// started.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpRecord {
    /// Position in the history.
    pub id: usize,
    /// The workload task that ran it ([`FINAL_READER`] for the reads after
    /// healing).
    pub task: usize,
    /// When the call started.
    pub invoke: u64,
    /// When it returned; `None` if it never did.
    pub complete: Option<u64>,
    /// What was asked.
    pub kind: OpKind,
    /// What came back.
    pub result: OpResult,
}

/// Bytes as text: printable ASCII as it is, any other byte escaped
/// (`\x00`), so encoded keys print legibly.
fn text(bytes: &[u8]) -> String {
    bytes.escape_ascii().to_string()
}

fn pairs_text(pairs: &[(Vec<u8>, Vec<u8>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .map(|(k, v)| format!("{}={}", text(k), text(v)))
        .collect();
    format!("[{}]", parts.join(" "))
}

fn keys_text(keys: &[Vec<u8>]) -> String {
    let parts: Vec<String> = keys.iter().map(|k| text(k)).collect();
    format!("[{}]", parts.join(" "))
}

impl std::fmt::Display for OpKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpKind::Get { key } => write!(f, "get {}", text(key)),
            OpKind::BatchGet { keys } => write!(f, "batch_get {}", keys_text(keys)),
            OpKind::Scan { start, end, limit } => {
                write!(f, "scan {}..{} limit {limit}", text(start), text(end))
            }
            OpKind::Put { key, value } => write!(f, "put {}={}", text(key), text(value)),
            OpKind::BatchPut { pairs } => write!(f, "batch_put {}", pairs_text(pairs)),
            OpKind::Delete { key } => write!(f, "delete {}", text(key)),
            OpKind::BatchDelete { keys } => write!(f, "batch_delete {}", keys_text(keys)),
            OpKind::DeleteRange { start, end } => {
                write!(f, "delete_range {}..{}", text(start), text(end))
            }
            OpKind::Cas { key, expected, new } => write!(
                f,
                "cas {} {}->{}",
                text(key),
                expected
                    .as_deref()
                    .map_or_else(|| "(absent)".to_owned(), text),
                text(new)
            ),
        }
    }
}

impl std::fmt::Display for OpResult {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpResult::Done => f.write_str("ok"),
            OpResult::Value(v) => match v {
                Some(v) => f.write_str(&text(v)),
                None => f.write_str("(absent)"),
            },
            OpResult::Pairs(pairs) => f.write_str(&pairs_text(pairs)),
            OpResult::Cas { previous, swapped } => write!(
                f,
                "{} (was {})",
                if *swapped { "swapped" } else { "not swapped" },
                previous
                    .as_deref()
                    .map_or_else(|| "(absent)".to_owned(), text)
            ),
            OpResult::Failed {
                undetermined,
                message,
            } => write!(
                f,
                "{}: {message}",
                if *undetermined {
                    "UNDETERMINED"
                } else {
                    "failed"
                }
            ),
            OpResult::Abandoned => f.write_str("abandoned (no answer)"),
        }
    }
}

impl std::fmt::Display for OpRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let task = if self.task == FINAL_READER {
            "final".to_owned()
        } else {
            format!("t{}", self.task)
        };
        let complete = self
            .complete
            .map_or_else(|| "never".to_owned(), |c| c.to_string());
        write!(
            f,
            "#{} {task} [{}..{}µs] {} -> {}",
            self.id, self.invoke, complete, self.kind, self.result
        )
    }
}

/// The task number of the reads made after every fault is healed.
pub const FINAL_READER: usize = usize::MAX;

/// Collects [`OpRecord`]s from concurrent tasks.
#[derive(Debug)]
pub struct Recorder {
    start: Instant,
    records: Mutex<Vec<OpRecord>>,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

impl Recorder {
    /// A recorder whose clock (tokio's, so a simulation's virtual time)
    /// starts now.
    pub fn new() -> Self {
        Recorder {
            start: Instant::now(),
            records: Mutex::new(Vec::new()),
        }
    }

    /// When the recorder was made: time zero of its records.
    pub fn started(&self) -> Instant {
        self.start
    }

    /// Microseconds since the recorder was made.
    pub fn now(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Adds one finished (or abandoned) operation; returns its id.
    pub fn record(
        &self,
        task: usize,
        invoke: u64,
        complete: Option<u64>,
        kind: OpKind,
        result: OpResult,
    ) -> usize {
        let mut records = match self.records.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        let id = records.len();
        records.push(OpRecord {
            id,
            task,
            invoke,
            complete,
            kind,
            result,
        });
        id
    }

    /// Every record so far, in the order they were added.
    pub fn records(&self) -> Vec<OpRecord> {
        match self.records.lock() {
            Ok(g) => g.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }
}
