//! Runs one chaos run and exits 1 when anything is wrong.
//!
//! ```sh
//! cargo run --release -p tikv-plan-chaos -- raw --seed 1 --seconds 120
//! cargo run --release -p tikv-plan-chaos -- txn --seed 1 --seconds 120
//! ```
//!
//! `raw` (the default when the first argument is an option): concurrent raw
//! clients while every fault is injected and healed, then a
//! linearizability check. Options: `--seed N`, `--seconds N`, `--tasks N`,
//! `--keys N`, `--hot-keys N`, `--at-least-once` (clients re-send writes;
//! expect violations), `--max-states N` (the checker's search budget per
//! key; a key that needs more is reported undecided), `--batched` or
//! `--unary` (the transport; by default `TIKV_PLAN_RPC_MODE`'s, else
//! batched), `--dump FILE` (the history of every key that is not clean, one
//! operation a line), `--timeline FILE` (the whole run as CSV: every
//! fault with its start and end, every operation with its start,
//! duration, kind and outcome; see `ChaosReport::timeline_csv`),
//! `--replica-reads` (a third of the tasks read from a follower first, a
//! third from any replica first, and stores lag), `--naive-replica-reads`
//! (the simulator serves them without read index under a 300 ms lag:
//! expect violations).
//!
//! `txn`: list-append, bank, long pessimistic and hot (deadlock-prone)
//! pessimistic transactions while every fault (TSO jumps and dropped
//! transactional answers included) is injected and healed, then a check of
//! the history for lost updates, aborted or intermediate reads, cycles and
//! broken invariants. Options: `--seed N`, `--seconds N`, `--tasks N` (list
//! and bank tasks), `--long-tasks N`, `--hot-tasks N` (pessimistic
//! transfers over three accounts, locked in random order), `--batched` or
//! `--unary`, `--dump FILE` (the whole history, one
//! transaction a line, then every fault with its window), `--replica-reads`
//! (read-only snapshots are often stale reads from followers or any
//! replica, 0 to 2 s back, and stores lag).
//!
//! `dst`: one deterministic simulation run (see `tikv_plan_chaos::dst`):
//! the raw and the transactional workloads, the simulated cluster and
//! seeded network and cluster faults inside turmoil, on virtual time. It
//! prints the histories, one operation or transaction a line, then the
//! verdict; the same seed prints the same on every run. On a violation it
//! also prints a trace of the records and faults around the first one.
//! Options: `--seed N`, `--seconds N` (simulated), `--workload
//! raw|txn|mixed` (mixed by default: both at once), `--tasks N` (raw
//! tasks), `--txn-tasks N`, `--keys N`, `--resend-writes` (the clients
//! re-send writes that may have been delivered, `Config::
//! at_least_once_writes`, while the check still expects at most once: a
//! deliberate replay-safety bug the simulation must find), `--shrink` (on
//! a violation, drop faults one at a time while the run still violates,
//! then print the shorter run's trace and the options that replay it),
//! `--only-net 0,3` and `--only-state 5` (apply only these faults of the
//! seed's schedule, by the indices the fault log prints, `n3` and `s5`),
//! `--replica-reads` (both workloads' reads leave the leader as above).
//! `TIKV_PLAN_CHAOS_LOG=debug` (or `info`, `warn`, `trace`) prints the
//! library's log of the run, stamped with simulated time.
//!
//! `dst-explore`: many seeds, on every core. Options: `--seeds N` (how
//! many, 1000 by default), `--from N` (the first seed), and those of
//! `dst` but `--seed`. It prints each violating seed with its counts, then
//! how many seeds ran, how many violated, and seeds per second.
//!
//! Every mode runs PD's schedulers for the whole run (about four moves a
//! second: leader transfers, merges, splits and peer moves, drawn evenly,
//! beside the faults); `--no-scheduler` turns them off.
//!
//! The last line of output is the counts.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tikv_plan::RpcMode;
use tikv_plan_chaos::dst::{DstConfig, DstReport, DstWorkload, SimLog};
use tikv_plan_chaos::txn::{describe_record, TxnChaosConfig};
use tikv_plan_chaos::ChaosConfig;

const USAGE: &str =
    "usage: tikv-plan-chaos [raw|txn|dst|dst-explore] [--seed N] [--seconds N] [--tasks N] ...; \
see the top of tikv-plan-chaos/src/main.rs";

