//! Lock waiting and deadlock detection, cluster-wide, as TiKV's lock
//! manager does them for pessimistic lock requests in its legacy wake-up
//! mode (`WakeUpModeNormal`).
//!
//! What TiKV does, and so what this module does:
//!
//! - A pessimistic lock request that meets another transaction's lock
//!   (prewritten or pessimistic, expired or not) waits on that one key for
//!   the lock's release, up to its `wait_timeout`: 0 is the server's
//!   `wait-for-lock-timeout` (1 s by default), a positive value is capped
//!   at it, a negative one does not wait. The request holds none of its
//!   other keys while it waits.
//! - When the lock is released (commit, rollback, cleanup, resolve,
//!   pessimistic rollback, a status check that rolls it back), the waiter
//!   with the smallest start ts is woken at once; the others that were
//!   already waiting are woken `wake-up-delay-duration` (20 ms) after the
//!   key's latest release, in start-ts order, stopping at the first that
//!   came after it. A woken request fails with a write conflict (reason
//!   `PessimisticRetry`, the released lock's start and commit ts; 0 for a
//!   rollback), and the client retries at a new `for_update_ts`.
//! - A waiter that times out fails with `KeyIsLocked` and the blocking
//!   lock, which the client then resolves.
//! - Unless the request is the transaction's first lock (it then holds
//!   nothing another could wait on), its wait adds an edge from its
//!   transaction to the lock's in a wait-for graph. An edge that would
//!   close a cycle is not added: that request fails at once with
//!   `KeyError.deadlock`, and the others keep waiting. Edges expire after
//!   the wait timeout and go when their waiter stops waiting.
//!
//! Everything here is plain state, changed under the cluster's lock; the
//! store's request future waits on the channel a waiter gets.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::time::Instant;

use crate::proto::{deadlock, kvrpcpb};
use crate::store::StoreCommand;
use tikv_plan_proto::methods::KvMethod;

/// TiKV's default `pessimistic-txn.wait-for-lock-timeout`.
pub const DEFAULT_WAIT_FOR_LOCK_TIMEOUT: Duration = Duration::from_millis(1000);

/// TiKV's default `pessimistic-txn.wake-up-delay-duration`.
pub const DEFAULT_WAKE_UP_DELAY: Duration = Duration::from_millis(20);

/// The server's lock-wait settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockWaitConfig {
    /// The wait of a request that asks for the server's default, and the
    /// longest any request waits; also how long a wait-for edge lives.
    pub wait_for_lock_timeout: Duration,
    /// How long after a key's latest release its other waiters are woken.
    pub wake_up_delay: Duration,
}

impl Default for LockWaitConfig {
    fn default() -> Self {
        LockWaitConfig {
            wait_for_lock_timeout: DEFAULT_WAIT_FOR_LOCK_TIMEOUT,
            wake_up_delay: DEFAULT_WAKE_UP_DELAY,
        }
    }
}

/// How often lock waiting happened, cluster-wide.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LockWaitStats {
    /// Requests that started waiting.
    pub waits: u64,
    /// Waiters woken by a release.
    pub woken: u64,
    /// Waiters whose wait ran out.
    pub timed_out: u64,
    /// Requests answered with a deadlock.
    pub deadlocks: u64,
}

/// The key hash TiKV puts in wait-for edges and deadlock errors:
/// farmhash's fingerprint64 of the raw key.
pub fn key_hash(raw_key: &[u8]) -> u64 {
    farmhash::fingerprint64(raw_key)
}

/// Builds the answer of a request whose lock wait ended with a key error.
pub(crate) type WaitAnswer<C> = fn(kvrpcpb::KeyError) -> <C as KvMethod>::Response;

/// What a request that met a lock asks for.
#[derive(Debug, Clone)]
pub(crate) struct WaitAsk {
    /// The waiting transaction.
    pub(crate) start_ts: u64,
    /// The request's `wait_timeout`, as sent.
    pub(crate) wait_timeout: i64,
    pub(crate) is_first_lock: bool,
    /// The key waited on, as sent (raw) and encoded.
    pub(crate) raw_key: Vec<u8>,
    pub(crate) encoded_key: Vec<u8>,
    /// The waiting transaction's primary key.
    pub(crate) primary: Vec<u8>,
    pub(crate) resource_group_tag: Vec<u8>,
    /// The lock met.
    pub(crate) lock: kvrpcpb::LockInfo,
}

