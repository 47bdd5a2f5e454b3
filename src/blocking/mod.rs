//! **beyond** Blocking clients, for programs without an async runtime
//! (client-rust's `SyncTransactionClient`, `SyncTransaction` and
//! `SyncSnapshot`, and a raw counterpart, [`SyncRawClient`]).
//!
//! Each has every method of its async client under the same name, with
//! the same arguments, results and errors, and blocks the calling thread
//! until the call is done. A client owns a multi-threaded Tokio runtime,
//! shared by its clones and by what it hands out; dropping the last of
//! them shuts the runtime down within 5 s at most (after a transaction
//! client's secondary commits in flight finish, cutting any other request
//! in flight), and without Tokio's panic when that happens inside another
//! runtime (then without waiting at all).
//!
//! A blocking call on a thread inside a Tokio runtime (an async task, a
//! `block_on`, a `spawn_blocking` thread) would stall that runtime, so it
//! is refused before anything is sent, with
//! [`Failure::NestedRuntime`](crate::Failure::NestedRuntime) (inside [`Error::GrpcAPI`](crate::Error::GrpcAPI), code `FailedPrecondition`)
//! (client-rust's main branch adds the variant `Error::NestedRuntimeError`
//! for it; tikv-plan's `Error` keeps tikv-client 0.4's variants, so a
//! program that matches them exhaustively still builds); async code uses [`RawClient`](crate::RawClient)
//! and [`TransactionClient`](crate::TransactionClient).

mod raw;
mod runtime;
mod snapshot;
mod transaction;
mod transaction_client;

pub use raw::{SyncRawClient, SyncScanIter};
pub use snapshot::SyncSnapshot;
pub use transaction::SyncTransaction;
pub use transaction_client::SyncTransactionClient;
