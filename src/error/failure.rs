//! [`Failure`]: what tikv-plan knows about a failure beyond the variant of
//! client-rust's [`Error`] it is reported as. A failure travels inside that
//! variant: as the source of the status of an [`Error::GrpcAPI`] (or of the
//! I/O error of an [`Error::Io`], for TLS files), so a client-rust program
//! takes the branch it always took, and [`Error::failure`] hands the rest
//! (the Region, store, address, attempts, request) back.

use std::sync::Arc;
use std::time::Duration;

use tonic::Code;

use super::{Error, ErrorSource};
use crate::proto::pdpb;

/// What went wrong, in tikv-plan's words: the Region, store, address or
/// request concerned. Reported inside one of client-rust's [`Error`]
/// variants (see [`Error::failure`] for which); a chain walk meets it after
/// that variant.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Failure {
    /// Opening a connection to a TiKV store or PD failed before any request
    /// was sent.
    #[error("could not connect to {address}: {message}; check that the server is running and the address is reachable")]
    Connect {
        /// The address that was dialled.
        address: String,
        /// What the transport reported (the root cause, in words).
        message: String,
        /// The transport's own error (a `tonic::transport::Error` whose
        /// chain ends in the `std::io::Error` of the failed dial), when the
        /// failure came from a real connect.
        source: Option<ErrorSource>,
    },
    /// Opening a connection did not finish within the connect timeout.
    #[error("connecting to {address} did not finish within {timeout:?}; the server may be down or dropping packets (raise `Config::connect_timeout` if the network is just slow)")]
    ConnectTimeout {
        /// The address that was dialled.
        address: String,
        /// The connect timeout in force.
        timeout: Duration,
        /// What ended the wait, when a real connect timed out: the
        /// transport's error (its chain ends in an `std::io::Error` of kind
        /// `TimedOut`) or the client's own `tokio::time::error::Elapsed`.
        source: Option<ErrorSource>,
    },
    /// PD answered with an error header.
    #[error("PD answered with {error_type:?}: {message}")]
    Pd {
        /// PD's error type.
        error_type: pdpb::ErrorType,
        /// PD's message.
        message: String,
    },
    /// No PD endpoint could be used.
    #[error("no PD endpoint answered ({endpoints}): {message}; check the PD addresses and that PD is running")]
    PdUnavailable {
        /// The endpoints that were tried, comma separated.
        endpoints: String,
        /// Why the last one failed.
        message: String,
        /// The last failure itself (an [`Error`], e.g. [`Error::GrpcAPI`] or
        /// [`Failure::Connect`], whose own chain goes on), when there was one.
        source: Option<ErrorSource>,
    },
    /// PD endpoints disagree on the cluster id: they belong to different
    /// clusters.
    #[error("PD endpoint {endpoint} belongs to cluster {found}, but the client is connected to cluster {expected}; list endpoints of one cluster only")]
    ClusterIdMismatch {
        /// The endpoint that answered with another id.
        endpoint: String,
        /// The id the client settled on.
        expected: u64,
        /// The id that endpoint reported.
        found: u64,
    },
    /// PD knows no Region with this id.
    #[error("PD has no region with id {region_id}; it may have been merged away")]
    RegionNotFoundInPd {
        /// The Region id looked up.
        region_id: u64,
    },
    /// PD knows no store with this id.
    #[error("PD has no store with id {store_id}; it may have been removed from the cluster")]
    StoreNotFound {
        /// The store id looked up.
        store_id: u64,
    },
    /// The store runs another engine than TiKV (TiFlash, by its `engine`
    /// label): no TiKV request is ever sent to it, so nothing was
    /// ([routing.md, "TiFlash"](crate::spec::routing#tiflash-stores-and-peers)).
    #[error("store {store_id} is a {engine} store, not TiKV: no TiKV request is sent to it (nothing was sent); a Region's TiFlash learners serve TiFlash's own requests only")]
    NotTiKvStore {
        /// The store.
        store_id: u64,
        /// The value of its `engine` label (`tiflash`, `tiflash_compute`).
        engine: String,
    },
    /// PD answered a Region lookup with a version older than one the client
    /// already holds, and nothing newer covers the key yet.
    #[error("PD answered with an older version of region {region_id} than the client already knows; PD is catching up, retry the request")]
    StaleRegion {
        /// The Region.
        region_id: u64,
    },
    /// The request may or may not have been applied: it may have reached the
    /// server before the failure. It was not replayed ([routing.md, "Replay
    /// safety"](crate::spec::routing#replay-safety)).
    #[error("the outcome of {request} (region {region_id}, store {store_id}) is unknown: it may or may not have been applied, now or later; {cause}; read the keys back before deciding whether to retry")]
    Undetermined {
        /// The Region the request went to.
        region_id: u64,
        /// The store it was sent to.
        store_id: u64,
        /// The request: its kind and its keys or range.
        request: String,
        /// What interrupted it (also the error's
        /// [`source`](std::error::Error::source)).
        #[source]
        cause: Box<Error>,
    },
    /// The request's overall deadline ([`Config::request_deadline`](crate::Config::request_deadline))
    /// ends before the next retry could finish.
    #[error("gave up on region {region_id}: the request deadline of {deadline:?} ran out; last error: {last}; raise Config::request_deadline or check the cluster's health")]
    DeadlineExceeded {
        /// The Region.
        region_id: u64,
        /// The deadline in force.
        deadline: Duration,
        /// The strongest error seen before the deadline (also the error's
        /// [`source`](std::error::Error::source)).
        #[source]
        last: Box<Error>,
    },
    /// The caller passed something the client cannot use.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// An operation did not finish in time.
    #[error("{what} did not finish within {after:?}")]
    Timeout {
        /// What timed out.
        what: String,
        /// The bound that was exceeded.
        after: Duration,
    },
    /// The TLS configuration could not be used.
    #[error("TLS setup failed for {path}: {message}")]
    Security {
        /// The file concerned, or a description of the setting.
        path: String,
        /// What was wrong with it.
        message: String,
        /// The underlying error (the `std::io::Error` of a file that could
        /// not be read, tonic's error for a TLS setting it refused), when
        /// there was one.
        source: Option<ErrorSource>,
    },
    /// Retries were spent without an answer; `last` is the strongest error
    /// seen ([routing.md, "One round, per
    /// shard"](crate::spec::routing#one-round-per-shard)).
    #[error("gave up on region {region_id} after {attempts} attempts: {last}")]
    RetriesExhausted {
        /// The Region.
        region_id: u64,
        /// How many attempts were made.
        attempts: u32,
        /// The strongest error of the last round (also the error's
        /// [`source`](std::error::Error::source)).
        #[source]
        last: Box<Error>,
    },
    /// A gRPC response was larger than the client decodes.
    #[error("a gRPC response from {address} was larger than the {limit}-byte limit ({message}); raise `Config::grpc_max_decoding_message_size` (`with_grpc_max_decoding_message_size`) or ask for less (a smaller scan limit or batch)")]
    GrpcMessageTooLarge {
        /// The store or PD address, when known.
        address: String,
        /// The limit in force.
        limit: usize,
        /// What the gRPC layer reported.
        message: String,
        /// The status tonic returned.
        source: Option<ErrorSource>,
    },
    /// A blocking client ([`SyncRawClient`](crate::SyncRawClient),
    /// [`SyncTransactionClient`](crate::SyncTransactionClient) and what they
    /// hand out) was called on a thread inside a Tokio runtime, where
    /// blocking would stall the runtime (client-rust's main branch reports
    /// it as `Error::NestedRuntimeError`, a variant tikv-client 0.4 does not
    /// have). Nothing was sent.
    #[error("{call} was called inside a Tokio runtime, where a blocking client must not block (nothing was sent); use the async client there (RawClient, TransactionClient), or call the blocking client from a thread that belongs to no runtime (std::thread::spawn; the threads of tokio's spawn_blocking belong to the runtime)")]
    NestedRuntime {
        /// The blocking call, as `SyncRawClient::get`.
        call: String,
    },
}