/// Why a waiter stopped waiting before its timeout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WokenBy {
    /// The start ts of the released lock.
    pub(crate) lock_ts: u64,
    /// Its commit ts; 0 when it was rolled back.
    pub(crate) commit_ts: u64,
}

/// What becomes of a request that met a lock.
pub(crate) enum Entered {
    /// It does not wait (`wait_timeout` < 0): the lock error stands.
    NoWait,
    /// Its wait would close a cycle: fail it with this error now.
    Deadlock(Box<kvrpcpb::KeyError>),
    /// It waits: for the channel, until `deadline`.
    Waiting(Waiting),
}

/// A request waiting for a lock.
pub(crate) struct Waiting {
    pub(crate) ticket: Ticket,
    pub(crate) woken: oneshot::Receiver<WokenBy>,
    pub(crate) deadline: Instant,
}

/// Names one waiter, to take it out again.
#[derive(Debug, Clone)]
pub(crate) struct Ticket {
    encoded_key: Vec<u8>,
    start_ts: u64,
    token: u64,
    holder: u64,
    hash: u64,
    /// Whether the wait added (or joined) a wait-for edge.
    in_graph: bool,
}

/// One waiter in a key's queue.
struct Waiter {
    /// The key's wake index when it started waiting: a delayed wake-up
    /// takes only waiters from before the latest release.
    wake_index: u64,
    wake: oneshot::Sender<WokenBy>,
}

/// The waiters on one key.
#[derive(Default)]
struct KeyQueue {
    /// By (start ts, arrival): the smallest start ts is woken first.
    waiters: BTreeMap<(u64, u64), Waiter>,
    /// How many releases this key has seen.
    wake_index: u64,
    /// The latest release, which delayed wake-ups report.
    last_release: Option<WokenBy>,
    /// When the delayed wake-up of the others is due, if one is pending.
    delayed_until: Option<Instant>,
}

/// An edge of the wait-for graph: a transaction waits for another's lock.
#[derive(Debug, Clone)]
struct Edge {
    /// The keys waited on, first first, with their hashes.
    keys: Vec<(u64, Vec<u8>)>,
    resource_group_tag: Vec<u8>,
    last_detect: Instant,
}

/// The cluster's lock waiters and wait-for graph.
#[derive(Default)]
pub(crate) struct LockWaits {
    pub(crate) config: LockWaitConfig,
    queues: HashMap<Vec<u8>, KeyQueue>,
    /// Waiting transaction → lock holder → edge.
    graph: HashMap<u64, BTreeMap<u64, Edge>>,
    next_token: u64,
    pub(crate) stats: LockWaitStats,
}

impl std::fmt::Debug for LockWaits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LockWaits")
            .field("config", &self.config)
            .field("waiting", &self.waiting())
            .field(
                "edges",
                &self.graph.values().map(BTreeMap::len).sum::<usize>(),
            )
            .field("stats", &self.stats)
            .finish()
    }
}

impl LockWaits {
    /// The wait a request asks for, under the server's ceiling; `None`:
    /// no wait.
    pub(crate) fn wait_for(&self, wait_timeout: i64) -> Option<Duration> {
        let ceiling = self.config.wait_for_lock_timeout;
        match wait_timeout {
            t if t < 0 => None,
            0 => Some(ceiling),
            t => Some(Duration::from_millis(t.unsigned_abs()).min(ceiling)),
        }
    }

    /// `command` was answered `response`: when it met a lock, it waits for
    /// it (returned: what it waits on, and how to answer it when the wait
    /// ends), or `response` becomes its deadlock error, or it does not wait.
    pub(crate) fn meet<C: StoreCommand>(
        &mut self,
        command: &C,
        response: &mut C::Response,
        now: Instant,
    ) -> Option<(WaitAsk, Waiting, WaitAnswer<C>)> {
        let (ask, answer) = command.lock_wait(response)?;
        match self.enter(&ask, now) {
            Entered::NoWait => None,
            Entered::Deadlock(error) => {
                *response = answer(*error);
                None
            }
            Entered::Waiting(wait) => Some((ask, wait, answer)),
        }
    }

