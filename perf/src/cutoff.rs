//! The client cut off from a live leader's store (`cut-clients STORE
//! MODE`): the time to the first successful write after the cut (the first
//! read is timed by [`faults::failover`](crate::faults::failover) with
//! [`Fault::CutClients`](crate::faults::Fault::CutClients)), and the
//! throughput of gets and puts reaching the leader through a proxy, as a
//! ratio of the direct path's in the same run.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clients::{self, Client, Kind};
use crate::faults::Outcome;
use crate::sim::{Control, Sim};
use crate::workload::{key, value, Request};

/// The store cut off from the client.
const CUT_STORE: u64 = 1;

/// Time to the first successful put of a key after the client is cut off
/// from the store leading its Region (`mode`: `refuse` or `drop`). The
/// client has read the key once before.
pub async fn first_write(
    sim_binary: &Path,
    kind: Kind,
    cap: Duration,
    mode: &str,
) -> Result<Outcome, String> {
    let sim = Sim::start(sim_binary, 8)?;
    let mut control = Control::connect(&sim.control).await?;
    let regions = control.regions().await?;
    let region = regions
        .iter()
        .find(|r| r.leader.map(|l| l.store_id) == Some(CUT_STORE))
        .ok_or_else(|| format!("no Region led from store {CUT_STORE}"))?;
    let the_key = key(&region.key_prefix()?, 0);
    let the_value = value();
    let client = Client::connect(kind, &sim.pd, &mut control, &regions).await?;
    client
        .batch_put(vec![(the_key.clone(), the_value.clone())])
        .await?;
    client.get_within(&the_key, Duration::from_secs(10)).await?;
    control
        .command(&format!("cut-clients {CUT_STORE} {mode}"))
        .await?;
    let started = Instant::now();
    let (mut attempts, mut first, mut last) = (0u64, None, None);
    loop {
        let left = cap.saturating_sub(started.elapsed());
        if left.is_zero() {
            let errors = match (&first, &last) {
                (None, _) => "no client error".to_owned(),
                (Some(f), Some(l)) if f != l => format!("first error: {f}; last error: {l}"),
                (Some(f), _) => format!("error: {f}"),
            };
            return Ok(Outcome::NotFinished {
                cap,
                progress: format!("{attempts} write(s) tried"),
                errors,
            });
        }
        attempts += 1;
        let put = Request::Put {
            region: 0,
            key: &the_key,
            value: &the_value,
        };
        match tokio::time::timeout(left, client.run(&put)).await {
            Ok(Ok(())) => {
                return Ok(Outcome::Finished {
                    took: started.elapsed(),
                    detail: format!("{attempts} write(s)"),
                })
            }
            Ok(Err(e)) => {
                first.get_or_insert_with(|| e.clone());
                last = Some(e);
            }
            Err(_) => last = Some(format!("no answer within {left:?}")),
        }
    }
}

/// Operations per second of one closed loop of `tasks` tasks.
#[derive(Debug, Clone, Copy, Default)]
pub struct Rates {
    /// Gets per second.
    pub get: f64,
    /// Puts per second.
    pub put: f64,
}

/// The proxy's throughput against the direct path's, round by round.
#[derive(Debug, Clone, Default)]
pub struct ProxyThroughput {
    /// Each round's direct rates.
    pub direct: Vec<Rates>,
    /// Each round's rates through a proxy.
    pub proxied: Vec<Rates>,
    /// Calls the stores forwarded over the whole run.
    pub forwarded: u64,
}

impl ProxyThroughput {
    /// The median of the per-round ratios, proxied over direct, of gets and
    /// of puts.
    pub fn ratios(&self) -> (f64, f64) {
        let ratio = |f: fn(&Rates) -> f64| {
            let mut r: Vec<f64> = self
                .direct
                .iter()
                .zip(&self.proxied)
                .map(|(d, p)| f(p) / f(d))
                .collect();
            r.sort_by(f64::total_cmp);
            r.get(r.len() / 2).copied().unwrap_or(f64::NAN)
        };
        (ratio(|r| r.get), ratio(|r| r.put))
    }
}

