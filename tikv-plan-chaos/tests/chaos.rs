//! The raw chaos suite: the history checker against known-good and
//! known-bad histories, a short seeded chaos run that must come out clean,
//! and a run with at-least-once writes that must be caught.

use std::time::Duration;

use tikv_plan::RpcMode;

use tikv_plan_chaos::{
    check_history, run, ChaosConfig, CheckOptions, CheckReport, FaultKind, OpKind, OpRecord,
    OpResult, WriteMode, FINAL_READER,
};

// ---------------------------------------------------------------------------
// Histories by hand.

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

/// Builds a history one operation at a time; times are microseconds.
#[derive(Default)]
struct H {
    records: Vec<OpRecord>,
}

impl H {
    fn op(&mut self, task: usize, invoke: u64, complete: u64, kind: OpKind, result: OpResult) {
        let id = self.records.len();
        self.records.push(OpRecord {
            id,
            task,
            invoke,
            complete: Some(complete),
            kind,
            result,
        });
    }

    fn put(&mut self, t: (u64, u64), key: &str, value: &str) {
        let kind = OpKind::Put {
            key: b(key),
            value: b(value),
        };
        self.op(1, t.0, t.1, kind, OpResult::Done);
    }

    fn put_failed(&mut self, t: (u64, u64), key: &str, value: &str, undetermined: bool) {
        let kind = OpKind::Put {
            key: b(key),
            value: b(value),
        };
        let result = OpResult::Failed {
            undetermined,
            message: "injected".to_owned(),
        };
        self.op(1, t.0, t.1, kind, result);
    }

    fn delete(&mut self, t: (u64, u64), key: &str, result: OpResult) {
        self.op(1, t.0, t.1, OpKind::Delete { key: b(key) }, result);
    }

    fn get(&mut self, t: (u64, u64), key: &str, seen: Option<&str>) {
        let kind = OpKind::Get { key: b(key) };
        self.op(2, t.0, t.1, kind, OpResult::Value(seen.map(b)));
    }

    fn final_get(&mut self, t: (u64, u64), key: &str, seen: Option<&str>) {
        let kind = OpKind::Get { key: b(key) };
        self.op(FINAL_READER, t.0, t.1, kind, OpResult::Value(seen.map(b)));
    }

    fn cas(
        &mut self,
        t: (u64, u64),
        key: &str,
        expected: Option<&str>,
        new: &str,
        result: OpResult,
    ) {
        let kind = OpKind::Cas {
            key: b(key),
            expected: expected.map(b),
            new: b(new),
        };
        self.op(3, t.0, t.1, kind, result);
    }

    fn check(&self, mode: WriteMode) -> CheckReport {
        let keys = vec![b("k0"), b("k1"), b("k2")];
        let options = CheckOptions {
            mode,
            ..CheckOptions::default()
        };
        check_history(&self.records, &keys, &options)
    }
}

fn swapped(previous: Option<&str>) -> OpResult {
    OpResult::Cas {
        previous: previous.map(b),
        swapped: true,
    }
}

fn undetermined() -> OpResult {
    OpResult::Failed {
        undetermined: true,
        message: "undetermined".to_owned(),
    }
}

fn assert_clean(h: &H, mode: WriteMode) {
    let report = h.check(mode);
    assert!(report.is_clean(), "{report:#?}");
}

fn assert_not_linearizable(h: &H, mode: WriteMode) -> CheckReport {
    let report = h.check(mode);
    assert_eq!(report.non_linearizable.len(), 1, "{report:#?}");
    assert!(report.undecided.is_empty(), "{report:#?}");
    report
}

#[test]
fn checker_accepts_overlapping_writes_read_in_either_order() {
    let mut h = H::default();
    h.put((0, 100), "k0", "a");
    h.put((10, 90), "k0", "b");
    h.get((20, 30), "k0", Some("b"));
    h.get((40, 50), "k0", Some("a"));
    h.get((110, 120), "k0", Some("a"));
    h.final_get((200, 210), "k0", Some("a"));
    assert_clean(&h, WriteMode::AtMostOnce);
}

