//! The failover and dead-store comparisons. Each trial runs on a fresh sim
//! process, so no client inherits another's leader changes.
//!
//! In both, the leaders on the failing store have moved to another voter
//! (`transfer REGION STORE stale`: a new leader was elected) but PD still
//! names the old ones, as it does until the new leaders' first heartbeats
//! reach it.

use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clients::{self, Client, Kind};
use crate::sim::{Control, RegionLine, Sim};
use crate::workload::{key, value};

/// How a timed trial ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Done after this long.
    Finished {
        /// Time taken.
        took: Duration,
        /// How it went, for a note under the table (may be empty).
        detail: String,
    },
    /// Not done by the cap.
    NotFinished {
        /// The cap.
        cap: Duration,
        /// Keys read by then (dead store) or attempts made (failover).
        progress: String,
        /// The first and the last error client calls returned.
        errors: String,
    },
}

/// The store whose leaders fail in both scenarios.
const FAILING_STORE: u64 = 1;

/// `transfer` commands moving every Region in `regions` led from
/// `FAILING_STORE` to its next voter, PD left naming the old leader.
fn stale_transfers(regions: &[&RegionLine]) -> Result<Vec<String>, String> {
    regions
        .iter()
        .map(|r| {
            let to = r
                .peers
                .iter()
                .find(|p| p.store_id != FAILING_STORE)
                .ok_or_else(|| format!("Region {} has no voter off store {FAILING_STORE}", r.id))?;
            Ok(format!("transfer {} {} stale", r.id, to.store_id))
        })
        .collect()
}

fn led_from_failing_store(regions: &[RegionLine]) -> Vec<&RegionLine> {
    regions
        .iter()
        .filter(|r| r.leader.map(|l| l.store_id) == Some(FAILING_STORE))
        .collect()
}

/// How one read of the failover timeline ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadOutcome {
    /// The key's value came back.
    Ok,
    /// The client returned an error.
    Error,
    /// The client answered with something else (no value, another value).
    Wrong,
    /// No answer before the trial's cap; the read was given up.
    Timeout,
}

impl ReadOutcome {
    /// The name in the CSV.
    pub fn name(self) -> &'static str {
        match self {
            ReadOutcome::Ok => "ok",
            ReadOutcome::Error => "error",
            ReadOutcome::Wrong => "wrong",
            ReadOutcome::Timeout => "timeout",
        }
    }
}

/// One read of a failover trial.
#[derive(Debug, Clone)]
pub struct Read {
    /// When it started, in seconds relative to the fault (negative: before
    /// it).
    pub since_fault: f64,
    /// How long it took.
    pub latency: Duration,
    /// How it ended.
    pub outcome: ReadOutcome,
    /// The error or wrong answer, if any.
    pub error: String,
}

/// A failover trial: the time to the first success, and every read timed.
#[derive(Debug, Clone)]
pub struct Failover {
    /// How the trial ended.
    pub outcome: Outcome,
    /// Every read after the warm-up, in order.
    pub reads: Vec<Read>,
}

/// Reads before the fault, for the timeline's baseline.
const BASELINE: Duration = Duration::from_millis(200);
/// Reads after the first success, for the timeline.
const TAIL: Duration = Duration::from_millis(500);
/// Before the fault and after the first success, a read starts every
/// `PACE` (the reads in between, the ones timed, go back to back).
const PACE: Duration = Duration::from_millis(5);

/// One read of `key` that should answer `want`, bounded by `bound`, its
/// start relative to `origin`.
async fn timed_read(
    client: &Client,
    key: &[u8],
    want: &[u8],
    bound: Duration,
    origin: Instant,
) -> Read {
    let sent = Instant::now();
    let since_fault = if sent >= origin {
        (sent - origin).as_secs_f64()
    } else {
        -(origin - sent).as_secs_f64()
    };
    let answer = tokio::time::timeout(bound, client.get(key)).await;
    let latency = sent.elapsed();
    let (outcome, error) = match answer {
        Ok(Ok(Some(v))) if v == want => (ReadOutcome::Ok, String::new()),
        Ok(Ok(other)) => (
            ReadOutcome::Wrong,
            format!("wrong answer {:?}", other.map(|v| v.len())),
        ),
        Ok(Err(e)) => (ReadOutcome::Error, e),
        Err(_) => (ReadOutcome::Timeout, format!("no answer within {bound:?}")),
    };
    Read {
        since_fault,
        latency,
        outcome,
        error,
    }
}

/// Reads paced at one per [`PACE`] until `until`, timed from `origin`.
async fn paced_reads(
    client: &Client,
    key: &[u8],
    want: &[u8],
    origin: Instant,
    until: Instant,
    reads: &mut Vec<Read>,
) {
    let mut next = Instant::now();
    while next < until {
        reads.push(timed_read(client, key, want, Duration::from_secs(1), origin).await);
        next += PACE;
        tokio::time::sleep_until(next.into()).await;
    }
}

