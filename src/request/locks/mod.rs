//! Lock resolution: the rules over a lock's and a transaction's status
//! (`lock_rules`), the transactional client's resolver
//! (`client_lock_resolver`, shared per transaction and Region), and GC's
//! cleanup: client-rust's [`LockResolver`](crate::transaction::LockResolver)
//! and its [`CleanupLocks`](crate::request::plan::CleanupLocks) stage.

pub(crate) mod cleanup_locks;
pub(crate) mod client_lock_resolver;
pub(crate) mod lock_resolver;
pub(crate) mod lock_rules;
mod resolve_in_region;