impl Failure {
    /// The status code a failure is reported with: what a gRPC server
    /// would have answered in its place.
    fn code(&self) -> Code {
        match self {
            Failure::Connect { .. }
            | Failure::ConnectTimeout { .. }
            | Failure::PdUnavailable { .. }
            | Failure::StaleRegion { .. } => Code::Unavailable,
            Failure::Pd { .. } | Failure::Undetermined { .. } => Code::Unknown,
            Failure::ClusterIdMismatch { .. }
            | Failure::NotTiKvStore { .. }
            | Failure::NestedRuntime { .. } => Code::FailedPrecondition,
            Failure::RegionNotFoundInPd { .. } | Failure::StoreNotFound { .. } => Code::NotFound,
            Failure::DeadlineExceeded { .. } | Failure::Timeout { .. } => Code::DeadlineExceeded,
            Failure::InvalidArgument(_) => Code::InvalidArgument,
            Failure::Security { .. } => Code::Unauthenticated,
            Failure::RetriesExhausted { last, .. } => match &**last {
                Error::GrpcAPI(status) => status.code(),
                _ => Code::Unavailable,
            },
            Failure::GrpcMessageTooLarge { .. } => Code::OutOfRange,
        }
    }
}

/// The status that carries `failure` to a caller: its code, the failure's
/// sentence as the message, the failure as the source.
fn status_of(failure: Failure) -> tonic::Status {
    let mut status = tonic::Status::new(failure.code(), failure.to_string());
    status.set_source(Arc::new(failure));
    status
}