fn fail(message: &str) -> ! {
    eprintln!("{message}\n{USAGE}");
    std::process::exit(2);
}

fn parse<T: std::str::FromStr>(flag: &str, value: Option<String>) -> T {
    match value.as_deref().map(str::parse) {
        Some(Ok(v)) => v,
        _ => fail(&format!("{flag} needs a number")),
    }
}

fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let suite = match args.first().map(String::as_str) {
        Some("raw") | Some("txn") | Some("dst") | Some("dst-explore") => args.remove(0),
        Some("--help") | Some("-h") => {
            println!("{USAGE}");
            return;
        }
        _ => "raw".to_owned(),
    };
    // The simulation runs its own runtimes, one per simulated host: it
    // must not run inside another.
    let clean = match suite.as_str() {
        "dst" => run_dst(args),
        "dst-explore" => explore(args),
        suite => {
            let runtime = match tokio::runtime::Runtime::new() {
                Ok(runtime) => runtime,
                Err(e) => fail(&format!("cannot start the runtime: {e}")),
            };
            if suite == "txn" {
                runtime.block_on(run_txn(args))
            } else {
                runtime.block_on(run_raw(args))
            }
        }
    };
    if !clean {
        std::process::exit(1);
    }
}

/// The options `dst` and `dst-explore` share; the rest go back.
fn dst_config(args: Vec<String>) -> (DstConfig, Vec<(String, Option<String>)>) {
    let mut config = DstConfig::default();
    let mut rest = Vec::new();
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => config.seed = parse(&arg, args.next()),
            "--seconds" => config.duration = Duration::from_secs(parse(&arg, args.next())),
            "--tasks" => config.tasks = parse(&arg, args.next()),
            "--txn-tasks" => config.txn_tasks = parse(&arg, args.next()),
            "--keys" => config.keys = parse(&arg, args.next()),
            "--workload" => {
                let name = args.next().unwrap_or_default();
                config.workload = DstWorkload::parse(&name).unwrap_or_else(|| {
                    fail(&format!("--workload takes raw, txn or mixed, not {name:?}"))
                });
            }
            "--resend-writes" => config.resend_undetermined_writes = true,
            "--replica-reads" => config.replica_reads = true,
            "--no-scheduler" => config.scheduler = None,
            "--only-net" => config.only_net_faults = Some(index_list(&arg, args.next())),
            "--only-state" => config.only_state_faults = Some(index_list(&arg, args.next())),
            "--shrink" => rest.push((arg, None)),
            "--seeds" | "--from" => {
                let value = args.next();
                rest.push((arg, value));
            }
            other => fail(&format!("unknown option {other}")),
        }
    }
    (config, rest)
}

/// A comma-separated list of fault indices (empty: none).
fn index_list(flag: &str, value: Option<String>) -> std::collections::BTreeSet<usize> {
    let Some(value) = value else {
        fail(&format!(
            "{flag} needs a list of fault indices, such as 0,3,7"
        ))
    };
    value
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.trim_start_matches(['n', 's'])
                .parse()
                .unwrap_or_else(|_| fail(&format!("{flag}: {s:?} is not a fault index")))
        })
        .collect()
}

fn run_dst(args: Vec<String>) -> bool {
    let (config, mut rest) = dst_config(args);
    let shrinking = rest.iter().any(|(flag, _)| flag == "--shrink");
    rest.retain(|(flag, _)| flag != "--shrink");
    if let Ok(name) = std::env::var("TIKV_PLAN_CHAOS_LOG") {
        match SimLog::level(&name) {
            Some(level) => {
                let _ = tracing::subscriber::set_global_default(SimLog::new(level));
            }
            None => fail(&format!(
                "TIKV_PLAN_CHAOS_LOG takes error, warn, info, debug or trace, not {name:?}"
            )),
        }
    }
    if let Some((flag, _)) = rest.first() {
        fail(&format!("{flag} is an option of dst-explore"));
    }
    if shrinking {
        return run_shrink(&config);
    }
    let report = match run_dst_seed(&config) {
        Ok(report) => report,
        Err(e) => fail(&format!("the simulation failed: {e}")),
    };
    print!("{}", report.history_text());
    for (start, end, what) in &report.fault_log {
        println!("fault [{start}..{end}µs] {what}");
    }
    if !report.is_clean() {
        print!("{}", report.trace());
    }
    println!("{}", report.summary());
    report.is_clean()
}

