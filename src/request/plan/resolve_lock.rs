//! [`ResolveLock`]: the plan stage that meets other transactions' locks,
//! resolves them and re-runs the request, waiting out live locks by their
//! TTL within the request deadline ([txn.md, "Behaviour we
//! require"](crate::spec::txn#behaviour-we-require)), or, for pessimistic
//! lock requests, for as many attempts and delays as the caller's lock
//! backoff gives. [`CollectWithShard`] collects a
//! pessimistic lock's answers with the keys each shard locked.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::BoxFuture;
use tokio::time::Instant;

use crate::backoff::Backoff;
use crate::pd::PdClient;
use crate::proto::kvrpcpb;
use crate::{Error, Result};

use super::base::{collect_in_order, Merge, ResponseWithShard};
use super::stage::{ShardStage, Stage};
use super::traits::Plan;
use super::traits::Shardable;
use crate::region::RegionWithLeader;
use crate::store::RegionStore;

/// A response whose key errors may carry locks of other transactions,
/// which the [`ResolveLock`](crate::request::ResolveLock) stage resolves.
pub trait HasLocks {
    /// Takes the locks out of the response's key errors, leaving any other
    /// key errors in place.
    fn take_locks(&mut self) -> Vec<kvrpcpb::LockInfo>;
}

impl<T: HasLocks> HasLocks for Vec<T> {
    fn take_locks(&mut self) -> Vec<kvrpcpb::LockInfo> {
        self.iter_mut().flat_map(HasLocks::take_locks).collect()
    }
}

/// The outcome of one resolution pass over some locks.
#[derive(Debug, Clone, PartialEq)]
pub enum ResolvePass {
    /// Every lock was resolved or can be read past: re-run the request now.
    Done,
    /// Some locks are alive; the first of them expires in this long.
    Wait(Duration, Vec<kvrpcpb::LockInfo>),
}

/// Who resolves the locks a plan met: the transactional client's
/// resolver (one per client, shared by its requests), or the one
/// [`PlanBuilder::resolve_lock`](crate::request::PlanBuilder::resolve_lock) makes.
pub trait LockResolve: Send + Sync + 'static {
    /// One pass over `locks` met by a request of a transaction at
    /// `caller_start_ts` (0 for writers, which must not push others'
    /// `min_commit_ts`).
    fn resolve_pass(
        self: Arc<Self>,
        locks: Vec<kvrpcpb::LockInfo>,
        caller_start_ts: u64,
    ) -> BoxFuture<'static, Result<ResolvePass>>;
}

/// The first poll of a live lock; later polls double up to
/// [`MAX_LOCK_POLL`], and never sleep past the lock's expiry.
const FIRST_LOCK_POLL: Duration = Duration::from_millis(5);
/// The longest single sleep while a lock is alive: its holder may commit or
/// roll back any time, which the next pass sees.
const MAX_LOCK_POLL: Duration = Duration::from_millis(500);

/// What a lock request bounded by its backoff leaves of its call when it
/// gives up, for releasing the keys it took (one RPC on each Region).
const LOCK_CALL_RESERVE: Duration = Duration::from_millis(50);

/// How long a request that keeps meeting live locks is sent again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LiveLockWait {
    /// By the locks' TTL, within the deadline: a reader (or a prewrite)
    /// cannot wait on the server, and a fixed backoff would give up
    /// before a TTL can expire ([txn.md, "Behaviour we
    /// require"](crate::spec::txn#behaviour-we-require)).
    ByTtl,
    /// By the caller's lock backoff, as client-rust maps it: every answer
    /// that still carries a live lock (for a pessimistic lock request,
    /// after its wait on the server) spends one of its attempts, and the
    /// request is sent again after that attempt's delay (sooner when the
    /// lock expires first); with the attempts spent, the live locks are
    /// the answer. The deadline bounds it too.
    ByBackoff,
    /// A prewrite of the transaction that started at this ts: by the
    /// locks' TTL while every live lock in its way belongs to a younger
    /// transaction, by the caller's lock backoff once one belongs to an
    /// older transaction ("wait-die"). A prewrite holds the locks it has
    /// placed while it waits, and its holder keeps them alive with
    /// heartbeats, so two prewrites (or a prewrite and a pessimistic
    /// transaction) that each wait for the other's lock would wait out the
    /// whole deadline: TiKV's deadlock detector sees only pessimistic lock
    /// requests. In any such cycle some transaction waits for an older
    /// one; it gives up (its prewrite fails and is rolled back), and the
    /// oldest never does, so one of them always gets through.
    YieldToOlder(u64),
}

