//! Shrinking: from a run that violates, a shorter fault schedule that
//! still does. Each fault applied (network and cluster-state alike) is
//! dropped in turn, and stays dropped when the run without it still shows
//! a violation; every run is a replay of the same seed with fewer faults
//! ([`DstConfig::only_net_faults`], [`DstConfig::only_state_faults`]), so
//! the result replays too.

use std::collections::BTreeSet;

use super::report::DstReport;
use super::run::{run, DstConfig};

/// What [`shrink`] found.
#[derive(Debug, Clone)]
pub struct Shrunk {
    /// The configuration that replays the shorter schedule.
    pub config: DstConfig,
    /// Its run, which still violates.
    pub report: DstReport,
    /// Faults applied by the first run: network, state.
    pub before: (usize, usize),
    /// Runs made, the first included.
    pub runs: usize,
}

impl Shrunk {
    /// The `dst` options that replay it.
    pub fn replay_options(&self) -> String {
        let list = |set: &Option<BTreeSet<usize>>| {
            set.as_ref()
                .map(|s| s.iter().map(usize::to_string).collect::<Vec<_>>().join(","))
                .unwrap_or_default()
        };
        format!(
            "--seed {} --workload {} --seconds {} --only-net '{}' --only-state '{}'{}",
            self.config.seed,
            self.config.workload.name(),
            self.config.duration.as_secs(),
            list(&self.config.only_net_faults),
            list(&self.config.only_state_faults),
            if self.config.resend_undetermined_writes {
                " --resend-writes"
            } else {
                ""
            }
        )
    }
}

/// Runs `config`; if it violates, drops its faults one at a time, keeping
/// each drop after which the run still violates, and returns the last
/// violating run. `None` when the run is clean.
pub fn shrink(config: &DstConfig) -> crate::Result<Option<Shrunk>> {
    let first = run(config)?;
    if first.is_clean() {
        return Ok(None);
    }
    let before = (first.net_applied.len(), first.state_applied.len());
    let mut best = Shrunk {
        config: DstConfig {
            only_net_faults: Some(first.net_applied.iter().copied().collect()),
            only_state_faults: Some(first.state_applied.iter().copied().collect()),
            ..config.clone()
        },
        report: first,
        before,
        runs: 1,
    };
    // No fault at all first: some violations need none.
    let none = DstConfig {
        only_net_faults: Some(BTreeSet::new()),
        only_state_faults: Some(BTreeSet::new()),
        ..config.clone()
    };
    best.runs += 1;
    let report = run(&none)?;
    if !report.is_clean() {
        best.config = none;
        best.report = report;
        return Ok(Some(best));
    }
    let candidates: Vec<(bool, usize)> = best
        .report
        .net_applied
        .iter()
        .map(|i| (true, *i))
        .chain(best.report.state_applied.iter().map(|i| (false, *i)))
        .collect();
    for (net, index) in candidates {
        let mut trial = best.config.clone();
        let set = if net {
            &mut trial.only_net_faults
        } else {
            &mut trial.only_state_faults
        };
        if !set.as_mut().is_some_and(|s| s.remove(&index)) {
            continue;
        }
        best.runs += 1;
        let report = run(&trial)?;
        if !report.is_clean() {
            best.config = trial;
            best.report = report;
        }
    }
    Ok(Some(best))
}
