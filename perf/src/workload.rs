//! The data set, the requests drawn from it, and the closed-loop
//! measurement.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::clients::Client;
use crate::sim::{own_cpu_time, RegionLine, Sim};

/// Key length in bytes.
pub const KEY_LEN: usize = 16;
/// Value length in bytes.
pub const VALUE_LEN: usize = 100;
/// Keys loaded per Region.
pub const KEYS_PER_REGION: usize = 1024;
/// Keys per `batch_get`.
pub const BATCH_KEYS: usize = 100;
/// Pairs per `scan`.
pub const SCAN_LIMIT: u32 = 100;
/// Pre-drawn `batch_get` key sets.
const BATCHES: usize = 64;
/// One request longer than this counts as an error (none should come near).
const REQUEST_BOUND: Duration = Duration::from_secs(10);

/// An operation of the closed loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Op {
    /// `get` of one key.
    Get,
    /// `put` of one key.
    Put,
    /// `batch_get` of [`BATCH_KEYS`] keys spread over every Region.
    BatchGet,
    /// `scan` of [`SCAN_LIMIT`] pairs inside one Region.
    Scan,
    /// An optimistic transaction: begin, `get` of one key, `put` of it,
    /// commit.
    Txn,
    /// A pessimistic transaction: begin, `get_for_update` of one key,
    /// `put` of it, commit.
    PessimisticTxn,
    /// A read-only snapshot at a fresh timestamp: one `get`.
    SnapshotGet,
}

impl Op {
    /// Every operation, in table order.
    pub const ALL: [Op; 7] = [
        Op::Get,
        Op::Put,
        Op::BatchGet,
        Op::Scan,
        Op::Txn,
        Op::PessimisticTxn,
        Op::SnapshotGet,
    ];

    /// True for the transactional operations (the bare call has none).
    pub fn is_txn(self) -> bool {
        matches!(self, Op::Txn | Op::PessimisticTxn | Op::SnapshotGet)
    }

    /// The operation `--ops` names `name`.
    pub fn parse(name: &str) -> Option<Op> {
        match name {
            "get" => Some(Op::Get),
            "put" => Some(Op::Put),
            "batch_get" => Some(Op::BatchGet),
            "scan" => Some(Op::Scan),
            "txn" => Some(Op::Txn),
            "txn_pessimistic" => Some(Op::PessimisticTxn),
            "snapshot_get" => Some(Op::SnapshotGet),
            _ => None,
        }
    }

    /// The name `--ops` takes (and the CSV files use).
    pub fn name(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
            Op::BatchGet => "batch_get",
            Op::Scan => "scan",
            Op::Txn => "txn",
            Op::PessimisticTxn => "txn_pessimistic",
            Op::SnapshotGet => "snapshot_get",
        }
    }

    /// The name shown in tables.
    pub fn label(self) -> &'static str {
        match self {
            Op::Get => "get",
            Op::Put => "put",
            Op::BatchGet => "batch_get 100",
            Op::Scan => "scan 100",
            Op::Txn => "txn get+put",
            Op::PessimisticTxn => "pessimistic txn get+put",
            Op::SnapshotGet => "snapshot get",
        }
    }
}

/// The keys of one `batch_get`, also grouped by Region index for the bare
/// call (which does no routing of its own).
pub struct Batch {
    /// Every key.
    pub keys: Vec<Vec<u8>>,
    /// `(Region index, keys)` per Region the batch touches.
    pub by_region: Vec<(usize, Vec<Vec<u8>>)>,
}

/// One request, borrowed from the layout.
pub enum Request<'a> {
    /// Read one key of Region index `region`.
    Get {
        /// Region index in the layout.
        region: usize,
        /// The key.
        key: &'a [u8],
    },
    /// Write one key.
    Put {
        /// Region index in the layout.
        region: usize,
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// Read a pre-drawn set of keys.
    BatchGet {
        /// The keys.
        batch: &'a Batch,
    },
    /// Scan `[start, end)`, which holds exactly `limit` keys.
    Scan {
        /// Region index in the layout.
        region: usize,
        /// First key.
        start: &'a [u8],
        /// End (exclusive).
        end: &'a [u8],
        /// Pairs wanted.
        limit: u32,
    },
    /// A transaction reading and writing one key.
    Txn {
        /// The key.
        key: &'a [u8],
        /// The value written.
        value: &'a [u8],
        /// Pessimistic (a locking read) or optimistic.
        pessimistic: bool,
    },
    /// A snapshot read of one key.
    SnapshotGet {
        /// The key.
        key: &'a [u8],
    },
}

/// The key `prefix` followed by `index` in decimal, zero-padded to
/// [`KEY_LEN`] bytes.
pub fn key(prefix: &[u8], index: usize) -> Vec<u8> {
    let mut key = prefix.to_vec();
    let digits = KEY_LEN.saturating_sub(prefix.len());
    key.extend_from_slice(format!("{index:0digits$}").as_bytes());
    key
}