/// True when `alive` holds a lock of a transaction older than the one
/// that started at `own_start_ts` (the wait-die rule's "die").
pub(crate) fn meets_older(alive: &[kvrpcpb::LockInfo], own_start_ts: u64) -> bool {
    alive.iter().any(|lock| lock.lock_version < own_start_ts)
}

/// What the stage does after a resolution pass.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum AfterPass {
    /// Send the request again now.
    Rerun,
    /// Sleep this long, then send it again; these locks stand meanwhile.
    Sleep(Duration, Vec<kvrpcpb::LockInfo>),
    /// Stop: these locks still stand
    /// ([`Error::ResolveLockError`](crate::Error::ResolveLockError)).
    GiveUp(Vec<kvrpcpb::LockInfo>),
}

/// The waiting state of one run of the stage: what was resolved, the next
/// poll, and the caller's backoff with the attempts it has left. Time is
/// the driver's: the deadline is checked where the sleep is taken.
#[derive(Debug, Clone)]
pub(crate) struct LockWaiting {
    bound: LiveLockWait,
    backoff: Backoff,
    poll: Duration,
    resolved_before: bool,
}

impl LockWaiting {
    /// Waiting bounded by `bound`, with the whole of `backoff` to spend.
    pub(crate) fn new(bound: LiveLockWait, backoff: Backoff) -> LockWaiting {
        LockWaiting {
            bound,
            backoff,
            poll: FIRST_LOCK_POLL,
            resolved_before: false,
        }
    }

    /// The step after a resolution pass over `met`, the locks the last
    /// answer carried.
    pub(crate) fn after_pass(
        &mut self,
        pass: ResolvePass,
        met: Vec<kvrpcpb::LockInfo>,
    ) -> AfterPass {
        let (expires_in, alive) = match pass {
            // Resolved: re-run at once, unless locks came back right after
            // a resolution (a store that still reports them); then wait as
            // for a live lock instead of spinning.
            ResolvePass::Done if !self.resolved_before => {
                self.resolved_before = true;
                return AfterPass::Rerun;
            }
            ResolvePass::Done => (None, met),
            ResolvePass::Wait(expires_in, alive) => (Some(expires_in), alive),
        };
        let by_backoff = match self.bound {
            LiveLockWait::ByTtl => false,
            LiveLockWait::ByBackoff => true,
            LiveLockWait::YieldToOlder(own_start_ts) => meets_older(&alive, own_start_ts),
        };
        let sleep = if by_backoff {
            match self.backoff.next_delay_duration() {
                Some(delay) => expires_in.map_or(delay, |e| e.min(delay)),
                None => return AfterPass::GiveUp(alive),
            }
        } else {
            let sleep = expires_in.map_or(self.poll, |e| e.min(self.poll));
            self.poll = (self.poll * 2).min(MAX_LOCK_POLL);
            sleep
        };
        AfterPass::Sleep(sleep, alive)
    }
}

/// Runs `inner`; while its result carries locks, resolves them and runs it
/// again. A lock whose transaction is alive is waited for by its TTL, not a
/// fixed backoff (except for a pessimistic lock request, which the lock
/// backoff bounds: see [`RetryOptions`](crate::request::RetryOptions));
/// the whole stage is bounded by `deadline`, after which the locks still
/// alive are returned as [`Error::ResolveLockError`].
pub struct ResolveLock<P: Plan, PdC: PdClient> {
    /// The plan that may meet locks (usually a `RetryableMultiRegion`).
    pub inner: P,
    /// Who resolves them.
    pub resolver: Arc<dyn LockResolve>,
    /// The start ts of the reading transaction (0 for writers: they never
    /// push another transaction's `min_commit_ts`).
    pub caller_start_ts: u64,
    /// The bound on the whole stage.
    pub deadline: Duration,
    /// The lock schedule of the caller's [`RetryOptions`](crate::request::RetryOptions).
    /// No backoff ([`Backoff::no_backoff`], what
    /// [`TransactionOptions::no_resolve_locks`](crate::TransactionOptions::no_resolve_locks)
    /// sets) turns resolution off: the locks met are returned as
    /// [`Error::ResolveLockError`] and nothing is resolved. Any other
    /// schedule resolves and waits live locks out by their TTL within
    /// `deadline`; a transaction's pessimistic lock requests spend it
    /// instead, one attempt per answer that still carries a live lock.
    pub backoff: Backoff,
    /// Whether live locks are waited out by their TTL or by `backoff`.
    pub(crate) live_locks: LiveLockWait,
    /// The PD client type of the plan this stage wraps.
    pub(crate) pd: PhantomData<fn() -> PdC>,
}

