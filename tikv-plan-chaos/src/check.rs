//! Checks a recorded history: per key, is it the history of one linearizable
//! register with compare-and-set and delete? Also: did an acknowledged write
//! vanish by the end, and was any write applied twice?
//!
//! The linearizability search is Wing and Gong's, with Lowe's memoisation
//! of (linearized set, register value) states: at each step any pending
//! operation invoked before the earliest return of the operations still
//! pending may take effect next. Operations whose outcome is unknown
//! (undetermined, abandoned, and every failed write under at-least-once
//! writes) may take effect at any time after their invoke, or never. Every
//! value a run writes is unique, so such a write that nobody observed can be
//! dropped (taking effect could only hide a value nobody saw), and unknown
//! deletes are interchangeable (the earliest unused one is always the one to
//! try). That keeps the search close to linear on a good history.
//!
//! This file is long because it is one search and the passes that prepare it
//! (unique values, pruning of unobserved writes, the final-read checks),
//! which share its per-key state.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};

use super::history::{OpKind, OpRecord, OpResult, FINAL_READER};

/// How the client under test treats a write whose outcome it cannot know.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WriteMode {
    /// Writes are never re-sent once they may have reached a store (the
    /// default client): a write that failed without saying "undetermined"
    /// did not happen.
    #[default]
    AtMostOnce,
    /// `Config::at_least_once_writes`: any failed write may have happened,
    /// at any time after its invoke.
    AtLeastOnce,
}

/// Options of [`check_history`].
#[derive(Debug, Clone, Copy)]
pub struct CheckOptions {
    /// How failed writes are read.
    pub mode: WriteMode,
    /// The most search states one key may use before it is reported
    /// undecided.
    pub max_states_per_key: usize,
}

impl Default for CheckOptions {
    fn default() -> Self {
        CheckOptions {
            mode: WriteMode::AtMostOnce,
            max_states_per_key: 2_000_000,
        }
    }
}

/// A key whose history is not linearizable.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyViolation {
    /// The key.
    pub key: Vec<u8>,
    /// Operations on it that the search had to place.
    pub ops: usize,
    /// The most of them any attempted order could place.
    pub placed: usize,
    /// Record ids of the operations that could not be placed next at that
    /// point (one of them must come next and none fits).
    pub stuck_at: Vec<usize>,
    /// The register's value at that point.
    pub value_then: Option<Vec<u8>>,
}

/// An acknowledged write the reads after healing do not reflect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LostWrite {
    /// The key.
    pub key: Vec<u8>,
    /// The record id of the acknowledged write that was lost.
    pub write: usize,
    /// The record id of the final read.
    pub final_read: usize,
    /// What the final read saw.
    pub final_value: Option<Vec<u8>>,
}

/// A value seen, then replaced, then seen again: its write took effect
/// twice (every value is written once).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DoubleApply {
    /// The key.
    pub key: Vec<u8>,
    /// The value seen twice.
    pub value: Vec<u8>,
    /// The record id of the write of that value, if any.
    pub writer: Option<usize>,
    /// That write's operation name (`put`, `cas`, …; `unknown` if none).
    pub writer_kind: &'static str,
    /// Record ids: the value seen, another value seen strictly later, the
    /// value seen again strictly after that.
    pub observations: [usize; 3],
}

/// What [`check_history`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CheckReport {
    /// Keys checked.
    pub keys: usize,
    /// Per-key operations the search had to place, over all keys.
    pub placed_ops: usize,
    /// Search states visited, over all keys.
    pub search_states: usize,
    /// Keys whose history is not linearizable.
    pub non_linearizable: Vec<KeyViolation>,
    /// Keys whose search ran out of states (neither proved nor refuted).
    pub undecided: Vec<Vec<u8>>,
    /// Acknowledged writes lost by the end.
    pub lost_writes: Vec<LostWrite>,
    /// Writes applied twice.
    pub double_applies: Vec<DoubleApply>,
}

impl CheckReport {
    /// True when nothing is wrong and nothing undecided.
    pub fn is_clean(&self) -> bool {
        self.non_linearizable.is_empty()
            && self.undecided.is_empty()
            && self.lost_writes.is_empty()
            && self.double_applies.is_empty()
    }

