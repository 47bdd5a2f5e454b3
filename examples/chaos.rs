//! The long chaos run of issue 8: concurrent raw clients against the
//! simulated cluster while every fault is injected and healed, then a
//! linearizability check of the history.
//!
//! ```sh
//! cargo run --release --features sim --example chaos -- --seed 1 --seconds 120
//! ```
//!
//! Options: `--seed N`, `--seconds N`, `--tasks N`, `--keys N`,
//! `--hot-keys N`, `--at-least-once` (clients re-send writes; expect
//! violations), `--max-states N` (the checker's search budget per key; a
//! key that needs more is reported undecided), `--dump FILE` (the history
//! of every key that is not clean, one operation a line). The last line of output is the counts; the exit status is
//! 1 when anything is wrong.

use std::time::{Duration, Instant};

use tikv_plan::sim::chaos::{run, ChaosConfig};

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
    let mut config = ChaosConfig {
        tasks: 24,
        keys: 40,
        duration: Duration::from_secs(60),
        ..ChaosConfig::default()
    };
    let mut dump: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--seed" => config.seed = parse(&arg, args.next()),
            "--seconds" => config.duration = Duration::from_secs(parse(&arg, args.next())),
            "--tasks" => config.tasks = parse(&arg, args.next()),
            "--keys" => config.keys = parse(&arg, args.next()),
            "--hot-keys" => config.hot_keys = parse(&arg, args.next()),
            "--at-least-once" => config.at_least_once_writes = true,
            "--max-states" => config.check.max_states_per_key = parse(&arg, args.next()),
            "--dump" => dump = args.next(),
            other => {
                eprintln!(
                    "unknown option {other}; see the comment at the top of examples/chaos.rs"
                );
                std::process::exit(2);
            }
        }
    }
    println!(
        "chaos: seed {} for {:?}, {} tasks over {} keys{}",
        config.seed,
        config.duration,
        config.tasks,
        config.keys,
        if config.at_least_once_writes {
            ", at-least-once writes"
        } else {
            ""
        }
    );
    let started = Instant::now();
    let report = match run(config).await {
        Ok(report) => report,
        Err(e) => {
            eprintln!("the chaos run could not start: {e}");
            std::process::exit(2);
        }
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
    println!("{}", report.summary());
    if !report.is_clean() {
        std::process::exit(1);
    }
}
