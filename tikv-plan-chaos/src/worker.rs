//! The raw workload: the tasks that call the clients, their clients, and
//! the reads after the faults are lifted (shared by the loopback chaos run
//! and the deterministic simulation).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use tikv_plan::{Config, RawClient, ReplicaRead};

use crate::{mix_seed, OpKind, OpResult, Recorder, FINAL_READER};

/// One workload client and the bound of its operations.
#[derive(Clone)]
pub(crate) struct TaskClient {
    /// In atomic mode, for everything but range and batch deletes.
    pub(crate) client: RawClient,
    /// The same client (shared connections and caches) without atomic
    /// mode, for what atomic mode refuses (as client-rust does): a range
    /// delete (TiKV cannot delete a range atomically) and a batch delete.
    pub(crate) plain: RawClient,
    /// The request deadline plus [`DEADLINE_MARGIN`](crate::DEADLINE_MARGIN):
    /// every call, a scan across Regions included, ends by then.
    pub(crate) bound: Duration,
}

/// The workload's clients, one per task, made by `connect` from `base` or
/// `short` (the timeouts of the task's kind): task `i` gets, by `i % 4`, the
/// client shared with default timeouts, the one shared with short
/// timeouts, one of its own with short timeouts, or one of its own with
/// default timeouts. With `replica_reads`, task `i`'s reads go, by `i % 3`,
/// to the leader, a follower first, or any replica first
/// ([`replica_read_of`]).
pub(crate) async fn task_clients<F, Fut>(
    tasks: usize,
    base: &Config,
    short: &Config,
    replica_reads: bool,
    connect: F,
) -> Result<Vec<TaskClient>, tikv_plan::Error>
where
    F: Fn(Config) -> Fut,
    Fut: std::future::Future<Output = Result<RawClient, tikv_plan::Error>>,
{
    let make = |config: &Config| {
        let bound = config.request_deadline + crate::DEADLINE_MARGIN;
        let raw = connect(config.clone());
        async move {
            let plain = raw.await?;
            Ok::<_, tikv_plan::Error>(TaskClient {
                client: plain.with_atomic_for_cas(),
                plain,
                bound,
            })
        }
    };
    let shared_default = make(base).await?;
    let shared_short = make(short).await?;
    let mut clients = Vec::with_capacity(tasks);
    for task in 0..tasks {
        let mut client = match task % 4 {
            0 => shared_default.clone(),
            1 => shared_short.clone(),
            2 => make(short).await?,
            _ => make(base).await?,
        };
        if replica_reads {
            let replica = replica_read_of(task);
            client.client = client.client.with_replica_read(replica);
            client.plain = client.plain.with_replica_read(replica);
        }
        clients.push(client);
    }
    Ok(clients)
}

/// Where task `task`'s reads go in a run with replica reads: by `task % 3`,
/// the leader, a follower first, or any replica first.
pub(crate) fn replica_read_of(task: usize) -> ReplicaRead {
    match task % 3 {
        0 => ReplicaRead::Leader,
        1 => ReplicaRead::Follower,
        _ => ReplicaRead::Mixed,
    }
}

/// Reads every key with `reader` (up to five tries each) after every fault
/// is lifted, recording each read as the [`FINAL_READER`]'s.
pub(crate) async fn read_back(reader: &RawClient, keys: &[Vec<u8>], recorder: &Recorder) {
    for key in keys {
        for _attempt in 0..5 {
            let invoke = recorder.now();
            let result = reader.get(key.clone()).await;
            let complete = Some(recorder.now());
            let kind = OpKind::Get { key: key.clone() };
            let ok = result.is_ok();
            let result = match result {
                Ok(v) => OpResult::Value(v),
                Err(e) => OpResult::failed(&e),
            };
            recorder.record(FINAL_READER, invoke, complete, kind, result);
            if ok {
                break;
            }
        }
    }
}

/// One workload task.
pub(crate) struct Worker {
    task: usize,
    client: TaskClient,
    recorder: Arc<Recorder>,
    rng: fastrand::Rng,
    keys: Vec<Vec<u8>>,
    hot_keys: usize,
    /// The last value this task saw per key (its compare-and-swap guess).
    seen: HashMap<Vec<u8>, Option<Vec<u8>>>,
    seq: u64,
    /// Operations started so far.
    ops: usize,
    pause: Duration,
}

