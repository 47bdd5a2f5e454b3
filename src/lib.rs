//! # tikv-plan
//!
//! A TiKV client (raw KV and transactions) whose request plan routes
//! **leader-first with voter fallback**: each request goes to the Region's cached leader first and,
//! when that leader is unreachable or stuck, to the Region's other voters one
//! at a time, always as a leader request (never a follower read). Successful
//! fallbacks heal the shared leader cache for every later request.
//!
//! Public test doubles come with the feature `mock`. A simulated TiKV
//! cluster that speaks the real protocol over gRPC on 127.0.0.1, for testing
//! applications against leader loss, is the crate `tikv-sim`.
//!
//! Layout: [`proto`] (wire protocol), [`region`] (Regions, candidates,
//! caches), [`pd`] (PD client), [`store`] (store connections), [`request`]
//! (the plan and routing), [`raw`] (the raw-KV client), [`transaction`]
//! (the transactional client), [`codec`] (the transactional key encoding),
//! `mock`. The specifications the code implements are in [`spec`]
//! ([routing](spec::routing), [transactions](spec::txn),
//! [wire protocol](spec::wire), and the [behaviour table](spec::behaviours)
//! that names a test for each behaviour).
//!
//! ## Features
//!
//! - `mock`: public test doubles (`tikv_plan::mock`) for unit tests of code
//!   that uses the client, without a cluster.
//! - `failpoints`: fail points (the `fail` crate) before dispatch and
//!   before store mapping.
//! - `prometheus`: Prometheus metrics (`tikv_plan::metrics`).
//! - `log`: with no tracing subscriber installed, the crate's tracing events
//!   become `log` records.
//!
//! No feature is on by default. Without features the crate needs tokio's
//! `rt`, `sync` and `time` only, and runs on whichever runtime the caller
//! starts.

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod backoff;
pub mod config;
mod error;
mod kv;
pub mod pd;
pub mod proto;
pub mod raw;
pub mod region;
pub mod request;
pub mod security;
pub mod spec;
pub mod store;
mod telemetry;
pub mod transaction;

#[cfg(feature = "prometheus")]
pub mod metrics;
#[cfg(feature = "mock")]
pub mod mock;

pub use tikv_plan_proto::codec;

pub use backoff::Backoff;
pub use config::{Config, RpcMode, SecurityConfig};
pub use error::{
    describe_key_error, describe_region_error, Error, ErrorSource, ProtoKeyError, ProtoRegionError,
    Result,
};
pub use kv::{BoundRange, ColumnFamily, IntoOwnedRange, Key, KvPair, Value};
pub use raw::RawClient;
pub use security::SecurityManager;
pub use transaction::{
    CheckLevel, Mutation, RetryOptions, Snapshot, Timestamp, TimestampExt, Transaction,
    TransactionClient, TransactionOptions,
};
