//! Copies of an [`Error`], for failures several waiters share: `Error` is
//! not `Clone` (as client-rust's, it wraps errors that are not).

use std::sync::Arc;

use super::Error;

impl Error {
    /// The error of a failure several waiters share (a Region load, a TSO
    /// round, a lock resolution): the last holder gets it whole, the
    /// others a copy ([`duplicate`](Self::duplicate)).
    pub(crate) fn from_shared(shared: Arc<Error>) -> Error {
        Arc::try_unwrap(shared).unwrap_or_else(|shared| shared.duplicate())
    }

    /// A copy, for errors several waiters share. `Error` is not `Clone`
    /// (as client-rust's, it wraps errors that are not: I/O, tonic's
    /// transport error, a task's `JoinError`, semver's error); those are
    /// copied as their kind and text: an I/O error keeps its kind, the
    /// others become a [`Error::StringError`] with their text.
    pub(crate) fn duplicate(&self) -> Error {
        let boxed = |e: &Error| Box::new(e.duplicate());
        let all = |es: &[Error]| es.iter().map(Error::duplicate).collect();
        match self {
            Error::RegionError(e) => Error::RegionError(e.clone()),
            Error::KeyError(e) => Error::KeyError(e.clone()),
            Error::KvError { message } => Error::KvError {
                message: message.clone(),
            },
            Error::RegionForKeyNotFound { key } => Error::RegionForKeyNotFound { key: key.clone() },
            Error::LeaderNotFound { region } => Error::LeaderNotFound { region: *region },
            Error::DuplicateKeyInsertion => Error::DuplicateKeyInsertion,
            Error::OperationAfterCommitError => Error::OperationAfterCommitError,
            Error::InvalidTransactionType => Error::InvalidTransactionType,
            Error::NoPrimaryKey => Error::NoPrimaryKey,
            Error::OnePcFailure => Error::OnePcFailure,
            Error::ResolveLockError(locks) => Error::ResolveLockError(locks.clone()),
            Error::PessimisticLockError {
                inner,
                success_keys,
            } => Error::PessimisticLockError {
                inner: boxed(inner),
                success_keys: success_keys.clone(),
            },
            Error::TxnNotFound(t) => Error::TxnNotFound(t.clone()),
            Error::MaxScanLimitExceeded { limit, max_limit } => Error::MaxScanLimitExceeded {
                limit: *limit,
                max_limit: *max_limit,
            },
            Error::ColumnFamilyError(cf) => Error::ColumnFamilyError(cf.clone()),
            Error::KeyspaceNotFound(name) => Error::KeyspaceNotFound(name.clone()),
            Error::UnsupportedMode => Error::UnsupportedMode,
            Error::GrpcAPI(status) => Error::GrpcAPI(status.clone()),
            Error::UndeterminedError(inner) => Error::UndeterminedError(boxed(inner)),
            Error::InternalError { message } => Error::InternalError {
                message: message.clone(),
            },
            Error::StringError(text) => Error::StringError(text.clone()),
            Error::Unimplemented => Error::Unimplemented,
            Error::ExtractedErrors(errors) => Error::ExtractedErrors(all(errors)),
            Error::MultipleKeyErrors(errors) => Error::MultipleKeyErrors(all(errors)),
            Error::RegionForRangeNotFound { range } => Error::RegionForRangeNotFound {
                range: range.clone(),
            },
            Error::RegionNotFoundInResponse { region_id } => Error::RegionNotFoundInResponse {
                region_id: *region_id,
            },
            Error::NoCurrentRegions => Error::NoCurrentRegions,
            Error::EntryNotFoundInRegionCache => Error::EntryNotFoundInRegionCache,
            Error::Io(e) => Error::Io(std::io::Error::new(e.kind(), e.to_string())),
            Error::Channel(e) => Error::Channel(e.clone()),
            Error::Canceled(e) => Error::Canceled(*e),
            Error::Grpc(_) | Error::Url(_) | Error::JoinError(_) | Error::InvalidSemver(_) => {
                Error::StringError(self.to_string())
            }
        }
    }
}