impl Worker {
    /// Task `task` of a run seeded `seed`: its own random stream, the first
    /// `hot_keys` keys hot, a pause of up to `pause` between operations.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        task: usize,
        client: TaskClient,
        recorder: Arc<Recorder>,
        seed: u64,
        keys: Vec<Vec<u8>>,
        hot_keys: usize,
        pause: Duration,
    ) -> Self {
        Worker {
            task,
            client,
            recorder,
            rng: fastrand::Rng::with_seed(mix_seed(seed, task as u64 + 1)),
            hot_keys: hot_keys.min(keys.len()),
            keys,
            seen: HashMap::new(),
            seq: 0,
            ops: 0,
            pause,
        }
    }

    pub(crate) async fn run(mut self, stop: Arc<AtomicBool>, hangs: Arc<AtomicU64>) {
        while !stop.load(Ordering::SeqCst) {
            let kind = self.next_op();
            // The client's deadline plus the margin, for every kind (a scan
            // across Regions included).
            let bound = self.client.bound;
            let invoke = self.recorder.now();
            // Generous: an operation past `bound` is already a failure;
            // this only keeps a stuck one from stalling the run.
            let give_up = bound * 2 + Duration::from_secs(5);
            // Range and batch deletes are refused in atomic mode (as in
            // client-rust).
            let client = match kind {
                OpKind::DeleteRange { .. } | OpKind::BatchDelete { .. } => {
                    self.client.plain.clone()
                }
                _ => self.client.client.clone(),
            };
            let call = perform(client, kind.clone());
            let result = match tokio::time::timeout(give_up, call).await {
                Ok(result) => result,
                Err(_) => OpResult::Abandoned,
            };
            let complete = self.recorder.now();
            let took = Duration::from_micros(complete.saturating_sub(invoke));
            let abandoned = matches!(result, OpResult::Abandoned);
            if took > bound || abandoned {
                hangs.fetch_add(1, Ordering::SeqCst);
                tracing::warn!(
                    "chaos: task {} {} took {took:?}, over its bound of {bound:?}",
                    self.task,
                    kind.name()
                );
            }
            self.remember(&kind, &result);
            let complete = (!abandoned).then_some(complete);
            self.recorder
                .record(self.task, invoke, complete, kind, result);
            if !self.pause.is_zero() {
                let pause = self.rng.u64(0..=self.pause.as_millis() as u64);
                tokio::time::sleep(Duration::from_millis(pause)).await;
            }
        }
    }

    fn value(&mut self) -> Vec<u8> {
        self.seq += 1;
        format!("t{}-{}", self.task, self.seq).into_bytes()
    }

    fn key_index(&mut self) -> usize {
        if self.hot_keys > 0 && self.rng.bool() {
            self.rng.usize(0..self.hot_keys)
        } else {
            self.rng.usize(0..self.keys.len())
        }
    }

    fn key(&mut self) -> Vec<u8> {
        let i = self.key_index();
        self.keys[i].clone()
    }

    fn distinct_keys(&mut self, n: usize) -> Vec<Vec<u8>> {
        let mut out: Vec<Vec<u8>> = Vec::with_capacity(n);
        for _ in 0..n * 3 {
            if out.len() >= n {
                break;
            }
            let k = self.key();
            if !out.contains(&k) {
                out.push(k);
            }
        }
        out
    }

    /// A range `[keys[i], keys[i + span])` (unbounded past the last key).
    fn range(&mut self, max_span: usize) -> (Vec<u8>, Vec<u8>) {
        let n = self.keys.len();
        let i = self.rng.usize(0..n);
        let span = self.rng.usize(1..=max_span.max(1));
        let end = self.keys.get(i + span).cloned().unwrap_or_default();
        (self.keys[i].clone(), end)
    }

    fn next_op(&mut self) -> OpKind {
        // The first operations of a task go through every kind once, so
        // even a short run tries them all.
        const EVERY_KIND: [u32; 9] = [0, 20, 30, 38, 57, 65, 73, 76, 78];
        let roll = match EVERY_KIND.get(self.ops) {
            Some(roll) => *roll,
            None => self.rng.u32(0..100),
        };
        self.ops += 1;
        match roll {
            0..20 => OpKind::Get { key: self.key() },
            20..30 => {
                let n = self.rng.usize(2..=4);
                OpKind::BatchGet {
                    keys: self.distinct_keys(n),
                }
            }
            30..38 => {
                let (start, end) = self.range(10);
                OpKind::Scan {
                    start,
                    end,
                    limit: self.rng.u32(1..=12),
                }
            }
            38..57 => OpKind::Put {
                key: self.key(),
                value: self.value(),
            },
            57..65 => {
                let n = self.rng.usize(2..=3);
                let keys = self.distinct_keys(n);
                OpKind::BatchPut {
                    pairs: keys.into_iter().map(|k| (k, self.value())).collect(),
                }
            }
            65..73 => OpKind::Delete { key: self.key() },
            73..76 => {
                let n = self.rng.usize(2..=3);
                OpKind::BatchDelete {
                    keys: self.distinct_keys(n),
                }
            }
            76..78 => {
                let (start, end) = self.range(3);
                OpKind::DeleteRange { start, end }
            }
            _ => {
                let key = self.key();
                let expected = if self.rng.u32(0..100) < 85 {
                    self.seen.get(&key).cloned().flatten()
                } else {
                    None
                };
                OpKind::Cas {
                    key,
                    expected,
                    new: self.value(),
                }
            }
        }
    }

    /// Updates this task's guess of each key's value.
    fn remember(&mut self, kind: &OpKind, result: &OpResult) {
        match (kind, result) {
            (OpKind::Get { key }, OpResult::Value(v)) => {
                self.seen.insert(key.clone(), v.clone());
            }
            (OpKind::BatchGet { .. } | OpKind::Scan { .. }, OpResult::Pairs(pairs)) => {
                for (k, v) in pairs {
                    self.seen.insert(k.clone(), Some(v.clone()));
                }
            }
            (OpKind::Put { key, value }, OpResult::Done) => {
                self.seen.insert(key.clone(), Some(value.clone()));
            }
            (OpKind::Delete { key }, OpResult::Done) => {
                self.seen.insert(key.clone(), None);
            }
            (OpKind::Cas { key, new, .. }, OpResult::Cas { previous, swapped }) => {
                let now = if *swapped {
                    Some(new.clone())
                } else {
                    previous.clone()
                };
                self.seen.insert(key.clone(), now);
            }
            _ => {}
        }
    }
}