#[test]
fn checker_rejects_a_value_from_the_dead() {
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.put((20, 30), "k0", "b");
    h.get((40, 50), "k0", Some("a"));
    let report = assert_not_linearizable(&h, WriteMode::AtMostOnce);
    assert_eq!(report.non_linearizable[0].key, b("k0"));
    // The read that returned the old value is what cannot be placed.
    assert!(
        report.non_linearizable[0].stuck_at.contains(&2),
        "{report:#?}"
    );
}

#[test]
fn checker_rejects_a_stale_read_after_an_acknowledged_write() {
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.get((20, 30), "k0", None);
    assert_not_linearizable(&h, WriteMode::AtMostOnce);
    // Concurrent with the write, either answer is fine.
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.get((5, 30), "k0", None);
    assert_clean(&h, WriteMode::AtMostOnce);
}

#[test]
fn checker_rejects_a_lost_acknowledged_write() {
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.put((20, 30), "k0", "b");
    h.final_get((100, 110), "k0", Some("a"));
    let report = h.check(WriteMode::AtMostOnce);
    assert_eq!(report.lost_writes.len(), 1, "{report:#?}");
    assert_eq!(report.lost_writes[0].write, 1);
    assert_eq!(report.non_linearizable.len(), 1);

    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.final_get((100, 110), "k0", None);
    let report = h.check(WriteMode::AtMostOnce);
    assert_eq!(report.lost_writes.len(), 1, "{report:#?}");

    // A delete that may have come after the write explains absence.
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.delete((5, 50), "k0", OpResult::Done);
    h.final_get((100, 110), "k0", None);
    assert_clean(&h, WriteMode::AtMostOnce);
}

#[test]
fn checker_rejects_a_compare_and_swap_applied_twice() {
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.cas((20, 30), "k0", Some("a"), "c", swapped(Some("a")));
    h.get((40, 50), "k0", Some("c"));
    h.put((60, 70), "k0", "d");
    h.get((80, 90), "k0", Some("d"));
    h.get((100, 110), "k0", Some("c"));
    let report = assert_not_linearizable(&h, WriteMode::AtMostOnce);
    assert_eq!(report.double_applies.len(), 1, "{report:#?}");
    assert_eq!(report.double_cas(), 1);
    assert_eq!(report.double_applies[0].observations, [2, 4, 5]);
}

#[test]
fn checker_applies_compare_and_swap_semantics() {
    let mut h = H::default();
    h.cas((0, 10), "k0", None, "a", swapped(None));
    h.cas(
        (20, 30),
        "k0",
        None,
        "b",
        OpResult::Cas {
            previous: Some(b("a")),
            swapped: false,
        },
    );
    h.cas((40, 50), "k0", Some("a"), "c", swapped(Some("a")));
    h.get((60, 70), "k0", Some("c"));
    assert_clean(&h, WriteMode::AtMostOnce);

    // A swap from "absent" after the key was acknowledged as set.
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.cas((20, 30), "k0", None, "b", swapped(None));
    assert_not_linearizable(&h, WriteMode::AtMostOnce);

    // A failed swap that claims the expected value was there.
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.cas(
        (20, 30),
        "k0",
        Some("a"),
        "b",
        OpResult::Cas {
            previous: Some(b("a")),
            swapped: false,
        },
    );
    assert_not_linearizable(&h, WriteMode::AtMostOnce);
}

#[test]
fn an_undetermined_write_may_land_late_or_never() {
    // Late: after another acknowledged write.
    let mut h = H::default();
    h.put_failed((0, 10), "k0", "a", true);
    h.put((20, 30), "k0", "b");
    h.get((40, 50), "k0", Some("b"));
    h.get((60, 70), "k0", Some("a"));
    h.final_get((100, 110), "k0", Some("a"));
    assert_clean(&h, WriteMode::AtMostOnce);
    // Never.
    let mut h = H::default();
    h.put_failed((0, 10), "k0", "a", true);
    h.get((40, 50), "k0", None);
    h.final_get((100, 110), "k0", None);
    assert_clean(&h, WriteMode::AtMostOnce);
    // But only once: seen, replaced, seen again.
    let mut h = H::default();
    h.put_failed((0, 10), "k0", "a", true);
    h.get((20, 30), "k0", Some("a"));
    h.put((40, 50), "k0", "b");
    h.get((60, 70), "k0", Some("a"));
    assert_not_linearizable(&h, WriteMode::AtMostOnce);
}

