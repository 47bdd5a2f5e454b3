//! Checks of a transactional chaos history ([`TxnRecord`]s) against snapshot
//! isolation as TiKV provides it.
//!
//! The list-append workload is checked the way Elle does it: every element
//! is appended once, so each key's longest observed list gives its version
//! order, and every read names the version it saw (its last element). From
//! that:
//!
//! - **per read**: elements nobody appended, appended to another key, or by
//!   an aborted transaction; a list ending at a writer's non-final append; a
//!   list that is not a prefix of the key's order; an element twice; the
//!   transaction's own appends missing from its reads;
//! - **per writer**: an undetermined (or abandoned) transaction whose
//!   appends landed only in part;
//! - **timestamps and real time**: a read must show every committed append
//!   whose commit timestamp is at most its start timestamp, or whose
//!   transaction completed before the reader began (unless the reader is a
//!   stale snapshot, at a timestamp taken in the past), and the reads after
//!   healing must show every acknowledged append; a snapshot read must not
//!   show an append committed after its start timestamp; two committed
//!   writers of one key must not both commit while the other was running
//!   (first committer wins);
//! - **the dependency graph** (Adya): ww, wr and rw edges between committed
//!   transactions (and undetermined ones whose writes were seen). A cycle of
//!   ww edges is G0, of ww and wr edges G1c, with exactly one rw edge
//!   G-single. Cycles with two or more rw edges (write skew) are allowed.
//!
//! The bank workload is checked for its invariant (every complete snapshot
//! read of the accounts sums to the total; one at a timestamp before the
//! accounts were funded shows none of them) and for lost updates.
//!
//! Pessimistic transactions read with `get_for_update` at a fresh
//! `for_update_ts`, so their locking reads (and any read of a key the
//! transaction has locked or written) are not snapshot reads: they give no
//! rw edges and no "must not see" timestamp bound, and the rw edges of a
//! pessimistic transaction that locks or writes are left out of the graph
//! (TiKV lets such a transaction write on top of a version newer than its
//! snapshot).
//!
//! This file is long because it is one checker: the per-read checks, the
//! dependency graph with its cycle search and the bank invariants all work
//! from the version orders derived once at the start, and its self-tests (a
//! known-good and a known-bad history per anomaly) sit beside it.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet};
use std::fmt::Write as _;

use super::txn_history::{TxnOp, TxnOutcome, TxnRecord};

/// The names [`TxnViolation::kind`] takes.
pub mod kinds {
    /// A read shows an element appended only by an aborted transaction.
    pub const ABORTED_READ: &str = "aborted-read";
    /// A read shows a key's state that its writer overwrote within itself.
    pub const INTERMEDIATE_READ: &str = "intermediate-read";
    /// A read shows an element nobody appended (to that key), or a list
    /// incompatible with the key's version order.
    pub const GARBAGE_READ: &str = "garbage-read";
    /// An element appears twice in one list, or was appended twice.
    pub const DUPLICATE_APPEND: &str = "duplicate-append";
    /// A committed append is missing from a read that began after its
    /// transaction completed, or from a read after healing.
    pub const LOST_APPEND: &str = "lost-append";
    /// An undetermined or abandoned transaction whose appends took effect
    /// only in part.
    pub const PARTIAL_COMMIT: &str = "partial-commit";
    /// A transaction's read does not reflect its own earlier appends.
    pub const READ_YOUR_WRITES: &str = "read-your-writes";
    /// A read disagrees with the commit timestamps: it misses an append
    /// committed at or before its start timestamp, or (a snapshot read)
    /// shows one committed after it.
    pub const SNAPSHOT_MISMATCH: &str = "snapshot-mismatch";
    /// Two committed transactions wrote one key and the later one started
    /// before the earlier committed (first committer wins was not applied),
    /// or a locking read's value was not what the transaction's write
    /// extended.
    pub const LOST_UPDATE: &str = "lost-update";
    /// A complete snapshot read of the bank's accounts with the wrong sum.
    pub const BANK_TOTAL: &str = "bank-total";
    /// A cycle of write-write dependencies.
    pub const G0: &str = "G0";
    /// A cycle of write-write and write-read dependencies (at least one).
    pub const G1C: &str = "G1c";
    /// A cycle with exactly one read-write anti-dependency.
    pub const G_SINGLE: &str = "G-single";

    /// Every kind, in the order [`super::TxnCheckReport::summary`] lists
    /// them.
    pub const ALL: &[&str] = &[
        G0,
        G1C,
        G_SINGLE,
        ABORTED_READ,
        INTERMEDIATE_READ,
        GARBAGE_READ,
        DUPLICATE_APPEND,
        LOST_APPEND,
        PARTIAL_COMMIT,
        READ_YOUR_WRITES,
        SNAPSHOT_MISMATCH,
        LOST_UPDATE,
        BANK_TOTAL,
    ];
}

/// What the checker needs besides the history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnCheckOptions {
    /// The bank workload's accounts (wire-independent caller keys, as
    /// recorded in the history).
    pub bank_accounts: Vec<Vec<u8>>,
    /// The bank's total, constant in every complete read.
    pub bank_total: i64,
}

/// One anomaly found, with the transactions that show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnViolation {
    /// A short name (`G0`, `G1c`, `G-single`, `aborted-read`, ...; see
    /// [`kinds`]).
    pub kind: String,
    /// The record ids involved.
    pub records: Vec<usize>,
    /// What was seen, in a sentence.
    pub detail: String,
}

/// The verdict on a history.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxnCheckReport {
    /// Every anomaly found.
    pub violations: Vec<TxnViolation>,
    /// Transactions checked.
    pub transactions: usize,
    /// Of those, committed.
    pub committed: usize,
    /// Of those, aborted.
    pub aborted: usize,
    /// Of those, undetermined or abandoned.
    pub uncertain: usize,
    /// Of the uncertain ones, those whose writes some read showed (they are
    /// treated as committed in the dependency graph).
    pub uncertain_seen: usize,
    /// Transactions in the dependency graph.
    pub graph_nodes: usize,
    /// Distinct edges in the dependency graph.
    pub graph_edges: usize,
    /// Strongly connected components of the graph with two transactions
    /// or more: each holds a cycle, allowed ones (two rw edges or more,
    /// write skew) included.
    pub graph_cycles: usize,
}

impl TxnCheckReport {
    /// No anomaly.
    pub fn is_clean(&self) -> bool {
        self.violations.is_empty()
    }

    /// How many violations of `kind` were found.
    pub fn count(&self, kind: &str) -> usize {
        self.violations.iter().filter(|v| v.kind == kind).count()
    }

    /// One line: the transaction counts and the number of violations of
    /// each kind found (kinds with none are left out).
    pub fn summary(&self) -> String {
        let mut line = format!(
            "{} transactions ({} committed, {} aborted, {} uncertain of which {} seen); graph {} nodes {} edges {} cyclic components;",
            self.transactions,
            self.committed,
            self.aborted,
            self.uncertain,
            self.uncertain_seen,
            self.graph_nodes,
            self.graph_edges,
            self.graph_cycles,
        );
        if self.is_clean() {
            line.push_str(" clean");
            return line;
        }
        for kind in kinds::ALL {
            let n = self.count(kind);
            if n > 0 {
                let _ = write!(line, " {kind}: {n}");
            }
        }
        // Kinds not in the list (none today) still show up.
        let mut other: Vec<&str> = self
            .violations
            .iter()
            .map(|v| v.kind.as_str())
            .filter(|k| !kinds::ALL.contains(k))
            .collect();
        other.sort_unstable();
        other.dedup();
        for kind in other {
            let _ = write!(line, " {kind}: {}", self.count(kind));
        }
        line
    }

    /// A readable account of every violation: its kind and detail, then
    /// each record involved (task, mode, timestamps, outcome and steps).
    /// `records` is the history that was checked.
    pub fn describe(&self, records: &[TxnRecord]) -> String {
        let by_id: HashMap<usize, &TxnRecord> = records.iter().map(|r| (r.id, r)).collect();
        let mut out = String::new();
        for (n, v) in self.violations.iter().enumerate() {
            let _ = writeln!(out, "#{n} {}: {}", v.kind, v.detail);
            for id in &v.records {
                match by_id.get(id) {
                    Some(r) => {
                        let _ = writeln!(out, "  {}", describe_record(r));
                    }
                    None => {
                        let _ = writeln!(out, "  record {id}: not in the history");
                    }
                }
            }
        }
        out
    }
}

/// One record on one line.
fn describe_record(r: &TxnRecord) -> String {
    let task = if r.task == usize::MAX {
        "final".to_string()
    } else {
        r.task.to_string()
    };
    let outcome = match &r.outcome {
        TxnOutcome::Committed { commit_ts } => match commit_ts {
            Some(ts) => format!("committed@{ts}"),
            None => "committed".to_string(),
        },
        TxnOutcome::Aborted { error } => format!("aborted ({error})"),
        TxnOutcome::Undetermined { error } => format!("undetermined ({error})"),
        TxnOutcome::Abandoned => "abandoned".to_string(),
    };
    let mut line = format!(
        "record {} task {task} {:?} start_ts {} invoke {} complete {} {outcome}:",
        r.id,
        r.mode,
        opt(r.start_ts),
        r.invoke,
        opt(r.complete),
    );
    for op in &r.ops {
        match op {
            TxnOp::Read { key, list, locking } => {
                let l = match list {
                    Some(l) => show_list(l),
                    None => "absent".to_string(),
                };
                let lock = if *locking { " locking" } else { "" };
                let _ = write!(line, " r{lock}({}) {l};", show_key(key));
            }
            TxnOp::Append { key, element } => {
                let _ = write!(line, " append({}, {element});", show_key(key));
            }
            TxnOp::ReadBalance {
                key,
                balance,
                locking,
            } => {
                let lock = if *locking { " locking" } else { "" };
                let _ = write!(line, " rb{lock}({}) {};", show_key(key), opt_i(*balance));
            }
            TxnOp::WriteBalance { key, balance } => {
                let _ = write!(line, " wb({}, {balance});", show_key(key));
            }
        }
    }
    line
}

fn opt(v: Option<u64>) -> String {
    v.map_or_else(|| "-".to_string(), |v| v.to_string())
}

fn opt_i(v: Option<i64>) -> String {
    v.map_or_else(|| "absent".to_string(), |v| v.to_string())
}

fn show_key(key: &[u8]) -> String {
    String::from_utf8_lossy(key).into_owned()
}

/// A list, cut to its ends when long.
fn show_list(l: &[u64]) -> String {
    const EDGE: usize = 6;
    if l.len() <= 2 * EDGE {
        return format!("{l:?}");
    }
    let head: Vec<String> = l[..EDGE].iter().map(|e| e.to_string()).collect();
    let tail: Vec<String> = l[l.len() - EDGE..].iter().map(|e| e.to_string()).collect();
    format!(
        "[{}, … {} more …, {}]",
        head.join(", "),
        l.len() - 2 * EDGE,
        tail.join(", ")
    )
}

/// Checks `records`.
pub fn check_txn_history(records: &[TxnRecord], options: &TxnCheckOptions) -> TxnCheckReport {
    let mut report = TxnCheckReport {
        transactions: records.len(),
        ..TxnCheckReport::default()
    };
    for r in records {
        match &r.outcome {
            TxnOutcome::Committed { .. } => report.committed += 1,
            TxnOutcome::Aborted { .. } => report.aborted += 1,
            TxnOutcome::Undetermined { .. } | TxnOutcome::Abandoned => report.uncertain += 1,
        }
    }
    let mut c = Checker::new(records);
    c.index_appends();
    c.index_reads();
    c.version_orders();
    c.writer_placement();
    c.partial_commits();
    c.must_see();
    c.future_reads();
    c.lost_updates();
    c.locked_appends();
    c.graph(&mut report);
    c.bank(options);
    report.uncertain_seen = c.uncertain_seen();
    report.violations = c.violations;
    report
}