/// The fault a failover trial applies to [`FAILING_STORE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// `down STORE`, its leaders moved to other voters with PD still
    /// naming it.
    Down,
    /// `cut-clients STORE MODE`: the client alone cannot reach the store,
    /// which keeps leading (`refuse`: connections reset; `drop`: they stop
    /// moving bytes).
    CutClients(&'static str),
}

/// Time to the first successful read of a key after the store leading its
/// Region goes down (`down STORE`: port closed, connections reset) or is
/// cut off from the client (`fault`). The client has read the key once
/// before, so it caches the leader.
///
/// Every read is timed for the timeline: [`BASELINE`] of reads before the
/// fault and [`TAIL`] after the first success, paced at one per [`PACE`],
/// and in between the reads the table times, back to back.
pub async fn failover(
    sim_binary: &Path,
    kind: Kind,
    cap: Duration,
    fault: Fault,
) -> Result<Failover, String> {
    let sim = Sim::start(sim_binary, 8)?;
    let mut control = Control::connect(&sim.control).await?;
    let regions = control.regions().await?;
    let led = led_from_failing_store(&regions);
    let target = *led
        .first()
        .ok_or_else(|| format!("no Region led from store {FAILING_STORE}"))?;
    let the_key = key(&target.key_prefix()?, 0);
    let the_value = value();
    let loader = clients::loader(&sim.pd).await?;
    loader
        .batch_put(vec![(the_key.clone(), the_value.clone())])
        .await?;
    drop(loader);

    let client = Client::connect(kind, &sim.pd, &mut control, &regions).await?;
    match client.get_within(&the_key, Duration::from_secs(10)).await? {
        Some(v) if v == the_value => {}
        other => return Err(format!("warm-up read returned {other:?}")),
    }

    // The baseline, timed from its own start until the fault is known.
    let mut reads = Vec::new();
    let baseline_start = Instant::now();
    paced_reads(
        &client,
        &the_key,
        &the_value,
        baseline_start,
        baseline_start + BASELINE,
        &mut reads,
    )
    .await;

    match fault {
        Fault::Down => {
            control.commands(&stale_transfers(&led)?).await?;
            control.command(&format!("down {FAILING_STORE}")).await?;
        }
        Fault::CutClients(mode) => {
            control
                .command(&format!("cut-clients {FAILING_STORE} {mode}"))
                .await?;
        }
    }
    let started = Instant::now();
    let shift = (started - baseline_start).as_secs_f64();
    for read in &mut reads {
        read.since_fault -= shift;
    }
    let mut attempts = 0u64;
    let mut first_error: Option<String> = None;
    let mut last_error: Option<String> = None;
    let took = loop {
        let left = cap.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(Failover {
                outcome: Outcome::NotFinished {
                    cap,
                    progress: format!("{attempts} read(s) tried"),
                    errors: error_text(&first_error, &last_error),
                },
                reads,
            });
        }
        attempts += 1;
        let read = timed_read(&client, &the_key, &the_value, left, started).await;
        let ok = read.outcome == ReadOutcome::Ok;
        if !ok {
            last_error = Some(read.error.clone());
            if first_error.is_none() {
                first_error = last_error.clone();
            }
        }
        reads.push(read);
        if ok {
            break started.elapsed();
        }
    };
    paced_reads(
        &client,
        &the_key,
        &the_value,
        started,
        Instant::now() + TAIL,
        &mut reads,
    )
    .await;
    Ok(Failover {
        outcome: Outcome::Finished {
            took,
            detail: format!("{attempts} read(s)"),
        },
        reads,
    })
}

/// A dead-store trial: the time until every key is read, and when each was.
#[derive(Debug, Clone)]
pub struct DeadStore {
    /// How the trial ended.
    pub outcome: Outcome,
    /// When each key was read, from the store hanging, in order.
    pub done_at: Vec<Duration>,
}

