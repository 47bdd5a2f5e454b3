//! Markdown tables: medians over rounds, and medians of per-round ratios.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

pub use crate::stats::median;

use crate::clients::Kind;
use crate::faults::Outcome;
use crate::workload::{Op, Sample, KEY_LEN, VALUE_LEN};

/// One cell of the closed-loop comparison.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cell {
    /// The operation.
    pub op: Op,
    /// Concurrent tasks.
    pub tasks: usize,
    /// The client.
    pub kind: Kind,
}

/// The four metrics compared, as functions of a sample: ops/s, p50 (µs),
/// p99 (µs), client CPU per operation (µs).
pub const METRICS: [fn(&Sample) -> f64; 4] = [
    Sample::throughput,
    |s| s.p50.as_secs_f64() * 1e6,
    |s| s.p99.as_secs_f64() * 1e6,
    Sample::cpu_per_op,
];

/// Medians over rounds of `this / reference` for each metric, rounds paired
/// by index.
fn ratios(this: &[Sample], reference: &[Sample]) -> [f64; 4] {
    METRICS.map(|metric| {
        let per_round: Vec<f64> = this
            .iter()
            .zip(reference)
            .map(|(a, b)| metric(a) / metric(b))
            .collect();
        median(&per_round)
    })
}

fn ratio_text(r: [f64; 4]) -> String {
    r.iter()
        .map(|x| {
            if x.is_finite() {
                format!("{x:.2}")
            } else {
                "?".to_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

/// The lines above the tables: when, where, what.
pub fn header(label: &str, machine: &str, quick: bool, rounds: usize, window: Duration) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### Side by side{}",
        if quick {
            " (quick smoke run: numbers are not meaningful)"
        } else {
            ""
        }
    );
    let _ = writeln!(out);
    if !label.is_empty() {
        let _ = writeln!(out, "Run: {label}. ");
    }
    let _ = writeln!(
        out,
        "Machine: {machine}. One `tikv-sim` child process (3 stores, 8 Regions), {KEY_LEN} B keys, \
         {VALUE_LEN} B values, closed loop; {rounds} round(s) of {} ms per client and cell, the \
         client order rotated each round.",
        window.as_millis()
    );
    out
}

fn fmt_outcome(o: &Outcome) -> String {
    match o {
        Outcome::Finished { took, .. } => fmt_duration(*took),
        Outcome::NotFinished { cap, .. } => format!("not finished in {} s", cap.as_secs()),
    }
}

fn fmt_duration(d: Duration) -> String {
    if d < Duration::from_secs(1) {
        format!("{:.1} ms", d.as_secs_f64() * 1e3)
    } else {
        format!("{:.2} s", d.as_secs_f64())
    }
}

/// The upper median of the outcomes, an unfinished trial counting as
/// longer than any finished one (so two trials with one unfinished read
/// "not finished").
fn median_outcome(outcomes: &[Outcome]) -> Option<&Outcome> {
    let mut sorted: Vec<&Outcome> = outcomes.iter().collect();
    sorted.sort_by_key(|o| match o {
        Outcome::Finished { took, .. } => *took,
        Outcome::NotFinished { .. } => Duration::MAX,
    });
    sorted.get(sorted.len() / 2).copied()
}

/// The closed-loop table.
pub fn throughput_table(results: &BTreeMap<Cell, Vec<Sample>>, kinds: &[Kind]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| op | tasks | client | ops/s | p50 (µs) | p99 (µs) | client CPU (µs/op) | sim CPU (µs/op) \
         | ÷ BatchCommands floor: ops/s · p50 · p99 · CPU | ÷ bare tonic: ops/s · p50 · p99 · CPU \
         | ÷ tikv-client: ops/s · p50 · p99 · CPU |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    let mut notes = Vec::new();
    for op in Op::ALL {
        for tasks in crate::TASKS {
            let get = |kind: Kind| results.get(&Cell { op, tasks, kind });
            for &kind in kinds {
                let Some(samples) = get(kind) else { continue };
                let med =
                    |f: fn(&Sample) -> f64| median(&samples.iter().map(f).collect::<Vec<_>>());
                let versus = |reference: Kind| match get(reference) {
                    Some(r) if reference != kind => ratio_text(ratios(samples, r)),
                    _ => "—".to_owned(),
                };
                let _ = writeln!(
                    out,
                    "| {} | {tasks} | {} | {:.0} | {:.0} | {:.0} | {:.1} | {:.1} | {} | {} | {} |",
                    op.label(),
                    kind.label(),
                    med(METRICS[0]),
                    med(METRICS[1]),
                    med(METRICS[2]),
                    med(METRICS[3]),
                    med(Sample::sim_cpu_per_op),
                    versus(Kind::Floor),
                    versus(Kind::Bare),
                    versus(Kind::Upstream),
                );
                let errors: u64 = samples.iter().map(|s| s.errors).sum();
                if errors > 0 {
                    let first = samples
                        .iter()
                        .find_map(|s| s.first_error.clone())
                        .unwrap_or_default();
                    notes.push(format!(
                        "- {} {} ({tasks} tasks): {errors} failed operations over all rounds; first: {first}",
                        kind.label(),
                        op.label()
                    ));
                }
            }
        }
    }
    let _ = writeln!(out);
    let _ = writeln!(
        out,
        "Each figure is the median over rounds; each ratio is the median of the per-round ratios \
         (this client's figure over the reference's in the same round). Ratios above 1 mean more \
         ops/s, or more latency and CPU, than the reference. Client CPU is `getrusage(RUSAGE_SELF)` \
         of the benchmark process over the run divided by the operations; sim CPU is the sim \
         process's, from `/proc/PID/stat` (10 ms ticks). The BatchCommands floor is one bare \
         `BatchCommands` stream per store, batches of up to 128 taken from an unbounded queue, \
         `Context` filled by hand: no deadline, retry, routing or metrics."
    );
    if !notes.is_empty() {
        let _ = writeln!(out);
        for n in notes {
            let _ = writeln!(out, "{n}");
        }
    }
    out
}

fn outcomes_table(title: &str, column: &str, rows: &[(Kind, Vec<Outcome>)]) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "{title}");
    let _ = writeln!(out);
    let _ = writeln!(out, "| client | {column} (median) | each trial |");
    let _ = writeln!(out, "|---|---|---|");
    let mut notes = Vec::new();
    for (kind, outcomes) in rows {
        let median = median_outcome(outcomes)
            .map(fmt_outcome)
            .unwrap_or_default();
        let each = outcomes
            .iter()
            .map(fmt_outcome)
            .collect::<Vec<_>>()
            .join(" / ");
        let _ = writeln!(out, "| {} | {median} | {each} |", kind.label());
        for (trial, o) in outcomes.iter().enumerate() {
            let text = match o {
                Outcome::Finished { detail, .. } if detail.is_empty() => continue,
                Outcome::Finished { detail, .. } => detail.clone(),
                Outcome::NotFinished {
                    progress, errors, ..
                } => format!("{progress}; {errors}"),
            };
            notes.push(format!("- {} trial {}: {text}", kind.label(), trial + 1));
        }
    }
    if !notes.is_empty() {
        let _ = writeln!(out);
        for n in notes {
            let _ = writeln!(out, "{n}");
        }
    }
    out
}

