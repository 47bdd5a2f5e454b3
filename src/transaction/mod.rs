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
mod codec_pd;
mod lock;
pub mod lowering;
mod options;
mod outputs;
mod requests;
mod snapshot;
#[allow(clippy::module_inception)]
mod transaction;

/// client-rust's name for a lock as TiKV reports it.
pub use crate::proto::kvrpcpb::LockInfo as ProtoLockInfo;
/// client-rust's name for [`TransactionClient`].
pub use client::TransactionClient as Client;
pub use client::{ResolveLocksOptions, TransactionClient};
pub(crate) use codec_pd::CodecPdClient;
pub use lock::{LockResolver, LockStats};
pub use options::{
    CheckLevel, HeartbeatOption, Mutation, TransactionOptions, DEFAULT_LOCK_TTL, MAX_TTL,
};
pub use requests::as_key_error;
pub use snapshot::Snapshot;
pub use transaction::{Transaction, TransactionStats, TransactionStatus};

pub use crate::pd::Timestamp;

/// Timestamps as one `u64` version: `physical << 18 | logical`
/// (client-rust's `TimestampExt`).
///
/// ```
/// use tikv_plan::transaction::{Timestamp, TimestampExt};
/// let ts = Timestamp::from_version((5 << 18) | 3);
/// assert_eq!((ts.physical, ts.logical), (5, 3));
/// assert_eq!(ts.version(), (5 << 18) | 3);
/// assert_eq!(Timestamp::try_from_version(0), None);
/// ```
pub trait TimestampExt: Sized {
    /// The timestamp as a version.
    fn version(&self) -> u64;
    /// A timestamp from a version.
    fn from_version(version: u64) -> Self;
    /// A timestamp from a version; `None` for 0 (no timestamp).
    fn try_from_version(version: u64) -> Option<Self>;
}

const PHYSICAL_SHIFT_BITS: u32 = 18;
const LOGICAL_MASK: u64 = (1 << PHYSICAL_SHIFT_BITS) - 1;

impl TimestampExt for Timestamp {
    fn version(&self) -> u64 {
        // Negative parts never come from a TSO; they clamp to 0.
        let physical = u64::try_from(self.physical).unwrap_or(0);
        let logical = u64::try_from(self.logical).unwrap_or(0);
        (physical << PHYSICAL_SHIFT_BITS) | (logical & LOGICAL_MASK)
    }

    fn from_version(version: u64) -> Self {
        Timestamp {
            physical: (version >> PHYSICAL_SHIFT_BITS) as i64,
            logical: (version & LOGICAL_MASK) as i64,
            ..Default::default()
        }
    }

    fn try_from_version(version: u64) -> Option<Self> {
        (version != 0).then(|| Self::from_version(version))
    }
}
