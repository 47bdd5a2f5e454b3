//! The request plan and its routing: leader-first candidate rounds with
//! voter fallback ([routing.md](crate::spec::routing)).
//!
//! A plan is built with [`PlanBuilder`] from composable stages, in
//! client-rust's vocabulary: [`Dispatch`] → [`RetryableMultiRegion`] →
//! [`MergeResponse`] ([`Collect`], [`CollectSingle`], [`CollectError`]) →
//! [`ProcessResponse`] ([`DefaultProcessor`]) / [`ExtractError`]; transactions
//! add [`ResolveLock`] (meet a lock, resolve it, re-run) and
//! [`CollectWithShard`].
//!
//! The routing decisions are pure and synchronous: the classification of a
//! failed RPC (what it means for routing), the Region-error table, the candidate round (who was tried, what each
//! answered, hint reordering, what to invalidate, which error is strongest),
//! and the shard's retry engine, one state machine that owns a shard's whole
//! retry state and turns each event (a store mapped, a candidate answered, a
//! sleep over) into the next step and its cache effects, as data (the
//! `routing::engine` module; its docs list every transition; the decisions it makes
//! where [routing.md](crate::spec::routing) leaves room are below).
//! [`RetryableMultiRegion`] is the thin async shell that performs those steps
//! and effects; it has no routing `if` of its own. [`RoutingState`] is the
//! client-wide part: store health, the shared `ServerIsBusy(0)` suspicion, and
//! the [`RoutingStats`] counters.
//!
//! Fail points (feature `failpoints`): `tikv_plan::before_map_store` and
//! `tikv_plan::before_dispatch`. With `return` they fail that step as a
//! connect failure (mapping) or a transport failure (dispatch);
//! `return(timeout)` fails it as `DeadlineExceeded`, `return(fatal)` as
//! `InvalidArgument`.
//!
//! # Decisions
//!
//! Where [routing.md](crate::spec::routing) leaves room, the retry engine
//! decides as follows (each has a test, listed in
//! [`docs/behaviours.md`](crate::spec::behaviours)):
//!
//! - *A cached leader that could not answer counts with voters that all said
//!   `NotLeader`*: the Region is reloaded after the round. Nobody claimed the
//!   Region; PD likely knows a newer leader or peer set.
//! - *A fallback hint naming the cached leader during the busy probe* is
//!   ignored: the probe is followers-only and the hint only confirms the
//!   leader that answered busy; the probe ends inconclusive.
//! - *A fallback hint naming a peer outside the Region while a later voter
//!   accepts*: the accepting voter becomes the leader, and the Region is
//!   reloaded after the round, since its peer list is stale.
//! - *`EpochNotMatch` without newer `current_regions`* invalidates the
//!   Region and backs off before reloading (PD may not know the new epoch
//!   yet); with newer Regions it retries at once from them.
//! - *A round that saw a routing failure and ends in a plain failure*
//!   (a fatal status, an undetermined outcome) drops the Region route as
//!   well: the round ended without success.
//! - *A store's `DeadlineExceeded` is an answer*: it keeps the caches like a
//!   timeout, but counts as the store answering, not as a timeout strike.
//!   *Consecutive* timeout strikes are one after the other: a timeout of an
//!   RPC sent before the store's previous strike ran concurrently with it
//!   and adds none.
//! - *A leader's `NotLeader` hint naming a peer the cache holds as a learner
//!   or witness* is not followed: the Region is reloaded, like a hint from
//!   outside it.
//! - *The busy probe budget is the request's*: one probe per request, across
//!   all its shards and the pieces a split leaves.
//! - *A leader's own `DeadlineExceeded`* counts as "could not answer" for
//!   the rule above (it did not serve the request, so it claims nothing),
//!   while for store health it is an answer (the store is alive).
//! - *Pieces a split leaves keep the shard's retry budget*: the attempts
//!   already spent count for them, so `RetriesExhausted::attempts` is the
//!   shard's total, and a split cannot reset the budget.
//! - *The request deadline* ([`Config::request_deadline`](crate::Config::request_deadline))
//!   bounds rounds, sleeps, probe waits and each RPC together: a sleep that
//!   would pass it ends the request with `Failure::DeadlineExceeded` at once,
//!   and an RPC is cut at the deadline (for a write, undetermined).
//! - *`ServerIsBusy.backoff_ms`* is honoured up to 5 s
//!   (`MAX_BUSY_BACKOFF`).
//! - *A candidate on a TiFlash store* (refused at mapping) is skipped
//!   without blame: no store dropped or cooled down, no forwarding; a
//!   round that then finds no answer reloads the Region, whose peer list
//!   offered it ([routing.md, "TiFlash stores and
//!   peers"](crate::spec::routing#tiflash-stores-and-peers)).
//!
//! # Behaviours and their tests
//!
//! Every behaviour of [routing.md](crate::spec::routing), every decision the
//! engine makes where the spec leaves room, and the test that shows each, are
//! listed in [`docs/behaviours.md`](crate::spec::behaviours);
//! `tests/hygiene/plan_docs.rs` checks that each named test exists.

