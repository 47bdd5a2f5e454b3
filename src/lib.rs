//! # tikv-plan
//!
//! A TiKV client (raw KV and transactions) whose request plan routes
//! **leader-first with voter fallback**: each request goes to the Region's cached leader first and,
//! when that leader is unreachable or stuck, to the Region's other voters one
//! at a time, always as a leader request (fallback never makes a follower
//! read); when the leader lives but this client cannot reach its store, the
//! requests go to it through a voter's store (forwarding). Successful
//! fallbacks heal the shared leader cache for every later request. Reads
//! leave the leader only when the caller asks ([`ReplicaRead`]: follower,
//! learner and stale reads).
//!
//! Public test doubles come with the feature `mock`. A simulated TiKV
//! cluster that speaks the real protocol over gRPC on 127.0.0.1, for testing
//! applications against leader loss, is the crate `tikv-sim`.
//!
//! ## Layers
//!
//! The modules form layers; a module uses its own files and the layers
//! below it, never a module of its own layer or above (`tests/hygiene/layers.rs`
//! reads every `crate::` path and fails on one against this order). From
//! the bottom up:
//!
//! 1. [`proto`] (the wire types of `tikv-plan-proto`), [`codec`], [`spec`],
//!    [`guide`] (the last two documentation only), `sync` (locks that
//!    survive a panic elsewhere);
//! 2. `ids` (Region and store identities, re-exported by [`region`]);
//! 3. `kv` and `error`, one unit: the error carries keys and ranges, and
//!    the key types' fallible conversions return it;
//! 4. [`backoff`], then [`config`];
//! 5. `classify` (what a failed RPC means, for store, PD and routing alike)
//!    and `security` (TLS);
//! 6. `metrics` (feature `prometheus`), then `telemetry` (the metric and
//!    span hooks);
//! 7. [`region`] (Regions, candidates, caches);
//! 8. [`store`] (store connections), then [`pd`] (the PD client, which hands
//!    out store clients);
//! 9. [`request`], in three folders, bottom up: `routing` (the pure
//!    routing engine and the client-wide routing state), `plan` (the plan
//!    stages, the engine's async driver, the `ResolveLock` stage, which
//!    reaches a lock resolver through the `LockResolve` trait), `locks`
//!    (the lock resolvers and GC's `CleanupLocks`);
//! 10. [`raw`] and [`transaction`] (the clients; neither uses the other);
//! 11. [`blocking`] (the blocking clients, over both);
//! 12. `mock` (test doubles over everything).
//!
//! The specifications the code implements are in [`spec`]
//! ([routing](spec::routing), [transactions](spec::txn),
//! [wire protocol](spec::wire), and the [behaviour table](spec::behaviours)
//! that names a test for each behaviour).
//!
//! ## Features
//!
//! - `mock`: public test doubles (`tikv_plan::mock`) for unit tests of code
//!   that uses the client, without a cluster.
//! - `failpoints`: turns on the fail points (the `fail` crate 0.4, a
//!   dependency as in client-rust): client-rust's own (`after-prewrite`,
//!   `before-commit-secondary`, `before-cleanup-locks`, by those names) and
//!   ours before dispatch and before store mapping. A test crate depending
//!   on `fail = { version = "0.4", features = ["failpoints"] }` turns them
//!   on as well, as client-rust's own tests do.
//! - `integration-tests`: client-rust's feature of the same name; with it
//!   `before-commit-secondary` can cut a commit's secondaries short.
//! - `prometheus`: Prometheus metrics (`tikv_plan::metrics`).
//! - `log`: with no tracing subscriber installed, the crate's tracing events
//!   become `log` records.
//! - `unstable-internals`: not for users (no semver promise); it names the
//!   Region cache for this repository's own benchmark and memory test, lets
//!   `perf/` compare the typed unary path with tonic's codec, and lets the
//!   deterministic simulation dial through a simulated network.
//!
//! No feature is on by default. Without features the crate needs tokio's
//! `rt`, `sync` and `time`, and runs on whichever runtime the caller
//! starts; the blocking clients ([`blocking`]) start a runtime of their own
//! (tokio's `rt-multi-thread`).

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod blocking;
mod classify;
pub mod config;
mod error;
pub mod guide;
mod ids;
mod kv;
pub mod pd;
pub mod proto;
pub mod raw;
pub mod region;
pub mod request;
mod security;
pub mod spec;
pub mod store;
mod sync;
mod telemetry;
pub mod transaction;

#[cfg(feature = "prometheus")]
pub mod metrics;
#[cfg(feature = "mock")]
pub mod mock;

/// Engine internals for this repository's own benchmarks (the Region
/// cache's, and `perf/`'s typed path against tonic's codec), memory test of
/// the Region cache and deterministic simulation (a transport in place of
/// TCP) (feature `unstable-internals`). Not part of the API: no
/// semver promise, may change or vanish in any release.
#[cfg(feature = "unstable-internals")]
#[doc(hidden)]
pub mod __internals {
    pub use crate::region::cache::{LoadedRegion, RegionCache};
    pub use crate::security::transport::{with_transport, Dial, Io, Transport};
    pub use crate::store::set_typed_path;
}

pub use tikv_plan_proto::codec;

// README's code blocks, compiled as doc tests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
mod readme {}

pub use backoff::Backoff;
pub use blocking::{SyncRawClient, SyncSnapshot, SyncTransaction, SyncTransactionClient};
pub use config::{Config, RequestSource, RequestTags, RpcMode, SecurityConfig};
pub use error::{
    describe_key_error, describe_region_error, Error, ErrorSource, Failure, ProtoKeyError,
    ProtoRegionError, Result,
};
pub use kv::{BoundRange, ColumnFamily, IntoOwnedRange, Key, KvPair, Value};
pub use raw::lowering as raw_lowering;
pub use raw::RawClient;
pub use request::ReplicaRead;
pub use request::RetryOptions;
pub use security::SecurityManager;
pub use transaction::lowering as transaction_lowering;
pub use transaction::{
    CheckLevel, Mutation, ProtoLockInfo, Snapshot, Timestamp, TimestampExt, Transaction,
    TransactionClient, TransactionOptions,
};