/// `dst --shrink`: the run, then the shortest fault schedule found that
/// still violates, its trace, and the options that replay it.
fn run_shrink(config: &DstConfig) -> bool {
    match tikv_plan_chaos::dst::shrink(config) {
        Err(e) => fail(&format!("the simulation failed: {e}")),
        Ok(None) => {
            println!("seed {} runs clean: nothing to shrink", config.seed);
            true
        }
        Ok(Some(shrunk)) => {
            let report = &shrunk.report;
            print!("{}", report.trace());
            println!(
                "shrunk in {} runs: {} of {} network faults and {} of {} state faults still violate; replay with `dst {}`",
                shrunk.runs,
                report.net_applied.len(),
                shrunk.before.0,
                report.state_applied.len(),
                shrunk.before.1,
                shrunk.replay_options()
            );
            false
        }
    }
}

fn explore(args: Vec<String>) -> bool {
    let (config, rest) = dst_config(args);
    let mut seeds: u64 = 1000;
    let mut from: u64 = 1;
    for (flag, value) in rest {
        match flag.as_str() {
            "--seeds" => seeds = parse(&flag, value),
            "--from" => from = parse(&flag, value),
            _ => fail(&format!(
                "{flag} is an option of dst: shrink one violating seed at a time"
            )),
        }
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "dst-explore: seeds {from}..{} of the {} workload, {:?} simulated each, on {threads} threads{}",
        from + seeds,
        config.workload.name(),
        config.duration,
        if config.resend_undetermined_writes {
            ", with writes re-sent (a deliberate bug)"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let next = AtomicU64::new(from);
    let found: Mutex<Vec<(u64, String)>> = Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..threads {
            scope.spawn(|| loop {
                let seed = next.fetch_add(1, Ordering::SeqCst);
                if seed >= from + seeds {
                    return;
                }
                let config = DstConfig {
                    seed,
                    ..config.clone()
                };
                let line = match run_dst_seed(&config) {
                    Ok(report) if report.is_clean() => continue,
                    Ok(report) => report.summary(),
                    Err(e) => format!("seed={seed} the simulation failed: {e}"),
                };
                println!("{line}");
                if let Ok(mut found) = found.lock() {
                    found.push((seed, line));
                }
            });
        }
    });
    let elapsed = started.elapsed();
    let mut found = found.into_inner().unwrap_or_default();
    found.sort();
    println!(
        "explored {seeds} seeds in {:.1} s: {:.1} seeds/s, {} violating{}",
        elapsed.as_secs_f64(),
        seeds as f64 / elapsed.as_secs_f64().max(1e-9),
        found.len(),
        match found.first() {
            Some((seed, _)) => format!(
                " (first: seed {seed}; replay with `dst --seed {seed} --workload {} --seconds {}{}`)",
                config.workload.name(),
                config.duration.as_secs(),
                if config.resend_undetermined_writes {
                    " --resend-writes"
                } else {
                    ""
                }
            ),
            None => String::new(),
        }
    );
    found.is_empty()
}

fn run_dst_seed(config: &DstConfig) -> tikv_plan_chaos::Result<DstReport> {
    tikv_plan_chaos::dst::run(config)
}