    /// A request met a lock: it waits, or fails with a deadlock, or does
    /// not wait at all.
    pub(crate) fn enter(&mut self, ask: &WaitAsk, now: Instant) -> Entered {
        let Some(wait) = self.wait_for(ask.wait_timeout) else {
            return Entered::NoWait;
        };
        let holder = ask.lock.lock_version;
        let hash = key_hash(&ask.raw_key);
        let mut in_graph = false;
        if !ask.is_first_lock {
            if let Some(error) = self.detect(ask, hash, now) {
                self.stats.deadlocks += 1;
                return Entered::Deadlock(Box::new(error));
            }
            in_graph = true;
        }
        let token = self.next_token;
        self.next_token += 1;
        let (wake, woken) = oneshot::channel();
        let queue = self.queues.entry(ask.encoded_key.clone()).or_default();
        queue.waiters.insert(
            (ask.start_ts, token),
            Waiter {
                wake_index: queue.wake_index,
                wake,
            },
        );
        self.stats.waits += 1;
        Entered::Waiting(Waiting {
            ticket: Ticket {
                encoded_key: ask.encoded_key.clone(),
                start_ts: ask.start_ts,
                token,
                holder,
                hash,
                in_graph,
            },
            woken,
            deadline: now + wait,
        })
    }

    /// The waiter stopped waiting (woken, timed out, or its request gone):
    /// it leaves its key's queue and its edge leaves the graph.
    pub(crate) fn leave(&mut self, ticket: &Ticket) {
        if let Some(queue) = self.queues.get_mut(&ticket.encoded_key) {
            queue.waiters.remove(&(ticket.start_ts, ticket.token));
            if queue.waiters.is_empty() && queue.delayed_until.is_none() {
                self.queues.remove(&ticket.encoded_key);
            }
        }
        if !ticket.in_graph {
            return;
        }
        if let Some(edges) = self.graph.get_mut(&ticket.start_ts) {
            if let Some(edge) = edges.get_mut(&ticket.holder) {
                if let Some(i) = edge.keys.iter().position(|(h, _)| *h == ticket.hash) {
                    edge.keys.remove(i);
                }
                if edge.keys.is_empty() {
                    edges.remove(&ticket.holder);
                }
            }
            if edges.is_empty() {
                self.graph.remove(&ticket.start_ts);
            }
        }
    }

    /// How many requests wait now.
    pub(crate) fn waiting(&self) -> usize {
        self.queues.values().map(|q| q.waiters.len()).sum()
    }

    /// A timed-out waiter is counted.
    pub(crate) fn timed_out(&mut self) {
        self.stats.timed_out += 1;
    }

    /// The lock of `lock_ts` on `encoded_key` is gone (committed at
    /// `commit_ts`, or rolled back: 0): the first waiter is woken now.
    /// Returns when the others are due to be woken, if any wait, for the
    /// caller to run [`wake_delayed`](Self::wake_delayed) then; `None` when
    /// no such wake-up is needed or one is already on its way (its due
    /// time has moved).
    pub(crate) fn released(
        &mut self,
        encoded_key: &[u8],
        lock_ts: u64,
        commit_ts: u64,
        now: Instant,
    ) -> Option<Instant> {
        let queue = self.queues.get_mut(encoded_key)?;
        let by = WokenBy { lock_ts, commit_ts };
        // The head, or the next one whose request is still there.
        while let Some((_, waiter)) = queue.waiters.pop_first() {
            if waiter.wake.send(by).is_ok() {
                self.stats.woken += 1;
                break;
            }
        }
        queue.wake_index += 1;
        queue.last_release = Some(by);
        if queue.waiters.is_empty() {
            if queue.delayed_until.is_none() {
                self.queues.remove(encoded_key);
            }
            return None;
        }
        let due = now + self.config.wake_up_delay;
        let pending = queue.delayed_until.replace(due).is_some();
        (!pending).then_some(due)
    }

