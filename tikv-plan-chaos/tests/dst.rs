//! The deterministic simulation: the raw and the transactional workloads
//! side by side inside turmoil, under seeded network faults (partitions
//! both ways and one way, held links, latency spikes, store crashes and
//! restarts) and cluster faults (stale and fresh leader moves, cold
//! Regions, busy, slow and hung stores, splits, TSO jumps, dropped answers
//! of transactional requests). A seed replays: the same seed gives the
//! same histories, byte for byte. CI runs a fixed set of seeds; `cargo run
//! --release -p tikv-plan-chaos -- dst-explore` runs thousands.

use std::time::Duration;

use tikv_plan_chaos::dst::{run, shrink, DstConfig, DstWorkload, NetFault};
use tikv_plan_chaos::FaultKind;

fn config(seed: u64) -> DstConfig {
    DstConfig {
        seed,
        duration: Duration::from_secs(3),
        ..DstConfig::default()
    }
}

/// The raw workload under the network faults the raw seeds below were
/// found with (the kinds before the store ↔ PD partition), so each seed
/// replays the run it was found in.
fn raw(seed: u64) -> DstConfig {
    DstConfig {
        seed,
        workload: DstWorkload::Raw,
        net_faults: NetFault::ALL[..7].to_vec(),
        ..DstConfig::default()
    }
}

