//! The crate's error type: client-rust's [`Error`], variant for variant, so
//! a program written against tikv-client 0.4 matches it unchanged. Every
//! variant prints a sentence a person can act on; what tikv-plan knows
//! beyond the variant (the Region, store, address, attempts) is a
//! [`Failure`] carried inside it ([`Error::failure`]).

use std::fmt;
use std::sync::Arc;

use crate::proto::{errorpb, kvrpcpb};

mod describe;
mod duplicate;
mod failure;

pub use describe::{describe_key_error, describe_region_error};
pub(crate) use failure::status_failure;
pub use failure::Failure;

/// A Region error as TiKV sends it (client-rust's name).
pub use crate::proto::errorpb::Error as ProtoRegionError;
/// A key error as TiKV sends it (client-rust's name).
pub use crate::proto::kvrpcpb::KeyError as ProtoKeyError;

/// Result with [`Error`] as the error type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in tikv-plan.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Region answered with a Region error the client could not resolve
    /// (client-rust's variant). When the retries were spent on it, its
    /// message names the Region and the attempts.
    #[error("a Region answered with a region error: {}", describe_region_error(.0))]
    RegionError(Box<ProtoRegionError>),
    /// A structured key-level error from TiKV (a `KeyError` in the response).
    #[error("TiKV rejected the request for a key: {}", describe_key_error(.0))]
    KeyError(Box<ProtoKeyError>),
    /// A raw request's `error` string from TiKV (client-rust's `KvError`).
    #[error("TiKV rejected the request: {message}")]
    KvError {
        /// The server's message.
        message: String,
    },
    /// PD knows no Region for a key.
    #[error("PD has no region for key {key:?}; the cluster may not be bootstrapped")]
    RegionForKeyNotFound {
        /// The key looked up.
        key: Vec<u8>,
    },
    /// A Region has no leader the client could find.
    #[error("region {} has no known leader and no voter accepted the request; the Region may be electing a leader, retry later", .region.id)]
    LeaderNotFound {
        /// The Region (id and epoch), as client-rust names it.
        region: crate::ids::RegionVerId,
    },
    /// `insert` of a key the transaction already wrote, or that exists.
    #[error("the key to insert already exists; use put to overwrite it")]
    DuplicateKeyInsertion,
    /// The transaction was used after `commit` or `rollback` was called.
    #[error("the transaction was already committed or rolled back (or a commit was attempted); begin a new transaction")]
    OperationAfterCommitError,
    /// An operation that needs another kind of transaction (a pessimistic
    /// one, or a writable one).
    #[error("this operation is not allowed for this kind of transaction (read-only, optimistic or pessimistic); check TransactionOptions")]
    InvalidTransactionType,
    /// An operation needs a primary key, but the transaction wrote nothing.
    #[error("the transaction has no primary key: it has no mutations or locks yet")]
    NoPrimaryKey,
    /// A 1PC commit could not be completed, and TiKV did not fall back to
    /// two-phase commit.
    #[error("the one-phase commit failed; commit without try_one_pc")]
    OnePcFailure,
    /// Locks that could not be resolved before the request deadline.
    #[error("{} lock(s) could not be resolved in time (first on key {:?}); the transactions holding them are still alive, retry later", .0.len(), .0.first().map(|l| crate::Key::from(l.key.clone())))]
    ResolveLockError(Vec<kvrpcpb::LockInfo>),
    /// Acquiring pessimistic locks failed; `success_keys` were locked and
    /// have been released again.
    #[error("pessimistic locking failed: {inner}")]
    PessimisticLockError {
        /// Why (also the error's [`source`](std::error::Error::source)).
        #[source]
        inner: Box<Error>,
        /// The keys whose locks were acquired before the failure.
        success_keys: Vec<Vec<u8>>,
    },
    /// TiKV found no lock or record of the transaction.
    #[error("transaction {} (primary {:?}) was not found: it was rolled back or never prewrote", .0.start_ts, crate::Key::from(.0.primary_key.clone()))]
    TxnNotFound(kvrpcpb::TxnNotFound),
    /// A scan asked for more pairs than one scan may return.
    #[error("scan limit {limit} is over the maximum of {max_limit}; scan in pages (each starting after the last key of the previous one) or use `RawClient::scan_stream`")]
    MaxScanLimitExceeded {
        /// The limit passed.
        limit: u32,
        /// The largest limit accepted (`MAX_RAW_KV_SCAN_LIMIT`).
        max_limit: u32,
    },
    /// A column family name that TiKV does not have.
    #[error("unsupported column family {0:?}; use \"default\", \"lock\" or \"write\"")]
    ColumnFamilyError(String),
    /// PD does not know the keyspace named in `Config::keyspace`.
    #[error("keyspace {0:?} not found in PD (or not enabled); create it in PD or fix `Config::with_keyspace`")]
    KeyspaceNotFound(String),
    /// The operation needs another mode of the client (client-rust's
    /// variant): `compare_and_swap` on a client without atomic mode, or
    /// `delete_range` or `batch_delete` on one with it (as in client-rust;
    /// TiKV cannot delete a range atomically).
    #[error("the operation is not supported in this mode: compare_and_swap needs atomic mode (plain writes could interleave with it; use client.with_atomic_for_cas()), and delete_range and batch_delete cannot run in atomic mode (use a client without with_atomic_for_cas())")]
    UnsupportedMode,
    /// A gRPC call ended with a status (client-rust's variant). The status
    /// keeps its source chain, which the router walks to tell transport
    /// failures from server answers; [`source`](std::error::Error::source)
    /// is the status itself, so a chain walk goes on to the transport's
    /// error and its `std::io::Error`, if any.
    #[error("{}", failure::describe_status(.0))]
    GrpcAPI(#[source] tonic::Status),
    /// The outcome is unknown: the request may or may not have been applied
    /// (client-rust's variant). Built for a write that may have reached a
    /// store without an answer, which is never re-sent
    /// ([routing.md, "Replay safety"](crate::spec::routing#replay-safety)),
    /// and by `TransactionClient`'s `commit` when its commit point (the
    /// primary's commit; a prewrite under async commit or 1PC) may have
    /// been applied and no later attempt got a definite answer ([txn.md,
    /// "Behaviour we require"](crate::spec::txn#behaviour-we-require)).
    /// [`Error::failure`] names the Region, store and keys
    /// ([`Failure::Undetermined`]).
    #[error("{}", describe_undetermined(.0))]
    UndeterminedError(#[source] Box<Error>),
    /// A bug or a protocol mismatch inside the client; please report it.
    #[error("internal error (please report): {message}")]
    InternalError {
        /// What went wrong.
        message: String,
    },
    /// client-rust's free-text error. tikv-plan builds it where only text
    /// is left to carry: inside an [`Error::UndeterminedError`] when a
    /// transaction whose commit ended undetermined is asked to commit or
    /// roll back again, and as the copy of an error that cannot be cloned
    /// (a transport error, a task's failure) that several waiters share.
    #[error("{0}")]
    StringError(String),
    /// client-rust's "not implemented" error; tikv-plan never builds it.
    #[error("the feature is not implemented")]
    Unimplemented,
    /// Several Regions (or stores) of one request failed: their errors, in
    /// shard order (client-rust's variant).
    #[error("{} requests failed; first: {}", .0.len(), .0.first().map(|e| e.to_string()).unwrap_or_default())]
    ExtractedErrors(Vec<Error>),
    /// Several keys of one request were refused, each with a key error
    /// (client-rust's variant).
    #[error("{} key errors; first: {}", .0.len(), .0.first().map(|e| e.to_string()).unwrap_or_default())]
    MultipleKeyErrors(Vec<Error>),
    /// No Region covers a range (client-rust's variant).
    #[error("PD has no region for the range {range:?}; the cluster may not be bootstrapped")]
    RegionForRangeNotFound {
        /// The range looked up.
        range: crate::BoundRange,
    },
    /// A Region was missing from PD's answer.
    #[error("region {region_id} is missing from the response")]
    RegionNotFoundInResponse {
        /// The Region.
        region_id: u64,
    },
    /// An `EpochNotMatch` error carried no current Regions.
    #[error("an EpochNotMatch error carried no current regions")]
    NoCurrentRegions,
    /// A Region expected in the cache was not there.
    #[error("the region is not in the region cache")]
    EntryNotFoundInRegionCache,
    /// An I/O error (client-rust's variant).
    #[error("I/O error: {0}")]
    Io(#[from] std::io::Error),
    /// A tokio oneshot channel closed before its answer was sent
    /// (client-rust's variant).
    #[error("an internal channel closed before its answer came: {0}")]
    Channel(#[from] tokio::sync::oneshot::error::RecvError),
    /// tonic could not set up a channel (client-rust's variant). The client
    /// itself reports a failed connect as [`Failure::Connect`](crate::Failure::Connect) or
    /// [`Failure::ConnectTimeout`](crate::Failure::ConnectTimeout), which name the address and keep tonic's
    /// error as their source.
    #[error("gRPC transport error: {0}")]
    Grpc(#[from] tonic::transport::Error),
    /// An address that is not a URI (client-rust's variant).
    #[error("not a valid address: {0}; write it as host:port")]
    Url(#[from] tonic::codegen::http::uri::InvalidUri),
    /// A futures oneshot channel was dropped before its answer was sent
    /// (client-rust's variant).
    #[error("an internal channel was dropped before its answer came: {0}")]
    Canceled(#[from] futures::channel::oneshot::Canceled),
    /// A spawned task panicked or was cancelled (client-rust's variant).
    #[error("a spawned task failed: {0}")]
    JoinError(#[from] tokio::task::JoinError),
    /// A version requirement that is not semver, such as the coprocessor
    /// version of [`RawClient::coprocessor`](crate::RawClient::coprocessor)
    /// (client-rust's variant).
    #[error("not a semver version requirement: {0}; write it as e.g. \">=1.0, <2\"")]
    InvalidSemver(#[from] semver::Error),
}

/// The underlying error of a failure the crate wrapped (a transport error,
/// an I/O error, a status, or another [`Error`]), shared (an `Arc`): the
/// copies the crate makes of one failure, such as a failed Region load
/// handed to every caller that waited for it, keep the same underlying
/// error. [`Error`] itself is not `Clone`.
///
/// It is what [`std::error::Error::source`] returns for the variants that
/// have a `source` field, and it hands out the wrapped error itself, so a
/// chain walk can `downcast_ref` it to its own type (for a refused connect,
/// the chain ends in an `std::io::Error` of kind `ConnectionRefused`).
#[derive(Clone)]
pub struct ErrorSource(Arc<dyn std::error::Error + Send + Sync + 'static>);

impl ErrorSource {
    /// Wraps `error`.
    pub fn new(error: impl std::error::Error + Send + Sync + 'static) -> Self {
        ErrorSource(Arc::new(error))
    }

    /// Wraps an already boxed error, keeping its concrete type reachable.
    pub fn from_boxed(error: Box<dyn std::error::Error + Send + Sync + 'static>) -> Self {
        ErrorSource(Arc::from(error))
    }

    /// The wrapped error.
    pub fn get(&self) -> &(dyn std::error::Error + Send + Sync + 'static) {
        &*self.0
    }
}

// `ErrorSource` deliberately does not implement `std::error::Error`: the
// derived `source()` of [`Error`] dereferences it, so a chain walk meets the
// wrapped error itself (downcastable to its type), not this wrapper.
impl std::ops::Deref for ErrorSource {
    type Target = dyn std::error::Error + Send + Sync + 'static;

    fn deref(&self) -> &Self::Target {
        &*self.0
    }
}

impl fmt::Debug for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for ErrorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

impl From<Error> for ErrorSource {
    fn from(error: Error) -> Self {
        ErrorSource::new(error)
    }
}

impl From<tonic::Status> for Error {
    /// A response over the decoding limit becomes
    /// [`Failure::GrpcMessageTooLarge`](crate::Failure::GrpcMessageTooLarge), which names the knob; every other
    /// status stays whole in [`Error::GrpcAPI`].
    fn from(status: tonic::Status) -> Self {
        if let Some(limit) = decoding_limit_exceeded(&status) {
            return Error::from(Failure::GrpcMessageTooLarge {
                address: "a TiKV store or PD".to_owned(),
                limit,
                message: status.message().to_owned(),
                source: Some(ErrorSource::new(status)),
            });
        }
        Error::GrpcAPI(status)
    }
}

/// tonic refuses a message over `max_decoding_message_size` with
/// `OutOfRange` and "decoded message length too large: found N bytes, the
/// limit is: M bytes"; this reads M back (0 when the text differs).
fn decoding_limit_exceeded(status: &tonic::Status) -> Option<usize> {
    if status.code() != tonic::Code::OutOfRange {
        return None;
    }
    let message = status.message();
    if !message.contains("message length too large") {
        return None;
    }
    let limit = message
        .rsplit("limit is:")
        .next()
        .and_then(|tail| tail.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0);
    Some(limit)
}

impl From<ProtoRegionError> for Error {
    fn from(e: ProtoRegionError) -> Error {
        Error::RegionError(Box::new(e))
    }
}

impl From<ProtoKeyError> for Error {
    fn from(e: ProtoKeyError) -> Error {
        Error::KeyError(Box::new(e))
    }
}

/// An undetermined outcome in words: the failure's own sentence when the
/// client knows the request, else the commit's.
fn describe_undetermined(inner: &Error) -> String {
    match inner.failure() {
        Some(failure @ Failure::Undetermined { .. }) => failure.to_string(),
        _ => format!(
            "whether the transaction committed is unknown: {inner}; read its keys in a new \
             transaction before retrying it"
        ),
    }
}

impl Error {
    /// Wraps a Region error.
    /// The Region id is not kept in the variant (client-rust's shape); the
    /// message names it when the caller has nothing better.
    pub fn region_error(region_id: u64, mut error: errorpb::Error) -> Self {
        if error.message.is_empty() {
            error.message = format!("region {region_id}");
        }
        Error::RegionError(Box::new(error))
    }

    /// The first error of type `T` in this error's source chain, this error
    /// included. It looks through the `Box` and `Arc` the variants hold
    /// (`Box<tonic::Status>`, `Box<Error>`, `Arc<std::io::Error>`), which a
    /// plain `downcast_ref::<T>()` on a chain element would not.
    ///
    /// ```
    /// use std::io;
    /// let error = tikv_plan::Error::from(io::Error::from(io::ErrorKind::ConnectionReset));
    /// let io = error.find_source::<io::Error>().map(io::Error::kind);
    /// assert_eq!(io, Some(io::ErrorKind::ConnectionReset));
    /// ```
    pub fn find_source<T: std::error::Error + 'static>(&self) -> Option<&T> {
        let mut current: Option<&(dyn std::error::Error + 'static)> = Some(self);
        while let Some(error) = current {
            if let Some(found) = error.downcast_ref::<T>() {
                return Some(found);
            }
            if let Some(found) = error.downcast_ref::<Box<T>>() {
                return Some(found);
            }
            if let Some(found) = error.downcast_ref::<Arc<T>>() {
                return Some(found);
            }
            current = error.source();
        }
        None
    }

    /// The deadlock TiKV's detector reported, when this error is (or
    /// carries) one: a pessimistic lock request of this transaction would
    /// have closed a cycle of transactions waiting for each other's locks.
    /// Nothing was locked by that request; roll the transaction back and
    /// run it again (the other transactions of the cycle proceed). The
    /// answer's `wait_chain` names the transactions and keys of the cycle.
    pub fn deadlock(&self) -> Option<&kvrpcpb::Deadlock> {
        match self {
            Error::KeyError(e) => e.deadlock.as_ref(),
            Error::PessimisticLockError { inner, .. } => inner.deadlock(),
            Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
                errors.iter().find_map(Error::deadlock)
            }
            _ => None,
        }
    }

    /// True for an outcome that may or may not have been applied.
    pub fn is_undetermined(&self) -> bool {
        matches!(self, Error::UndeterminedError(_))
    }

    /// True when this error, or an error it carries (the pieces of a
    /// multi-Region failure, the last error before retries or the deadline
    /// ran out), says the outcome is unknown: a write that failed so may
    /// have been applied, and must not be assumed lost.
    pub fn undetermined_anywhere(&self) -> bool {
        match self {
            e if e.is_undetermined() => true,
            Error::MultipleKeyErrors(errors) | Error::ExtractedErrors(errors) => {
                errors.iter().any(Error::undetermined_anywhere)
            }
            e => match e.failure() {
                Some(
                    Failure::RetriesExhausted { last, .. } | Failure::DeadlineExceeded { last, .. },
                ) => last.undetermined_anywhere(),
                _ => false,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_message_key_errors_are_described_by_their_fields() {
        let too_large = kvrpcpb::KeyError {
            commit_ts_too_large: Some(kvrpcpb::CommitTsTooLarge { commit_ts: 77 }),
            ..Default::default()
        };
        assert!(describe_key_error(&too_large).contains("commit ts 77"));
        let assertion = kvrpcpb::KeyError {
            assertion_failed: Some(kvrpcpb::AssertionFailed {
                start_ts: 5,
                key: b"k".to_vec(),
                assertion: kvrpcpb::Assertion::NotExist as i32,
                existing_start_ts: 3,
                existing_commit_ts: 4,
            }),
            ..Default::default()
        };
        let text = describe_key_error(&assertion);
        assert!(
            text.contains("NotExist") && text.contains("transaction 5"),
            "{text}"
        );
        assert!(text.contains("started at 3 and committed at 4"), "{text}");
        let mismatch = kvrpcpb::KeyError {
            primary_mismatch: Some(kvrpcpb::PrimaryMismatch {
                lock_info: Some(kvrpcpb::LockInfo {
                    key: b"s".to_vec(),
                    primary_lock: b"p".to_vec(),
                    lock_version: 9,
                    ..Default::default()
                }),
            }),
            ..Default::default()
        };
        let text = describe_key_error(&mismatch);
        assert!(text.contains("not the primary of transaction 9"), "{text}");
    }
    use std::error::Error as StdError;
    use std::io;

    fn refused() -> ErrorSource {
        ErrorSource::new(io::Error::from(io::ErrorKind::ConnectionRefused))
    }

    #[test]
    fn an_error_source_hands_out_the_wrapped_error_itself() {
        let err = Error::from(Failure::Connect {
            address: "127.0.0.1:1".to_owned(),
            message: "refused".to_owned(),
            source: Some(refused()),
        });
        let failure = err.failure().expect("the failure");
        let source = failure.source().expect("a source");
        // The io::Error itself, not a wrapper around it.
        let io = source.downcast_ref::<io::Error>().expect("downcasts");
        assert_eq!(io.kind(), io::ErrorKind::ConnectionRefused);
        let no_source = Error::from(Failure::Connect {
            address: "a".to_owned(),
            message: "m".to_owned(),
            source: None,
        });
        assert!(no_source.failure().is_some_and(|f| f.source().is_none()));
    }

    #[test]
    fn every_wrapping_variant_has_a_source() {
        let inner = || {
            Box::new(Error::InternalError {
                message: "inner".to_owned(),
            })
        };
        let status = || tonic::Status::unavailable("down");
        let with_source = [
            Error::GrpcAPI(status()),
            Error::from(io::Error::from(io::ErrorKind::BrokenPipe)),
            Error::from(Failure::ConnectTimeout {
                address: "a".to_owned(),
                timeout: Duration::from_secs(1),
                source: Some(refused()),
            }),
            Error::from(Failure::PdUnavailable {
                endpoints: "pd".to_owned(),
                message: "m".to_owned(),
                source: Some(ErrorSource::from(Error::InternalError {
                    message: "x".to_owned(),
                })),
            }),
            Error::from(Failure::Security {
                path: "ca.pem".to_owned(),
                message: "m".to_owned(),
                source: Some(ErrorSource::new(io::Error::from(io::ErrorKind::NotFound))),
            }),
            Error::from(Failure::Undetermined {
                region_id: 1,
                store_id: 2,
                request: "raw_put".to_owned(),
                cause: inner(),
            }),
            Error::from(Failure::DeadlineExceeded {
                region_id: 1,
                deadline: Duration::from_secs(1),
                last: inner(),
            }),
            Error::from(Failure::RetriesExhausted {
                region_id: 1,
                attempts: 3,
                last: Box::new(Error::GrpcAPI(status())),
            }),
            Error::PessimisticLockError {
                inner: inner(),
                success_keys: Vec::new(),
            },
            Error::UndeterminedError(inner()),
        ];
        for err in with_source {
            assert!(err.source().is_some(), "{err:?}");
        }
    }

    #[test]
    fn find_source_looks_through_boxes_and_arcs() {
        let err = Error::from(Failure::Undetermined {
            region_id: 7,
            store_id: 3,
            request: "raw_put".to_owned(),
            cause: Box::new(Error::from(io::Error::from(io::ErrorKind::ConnectionReset))),
        });
        // client-rust's variant, with tikv-plan's account inside.
        assert!(matches!(err, Error::UndeterminedError(_)));
        assert!(matches!(
            err.failure(),
            Some(Failure::Undetermined { region_id: 7, .. })
        ));
        assert!(matches!(
            err.find_source::<Failure>(),
            Some(Failure::Undetermined { .. })
        ));
        let io = err.find_source::<io::Error>().expect("an io error");
        assert_eq!(io.kind(), io::ErrorKind::ConnectionReset);
        let text = err.to_string();
        assert!(text.contains("region 7, store 3"), "{text}");
    }

    #[test]
    fn a_message_over_the_decoding_limit_keeps_the_status() {
        let status = tonic::Status::out_of_range(
            "Error, decoded message length too large: found 20 bytes, the limit is: 16 bytes",
        );
        let err = Error::from(status);
        assert!(
            matches!(
                err.failure(),
                Some(Failure::GrpcMessageTooLarge { limit: 16, .. })
            ),
            "{err:?}"
        );
        let status = err.find_source::<tonic::Status>().expect("the status");
        assert_eq!(status.code(), tonic::Code::OutOfRange);
    }
}
