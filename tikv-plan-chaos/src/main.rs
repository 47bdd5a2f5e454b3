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
//! duration, kind and outcome; see `ChaosReport::timeline_csv`).
//!
//! `txn`: list-append, bank and long pessimistic transactions while every
//! fault (TSO jumps and dropped transactional answers included) is injected
//! and healed, then a check of the history for lost updates, aborted or
//! intermediate reads, cycles and broken invariants. Options: `--seed N`,
//! `--seconds N`, `--tasks N` (list and bank tasks), `--long-tasks N`,
//! `--batched` or `--unary`, `--dump FILE` (the whole history, one
//! transaction a line).
//!
//! The last line of output is the counts.

use std::time::{Duration, Instant};

use tikv_plan::RpcMode;
use tikv_plan_chaos::txn::{describe_record, TxnChaosConfig};
use tikv_plan_chaos::ChaosConfig;

const USAGE: &str = "usage: tikv-plan-chaos [raw|txn] [--seed N] [--seconds N] [--tasks N] ...; \
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

#[tokio::main]
async fn main() {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let suite = match args.first().map(String::as_str) {
        Some("raw") | Some("txn") => args.remove(0),
        Some("--help") | Some("-h") => {
            println!("{USAGE}");
            return;
        }
        _ => "raw".to_owned(),
    };
    let clean = if suite == "txn" {
        run_txn(args).await
    } else {
        run_raw(args).await
    };
    if !clean {
        std::process::exit(1);
    }
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
            "--batched" => config.rpc_mode = RpcMode::Batched,
            "--unary" => config.rpc_mode = RpcMode::Unary,
            "--dump" => dump = args.next(),
            other => fail(&format!("unknown option {other}")),
        }
    }
    println!(
        "txn chaos: seed {} for {:?}, {} tasks and {} long pessimistic ones, {:?} requests",
        config.seed, config.duration, config.tasks, config.long_tasks, config.rpc_mode
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
            .collect();
        if let Err(e) = std::fs::write(&path, text) {
            eprintln!("could not write {path}: {e}");
        }
    }
    println!("{}", report.summary());
    report.is_clean()
}