    /// Writes applied twice whose write was a compare-and-swap.
    pub fn double_cas(&self) -> usize {
        self.double_applies
            .iter()
            .filter(|d| d.writer_kind == "cas")
            .count()
    }
}

/// The absent value.
const ABSENT: u32 = 0;
/// Every value no operation observes (in the search only).
const UNSEEN: u32 = u32::MAX;
/// A return time that never comes.
const NEVER: u64 = u64::MAX;

/// What one operation does to one key's register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    /// Sets the value (`ABSENT`: deletes).
    Write(u32),
    /// Observes the value.
    Read(u32),
    /// A compare-and-swap that swapped: the value was `expected` (and the
    /// reply said `seen`), now `new`.
    CasSwap { expected: u32, seen: u32, new: u32 },
    /// A compare-and-swap that did not swap: the value was `seen`, not
    /// `expected`.
    CasFail { expected: u32, seen: u32 },
    /// A compare-and-swap with an unknown outcome.
    CasMaybe { expected: u32, new: u32 },
}

impl Action {
    /// The value this action proves the register held, if any.
    fn observed(self) -> Option<u32> {
        match self {
            Action::Read(v) | Action::CasFail { seen: v, .. } => Some(v),
            Action::CasSwap { seen, .. } => Some(seen),
            Action::Write(_) | Action::CasMaybe { .. } => None,
        }
    }

    /// The value this action may set, if any.
    fn written(self) -> Option<u32> {
        match self {
            Action::Write(v) => Some(v),
            Action::CasSwap { new, .. } | Action::CasMaybe { new, .. } => Some(new),
            Action::Read(_) | Action::CasFail { .. } => None,
        }
    }
}

/// One operation as seen by one key.
#[derive(Debug, Clone, Copy)]
struct Event {
    record: usize,
    invoke: u64,
    /// `NEVER` when it may take effect at any time after `invoke`.
    ret: u64,
    action: Action,
    /// It may also not take effect at all.
    optional: bool,
}

/// Interns values: `ABSENT` is 0, written and read values get 1, 2, …
#[derive(Default)]
struct Values {
    ids: HashMap<Vec<u8>, u32>,
    bytes: Vec<Vec<u8>>,
}

impl Values {
    fn id(&mut self, value: Option<&[u8]>) -> u32 {
        let Some(value) = value else { return ABSENT };
        if let Some(id) = self.ids.get(value) {
            return *id;
        }
        self.bytes.push(value.to_vec());
        let id = u32::try_from(self.bytes.len()).unwrap_or(u32::MAX);
        self.ids.insert(value.to_vec(), id);
        id
    }

    fn bytes(&self, id: u32) -> Option<Vec<u8>> {
        if id == ABSENT {
            return None;
        }
        if id == UNSEEN {
            return Some(b"(a value nobody read)".to_vec());
        }
        self.bytes.get(id as usize - 1).cloned()
    }
}

/// How a record's write is to be read.
enum WriteStatus {
    /// It happened within its interval.
    Done,
    /// It may have happened within its interval, or not.
    MaybeWithin,
    /// It may happen at any time after its invoke, or never.
    MaybeAnyTime,
    /// It did not happen.
    NotDone,
}

fn write_status(record: &OpRecord, mode: WriteMode) -> WriteStatus {
    let single_cas = matches!(record.kind, OpKind::Cas { .. });
    match &record.result {
        OpResult::Abandoned => WriteStatus::MaybeAnyTime,
        _ if record.complete.is_none() => WriteStatus::MaybeAnyTime,
        OpResult::Failed { undetermined, .. } => {
            if *undetermined {
                WriteStatus::MaybeAnyTime
            } else if mode == WriteMode::AtLeastOnce && !single_cas {
                // Compare-and-swap is never re-sent, in either mode.
                WriteStatus::MaybeAnyTime
            } else if record.kind.is_multi_key_write() {
                // Some shards may have succeeded before another failed.
                WriteStatus::MaybeWithin
            } else {
                WriteStatus::NotDone
            }
        }
        _ => WriteStatus::Done,
    }
}

fn in_range(key: &[u8], start: &[u8], end: &[u8]) -> bool {
    key >= start && (end.is_empty() || key < end)
}

