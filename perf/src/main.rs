//! Side-by-side benchmark: tikv-plan (batched and unary), a bare tonic
//! call and tikv-client 0.4.0, against one
//! `tikv-sim` child process (3 stores, 8 Regions, 16 B keys, 100 B values).
//!
//! ```text
//! tikv-plan-perf --sim PATH/TO/tikv-sim [--quick] [--rounds N] [--window-ms MS]
//!                [--only throughput|faults|failover|dead-store|cut-off|contention|replicas|slow-store|week]
//!                [--label TEXT] [--clients LIST] [--ops LIST] [--tasks LIST] [--csv-dir DIR]
//! ```
//!
//! Prints markdown tables on stdout (progress on stderr); with `--csv-dir`
//! also writes the figures as CSV files there (see `csv.rs`). `perf/run.sh`
//! builds everything in release and runs it; see `perf/README.md`.

mod bank;
mod clients;
mod contention;
mod count;
mod csv;
mod cutoff;
mod faults;
mod floor;
mod replicas;
mod report;
mod sim;
mod slow_store;
mod stats;
mod week;
mod workload;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clients::{Client, Kind};
use faults::{DeadStore, Failover};
use report::Cell;
use sim::{Control, Sim};
use workload::{Layout, Op, Sample};

/// Concurrent tasks of the closed loop.
const TASKS: [usize; 2] = [1, 64];

/// What to run and for how long.
#[derive(Debug, Clone)]
struct Plan {
    sim: PathBuf,
    quick: bool,
    rounds: usize,
    window: Duration,
    throughput: bool,
    failover: bool,
    dead_store: bool,
    /// The client cut off from a live leader's store: first read and
    /// write, and throughput through a proxy.
    cut_off: bool,
    /// Deadlock trials and hot rows (`--only contention`; not in the
    /// default run).
    contention: bool,
    /// Reads spread over the replicas and stale reads against a slow
    /// leader (`--only replicas`; not in the default run).
    replicas: bool,
    /// Follower reads beside a slow store, with and without the slow-store
    /// feedback (`--only slow-store`, and part of `--only replicas`).
    slow_store: bool,
    /// A rolling restart and a crash (`--only week`, `week.rs`; not in the
    /// default run).
    week: bool,
    /// Worker processes killed mid-transaction (`--only killed-bank`; not
    /// in the default run).
    killed_bank: bool,
    /// How long each client's bank runs (`--bank-seconds`).
    bank_duration: Duration,
    /// The seed of the kills and the workers' choices (`--seed`).
    seed: u64,
    failover_trials: usize,
    failover_cap: Duration,
    /// The cap of a cut-off trial.
    cut_off_cap: Duration,
    dead_store_trials: usize,
    dead_store_regions: usize,
    dead_store_cap: Duration,
    label: String,
    /// Only these clients (`--clients`), else all this build has.
    clients: Option<Vec<Kind>>,
    /// Only these operations (`--ops`), else all.
    ops: Vec<Op>,
    /// Only these task counts (`--tasks`), else 1 and 64.
    tasks: Vec<usize>,
    /// Where to write the CSV files (`--csv-dir`), if anywhere.
    csv_dir: Option<PathBuf>,
    /// `--only count`: this many operations per client, op and task count
    /// (`--count`), for instruction counts (count.rs).
    count: Option<u64>,
}

const USAGE: &str = "usage: tikv-plan-perf --sim PATH [--quick] [--rounds N] [--window-ms MS] \
[--only throughput|faults|failover|dead-store|cut-off|contention|replicas|slow-store|week|killed-bank|count] \
[--label TEXT] [--clients plan,unary,unary-tonic,floor,bare,upstream] [--ops get,put,batch_get,scan] \
[--tasks 1,64] [--csv-dir DIR] [--bank-seconds N] [--seed N] [--count N]";

/// The values `--only` takes.
const ONLY: [&str; 11] = [
    "throughput",
    "faults",
    "failover",
    "dead-store",
    "cut-off",
    "contention",
    "replicas",
    "slow-store",
    "week",
    "killed-bank",
    "count",
];

