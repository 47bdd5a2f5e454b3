//! The transactional chaos run: list-append, bank and long pessimistic
//! transactions against the simulated cluster while every fault (TSO
//! jumps and dropped transactional responses included) is injected and
//! healed, then a check of the recorded history.
//!
//! ```sh
//! cargo run --release --features sim --example txn_chaos -- --seed 1 --seconds 30
//! ```
//!
//! Options: `--seed N`, `--seconds N`, `--tasks N` (list and bank tasks;
//! two more run long pessimistic transactions), `--long-tasks N`,
//! `--batched` (requests share `BatchCommands` streams), `--dump FILE`
//! (the whole history, one transaction a line). The last line of output is
//! the counts; the exit status is 1 when anything is wrong.

use std::time::{Duration, Instant};

use tikv_plan::sim::chaos::txn::{describe_record, run, TxnChaosConfig};
use tikv_plan::RpcMode;

fn parse<T: std::str::FromStr>(flag: &str, value: Option<String>) -> T {
    match value.as_deref().map(str::parse) {
        Some(Ok(v)) => v,
        _ => {
            eprintln!("{flag} needs a number");
            std::process::exit(2);
        }
    }
}

#[tokio::main]
async fn main() {
    let mut config = TxnChaosConfig {
        duration: Duration::from_secs(30),
        ..TxnChaosConfig::default()
    };
    let mut dump: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => config.seed = parse(&arg, args.next()),
            "--seconds" => config.duration = Duration::from_secs(parse(&arg, args.next())),
            "--tasks" => config.tasks = parse(&arg, args.next()),
            "--long-tasks" => config.long_tasks = parse(&arg, args.next()),
            "--batched" => config.rpc_mode = RpcMode::Batched,
            "--dump" => dump = args.next(),
            other => {
                eprintln!(
                    "unknown option {other}; see the comment at the top of examples/txn_chaos.rs"
                );
                std::process::exit(2);
            }
        }
    }
    println!(
        "txn chaos: seed {} for {:?}, {} tasks and {} long pessimistic ones, {:?} requests",
        config.seed, config.duration, config.tasks, config.long_tasks, config.rpc_mode
    );
    let started = Instant::now();
    let report = match run(config).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("the transactional chaos run could not start: {e}");
            std::process::exit(2);
        }
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
    if !report.is_clean() {
        std::process::exit(1);
    }
}