/// The failover table.
pub fn failover_table(rows: &[(Kind, Vec<Outcome>)], cap: Duration) -> String {
    outcomes_table(
        &format!(
            "Failover: a key's Region leader moves to another voter and the old leader's store goes \
             down (`down`), PD still naming the old leader; the client had read the key before. \
             Time from the store going down to the first successful read (reads retried at once, \
             cap {} s).",
            cap.as_secs()
        ),
        "time to first success",
        rows,
    )
}

/// The dead-store table.
pub fn dead_store_table(rows: &[(Kind, Vec<Outcome>)], regions: usize, cap: Duration) -> String {
    outcomes_table(
        &format!(
            "Dead store: {regions} Regions led from one store; their leaders move to other voters, \
             PD still naming the old ones, and the store hangs (`hang STORE connect`: open \
             connections stop moving bytes, new connects hang). The client had read every key \
             before. Time until one key of each Region is read by 64 tasks (cap {} s).",
            cap.as_secs()
        ),
        &format!("time until all {regions} keys are read"),
        rows,
    )
}

/// The cut-off tables: the first read and the first write after the
/// client is cut off from the store leading the key's Region.
pub fn cut_off_tables(
    reads: &[(Kind, Vec<Outcome>)],
    writes: &[(Kind, Vec<Outcome>)],
    mode: &str,
    cap: Duration,
) -> String {
    let what = match mode {
        "drop" => "its connections stop moving bytes",
        _ => "its connections are reset",
    };
    let title = |op: &str| {
        format!(
            "Cut off (`cut-clients STORE {mode}`: {what}): the client alone cannot reach the store \
             leading a key's Region, which keeps leading; the other stores still reach it. The \
             client had read the key before. Time from the cut to the first successful {op} \
             (retried at once, cap {} s).",
            cap.as_secs()
        )
    };
    format!(
        "{}\n{}",
        outcomes_table(&title("read"), "time to first read", reads),
        outcomes_table(&title("write"), "time to first write", writes)
    )
}