#[test]
fn unknown_outcomes_chain_through_an_unknown_compare_and_swap() {
    // a may have landed, then the swap from a to c: c is explained.
    let mut h = H::default();
    h.put_failed((0, 10), "k0", "a", true);
    h.cas((20, 30), "k0", Some("a"), "c", undetermined());
    h.get((40, 50), "k0", Some("c"));
    assert_clean(&h, WriteMode::AtMostOnce);
    // Without a there is nothing for the swap to swap.
    let mut h = H::default();
    h.cas((20, 30), "k0", Some("a"), "c", undetermined());
    h.get((40, 50), "k0", Some("c"));
    assert_not_linearizable(&h, WriteMode::AtMostOnce);
    // A late write is late once: b cannot come back after a replaced it.
    let mut h = H::default();
    h.put_failed((0, 10), "k0", "a", true);
    h.put((20, 30), "k0", "b");
    h.get((40, 50), "k0", Some("a"));
    h.get((60, 70), "k0", Some("b"));
    assert_not_linearizable(&h, WriteMode::AtMostOnce);
}

#[test]
fn a_definitely_failed_write_must_not_appear_unless_writes_are_at_least_once() {
    let mut h = H::default();
    h.put_failed((0, 10), "k0", "a", false);
    h.put((20, 30), "k0", "b");
    h.get((40, 50), "k0", Some("a"));
    assert_not_linearizable(&h, WriteMode::AtMostOnce);
    assert_clean(&h, WriteMode::AtLeastOnce);
}

#[test]
fn an_undetermined_delete_explains_absence_once() {
    let mut h = H::default();
    h.put((0, 10), "k0", "a");
    h.delete((20, 30), "k0", undetermined());
    h.get((40, 50), "k0", Some("a"));
    h.get((60, 70), "k0", None);
    h.final_get((100, 110), "k0", None);
    assert_clean(&h, WriteMode::AtMostOnce);
    h.get((120, 130), "k0", Some("a"));
    assert_not_linearizable(&h, WriteMode::AtMostOnce);
}

#[test]
fn batches_and_scans_become_per_key_operations() {
    let mut h = H::default();
    let pairs = vec![(b("k0"), b("a")), (b("k1"), b("b"))];
    h.op(1, 0, 10, OpKind::BatchPut { pairs }, OpResult::Done);
    let scan = OpKind::Scan {
        start: b("k0"),
        end: b("k3"),
        limit: 1,
    };
    // A full page says nothing past its last key.
    h.op(2, 20, 30, scan, OpResult::Pairs(vec![(b("k0"), b("a"))]));
    let keys = vec![b("k0"), b("k1"), b("k2")];
    h.op(2, 40, 50, OpKind::BatchGet { keys }, {
        OpResult::Pairs(vec![(b("k0"), b("a")), (b("k1"), b("b"))])
    });
    assert_clean(&h, WriteMode::AtMostOnce);
    // A scan that was not cut short saw every key of its range.
    let scan = OpKind::Scan {
        start: b("k0"),
        end: b("k3"),
        limit: 10,
    };
    h.op(2, 60, 70, scan, OpResult::Pairs(vec![(b("k0"), b("a"))]));
    let report = assert_not_linearizable(&h, WriteMode::AtMostOnce);
    assert_eq!(report.non_linearizable[0].key, b("k1"));
}

#[test]
fn a_definitely_failed_batch_may_have_written_some_keys_within_its_interval() {
    let mut h = H::default();
    let pairs = vec![(b("k0"), b("a")), (b("k1"), b("b"))];
    let failed = OpResult::Failed {
        undetermined: false,
        message: "one shard failed".to_owned(),
    };
    h.op(1, 0, 10, OpKind::BatchPut { pairs }, failed);
    h.get((20, 30), "k0", Some("a"));
    h.get((20, 30), "k1", None);
    assert_clean(&h, WriteMode::AtMostOnce);
    // But not after it returned.
    h.get((40, 50), "k1", Some("b"));
    assert_not_linearizable(&h, WriteMode::AtMostOnce);
}

