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

/// Time to the first successful read of a key after the store leading its
/// Region goes down (`down STORE`: port closed, connections reset). The
/// client has read the key once before, so it caches the old leader.
pub async fn failover(sim_binary: &Path, kind: Kind, cap: Duration) -> Result<Outcome, String> {
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

    control.commands(&stale_transfers(&led)?).await?;
    control.command(&format!("down {FAILING_STORE}")).await?;
    let started = Instant::now();
    let mut attempts = 0u64;
    let mut first_error: Option<String> = None;
    let mut last_error: Option<String> = None;
    loop {
        let left = cap.saturating_sub(started.elapsed());
        if left.is_zero() {
            return Ok(Outcome::NotFinished {
                cap,
                progress: format!("{attempts} read(s) tried"),
                errors: error_text(&first_error, &last_error),
            });
        }
        attempts += 1;
        match client.get_within(&the_key, left).await {
            Ok(Some(v)) if v == the_value => {
                return Ok(Outcome::Finished {
                    took: started.elapsed(),
                    detail: format!("{attempts} read(s)"),
                })
            }
            Ok(other) => last_error = Some(format!("wrong answer {other:?}")),
            Err(e) => last_error = Some(e),
        }
        if first_error.is_none() {
            first_error = last_error.clone();
        }
    }
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
) -> Result<Outcome, String> {
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
    if run.read == keys.len() {
        Ok(Outcome::Finished {
            took,
            detail: timeline,
        })
    } else {
        Ok(Outcome::NotFinished {
            cap,
            progress: format!("{} of {} keys read ({timeline})", run.read, keys.len()),
            errors: error_text(&run.first_error, &run.last_error),
        })
    }
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
