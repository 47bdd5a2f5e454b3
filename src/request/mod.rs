//! The request plan and its routing: leader-first candidate rounds with
//! voter fallback (`../shared/docs/routing.md`).
//!
//! A plan is built with [`PlanBuilder`] from composable stages, in
//! client-rust's vocabulary: [`Dispatch`] → [`RetryableMultiRegion`] →
//! [`MergeResponse`] ([`Collect`], [`CollectSingle`], [`CollectError`]) →
//! [`ProcessResponse`] ([`DefaultProcessor`]) / [`ExtractError`].
//!
//! The routing decisions are pure and synchronous:
//! [`classify_grpc_error`] (what a failed RPC means), [`decide_region_error`]
//! (the Region-error table), the candidate round (who was tried, what each
//! answered, hint reordering, what to invalidate, which error is strongest),
//! and the shard's retry engine, one state machine that owns a shard's whole
//! retry state and turns each event (a store mapped, a candidate answered, a
//! sleep over) into the next step and its cache effects, as data (the
//! `engine` module; its docs list every transition and the decisions this
//! crate made where routing.md leaves room). [`RetryableMultiRegion`] is the
//! thin async shell that performs those steps and effects; it has no routing
//! `if` of its own. [`RoutingState`] is the client-wide part: store health,
//! the shared `ServerIsBusy(0)` suspicion, and the [`RoutingStats`]
//! counters.
//!
//! Fail points (feature `failpoints`): `tikv_plan::before_map_store` and
//! `tikv_plan::before_dispatch`. With `return` they fail that step as a
//! connect failure (mapping) or a transport failure (dispatch);
//! `return(timeout)` fails it as `DeadlineExceeded`, `return(fatal)` as
//! `InvalidArgument`.
//!
//! # Behaviours and their tests
//!
//! Every behaviour of routing.md, every decision the engine makes where the
//! spec leaves room, and the test that shows each, are listed in
//! `docs/behaviours.md`; `tests/plan_docs.rs` checks that each named test
//! exists.

mod all_stores;
mod builder;
mod classify;
mod engine;
mod keyspace;
mod plan;
mod region_error;
mod request_shape;
mod retry;
mod round;
mod routing_state;
mod traits;

pub use all_stores::{RetryableAllStores, StoreRequest};
pub use builder::PlanBuilder;
pub(crate) use classify::classify_status_source;
pub use classify::{classify_dispatch_error, classify_grpc_error, DispatchFailure};
pub use keyspace::{
    keyspace_prefix, EncodeKeyspace, KeyMode, Keyspace, TruncateKeyspace, KEYSPACE_PREFIX_LEN,
    MAX_KEYSPACE_ID, RAW_KEY_PREFIX, TXN_KEY_PREFIX,
};
pub(crate) use plan::collect_in_order;
pub use plan::{
    Collect, CollectError, CollectSingle, DefaultProcessor, Dispatch, ExtractError, Merge,
    MergeResponse, Plan, PreserveShard, Process, ProcessResponse, ResponseWithShard,
};
pub use region_error::{decide_region_error, RegionErrorAction, RegionErrorStep};
pub use request_shape::{HasNextBatch, NextBatch, RangeRequest, SingleKey};
pub use retry::RetryableMultiRegion;
pub use routing_state::{RoutingState, RoutingStats};
pub(crate) use traits::{pair_key_errors, string_key_error, strongest_shard_error};
pub use traits::{
    set_context_for_store, Batchable, HasKeyErrors, HasRegionError, KvRequest, Shardable,
};
