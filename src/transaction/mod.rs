//! The transactional client, with client-rust 0.4.0's API:
//! [`TransactionClient`], [`Transaction`], [`Snapshot`],
//! [`TransactionOptions`] ([txn.md](crate::spec::txn) has the model and the
//! behaviour).
//!
//! Every transactional RPC runs through the request plan, so it routes
//! leader-first with voter fallback, store health and the busy probe like
//! raw KV. Where client-rust is wrong ([txn.md, "Known upstream
//! defects"](crate::spec::txn#known-upstream-defects-not-to-copy-client-rust-040)),
//! this client differs:
//!
//! - a commit point (the primary's commit; a prewrite under async commit or
//!   1PC) that may have been applied without an answer ends in
//!   [`Error::UndeterminedError`](crate::Error::UndeterminedError), kept
//!   across voter fallback;
//! - a failed prewrite is rolled back;
//! - readers wait for a lock by its TTL within the request deadline, and
//!   resolution is shared per (transaction, Region);
//! - async-commit locks are resolved through `CheckSecondaryLocks` with the
//!   missing-lock rule, and `min_commit_ts == 0` means TiKV fell back to
//!   2PC;
//! - a Region-lookup error while sharding reaches the caller.

mod buffer;
mod client;
/// The status GC's [`LockResolver::check_txn_status`] returns (client-rust
/// returns these too, without a path to name them by).
pub mod gc {
    pub use crate::request::locks::lock_resolver::{TransactionStatus, TransactionStatusKind};
}
pub mod lowering;
mod options;
mod outputs;
mod requests;
mod snapshot;
#[allow(clippy::module_inception)]
mod transaction;

/// client-rust's name for a lock as TiKV reports it.
pub use crate::proto::kvrpcpb::LockInfo as ProtoLockInfo;
pub use crate::request::locks::cleanup_locks::ResolveLocksOptions;
pub use crate::request::locks::client_lock_resolver::LockStats;
pub use crate::request::locks::lock_resolver::{LockResolver, ResolveLocksContext};
pub(crate) use crate::request::CodecPdClient;
/// client-rust's name for [`TransactionClient`].
pub use client::TransactionClient as Client;
pub use client::TransactionClient;
pub use options::{
    CheckLevel, HeartbeatOption, LockWait, Mutation, TransactionOptions, DEFAULT_LOCK_TTL, MAX_TTL,
};
pub use requests::as_key_error;
pub use snapshot::Snapshot;
pub use transaction::{Transaction, TransactionStats, TransactionStatus};

pub use crate::pd::Timestamp;

/// client-rust's `TimestampExt` (defined with the PD client, whose
/// timestamps it reads).
pub use crate::pd::timestamp::TimestampExt;