/// Sentinel position: an element not in its key's version order.
const ABSENT: usize = usize::MAX;

/// What is known of one appended element.
#[derive(Debug, Clone, Copy)]
struct Elem {
    /// Record index of the (first) transaction that appended it.
    writer: usize,
    /// The key it was appended to.
    key: usize,
    /// Whether it is the writer's last append to that key.
    last_of_writer: bool,
    /// Whether some other transaction's read showed it.
    seen: bool,
}

/// One list read, as the checks use it.
#[derive(Debug, Clone)]
struct ReadObs {
    /// Record index of the reader.
    rec: usize,
    /// The key.
    key: usize,
    /// What the read showed from the database: the list without the
    /// reader's own elements, without unknown elements and repeats.
    ext: Vec<u64>,
    /// A non-locking read of a key the transaction neither locked nor (if
    /// pessimistic) wrote: it shows the snapshot at `start_ts`.
    snapshot: bool,
    /// A read after healing.
    final_read: bool,
    /// `ext` is a prefix of the key's version order.
    compatible: bool,
    /// Position of the op in the record.
    op: usize,
}

/// Edge kinds (bit positions in masks).
const WW: u8 = 0;
const WR: u8 = 1;
const RW: u8 = 2;
const MASK_WW: u8 = 1 << WW;
const MASK_WWR: u8 = (1 << WW) | (1 << WR);
const MASK_ALL: u8 = (1 << WW) | (1 << WR) | (1 << RW);

/// A dependency edge.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Edge {
    to: u32,
    kind: u8,
    key: u32,
}

struct Checker<'a> {
    records: &'a [TxnRecord],
    violations: Vec<TxnViolation>,
    key_ids: HashMap<&'a [u8], usize>,
    key_names: Vec<&'a [u8]>,
    elems: HashMap<u64, Elem>,
    /// Per record: per key, its appends in order.
    appends: Vec<Vec<(usize, Vec<u64>)>>,
    reads: Vec<ReadObs>,
    /// Per key: the version order (longest observed list).
    order: Vec<Vec<u64>>,
    /// Per key: the read index the order came from.
    order_from: Vec<Option<usize>>,
    /// Element → position in its key's order.
    pos: HashMap<u64, usize>,
    /// Per record: the range of its reads in `reads`.
    read_range: Vec<(usize, usize)>,
}

fn commit_ts(r: &TxnRecord) -> Option<u64> {
    match r.outcome {
        TxnOutcome::Committed { commit_ts } => commit_ts,
        _ => None,
    }
}

fn is_aborted(r: &TxnRecord) -> bool {
    matches!(r.outcome, TxnOutcome::Aborted { .. })
}

impl<'a> Checker<'a> {
    fn new(records: &'a [TxnRecord]) -> Self {
        Checker {
            records,
            violations: Vec::new(),
            key_ids: HashMap::new(),
            key_names: Vec::new(),
            elems: HashMap::new(),
            appends: vec![Vec::new(); records.len()],
            reads: Vec::new(),
            order: Vec::new(),
            order_from: Vec::new(),
            pos: HashMap::new(),
            read_range: vec![(0, 0); records.len()],
        }
    }

    /// The last read of key `k` by record `i` before its op `before`.
    fn base_read(&self, i: usize, k: usize, before: usize) -> Option<&ReadObs> {
        let (from, to) = self.read_range.get(i).copied().unwrap_or((0, 0));
        self.reads[from..to]
            .iter()
            .rfind(|r| r.key == k && r.op < before)
    }

    fn id(&self, rec: usize) -> usize {
        self.records.get(rec).map_or(rec, |r| r.id)
    }

    fn key_name(&self, key: usize) -> String {
        self.key_names
            .get(key)
            .map_or_else(|| format!("#{key}"), |k| show_key(k))
    }

    fn report(&mut self, kind: &str, recs: &[usize], detail: String) {
        let mut ids: Vec<usize> = Vec::with_capacity(recs.len());
        for &r in recs {
            let id = self.id(r);
            if !ids.contains(&id) {
                ids.push(id);
            }
        }
        self.violations.push(TxnViolation {
            kind: kind.to_string(),
            records: ids,
            detail,
        });
    }

    fn key_id(&mut self, key: &'a [u8]) -> usize {
        if let Some(&k) = self.key_ids.get(key) {
            return k;
        }
        let k = self.key_names.len();
        self.key_names.push(key);
        self.key_ids.insert(key, k);
        self.order.push(Vec::new());
        self.order_from.push(None);
        k
    }

    /// Indexes every `Append`; an element appended twice is reported.
    fn index_appends(&mut self) {
        let records = self.records;
        for (i, r) in records.iter().enumerate() {
            let mut per_key: Vec<(usize, Vec<u64>)> = Vec::new();
            for op in &r.ops {
                let TxnOp::Append { key, element } = op else {
                    continue;
                };
                let k = self.key_id(key);
                if let Some(prev) = self.elems.get(element) {
                    let prev_writer = prev.writer;
                    self.report(
                        kinds::DUPLICATE_APPEND,
                        &[prev_writer, i],
                        format!("element {element} was appended more than once"),
                    );
                    continue;
                }
                self.elems.insert(
                    *element,
                    Elem {
                        writer: i,
                        key: k,
                        last_of_writer: false,
                        seen: false,
                    },
                );
                match per_key.iter_mut().find(|(kk, _)| *kk == k) {
                    Some((_, l)) => l.push(*element),
                    None => per_key.push((k, vec![*element])),
                }
            }
            for (_, l) in &per_key {
                if let Some(last) = l.last() {
                    if let Some(e) = self.elems.get_mut(last) {
                        e.last_of_writer = true;
                    }
                }
            }
            self.appends[i] = per_key;
        }
    }

    /// Turns every list read into a [`ReadObs`], reporting what one read
    /// alone shows: repeats, unknown elements, aborted and intermediate
    /// reads, and read-your-writes.
    fn index_reads(&mut self) {
        let records = self.records;
        for (i, r) in records.iter().enumerate() {
            let pessimistic = r.mode.is_pessimistic();
            // Per key: own appends so far, and whether the key is locked or
            // written by a pessimistic transaction.
            let mut own: HashMap<usize, Vec<u64>> = HashMap::new();
            let mut locked: HashSet<usize> = HashSet::new();
            let first_read = self.reads.len();
            for (op_i, op) in r.ops.iter().enumerate() {
                match op {
                    TxnOp::Append { key, element } => {
                        let k = self.key_id(key);
                        own.entry(k).or_default().push(*element);
                        if pessimistic {
                            locked.insert(k);
                        }
                    }
                    TxnOp::Read { key, list, locking } => {
                        let k = self.key_id(key);
                        let own_so_far = own.get(&k).cloned().unwrap_or_default();
                        let snapshot = !*locking && !locked.contains(&k);
                        if *locking {
                            locked.insert(k);
                        }
                        let list: &[u64] = list.as_deref().unwrap_or(&[]);
                        self.index_read(i, op_i, k, list, &own_so_far, snapshot);
                    }
                    _ => {}
                }
            }
            self.read_range[i] = (first_read, self.reads.len());
        }
    }

    fn index_read(
        &mut self,
        i: usize,
        op_i: usize,
        k: usize,
        list: &[u64],
        own_so_far: &[u64],
        snapshot: bool,
    ) {
        let mut seen_here: HashSet<u64> = HashSet::with_capacity(list.len());
        let mut repeated: Vec<u64> = Vec::new();
        let mut deduped: Vec<u64> = Vec::with_capacity(list.len());
        for &e in list {
            if seen_here.insert(e) {
                deduped.push(e);
            } else {
                repeated.push(e);
            }
        }
        let kn = self.key_name(k);
        if !repeated.is_empty() {
            self.report(
                kinds::DUPLICATE_APPEND,
                &[i],
                format!(
                    "read of {kn} shows {} twice: {}",
                    show_list(&repeated),
                    show_list(list)
                ),
            );
        }
        // Read your writes: the own elements are exactly the appends so
        // far, in order, at the end.
        let own_seq: Vec<u64> = deduped
            .iter()
            .copied()
            .filter(|e| self.elems.get(e).is_some_and(|x| x.writer == i))
            .collect();
        let tail_ok = deduped.len() >= own_so_far.len()
            && deduped[deduped.len() - own_so_far.len()..] == *own_so_far;
        if own_seq != own_so_far || !tail_ok {
            self.report(
                kinds::READ_YOUR_WRITES,
                &[i],
                format!(
                    "read of {kn} shows {} but the transaction had appended {} to it",
                    show_list(list),
                    show_list(own_so_far)
                ),
            );
        }
        let mut ext: Vec<u64> = Vec::with_capacity(deduped.len());
        let mut unknown: Vec<u64> = Vec::new();
        let mut elsewhere: Vec<(u64, usize)> = Vec::new();
        let mut aborted: Vec<(u64, usize)> = Vec::new();
        for e in deduped {
            let Some(x) = self.elems.get_mut(&e) else {
                unknown.push(e);
                continue;
            };
            if x.writer == i {
                continue;
            }
            if x.key != k {
                elsewhere.push((e, x.writer));
                continue;
            }
            x.seen = true;
            if is_aborted(&self.records[x.writer]) {
                aborted.push((e, x.writer));
            }
            ext.push(e);
        }
        if !unknown.is_empty() {
            self.report(
                kinds::GARBAGE_READ,
                &[i],
                format!(
                    "read of {kn} shows {} which no transaction appended",
                    show_list(&unknown)
                ),
            );
        }
        for (e, w) in elsewhere {
            let other = self.elems.get(&e).map_or(0, |x| x.key);
            let on = self.key_name(other);
            self.report(
                kinds::GARBAGE_READ,
                &[i, w],
                format!("read of {kn} shows {e}, which was appended to {on}"),
            );
        }
        for (e, w) in aborted {
            self.report(
                kinds::ABORTED_READ,
                &[i, w],
                format!("read of {kn} shows {e}, appended by an aborted transaction"),
            );
        }
        if let Some(last) = ext.last() {
            if let Some(x) = self.elems.get(last) {
                if !x.last_of_writer {
                    let w = x.writer;
                    self.report(
                        kinds::INTERMEDIATE_READ,
                        &[i, w],
                        format!(
                            "read of {kn} ends at {last}, which its writer followed with another append to {kn}"
                        ),
                    );
                }
            }
        }
        let final_read = self.records[i].task == usize::MAX;
        self.reads.push(ReadObs {
            rec: i,
            key: k,
            ext,
            snapshot,
            final_read,
            compatible: true,
            op: op_i,
        });
    }