fn parse_args(args: impl Iterator<Item = String>) -> Result<Plan, String> {
    let mut sim = None;
    let mut quick = false;
    let mut rounds = None;
    let mut window = None;
    let mut only = None;
    let mut label = String::new();
    let mut clients = None;
    let mut ops = Op::ALL.to_vec();
    let mut tasks = TASKS.to_vec();
    let mut csv_dir = None;
    let mut bank_seconds = None;
    let mut seed = 1;
    let mut count = 20_000;
    let mut args = args.peekable();
    while let Some(flag) = args.next() {
        if flag == "--quick" {
            quick = true;
            continue;
        }
        if flag == "--help" || flag == "-h" {
            return Err(String::new());
        }
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let number = || -> Result<u64, String> {
            value
                .parse()
                .map_err(|_| format!("{flag} must be a number, not {value:?}"))
        };
        match flag.as_str() {
            "--sim" => sim = Some(PathBuf::from(&value)),
            "--rounds" => rounds = Some(number()?.max(1) as usize),
            "--window-ms" => window = Some(Duration::from_millis(number()?.max(10))),
            "--only" if ONLY.contains(&value.as_str()) => only = Some(value),
            "--only" => return Err(format!("--only must be one of {ONLY:?}, not {value:?}")),
            "--label" => label = value,
            "--csv-dir" => csv_dir = Some(PathBuf::from(&value)),
            "--bank-seconds" => bank_seconds = Some(number()?.max(1)),
            "--seed" => seed = number()?,
            "--count" => count = number()?.max(1),
            "--clients" => clients = Some(list(&value, Kind::parse)?),
            "--ops" => ops = list(&value, Op::parse)?,
            "--tasks" => {
                tasks = list(&value, |t| t.parse::<usize>().ok().filter(|n| *n > 0))?;
            }
            other => return Err(format!("unknown option {other}")),
        }
    }
    let sim = sim.ok_or("--sim PATH (the tikv-sim binary) is required")?;
    Ok(Plan {
        sim,
        quick,
        rounds: rounds.unwrap_or(if quick { 2 } else { 5 }),
        window: window.unwrap_or(if quick {
            Duration::from_millis(300)
        } else {
            Duration::from_secs(2)
        }),
        throughput: only.is_none() || only.as_deref() == Some("throughput"),
        failover: matches!(only.as_deref(), None | Some("faults") | Some("failover")),
        dead_store: matches!(only.as_deref(), None | Some("faults") | Some("dead-store")),
        cut_off: matches!(only.as_deref(), None | Some("faults") | Some("cut-off")),
        contention: only.as_deref() == Some("contention"),
        replicas: only.as_deref() == Some("replicas"),
        slow_store: matches!(only.as_deref(), Some("replicas") | Some("slow-store")),
        week: only.as_deref() == Some("week"),
        killed_bank: only.as_deref() == Some("killed-bank"),
        bank_duration: Duration::from_secs(bank_seconds.unwrap_or(if quick { 10 } else { 60 })),
        seed,
        failover_trials: if quick { 1 } else { 3 },
        failover_cap: Duration::from_secs(if quick { 5 } else { 30 }),
        cut_off_cap: Duration::from_secs(if quick { 5 } else { 10 }),
        dead_store_trials: if quick { 1 } else { 2 },
        dead_store_regions: if quick { 100 } else { 1000 },
        dead_store_cap: Duration::from_secs(if quick { 10 } else { 60 }),
        label,
        clients,
        ops,
        tasks,
        csv_dir,
        count: (only.as_deref() == Some("count")).then_some(count),
    })
}

/// A comma-separated list, each item parsed by `item`.
fn list<T>(value: &str, item: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    value
        .split(',')
        .map(|v| item(v.trim()).ok_or_else(|| format!("{v:?} is not a known value")))
        .collect()
}

fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, m)| m.trim().to_owned())
        })
        .unwrap_or_else(|| "unknown CPU".to_owned());
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(0);
    format!("{cores} cores, {model}")
}