    /// Wakes the waiters of `encoded_key` that waited before its latest
    /// release, in start-ts order, stopping at the first that came after
    /// it. Returns a later due time when a release since moved it.
    pub(crate) fn wake_delayed(&mut self, encoded_key: &[u8], now: Instant) -> Option<Instant> {
        let queue = self.queues.get_mut(encoded_key)?;
        match queue.delayed_until {
            Some(due) if due > now => return Some(due),
            _ => queue.delayed_until = None,
        }
        let by = queue.last_release?;
        while let Some(entry) = queue.waiters.first_entry() {
            if entry.get().wake_index >= queue.wake_index {
                break;
            }
            if entry.remove().wake.send(by).is_ok() {
                self.stats.woken += 1;
            }
        }
        if queue.waiters.is_empty() {
            self.queues.remove(encoded_key);
        }
        None
    }

    /// Adds the edge `ask.start_ts → holder` unless it closes a cycle;
    /// then returns the deadlock error instead.
    fn detect(&mut self, ask: &WaitAsk, hash: u64, now: Instant) -> Option<kvrpcpb::KeyError> {
        let (waiter, holder) = (ask.start_ts, ask.lock.lock_version);
        let ttl = self.config.wait_for_lock_timeout;
        if let Some(edge) = self.graph.get_mut(&waiter).and_then(|e| e.get_mut(&holder)) {
            if !edge.keys.iter().any(|(h, _)| *h == hash) {
                edge.keys.push((hash, ask.raw_key.clone()));
            }
            edge.last_detect = now;
            return None;
        }
        if let Some(path) = self.path(holder, waiter, ttl, now) {
            return Some(deadlock_error(ask, hash, &path));
        }
        self.graph.entry(waiter).or_default().insert(
            holder,
            Edge {
                keys: vec![(hash, ask.raw_key.clone())],
                resource_group_tag: ask.resource_group_tag.clone(),
                last_detect: now,
            },
        );
        None
    }

    /// A path of live edges from `from` to `to`, as the entries of a wait
    /// chain, depth first; expired edges met on the way are dropped.
    fn path(
        &mut self,
        from: u64,
        to: u64,
        ttl: Duration,
        now: Instant,
    ) -> Option<Vec<deadlock::WaitForEntry>> {
        let mut visited = std::collections::HashSet::new();
        // (transaction, the chain that reached it)
        let mut stack: Vec<(u64, Vec<deadlock::WaitForEntry>)> = vec![(from, Vec::new())];
        while let Some((txn, chain)) = stack.pop() {
            if !visited.insert(txn) {
                continue;
            }
            let Some(edges) = self.graph.get_mut(&txn) else {
                continue;
            };
            edges.retain(|_, edge| edge.last_detect + ttl >= now);
            for (&next, edge) in edges.iter() {
                let mut longer = chain.clone();
                let (hash, key) = edge.keys.first().cloned().unwrap_or_default();
                longer.push(deadlock::WaitForEntry {
                    txn,
                    wait_for_txn: next,
                    key_hash: hash,
                    key,
                    resource_group_tag: edge.resource_group_tag.clone(),
                    ..Default::default()
                });
                if next == to {
                    return Some(longer);
                }
                stack.push((next, longer));
            }
            if edges.is_empty() {
                self.graph.remove(&txn);
            }
        }
        None
    }
}

/// `KeyError.deadlock` for `ask`, whose wait would close the cycle `path`
/// (from the lock's holder back to the asking transaction).
fn deadlock_error(ask: &WaitAsk, hash: u64, path: &[deadlock::WaitForEntry]) -> kvrpcpb::KeyError {
    let mut wait_chain = path.to_vec();
    wait_chain.push(deadlock::WaitForEntry {
        txn: ask.start_ts,
        wait_for_txn: ask.lock.lock_version,
        key_hash: hash,
        key: ask.raw_key.clone(),
        resource_group_tag: ask.resource_group_tag.clone(),
        ..Default::default()
    });
    kvrpcpb::KeyError {
        deadlock: Some(kvrpcpb::Deadlock {
            lock_ts: ask.lock.lock_version,
            lock_key: ask.raw_key.clone(),
            // A key the asking transaction holds that another waits on:
            // the last edge of the path points at it.
            deadlock_key_hash: path.last().map(|e| e.key_hash).unwrap_or_default(),
            wait_chain,
        }),
        ..Default::default()
    }
}