    /// Each key's order is its longest observed list; every read must be a
    /// prefix of it.
    fn version_orders(&mut self) {
        for (ri, r) in self.reads.iter().enumerate() {
            let k = r.key;
            if r.ext.len() > self.order[k].len() {
                self.order[k] = r.ext.clone();
                self.order_from[k] = Some(ri);
            }
        }
        for (k, order) in self.order.iter().enumerate() {
            for (p, e) in order.iter().enumerate() {
                if self.elems.get(e).is_some_and(|x| x.key == k) {
                    self.pos.insert(*e, p);
                }
            }
        }
        let mut bad: Vec<(usize, usize, usize)> = Vec::new();
        for (ri, r) in self.reads.iter_mut().enumerate() {
            let order = &self.order[r.key];
            if order[..r.ext.len()] != r.ext[..] {
                r.compatible = false;
                let at = r
                    .ext
                    .iter()
                    .zip(order.iter())
                    .position(|(a, b)| a != b)
                    .unwrap_or(0);
                let from = self.order_from[r.key].unwrap_or(ri);
                bad.push((ri, from, at));
            }
        }
        for (ri, from, at) in bad {
            let r = &self.reads[ri];
            let o = &self.reads[from];
            let detail = format!(
                "read of {} shows {}, which is not a prefix of {} (read by record {}); they differ at position {at}",
                self.key_name(r.key),
                show_list(&r.ext),
                show_list(&o.ext),
                self.id(o.rec),
            );
            let recs = [r.rec, o.rec];
            self.report(kinds::GARBAGE_READ, &recs, detail);
        }
    }