/// The closed-loop comparison: every client on one sim, rounds alternated.
async fn throughput(plan: &Plan, kinds: &[Kind]) -> Result<BTreeMap<Cell, Vec<Sample>>, String> {
    let sim = Sim::start(&plan.sim, 8)?;
    let mut control = Control::connect(&sim.control).await?;
    let regions = control.regions().await?;
    let layout = Arc::new(Layout::new(regions.clone())?);
    eprintln!(
        "loading {} keys over {} Regions ...",
        layout.keys.iter().map(Vec::len).sum::<usize>(),
        regions.len()
    );
    let loader = clients::loader(&sim.pd).await?;
    clients::load(&loader, layout.pairs(), 512).await?;
    if plan.ops.iter().any(|op| op.is_txn()) {
        clients::load_txn(&loader, layout.pairs(), 256).await?;
    }
    drop(loader);

    let mut connected = Vec::new();
    for &kind in kinds {
        connected.push((
            kind,
            Client::connect(kind, &sim.pd, &mut control, &regions).await?,
        ));
    }
    // Warm-up: caches filled, connections open, allocators grown.
    let warm = plan.window.min(Duration::from_millis(500));
    for (kind, client) in &connected {
        for &op in &plan.ops {
            if kind.is_hand_routed() && op.is_txn() {
                continue;
            }
            let s = workload::closed_loop(client, &layout, op, 64, warm, &sim, 0).await;
            if s.ops == 0 {
                return Err(format!(
                    "{} cannot run {}: {}",
                    kind.label(),
                    op.label(),
                    s.first_error.unwrap_or_default()
                ));
            }
        }
    }

    let mut results: BTreeMap<Cell, Vec<Sample>> = BTreeMap::new();
    for round in 0..plan.rounds {
        let mut order = connected.clone();
        let len = order.len();
        order.rotate_left(round % len);
        eprintln!(
            "round {}/{}: {}",
            round + 1,
            plan.rounds,
            order
                .iter()
                .map(|(k, _)| k.label())
                .collect::<Vec<_>>()
                .join(", ")
        );
        for &op in &plan.ops {
            for &tasks in &plan.tasks {
                for (kind, client) in &order {
                    if kind.is_hand_routed() && op.is_txn() {
                        continue;
                    }
                    let seed = (round * 100 + tasks) as u64;
                    let sample =
                        workload::closed_loop(client, &layout, op, tasks, plan.window, &sim, seed)
                            .await;
                    results
                        .entry(Cell {
                            op,
                            tasks,
                            kind: *kind,
                        })
                        .or_default()
                        .push(sample);
                }
            }
        }
    }
    Ok(results)
}

/// The failover and dead-store comparisons; each table is printed (and
/// its CSV file written) as soon as it is complete.
async fn faults(plan: &Plan, kinds: &[Kind], info: &str) -> Result<(), String> {
    // The bare call does no routing: it has nothing to fail over to.
    let routed: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|k| !k.is_hand_routed())
        .collect();
    let mut failover: Vec<(Kind, Vec<Failover>)> = Vec::new();
    for &kind in routed.iter().filter(|_| plan.failover) {
        let mut trials = Vec::new();
        for trial in 0..plan.failover_trials {
            eprintln!("failover: {} trial {}", kind.label(), trial + 1);
            let fault = faults::Fault::Down;
            trials.push(faults::failover(&plan.sim, kind, plan.failover_cap, fault).await?);
        }
        failover.push((kind, trials));
    }
    if plan.failover {
        let outcomes: Vec<_> = failover
            .iter()
            .map(|(k, t)| (*k, t.iter().map(|f| f.outcome.clone()).collect()))
            .collect();
        println!("{}", report::failover_table(&outcomes, plan.failover_cap));
        if let Some(dir) = &plan.csv_dir {
            csv::write_family(dir, "failover", &csv::failover(&failover), info)?;
        }
    }
    if !plan.dead_store {
        return Ok(());
    }
    let mut dead: Vec<(Kind, Vec<DeadStore>)> = Vec::new();
    for &kind in &routed {
        let mut trials = Vec::new();
        for trial in 0..plan.dead_store_trials {
            eprintln!("dead store: {} trial {}", kind.label(), trial + 1);
            trials.push(
                faults::dead_store(
                    &plan.sim,
                    kind,
                    plan.dead_store_regions,
                    64,
                    plan.dead_store_cap,
                )
                .await?,
            );
        }
        dead.push((kind, trials));
    }
    let outcomes: Vec<_> = dead
        .iter()
        .map(|(k, t)| (*k, t.iter().map(|d| d.outcome.clone()).collect()))
        .collect();
    println!(
        "{}",
        report::dead_store_table(&outcomes, plan.dead_store_regions, plan.dead_store_cap)
    );
    if let Some(dir) = &plan.csv_dir {
        csv::write_family(
            dir,
            "dead-store",
            &csv::dead_store(&dead, plan.dead_store_regions),
            info,
        )?;
    }
    Ok(())
}