/// `tasks` tasks send `op` on keys of Regions led from [`CUT_STORE`] back to
/// back for `seconds`; the rate of successes.
async fn rate(
    client: &Client,
    keys: &Arc<Vec<Vec<u8>>>,
    tasks: usize,
    put: bool,
    for_: Duration,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let until = Instant::now() + for_;
    let mut set = tokio::task::JoinSet::new();
    for task in 0..tasks {
        let (client, keys, done) = (client.clone(), keys.clone(), done.clone());
        set.spawn(async move {
            let value = value();
            let mut i = task;
            while Instant::now() < until {
                let key = &keys[i % keys.len()];
                i += tasks;
                let request = if put {
                    Request::Put {
                        region: 0,
                        key,
                        value: &value,
                    }
                } else {
                    Request::Get { region: 0, key }
                };
                if client.run(&request).await.is_ok() {
                    done.fetch_add(1, Ordering::Relaxed);
                }
            }
        });
    }
    while set.join_next().await.is_some() {}
    done.load(Ordering::Relaxed) as f64 / for_.as_secs_f64()
}

/// Waits (at most 10 s) until the client reaches every store directly
/// again.
async fn direct_again(client: &Client) -> Result<(), String> {
    let until = Instant::now() + Duration::from_secs(10);
    while client.forwarded_stores().unwrap_or(0) > 0 {
        if Instant::now() > until {
            return Err("the client still forwards 10 s after the cut healed".to_owned());
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(())
}

/// Gets and puts at `tasks` tasks on keys of the Regions led from
/// [`CUT_STORE`], `rounds` times directly and through a proxy in turn
/// (`cut-clients STORE refuse` between them), each for `each`.
pub async fn proxy_throughput(
    sim_binary: &Path,
    kind: Kind,
    tasks: usize,
    rounds: usize,
    each: Duration,
) -> Result<ProxyThroughput, String> {
    let sim = Sim::start(sim_binary, 24)?;
    let mut control = Control::connect(&sim.control).await?;
    let regions = control.regions().await?;
    let mut keys = Vec::new();
    for r in regions
        .iter()
        .filter(|r| r.leader.map(|l| l.store_id) == Some(CUT_STORE))
    {
        let prefix = r.key_prefix()?;
        keys.extend((0..16).map(|i| key(&prefix, i)));
    }
    if keys.is_empty() {
        return Err(format!("no Region led from store {CUT_STORE}"));
    }
    let loader = clients::loader(&sim.pd).await?;
    let pairs = keys.iter().map(|k| (k.clone(), value())).collect();
    clients::load(&loader, pairs, 256).await?;
    drop(loader);
    let client = Client::connect(kind, &sim.pd, &mut control, &regions).await?;
    let keys = Arc::new(keys);
    // Warm-up: every Region cached, connections open.
    rate(&client, &keys, tasks, false, Duration::from_millis(500)).await;
    let mut result = ProxyThroughput::default();
    for _ in 0..rounds {
        result.direct.push(Rates {
            get: rate(&client, &keys, tasks, false, each).await,
            put: rate(&client, &keys, tasks, true, each).await,
        });
        control
            .command(&format!("cut-clients {CUT_STORE} refuse"))
            .await?;
        // The first requests find the route; the measure starts after.
        rate(&client, &keys, tasks, false, Duration::from_millis(500)).await;
        result.proxied.push(Rates {
            get: rate(&client, &keys, tasks, false, each).await,
            put: rate(&client, &keys, tasks, true, each).await,
        });
        control
            .command(&format!("uncut-clients {CUT_STORE}"))
            .await?;
        direct_again(&client).await?;
    }
    for store in 1..=3u64 {
        let lines = control.command(&format!("counters {store}")).await?;
        for line in lines {
            if let Some(rest) = line.strip_prefix("forwarded ") {
                let n = rest.split_whitespace().next().unwrap_or("0");
                result.forwarded += n.parse::<u64>().unwrap_or(0);
            }
        }
    }
    Ok(result)
}