/// The value written to every key.
pub fn value() -> Vec<u8> {
    (0..VALUE_LEN).map(|i| b'a' + (i % 26) as u8).collect()
}

/// The benchmark's data set over the sim's Regions.
pub struct Layout {
    /// The sim's Regions, by index.
    pub regions: Vec<RegionLine>,
    /// The keys of each Region, sorted.
    pub keys: Vec<Vec<Vec<u8>>>,
    /// The value of every key.
    pub value: Vec<u8>,
    /// Pre-drawn `batch_get` key sets.
    pub batches: Vec<Batch>,
}

impl Layout {
    /// [`KEYS_PER_REGION`] keys in each Region, each checked to lie inside
    /// its Region.
    pub fn new(regions: Vec<RegionLine>) -> Result<Layout, String> {
        let mut keys = Vec::new();
        for region in &regions {
            let prefix = region.key_prefix()?;
            let region_keys: Vec<Vec<u8>> = (0..KEYS_PER_REGION).map(|i| key(&prefix, i)).collect();
            if let Some(outside) = region_keys.iter().find(|k| !region.contains(k)) {
                return Err(format!(
                    "key {:?} falls outside Region {}",
                    String::from_utf8_lossy(outside),
                    region.id
                ));
            }
            keys.push(region_keys);
        }
        let mut rng = fastrand::Rng::with_seed(14);
        let batches = (0..BATCHES)
            .map(|_| {
                let mut picked: Vec<(usize, usize)> = Vec::new();
                while picked.len() < BATCH_KEYS {
                    let at = (rng.usize(..regions.len()), rng.usize(..KEYS_PER_REGION));
                    if !picked.contains(&at) {
                        picked.push(at);
                    }
                }
                picked.sort();
                let mut by_region: Vec<(usize, Vec<Vec<u8>>)> = Vec::new();
                for (r, i) in &picked {
                    let k = keys[*r][*i].clone();
                    match by_region.last_mut() {
                        Some((last, ks)) if last == r => ks.push(k),
                        _ => by_region.push((*r, vec![k])),
                    }
                }
                // The clients get the keys in drawn (unsorted) order.
                rng.shuffle(&mut picked);
                Batch {
                    keys: picked.iter().map(|(r, i)| keys[*r][*i].clone()).collect(),
                    by_region,
                }
            })
            .collect();
        Ok(Layout {
            regions,
            keys,
            value: value(),
            batches,
        })
    }

    /// Every pair of the data set.
    pub fn pairs(&self) -> Vec<(Vec<u8>, Vec<u8>)> {
        self.keys
            .iter()
            .flatten()
            .map(|k| (k.clone(), self.value.clone()))
            .collect()
    }

    /// A random request of `op`.
    pub fn request(&self, op: Op, rng: &mut fastrand::Rng) -> Request<'_> {
        let region = rng.usize(..self.regions.len());
        match op {
            Op::Get => Request::Get {
                region,
                key: &self.keys[region][rng.usize(..KEYS_PER_REGION)],
            },
            Op::Put => Request::Put {
                region,
                key: &self.keys[region][rng.usize(..KEYS_PER_REGION)],
                value: &self.value,
            },
            Op::BatchGet => Request::BatchGet {
                batch: &self.batches[rng.usize(..self.batches.len())],
            },
            Op::Txn | Op::PessimisticTxn => Request::Txn {
                key: &self.keys[region][rng.usize(..KEYS_PER_REGION)],
                value: &self.value,
                pessimistic: op == Op::PessimisticTxn,
            },
            Op::SnapshotGet => Request::SnapshotGet {
                key: &self.keys[region][rng.usize(..KEYS_PER_REGION)],
            },
            Op::Scan => {
                // Not the last Region: tikv-client 0.4.0 does not treat its
                // empty end key as reached (interop/README.md).
                let region = rng.usize(..self.regions.len().saturating_sub(1).max(1));
                let limit = SCAN_LIMIT as usize;
                let first = rng.usize(..KEYS_PER_REGION - limit);
                Request::Scan {
                    region,
                    start: &self.keys[region][first],
                    end: &self.keys[region][first + limit],
                    limit: SCAN_LIMIT,
                }
            }
        }
    }
}

/// What one closed-loop run measured.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Successful operations.
    pub ops: u64,
    /// Failed operations (wrong answer, error or over the bound).
    pub errors: u64,
    /// The first failure, if any.
    pub first_error: Option<String>,
    /// Wall time from the start until the last task stopped.
    pub elapsed: Duration,
    /// Median latency of the successful operations.
    pub p50: Duration,
    /// 99th percentile latency.
    pub p99: Duration,
    /// CPU time of this process during the run.
    pub cpu: Duration,
    /// CPU time of the sim process during the run.
    pub sim_cpu: Duration,
}

