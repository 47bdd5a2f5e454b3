//! client-rust-style programs of `compat/` that use only tikv-client
//! 0.4.0's public paths, compiled here against tikv-client 0.4.0 itself: the
//! same source builds against both crates (`compat/` builds it against
//! tikv-plan renamed to `tikv_client`). CI runs
//! `cargo check --manifest-path interop/Cargo.toml --lib`.
//!
//! `compat/`'s `lowering` and `custom_request` programs are not here: they
//! need a PD client and the wire types (`pd`, `proto`, `store`), which
//! tikv-client 0.4.0 keeps private, so no program outside it can be written
//! that way against it.

#[path = "../../compat/src/application.rs"]
pub mod application;
#[path = "../../compat/src/raw_example.rs"]
pub mod raw_example;
#[path = "../../compat/src/transactional.rs"]
pub mod transactional;
