//! A raw chaos run as a timeline (`--timeline FILE`): its faults and its
//! operations, CSV, for `perf/plot.sh chaos`.

use crate::history::{OpRecord, OpResult};
use crate::{ChaosReport, FINAL_READER};

impl ChaosReport {
    /// The run as a timeline, CSV with a header line: one row per fault
    /// (`record` = `fault`; `outcome` = `healed` for a fault that lasted
    /// until healed, `instant` for one that is not healed; `detail` = what
    /// it was applied to), then one row per operation in start order
    /// (`record` = `op`; `outcome` = `ok`, `undetermined`, `failed` or
    /// `abandoned`, the last with an empty duration; `detail` = the task,
    /// `t3`, or `final` for the reads after healing). Times in milliseconds
    /// since the history's time zero.
    pub fn timeline_csv(&self) -> String {
        let ms = |micros: u64| format!("{:.3}", micros as f64 / 1000.0);
        let mut out = String::from("record,start_ms,duration_ms,kind,outcome,detail\n");
        for w in &self.fault_windows {
            out.push_str(&format!(
                "fault,{},{},{},{},{}\n",
                ms(w.start),
                ms(w.end.saturating_sub(w.start)),
                w.kind.name(),
                if w.healable { "healed" } else { "instant" },
                csv_field(&w.target)
            ));
        }
        let mut ops: Vec<&OpRecord> = self.history.iter().collect();
        ops.sort_by_key(|r| (r.invoke, r.id));
        for r in ops {
            let outcome = match &r.result {
                OpResult::Abandoned => "abandoned",
                OpResult::Failed {
                    undetermined: true, ..
                } => "undetermined",
                OpResult::Failed { .. } => "failed",
                _ => "ok",
            };
            let duration = r
                .complete
                .map(|c| ms(c.saturating_sub(r.invoke)))
                .unwrap_or_default();
            let task = if r.task == FINAL_READER {
                "final".to_owned()
            } else {
                format!("t{}", r.task)
            };
            out.push_str(&format!(
                "op,{},{duration},{},{outcome},{task}\n",
                ms(r.invoke),
                r.kind.name()
            ));
        }
        out
    }
}

/// `text` as one CSV field: quoted when it holds a comma, a quote or a line
/// break.
fn csv_field(text: &str) -> String {
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text.to_owned()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::check::CheckReport;
    use crate::history::OpKind;
    use crate::inject::{FaultKind, FaultWindow};

    fn report(history: Vec<OpRecord>, fault_windows: Vec<FaultWindow>) -> ChaosReport {
        ChaosReport {
            seed: 1,
            duration: Duration::from_secs(1),
            ops: history.len(),
            ops_by_kind: BTreeMap::new(),
            undetermined: 0,
            faults: BTreeMap::new(),
            fault_windows,
            drops_fired: 0,
            forwarded: 0,
            replica_served: 0,
            tiflash_calls: 0,
            check: CheckReport::default(),
            hangs: 0,
            slowest_op: Duration::ZERO,
            hang_records: Vec::new(),
            panics: 0,
            history,
            keys: Vec::new(),
        }
    }

    fn record(
        id: usize,
        task: usize,
        invoke: u64,
        complete: Option<u64>,
        result: OpResult,
    ) -> OpRecord {
        OpRecord {
            id,
            task,
            invoke,
            complete,
            kind: OpKind::Put {
                key: b"k000".to_vec(),
                value: b"v".to_vec(),
            },
            result,
        }
    }

    #[test]
    fn the_timeline_lists_faults_then_operations_in_start_order() {
        let failed = |undetermined| OpResult::Failed {
            undetermined,
            message: "x".to_owned(),
        };
        let history = vec![
            record(0, 2, 5_000, Some(7_500), OpResult::Done),
            record(1, 1, 1_000, Some(2_000), failed(true)),
            record(2, 3, 1_000, Some(1_250), failed(false)),
            record(3, 0, 9_000, None, OpResult::Abandoned),
            record(4, FINAL_READER, 20_000, Some(20_100), OpResult::Value(None)),
        ];
        let windows = vec![
            FaultWindow {
                attempt: 0,
                kind: FaultKind::StoreDown,
                target: "store 2".to_owned(),
                start: 500,
                end: 300_500,
                healable: true,
            },
            FaultWindow {
                attempt: 1,
                kind: FaultKind::Split,
                target: "at k0,\"1".to_owned(),
                start: 800,
                end: 800,
                healable: false,
            },
        ];
        let csv = report(history, windows).timeline_csv();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines,
            [
                "record,start_ms,duration_ms,kind,outcome,detail",
                "fault,0.500,300.000,down,healed,store 2",
                "fault,0.800,0.000,split,instant,\"at k0,\"\"1\"",
                "op,1.000,1.000,put,undetermined,t1",
                "op,1.000,0.250,put,failed,t3",
                "op,5.000,2.500,put,ok,t2",
                "op,9.000,,put,abandoned,t0",
                "op,20.000,0.100,put,ok,final",
            ]
        );
    }
}