    /// A writer's elements on one key must sit together, in its order.
    fn writer_placement(&mut self) {
        let mut found: Vec<(&'static str, Vec<usize>, String)> = Vec::new();
        for (i, per_key) in self.appends.iter().enumerate() {
            if is_aborted(&self.records[i]) {
                continue;
            }
            for (k, elems) in per_key {
                let ps: Vec<usize> = elems
                    .iter()
                    .map(|e| self.pos.get(e).copied().unwrap_or(ABSENT))
                    .collect();
                let present = ps.iter().filter(|&&p| p != ABSENT).count();
                if present == 0 {
                    continue;
                }
                let kn = self.key_name(*k);
                if present < ps.len() {
                    let missing: Vec<u64> = elems
                        .iter()
                        .zip(&ps)
                        .filter(|(_, &p)| p == ABSENT)
                        .map(|(e, _)| *e)
                        .collect();
                    found.push((
                        kinds::PARTIAL_COMMIT,
                        vec![i],
                        format!(
                            "of its appends {} to {kn}, {} never appear while the others do",
                            show_list(elems),
                            show_list(&missing)
                        ),
                    ));
                    continue;
                }
                let in_order = ps.windows(2).all(|w| w[0] < w[1]);
                if !in_order {
                    found.push((
                        kinds::GARBAGE_READ,
                        vec![i],
                        format!(
                            "its appends {} to {kn} appear in another order in {}",
                            show_list(elems),
                            show_list(&self.order[*k])
                        ),
                    ));
                    continue;
                }
                if let (Some(&first), Some(&last)) = (ps.first(), ps.last()) {
                    if last - first + 1 != ps.len() {
                        // Something landed between: its writer saw an
                        // intermediate state.
                        let between: Vec<u64> = self.order[*k][first..=last]
                            .iter()
                            .copied()
                            .filter(|e| !elems.contains(e))
                            .collect();
                        let mut recs = vec![i];
                        for e in &between {
                            if let Some(x) = self.elems.get(e) {
                                recs.push(x.writer);
                            }
                        }
                        found.push((
                            kinds::INTERMEDIATE_READ,
                            recs,
                            format!(
                                "{} landed between its appends {} to {kn}",
                                show_list(&between),
                                show_list(elems)
                            ),
                        ));
                    }
                }
            }
        }
        for (kind, recs, detail) in found {
            self.report(kind, &recs, detail);
        }
    }

    /// Whether read `r` shows element `e` (of the read's key).
    fn read_shows(&self, r: &ReadObs, e: u64, set: &mut Option<HashSet<u64>>) -> bool {
        if r.compatible {
            return self.pos.get(&e).is_some_and(|&p| p < r.ext.len());
        }
        set.get_or_insert_with(|| r.ext.iter().copied().collect())
            .contains(&e)
    }

    /// Undetermined or abandoned transactions: all of their appends, or
    /// none.
    fn partial_commits(&mut self) {
        // Final reads per key.
        let mut finals: Vec<Vec<usize>> = vec![Vec::new(); self.order.len()];
        for (ri, r) in self.reads.iter().enumerate() {
            if r.final_read {
                finals[r.key].push(ri);
            }
        }
        let mut found: Vec<(usize, String)> = Vec::new();
        for (i, rec) in self.records.iter().enumerate() {
            if !rec.outcome.is_uncertain() {
                continue;
            }
            let mut visible: Vec<u64> = Vec::new();
            let mut missing: Vec<(u64, String)> = Vec::new();
            for (k, elems) in &self.appends[i] {
                for &e in elems {
                    if self.elems.get(&e).is_some_and(|x| x.seen) {
                        visible.push(e);
                        continue;
                    }
                    let kn = self.key_name(*k);
                    // Missing from a read after healing?
                    let mut why = None;
                    for &fi in &finals[*k] {
                        let f = &self.reads[fi];
                        let mut set = None;
                        if !self.read_shows(f, e, &mut set) {
                            why = Some(format!(
                                "{e} is missing from the final read of {kn} (record {})",
                                self.id(f.rec)
                            ));
                            break;
                        }
                    }
                    // Or the version the transaction built on was followed
                    // by someone else's.
                    if why.is_none() {
                        if let Some(after) = self.base_overwritten(i, *k, e) {
                            why = Some(format!(
                                "{e} is missing from {kn} while {after} follows the list the transaction extended"
                            ));
                        }
                    }
                    if let Some(w) = why {
                        missing.push((e, w));
                    }
                }
            }
            if !visible.is_empty() && !missing.is_empty() {
                let whys: Vec<String> = missing.iter().take(3).map(|(_, w)| w.clone()).collect();
                found.push((
                    i,
                    format!(
                        "its appends {} were seen but {}",
                        show_list(&visible),
                        whys.join("; ")
                    ),
                ));
            }
        }
        for (i, detail) in found {
            self.report(kinds::PARTIAL_COMMIT, &[i], detail);
        }
    }

    /// For transaction `i`'s append `e` to key `k`, absent from the order:
    /// if the transaction read `k` before appending (a read whose value its
    /// append extended: any read in an optimistic transaction, a locking
    /// read in a pessimistic one) and the order has another writer's
    /// element right after what that read showed, `e` cannot have been
    /// committed. Returns that element.
    fn base_overwritten(&self, i: usize, k: usize, e: u64) -> Option<u64> {
        let rec = &self.records[i];
        let append_at = rec
            .ops
            .iter()
            .position(|op| matches!(op, TxnOp::Append { element, .. } if *element == e))?;
        let base = self.base_read(i, k, append_at)?;
        if !base.compatible {
            return None;
        }
        if rec.mode.is_pessimistic() {
            match rec.ops.get(base.op) {
                Some(TxnOp::Read { locking: true, .. }) => {}
                _ => return None,
            }
        }
        let next = *self.order[k].get(base.ext.len())?;
        let writer = self.elems.get(&next)?.writer;
        (writer != i).then_some(next)
    }

    /// Reads that must show a committed append: those that began after the
    /// appender completed and those after healing (`lost-append`), and
    /// those whose start timestamp is at or after its commit timestamp
    /// (`snapshot-mismatch`).
    fn must_see(&mut self) {
        let nkeys = self.order.len();
        // Per key: committed elements (position, element, writer), sorted
        // by completion time and by commit ts, with running maxima of the
        // position.
        struct Sorted {
            at: Vec<u64>,
            items: Vec<(usize, u64, usize)>,
            max_pos: Vec<usize>,
        }
        fn build(mut v: Vec<(u64, usize, u64, usize)>) -> Sorted {
            v.sort_unstable();
            let mut max_pos = Vec::with_capacity(v.len());
            let mut m = 0usize;
            for (_, p, _, _) in &v {
                m = m.max(*p);
                max_pos.push(m);
            }
            Sorted {
                at: v.iter().map(|x| x.0).collect(),
                items: v.iter().map(|x| (x.1, x.2, x.3)).collect(),
                max_pos,
            }
        }
        let mut by_complete: Vec<Vec<(u64, usize, u64, usize)>> = vec![Vec::new(); nkeys];
        let mut by_commit: Vec<Vec<(u64, usize, u64, usize)>> = vec![Vec::new(); nkeys];
        for (i, per_key) in self.appends.iter().enumerate() {
            let rec = &self.records[i];
            if !rec.outcome.is_committed() {
                continue;
            }
            for (k, elems) in per_key {
                for &e in elems {
                    let p = self.pos.get(&e).copied().unwrap_or(ABSENT);
                    // Committed without a completion time sorts last: only
                    // the final reads need it.
                    by_complete[*k].push((rec.complete.unwrap_or(u64::MAX), p, e, i));
                    if let Some(c) = commit_ts(rec) {
                        by_commit[*k].push((c, p, e, i));
                    }
                }
            }
        }
        let by_complete: Vec<Sorted> = by_complete.into_iter().map(build).collect();
        let by_commit: Vec<Sorted> = by_commit.into_iter().map(build).collect();

        // (kind, reader, (element, writer) missing, detail)
        type Found = (&'static str, usize, Vec<(u64, usize)>, String);
        let mut found: Vec<Found> = Vec::new();
        for r in &self.reads {
            let rec = &self.records[r.rec];
            let k = r.key;
            let len = r.ext.len();
            let mut set = None;
            // Real time and final reads.
            let rt = &by_complete[k];
            let n_rt = if r.final_read {
                rt.items.len()
            } else if rec.mode.is_stale() {
                // A snapshot in the past: only its timestamp binds it.
                0
            } else {
                rt.at.partition_point(|&t| t < rec.invoke)
            };
            let mut lost: Vec<(u64, usize)> = Vec::new();
            if n_rt > 0 && (!r.compatible || rt.max_pos[n_rt - 1] >= len) {
                for &(_, e, w) in &rt.items[..n_rt] {
                    if w != r.rec && !self.read_shows(r, e, &mut set) {
                        lost.push((e, w));
                    }
                }
            }
            // Timestamps.
            let mut stale: Vec<(u64, usize)> = Vec::new();
            if let Some(s) = rec.start_ts {
                let ts = &by_commit[k];
                let n_ts = ts.at.partition_point(|&c| c <= s);
                if n_ts > 0 && (!r.compatible || ts.max_pos[n_ts - 1] >= len) {
                    for &(_, e, w) in &ts.items[..n_ts] {
                        if w != r.rec
                            && !lost.iter().any(|x| x.0 == e)
                            && !self.read_shows(r, e, &mut set)
                        {
                            stale.push((e, w));
                        }
                    }
                }
            }
            let kn = self.key_name(k);
            if !lost.is_empty() {
                let why = if r.final_read {
                    "the read after healing"
                } else {
                    "a read that began after they completed"
                };
                let els: Vec<u64> = lost.iter().map(|x| x.0).collect();
                found.push((
                    kinds::LOST_APPEND,
                    r.rec,
                    lost,
                    format!(
                        "committed appends {} to {kn} are missing from {why}, which shows {}",
                        show_list(&els),
                        show_list(&r.ext)
                    ),
                ));
            }
            if !stale.is_empty() {
                let els: Vec<u64> = stale.iter().map(|x| x.0).collect();
                found.push((
                    kinds::SNAPSHOT_MISMATCH,
                    r.rec,
                    stale,
                    format!(
                        "read of {kn} at start_ts {} misses {}, committed at or before it; it shows {}",
                        opt(rec.start_ts),
                        show_list(&els),
                        show_list(&r.ext)
                    ),
                ));
            }
        }
        for (kind, reader, writers, detail) in found {
            let mut recs = vec![reader];
            recs.extend(writers.iter().take(8).map(|x| x.1));
            self.report(kind, &recs, detail);
        }
    }

    /// A snapshot read must not show an append committed after its start
    /// timestamp.
    fn future_reads(&mut self) {
        // Per key: running maximum of the commit ts along the order.
        let max_ts: Vec<Vec<u64>> = self
            .order
            .iter()
            .map(|order| {
                let mut m = 0u64;
                order
                    .iter()
                    .map(|e| {
                        if let Some(x) = self.elems.get(e) {
                            if let Some(c) = commit_ts(&self.records[x.writer]) {
                                m = m.max(c);
                            }
                        }
                        m
                    })
                    .collect()
            })
            .collect();
        let mut found: Vec<(usize, Vec<usize>, String)> = Vec::new();
        for r in &self.reads {
            if !r.snapshot || r.ext.is_empty() {
                continue;
            }
            let Some(s) = self.records[r.rec].start_ts else {
                continue;
            };
            if r.compatible && max_ts[r.key].get(r.ext.len() - 1).is_some_and(|&m| m <= s) {
                continue;
            }
            let mut future: Vec<(u64, usize, u64)> = Vec::new();
            for e in &r.ext {
                if let Some(x) = self.elems.get(e) {
                    if let Some(c) = commit_ts(&self.records[x.writer]) {
                        if c > s && x.writer != r.rec {
                            future.push((*e, x.writer, c));
                        }
                    }
                }
            }
            if future.is_empty() {
                continue;
            }
            let mut recs = vec![r.rec];
            recs.extend(future.iter().take(8).map(|x| x.1));
            let shown: Vec<String> = future
                .iter()
                .take(8)
                .map(|(e, _, c)| format!("{e} (committed at {c})"))
                .collect();
            found.push((
                r.rec,
                recs,
                format!(
                    "snapshot read of {} at start_ts {s} shows {}",
                    self.key_name(r.key),
                    shown.join(", ")
                ),
            ));
        }
        for (_, recs, detail) in found {
            self.report(kinds::SNAPSHOT_MISMATCH, &recs, detail);
        }
    }

    /// First committer wins: a committed optimistic writer of a key must
    /// not have started before another committed writer of that key
    /// committed, if it committed after it. (A pessimistic writer locks the
    /// key at a fresh `for_update_ts`, so it may.) List and bank keys alike.
    fn lost_updates(&mut self) {
        let mut writers: HashMap<&[u8], Vec<(u64, u64, usize)>> = HashMap::new();
        for (i, r) in self.records.iter().enumerate() {
            let (Some(s), Some(c)) = (r.start_ts, commit_ts(r)) else {
                continue;
            };
            let mut keys: Vec<&[u8]> = r
                .ops
                .iter()
                .filter(|op| op.is_write())
                .map(|op| op.key())
                .collect();
            keys.sort_unstable();
            keys.dedup();
            for k in keys {
                writers.entry(k).or_default().push((c, s, i));
            }
        }
        let mut found: Vec<(usize, usize, String)> = Vec::new();
        let mut keys: Vec<&[u8]> = writers.keys().copied().collect();
        keys.sort_unstable();
        for key in keys {
            let Some(w) = writers.get_mut(key) else {
                continue;
            };
            w.sort_unstable();
            for (idx, &(c, s, i)) in w.iter().enumerate() {
                if self.records[i].mode.is_pessimistic() {
                    continue;
                }
                let lo = w.partition_point(|x| x.0 <= s);
                if lo < idx {
                    if let Some(&(ce, se, e)) = w.get(idx - 1) {
                        found.push((
                            e,
                            i,
                            format!(
                                "both wrote {}: one ran [{se}, {ce}], the other started at {s} and committed at {c}",
                                show_key(key)
                            ),
                        ));
                    }
                }
            }
        }
        for (e, i, detail) in found {
            self.report(kinds::LOST_UPDATE, &[e, i], detail);
        }
    }

    /// A transaction that read a key with a lock (or a read of a key it had
    /// locked) and then appended to it wrote on top of exactly what it
    /// read: nobody else's append may sit between the two.
    fn locked_appends(&mut self) {
        let mut found: Vec<(Vec<usize>, String)> = Vec::new();
        for (i, rec) in self.records.iter().enumerate() {
            if is_aborted(rec) {
                continue;
            }
            for (k, elems) in &self.appends[i] {
                let Some(&first) = elems.first() else {
                    continue;
                };
                let Some(&p) = self.pos.get(&first) else {
                    continue;
                };
                let Some(append_at) = rec.ops.iter().position(
                    |op| matches!(op, TxnOp::Append { element, .. } if *element == first),
                ) else {
                    continue;
                };
                let Some(base) = self.base_read(i, *k, append_at) else {
                    continue;
                };
                if base.snapshot || !base.compatible || base.ext.len() == p {
                    continue;
                }
                let order = &self.order[*k];
                let kn = self.key_name(*k);
                let mut recs = vec![i];
                let detail = if p > base.ext.len() {
                    let between = &order[base.ext.len()..p];
                    for e in between {
                        if let Some(x) = self.elems.get(e) {
                            recs.push(x.writer);
                        }
                    }
                    format!(
                        "its locking read of {kn} showed {} but {} landed before its append {first}",
                        show_list(&base.ext),
                        show_list(between)
                    )
                } else {
                    format!(
                        "its locking read of {kn} showed {} yet its append {first} sits at position {p}",
                        show_list(&base.ext)
                    )
                };
                found.push((recs, detail));
            }
        }
        for (recs, detail) in found {
            self.report(kinds::LOST_UPDATE, &recs, detail);
        }
    }

    fn uncertain_seen(&self) -> usize {
        (0..self.records.len())
            .filter(|&i| self.records[i].outcome.is_uncertain() && self.seen_writer(i))
            .count()
    }

    fn seen_writer(&self, i: usize) -> bool {
        self.appends[i]
            .iter()
            .any(|(_, l)| l.iter().any(|e| self.elems.get(e).is_some_and(|x| x.seen)))
    }

    /// Builds the dependency graph and looks for G0, G1c and G-single.
    fn graph(&mut self, report: &mut TxnCheckReport) {
        // Nodes: committed list transactions and uncertain ones seen.
        let mut node_of: Vec<u32> = vec![u32::MAX; self.records.len()];
        let mut rec_of: Vec<usize> = Vec::new();
        for (i, r) in self.records.iter().enumerate() {
            let lists = r
                .ops
                .iter()
                .any(|op| matches!(op, TxnOp::Read { .. } | TxnOp::Append { .. }));
            if !lists {
                continue;
            }
            let member =
                r.outcome.is_committed() || (r.outcome.is_uncertain() && self.seen_writer(i));
            if member {
                node_of[i] = rec_of.len() as u32;
                rec_of.push(i);
            }
        }
        let n = rec_of.len();
        let mut adj: Vec<Vec<Edge>> = vec![Vec::new(); n];
        let node = |e: &u64, elems: &HashMap<u64, Elem>| -> Option<u32> {
            let x = elems.get(e)?;
            let v = node_of[x.writer];
            (v != u32::MAX).then_some(v)
        };
        // ww: consecutive writers along each order.
        for (k, order) in self.order.iter().enumerate() {
            let mut prev: Option<u32> = None;
            for e in order {
                let Some(v) = node(e, &self.elems) else {
                    continue;
                };
                if let Some(p) = prev {
                    if p != v {
                        adj[p as usize].push(Edge {
                            to: v,
                            kind: WW,
                            key: k as u32,
                        });
                    }
                }
                prev = Some(v);
            }
        }
        // wr and rw, from each read.
        for r in &self.reads {
            let reader = node_of[r.rec];
            if reader == u32::MAX {
                continue;
            }
            let last_writer = r.ext.last().and_then(|e| node(e, &self.elems));
            if let Some(w) = last_writer {
                if w != reader {
                    adj[w as usize].push(Edge {
                        to: reader,
                        kind: WR,
                        key: r.key as u32,
                    });
                }
            }
            if !r.snapshot || !r.compatible || !self.rw_allowed(r.rec) {
                continue;
            }
            // The next version's writer: the first element after the read
            // by a graph member other than the writer of what was read.
            let last_rec = r
                .ext
                .last()
                .and_then(|e| self.elems.get(e))
                .map(|x| x.writer);
            for e in &self.order[r.key][r.ext.len()..] {
                let Some(x) = self.elems.get(e) else {
                    continue;
                };
                if Some(x.writer) == last_rec {
                    continue;
                }
                let v = node_of[x.writer];
                if v == u32::MAX {
                    continue;
                }
                if v != reader {
                    adj[reader as usize].push(Edge {
                        to: v,
                        kind: RW,
                        key: r.key as u32,
                    });
                }
                break;
            }
        }
        for a in &mut adj {
            a.sort_unstable();
            a.dedup();
        }
        report.graph_nodes = n;
        report.graph_edges = adj.iter().map(Vec::len).sum();
        let g = Graph { adj, rec_of };
        let mut found: Vec<(&'static str, Vec<usize>, String)> = Vec::new();
        let mut scratch = Scratch::new(n);
        let full = tarjan(&g.adj, MASK_ALL);
        report.graph_cycles = full.size.iter().filter(|&&s| s >= 2).count();
        let wwr = tarjan(&g.adj, MASK_WWR);
        let ww = tarjan(&g.adj, MASK_WW);
        // G0: a cycle inside each ww component.
        for cycle in g.one_cycle_per_component(&ww, MASK_WW, MASK_WW, &mut scratch) {
            found.push((
                kinds::G0,
                g.cycle_records(&cycle),
                self.show_cycle(&g, &cycle),
            ));
        }
        // G1c: a ww+wr component with a wr edge inside.
        let mask_wr: u8 = 1 << WR;
        for cycle in g.one_cycle_per_component(&wwr, mask_wr, MASK_WWR, &mut scratch) {
            found.push((
                kinds::G1C,
                g.cycle_records(&cycle),
                self.show_cycle(&g, &cycle),
            ));
        }
        // G-single: an rw edge u → v within one full component and a ww+wr
        // path v ⇝ u. The ww+wr condensation is ordered topologically
        // (earliest record first), so the search from v only visits
        // components between v's and u's.
        let topo = g.topo_order(&wwr);
        let mut done_full: HashSet<u32> = HashSet::new();
        for u in 0..n {
            if done_full.contains(&full.comp[u]) || full.size[full.comp[u] as usize] < 2 {
                continue;
            }
            for e in &g.adj[u] {
                if e.kind != RW || full.comp[e.to as usize] != full.comp[u] {
                    continue;
                }
                let v = e.to as usize;
                let limit = topo[wwr.comp[u] as usize];
                if topo[wwr.comp[v] as usize] > limit {
                    continue;
                }
                let comp_full = &full.comp;
                let cu = full.comp[u];
                let wc = &wwr.comp;
                let allow = |x: usize| comp_full[x] == cu && topo[wc[x] as usize] <= limit;
                if let Some(path) = g.path(v, u, MASK_WWR, &allow, &mut scratch) {
                    let mut cycle = vec![(u as u32, *e)];
                    cycle.extend(path);
                    found.push((
                        kinds::G_SINGLE,
                        g.cycle_records(&cycle),
                        self.show_cycle(&g, &cycle),
                    ));
                    done_full.insert(cu);
                    break;
                }
            }
        }
        for (kind, recs, detail) in found {
            self.report(kind, &recs, detail);
        }
    }

    /// Whether the reads of record `i` may give rw edges: not a pessimistic
    /// transaction that locks or writes (its writes may sit on versions
    /// newer than its snapshot).
    fn rw_allowed(&self, i: usize) -> bool {
        let r = &self.records[i];
        !r.mode.is_pessimistic()
            || !r.ops.iter().any(|op| {
                op.is_write()
                    || matches!(
                        op,
                        TxnOp::Read { locking: true, .. }
                            | TxnOp::ReadBalance { locking: true, .. }
                    )
            })
    }

    fn show_cycle(&self, g: &Graph, cycle: &[(u32, Edge)]) -> String {
        let mut s = String::new();
        for (from, e) in cycle {
            let kind = match e.kind {
                WW => "ww",
                WR => "wr",
                _ => "rw",
            };
            let _ = write!(
                s,
                "{} -{kind} {}-> ",
                self.id(g.rec_of[*from as usize]),
                self.key_name(e.key as usize)
            );
        }
        if let Some((from, _)) = cycle.first() {
            let _ = write!(s, "{}", self.id(g.rec_of[*from as usize]));
        }
        format!("cycle {s}")
    }

    /// The bank's invariant: a complete snapshot read of every account
    /// (non-locking reads, before any write) sums to the total.
    fn bank(&mut self, options: &TxnCheckOptions) {
        if options.bank_accounts.is_empty() {
            return;
        }
        // The first commit that wrote balances (the setup, which funds
        // every account at once): a snapshot below it sees no account.
        let funded_at = self
            .records
            .iter()
            .filter(|r| {
                r.ops
                    .iter()
                    .any(|op| matches!(op, TxnOp::WriteBalance { .. }))
            })
            .filter_map(commit_ts)
            .min();
        let mut found: Vec<(usize, String)> = Vec::new();
        for (i, r) in self.records.iter().enumerate() {
            let mut seen: HashMap<&[u8], Option<i64>> = HashMap::new();
            for op in &r.ops {
                match op {
                    TxnOp::WriteBalance { .. } | TxnOp::Append { .. } => break,
                    TxnOp::ReadBalance {
                        key,
                        balance,
                        locking: false,
                    } => {
                        seen.entry(key.as_slice()).or_insert(*balance);
                    }
                    _ => {}
                }
            }
            if !options
                .bank_accounts
                .iter()
                .all(|a| seen.contains_key(a.as_slice()))
            {
                continue;
            }
            // Only a stale snapshot (its timestamp taken in the past) may
            // be that old: the workload starts once the setup committed.
            let before_funding =
                r.mode.is_stale() && r.start_ts.is_some_and(|s| funded_at.is_some_and(|f| s < f));
            if before_funding && seen.values().all(Option::is_none) {
                continue;
            }
            let mut sum: i128 = 0;
            let mut shown: Vec<String> = Vec::new();
            for a in &options.bank_accounts {
                let b = seen.get(a.as_slice()).copied().flatten();
                sum += i128::from(b.unwrap_or(0));
                shown.push(format!("{}={}", show_key(a), opt_i(b)));
            }
            if sum != i128::from(options.bank_total) {
                found.push((
                    i,
                    format!(
                        "balances {} sum to {sum}, not {}",
                        shown.join(" "),
                        options.bank_total
                    ),
                ));
            }
        }
        for (i, detail) in found {
            self.report(kinds::BANK_TOTAL, &[i], detail);
        }
    }
}

/// Components of a graph.
struct Components {
    /// Node → component.
    comp: Vec<u32>,
    /// Component → size.
    size: Vec<usize>,
}

/// Tarjan's strongly connected components over the edges whose kind is in
/// `mask`, without recursion.
fn tarjan(adj: &[Vec<Edge>], mask: u8) -> Components {
    const UNSET: u32 = u32::MAX;
    let n = adj.len();
    let mut index = vec![UNSET; n];
    let mut low = vec![0u32; n];
    let mut on_stack = vec![false; n];
    let mut stack: Vec<u32> = Vec::new();
    let mut comp = vec![UNSET; n];
    let mut size: Vec<usize> = Vec::new();
    let mut next = 0u32;
    let mut call: Vec<(u32, usize)> = Vec::new();
    for root in 0..n {
        if index[root] != UNSET {
            continue;
        }
        index[root] = next;
        low[root] = next;
        next += 1;
        stack.push(root as u32);
        on_stack[root] = true;
        call.push((root as u32, 0));
        while let Some(&(v, at)) = call.last() {
            let vu = v as usize;
            let edges = &adj[vu];
            let mut at = at;
            let mut child = None;
            while at < edges.len() {
                let e = edges[at];
                at += 1;
                if mask & (1 << e.kind) == 0 {
                    continue;
                }
                let w = e.to as usize;
                if index[w] == UNSET {
                    child = Some(w);
                    break;
                } else if on_stack[w] {
                    low[vu] = low[vu].min(index[w]);
                }
            }
            if let Some(top) = call.last_mut() {
                top.1 = at;
            }
            if let Some(w) = child {
                index[w] = next;
                low[w] = next;
                next += 1;
                stack.push(w as u32);
                on_stack[w] = true;
                call.push((w as u32, 0));
                continue;
            }
            call.pop();
            if let Some(&(p, _)) = call.last() {
                let pu = p as usize;
                low[pu] = low[pu].min(low[vu]);
            }
            if low[vu] == index[vu] {
                let id = size.len() as u32;
                let mut count = 0;
                while let Some(x) = stack.pop() {
                    on_stack[x as usize] = false;
                    comp[x as usize] = id;
                    count += 1;
                    if x == v {
                        break;
                    }
                }
                size.push(count);
            }
        }
    }
    Components { comp, size }
}

/// Reusable search state.
struct Scratch {
    stamp: Vec<u32>,
    gen: u32,
    parent: Vec<(u32, Edge)>,
    queue: Vec<u32>,
}

impl Scratch {
    fn new(n: usize) -> Self {
        Scratch {
            stamp: vec![0; n],
            gen: 0,
            parent: vec![
                (
                    0,
                    Edge {
                        to: 0,
                        kind: 0,
                        key: 0
                    }
                );
                n
            ],
            queue: Vec::new(),
        }
    }
}

/// The dependency graph.
struct Graph {
    adj: Vec<Vec<Edge>>,
    /// Node → record index.
    rec_of: Vec<usize>,
}

impl Graph {
    /// A shortest path `from ⇝ to` over edges in `mask` through nodes
    /// `allow` accepts: the edges, each with its source.
    fn path(
        &self,
        from: usize,
        to: usize,
        mask: u8,
        allow: &dyn Fn(usize) -> bool,
        s: &mut Scratch,
    ) -> Option<Vec<(u32, Edge)>> {
        s.gen = s.gen.wrapping_add(1);
        if s.gen == 0 {
            s.stamp.iter_mut().for_each(|x| *x = 0);
            s.gen = 1;
        }
        let gen = s.gen;
        s.queue.clear();
        s.queue.push(from as u32);
        s.stamp[from] = gen;
        let mut head = 0;
        let mut reached = from == to;
        while head < s.queue.len() && !reached {
            let v = s.queue[head] as usize;
            head += 1;
            for e in &self.adj[v] {
                if mask & (1 << e.kind) == 0 {
                    continue;
                }
                let w = e.to as usize;
                if s.stamp[w] == gen || !allow(w) {
                    continue;
                }
                s.stamp[w] = gen;
                s.parent[w] = (v as u32, *e);
                if w == to {
                    reached = true;
                    break;
                }
                s.queue.push(w as u32);
            }
        }
        if !reached {
            return None;
        }
        let mut path = Vec::new();
        let mut at = to;
        while at != from {
            let (p, e) = s.parent[at];
            path.push((p, e));
            at = p as usize;
        }
        path.reverse();
        Some(path)
    }

    /// For each component of `c` with two nodes or more: an edge of a kind
    /// in `first` inside it, closed into a cycle by a path over `mask`
    /// inside the component.
    fn one_cycle_per_component(
        &self,
        c: &Components,
        first: u8,
        mask: u8,
        s: &mut Scratch,
    ) -> Vec<Vec<(u32, Edge)>> {
        let mut done = vec![false; c.size.len()];
        let mut cycles = Vec::new();
        for u in 0..self.adj.len() {
            let cu = c.comp[u];
            if done[cu as usize] || c.size[cu as usize] < 2 {
                continue;
            }
            for e in &self.adj[u] {
                if first & (1 << e.kind) == 0 || c.comp[e.to as usize] != cu {
                    continue;
                }
                let allow = |x: usize| c.comp[x] == cu;
                if let Some(path) = self.path(e.to as usize, u, mask, &allow, s) {
                    let mut cycle = vec![(u as u32, *e)];
                    cycle.extend(path);
                    cycles.push(cycle);
                    done[cu as usize] = true;
                    break;
                }
            }
        }
        cycles
    }

    /// The records of a cycle.
    fn cycle_records(&self, cycle: &[(u32, Edge)]) -> Vec<usize> {
        cycle
            .iter()
            .map(|(v, _)| self.rec_of[*v as usize])
            .collect()
    }

    /// A topological position for each component of `c` (whose
    /// condensation is acyclic): Kahn's order, earliest record first.
    fn topo_order(&self, c: &Components) -> Vec<usize> {
        let nc = c.size.len();
        let mut first = vec![usize::MAX; nc];
        let mut indeg = vec![0usize; nc];
        let mut out: Vec<Vec<u32>> = vec![Vec::new(); nc];
        for (v, edges) in self.adj.iter().enumerate() {
            let cv = c.comp[v] as usize;
            first[cv] = first[cv].min(self.rec_of[v]);
            for e in edges {
                if MASK_WWR & (1 << e.kind) == 0 {
                    continue;
                }
                let cw = c.comp[e.to as usize];
                if cw as usize != cv {
                    out[cv].push(cw);
                    indeg[cw as usize] += 1;
                }
            }
        }
        let mut heap: BinaryHeap<Reverse<(usize, u32)>> = BinaryHeap::new();
        for (x, &d) in indeg.iter().enumerate() {
            if d == 0 {
                heap.push(Reverse((first[x], x as u32)));
            }
        }
        let mut topo = vec![usize::MAX; nc];
        let mut at = 0;
        while let Some(Reverse((_, x))) = heap.pop() {
            topo[x as usize] = at;
            at += 1;
            for &w in &out[x as usize] {
                let d = &mut indeg[w as usize];
                *d -= 1;
                if *d == 0 {
                    heap.push(Reverse((first[w as usize], w)));
                }
            }
        }
        topo
    }
}

#[cfg(test)]
mod tests {
    use std::collections::{HashMap, HashSet};

    use super::super::txn_history::{TxnMode, TxnOp, TxnOutcome, TxnRecord, TxnWorkload};
    use super::*;

    /// A hand-built record.
    struct R(TxnRecord);

    impl R {
        fn new(id: usize) -> Self {
            R(TxnRecord {
                id,
                task: id,
                workload: TxnWorkload::ListAppend,
                mode: TxnMode::Optimistic,
                start_ts: None,
                invoke: 0,
                complete: Some(0),
                ops: Vec::new(),
                outcome: TxnOutcome::Committed { commit_ts: None },
            })
        }
        fn ts(mut self, start: u64, commit: u64) -> Self {
            self.0.start_ts = Some(start);
            self.0.outcome = TxnOutcome::Committed {
                commit_ts: Some(commit),
            };
            self
        }
        fn start(mut self, start: u64) -> Self {
            self.0.start_ts = Some(start);
            self
        }
        fn time(mut self, invoke: u64, complete: u64) -> Self {
            self.0.invoke = invoke;
            self.0.complete = Some(complete);
            self
        }
        fn mode(mut self, mode: TxnMode) -> Self {
            self.0.mode = mode;
            self
        }
        fn final_read(mut self) -> Self {
            self.0.task = usize::MAX;
            self.0.mode = TxnMode::Snapshot;
            self
        }
        fn aborted(mut self) -> Self {
            self.0.outcome = TxnOutcome::Aborted {
                error: "test".into(),
            };
            self
        }
        fn undetermined(mut self) -> Self {
            self.0.outcome = TxnOutcome::Undetermined {
                error: "test".into(),
            };
            self
        }
        fn abandoned(mut self) -> Self {
            self.0.outcome = TxnOutcome::Abandoned;
            self.0.complete = None;
            self
        }
        fn r(mut self, key: &str, list: &[u64]) -> Self {
            self.0.ops.push(TxnOp::Read {
                key: key.as_bytes().to_vec(),
                list: (!list.is_empty()).then(|| list.to_vec()),
                locking: false,
            });
            self
        }
        fn lr(mut self, key: &str, list: &[u64]) -> Self {
            self.0.ops.push(TxnOp::Read {
                key: key.as_bytes().to_vec(),
                list: (!list.is_empty()).then(|| list.to_vec()),
                locking: true,
            });
            self
        }
        fn a(mut self, key: &str, element: u64) -> Self {
            self.0.ops.push(TxnOp::Append {
                key: key.as_bytes().to_vec(),
                element,
            });
            self
        }
        fn rb(mut self, key: &str, balance: i64) -> Self {
            self.0.workload = TxnWorkload::Bank;
            self.0.ops.push(TxnOp::ReadBalance {
                key: key.as_bytes().to_vec(),
                balance: Some(balance),
                locking: false,
            });
            self
        }
        /// A read of an account that does not exist.
        fn rb_absent(mut self, key: &str) -> Self {
            self.0.workload = TxnWorkload::Bank;
            self.0.ops.push(TxnOp::ReadBalance {
                key: key.as_bytes().to_vec(),
                balance: None,
                locking: false,
            });
            self
        }
        fn wb(mut self, key: &str, balance: i64) -> Self {
            self.0.workload = TxnWorkload::Bank;
            self.0.ops.push(TxnOp::WriteBalance {
                key: key.as_bytes().to_vec(),
                balance,
            });
            self
        }
    }

    fn check(rs: Vec<R>) -> (Vec<TxnRecord>, TxnCheckReport) {
        let records: Vec<TxnRecord> = rs.into_iter().map(|r| r.0).collect();
        let report = check_txn_history(&records, &TxnCheckOptions::default());
        (records, report)
    }

    /// Asserts `kind` is among the violations and involves `records`.
    fn assert_kind(report: &TxnCheckReport, records: &[TxnRecord], kind: &str, ids: &[usize]) {
        let hit = report
            .violations
            .iter()
            .any(|v| v.kind == kind && ids.iter().all(|id| v.records.contains(id)));
        assert!(
            hit,
            "expected {kind} with records {ids:?}; got {}\n{}",
            report.summary(),
            report.describe(records)
        );
    }

    fn assert_clean(report: &TxnCheckReport, records: &[TxnRecord]) {
        assert!(
            report.is_clean(),
            "expected clean; got {}\n{}",
            report.summary(),
            report.describe(records)
        );
    }

    #[test]
    fn aborted_read() {
        let (rs, rep) = check(vec![R::new(0).a("x", 1).aborted(), R::new(1).r("x", &[1])]);
        assert_kind(&rep, &rs, kinds::ABORTED_READ, &[0, 1]);
    }

    #[test]
    fn intermediate_read() {
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).a("x", 2),
            R::new(1).r("x", &[1]),
            R::new(2).r("x", &[1, 2]),
        ]);
        assert_kind(&rep, &rs, kinds::INTERMEDIATE_READ, &[0, 1]);
        assert_eq!(rep.violations.len(), 1, "{}", rep.describe(&rs));
    }