/// Splits every record into per-key events.
fn events_by_key(
    records: &[OpRecord],
    keys: &[Vec<u8>],
    mode: WriteMode,
    values: &mut Values,
) -> BTreeMap<Vec<u8>, Vec<Event>> {
    let mut by_key: BTreeMap<Vec<u8>, Vec<Event>> = BTreeMap::new();
    for key in keys {
        by_key.entry(key.clone()).or_default();
    }
    for record in records {
        let ret = record.complete.unwrap_or(NEVER);
        let mut push = |key: &[u8], action: Action, ret: u64, optional: bool| {
            by_key.entry(key.to_vec()).or_default().push(Event {
                record: record.id,
                invoke: record.invoke,
                ret,
                action,
                optional,
            });
        };
        if !record.kind.is_write() {
            if !record.result.is_ok() {
                continue; // A failed read tells nothing.
            }
            match (&record.kind, &record.result) {
                (OpKind::Get { key }, OpResult::Value(v)) => {
                    push(key, Action::Read(values.id(v.as_deref())), ret, false);
                }
                (OpKind::BatchGet { keys: asked }, OpResult::Pairs(pairs)) => {
                    let got: BTreeMap<&[u8], &[u8]> = pairs
                        .iter()
                        .map(|(k, v)| (k.as_slice(), v.as_slice()))
                        .collect();
                    let asked: BTreeSet<&[u8]> = asked.iter().map(Vec::as_slice).collect();
                    for key in asked {
                        let v = values.id(got.get(key).copied());
                        push(key, Action::Read(v), ret, false);
                    }
                }
                (OpKind::Scan { start, end, limit }, OpResult::Pairs(pairs)) => {
                    let got: BTreeMap<&[u8], &[u8]> = pairs
                        .iter()
                        .map(|(k, v)| (k.as_slice(), v.as_slice()))
                        .collect();
                    for (k, v) in &got {
                        let v = values.id(Some(v));
                        push(k, Action::Read(v), ret, false);
                    }
                    // A full page may have stopped early: it proves absence
                    // only up to its last key.
                    let truncated = *limit > 0 && pairs.len() >= *limit as usize;
                    let last = got.keys().next_back().copied();
                    for key in keys {
                        let seen_through = match (truncated, last) {
                            (true, Some(last)) => key.as_slice() <= last,
                            (true, None) => false,
                            (false, _) => true,
                        };
                        if in_range(key, start, end)
                            && seen_through
                            && !got.contains_key(key.as_slice())
                        {
                            push(key, Action::Read(ABSENT), ret, false);
                        }
                    }
                }
                _ => {} // A result that does not fit the request: nothing to learn.
            }
            continue;
        }
        let (ret, optional) = match write_status(record, mode) {
            WriteStatus::Done => (ret, false),
            WriteStatus::MaybeWithin => (ret, true),
            WriteStatus::MaybeAnyTime => (NEVER, true),
            WriteStatus::NotDone => continue,
        };
        match &record.kind {
            OpKind::Put { key, value } => {
                push(key, Action::Write(values.id(Some(value))), ret, optional);
            }
            OpKind::BatchPut { pairs } => {
                for (key, value) in pairs {
                    push(key, Action::Write(values.id(Some(value))), ret, optional);
                }
            }
            OpKind::Delete { key } => push(key, Action::Write(ABSENT), ret, optional),
            OpKind::BatchDelete { keys: deleted } => {
                let deleted: BTreeSet<&[u8]> = deleted.iter().map(Vec::as_slice).collect();
                for key in deleted {
                    push(key, Action::Write(ABSENT), ret, optional);
                }
            }
            OpKind::DeleteRange { start, end } => {
                for key in keys.iter().filter(|k| in_range(k, start, end)) {
                    push(key, Action::Write(ABSENT), ret, optional);
                }
            }
            OpKind::Cas { key, expected, new } => {
                let expected = values.id(expected.as_deref());
                let new = values.id(Some(new));
                let action = match &record.result {
                    OpResult::Cas {
                        previous,
                        swapped: true,
                    } => Action::CasSwap {
                        expected,
                        seen: values.id(previous.as_deref()),
                        new,
                    },
                    OpResult::Cas {
                        previous,
                        swapped: false,
                    } => Action::CasFail {
                        expected,
                        seen: values.id(previous.as_deref()),
                    },
                    _ => Action::CasMaybe { expected, new },
                };
                push(key, action, ret, optional);
            }
            OpKind::Get { .. } | OpKind::BatchGet { .. } | OpKind::Scan { .. } => {}
        }
    }
    by_key
}

