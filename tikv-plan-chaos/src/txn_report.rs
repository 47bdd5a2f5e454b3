//! The transactional chaos run's report: its one line of counts, the
//! description of its violations, and one record on one line.

use crate::inject::FaultKind;
use crate::txn::{mode_name, TxnChaosReport, FINAL_TASK, MODES, OUTCOMES, SETUP_TASK};
use crate::txn_history::{TxnMode, TxnOp, TxnOutcome, TxnRecord, TxnWorkload};

impl TxnChaosReport {
    /// No violation, no hang, no panic, no call past its deadline, no
    /// call at a TiFlash store.
    pub fn is_clean(&self) -> bool {
        self.check.is_clean()
            && self.hangs == 0
            && self.panics == 0
            && self.late_calls == 0
            && self.tiflash_calls == 0
    }

    /// Faults applied, all kinds.
    pub fn total_faults(&self) -> u64 {
        self.faults.values().sum()
    }

    /// Workload transactions of `workload` that ended with `outcome` (an
    /// [`outcome_name`]).
    pub fn count(&self, workload: TxnWorkload, outcome: &str) -> usize {
        self.by_mode
            .iter()
            .filter(|((w, _, o), _)| *w == workload && *o == outcome)
            .map(|(_, n)| *n)
            .sum()
    }

    /// Long pessimistic transactions run.
    pub fn long_transactions(&self) -> usize {
        self.long_by_outcome.values().sum()
    }

    /// One line of counts: transactions by workload, mode and outcome
    /// (committed/aborted/undetermined/abandoned), long ones, faults by
    /// kind, violations, hangs, panics.
    pub fn summary(&self) -> String {
        let outcomes = |count: &dyn Fn(&str) -> usize| -> String {
            OUTCOMES
                .iter()
                .map(|o| count(o).to_string())
                .collect::<Vec<_>>()
                .join("/")
        };
        let workloads = [
            ("list", TxnWorkload::ListAppend),
            ("bank", TxnWorkload::Bank),
        ]
        .iter()
        .map(|(name, w)| format!("{name}={}", outcomes(&|o| self.count(*w, o))))
        .collect::<Vec<_>>()
        .join(" ");
        let modes = MODES
            .iter()
            .chain([TxnMode::StaleSnapshot].iter())
            .map(|m| {
                let count = |o: &str| -> usize {
                    self.by_mode
                        .iter()
                        .filter(|((_, mode, out), _)| mode == m && *out == o)
                        .map(|(_, n)| *n)
                        .sum()
                };
                format!("{}={}", mode_name(*m), outcomes(&count))
            })
            .collect::<Vec<_>>()
            .join(" ");
        let long = outcomes(&|o| self.long_by_outcome.get(o).copied().unwrap_or(0));
        let faults = FaultKind::ALL
            .iter()
            .chain(FaultKind::TXN.iter())
            .chain(FaultKind::REPLICA.iter())
            .filter(|k| !FaultKind::DROPS.contains(k))
            .map(|k| format!("{k}={}", self.faults.get(k).copied().unwrap_or(0)))
            .collect::<Vec<_>>()
            .join(" ");
        format!(
            "seed={} seconds={} txns={} (committed/aborted/undetermined/abandoned) {workloads} [{modes}] long={long} forced_expiries={} undetermined={} faults={} [{faults}] drops_fired={} forwarded={} replica_served={} tiflash_calls={} heartbeats={}/{} lock_checks={} lock_waits={}/{}/{} deadlocks={}/{} violations={} hangs={} panics={} late_calls={} slowest_call={:?}/{:?}",
            self.seed,
            self.duration.as_secs(),
            self.transactions,
            self.forced_expiries,
            self.undetermined,
            self.total_faults(),
            self.drops_fired,
            self.forwarded,
            self.replica_served,
            self.tiflash_calls,
            self.heartbeats.0,
            self.heartbeats.1,
            self.lock_checks,
            self.lock_waits.waits,
            self.lock_waits.woken,
            self.lock_waits.timed_out,
            self.lock_waits.deadlocks,
            self.deadlock_aborts,
            self.check.violations.len(),
            self.hangs,
            self.panics,
            self.late_calls,
            self.slowest_call.0,
            self.slowest_call.1,
        )
    }

    /// A readable account of every violation (its kind, what was seen and
    /// the transactions involved) and of every hang.
    pub fn describe_violations(&self) -> String {
        let record = |id: usize| -> String {
            self.history
                .get(id)
                .map(describe_record)
                .unwrap_or_else(|| format!("#{id}?"))
        };
        let mut out = String::new();
        for v in &self.check.violations {
            out.push_str(&format!("{}: {}\n", v.kind, v.detail));
            for id in &v.records {
                out.push_str(&format!("  {}\n", record(*id)));
            }
        }
        for id in &self.hang_records {
            out.push_str(&format!("over its bound: {}\n", record(*id)));
        }
        for site in &self.late_call_sites {
            out.push_str(&format!("a call past its deadline: {site}\n"));
        }
        if self.tiflash_calls > 0 {
            out.push_str(&format!(
                "the TiFlash stores received {} TiKV call(s)\n",
                self.tiflash_calls
            ));
        }
        out
    }
}

/// One record on one line: id, task, workload, mode, start ts, ops
/// (`r` read, `rl` locking read, `a` append, `rb`/`rbl` balance read, `wb`
/// balance write), outcome.
pub fn describe_record(r: &TxnRecord) -> String {
    let key = |k: &[u8]| String::from_utf8_lossy(k).into_owned();
    let ops: Vec<String> = r
        .ops
        .iter()
        .map(|op| match op {
            TxnOp::Read {
                key: k,
                list,
                locking,
            } => format!(
                "{} {} {}",
                if *locking { "rl" } else { "r" },
                key(k),
                list.as_ref()
                    .map(|l| format!("{l:?}"))
                    .unwrap_or_else(|| "nil".to_owned())
            ),
            TxnOp::Append { key: k, element } => format!("a {} {element}", key(k)),
            TxnOp::ReadBalance {
                key: k,
                balance,
                locking,
            } => format!(
                "{} {} {}",
                if *locking { "rbl" } else { "rb" },
                key(k),
                balance
                    .map(|b| b.to_string())
                    .unwrap_or_else(|| "nil".to_owned())
            ),
            TxnOp::WriteBalance { key: k, balance } => format!("wb {} {balance}", key(k)),
        })
        .collect();
    let task = match r.task {
        FINAL_TASK => "final".to_owned(),
        SETUP_TASK => "setup".to_owned(),
        t => t.to_string(),
    };
    let outcome = match &r.outcome {
        TxnOutcome::Committed { commit_ts } => format!("committed at {commit_ts:?}"),
        TxnOutcome::Aborted { error } => format!("aborted: {error}"),
        TxnOutcome::Undetermined { error } => format!("undetermined: {error}"),
        TxnOutcome::Abandoned => "abandoned".to_owned(),
    };
    format!(
        "#{} task {task} {:?} {} start_ts={:?} {}..{} [{}] {outcome}",
        r.id,
        r.workload,
        mode_name(r.mode),
        r.start_ts,
        r.invoke,
        r.complete
            .map(|c| c.to_string())
            .unwrap_or_else(|| "?".to_owned()),
        ops.join(", ")
    )
}