/// The answer of a waiter woken by a release: a write conflict the client
/// retries at a new `for_update_ts`.
pub(crate) fn woken_error(ask: &WaitAsk, by: WokenBy) -> kvrpcpb::KeyError {
    let conflict = kvrpcpb::WriteConflict {
        start_ts: ask.start_ts,
        conflict_ts: by.lock_ts,
        conflict_commit_ts: by.commit_ts,
        key: ask.raw_key.clone(),
        primary: ask.primary.clone(),
        reason: kvrpcpb::write_conflict::Reason::PessimisticRetry as i32,
    };
    kvrpcpb::KeyError {
        retryable: format!("{conflict:?}"),
        conflict: Some(conflict),
        ..Default::default()
    }
}

/// The answer of a waiter whose wait ran out: the lock it waited for.
pub(crate) fn timed_out_error(ask: &WaitAsk) -> kvrpcpb::KeyError {
    kvrpcpb::KeyError {
        locked: Some(ask.lock.clone()),
        ..Default::default()
    }
}

impl crate::cluster::Shared {
    /// Wakes the waiters of the locks a command released (see
    /// [`LockWaits::released`]).
    pub(crate) fn wake_released(
        self: &std::sync::Arc<Self>,
        state: &mut crate::state::ClusterState,
        released: Vec<(Vec<u8>, u64, u64)>,
        now: Instant,
    ) {
        for (key, lock_ts, commit_ts) in released {
            if let Some(due) = state.lock_waits.released(&key, lock_ts, commit_ts, now) {
                self.wake_waiters_at(key, due);
            }
        }
    }

    /// Waits for the lock `ask` met, until it is released or the wait
    /// runs out; returns the key error the request then fails with.
    pub(crate) async fn wait_for_lock(&self, ask: &WaitAsk, wait: Waiting) -> kvrpcpb::KeyError {
        let Waiting {
            ticket,
            woken,
            deadline,
        } = wait;
        // The waiter leaves the queue and the graph however the wait ends,
        // its request dropped (the client gone) included.
        let _leave = LeaveOnDrop {
            shared: self,
            ticket,
        };
        match tokio::time::timeout_at(deadline, woken).await {
            Ok(Ok(by)) => woken_error(ask, by),
            Ok(Err(_)) | Err(_) => {
                self.lock().lock_waits.timed_out();
                timed_out_error(ask)
            }
        }
    }
    /// Wakes the remaining waiters on `key` at `due` (and later, while
    /// new releases of the key push that time out).
    pub(crate) fn wake_waiters_at(self: &std::sync::Arc<Self>, key: Vec<u8>, due: Instant) {
        let shared = std::sync::Arc::downgrade(self);
        tokio::spawn(async move {
            let mut due = due;
            loop {
                tokio::time::sleep_until(due).await;
                let Some(shared) = shared.upgrade() else {
                    return;
                };
                let next = shared.lock().lock_waits.wake_delayed(&key, Instant::now());
                match next {
                    Some(later) => due = later,
                    None => return,
                }
            }
        });
    }
}

impl crate::SimCluster {
    /// The stores' lock-wait settings.
    pub fn lock_wait_config(&self) -> LockWaitConfig {
        self.state().lock_waits.config
    }

    /// Changes the lock-wait settings (TiKV changes them online too); a
    /// request already waiting keeps its deadline.
    pub fn set_lock_wait_config(&self, config: LockWaitConfig) {
        self.state().lock_waits.config = config;
    }

    /// How often requests waited, were woken, timed out or met a deadlock.
    pub fn lock_wait_stats(&self) -> LockWaitStats {
        self.state().lock_waits.stats
    }

    /// How many requests wait for locks now.
    pub fn lock_waiters(&self) -> usize {
        self.state().lock_waits.waiting()
    }
}

/// Takes a waiter out of the lock waits when its wait ends.
struct LeaveOnDrop<'a> {
    shared: &'a crate::cluster::Shared,
    ticket: Ticket,
}

impl Drop for LeaveOnDrop<'_> {
    fn drop(&mut self) {
        self.shared.lock().lock_waits.leave(&self.ticket);
    }
}