/// Checks a whole history. `keys` is the run's key set: a scan or a range
/// delete concerns the keys of it that fall in its range.
pub fn check_history(
    records: &[OpRecord],
    keys: &[Vec<u8>],
    options: &CheckOptions,
) -> CheckReport {
    let mut values = Values::default();
    let by_key = events_by_key(records, keys, options.mode, &mut values);
    let mut report = CheckReport {
        keys: by_key.len(),
        ..CheckReport::default()
    };
    for (key, events) in &by_key {
        if let Some(lost) = lost_write(key, events, records, &values) {
            report.lost_writes.push(lost);
        }
        if let Some(double) = double_apply(key, events, records, &values) {
            report.double_applies.push(double);
        }
        let search = Search::new(events);
        report.placed_ops += search.fin.len();
        let (verdict, states) = search.run(options.max_states_per_key);
        report.search_states += states;
        match verdict {
            Verdict::Linearizable => {}
            Verdict::Undecided => report.undecided.push(key.clone()),
            Verdict::NotLinearizable {
                placed,
                stuck_at,
                value_then,
            } => report.non_linearizable.push(KeyViolation {
                key: key.clone(),
                ops: search.fin.len(),
                placed,
                stuck_at,
                value_then: values.bytes(value_then),
            }),
        }
    }
    report
}

/// An acknowledged write the last read after healing cannot reflect: the
/// value that read returned was written (or deleted) by an operation that
/// finished before the acknowledged write began.
fn lost_write(
    key: &[u8],
    events: &[Event],
    records: &[OpRecord],
    values: &Values,
) -> Option<LostWrite> {
    let final_read = events
        .iter()
        .filter(|e| {
            records
                .get(e.record)
                .is_some_and(|r| r.task == FINAL_READER)
        })
        .filter_map(|e| match e.action {
            Action::Read(v) => Some((e, v)),
            _ => None,
        })
        .max_by_key(|(e, _)| e.invoke)?;
    let (read, value) = final_read;
    let acknowledged = events
        .iter()
        .filter(|e| !e.optional && e.action.written().is_some() && e.ret < read.invoke);
    let lost = if value != ABSENT {
        let writer = events.iter().find(|e| {
            e.action.written() == Some(value) && !matches!(e.action, Action::CasFail { .. })
        });
        match writer {
            // A value nobody wrote: every acknowledged write is lost.
            None => acknowledged.max_by_key(|e| e.ret),
            Some(x) => acknowledged
                .filter(|w| w.record != x.record && x.ret < w.invoke)
                .max_by_key(|w| w.ret),
        }
    } else {
        // Absent: lost if some acknowledged value write began after every
        // delete that could have removed it had finished.
        let deletes: Vec<&Event> = events
            .iter()
            .filter(|e| e.action == Action::Write(ABSENT))
            .collect();
        acknowledged
            .filter(|w| w.action.written() != Some(ABSENT))
            .filter(|w| deletes.iter().all(|d| d.ret < w.invoke))
            .max_by_key(|w| w.ret)
    };
    lost.map(|w| LostWrite {
        key: key.to_vec(),
        write: w.record,
        final_read: read.record,
        final_value: values.bytes(value),
    })
}

/// A unique value seen, then another value strictly later, then the first
/// again strictly after that.
fn double_apply(
    key: &[u8],
    events: &[Event],
    records: &[OpRecord],
    values: &Values,
) -> Option<DoubleApply> {
    let observations: Vec<(u32, &Event)> = events
        .iter()
        .filter(|e| !e.optional)
        .filter_map(|e| e.action.observed().map(|v| (v, e)))
        .collect();
    let mut first_end: HashMap<u32, &Event> = HashMap::new();
    let mut last_start: HashMap<u32, &Event> = HashMap::new();
    for (v, e) in &observations {
        if *v == ABSENT {
            continue;
        }
        let first = first_end.entry(*v).or_insert(e);
        if e.ret < first.ret {
            *first = e;
        }
        let last = last_start.entry(*v).or_insert(e);
        if e.invoke > last.invoke {
            *last = e;
        }
    }
    for (v, a) in &first_end {
        let Some(c) = last_start.get(v) else { continue };
        if a.ret >= c.invoke {
            continue;
        }
        let between = observations
            .iter()
            .find(|(w, b)| w != v && b.invoke > a.ret && b.ret < c.invoke);
        if let Some((_, b)) = between {
            let writer = events
                .iter()
                .find(|e| e.action.written() == Some(*v))
                .map(|e| e.record);
            let writer_kind = writer
                .and_then(|id| records.get(id))
                .map_or("unknown", |r| r.kind.name());
            return Some(DoubleApply {
                key: key.to_vec(),
                value: values.bytes(*v).unwrap_or_default(),
                writer,
                writer_kind,
                observations: [a.record, b.record, c.record],
            });
        }
    }
    None
}