impl<P: Plan, PdC: PdClient> Clone for ResolveLock<P, PdC> {
    fn clone(&self) -> Self {
        ResolveLock {
            inner: self.inner.clone(),
            resolver: Arc::clone(&self.resolver),
            caller_start_ts: self.caller_start_ts,
            deadline: self.deadline,
            backoff: self.backoff.clone(),
            live_locks: self.live_locks,
            pd: PhantomData,
        }
    }
}

impl<T: HasLocks> HasLocks for Result<T> {
    fn take_locks(&mut self) -> Vec<kvrpcpb::LockInfo> {
        match self {
            Ok(t) => t.take_locks(),
            Err(_) => Vec::new(),
        }
    }
}

impl<R: HasLocks, S> HasLocks for ResponseWithShard<R, S> {
    fn take_locks(&mut self) -> Vec<kvrpcpb::LockInfo> {
        self.0.take_locks()
    }
}

#[async_trait]
impl<P: Plan, PdC: PdClient> Plan for ResolveLock<P, PdC>
where
    P::Result: HasLocks,
{
    type Result = P::Result;

    fn describe(&self) -> String {
        self.inner.describe()
    }

    fn label(&self) -> &'static str {
        self.inner.label()
    }

    async fn execute(&self) -> Result<Self::Result> {
        let started = Instant::now();
        let mut waiting = LockWaiting::new(self.live_locks, self.backoff.clone());
        // The live locks of the last pass, while they are waited out.
        let mut standing: Option<Vec<crate::proto::kvrpcpb::LockInfo>> = None;
        loop {
            let mut result = match self.inner.execute().await {
                Ok(result) => result,
                Err(e) => return Err(out_of_time(e, standing)),
            };
            let locks = result.take_locks();
            if locks.is_empty() {
                return Ok(result);
            }
            if self.backoff.is_none() {
                return Err(Error::ResolveLockError(locks));
            }
            let pass = match Arc::clone(&self.resolver)
                .resolve_pass(locks.clone(), self.caller_start_ts)
                .await
            {
                Ok(pass) => pass,
                Err(e) => return Err(out_of_time(e, Some(locks))),
            };
            let (sleep, alive) = match waiting.after_pass(pass, locks) {
                AfterPass::Rerun => continue,
                AfterPass::GiveUp(alive) => return Err(Error::ResolveLockError(alive)),
                AfterPass::Sleep(sleep, alive) => (sleep, alive),
            };
            // A lock request keeps part of the call for what its caller does
            // when it gives up (releasing the keys it took): its server
            // waits take half of what is left each time, so without a
            // reserve a short deadline is spent to the last millisecond.
            let reserve = match self.live_locks {
                LiveLockWait::ByTtl | LiveLockWait::YieldToOlder(_) => Duration::ZERO,
                LiveLockWait::ByBackoff => LOCK_CALL_RESERVE,
            };
            let call_left = super::call_deadline::remaining();
            if started.elapsed() + sleep > self.deadline
                || call_left.is_some_and(|l| sleep + reserve >= l)
            {
                return Err(Error::ResolveLockError(alive));
            }
            tokio::time::sleep(sleep).await;
            standing = Some(alive);
        }
    }
}

/// The error of a lock-resolving loop that failed with `error` while
/// `standing` locks were in its way: when the client call's deadline has
/// passed (a server that held a request for them took most of it), the
/// locks still stand, and that is the answer; otherwise `error`.
fn out_of_time(error: Error, standing: Option<Vec<crate::proto::kvrpcpb::LockInfo>>) -> Error {
    let passed = super::call_deadline::remaining().is_some_and(|left| left.is_zero());
    match standing {
        Some(locks) if passed => Error::ResolveLockError(locks),
        _ => error,
    }
}

