//! The transactional chaos suite: short seeded runs of the list-append,
//! bank and long pessimistic workloads under every fault (TSO jumps and
//! dropped transactional responses included) must come out clean, and a
//! run must really exercise what it claims to.

use std::time::Duration;

use tikv_plan_chaos::txn::{
    describe_record, run, TxnChaosConfig, TxnChaosReport, FINAL_TASK, SETUP_TASK,
};
use tikv_plan_chaos::txn_history::{TxnMode, TxnOutcome, TxnWorkload};
use tikv_plan_chaos::FaultKind;

async fn short_run(seed: u64) -> TxnChaosReport {
    let report = run(TxnChaosConfig {
        seed,
        duration: Duration::from_secs(4),
        ..TxnChaosConfig::default()
    })
    .await
    .expect("the run starts");
    println!("{}", report.summary());
    report
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn short_runs_are_clean() {
    for seed in [1, 2, 3] {
        let report = short_run(seed).await;
        assert!(
            report.is_clean(),
            "seed {seed}:\n{}\n{}",
            report.describe_violations(),
            report.summary()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_run_exercises_every_workload_and_the_transactional_faults() {
    let report = short_run(4).await;
    for workload in [TxnWorkload::ListAppend, TxnWorkload::Bank] {
        assert!(
            report.count(workload, "committed") > 0,
            "nothing of {workload:?} committed: {}",
            report.summary()
        );
    }
    let aborted = report.count(TxnWorkload::ListAppend, "aborted")
        + report.count(TxnWorkload::Bank, "aborted");
    assert!(aborted > 0, "nothing aborted: {}", report.summary());
    assert!(
        report.long_transactions() > 0,
        "no long pessimistic transaction ran: {}",
        report.summary()
    );
    let applied = |kind: FaultKind| report.faults.get(&kind).copied().unwrap_or(0);
    assert!(applied(FaultKind::TsoJump) > 0, "{}", report.summary());
    let txn_drops: u64 = FaultKind::TXN
        .iter()
        .filter(|k| k.dropped_method().is_some())
        .map(|k| applied(*k))
        .sum();
    assert!(txn_drops > 0, "{}", report.summary());
    assert!(report.drops_fired > 0, "{}", report.summary());
    // No raw request is sent, so no raw drop is ordered.
    for kind in FaultKind::DROPS {
        assert_eq!(applied(kind), 0, "{kind}: {}", report.summary());
    }
    // The history starts with the committed setup and ends with the final
    // snapshot, which read every account.
    let setup = report.history.first().expect("a setup record");
    assert_eq!(setup.task, SETUP_TASK);
    assert!(setup.outcome.is_committed(), "{:?}", setup.outcome);
    // A committed transaction that wrote has a commit timestamp after its
    // start.
    for r in &report.history {
        if r.outcome.is_committed() && r.ops.iter().any(|op| op.is_write()) {
            let TxnOutcome::Committed { commit_ts } = r.outcome else {
                unreachable!()
            };
            assert!(
                commit_ts.is_some() && commit_ts > r.start_ts,
                "{}",
                describe_record(r)
            );
        }
    }
    let final_bank = report
        .history
        .iter()
        .rev()
        .find(|r| r.workload == TxnWorkload::Bank && r.task == FINAL_TASK)
        .expect("a final bank read");
    assert!(
        matches!(final_bank.outcome, TxnOutcome::Committed { .. }),
        "{:?}",
        final_bank.outcome
    );
    assert_eq!(final_bank.ops.len(), TxnChaosConfig::default().accounts);
}

/// Read-only snapshots taken 500 ms or 2 s in the past are stale reads,
/// served by followers or any replica at their safe-ts (or by the leader
/// after `DataIsNotReady`), under lag and every fault: each shows exactly
/// its timestamp's snapshot, which the checker holds it to.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn stale_snapshots_show_exactly_their_timestamp_under_every_fault() {
    let report = run(TxnChaosConfig {
        seed: 5,
        duration: Duration::from_secs(6),
        stale_reads: true,
        ..TxnChaosConfig::default()
    })
    .await
    .expect("the run starts");
    println!("{}", report.summary());
    assert!(
        report.is_clean(),
        "{}\n{}",
        report.describe_violations(),
        report.summary()
    );
    assert!(report.replica_served > 0, "{}", report.summary());
    let stale: usize = report
        .by_mode
        .iter()
        .filter(|((_, mode, outcome), _)| {
            *mode == TxnMode::StaleSnapshot && *outcome == "committed"
        })
        .map(|(_, n)| *n)
        .sum();
    assert!(
        stale > 0,
        "no stale snapshot completed: {}",
        report.summary()
    );
}