    #[test]
    fn intermediate_state_built_on() {
        // Record 1 appended on top of record 0's first append only.
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).a("x", 2),
            R::new(1).a("x", 3),
            R::new(2).r("x", &[1, 3, 2]),
        ]);
        assert_kind(&rep, &rs, kinds::INTERMEDIATE_READ, &[0, 1]);
    }

    #[test]
    fn garbage_reads() {
        let (rs, rep) = check(vec![R::new(0).a("x", 1), R::new(1).r("x", &[1, 99])]);
        assert_kind(&rep, &rs, kinds::GARBAGE_READ, &[1]);
        let (rs, rep) = check(vec![R::new(0).a("y", 1), R::new(1).r("x", &[1])]);
        assert_kind(&rep, &rs, kinds::GARBAGE_READ, &[1, 0]);
        // Incompatible orders.
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1),
            R::new(1).a("x", 2),
            R::new(2).r("x", &[1, 2]),
            R::new(3).r("x", &[2]),
        ]);
        assert_kind(&rep, &rs, kinds::GARBAGE_READ, &[3, 2]);
    }

    #[test]
    fn duplicate_append() {
        let (rs, rep) = check(vec![R::new(0).a("x", 1), R::new(1).r("x", &[1, 1])]);
        assert_kind(&rep, &rs, kinds::DUPLICATE_APPEND, &[1]);
        let (rs, rep) = check(vec![R::new(0).a("x", 1), R::new(1).a("x", 1)]);
        assert_kind(&rep, &rs, kinds::DUPLICATE_APPEND, &[0, 1]);
    }

    #[test]
    fn lost_append_in_real_time_and_after_healing() {
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).time(0, 10),
            R::new(1).r("x", &[]).time(20, 30),
        ]);
        assert_kind(&rep, &rs, kinds::LOST_APPEND, &[1, 0]);
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).a("y", 2).time(0, 10),
            R::new(1).r("x", &[1]).r("y", &[]).final_read().time(5, 30),
        ]);
        assert_kind(&rep, &rs, kinds::LOST_APPEND, &[1, 0]);
        // Concurrent in real time, no timestamps: nothing to say.
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).time(0, 10),
            R::new(1).r("x", &[]).time(5, 30),
        ]);
        assert_clean(&rep, &rs);
    }

    #[test]
    fn partial_commit() {
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).a("y", 2).undetermined(),
            R::new(1).r("x", &[1]).r("y", &[]).final_read(),
        ]);
        assert_kind(&rep, &rs, kinds::PARTIAL_COMMIT, &[0]);
        // Missing because another writer followed what it extended.
        let (rs, rep) = check(vec![
            R::new(0).r("y", &[]).a("y", 2).a("x", 1).abandoned(),
            R::new(1).a("y", 3),
            R::new(2).r("x", &[1]).r("y", &[3]),
        ]);
        assert_kind(&rep, &rs, kinds::PARTIAL_COMMIT, &[0]);
    }

    #[test]
    fn read_your_writes() {
        let (rs, rep) = check(vec![R::new(0).a("x", 1).r("x", &[])]);
        assert_kind(&rep, &rs, kinds::READ_YOUR_WRITES, &[0]);
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1),
            R::new(1).a("x", 2).a("x", 3).r("x", &[1, 3, 2]),
        ]);
        assert_kind(&rep, &rs, kinds::READ_YOUR_WRITES, &[1]);
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1),
            R::new(1).r("x", &[1]).a("x", 2).r("x", &[1, 2]),
        ]);
        assert_clean(&rep, &rs);
    }

    #[test]
    fn g0() {
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).a("y", 2),
            R::new(1).a("x", 3).a("y", 4),
            R::new(2).r("x", &[1, 3]).r("y", &[4, 2]).final_read(),
        ]);
        assert_kind(&rep, &rs, kinds::G0, &[0, 1]);
        assert_eq!(rep.count(kinds::G_SINGLE), 0);
    }

    #[test]
    fn g1c() {
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).r("y", &[2]),
            R::new(1).a("y", 2).r("x", &[1]),
        ]);
        assert_kind(&rep, &rs, kinds::G1C, &[0, 1]);
    }

    #[test]
    fn g_single_read_skew() {
        let (rs, rep) = check(vec![
            R::new(0).r("x", &[]).r("y", &[2]),
            R::new(1).a("x", 1).a("y", 2),
            R::new(2).r("x", &[1]).r("y", &[2]).final_read(),
        ]);
        assert_kind(&rep, &rs, kinds::G_SINGLE, &[0, 1]);
        assert_eq!(rep.violations.len(), 1, "{}", rep.describe(&rs));
    }

    #[test]
    fn g_single_lost_update_shape() {
        // Both read x empty and appended; one append got lost under the
        // other... the order shows 1 then 2, so record 1 read x before 1
        // and wrote after it: rw 1 → 0, ww 0 → 1.
        let (rs, rep) = check(vec![
            R::new(0).r("x", &[]).a("x", 1),
            R::new(1).r("x", &[]).a("x", 2),
            R::new(2).r("x", &[1, 2]).final_read(),
        ]);
        assert_kind(&rep, &rs, kinds::G_SINGLE, &[0, 1]);
    }

    #[test]
    fn write_skew_is_allowed() {
        let (rs, rep) = check(vec![
            R::new(0).r("x", &[]).a("y", 1).ts(1, 3).time(0, 10),
            R::new(1).r("y", &[]).a("x", 2).ts(2, 4).time(1, 11),
            R::new(2)
                .r("x", &[2])
                .r("y", &[1])
                .final_read()
                .start(5)
                .time(20, 21),
        ]);
        assert_clean(&rep, &rs);
        assert!(rep.graph_edges >= 2);
    }

    #[test]
    fn snapshot_mismatch_both_ways() {
        // A read showing an append committed after its start.
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).ts(1, 10).time(0, 10),
            R::new(1).r("x", &[1]).start(5).time(1, 12),
        ]);
        assert_kind(&rep, &rs, kinds::SNAPSHOT_MISMATCH, &[1, 0]);
        // A read missing one committed before its start (concurrent in
        // real time, so only the timestamps tell).
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).ts(1, 10).time(0, 10),
            R::new(1).r("x", &[]).start(20).time(5, 30),
        ]);
        assert_kind(&rep, &rs, kinds::SNAPSHOT_MISMATCH, &[1, 0]);
        assert_eq!(rep.count(kinds::LOST_APPEND), 0);
    }

    #[test]
    fn lost_update() {
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).ts(1, 5),
            R::new(1).a("x", 2).ts(2, 6),
            R::new(2).r("x", &[1, 2]).final_read(),
        ]);
        assert_kind(&rep, &rs, kinds::LOST_UPDATE, &[0, 1]);
        // The later one pessimistic: it locked x after 0 committed.
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).ts(1, 5),
            R::new(1).a("x", 2).ts(2, 6).mode(TxnMode::Pessimistic),
            R::new(2).r("x", &[1, 2]).final_read(),
        ]);
        assert_clean(&rep, &rs);
        // Bank keys too.
        let (rs, rep) = check(vec![
            R::new(0).wb("a", 1).ts(1, 5),
            R::new(1).wb("a", 2).ts(2, 6),
        ]);
        assert_kind(&rep, &rs, kinds::LOST_UPDATE, &[0, 1]);
        // A locking read's value not what the append extended.
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1),
            R::new(1).lr("x", &[]).a("x", 2).mode(TxnMode::Pessimistic),
            R::new(2).r("x", &[1, 2]).final_read(),
        ]);
        assert_kind(&rep, &rs, kinds::LOST_UPDATE, &[1, 0]);
    }

    #[test]
    fn locking_reads_are_not_snapshot_reads() {
        // Record 1 (pessimistic) started before 0 committed, read y from
        // its snapshot without 0's append, then locked x and saw 0's
        // append: TiKV allows that.
        let (rs, rep) = check(vec![
            R::new(0).a("x", 1).a("y", 2).ts(2, 4).time(0, 10),
            R::new(1)
                .r("y", &[])
                .lr("x", &[1])
                .a("x", 3)
                .mode(TxnMode::Pessimistic)
                .ts(3, 6)
                .time(1, 12),
            R::new(2)
                .r("x", &[1, 3])
                .r("y", &[2])
                .final_read()
                .start(7)
                .time(20, 21),
        ]);
        assert_clean(&rep, &rs);
    }

    #[test]
    fn a_stale_snapshot_is_held_to_its_timestamp_not_to_real_time() {
        // Append 1 to x committed at ts 11, completed at time 5. Readers
        // begin at time 10 with start ts 8, below the commit.
        let writer = || R::new(0).a("x", 1).ts(10, 11).time(0, 5);
        let stale = |id| R::new(id).r("x", &[]).start(8).time(10, 12);
        let (records, report) = check(vec![
            writer(),
            stale(1).mode(TxnMode::StaleSnapshot),
            R::new(2)
                .r("x", &[])
                .start(30)
                .time(10, 12)
                .mode(TxnMode::StaleSnapshot),
        ]);
        // Record 1 may miss it (its ts is below the commit); record 2 may
        // not (its ts is above).
        assert_kind(&report, &records, kinds::SNAPSHOT_MISMATCH, &[2]);
        assert_eq!(report.violations.len(), 1, "{}", report.describe(&records));
        // A fresh snapshot that began after the commit completed must show
        // it whatever its timestamp says.
        let (records, report) = check(vec![writer(), stale(1).mode(TxnMode::Snapshot)]);
        assert_kind(&report, &records, kinds::LOST_APPEND, &[1]);
        // And a stale snapshot must not show what committed above its ts.
        let (records, report) = check(vec![
            writer(),
            R::new(1)
                .r("x", &[1])
                .start(8)
                .time(10, 12)
                .mode(TxnMode::StaleSnapshot),
        ]);
        assert_kind(&report, &records, kinds::SNAPSHOT_MISMATCH, &[1]);
    }

    #[test]
    fn a_snapshot_before_the_accounts_were_funded_sees_none_of_them() {
        let options = TxnCheckOptions {
            bank_accounts: vec![b"a".to_vec(), b"b".to_vec()],
            bank_total: 100,
        };
        let records: Vec<TxnRecord> = vec![
            R::new(0).wb("a", 60).wb("b", 40).ts(10, 11).0,
            // A stale snapshot below the funding: nothing yet.
            R::new(1)
                .rb_absent("a")
                .rb_absent("b")
                .start(5)
                .mode(TxnMode::StaleSnapshot)
                .0,
            // After it: nothing is wrong.
            R::new(2).rb_absent("a").rb_absent("b").start(20).0,
            // Below it but showing one account: wrong either way.
            R::new(3).rb("a", 60).rb_absent("b").start(5).0,
            // A fresh snapshot that old is a client's bug (an old ts).
            R::new(4).rb_absent("a").rb_absent("b").start(5).0,
        ];
        let rep = check_txn_history(&records, &options);
        for id in [2, 3, 4] {
            assert_kind(&rep, &records, kinds::BANK_TOTAL, &[id]);
        }
        assert_eq!(rep.violations.len(), 3, "{}", rep.describe(&records));
    }

    #[test]
    fn bank_total() {
        let options = TxnCheckOptions {
            bank_accounts: vec![b"a".to_vec(), b"b".to_vec()],
            bank_total: 100,
        };
        let records: Vec<TxnRecord> = vec![
            R::new(0).rb("a", 60).rb("b", 40).0,
            R::new(1).rb("a", 50).rb("b", 40).0,
            // Wrote before reading the rest: not a snapshot of the bank.
            R::new(2).rb("a", 60).wb("a", 10).rb("b", 40).0,
            R::new(3).rb("a", 60).0,
        ];
        let rep = check_txn_history(&records, &options);
        assert_kind(&rep, &records, kinds::BANK_TOTAL, &[1]);
        assert_eq!(rep.violations.len(), 1, "{}", rep.describe(&records));
        assert!(rep.violations[0].detail.contains("a=50"));
    }

    #[test]
    fn uncertain_either_way_is_clean() {
        let (rs, rep) = check(vec![
            R::new(0)
                .r("x", &[])
                .a("x", 1)
                .a("y", 2)
                .undetermined()
                .start(1)
                .time(0, 5),
            R::new(1).r("z", &[]).a("z", 3).abandoned().start(2),
            R::new(2).a("z", 4).ts(10, 11).time(20, 25),
            R::new(3)
                .r("x", &[1])
                .r("y", &[2])
                .r("z", &[4])
                .final_read()
                .start(30)
                .time(30, 31),
        ]);
        assert_clean(&rep, &rs);
        assert_eq!(rep.uncertain, 2);
        assert_eq!(rep.uncertain_seen, 1);
        assert!(rep.summary().contains("clean"));
    }

    #[test]
    fn malformed_histories_do_not_panic() {
        let (_, rep) = check(vec![
            R::new(7).r("x", &[5, 5, 5]).a("x", 5).r("x", &[]),
            R::new(7).a("x", 5).r("x", &[5]).abandoned(),
            R::new(usize::MAX).final_read().r("", &[u64::MAX]),
        ]);
        assert!(!rep.is_clean());
        let _ = rep.describe(&[]);
        assert!(check_txn_history(&[], &TxnCheckOptions::default()).is_clean());
    }

    // --- generated histories -------------------------------------------

    /// A simulated TiKV: multi-version lists and balances, snapshot reads,
    /// first committer wins for optimistic transactions, and pessimistic
    /// locks taken at the latest version. Transactions interleave up to
    /// `concurrency` at a time (1: serial).
    struct Sim {
        rng: fastrand::Rng,
        tso: u64,
        clock: u64,
        next_elem: u64,
        keys: usize,
        accounts: usize,
        lists: Vec<Vec<(u64, Vec<u64>)>>,
        balances: Vec<Vec<(u64, i64)>>,
        records: Vec<TxnRecord>,
        /// A deliberate database bug.
        bug: Bug,
    }

    /// Bugs the simulated database can have.
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Bug {
        None,
        /// Optimistic commits skip the write-conflict check.
        NoFirstCommitterWins,
        /// Snapshot reads use a timestamp a little before `start_ts`.
        StaleSnapshots,
    }

    /// A key of either workload: (bank?, index).
    type Key = (bool, usize);

    struct Live {
        rec: TxnRecord,
        steps: usize,
        bank: bool,
        /// Values this transaction sees before its snapshot: locked reads
        /// and its own writes.
        lists: HashMap<usize, Option<Vec<u64>>>,
        balances: HashMap<usize, i64>,
        writes: HashSet<Key>,
        locks: HashSet<Key>,
        dead: bool,
    }

    const TOTAL: i64 = 1000;

    fn list_key(k: usize) -> Vec<u8> {
        format!("l{k:03}").into_bytes()
    }

    fn account(a: usize) -> Vec<u8> {
        format!("a{a}").into_bytes()
    }

    impl Sim {
        fn new(seed: u64, keys: usize, accounts: usize) -> Self {
            let mut balances = vec![Vec::new(); accounts];
            if let Some(first) = balances.first_mut() {
                first.push((0, TOTAL));
            }
            for b in balances.iter_mut().skip(1) {
                b.push((0, 0));
            }
            Sim {
                rng: fastrand::Rng::with_seed(seed),
                tso: 1,
                clock: 1,
                next_elem: 1,
                keys,
                accounts,
                lists: vec![Vec::new(); keys],
                balances,
                records: Vec::new(),
                bug: Bug::None,
            }
        }

        fn with_bug(mut self, bug: Bug) -> Self {
            self.bug = bug;
            self
        }

        fn tick(&mut self) -> u64 {
            self.clock += 1;
            self.clock
        }

        fn ts(&mut self) -> u64 {
            self.tso += 1;
            self.tso
        }

        fn list_at(&self, k: usize, ts: u64) -> Option<Vec<u64>> {
            let ts = if self.bug == Bug::StaleSnapshots {
                ts.saturating_sub(4)
            } else {
                ts
            };
            self.lists[k]
                .iter()
                .rev()
                .find(|(c, _)| *c <= ts)
                .map(|(_, l)| l.clone())
        }

        fn balance_at(&self, a: usize, ts: u64) -> i64 {
            self.balances[a]
                .iter()
                .rev()
                .find(|(c, _)| *c <= ts)
                .map_or(0, |(_, b)| *b)
        }

        fn last_commit(&self, key: Key) -> u64 {
            if key.0 {
                self.balances[key.1].last().map_or(0, |x| x.0)
            } else {
                self.lists[key.1].last().map_or(0, |x| x.0)
            }
        }

        fn held_by_other(live: &[Live], me: usize, key: Key) -> bool {
            live.iter()
                .enumerate()
                .any(|(i, l)| i != me && (l.locks.contains(&key) || l.writes.contains(&key)))
        }

        /// Takes a pessimistic lock; false (and the transaction dies) on
        /// a conflict.
        fn lock(live: &mut [Live], me: usize, key: Key) -> bool {
            if Self::held_by_other(live, me, key) {
                live[me].dead = true;
                return false;
            }
            live[me].locks.insert(key);
            true
        }

        fn begin(&mut self, bank: bool) -> Live {
            let modes = [
                TxnMode::Optimistic,
                TxnMode::AsyncCommit,
                TxnMode::OnePc,
                TxnMode::Pessimistic,
                TxnMode::PessimisticAsyncCommit,
            ];
            let mode = modes[self.rng.usize(..modes.len())];
            let invoke = self.tick();
            let start = self.ts();
            let steps = if bank { 1 } else { self.rng.usize(1..=4) };
            Live {
                rec: TxnRecord {
                    id: 0,
                    task: self.rng.usize(..8),
                    workload: if bank {
                        TxnWorkload::Bank
                    } else {
                        TxnWorkload::ListAppend
                    },
                    mode,
                    start_ts: Some(start),
                    invoke,
                    complete: None,
                    ops: Vec::new(),
                    outcome: TxnOutcome::Abandoned,
                },
                steps,
                bank,
                lists: HashMap::new(),
                balances: HashMap::new(),
                writes: HashSet::new(),
                locks: HashSet::new(),
                dead: false,
            }
        }

        /// One step of live transaction `me`.
        fn step(&mut self, live: &mut [Live], me: usize) {
            self.tick();
            let start = live[me].rec.start_ts.unwrap_or(0);
            let pess = live[me].rec.mode.is_pessimistic();
            live[me].steps -= 1;
            if live[me].bank {
                // Audit (read-only) or transfer.
                if !pess && self.rng.u8(..3) == 0 {
                    for a in 0..self.accounts {
                        let b = self.balance_at(a, start);
                        live[me].rec.ops.push(TxnOp::ReadBalance {
                            key: account(a),
                            balance: Some(b),
                            locking: false,
                        });
                    }
                    return;
                }
                let from = self.rng.usize(..self.accounts);
                let to = (from + 1 + self.rng.usize(..self.accounts - 1)) % self.accounts;
                let mut vals = [0i64; 2];
                for (n, a) in [from, to].into_iter().enumerate() {
                    let b = if pess {
                        if !Self::lock(live, me, (true, a)) {
                            return;
                        }
                        self.balances[a].last().map_or(0, |x| x.1)
                    } else {
                        self.balance_at(a, start)
                    };
                    live[me].rec.ops.push(TxnOp::ReadBalance {
                        key: account(a),
                        balance: Some(b),
                        locking: pess,
                    });
                    vals[n] = b;
                }
                let amount = self.rng.i64(0..=vals[0].max(0));
                for (a, b) in [(from, vals[0] - amount), (to, vals[1] + amount)] {
                    live[me].balances.insert(a, b);
                    live[me].writes.insert((true, a));
                    live[me].rec.ops.push(TxnOp::WriteBalance {
                        key: account(a),
                        balance: b,
                    });
                }
                return;
            }
            let k = self.rng.usize(..self.keys);
            let key = (false, k);
            if self.rng.bool() {
                let locking = pess && self.rng.u8(..3) == 0;
                let list = match live[me].lists.get(&k) {
                    Some(l) => l.clone(),
                    None if locking => {
                        if !Self::lock(live, me, key) {
                            return;
                        }
                        let l = self.lists[k].last().map(|x| x.1.clone());
                        live[me].lists.insert(k, l.clone());
                        l
                    }
                    None => self.list_at(k, start),
                };
                live[me].rec.ops.push(TxnOp::Read {
                    key: list_key(k),
                    list,
                    locking,
                });
            } else {
                let base = match live[me].lists.get(&k) {
                    Some(l) => l.clone(),
                    None if pess => {
                        if !Self::lock(live, me, key) {
                            return;
                        }
                        self.lists[k].last().map(|x| x.1.clone())
                    }
                    None => self.list_at(k, start),
                };
                let e = self.next_elem;
                self.next_elem += 1;
                let mut l = base.unwrap_or_default();
                l.push(e);
                live[me].lists.insert(k, Some(l));
                live[me].writes.insert(key);
                live[me].rec.ops.push(TxnOp::Append {
                    key: list_key(k),
                    element: e,
                });
            }
        }

        /// Ends live transaction `me`.
        fn finish(&mut self, live: &mut [Live], me: usize) {
            let start = live[me].rec.start_ts.unwrap_or(0);
            let pess = live[me].rec.mode.is_pessimistic();
            let conflict = live[me].dead
                || live[me].writes.iter().any(|&key| {
                    Self::held_by_other(live, me, key)
                        || (!pess
                            && self.bug != Bug::NoFirstCommitterWins
                            && self.last_commit(key) > start)
                });
            let l = &mut live[me];
            if conflict {
                l.rec.outcome = TxnOutcome::Aborted {
                    error: "conflict".into(),
                };
                l.rec.complete = Some(self.tick());
                return;
            }
            if l.writes.is_empty() {
                l.rec.outcome = TxnOutcome::Committed { commit_ts: None };
                l.rec.complete = Some(self.tick());
                return;
            }
            let dice = self.rng.u8(..100);
            let applied = match dice {
                0..=4 => {
                    l.rec.outcome = TxnOutcome::Aborted {
                        error: "rolled back".into(),
                    };
                    false
                }
                5..=11 => {
                    l.rec.outcome = TxnOutcome::Undetermined {
                        error: "timeout".into(),
                    };
                    self.rng.bool()
                }
                12..=14 => {
                    l.rec.outcome = TxnOutcome::Abandoned;
                    self.rng.bool()
                }
                _ => {
                    l.rec.outcome = TxnOutcome::Committed { commit_ts: None };
                    true
                }
            };
            if applied {
                self.tso += 1;
                let c = self.tso;
                if l.rec.outcome.is_committed() {
                    l.rec.outcome = TxnOutcome::Committed { commit_ts: Some(c) };
                }
                for &(bank, k) in &l.writes {
                    if bank {
                        let b = l.balances.get(&k).copied().unwrap_or(0);
                        self.balances[k].push((c, b));
                    } else if let Some(Some(list)) = l.lists.get(&k) {
                        self.lists[k].push((c, list.clone()));
                    }
                }
            }
            self.clock += 1;
            if !matches!(l.rec.outcome, TxnOutcome::Abandoned) {
                l.rec.complete = Some(self.clock);
            }
        }

        fn push(&mut self, mut rec: TxnRecord) {
            rec.id = self.records.len();
            self.records.push(rec);
        }

        /// Runs `n` transactions, then the final reads.
        fn run(mut self, n: usize, concurrency: usize) -> Vec<TxnRecord> {
            let mut live: Vec<Live> = Vec::new();
            let mut started = 0;
            while started < n || !live.is_empty() {
                if started < n && live.len() < concurrency && (live.is_empty() || self.rng.bool()) {
                    let bank = self.accounts >= 2 && self.rng.u8(..4) == 0;
                    let l = self.begin(bank);
                    live.push(l);
                    started += 1;
                    continue;
                }
                let me = self.rng.usize(..live.len());
                if live[me].steps > 0 && !live[me].dead {
                    self.step(&mut live, me);
                } else {
                    self.finish(&mut live, me);
                    let l = live.swap_remove(me);
                    self.push(l.rec);
                }
            }
            let invoke = self.tick();
            let start = self.ts();
            let mut ops = Vec::new();
            for k in 0..self.keys {
                ops.push(TxnOp::Read {
                    key: list_key(k),
                    list: self.list_at(k, start),
                    locking: false,
                });
            }
            for a in 0..self.accounts {
                ops.push(TxnOp::ReadBalance {
                    key: account(a),
                    balance: Some(self.balance_at(a, start)),
                    locking: false,
                });
            }
            let complete = self.tick();
            self.push(TxnRecord {
                id: 0,
                task: usize::MAX,
                workload: TxnWorkload::ListAppend,
                mode: TxnMode::Snapshot,
                start_ts: Some(start),
                invoke,
                complete: Some(complete),
                ops,
                outcome: TxnOutcome::Committed { commit_ts: None },
            });
            self.records
        }
    }

    fn bank_options(accounts: usize) -> TxnCheckOptions {
        TxnCheckOptions {
            bank_accounts: (0..accounts).map(account).collect(),
            bank_total: TOTAL,
        }
    }

    #[test]
    fn generated_serial_histories_are_clean() {
        for seed in 0..40 {
            let records = Sim::new(seed, 4, 3).run(200, 1);
            let rep = check_txn_history(&records, &bank_options(3));
            assert!(
                rep.is_clean(),
                "seed {seed}: {}\n{}",
                rep.summary(),
                rep.describe(&records)
            );
            assert!(rep.committed > 0 && rep.aborted > 0 && rep.uncertain > 0);
        }
    }

    #[test]
    fn generated_concurrent_si_histories_are_clean() {
        let mut cycles = 0;
        for seed in 0..40 {
            let records = Sim::new(seed, 3, 3).run(300, 5);
            let rep = check_txn_history(&records, &bank_options(3));
            assert!(
                rep.is_clean(),
                "seed {seed}: {}\n{}",
                rep.summary(),
                rep.describe(&records)
            );
            cycles += rep.graph_cycles;
        }
        // Write skew happened (and was allowed).
        assert!(cycles > 0);
    }

    #[test]
    fn generated_histories_of_a_buggy_database_are_not_clean() {
        for bug in [Bug::NoFirstCommitterWins, Bug::StaleSnapshots] {
            for seed in 0..10 {
                let records = Sim::new(seed, 3, 0).with_bug(bug).run(300, 5);
                let rep = check_txn_history(&records, &TxnCheckOptions::default());
                assert!(!rep.is_clean(), "seed {seed}: {}", rep.summary());
                if seed == 0 {
                    println!("{}", rep.summary());
                }
            }
        }
    }

    /// Drops a committed append from one read (or adds an aborted one).
    #[test]
    fn generated_histories_with_one_bad_read_are_not_clean() {
        let mut dropped = 0;
        let mut added = 0;
        for seed in 0..40 {
            let concurrency = if seed % 2 == 0 { 1 } else { 4 };
            let records = Sim::new(seed, 4, 0).run(200, concurrency);
            let committed: HashSet<u64> = records
                .iter()
                .filter(|r| r.outcome.is_committed())
                .flat_map(|r| r.ops.iter())
                .filter_map(|op| match op {
                    TxnOp::Append { element, .. } => Some(*element),
                    _ => None,
                })
                .collect();
            let aborted: Vec<(Vec<u8>, u64)> = records
                .iter()
                .filter(|r| matches!(r.outcome, TxnOutcome::Aborted { .. }))
                .flat_map(|r| r.ops.iter())
                .filter_map(|op| match op {
                    TxnOp::Append { key, element } => Some((key.clone(), *element)),
                    _ => None,
                })
                .collect();
            let mut rng = fastrand::Rng::with_seed(seed + 1000);
            // Reads (record, op) that show a committed element.
            let mut candidates: Vec<(usize, usize)> = Vec::new();
            for (i, r) in records.iter().enumerate() {
                for (j, op) in r.ops.iter().enumerate() {
                    if let TxnOp::Read { list: Some(l), .. } = op {
                        if l.iter().any(|e| committed.contains(e)) {
                            candidates.push((i, j));
                        }
                    }
                }
            }
            if candidates.is_empty() {
                continue;
            }
            let (i, j) = candidates[rng.usize(..candidates.len())];
            let mut bad = records.clone();
            if let TxnOp::Read { list: Some(l), .. } = &mut bad[i].ops[j] {
                let at: Vec<usize> = (0..l.len())
                    .filter(|&p| committed.contains(&l[p]))
                    .collect();
                l.remove(at[rng.usize(..at.len())]);
            }
            let rep = check_txn_history(&bad, &TxnCheckOptions::default());
            assert!(
                !rep.is_clean(),
                "seed {seed}: dropping from record {i} op {j} went unseen"
            );
            dropped += 1;

            // An aborted element, on its key, at the end of some read.
            if aborted.is_empty() {
                continue;
            }
            let (key, e) = aborted[rng.usize(..aborted.len())].clone();
            let mut bad = records.clone();
            let reads: Vec<(usize, usize)> = bad
                .iter()
                .enumerate()
                .flat_map(|(i, r)| r.ops.iter().enumerate().map(move |(j, op)| (i, j, op)))
                .filter(|(_, _, op)| matches!(op, TxnOp::Read { key: k, .. } if *k == key))
                .map(|(i, j, _)| (i, j))
                .collect();
            let Some(&(i, j)) = reads.get(rng.usize(..reads.len().max(1))) else {
                continue;
            };
            if let TxnOp::Read { list, .. } = &mut bad[i].ops[j] {
                list.get_or_insert_with(Vec::new).push(e);
            }
            let rep = check_txn_history(&bad, &TxnCheckOptions::default());
            assert!(
                rep.count(kinds::ABORTED_READ) > 0,
                "seed {seed}: aborted {e} in record {i} went unseen: {}",
                rep.summary()
            );
            added += 1;
        }
        assert!(
            dropped > 30 && added > 20,
            "dropped {dropped} added {added}"
        );
    }

    /// 20,000 transactions over 50 keys, 8 at a time: prints how long the
    /// check takes (no timing assertion).
    #[test]
    fn twenty_thousand_transactions() {
        let records = Sim::new(42, 50, 5).run(20_000, 8);
        let t = std::time::Instant::now();
        let rep = check_txn_history(&records, &bank_options(5));
        let took = t.elapsed();
        println!("checked {} in {took:?}: {}", records.len(), rep.summary());
        assert!(rep.is_clean(), "{}", rep.summary());
    }
}