impl<PdC: PdClient, P: Plan> super::builder::PlanBuilder<PdC, ResolveLock<P, PdC>>
where
    P::Result: HasLocks,
{
    /// Bounds the waiting for live locks by the stage's lock backoff
    /// ([`LiveLockWait::ByBackoff`]) instead of their TTL: for pessimistic
    /// lock requests, which wait on the server at every attempt.
    pub(crate) fn live_locks_by_backoff(self) -> Self {
        self.map_plan(|stage| ResolveLock {
            live_locks: LiveLockWait::ByBackoff,
            ..stage
        })
    }

    /// Waits for younger transactions' live locks by their TTL and for an
    /// older one's by the stage's lock backoff
    /// ([`LiveLockWait::YieldToOlder`]): for the prewrite of the
    /// transaction that started at `own_start_ts`.
    pub(crate) fn live_locks_yielding_to_older(self, own_start_ts: u64) -> Self {
        self.map_plan(|stage| ResolveLock {
            live_locks: LiveLockWait::YieldToOlder(own_start_ts),
            ..stage
        })
    }
}

impl<P: Stage, PdC: PdClient> Stage for ResolveLock<P, PdC>
where
    P::Result: HasLocks,
{
    fn run(&self) -> impl std::future::Future<Output = Result<Self::Result>> + Send + '_ {
        self.execute()
    }

    // Under a retry stage (client-rust's order: `resolve_lock` before
    // `retry_multi_region`), each RPC of the inner plan keeps its own bound;
    // the waiting is bounded by `deadline`, not by one RPC's timeout.
    fn set_rpc_bound(&mut self, bound: Option<Duration>) -> bool {
        self.inner.set_rpc_bound(bound)
    }
}

/// Client-rust's order, `resolve_lock` before `retry_multi_region`: the
/// stage is sharded with the request it wraps, and resolves the locks each
/// Region's answer carries before the retry stage sees it.
#[async_trait]
impl<P: Plan + Shardable + Send + Sync, PdC: PdClient> Shardable for ResolveLock<P, PdC> {
    type Shard = P::Shard;

    async fn shards<PdC2: PdClient>(
        &self,
        pd_client: &Arc<PdC2>,
    ) -> Result<Vec<(Self::Shard, RegionWithLeader)>> {
        self.inner.shards(pd_client).await
    }

    fn apply_shard(&mut self, shard: Self::Shard) {
        self.inner.apply_shard(shard);
    }

    fn apply_store(&mut self, store: &RegionStore) -> Result<()> {
        self.inner.apply_store(store)
    }
}

impl<P: ShardStage + Send + Sync, PdC: PdClient> ShardStage for ResolveLock<P, PdC>
where
    P::Result: HasLocks,
{
    fn cached_shards<PdC2: PdClient>(
        &self,
        pd_client: &PdC2,
    ) -> Option<Vec<(Self::Shard, RegionWithLeader)>> {
        self.inner.cached_shards(pd_client)
    }

    fn for_shard(&self, shard: Self::Shard, whole: bool) -> Self {
        ResolveLock {
            inner: self.inner.for_shard(shard, whole),
            ..self.clone()
        }
    }
}

/// Collects a pessimistic lock's answers with the mutations each shard
/// locked (client-rust's `CollectWithShard`; use after `preserve_shard`):
/// the values the lock returned, as pairs, or, when a shard failed,
/// [`Error::PessimisticLockError`] with the keys the other shards locked
/// (the caller must release them).
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectWithShard;

impl Merge<ResponseWithShard<kvrpcpb::PessimisticLockResponse, Vec<kvrpcpb::Mutation>>>
    for CollectWithShard
{
    type Out = Vec<crate::KvPair>;

    fn merge(
        &self,
        input: Vec<
            Result<ResponseWithShard<kvrpcpb::PessimisticLockResponse, Vec<kvrpcpb::Mutation>>>,
        >,
    ) -> Result<Self::Out> {
        let mut locked = Vec::with_capacity(input.len());
        let mut failure = None;
        for result in input {
            match result {
                Ok(answer) => locked.push(answer),
                Err(e) => failure = failure.or(Some(e)),
            }
        }
        if let Some(inner) = failure {
            return Err(Error::PessimisticLockError {
                inner: Box::new(inner),
                success_keys: locked
                    .into_iter()
                    .flat_map(|ResponseWithShard(_, mutations)| {
                        mutations.into_iter().map(|m| m.key)
                    })
                    .collect(),
            });
        }
        let mut pairs = Vec::new();
        for ResponseWithShard(answer, mutations) in locked {
            pairs.extend(locked_values(answer, mutations)?);
        }
        Ok(pairs)
    }
}