#[test]
fn same_seed_same_history() {
    let first = run(&config(7)).unwrap();
    let second = run(&config(7)).unwrap();
    assert_eq!(first.workload, DstWorkload::Mixed);
    assert!(first.ops > 100, "{}", first.summary());
    let txn = first.txn.as_ref().expect("the transactional workload ran");
    assert!(
        txn.transactions > 20 && txn.check.transactions > 20,
        "{}",
        first.summary()
    );
    assert!(
        first.net_faults.len() >= 4 && first.state_faults.len() >= 4,
        "the seed should exercise many fault kinds: {}",
        first.summary()
    );
    assert!(
        first
            .state_faults
            .keys()
            .any(|k| FaultKind::TXN.contains(k)),
        "the seed should apply transactional faults: {}",
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
    assert_ne!(run(&config(8)).unwrap().history_text(), a);
}

#[test]
fn a_fixed_set_of_seeds_runs_clean() {
    for seed in 1..=6 {
        let report = run(&config(seed)).unwrap();
        assert!(report.is_clean(), "{}", report.trace());
    }
}

/// Each workload alone runs too, and a run without transactions applies
/// no transactional fault.
#[test]
fn each_workload_runs_alone() {
    let txn = run(&DstConfig {
        workload: DstWorkload::Txn,
        ..config(3)
    })
    .unwrap();
    assert!(txn.is_clean(), "{}", txn.trace());
    assert_eq!(txn.ops, 0);
    assert!(txn.txn.as_ref().is_some_and(|t| t.transactions > 20));
    let raw = run(&DstConfig {
        workload: DstWorkload::Raw,
        ..config(3)
    })
    .unwrap();
    assert!(raw.is_clean(), "{}", raw.trace());
    assert!(raw.txn.is_none() && raw.ops > 100);
    assert!(
        !raw.state_faults.keys().any(|k| FaultKind::TXN.contains(k)),
        "{}",
        raw.summary()
    );
}

/// Seeds the exploration found an operation over its bound with: a
/// request's deadline did not cover its wait for PD (finding its Regions
/// before the first attempt, or a store's address or a Region reloaded
/// between attempts), so with PD cut off a 3-second deadline ended after
/// nearly 5. Each replays its run, now clean.
#[test]
fn seeds_that_found_a_deadline_overrun_replay_clean() {
    for seed in [228, 229, 242, 262, 302, 491, 587, 737] {
        let report = run(&raw(seed)).unwrap();
        assert!(report.is_clean(), "seed {seed}: {}", report.trace());
    }
}

/// A deliberate replay-safety bug (writes that may have been delivered
/// are re-sent) is found within the first seeds, and its seed replays the
/// same violation. Since store liveness ends waits on a dead store sooner,
/// the first seed that finds it is 4 with batched calls and 13 with unary
/// ones (CI's second pass); before, both were within ten.
#[test]
fn a_resent_write_is_found_and_its_seed_replays() {
    let buggy = |seed| DstConfig {
        resend_undetermined_writes: true,
        ..raw(seed)
    };
    let found = (1..=20)
        .map(|seed| run(&buggy(seed)).unwrap())
        .find(|report| !report.is_clean())
        .expect("twenty seeds find the re-sent writes");
    assert!(
        found.trace().contains("first violation"),
        "{}",
        found.trace()
    );
    let again = run(&buggy(found.seed)).unwrap();
    assert_eq!(again.history_text(), found.history_text());
    assert_eq!(again.trace(), found.trace());
    // Without the bug, the same seed is clean.
    assert!(run(&raw(found.seed)).unwrap().is_clean());
}

/// The mixed workload under the network faults the seeds below were
/// found with (the kinds before the store ↔ PD partition).
fn mixed_as_found(seed: u64) -> DstConfig {
    DstConfig {
        seed,
        net_faults: NetFault::ALL[..7].to_vec(),
        ..DstConfig::default()
    }
}

/// Seeds the first exploration of the mixed workload found violations
/// with (aborted reads, a bank total off): a transaction asking for 1PC
/// or async commit over several Regions committed its primary, then
/// failed to get a timestamp from a partitioned PD for reading back the
/// commit ts, and `commit()` returned that as a plain failure; the
/// workload rolled back, which undid the secondaries under a committed
/// primary. Each replays its run, now clean.
#[test]
fn seeds_that_found_a_committed_transaction_reported_failed_replay_clean() {
    for seed in [221, 338, 469, 627, 676] {
        let report = run(&mixed_as_found(seed)).unwrap();
        assert!(report.is_clean(), "seed {seed}: {}", report.trace());
    }
}

/// The rest of those seeds (two tests, so they run side by side). Seed
/// 887 over unary calls (CI's second pass) also found, once every
/// transactional call was timed against its deadline, a rollback 370 ms
/// past it: a unary call's timer (tonic's) started only once the store's
/// channel had reconnected, so the reconnect's wait came on top; the
/// store client's own timer now covers the whole call.
#[test]
fn more_seeds_that_found_a_committed_transaction_reported_failed_replay_clean() {
    for seed in [735, 776, 852, 887, 1069] {
        let report = run(&mixed_as_found(seed)).unwrap();
        assert!(report.is_clean(), "seed {seed}: {}", report.trace());
    }
}

/// Seeds that found a transactional call 250-650 ms past its deadline
/// once every call was timed (`get_for_update`, `get`, `rollback`): a
/// batched request whose stream ended before taking it went again as a
/// unary call, and that call's timer (tonic's) started only once the
/// store's channel had reconnected; with the store crashed, the reconnect
/// failed after 1.7 s. That unary call now has a backstop timer of its
/// own, as the store client's other unary calls do. Each replays its run,
/// now clean.
#[test]
fn seeds_that_found_a_late_batched_call_replay_clean() {
    for seed in [32, 125, 128, 532, 919] {
        let report = run(&DstConfig {
            seed,
            ..DstConfig::default()
        })
        .unwrap();
        assert!(report.is_clean(), "seed {seed}: {}", report.trace());
    }
}

/// Shrinking: a violating run (the deliberate re-sent-writes bug) keeps
/// only the faults it needs to still violate, and the shorter schedule
/// replays from its options.
#[test]
fn a_violation_shrinks_to_fewer_faults_and_replays() {
    let buggy = |seed| DstConfig {
        seed,
        workload: DstWorkload::Raw,
        resend_undetermined_writes: true,
        duration: Duration::from_secs(3),
        ..DstConfig::default()
    };
    // The first violating seed is 3 with batched calls and 15 with unary
    // ones (after PD hangs joined the schedule).
    let shrunk = (1..=20)
        .find_map(|seed| shrink(&buggy(seed)).unwrap())
        .expect("twenty short seeds find the re-sent writes");
    let report = &shrunk.report;
    assert!(!report.is_clean());
    let (net, state) = (report.net_applied.len(), report.state_applied.len());
    assert!(
        net + state < shrunk.before.0 + shrunk.before.1,
        "{} of {} faults kept",
        net + state,
        shrunk.before.0 + shrunk.before.1
    );
    assert_eq!(
        shrunk.config.only_net_faults.as_ref().map(|s| s.len()),
        Some(net)
    );
    let again = run(&shrunk.config).unwrap();
    assert_eq!(again.history_text(), report.history_text());
    assert_eq!(again.fault_log, report.fault_log);
}

/// Seeds of the second exploration, with every fault kind: 738, an
/// async-commit transaction whose inserted-and-deleted key (checked, not
/// locked) failed its check after a reader had already committed the
/// transaction from its locks; 1533, a raw scan that hung for good: a
/// Region load abandoned by its callers stayed in flight, never polled
/// again, holding PD's leader-discovery lock. Each replays its run, now
/// clean.
#[test]
fn seeds_that_found_a_partial_async_commit_and_a_hung_scan_replay_clean() {
    for seed in [738, 1533] {
        let report = run(&DstConfig {
            seed,
            ..DstConfig::default()
        })
        .unwrap();
        assert!(report.is_clean(), "seed {seed}: {}", report.trace());
    }
}

/// The seed the first exploration with TiKV's lock waiting, deadlock
/// detection and missing-lock amending found (a lost append): a writer's
/// lock resolution met a pessimistic-async-commit transaction's expired
/// pessimistic primary and its prewritten secondaries in one pass. The
/// primary was checked with `resolving_pessimistic_lock` (TiKV removed it
/// and wrote no rollback), and that answer was reused for the secondaries,
/// which were rolled back; the transaction's own prewrite of the primary
/// then came, TiKV wrote the lock anyway (no newer record), and the commit
/// was reported with its secondaries gone. A prewritten lock now gets a
/// status check of its own. Replays its run, now clean.
#[test]
fn the_seed_that_found_a_pessimistic_answer_reused_for_prewritten_locks_replays_clean() {
    let report = run(&DstConfig {
        seed: 455,
        duration: Duration::from_secs(10),
        ..DstConfig::default()
    })
    .unwrap();
    assert!(report.is_clean(), "seed 455: {}", report.trace());
}

/// The seed the first exploration with store liveness found (an aborted
/// read): an async-commit transaction's prewrite of one key gave up on a
/// store the probe had found dead, was sent again and answered `Locked`
/// until the lock could not be resolved in time, and the failure came
/// back as an abort; its rollback could not reach PD, and the copy given
/// up on arrived later and locked the key, so a reader found every key
/// locked and committed the transaction. An async-commit or 1PC prewrite
/// that fails is now undetermined unless its rollback was answered.
/// Replays its run, now clean.
#[test]
fn the_seed_that_found_an_async_commit_reported_aborted_and_committed_later_replays_clean() {
    let report = run(&DstConfig {
        seed: 429,
        duration: Duration::from_secs(10),
        ..DstConfig::default()
    })
    .unwrap();
    assert!(report.is_clean(), "seed 429: {}", report.trace());
}

/// Replica and stale reads in the simulation: both workloads' reads leave
/// the leader under lag and every network and cluster fault, and the
/// seeds run clean.
#[test]
fn replica_and_stale_reads_run_clean() {
    let mut served = 0;
    for seed in 1..=3 {
        let report = run(&DstConfig {
            replica_reads: true,
            ..config(seed)
        })
        .unwrap();
        assert!(report.is_clean(), "{}", report.trace());
        served += report.replica_served;
    }
    assert!(served > 0, "no read left the leader");
}
