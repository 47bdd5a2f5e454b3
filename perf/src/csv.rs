//! CSV output (`--csv-dir DIR`): one file per measurement family, each
//! with a header line, for `perf/plot.sh` and anyone else. The markdown
//! tables are made from the same figures.
//!
//! - `throughput.csv`: one line per round, operation, task count and
//!   client, with that round's ratios against the BatchCommands floor, the
//!   bare call and tikv-client (this client's figure over the reference's, the two
//!   measured seconds apart in the same round).
//! - `failover.csv`: every timed read of every failover trial.
//! - `dead-store.csv`: when each key of each dead-store trial was read.
//!
//! Beside each, `NAME-run.csv` holds `key,value` lines about the run that
//! wrote it (label, machine, rounds, trials, caps). A run writes the files
//! of the families it measured; the others are left as they were.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::clients::Kind;
use crate::faults::{DeadStore, Failover, Outcome};
use crate::report::{Cell, METRICS};
use crate::workload::Sample;

/// `text` as one CSV field: quoted when it holds a comma, a quote or a line
/// break.
pub fn field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

/// A number with `decimals` decimals; empty when not finite.
fn number(value: f64, decimals: usize) -> String {
    if value.is_finite() {
        format!("{value:.decimals$}")
    } else {
        String::new()
    }
}

fn millis(d: Duration) -> String {
    number(d.as_secs_f64() * 1e3, 3)
}

/// Header and rows as CSV text.
fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut out = header.join(",");
    out.push('\n');
    for row in rows {
        let fields: Vec<String> = row.iter().map(|f| field(f)).collect();
        out.push_str(&fields.join(","));
        out.push('\n');
    }
    out
}

/// Writes `FAMILY.csv` and `FAMILY-run.csv` (`info`) in `dir`, made if
/// missing, and says so on stderr.
pub fn write_family(dir: &Path, family: &str, text: &str, info: &str) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("cannot make {}: {e}", dir.display()))?;
    for (name, content) in [
        (format!("{family}.csv"), text),
        (format!("{family}-run.csv"), info),
    ] {
        let path = dir.join(name);
        std::fs::write(&path, content)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        eprintln!("wrote {}", path.display());
    }
    Ok(())
}

/// The `-run.csv` text: what was run, where and when.
pub fn run_info(pairs: &[(&str, String)]) -> String {
    let rows: Vec<Vec<String>> = pairs
        .iter()
        .map(|(k, v)| vec![(*k).to_owned(), v.clone()])
        .collect();
    table(&["key", "value"], &rows)
}

/// The metric names of the ratio columns, in [`METRICS`] order.
const RATIO_NAMES: [&str; 4] = ["ops_per_s", "p50", "p99", "cpu"];

/// `throughput.csv`: one line per round and cell. The ratio columns are
/// this round's figure over the reference's in the same round, empty for
/// the reference itself or when it was not measured.
pub fn throughput(results: &BTreeMap<Cell, Vec<Sample>>, kinds: &[Kind]) -> String {
    let mut header = vec![
        "round",
        "op",
        "tasks",
        "client",
        "ops",
        "errors",
        "elapsed_s",
        "ops_per_s",
        "p50_us",
        "p99_us",
        "client_cpu_us_per_op",
        "sim_cpu_us_per_op",
    ];
    let ratio_headers: Vec<String> = ["floor", "bare", "tikv_client"]
        .iter()
        .flat_map(|reference| {
            RATIO_NAMES
                .iter()
                .map(move |metric| format!("{metric}_vs_{reference}"))
        })
        .collect();
    header.extend(ratio_headers.iter().map(String::as_str));
    let mut rows = Vec::new();
    for (cell, samples) in results {
        if !kinds.contains(&cell.kind) {
            continue;
        }
        let reference = |kind: Kind| {
            results
                .get(&Cell { kind, ..*cell })
                .filter(|_| kind != cell.kind)
        };
        for (round, sample) in samples.iter().enumerate() {
            let mut row = vec![
                (round + 1).to_string(),
                cell.op.name().to_owned(),
                cell.tasks.to_string(),
                cell.kind.label().to_owned(),
                sample.ops.to_string(),
                sample.errors.to_string(),
                number(sample.elapsed.as_secs_f64(), 4),
                number(sample.throughput(), 1),
                sample.p50.as_micros().to_string(),
                sample.p99.as_micros().to_string(),
                number(sample.cpu_per_op(), 2),
                number(sample.sim_cpu_per_op(), 2),
            ];
            for kind in [Kind::Floor, Kind::Bare, Kind::Upstream] {
                let other = reference(kind).and_then(|r| r.get(round));
                for metric in METRICS {
                    row.push(match other {
                        Some(o) => number(metric(sample) / metric(o), 4),
                        None => String::new(),
                    });
                }
            }
            rows.push(row);
        }
    }
    table(&header, &rows)
}