/// The values a pessimistic lock returned for `mutations`, as pairs of the
/// keys that exist (TiKV reports a missing key by `not_founds`, or, before
/// it had that field, by an empty value).
fn locked_values(
    answer: kvrpcpb::PessimisticLockResponse,
    mutations: Vec<kvrpcpb::Mutation>,
) -> Result<Vec<crate::KvPair>> {
    let keys = mutations.len();
    let values = answer.values.len();
    let flags = answer.not_founds.len();
    if values != keys || (flags != 0 && flags != keys) {
        return Err(Error::InternalError {
            message: format!(
                "TiKV answered a pessimistic lock of {keys} keys with {values} values and \
                 {flags} not-found flags; the answer cannot be matched to the keys"
            ),
        });
    }
    let mut not_found = answer.not_founds.into_iter();
    Ok(mutations
        .into_iter()
        .zip(answer.values)
        .filter(|(_, value)| match not_found.next() {
            Some(missing) => !missing,
            None => !value.is_empty(),
        })
        .map(|(m, value)| crate::KvPair::from((m.key, value)))
        .collect())
}

/// Every shard's response with its piece, in shard order, or the strongest
/// error: the transactional client's merge after `preserve_shard`.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct CollectPieces;

impl<R: Send + 'static, S: Send + 'static> Merge<ResponseWithShard<R, S>> for CollectPieces {
    type Out = Vec<ResponseWithShard<R, S>>;