/// The outcome of one key's search.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    Linearizable,
    NotLinearizable {
        placed: usize,
        stuck_at: Vec<usize>,
        value_then: u32,
    },
    Undecided,
}

/// Which operation a search step places.
#[derive(Debug, Clone, Copy)]
enum Target {
    /// One that must be placed before its return (or, if optional, skipped
    /// before it).
    Bounded(usize),
    /// An unknown-outcome operation other than a delete.
    Free(usize),
    /// The earliest unused unknown-outcome delete.
    Delete,
}

#[derive(Debug, Clone, Copy)]
struct Step {
    target: Target,
    value_after: u32,
}

#[derive(Debug)]
struct Undo {
    target: Target,
    value: u32,
    first_open: usize,
    first_free: usize,
}

struct Frame {
    steps: Vec<Step>,
    next: usize,
    undo: Option<Undo>,
}

/// One key's search.
struct Search {
    /// Operations with a return time, by invoke.
    fin: Vec<Event>,
    /// Unknown-outcome writes and swaps somebody observed, by invoke.
    free: Vec<Event>,
    /// Invoke times of unknown-outcome deletes, ascending.
    deletes: Vec<u64>,
    fin_keys: Vec<u128>,
    free_keys: Vec<u128>,
}

/// A deterministic 64-bit mixer (splitmix64's finaliser).
fn mix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

fn mix128(tag: u64, i: u64) -> u128 {
    let a = mix64(tag.wrapping_mul(0x1000_0000_01B3) ^ i);
    let b = mix64(a ^ 0xD6E8_FEB8_6659_FD93);
    (u128::from(a) << 64) | u128::from(b)
}

impl Search {
    fn new(events: &[Event]) -> Self {
        let mut observed: HashSet<u32> = events
            .iter()
            .filter(|e| !e.optional)
            .filter_map(|e| e.action.observed())
            .collect();
        // An unknown swap whose new value is observed may need its expected
        // value in place first: that value counts as observed too.
        loop {
            let before = observed.len();
            for e in events.iter().filter(|e| e.optional) {
                if let Action::CasMaybe { expected, new } = e.action {
                    if observed.contains(&new) {
                        observed.insert(expected);
                    }
                }
            }
            if observed.len() == before {
                break;
            }
        }
        let mut fin = Vec::new();
        let mut free = Vec::new();
        let mut deletes = Vec::new();
        for e in events {
            if e.optional {
                // An unknown write of a value nobody saw cannot matter.
                if let Some(v) = e.action.written() {
                    if v != ABSENT && !observed.contains(&v) {
                        continue;
                    }
                }
            }
            let mut e = *e;
            // Values nobody observes are all alike to the rest of the
            // history: one id for them all lets the memo merge states that
            // differ only in which unseen value the register holds.
            let unseen = |v: u32| v != ABSENT && !observed.contains(&v);
            e.action = match e.action {
                Action::Write(v) if unseen(v) => Action::Write(UNSEEN),
                Action::CasSwap {
                    expected,
                    seen,
                    new,
                } if unseen(new) => Action::CasSwap {
                    expected,
                    seen,
                    new: UNSEEN,
                },
                other => other,
            };
            if e.ret != NEVER {
                fin.push(e);
            } else if !e.optional {
                // Required but never returned: cannot happen for a recorded
                // success; place it like any other.
                fin.push(e);
            } else if e.action == Action::Write(ABSENT) {
                deletes.push(e.invoke);
            } else {
                free.push(e);
            }
        }
        fin.sort_by_key(|e| (e.invoke, e.record));
        free.sort_by_key(|e| (e.invoke, e.record));
        deletes.sort_unstable();
        let fin_keys = (0..fin.len() as u64).map(|i| mix128(1, i)).collect();
        let free_keys = (0..free.len() as u64).map(|i| mix128(2, i)).collect();
        Search {
            fin,
            free,
            deletes,
            fin_keys,
            free_keys,
        }
    }

