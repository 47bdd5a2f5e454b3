//! Every client call ends by its deadline, whatever the fault: one short run
//! of the raw workload and one of the transactional workload per fault
//! kind, each kind alone and held longer than the clients' request
//! deadline (so calls really meet it), PD hanging and PD leader changes
//! among them. The suites time every call: a raw operation (a scan across
//! Regions included) or a transaction's `begin`, `get`, `put`, `commit`,
//! `rollback`... that takes longer than its client's deadline plus
//! [`DEADLINE_MARGIN`] fails the run.

use std::time::Duration;

use tikv_plan_chaos::inject::InjectorConfig;
use tikv_plan_chaos::txn::{self, TxnChaosConfig};
use tikv_plan_chaos::{ChaosConfig, FaultKind, DEADLINE_MARGIN};

/// The deadline of the clients under test, shorter than every fault.
const DEADLINE: Duration = Duration::from_secs(1);
const FAULT_HELD: (Duration, Duration) = (Duration::from_millis(1200), Duration::from_millis(2000));
const RUN: Duration = Duration::from_secs(1);

async fn raw_kinds() -> Vec<String> {
    let mut failures = Vec::new();
    for (kind, weight) in InjectorConfig::all_kinds() {
        let report = tikv_plan_chaos::run(ChaosConfig {
            seed: 7,
            duration: RUN,
            short_deadline: DEADLINE,
            faults: vec![(kind, weight)],
            fault_duration: FAULT_HELD,
            ..ChaosConfig::default()
        })
        .await
        .expect("the raw run starts");
        println!("raw {kind}: {}", report.summary());
        if report.hangs > 0 || report.panics > 0 {
            failures.push(format!(
                "raw {kind}: {} operations over their deadline (+{DEADLINE_MARGIN:?}), slowest {:?}, {} panics",
                report.hangs, report.slowest_op, report.panics
            ));
        }
    }
    failures
}

async fn txn_kinds() -> Vec<String> {
    let mut failures = Vec::new();
    for (kind, weight) in InjectorConfig::txn_kinds() {
        let report = txn::run(TxnChaosConfig {
            seed: 7,
            duration: RUN,
            deadline: DEADLINE,
            faults: vec![(kind, weight)],
            fault_duration: FAULT_HELD,
            ..TxnChaosConfig::default()
        })
        .await
        .expect("the transactional run starts");
        println!("txn {kind}: {}", report.summary());
        if report.late_calls > 0 || report.panics > 0 || report.hangs > 0 {
            failures.push(format!(
                "txn {kind}: {} calls over the {DEADLINE:?} deadline (+{DEADLINE_MARGIN:?}), slowest {:?}, {} abandoned, {} panics",
                report.late_calls, report.slowest_call.0, report.hangs, report.panics
            ));
        }
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_each_fault_kind_every_call_ends_by_its_deadline() {
    let (raw, txn) = tokio::join!(raw_kinds(), txn_kinds());
    let failures: Vec<String> = raw.into_iter().chain(txn).collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // PD hanging and PD leadership moving are among the kinds.
    for kind in [
        FaultKind::PdHang,
        FaultKind::PdLeaderChange,
        FaultKind::PdMemberDown,
    ] {
        assert!(InjectorConfig::all_kinds().iter().any(|(k, _)| *k == kind));
        assert!(InjectorConfig::txn_kinds().iter().any(|(k, _)| *k == kind));
    }
}