async fn run_raw(args: Vec<String>) -> bool {
    let mut config = ChaosConfig {
        tasks: 24,
        keys: 40,
        duration: Duration::from_secs(60),
        ..ChaosConfig::default()
    };
    let mut dump: Option<String> = None;
    let mut timeline: Option<String> = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => config.seed = parse(&arg, args.next()),
            "--seconds" => config.duration = Duration::from_secs(parse(&arg, args.next())),
            "--tasks" => config.tasks = parse(&arg, args.next()),
            "--timeline" => match args.next() {
                Some(path) => timeline = Some(path),
                None => fail("--timeline needs a file name"),
            },
            "--keys" => config.keys = parse(&arg, args.next()),
            "--hot-keys" => config.hot_keys = parse(&arg, args.next()),
            "--at-least-once" => config.at_least_once_writes = true,
            "--replica-reads" => config.replica_reads = true,
            "--naive-replica-reads" => {
                config.replica_reads = true;
                config.naive_replica_reads = true;
            }
            "--no-scheduler" => config.scheduler = None,
            "--max-states" => config.check.max_states_per_key = parse(&arg, args.next()),
            "--batched" => config.rpc_mode = RpcMode::Batched,
            "--unary" => config.rpc_mode = RpcMode::Unary,
            "--dump" => dump = args.next(),
            other => fail(&format!("unknown option {other}")),
        }
    }
    println!(
        "chaos: seed {} for {:?}, {} tasks over {} keys, {:?} requests{}",
        config.seed,
        config.duration,
        config.tasks,
        config.keys,
        config.rpc_mode,
        if config.at_least_once_writes {
            ", at-least-once writes"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let report = match tikv_plan_chaos::run(config).await {
        Ok(report) => report,
        Err(e) => fail(&format!("the chaos run could not start: {e}")),
    };
    for ((name, ok), n) in &report.ops_by_kind {
        println!("  {name:>12} {:<6} {n}", if *ok { "ok" } else { "failed" });
    }
    println!(
        "  checked {} keys, {} per-key operations placed, {} search states; took {:?} in all",
        report.check.keys,
        report.check.placed_ops,
        report.check.search_states,
        started.elapsed()
    );
    print!("{}", report.describe_violations());
    if let Some(path) = dump {
        // The history of every key that is not clean, one record a line.
        let mut bad: Vec<&Vec<u8>> = report.check.undecided.iter().collect();
        bad.extend(report.check.non_linearizable.iter().map(|v| &v.key));
        let mut text = String::new();
        for key in bad {
            text.push_str(&format!("== key {}\n", String::from_utf8_lossy(key)));
            for record in report.history.iter().filter(|r| r.kind.touches(key)) {
                text.push_str(&format!("{record}\n"));
            }
        }
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("could not write {path}: {e}");
        }
    }
    if let Some(path) = timeline {
        if let Err(e) = std::fs::write(&path, report.timeline_csv()) {
            eprintln!("could not write {path}: {e}");
        }
    }
    println!("{}", report.summary());
    report.is_clean()
}

async fn run_txn(args: Vec<String>) -> bool {
    let mut config = TxnChaosConfig {
        duration: Duration::from_secs(30),
        ..TxnChaosConfig::default()
    };
    let mut dump: Option<String> = None;
    let mut args = args.into_iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => config.seed = parse(&arg, args.next()),
            "--seconds" => config.duration = Duration::from_secs(parse(&arg, args.next())),
            "--tasks" => config.tasks = parse(&arg, args.next()),
            "--long-tasks" => config.long_tasks = parse(&arg, args.next()),
            "--replica-reads" => config.stale_reads = true,
            "--hot-tasks" => config.hot_tasks = parse(&arg, args.next()),
            "--no-scheduler" => config.scheduler = None,
            "--batched" => config.rpc_mode = RpcMode::Batched,
            "--unary" => config.rpc_mode = RpcMode::Unary,
            "--dump" => dump = args.next(),
            other => fail(&format!("unknown option {other}")),
        }
    }
    println!(
        "txn chaos: seed {} for {:?}, {} tasks, {} long pessimistic ones and {} hot transfers, {:?} requests",
        config.seed, config.duration, config.tasks, config.long_tasks, config.hot_tasks, config.rpc_mode
    );
    let started = Instant::now();
    let report = match tikv_plan_chaos::txn::run(config).await {
        Ok(report) => report,
        Err(e) => fail(&format!("the transactional chaos run could not start: {e}")),
    };
    for ((workload, mode, outcome), n) in &report.by_mode {
        println!(
            "  {:>10} {:>22} {outcome:<12} {n}",
            format!("{workload:?}"),
            format!("{mode:?}")
        );
    }
    println!(
        "  {} records checked, {} violations; took {:?} in all",
        report.history.len(),
        report.check.violations.len(),
        started.elapsed()
    );
    print!("{}", report.describe_violations());
    if let Some(path) = dump {
        let text: String = report
            .history
            .iter()
            .map(|r| format!("{}\n", describe_record(r)))
            .chain(report.fault_windows.iter().map(|w| {
                format!(
                    "fault [{}..{}µs] {} {}\n",
                    w.start,
                    w.end,
                    w.kind.name(),
                    w.target
                )
            }))
            .collect();
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("could not write {path}: {e}");
        }
    }
    println!("{}", report.summary());
    report.is_clean()
}
