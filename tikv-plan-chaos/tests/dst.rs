//! The deterministic simulation: the raw workload inside turmoil, under
//! seeded network faults (partitions both ways and one way, held links,
//! latency spikes, store crashes and restarts) and cluster faults (stale
//! and fresh leader moves, cold Regions, busy, slow and hung stores,
//! splits). A seed replays: the same seed gives the same history, byte for
//! byte. CI runs a fixed set of seeds; `cargo run --release -p
//! tikv-plan-chaos -- dst-explore` runs thousands.

use std::time::Duration;

use tikv_plan_chaos::dst::{run_raw, DstConfig};

fn config(seed: u64) -> DstConfig {
    DstConfig {
        seed,
        duration: Duration::from_secs(3),
        ..DstConfig::default()
    }
}

#[test]
fn same_seed_same_history() {
    let first = run_raw(&config(7)).unwrap();
    let second = run_raw(&config(7)).unwrap();
    assert!(first.ops > 100, "{}", first.summary());
    assert!(
        first.net_faults.len() >= 4 && first.state_faults.len() >= 4,
        "the seed should exercise many fault kinds: {}",
        first.summary()
    );
    assert_eq!(first.summary(), second.summary());
    let (a, b) = (first.history_text(), second.history_text());
    if let Some(line) = a.lines().zip(b.lines()).position(|(x, y)| x != y) {
        panic!(
            "the histories part at record {line}:\n{}\n{}",
            a.lines().nth(line).unwrap_or(""),
            b.lines().nth(line).unwrap_or("")
        );
    }
    assert_eq!(a, b);
    assert_eq!(first.fault_log, second.fault_log);
    // Another seed is another run.
    assert_ne!(run_raw(&config(8)).unwrap().history_text(), a);
}

#[test]
fn a_fixed_set_of_seeds_runs_clean() {
    for seed in 1..=6 {
        let report = run_raw(&config(seed)).unwrap();
        assert!(report.is_clean(), "{}", report.trace());
    }
}