impl From<Failure> for Error {
    /// The variant of client-rust's [`Error`] a failure is reported as:
    ///
    /// - retries spent on a Region error: that [`Error::RegionError`]
    ///   (client-rust's answer), its message naming the Region and the
    ///   attempts; on a key error or another client-rust error: that error;
    /// - a request that may have been applied: [`Error::UndeterminedError`];
    /// - a TLS file that could not be used: [`Error::Io`];
    /// - everything else (connecting, PD, deadlines, timeouts, bad input,
    ///   a response over the size limit): [`Error::GrpcAPI`], with the
    ///   code a server would have answered with.
    fn from(failure: Failure) -> Error {
        match failure {
            Failure::RetriesExhausted {
                region_id,
                attempts,
                last,
            } => match *last {
                Error::RegionError(mut e) => {
                    e.message = format!(
                        "region {region_id}: gave up after {attempts} attempts: {}",
                        e.message
                    );
                    Error::RegionError(e)
                }
                last @ Error::GrpcAPI(_) => Error::GrpcAPI(status_of(Failure::RetriesExhausted {
                    region_id,
                    attempts,
                    last: Box::new(last),
                })),
                last => last,
            },
            undetermined @ Failure::Undetermined { .. } => {
                Error::UndeterminedError(Box::new(Error::GrpcAPI(status_of(undetermined))))
            }
            security @ Failure::Security { .. } => {
                let kind = match &security {
                    Failure::Security {
                        source: Some(source),
                        ..
                    } => source
                        .get()
                        .downcast_ref::<std::io::Error>()
                        .map_or(std::io::ErrorKind::InvalidInput, std::io::Error::kind),
                    _ => std::io::ErrorKind::InvalidInput,
                };
                Error::Io(std::io::Error::new(kind, security))
            }
            other => Error::GrpcAPI(status_of(other)),
        }
    }
}

impl Error {
    /// What tikv-plan knows beyond client-rust's variant, when this error
    /// (or the error an [`Error::UndeterminedError`] wraps) carries a
    /// [`Failure`]: the address of a failed connect, the Region and
    /// attempts of a request that ran out of retries or time, the request
    /// whose outcome is unknown.
    ///
    /// ```
    /// use tikv_plan::Failure;
    /// let error = tikv_plan::Error::from(Failure::StoreNotFound { store_id: 4 });
    /// assert!(matches!(error, tikv_plan::Error::GrpcAPI(_)));
    /// assert!(matches!(error.failure(), Some(Failure::StoreNotFound { store_id: 4 })));
    /// ```
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            Error::GrpcAPI(status) => status_failure(status),
            Error::Io(e) => e.get_ref().and_then(|e| e.downcast_ref::<Failure>()),
            Error::UndeterminedError(inner) => inner.failure(),
            _ => None,
        }
    }
}

/// The failure a status carries as its source, if any.
pub(crate) fn status_failure(status: &tonic::Status) -> Option<&Failure> {
    std::error::Error::source(status).and_then(|s| s.downcast_ref::<Failure>())
}

/// A status's text: the failure's sentence when it carries one, else its
/// code and message.
pub(super) fn describe_status(status: &tonic::Status) -> String {
    match status_failure(status) {
        Some(failure) => failure.to_string(),
        None => format!(
            "gRPC call failed with {}: {}",
            status.code(),
            status.message()
        ),
    }
}
