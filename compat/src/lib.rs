//! Programs written the way a `tikv-client` 0.4 user writes them, compiled
//! against `tikv-plan` with the dependency renamed to `tikv_client` and
//! nothing else changed:
//!
//! - [`raw_example`]: client-rust's `examples/raw.rs` (API v2, default
//!   keyspace, overlapping `batch_scan`, whole-key-space `delete_range`);
//! - [`application`]: the rest of the raw API as applications use it,
//!   including the `Config` fields, conversions and the error variants a
//!   program matches on;
//! - [`custom_request`]: a request of its own, with its own `KvRequest` and
//!   `Shardable` impls, run through `PlanBuilder` in a keyspace;
//! - [`transactional`]: `TransactionClient` as applications use it;
//! - [`lowering`]: plans built by hand from `raw_lowering` and
//!   `transaction_lowering` (raw requests, a coprocessor call, and a
//!   two-phase commit written out step by step).
//!
//! `tests/programs.rs` runs each against the embedded simulated cluster;
//! `interop/src/lib.rs` compiles `application`, `raw_example` and
//! `transactional` against tikv-client 0.4.0 itself (CI), so those three are
//! client-rust programs, not only programs that build against tikv-plan;
//! `cargo run -p tikv-plan-compat --bin raw -- --pd HOST:PORT` runs the
//! example against any cluster (or, without `--pd`, an embedded one).

pub mod application;
pub mod custom_request;
pub mod lowering;
pub mod raw_example;
pub mod transactional;