    fn merge(&self, input: Vec<Result<ResponseWithShard<R, S>>>) -> Result<Self::Out> {
        collect_in_order(input)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(key: &[u8]) -> kvrpcpb::Mutation {
        kvrpcpb::Mutation {
            key: key.to_vec(),
            ..Default::default()
        }
    }

    fn answer(
        values: &[&[u8]],
        not_founds: &[bool],
        keys: &[&[u8]],
    ) -> Result<ResponseWithShard<kvrpcpb::PessimisticLockResponse, Vec<kvrpcpb::Mutation>>> {
        Ok(ResponseWithShard(
            kvrpcpb::PessimisticLockResponse {
                values: values.iter().map(|v| v.to_vec()).collect(),
                not_founds: not_founds.to_vec(),
                ..Default::default()
            },
            keys.iter().map(|k| put(k)).collect(),
        ))
    }

    fn lock(version: u64) -> kvrpcpb::LockInfo {
        kvrpcpb::LockInfo {
            lock_version: version,
            ..Default::default()
        }
    }

    fn live(expires_in_ms: u64) -> ResolvePass {
        ResolvePass::Wait(Duration::from_millis(expires_in_ms), vec![lock(1)])
    }

    fn sleep(ms: u64) -> AfterPass {
        AfterPass::Sleep(Duration::from_millis(ms), vec![lock(1)])
    }

    #[test]
    fn by_backoff_each_live_answer_spends_an_attempt_and_then_the_lock_is_the_answer() {
        // client-rust's `no_jitter_backoff(500, 500, 2)`: two sleeps, then
        // the third live answer ends it.
        let mut waiting = LockWaiting::new(
            LiveLockWait::ByBackoff,
            Backoff::no_jitter_backoff(500, 500, 2),
        );
        assert_eq!(waiting.after_pass(live(20_000), vec![lock(1)]), sleep(500));
        // A lock that expires sooner is looked at again sooner.
        assert_eq!(waiting.after_pass(live(30), vec![lock(1)]), sleep(30));
        assert_eq!(
            waiting.after_pass(live(20_000), vec![lock(1)]),
            AfterPass::GiveUp(vec![lock(1)])
        );
    }

    #[test]
    fn by_backoff_a_resolved_lock_is_rerun_at_once_and_a_second_one_spends_an_attempt() {
        let mut waiting = LockWaiting::new(
            LiveLockWait::ByBackoff,
            Backoff::no_jitter_backoff(2, 500, 1),
        );
        assert_eq!(
            waiting.after_pass(ResolvePass::Done, vec![lock(1)]),
            AfterPass::Rerun
        );
        // Locks that come back right after a resolution are waited for.
        assert_eq!(
            waiting.after_pass(ResolvePass::Done, vec![lock(2)]),
            AfterPass::Sleep(Duration::from_millis(2), vec![lock(2)])
        );
        assert_eq!(
            waiting.after_pass(ResolvePass::Done, vec![lock(2)]),
            AfterPass::GiveUp(vec![lock(2)])
        );
    }

    #[test]
    fn by_ttl_the_backoff_never_ends_the_wait_and_polls_grow_to_their_cap() {
        let mut waiting =
            LockWaiting::new(LiveLockWait::ByTtl, Backoff::no_jitter_backoff(500, 500, 2));
        let sleeps: Vec<AfterPass> = (0..10)
            .map(|_| waiting.after_pass(live(20_000), vec![lock(1)]))
            .collect();
        let expected: Vec<AfterPass> = [5, 10, 20, 40, 80, 160, 320, 500, 500, 500]
            .into_iter()
            .map(sleep)
            .collect();
        assert_eq!(sleeps, expected);
        // Never past the lock's expiry.
        assert_eq!(waiting.after_pass(live(3), vec![lock(1)]), sleep(3));
    }

    #[test]
    fn a_prewrite_waits_for_younger_locks_by_ttl_and_for_older_ones_by_the_backoff() {
        let mut waiting = LockWaiting::new(
            LiveLockWait::YieldToOlder(10),
            Backoff::no_jitter_backoff(500, 500, 1),
        );
        let younger = || ResolvePass::Wait(Duration::from_millis(20_000), vec![lock(11)]);
        let older = || ResolvePass::Wait(Duration::from_millis(20_000), vec![lock(11), lock(9)]);
        // Younger holders: polled by TTL as long as they live, the backoff
        // untouched.
        for expected in [5, 10, 20, 40, 80, 160, 320, 500, 500] {
            assert_eq!(
                waiting.after_pass(younger(), vec![lock(11)]),
                AfterPass::Sleep(Duration::from_millis(expected), vec![lock(11)])
            );
        }
        // An older holder among them: one attempt of the backoff, then
        // the prewrite gives up with the locks in its way.
        assert_eq!(
            waiting.after_pass(older(), vec![lock(11), lock(9)]),
            AfterPass::Sleep(Duration::from_millis(500), vec![lock(11), lock(9)])
        );
        assert_eq!(
            waiting.after_pass(older(), vec![lock(11), lock(9)]),
            AfterPass::GiveUp(vec![lock(11), lock(9)])
        );
        assert!(meets_older(&[lock(3)], 4));
        assert!(!meets_older(&[lock(4), lock(5)], 4));
    }

    #[test]
    fn a_pessimistic_lock_gives_the_values_of_the_keys_that_exist() {
        let pairs = CollectWithShard
            .merge(vec![
                // TiKV with `not_founds`: "b" is missing, "c" is empty.
                answer(
                    &[b"1", b"", b""],
                    &[false, true, false],
                    &[b"a", b"b", b"c"],
                ),
                // Older TiKV: an empty value is a missing key.
                answer(&[b"", b"4"], &[], &[b"x", b"y"]),
            ])
            .unwrap();
        let got: Vec<(Vec<u8>, Vec<u8>)> = pairs.into_iter().map(|p| (p.0.into(), p.1)).collect();
        assert_eq!(
            got,
            vec![
                (b"a".to_vec(), b"1".to_vec()),
                (b"c".to_vec(), Vec::new()),
                (b"y".to_vec(), b"4".to_vec()),
            ]
        );
    }

    #[test]
    fn a_failed_shard_reports_the_keys_the_others_locked() {
        let merged = CollectWithShard.merge(vec![
            answer(&[b"1"], &[false], &[b"a"]),
            Err(Error::InternalError {
                message: "store down".into(),
            }),
            answer(&[b"2"], &[false], &[b"z"]),
        ]);
        match merged {
            Err(Error::PessimisticLockError {
                inner,
                success_keys,
            }) => {
                assert!(matches!(*inner, Error::InternalError { .. }));
                assert_eq!(success_keys, vec![b"a".to_vec(), b"z".to_vec()]);
            }
            other => panic!("{other:?}"),
        }
        // An answer that cannot be matched to its keys is an error, not a
        // guess.
        let short = CollectWithShard.merge(vec![answer(&[b"1"], &[], &[b"a", b"b"])]);
        assert!(
            matches!(short, Err(Error::InternalError { .. })),
            "{short:?}"
        );
    }
}
