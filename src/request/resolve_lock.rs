//! [`ResolveLock`]: the plan stage that meets other transactions' locks,
//! resolves them and re-runs the request, waiting out live locks by their
//! TTL within the request deadline ([txn.md, "Behaviour we
//! require"](crate::spec::txn#behaviour-we-require)). [`CollectWithShard`]
//! keeps each shard's piece with its response.

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

use super::plan::{collect_in_order, Merge, Plan, ResponseWithShard};

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
/// [`LockResolver`](crate::transaction::LockResolver) (the stage lives below
/// the transactional client and reaches it through this trait).
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

/// Runs `inner`; while its result carries locks, resolves them and runs it
/// again. A lock whose transaction is alive is waited for by its TTL, not a
/// fixed backoff; the whole stage is bounded by `deadline`, after which the
/// locks still alive are returned as [`Error::ResolveLockError`].
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
    /// The lock schedule of the caller's [`RetryOptions`](super::RetryOptions).
    /// No backoff ([`Backoff::no_backoff`], what
    /// [`TransactionOptions::no_resolve_locks`](crate::TransactionOptions::no_resolve_locks)
    /// sets) turns resolution off: the locks met are returned as
    /// [`Error::ResolveLockError`] and nothing is resolved. Any other
    /// schedule resolves and waits live locks out by their TTL within
    /// `deadline`.
    pub backoff: Backoff,
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
        let mut poll = FIRST_LOCK_POLL;
        let mut resolved_before = false;
        loop {
            let mut result = self.inner.execute().await?;
            let locks = result.take_locks();
            if locks.is_empty() {
                return Ok(result);
            }
            if self.backoff.is_none() {
                return Err(Error::ResolveLockError(locks));
            }
            let (sleep, alive) = match Arc::clone(&self.resolver)
                .resolve_pass(locks.clone(), self.caller_start_ts)
                .await?
            {
                // Resolved: re-run at once, unless locks came back right
                // after a resolution (a store that still reports them);
                // then poll like a live lock instead of spinning.
                ResolvePass::Done if !resolved_before => {
                    resolved_before = true;
                    continue;
                }
                ResolvePass::Done => (poll, locks),
                ResolvePass::Wait(expires_in, alive) => (expires_in.min(poll), alive),
            };
            if started.elapsed() + sleep > self.deadline {
                return Err(Error::ResolveLockError(alive));
            }
            tokio::time::sleep(sleep).await;
            poll = (poll * 2).min(MAX_LOCK_POLL);
        }
    }
}

/// Returns every shard's response together with its piece, in shard
/// order, or the strongest error (client-rust's `CollectWithShard`; use
/// after `preserve_shard`).
#[derive(Debug, Clone, Copy, Default)]
pub struct CollectWithShard;

impl<R: Send + 'static, S: Send + 'static> Merge<ResponseWithShard<R, S>> for CollectWithShard {
    type Out = Vec<ResponseWithShard<R, S>>;

    fn merge(&self, input: Vec<Result<ResponseWithShard<R, S>>>) -> Result<Self::Out> {
        collect_in_order(input)
    }
}