/// A long single-key history from a real sequential execution with
/// overlapping intervals and unknown outcomes: the check accepts it within
/// a search budget of a few states per operation (no blow-up).
#[test]
fn checker_handles_long_concurrent_histories_quickly() {
    let mut rng = fastrand::Rng::with_seed(11);
    let mut h = H::default();
    let mut value: Option<String> = None;
    let mut t = 0u64;
    for i in 0..10_000 {
        // Each operation takes effect at `t` and its interval spans up to
        // 40 µs either side, so neighbours overlap.
        t += rng.u64(1..10);
        let (inv, ret) = (t.saturating_sub(rng.u64(0..40)), t + rng.u64(0..40));
        match rng.u32(0..10) {
            0..4 => h.get((inv, ret), "k0", value.as_deref()),
            4..6 => {
                let v = format!("v{i}");
                h.put((inv, ret), "k0", &v);
                value = Some(v);
            }
            6 => {
                // Undetermined: applied or not.
                let v = format!("v{i}");
                h.put_failed((inv, ret), "k0", &v, true);
                if rng.bool() {
                    value = Some(v);
                }
            }
            7 => {
                let outcome = if rng.bool() {
                    value = None;
                    OpResult::Done
                } else {
                    undetermined()
                };
                h.delete((inv, ret), "k0", outcome);
            }
            _ => {
                let v = format!("v{i}");
                let previous = value.clone();
                h.cas(
                    (inv, ret),
                    "k0",
                    previous.as_deref(),
                    &v,
                    swapped(previous.as_deref()),
                );
                value = Some(v);
            }
        }
    }
    h.final_get((t + 100, t + 110), "k0", value.as_deref());
    let keys = vec![b("k0")];
    let options = CheckOptions {
        mode: WriteMode::AtMostOnce,
        max_states_per_key: 50 * h.records.len(),
    };
    let report = check_history(&h.records, &keys, &options);
    println!(
        "{} states for {} operations",
        report.search_states, report.placed_ops
    );
    assert!(report.is_clean(), "{report:#?}");
}

// ---------------------------------------------------------------------------
// Chaos runs.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_seeded_chaos_run_is_linearizable() {
    let report = run(ChaosConfig {
        seed: 1,
        duration: Duration::from_secs(15),
        tasks: 12,
        keys: 24,
        ..ChaosConfig::default()
    })
    .await
    .unwrap();
    println!("{}", report.summary());
    assert!(
        report.is_clean(),
        "{}\n{}",
        report.describe_violations(),
        report.summary()
    );
    for kind in FaultKind::ALL {
        assert!(
            report.faults.get(&kind).copied().unwrap_or(0) > 0,
            "{kind} never applied: {}",
            report.summary()
        );
    }
    assert!(report.drops_fired > 0, "{}", report.summary());
    assert!(report.ops >= 12 * 9, "{}", report.summary());
    // The timeline holds every fault applied; a healable one ends when it
    // was healed, before the reads after healing.
    assert_eq!(report.fault_windows.len() as u64, report.total_faults());
    let last = report
        .history
        .iter()
        .filter_map(|r| r.complete)
        .max()
        .unwrap_or(0);
    for w in &report.fault_windows {
        assert!(w.start <= w.end && w.end <= last, "{w:?}");
        assert!(w.healable || w.start == w.end, "{w:?}");
    }
    assert!(report
        .fault_windows
        .iter()
        .any(|w| w.healable && w.end > w.start));
    // Every operation kind was tried (each task starts with one of each).
    for name in [
        "get",
        "batch_get",
        "scan",
        "put",
        "batch_put",
        "delete",
        "batch_delete",
        "delete_range",
        "cas",
    ] {
        let tried = report.ops_by_kind.get(&(name, true)).copied().unwrap_or(0)
            + report.ops_by_kind.get(&(name, false)).copied().unwrap_or(0);
        assert!(tried > 0, "{name} never tried: {:?}", report.ops_by_kind);
    }
}