    /// The values a bounded operation may leave when placed now.
    /// `may_skip`: an optional one may be dropped now.
    fn bounded_steps(e: &Event, value: u32, may_skip: bool, out: &mut Vec<u32>) {
        match e.action {
            Action::Write(v) => out.push(v),
            Action::Read(v) => {
                if value == v {
                    out.push(value);
                }
            }
            Action::CasSwap {
                expected,
                seen,
                new,
            } => {
                if value == expected && value == seen {
                    out.push(new);
                }
            }
            Action::CasFail { expected, seen } => {
                if value == seen && value != expected {
                    out.push(value);
                }
            }
            Action::CasMaybe { expected, new } => {
                if value == expected {
                    out.push(new);
                }
            }
        }
        if may_skip && e.optional && !out.contains(&value) {
            out.push(value); // Skipped: no effect.
        }
    }

    /// The value an unknown-outcome operation leaves when it takes effect
    /// now, if it can.
    fn free_step(e: &Event, value: u32) -> Option<u32> {
        match e.action {
            Action::Write(v) => Some(v),
            Action::CasMaybe { expected, new } if value == expected => Some(new),
            _ => None,
        }
    }

    /// The verdict and the number of states visited.
    fn run(&self, budget: usize) -> (Verdict, usize) {
        let n = self.fin.len();
        if n == 0 {
            return (Verdict::Linearizable, 0);
        }
        let mut state = State {
            done_fin: vec![false; n],
            done_free: vec![false; self.free.len()],
            used_deletes: 0,
            value: ABSENT,
            first_open: 0,
            first_free: 0,
            hash: 0,
            placed: 0,
        };
        let mut visited: HashSet<u128> = HashSet::new();
        visited.insert(state.key());
        let mut deepest = (0usize, self.open_ops(&state), ABSENT);
        let mut stack = vec![Frame {
            steps: self.steps(&state),
            next: 0,
            undo: None,
        }];
        while let Some(top) = stack.last_mut() {
            if top.next >= top.steps.len() {
                if let Some(undo) = stack.pop().and_then(|f| f.undo) {
                    self.revert(&mut state, undo);
                }
                continue;
            }
            let step = top.steps[top.next];
            top.next += 1;
            let undo = self.apply(&mut state, step);
            if state.first_open >= n {
                return (Verdict::Linearizable, visited.len());
            }
            if !visited.insert(state.key()) {
                self.revert(&mut state, undo);
                continue;
            }
            if visited.len() > budget {
                return (Verdict::Undecided, visited.len());
            }
            if state.placed > deepest.0 {
                deepest = (state.placed, self.open_ops(&state), state.value);
            }
            stack.push(Frame {
                steps: self.steps(&state),
                next: 0,
                undo: Some(undo),
            });
        }
        let verdict = Verdict::NotLinearizable {
            placed: deepest.0,
            stuck_at: deepest.1,
            value_then: deepest.2,
        };
        (verdict, visited.len())
    }

    /// The bounded operations that may be placed next, and the earliest
    /// return among the pending ones.
    fn window(&self, state: &State) -> (Vec<usize>, u64) {
        let mut horizon = NEVER;
        let mut open = Vec::new();
        for i in state.first_open..self.fin.len() {
            let e = &self.fin[i];
            if e.invoke > horizon {
                break;
            }
            if state.done_fin[i] {
                continue;
            }
            horizon = horizon.min(e.ret);
            open.push(i);
        }
        open.retain(|i| self.fin[*i].invoke <= horizon);
        (open, horizon)
    }

    fn open_ops(&self, state: &State) -> Vec<usize> {
        self.window(state)
            .0
            .into_iter()
            .map(|i| self.fin[i].record)
            .collect()
    }

