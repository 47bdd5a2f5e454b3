//! The user guides, as documentation only (no code): the repository's
//! `docs/` pages that are not [specifications](crate::spec). Their code
//! blocks are compiled as doc tests.
//!
//! - [`migrating`]: moving an application from tikv-client (client-rust)
//!   0.4 (`docs/migrating-from-client-rust.md`).
//! - [`production`]: running against a real cluster: endpoints, TLS,
//!   keyspaces, timeouts, metrics, logging and the failures to plan for
//!   (`docs/production.md`).
//! - [`using`]: the raw and transactional API, errors, configuration and
//!   the at-most-once rule for writes (`docs/using.md`).
//! - [`testing`]: testing an application with the mock and the simulated
//!   cluster (`docs/testing.md`).
//! - [`observability`]: every metric and span (`docs/observability.md`).
//! - [`benchmarks`]: side by side with tikv-client 0.4.0
//!   (`docs/benchmarks.md`).
//! - [`chaos`]: the property test and the chaos suites (`docs/chaos.md`).
//! - [`project`]: features, minimum Rust version, status, layout
//!   (`docs/project.md`).
//!
//! The pages link each other by file name, as in the repository.

#[doc = include_str!("../docs/migrating-from-client-rust.md")]
pub mod migrating {}

#[doc = include_str!("../docs/production.md")]
pub mod production {}

#[doc = include_str!("../docs/using.md")]
pub mod using {}

#[doc = include_str!("../docs/testing.md")]
pub mod testing {}

#[doc = include_str!("../docs/observability.md")]
pub mod observability {}

#[doc = include_str!("../docs/benchmarks.md")]
pub mod benchmarks {}

#[doc = include_str!("../docs/chaos.md")]
pub mod chaos {}

#[doc = include_str!("../docs/project.md")]
pub mod project {}