/// Time until one key in each of `regions_on_store` Regions, all led from
/// a store that then hangs (`hang STORE connect`: open connections stop
/// moving bytes, new connects hang), is read. `tasks` tasks read the keys.
/// The client has read every key once before.
pub async fn dead_store(
    sim_binary: &Path,
    kind: Kind,
    regions_on_store: usize,
    tasks: usize,
    cap: Duration,
) -> Result<DeadStore, String> {
    // Three stores lead the Regions in turn.
    let sim = Sim::start(sim_binary, regions_on_store * 3)?;
    let mut control = Control::connect(&sim.control).await?;
    let regions = control.regions().await?;
    let mut led = led_from_failing_store(&regions);
    led.truncate(regions_on_store);
    if led.len() < regions_on_store {
        return Err(format!(
            "only {} Regions led from store {FAILING_STORE}, want {regions_on_store}",
            led.len()
        ));
    }
    let mut keys = Vec::new();
    for r in &led {
        let k = key(&r.key_prefix()?, 0);
        if !r.contains(&k) {
            return Err(format!("key {k:?} falls outside Region {}", r.id));
        }
        keys.push(k);
    }
    let the_value = value();
    let loader = clients::loader(&sim.pd).await?;
    let pairs: Vec<_> = keys
        .iter()
        .map(|k| (k.clone(), the_value.clone()))
        .collect();
    clients::load(&loader, pairs, 256).await?;
    drop(loader);

    let client = Client::connect(kind, &sim.pd, &mut control, &regions).await?;
    let keys = Arc::new(keys);
    let warm = read_all(&client, &keys, tasks, Duration::from_secs(60)).await;
    if warm.read != keys.len() {
        return Err(format!(
            "warm-up read {} of {} keys; last error: {:?}",
            warm.read,
            keys.len(),
            warm.last_error
        ));
    }

    control.commands(&stale_transfers(&led)?).await?;
    control
        .command(&format!("hang {FAILING_STORE} connect"))
        .await?;
    let started = Instant::now();
    let run = read_all(&client, &keys, tasks, cap).await;
    let took = started.elapsed();
    let at = |fraction: f64| -> String {
        let mut done = run.done_at.clone();
        done.sort();
        let index = ((fraction * keys.len() as f64).ceil() as usize).max(1) - 1;
        done.get(index)
            .map(|d| format!("{:.2} s", d.as_secs_f64()))
            .unwrap_or_else(|| "never".to_owned())
    };
    let timeline = if run.done_at.is_empty() {
        "none read".to_owned()
    } else {
        format!(
            "first key read after {}, half after {}, 99 % after {}",
            at(0.0),
            at(0.5),
            at(0.99)
        )
    };
    let outcome = if run.read == keys.len() {
        Outcome::Finished {
            took,
            detail: timeline,
        }
    } else {
        Outcome::NotFinished {
            cap,
            progress: format!("{} of {} keys read ({timeline})", run.read, keys.len()),
            errors: error_text(&run.first_error, &run.last_error),
        }
    };
    let mut done_at = run.done_at;
    done_at.sort();
    Ok(DeadStore { outcome, done_at })
}

fn error_text(first: &Option<String>, last: &Option<String>) -> String {
    match (first, last) {
        (None, _) => "no client error".to_owned(),
        (Some(f), Some(l)) if f != l => format!("first error: {f}; last error: {l}"),
        (Some(f), _) => format!("error: {f}"),
    }
}

struct ReadAll {
    read: usize,
    /// When each key was read, from the start.
    done_at: Vec<Duration>,
    first_error: Option<String>,
    last_error: Option<String>,
}

/// `tasks` tasks take keys in turn and read each until it answers with a
/// value, all within `cap`.
async fn read_all(
    client: &Client,
    keys: &Arc<Vec<Vec<u8>>>,
    tasks: usize,
    cap: Duration,
) -> ReadAll {
    let started = Instant::now();
    let deadline = started + cap;
    let next = Arc::new(AtomicUsize::new(0));
    let done_at = Arc::new(std::sync::Mutex::new(Vec::new()));
    let errors: Arc<std::sync::Mutex<(Option<String>, Option<String>)>> =
        Arc::new(std::sync::Mutex::new((None, None)));
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..tasks {
        let (client, keys, next, done_at, errors) = (
            client.clone(),
            keys.clone(),
            next.clone(),
            done_at.clone(),
            errors.clone(),
        );
        let note = move |error: String| {
            if let Ok(mut e) = errors.lock() {
                if e.0.is_none() {
                    e.0 = Some(error.clone());
                }
                e.1 = Some(error);
            }
        };
        set.spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(k) = keys.get(i) else { return };
                loop {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return;
                    }
                    match client.get_within(k, left).await {
                        Ok(Some(_)) => {
                            if let Ok(mut d) = done_at.lock() {
                                d.push(started.elapsed());
                            }
                            break;
                        }
                        Ok(None) => note("key not found".to_owned()),
                        Err(error) => note(error),
                    }
                }
            }
        });
    }
    // Every task stops by the deadline; the timeout is a second guard.
    let _ = tokio::time::timeout(cap + Duration::from_secs(5), async {
        while set.join_next().await.is_some() {}
    })
    .await;
    set.abort_all();
    let done_at = done_at.lock().map(|d| d.clone()).unwrap_or_default();
    let (first_error, last_error) = errors.lock().map(|e| e.clone()).unwrap_or_default();
    ReadAll {
        read: done_at.len(),
        done_at,
        first_error,
        last_error,
    }
}