impl Sample {
    /// Operations per second.
    pub fn throughput(&self) -> f64 {
        self.ops as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// Client CPU per operation, in microseconds.
    pub fn cpu_per_op(&self) -> f64 {
        self.cpu.as_secs_f64() * 1e6 / (self.ops.max(1) as f64)
    }

    /// Sim CPU per operation, in microseconds.
    pub fn sim_cpu_per_op(&self) -> f64 {
        self.sim_cpu.as_secs_f64() * 1e6 / (self.ops.max(1) as f64)
    }
}

/// Nearest-rank percentile of sorted latencies in microseconds.
fn percentile(sorted: &[u32], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    let index = rank.clamp(1, sorted.len()) - 1;
    Duration::from_micros(u64::from(sorted[index]))
}

/// `tasks` tasks each issue `op` back to back (closed loop) for `window`.
pub async fn closed_loop(
    client: &Client,
    layout: &Arc<Layout>,
    op: Op,
    tasks: usize,
    window: Duration,
    sim: &Sim,
    seed: u64,
) -> Sample {
    let cpu_before = own_cpu_time();
    let sim_before = sim.cpu_time();
    let start = Instant::now();
    let deadline = start + window;
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let client = client.clone();
            let layout = layout.clone();
            tokio::spawn(async move {
                let mut rng =
                    fastrand::Rng::with_seed(seed.wrapping_mul(1000).wrapping_add(t as u64));
                let mut latencies: Vec<u32> = Vec::with_capacity(4096);
                let mut errors = 0u64;
                let mut first_error = None;
                while Instant::now() < deadline {
                    let request = layout.request(op, &mut rng);
                    let sent = Instant::now();
                    let outcome = tokio::time::timeout(REQUEST_BOUND, client.run(&request)).await;
                    let took = sent.elapsed();
                    match outcome {
                        Ok(Ok(())) => {
                            latencies.push(u32::try_from(took.as_micros()).unwrap_or(u32::MAX))
                        }
                        Ok(Err(e)) => {
                            errors += 1;
                            first_error.get_or_insert(e);
                        }
                        Err(_) => {
                            errors += 1;
                            first_error
                                .get_or_insert(format!("no answer within {REQUEST_BOUND:?}"));
                        }
                    }
                }
                (latencies, errors, first_error)
            })
        })
        .collect();
    let mut all: Vec<u32> = Vec::new();
    let mut sample = Sample::default();
    for handle in handles {
        match handle.await {
            Ok((latencies, errors, first_error)) => {
                all.extend(latencies);
                sample.errors += errors;
                if sample.first_error.is_none() {
                    sample.first_error = first_error;
                }
            }
            Err(e) => {
                sample.errors += 1;
                sample
                    .first_error
                    .get_or_insert(format!("task failed: {e}"));
            }
        }
    }
    sample.elapsed = start.elapsed();
    sample.cpu = own_cpu_time().saturating_sub(cpu_before);
    sample.sim_cpu = sim.cpu_time().saturating_sub(sim_before);
    all.sort_unstable();
    sample.ops = all.len() as u64;
    sample.p50 = percentile(&all, 50.0);
    sample.p99 = percentile(&all, 99.0);
    sample
}

/// `tasks` tasks issue `count` operations of `op` between them, back to
/// back; the first failure ends the run with its error.
pub async fn fixed_count(
    client: &Client,
    layout: &Arc<Layout>,
    op: Op,
    tasks: usize,
    count: u64,
) -> Result<(), String> {
    let tasks = tasks.max(1);
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let client = client.clone();
            let layout = layout.clone();
            let mine = count / tasks as u64 + u64::from((t as u64) < count % tasks as u64);
            tokio::spawn(async move {
                let mut rng = fastrand::Rng::with_seed(t as u64);
                for _ in 0..mine {
                    client.run(&layout.request(op, &mut rng)).await?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for handle in handles {
        handle.await.map_err(|e| format!("task failed: {e}"))??;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_sixteen_bytes_and_sorted_by_index() {
        assert_eq!(key(b"8P", 7), b"8P00000000000007".to_vec());
        assert_eq!(key(b"!", 12).len(), KEY_LEN);
        assert!(key(b"8P", 9) < key(b"8P", 10));
        assert_eq!(value().len(), VALUE_LEN);
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let v: Vec<u32> = (1..=100).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_micros(50));
        assert_eq!(percentile(&v, 99.0), Duration::from_micros(99));
        assert_eq!(percentile(&[7], 99.0), Duration::from_micros(7));
        assert_eq!(percentile(&[], 50.0), Duration::ZERO);
    }
}
