//! `--only count --count N`: a fixed number of operations per client, op
//! and task count, on a current-thread runtime, for instruction counts
//! under `valgrind --tool=callgrind`. Every client task runs inside
//! [`measured`] (sim in its own process), so
//! `--collect-atstart=no --toggle-collect='tikv_plan_perf::count::measured'`
//! collects the client's work on the operations, the warm-up's included:
//! divide by N + [`WARM_UP`] for instructions per operation. See
//! perf/README.md.

use std::sync::Arc;
use std::time::Instant;

use tokio::runtime::Runtime;

use crate::clients::{self, Client, Kind};
use crate::sim::{Control, Sim};
use crate::workload::{self, Layout, Op};

/// Operations run before each measured phase, also inside [`measured`].
pub const WARM_UP: u64 = 2_000;

/// What a count run does.
pub struct CountPlan<'a> {
    /// The sim binary.
    pub sim: &'a std::path::Path,
    /// The clients, each measured in turn.
    pub kinds: &'a [Kind],
    /// The operations.
    pub ops: &'a [Op],
    /// The task counts.
    pub tasks: &'a [usize],
    /// Operations per measured phase.
    pub count: u64,
}

/// Starts a sim, loads it, and runs the measured phases; one line per
/// phase on stdout.
pub fn run(plan: &CountPlan<'_>) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    let sim = Sim::start(plan.sim, 8)?;
    let (layout, connected) = runtime.block_on(async {
        let mut control = Control::connect(&sim.control).await?;
        let regions = control.regions().await?;
        let layout = Arc::new(Layout::new(regions.clone())?);
        let loader = clients::loader(&sim.pd).await?;
        clients::load(&loader, layout.pairs(), 512).await?;
        drop(loader);
        let mut connected = Vec::new();
        for &kind in plan.kinds {
            let client = Client::connect(kind, &sim.pd, &mut control, &regions).await?;
            connected.push((kind, client));
        }
        Ok::<_, String>((layout, connected))
    })?;
    for (kind, client) in &connected {
        for &op in plan.ops {
            if kind.is_hand_routed() && op.is_txn() {
                continue;
            }
            for &tasks in plan.tasks {
                // Warm-up: caches filled, streams open, allocators grown.
                // Through `measured` as well (the compiler folds two
                // identical calls into one anyway): a collection toggled
                // on `measured` covers WARM_UP + N operations.
                measured(&runtime, client, &layout, op, tasks, WARM_UP)?;
                let start = Instant::now();
                measured(&runtime, client, &layout, op, tasks, plan.count)?;
                println!(
                    "{} {} tasks={tasks} ops={} took={:.3}s",
                    kind.label(),
                    op.name(),
                    plan.count,
                    start.elapsed().as_secs_f64()
                );
            }
        }
    }
    Ok(())
}

/// The measured phase: `count` operations of `op` over `tasks` tasks.
/// Not inlined, so callgrind can toggle collection on it.
#[inline(never)]
pub fn measured(
    runtime: &Runtime,
    client: &Client,
    layout: &Arc<Layout>,
    op: Op,
    tasks: usize,
    count: u64,
) -> Result<(), String> {
    runtime.block_on(workload::fixed_count(client, layout, op, tasks, count))
}
