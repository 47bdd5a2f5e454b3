//! The specifications this crate implements, as documentation only (no
//! code). The API docs cite them by section, for example
//! [routing, "Replay safety"](crate::spec::routing#replay-safety).
//!
//! - [`routing`]: the request path, leader-first with voter fallback
//!   (`docs/routing.md` in the repository).
//! - [`txn`]: transactions, and where client-rust goes wrong
//!   (`docs/txn.md`).
//! - [`wire`]: the TiKV and PD protocol subset, with kvproto's field
//!   numbers (`docs/wire.md`).
//! - [`behaviours`]: each routing behaviour and decision, with the tests
//!   that show it (`docs/behaviours.md`).
//!
//! The pages cite each other by their file names in `docs/`: the page
//! [`routing`] is `docs/routing.md`, [`txn`] is `docs/txn.md`, [`wire`] is
//! `docs/wire.md`. A note **\[beyond\]** marks behaviour that goes further
//! than the upstream client.

#[doc = include_str!("../docs/routing.md")]
pub mod routing {}

#[doc = include_str!("../docs/txn.md")]
pub mod txn {}

#[doc = include_str!("../docs/wire.md")]
pub mod wire {}

#[doc = include_str!("../docs/behaviours.md")]
pub mod behaviours {}