/// The client cut off from a live leader's store (`cut-clients`, both
/// modes): the time to the first successful read (timed like failover,
/// CSV family `cut-off-MODE`) and write, then the throughput of gets and
/// puts through a proxy against the direct path's.
async fn cut_off(plan: &Plan, kinds: &[Kind], info: &str) -> Result<(), String> {
    let routed: Vec<Kind> = kinds
        .iter()
        .copied()
        .filter(|k| matches!(k, Kind::PlanBatched | Kind::PlanUnary | Kind::Upstream))
        .collect();
    let cap = plan.cut_off_cap;
    for mode in ["refuse", "drop"] {
        let mut reads: Vec<(Kind, Vec<Failover>)> = Vec::new();
        let mut writes: Vec<(Kind, Vec<faults::Outcome>)> = Vec::new();
        for &kind in &routed {
            let (mut r, mut w) = (Vec::new(), Vec::new());
            for trial in 0..plan.failover_trials {
                eprintln!("cut off ({mode}): {} trial {}", kind.label(), trial + 1);
                let fault = faults::Fault::CutClients(mode);
                r.push(faults::failover(&plan.sim, kind, cap, fault).await?);
                w.push(cutoff::first_write(&plan.sim, kind, cap, mode).await?);
            }
            reads.push((kind, r));
            writes.push((kind, w));
        }
        let outcomes: Vec<_> = reads
            .iter()
            .map(|(k, t)| (*k, t.iter().map(|f| f.outcome.clone()).collect()))
            .collect();
        println!("{}", report::cut_off_tables(&outcomes, &writes, mode, cap));
        if let Some(dir) = &plan.csv_dir {
            csv::write_family(
                dir,
                &format!("cut-off-{mode}"),
                &csv::failover(&reads),
                info,
            )?;
        }
    }
    for &kind in routed.iter().filter(|k| **k != Kind::Upstream) {
        eprintln!("through a proxy: {}", kind.label());
        let rounds = plan.rounds.min(3);
        let t = cutoff::proxy_throughput(&plan.sim, kind, 64, rounds, plan.window).await?;
        println!("{}", report::proxy_table(kind, &t, plan.window));
    }
    Ok(())
}

/// The run's label, machine and settings, for the `-run.csv` files.
fn run_info(plan: &Plan, machine: &str, kinds: &[Kind]) -> String {
    let families: Vec<&str> = [
        (plan.throughput, "throughput"),
        (plan.failover, "failover"),
        (plan.dead_store, "dead-store"),
        (plan.cut_off, "cut-off-refuse cut-off-drop"),
    ]
    .iter()
    .filter(|(on, _)| *on)
    .map(|(_, name)| *name)
    .collect();
    let joined = |items: Vec<String>| items.join(" ");
    csv::run_info(&[
        ("label", plan.label.clone()),
        ("machine", machine.to_owned()),
        ("quick", plan.quick.to_string()),
        ("families", families.join(" ")),
        (
            "clients",
            joined(kinds.iter().map(|k| k.label().to_owned()).collect()),
        ),
        ("rounds", plan.rounds.to_string()),
        ("window_ms", plan.window.as_millis().to_string()),
        (
            "ops",
            joined(plan.ops.iter().map(|o| o.name().to_owned()).collect()),
        ),
        (
            "tasks",
            joined(plan.tasks.iter().map(usize::to_string).collect()),
        ),
        ("failover_trials", plan.failover_trials.to_string()),
        ("failover_cap_s", plan.failover_cap.as_secs().to_string()),
        ("cut_off_cap_s", plan.cut_off_cap.as_secs().to_string()),
        ("dead_store_trials", plan.dead_store_trials.to_string()),
        ("dead_store_regions", plan.dead_store_regions.to_string()),
        (
            "dead_store_cap_s",
            plan.dead_store_cap.as_secs().to_string(),
        ),
    ])
}