/// Gets and puts through a proxy against the direct path's, in one run.
pub fn proxy_table(kind: Kind, t: &crate::cutoff::ProxyThroughput, each: Duration) -> String {
    let (get, put) = t.ratios();
    let rates = |f: fn(&crate::cutoff::Rates) -> f64, rounds: &[crate::cutoff::Rates]| {
        rounds
            .iter()
            .map(|r| format!("{:.0}", f(r)))
            .collect::<Vec<_>>()
            .join(" / ")
    };
    format!(
        "Through a proxy ({}): 64 tasks, {} s per cell, on keys of the Regions led from the store \
         the client is then cut off from; rounds alternate direct and through a proxy.\n\n\
         | op | direct ops/s (each round) | through a proxy ops/s (each round) | ratio (median of rounds) |\n\
         |---|---|---|---|\n\
         | get | {} | {} | {get:.2} |\n\
         | put | {} | {} | {put:.2} |\n\n\
         Calls the stores forwarded: {}.\n",
        kind.label(),
        each.as_secs_f64(),
        rates(|r| r.get, &t.direct),
        rates(|r| r.get, &t.proxied),
        rates(|r| r.put, &t.direct),
        rates(|r| r.put, &t.proxied),
        t.forwarded
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(ops: u64, p50_us: u64) -> Sample {
        Sample {
            ops,
            elapsed: Duration::from_secs(1),
            p50: Duration::from_micros(p50_us),
            p99: Duration::from_micros(p50_us * 2),
            cpu: Duration::from_micros(ops * 10),
            ..Default::default()
        }
    }

    #[test]
    fn ratios_are_medians_of_per_round_ratios() {
        // Round ratios of ops/s: 0.5, 2.0, 1.0 -> median 1.0; the ratio of
        // medians would be 1000/1000 too, but p50 shows the difference:
        // per round 1.0, 4.0, 0.5 -> 1.0, ratio of medians 200/100 = 2.0.
        let this = [sample(500, 100), sample(2000, 400), sample(1000, 100)];
        let base = [sample(1000, 100), sample(1000, 100), sample(1000, 200)];
        let r = ratios(&this, &base);
        assert!((r[0] - 1.0).abs() < 1e-9, "{r:?}");
        assert!((r[1] - 1.0).abs() < 1e-9, "{r:?}");
        assert!((r[3] - 1.0).abs() < 1e-9, "{r:?}");
    }

    #[test]
    fn an_unfinished_trial_dominates_an_even_median() {
        let cap = Duration::from_secs(60);
        let not = Outcome::NotFinished {
            cap,
            progress: String::new(),
            errors: String::new(),
        };
        let two = [
            Outcome::Finished {
                took: Duration::from_secs(1),
                detail: String::new(),
            },
            not.clone(),
        ];
        assert_eq!(
            fmt_outcome(median_outcome(&two).unwrap()),
            "not finished in 60 s"
        );
        let three = [
            Outcome::Finished {
                took: Duration::from_millis(3),
                detail: String::new(),
            },
            not,
            Outcome::Finished {
                took: Duration::from_millis(2),
                detail: String::new(),
            },
        ];
        assert_eq!(fmt_outcome(median_outcome(&three).unwrap()), "3.0 ms");
        assert_eq!(median(&[3.0, 1.0, 2.0, 10.0]), 2.5);
    }
}
