//! Guides for users, as documentation only (no code), from the
//! repository's `docs/` folder; their code blocks are compiled as doc tests.
//!
//! - [`migrating`]: moving an application from tikv-client (client-rust)
//!   0.4 to tikv-plan (`docs/migrating-from-client-rust.md`).
//! - [`production`]: running against a real cluster: endpoints, TLS,
//!   keyspaces, timeouts, metrics, logging and the failures to plan for
//!   (`docs/production.md`).

#[doc = include_str!("../docs/migrating-from-client-rust.md")]
pub mod migrating {}

#[doc = include_str!("../docs/production.md")]
pub mod production {}