//!
//! # Layout
//!
//! Three folders, each with one job, bottom up. A file uses the files of its
//! own folder and of the folders below it, each by its path; this file is
//! the module's one front door, and only a folder's `mod.rs` re-exports
//! (`tests/hygiene/layers.rs` checks all of it):
//!
//! - `routing/`: the pure routing engine (the shard's state machine, the
//!   candidate round, the Region-error table) and the client-wide routing
//!   state. It knows nothing of plans.
//! - `plan/`: the plan stages and their builder, sharding and scans, and
//!   [`RetryableMultiRegion`], the async driver of the routing engine. The
//!   [`ResolveLock`] stage reaches a lock resolver through a trait. What the
//!   crate's own stages and requests offer the retry stage beyond the public
//!   traits (a chain of stages run as one future, the typed gRPC path, a
//!   single key's shard from the cache) is in sealed traits (`stage.rs`);
//!   the clients build their plans on `FastDispatch` (`fast_dispatch.rs`),
//!   a caller's own plan on [`Dispatch`], through the same stages.
//! - `locks/`: lock resolution, the transactional client's resolver and
//!   GC's [`LockResolver`](crate::transaction::LockResolver) with its
//!   [`CleanupLocks`](plan::CleanupLocks) stage.

pub(crate) mod locks;
pub(crate) mod routing;

/// Plan stages, client-rust's `request::plan`: [`Dispatch`] sends one
/// request to one store, [`RetryableMultiRegion`] shards it and runs the
/// routing engine per shard, [`MergeResponse`], [`ProcessResponse`] and
/// [`ExtractError`] shape the results.
pub mod plan {
    pub(crate) mod all_stores;
    pub(crate) mod base;
    pub(crate) mod builder;
    pub(crate) mod call_deadline;
    pub(crate) mod codec_pd;
    pub(crate) mod fast_dispatch;
    mod forward_probe;
    pub(crate) mod keyspace;
    mod liveness_probe;
    pub(crate) mod request_shape;
    pub(crate) mod resolve_lock;
    mod responses;
    pub(crate) mod retry;
    pub(crate) mod retry_options;
    pub(crate) mod scan;
    pub(crate) mod shard;
    pub(crate) mod stage;
    pub(crate) mod traits;

    pub use super::locks::cleanup_locks::{CleanupLocks, CleanupLocksResult};
    pub use all_stores::RetryableAllStores;
    pub use base::{
        Collect, CollectError, CollectSingle, DefaultProcessor, Dispatch, ExtractError, Merge,
        MergeResponse, PreserveShard, Process, ProcessResponse, ResponseWithShard,
    };
    pub use resolve_lock::{CollectWithShard, ResolveLock};
    pub use retry::RetryableMultiRegion;
    pub use traits::Plan;
}

pub(crate) use locks::client_lock_resolver::{resolve_locks_once, ClientLockResolver};
pub use plan::all_stores::StoreRequest;
pub(crate) use plan::base::collect_in_order;
pub use plan::base::{
    Collect, CollectError, CollectSingle, DefaultProcessor, Dispatch, ExtractError, Merge,
    MergeResponse, Process, ProcessResponse, ResponseWithShard,
};
pub use plan::builder::PlanBuilder;
pub(crate) use plan::builder::{call_plan, CallSettings};
pub use plan::codec_pd::CodecPdClient;
pub(crate) use plan::fast_dispatch::FastDispatch;
pub(crate) use plan::keyspace::configured_keyspace;
pub use plan::keyspace::{EncodeKeyspace, KeyMode, Keyspace, TruncateKeyspace};
pub use plan::request_shape::{HasNextBatch, NextBatch, RangeRequest, SingleKey};
pub(crate) use plan::resolve_lock::CollectPieces;
pub use plan::resolve_lock::{CollectWithShard, ResolveLock};
pub use plan::retry::RetryableMultiRegion;
pub use plan::retry_options::RetryOptions;
pub(crate) use plan::stage::{ShardPayload, Stage, TypedCall};
pub(crate) use plan::traits::{checked, no_key_errors, strongest_shard_error};
pub use plan::traits::{
    set_context_for_store, Batchable, HasKeyErrors, HasRegionError, KvRequest, Plan, Shardable,
};
pub use routing::replica::ReplicaRead;
pub use routing::state::{RoutingState, RoutingStats};