/// `failover.csv`: every timed read of every trial, with the trial's
/// result (`time_to_first_success_ms`, empty when it did not finish by the
/// cap) on each line.
pub fn failover(trials: &[(Kind, Vec<Failover>)]) -> String {
    let mut rows = Vec::new();
    for (kind, runs) in trials {
        for (trial, run) in runs.iter().enumerate() {
            let first_success = match &run.outcome {
                Outcome::Finished { took, .. } => millis(*took),
                Outcome::NotFinished { .. } => String::new(),
            };
            for (i, read) in run.reads.iter().enumerate() {
                rows.push(vec![
                    kind.label().to_owned(),
                    (trial + 1).to_string(),
                    (i + 1).to_string(),
                    number(read.since_fault * 1e3, 3),
                    millis(read.latency),
                    read.outcome.name().to_owned(),
                    first_success.clone(),
                    read.error.clone(),
                ]);
            }
        }
    }
    table(
        &[
            "client",
            "trial",
            "read",
            "since_fault_ms",
            "latency_ms",
            "outcome",
            "time_to_first_success_ms",
            "error",
        ],
        &rows,
    )
}

/// `dead-store.csv`: one line per key read, in the order they were read:
/// how many keys were read by then and when, from the store hanging.
/// `finished` says whether the trial read every key by the cap.
pub fn dead_store(trials: &[(Kind, Vec<DeadStore>)], keys: usize) -> String {
    let mut rows = Vec::new();
    for (kind, runs) in trials {
        for (trial, run) in runs.iter().enumerate() {
            let finished = matches!(run.outcome, Outcome::Finished { .. });
            for (i, at) in run.done_at.iter().enumerate() {
                rows.push(vec![
                    kind.label().to_owned(),
                    (trial + 1).to_string(),
                    keys.to_string(),
                    finished.to_string(),
                    (i + 1).to_string(),
                    millis(*at),
                ]);
            }
        }
    }
    table(
        &[
            "client",
            "trial",
            "keys",
            "finished",
            "keys_read",
            "time_ms",
        ],
        &rows,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::faults::{Read, ReadOutcome};
    use crate::workload::Op;

    fn sample(ops: u64) -> Sample {
        Sample {
            ops,
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(100),
            p99: Duration::from_micros(400),
            cpu: Duration::from_micros(ops * 10),
            ..Default::default()
        }
    }

    #[test]
    fn fields_are_quoted_only_when_needed() {
        assert_eq!(field("tikv-plan"), "tikv-plan");
        assert_eq!(field("a,b"), "\"a,b\"");
        assert_eq!(field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(number(f64::NAN, 2), "");
    }

    #[test]
    fn throughput_ratios_pair_rounds() {
        let mut results = BTreeMap::new();
        let cell = |kind| Cell {
            op: Op::Get,
            tasks: 64,
            kind,
        };
        results.insert(cell(Kind::PlanUnary), vec![sample(900), sample(1200)]);
        results.insert(cell(Kind::Bare), vec![sample(1000), sample(1500)]);
        results.insert(cell(Kind::Floor), vec![sample(1100), sample(1600)]);
        let text = throughput(&results, &[Kind::PlanUnary, Kind::Floor, Kind::Bare]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 7, "{text}");
        let header: Vec<&str> = lines[0].split(',').collect();
        let at = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let plan_round_2: Vec<&str> = lines
            .iter()
            .find(|l| l.starts_with("2,get,64,tikv-plan unary,"))
            .unwrap()
            .split(',')
            .collect();
        assert_eq!(plan_round_2[at("ops_per_s_vs_bare")], "0.8000");
        assert_eq!(plan_round_2[at("ops_per_s_vs_floor")], "0.7500");
        assert_eq!(plan_round_2[at("ops_per_s_vs_tikv_client")], "");
        let bare_round_1: Vec<&str> = lines
            .iter()
            .find(|l| l.starts_with("1,get,64,bare tonic,"))
            .unwrap()
            .split(',')
            .collect();
        assert_eq!(bare_round_1[at("ops_per_s_vs_bare")], "");
        assert_eq!(bare_round_1[at("ops_per_s")], "1000.0");
    }

    #[test]
    fn failover_lines_carry_the_trial_result() {
        let run = Failover {
            outcome: Outcome::Finished {
                took: Duration::from_micros(1500),
                detail: String::new(),
            },
            reads: vec![
                Read {
                    since_fault: -0.002,
                    latency: Duration::from_micros(300),
                    outcome: ReadOutcome::Ok,
                    error: String::new(),
                },
                Read {
                    since_fault: 0.0,
                    latency: Duration::from_micros(1500),
                    outcome: ReadOutcome::Error,
                    error: "refused, then reset".to_owned(),
                },
            ],
        };
        let text = failover(&[(Kind::PlanUnary, vec![run])]);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[1], "tikv-plan unary,1,1,-2.000,0.300,ok,1.500,");
        assert_eq!(
            lines[2],
            "tikv-plan unary,1,2,0.000,1.500,error,1.500,\"refused, then reset\""
        );
    }
}