/// Calls the client for one operation.
fn perform(client: RawClient, kind: OpKind) -> BoxFuture<'static, OpResult> {
    async move {
        let outcome = match kind {
            OpKind::Get { key } => client.get(key).await.map(OpResult::Value),
            OpKind::BatchGet { keys } => client.batch_get(keys).await.map(pairs_result),
            OpKind::Scan { start, end, limit } => {
                let range: tikv_plan::BoundRange = if end.is_empty() {
                    (start..).into()
                } else {
                    (start..end).into()
                };
                client.scan(range, limit).await.map(pairs_result)
            }
            OpKind::Put { key, value } => client.put(key, value).await.map(|()| OpResult::Done),
            OpKind::BatchPut { pairs } => client.batch_put(pairs).await.map(|()| OpResult::Done),
            OpKind::Delete { key } => client.delete(key).await.map(|()| OpResult::Done),
            OpKind::BatchDelete { keys } => {
                client.batch_delete(keys).await.map(|()| OpResult::Done)
            }
            OpKind::DeleteRange { start, end } => {
                let range: tikv_plan::BoundRange = if end.is_empty() {
                    (start..).into()
                } else {
                    (start..end).into()
                };
                client.delete_range(range).await.map(|()| OpResult::Done)
            }
            OpKind::Cas { key, expected, new } => client
                .compare_and_swap(key, expected, new)
                .await
                .map(|(previous, swapped)| OpResult::Cas { previous, swapped }),
        };
        match outcome {
            Ok(result) => result,
            Err(e) => OpResult::failed(&e),
        }
    }
    .boxed()
}

fn pairs_result(pairs: Vec<tikv_plan::KvPair>) -> OpResult {
    OpResult::Pairs(
        pairs
            .into_iter()
            .map(|p| {
                let (k, v): (tikv_plan::Key, tikv_plan::Value) = p.into();
                (k.into(), v)
            })
            .collect(),
    )
}
