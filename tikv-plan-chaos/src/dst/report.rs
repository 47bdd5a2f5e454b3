//! What a deterministic run found, and how it reads: a summary line, the
//! history as text (what "same seed, same history" compares) and a trace
//! of the steps around the first violation.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use super::kinds::{DstWorkload, NetFault};
use crate::txn::{describe_record, TxnChaosReport};
use crate::{CheckReport, FaultKind, OpRecord, FINAL_READER};

/// What a deterministic run did and found.
#[derive(Debug, Clone)]
pub struct DstReport {
    /// The seed.
    pub seed: u64,
    /// The workloads it drove.
    pub workload: DstWorkload,
    /// Raw workload operations (final reads not included).
    pub ops: usize,
    /// Raw operations that ended undetermined.
    pub undetermined: usize,
    /// Network faults applied, by kind.
    pub net_faults: BTreeMap<NetFault, u64>,
    /// Cluster-state faults applied, by kind.
    pub state_faults: BTreeMap<FaultKind, u64>,
    /// Every fault: start and end (µs on the histories' clock) and what,
    /// named by its index (`n3` the network fault drawn fourth, `s12` the
    /// state fault of injection attempt 12).
    pub fault_log: Vec<(u64, u64, String)>,
    /// The indices of the network faults applied
    /// ([`DstConfig::only_net_faults`](super::DstConfig::only_net_faults)).
    pub net_applied: Vec<usize>,
    /// The injection attempts that applied a state fault
    /// ([`DstConfig::only_state_faults`](super::DstConfig::only_state_faults)).
    pub state_applied: Vec<usize>,
    /// The linearizability check of the raw history (empty without the
    /// raw workload).
    pub check: CheckReport,
    /// Raw operations past their bound (abandoned ones included).
    pub hangs: usize,
    /// Raw workload tasks that panicked.
    pub panics: usize,
    /// The raw history, final reads included.
    pub history: Vec<OpRecord>,
    /// The transactional workload's report, with its history and the
    /// check for anomalies, when it ran. Its times are on the same clock
    /// as the raw history's.
    pub txn: Option<TxnChaosReport>,
    /// Simulated time the whole run took.
    pub simulated: Duration,
    /// Calls the stores forwarded for the client (`tikv-forwarded-host`),
    /// a BatchCommands stream counting once.
    pub forwarded: u64,
    /// Reads a replica (not the leader) served, in both workloads.
    pub replica_served: u64,
}

impl DstReport {
    /// No violation, nothing undecided, no hang, no panic, in either
    /// workload.
    pub fn is_clean(&self) -> bool {
        self.check.is_clean()
            && self.hangs == 0
            && self.panics == 0
            && self.txn.as_ref().is_none_or(TxnChaosReport::is_clean)
    }

    /// Both histories, one record per line (raw operations, then
    /// transactions, each with its times): what `same seed, same history`
    /// compares.
    pub fn history_text(&self) -> String {
        let mut out = String::new();
        for record in &self.history {
            let _ = writeln!(out, "{record}");
        }
        for record in self.txn.iter().flat_map(|t| &t.history) {
            let _ = writeln!(out, "txn {}", describe_record(record));
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
        let txn = match &self.txn {
            Some(t) => format!(
                " txns={} txn_undetermined={} txn_violations={} txn_hangs={} txn_late_calls={} txn_panics={}",
                t.transactions,
                t.undetermined,
                t.check.violations.len(),
                t.hangs,
                t.late_calls,
                t.panics
            ),
            None => String::new(),
        };
        format!(
            "seed={} workload={} simulated={:.1}s ops={} undetermined={} net=[{}] state=[{}] non_linearizable_keys={} undecided_keys={} lost_writes={} double_applies={} hangs={} panics={} forwarded={} replica_served={}{txn} verdict={}",
            self.seed,
            self.workload.name(),
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
            self.forwarded,
            self.replica_served,
            if self.is_clean() { "clean" } else { "VIOLATION" },
        )
    }

    /// A readable trace of the first violation: what the checker found,
    /// then every operation, transaction and fault within a second of it,
    /// in time order.
    pub fn trace(&self) -> String {
        let raw_clean = self.check.is_clean() && self.hangs == 0 && self.panics == 0;
        if raw_clean {
            if let Some(txn) = self.txn.as_ref().filter(|t| !t.is_clean()) {
                return self.txn_trace(txn);
            }
        }
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
            None if !raw_clean => {
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
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.summary());
        let _ = writeln!(out, "{what}: {at}");
        let to = at.complete.unwrap_or(at.invoke);
        out.push_str(&self.around(at.invoke, to));
        out
    }

    /// The trace of a transactional finding: the checker's account, then
    /// everything within a second of the first violation's transactions.
    fn txn_trace(&self, txn: &TxnChaosReport) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "{}", self.summary());
        out.push_str(&txn.describe_violations());
        let records: Vec<usize> = match txn.check.violations.first() {
            Some(v) => v.records.clone(),
            None => txn.hang_records.iter().take(1).copied().collect(),
        };
        let involved = records.iter().filter_map(|id| txn.history.get(*id));
        let (mut from, mut to) = (u64::MAX, 0);
        for r in involved {
            from = from.min(r.invoke);
            to = to.max(r.complete.unwrap_or(r.invoke));
        }
        if from <= to {
            let _ = writeln!(out, "around the first violation:");
            out.push_str(&self.around(from, to));
        } else if txn.panics > 0 {
            let _ = writeln!(out, "{} transactional tasks panicked", txn.panics);
        }
        out
    }

    /// Every operation, transaction and fault that overlaps a second
    /// either side of `from..=to`, in time order, one per line.
    fn around(&self, from: u64, to: u64) -> String {
        let (from, to) = (from.saturating_sub(1_000_000), to.saturating_add(1_000_000));
        let mut lines: Vec<(u64, String)> = Vec::new();
        for r in &self.history {
            let end = r.complete.unwrap_or(u64::MAX);
            if end >= from && r.invoke <= to {
                lines.push((r.invoke, format!("  op    {r}")));
            }
        }
        for r in self.txn.iter().flat_map(|t| &t.history) {
            let end = r.complete.unwrap_or(u64::MAX);
            if end >= from && r.invoke <= to {
                lines.push((r.invoke, format!("  txn   {}", describe_record(r))));
            }
        }
        for (start, end, what) in &self.fault_log {
            if *end >= from && *start <= to {
                lines.push((*start, format!("  fault [{start}..{end}µs] {what}")));
            }
        }
        lines.sort();
        let mut out = String::new();
        for (_, line) in lines {
            let _ = writeln!(out, "{line}");
        }
        out
    }
}