async fn run(plan: Plan) -> Result<(), String> {
    let kinds = match &plan.clients {
        Some(kinds) => kinds.clone(),
        None => Kind::all(),
    };
    let machine = machine();
    if plan.killed_bank {
        // No closed loop, no rounds: the bank's own table says what ran.
        println!("{}\n\nMachine: {machine}.\n", plan.label);
    } else {
        println!(
            "{}",
            report::header(&plan.label, &machine, plan.quick, plan.rounds, plan.window)
        );
    }
    let info = run_info(&plan, &machine, &kinds);
    if plan.throughput {
        let results = throughput(&plan, &kinds).await?;
        println!("{}", report::throughput_table(&results, &kinds));
        if let Some(dir) = &plan.csv_dir {
            csv::write_family(dir, "throughput", &csv::throughput(&results, &kinds), &info)?;
        }
    }
    if plan.failover || plan.dead_store {
        faults(&plan, &kinds, &info).await?;
    }
    if plan.cut_off {
        cut_off(&plan, &kinds, &info).await?;
    }
    if plan.replicas {
        let rounds = plan.rounds.min(3);
        let spread = replicas::spread(&plan.sim, 64, rounds, plan.window).await?;
        println!("{}", replicas::spread_table(&spread, 64, plan.window));
        let reads = if plan.quick { 20 } else { 200 };
        let slow = Duration::from_millis(20);
        let (on_leader, stale) = replicas::stale_latency(&plan.sim, reads, slow).await?;
        println!("{}", replicas::stale_table(&on_leader, &stale, slow));
    }
    if plan.slow_store {
        let slow = Duration::from_millis(20);
        let rounds = plan.rounds.min(3);
        let cells = slow_store::run(&plan.sim, 64, rounds, plan.window, slow).await?;
        println!("{}", slow_store::table(&cells, 64, plan.window, slow));
    }
    if plan.week {
        week::run(
            &plan.sim,
            &kinds,
            plan.quick,
            plan.csv_dir.as_deref(),
            &info,
        )
        .await?;
    }
    if plan.killed_bank {
        // tikv-plan's default transport and tikv-client unless named.
        let bank_kinds = match &plan.clients {
            Some(kinds) => kinds.clone(),
            None => vec![Kind::PlanBatched, Kind::Upstream],
        };
        let bank = bank::BankPlan {
            duration: plan.bank_duration,
            seed: plan.seed,
        };
        let info = csv::run_info(&[
            ("label", plan.label.clone()),
            ("machine", machine.clone()),
            ("seconds", plan.bank_duration.as_secs().to_string()),
            ("seed", plan.seed.to_string()),
        ]);
        bank::run(
            &plan.sim,
            &bank_kinds,
            &bank,
            plan.csv_dir.as_deref(),
            &info,
        )
        .await?;
    }
    if plan.contention {
        let trials = if plan.quick { 3 } else { 20 };
        let window = plan.window * 5;
        contention::run(&plan.sim, &kinds, trials, window).await?;
    }
    Ok(())
}

fn main() -> ExitCode {
    // A worker process of the killed-bank run (started by this program).
    if std::env::args().nth(1).as_deref() == Some("bank-worker") {
        return bank::worker_main(std::env::args().skip(2));
    }
    let plan = match parse_args(std::env::args().skip(1)) {
        Ok(p) => p,
        Err(message) => {
            if !message.is_empty() {
                eprintln!("tikv-plan-perf: {message}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Some(count) = plan.count {
        let kinds = plan.clients.clone().unwrap_or_else(Kind::all);
        let result = count::run(&count::CountPlan {
            sim: &plan.sim,
            kinds: &kinds,
            ops: &plan.ops,
            tasks: &plan.tasks,
            count,
        });
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tikv-plan-perf: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tikv-plan-perf: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(run(plan));
    // Clients of a trial that hit its cap may still hold tasks; do not wait.
    runtime.shutdown_background();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tikv-plan-perf: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> impl Iterator<Item = String> + '_ {
        s.split_whitespace().map(str::to_owned)
    }

    #[test]
    fn quick_mode_shrinks_everything() {
        let full = parse_args(args("--sim x")).unwrap();
        let quick = parse_args(args("--sim x --quick")).unwrap();
        assert!(quick.rounds < full.rounds && quick.window < full.window);
        assert_eq!(full.dead_store_regions, 1000);
        assert_eq!(full.dead_store_cap, Duration::from_secs(60));
        assert!(parse_args(args("--quick")).is_err(), "--sim is required");
        assert!(parse_args(args("--sim x --only bogus")).is_err());
        let only = parse_args(args("--sim x --only faults --rounds 3")).unwrap();
        assert!(!only.throughput && only.failover && only.dead_store && only.rounds == 3);
        let dead = parse_args(args("--sim x --only dead-store")).unwrap();
        assert!(!dead.throughput && !dead.failover && dead.dead_store);
        assert!(dead.csv_dir.is_none());
        let csv = parse_args(args("--sim x --csv-dir out")).unwrap();
        assert_eq!(csv.csv_dir, Some(PathBuf::from("out")));
    }
}