    fn steps(&self, state: &State) -> Vec<Step> {
        let (open, horizon) = self.window(state);
        // A pending read that fits the current value goes first, alone:
        // it changes nothing, and any order that places it later stays
        // valid with it moved here (it is already minimal).
        for i in &open {
            let e = &self.fin[*i];
            let fits = match e.action {
                Action::Read(v) => v == state.value,
                Action::CasFail { expected, seen } => {
                    seen == state.value && expected != state.value
                }
                _ => false,
            };
            if fits && !e.optional {
                return vec![Step {
                    target: Target::Bounded(*i),
                    value_after: state.value,
                }];
            }
        }
        // An unknown-outcome write is only worth placing right before an
        // operation that observes its value: in any valid order, what
        // follows it is such an observer (its value is unique; anything else
        // would overwrite it unseen), so it can be moved there. Likewise an
        // unknown delete, before an observer of absence.
        let mut wanted: Vec<u32> = open
            .iter()
            .filter_map(|i| self.fin[*i].action.observed())
            .collect();
        for (j, e) in self.free.iter().enumerate().skip(state.first_free) {
            if e.invoke > horizon {
                break;
            }
            if let (false, Action::CasMaybe { expected, .. }) = (state.done_free[j], e.action) {
                wanted.push(expected);
            }
        }
        let mut steps = Vec::new();
        let mut values = Vec::new();
        for i in &open {
            values.clear();
            // Dropping an optional operation changes nothing, so it is
            // dropped as late as possible: when its return is what holds the
            // others back.
            let e = &self.fin[*i];
            Search::bounded_steps(e, state.value, e.ret == horizon, &mut values);
            steps.extend(values.iter().map(|v| Step {
                target: Target::Bounded(*i),
                value_after: *v,
            }));
        }
        for (j, e) in self.free.iter().enumerate().skip(state.first_free) {
            if e.invoke > horizon {
                break;
            }
            if state.done_free[j] {
                continue;
            }
            if let Some(v) = Search::free_step(e, state.value).filter(|v| wanted.contains(v)) {
                steps.push(Step {
                    target: Target::Free(j),
                    value_after: v,
                });
            }
        }
        if state.value != ABSENT
            && wanted.contains(&ABSENT)
            && self
                .deletes
                .get(state.used_deletes)
                .is_some_and(|invoke| *invoke <= horizon)
        {
            steps.push(Step {
                target: Target::Delete,
                value_after: ABSENT,
            });
        }
        steps
    }

    fn apply(&self, state: &mut State, step: Step) -> Undo {
        let undo = Undo {
            target: step.target,
            value: state.value,
            first_open: state.first_open,
            first_free: state.first_free,
        };
        match step.target {
            Target::Bounded(i) => {
                state.done_fin[i] = true;
                state.hash ^= self.fin_keys[i];
                state.placed += 1;
                while state.first_open < self.fin.len() && state.done_fin[state.first_open] {
                    state.first_open += 1;
                }
            }
            Target::Free(j) => {
                state.done_free[j] = true;
                state.hash ^= self.free_keys[j];
                while state.first_free < self.free.len() && state.done_free[state.first_free] {
                    state.first_free += 1;
                }
            }
            Target::Delete => state.used_deletes += 1,
        }
        state.value = step.value_after;
        undo
    }

    fn revert(&self, state: &mut State, undo: Undo) {
        match undo.target {
            Target::Bounded(i) => {
                state.done_fin[i] = false;
                state.hash ^= self.fin_keys[i];
                state.placed -= 1;
            }
            Target::Free(j) => {
                state.done_free[j] = false;
                state.hash ^= self.free_keys[j];
            }
            Target::Delete => state.used_deletes -= 1,
        }
        state.value = undo.value;
        state.first_open = undo.first_open;
        state.first_free = undo.first_free;
    }
}

/// The search's position: what is placed, and the register's value.
struct State {
    done_fin: Vec<bool>,
    done_free: Vec<bool>,
    used_deletes: usize,
    value: u32,
    /// No bounded operation before this index is pending.
    first_open: usize,
    /// No free operation before this index is pending.
    first_free: usize,
    /// Zobrist hash of the placed operations.
    hash: u128,
    placed: usize,
}

impl State {
    fn key(&self) -> u128 {
        self.hash ^ mix128(3, (self.used_deletes as u64) << 32 | u64::from(self.value))
    }
}