/// With at-least-once writes, a write whose response was dropped is sent
/// again and applied twice; with two writers on a hot key a reader sees an
/// old value come back. The run reports it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn at_least_once_writes_with_dropped_responses_are_reported() {
    let drops = [
        (FaultKind::DropPut, 4),
        (FaultKind::DropBatchPut, 2),
        (FaultKind::DropDelete, 1),
    ];
    // A run lasts 10 s of real time; on a loaded machine it may complete too
    // few operations to catch a double apply, so up to four seeds are tried
    // and the first that shows one ends the test. Every run must fire drops.
    let mut summaries = Vec::new();
    for seed in [3, 11, 19, 27] {
        let report = run(ChaosConfig {
            seed,
            duration: Duration::from_secs(10),
            tasks: 12,
            keys: 4,
            hot_keys: 2,
            regions: 2,
            at_least_once_writes: true,
            faults: drops.to_vec(),
            fault_interval: (Duration::from_millis(5), Duration::from_millis(20)),
            ..ChaosConfig::default()
        })
        .await
        .unwrap();
        println!("{}\n{}", report.describe_violations(), report.summary());
        assert!(report.drops_fired > 0, "{}", report.summary());
        if !report.check.non_linearizable.is_empty() {
            return;
        }
        summaries.push(format!("seed {seed}: {}", report.summary()));
    }
    panic!(
        "at-least-once writes with dropped responses never showed a violation:\n{}",
        summaries.join("\n")
    );
}

/// The raw suite over `BatchCommands` streams (`RpcMode::Batched`).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_short_seeded_chaos_run_in_batched_mode_is_linearizable() {
    let report = run(ChaosConfig {
        seed: 7,
        duration: Duration::from_secs(8),
        tasks: 12,
        keys: 24,
        rpc_mode: RpcMode::Batched,
        ..ChaosConfig::default()
    })
    .await
    .unwrap();
    println!("{}", report.summary());
    assert!(
        report.is_clean(),
        "{}\n{}",
        report.describe_violations(),
        report.summary()
    );
    assert!(report.ops >= 12 * 9, "{}", report.summary());
}

/// Reads that leave the leader (a third of the tasks read from a follower
/// first, a third from any replica first) under stores that lag and every
/// other fault: replica reads go through read index, so the history stays
/// linearizable.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replica_reads_under_lag_and_every_fault_are_linearizable() {
    let report = run(ChaosConfig {
        seed: 2,
        duration: Duration::from_secs(8),
        tasks: 12,
        keys: 24,
        replica_reads: true,
        ..ChaosConfig::default()
    })
    .await
    .unwrap();
    println!("{}", report.summary());
    assert!(
        report.is_clean(),
        "{}\n{}",
        report.describe_violations(),
        report.summary()
    );
    assert!(report.replica_served > 0, "{}", report.summary());
    assert!(
        report.faults.get(&FaultKind::Lag).copied().unwrap_or(0) > 0,
        "{}",
        report.summary()
    );
}

/// The same reads served without read index (the simulator's naive
/// switch, under a 300 ms lag): stale reads the checker must report, so a
/// clean replica-read run means something.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_naive_follower_read_is_caught_by_the_checker() {
    let mut summaries = Vec::new();
    for seed in [1, 2, 3] {
        let report = run(ChaosConfig {
            seed,
            duration: Duration::from_secs(5),
            tasks: 12,
            keys: 8,
            hot_keys: 4,
            replica_reads: true,
            naive_replica_reads: true,
            faults: vec![(FaultKind::TransferFresh, 1), (FaultKind::Slow, 1)],
            ..ChaosConfig::default()
        })
        .await
        .unwrap();
        println!("{}", report.summary());
        assert!(report.replica_served > 0, "{}", report.summary());
        if !report.check.non_linearizable.is_empty() {
            return;
        }
        summaries.push(format!("seed {seed}: {}", report.summary()));
    }
    panic!(
        "naive follower reads under lag never showed a violation:\n{}",
        summaries.join("\n")
    );
}
