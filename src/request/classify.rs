//! What a failed dispatch means for the candidate round ([routing.md, "gRPC
//! error classification"](crate::spec::routing#grpc-error-classification)).
//! Pure functions over errors: no I/O.

use std::error::Error as StdError;

use tonic::Code;

use crate::Error;

/// The routing meaning of an error returned by a dispatch or a store
/// mapping, before any Region response arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchFailure {
    /// The connection could not be opened (refused, connect timeout, TLS
    /// handshake): the request was never sent. Next candidate; invalidate the
    /// store.
    NotSent,
    /// The transport failed after the request may have left the client (I/O,
    /// hyper or h2 source, or `Unavailable`/`Cancelled`/`Internal`/`Unknown`).
    /// Next candidate; invalidate the store, and the Region if the round ends
    /// without success.
    Transport,
    /// The client gave up waiting (tonic's `TimeoutExpired`). Next candidate;
    /// caches stay.
    ClientTimeout,
    /// The server reset this one HTTP/2 stream (`RST_STREAM`); the
    /// connection, shared by every request to the store, is fine. Next
    /// candidate; caches and the channel stay. The request may have been
    /// received.
    StreamReset,
    /// The server reported `DeadlineExceeded`. Next candidate; caches stay.
    Deadline,
    /// An answer from the server that another replica would give too
    /// (`InvalidArgument`, `PermissionDenied`, ...). Returned to the caller,
    /// never replayed.
    Fatal,
}

impl DispatchFailure {
    /// True when the store entry (and its connection) should be dropped.
    pub fn invalidates_store(self) -> bool {
        matches!(self, DispatchFailure::NotSent | DispatchFailure::Transport)
    }

    /// True when the request may have reached the server: replaying it is
    /// unsafe for plans flagged `terminal_on_dispatch_error`.
    pub fn may_have_been_sent(self) -> bool {
        !matches!(self, DispatchFailure::NotSent)
    }

    /// True for timeouts, which keep every cache (and for a reset stream,
    /// which the round treats like one).
    pub fn keeps_caches(self) -> bool {
        self.is_timeout() || self == DispatchFailure::StreamReset
    }

    /// True for timeouts, which keep every cache.
    pub fn is_timeout(self) -> bool {
        matches!(
            self,
            DispatchFailure::ClientTimeout | DispatchFailure::Deadline
        )
    }
}

/// Classifies a gRPC status by walking its source chain first (tonic keeps
/// the underlying error as the source), then by its code.
///
/// ```
/// use tikv_plan::request::{classify_grpc_error, DispatchFailure};
/// let status = tonic::Status::invalid_argument("bad key");
/// assert_eq!(classify_grpc_error(&status), DispatchFailure::Fatal);
/// let status = tonic::Status::deadline_exceeded("slow");
/// assert_eq!(classify_grpc_error(&status), DispatchFailure::Deadline);
/// ```
pub fn classify_grpc_error(status: &tonic::Status) -> DispatchFailure {
    if let Some(by_source) = classify_status_source(status) {
        return by_source;
    }
    match status.code() {
        Code::DeadlineExceeded => DispatchFailure::Deadline,
        Code::Unavailable | Code::Cancelled | Code::Internal | Code::Unknown => {
            DispatchFailure::Transport
        }
        _ => DispatchFailure::Fatal,
    }
}

/// What a status's source chain alone says (a connect error, a client
/// timeout, an I/O, hyper, h2 or tonic transport error), or `None` when it
/// names nothing the transport did. The one transport classifier of the
/// crate: the store path and the PD path both ask it.
pub(crate) fn classify_status_source(status: &tonic::Status) -> Option<DispatchFailure> {
    classify_source_chain(status.source())
}

/// Walks a source chain. The most specific finding wins: a connect error or
/// a client timeout anywhere in the chain decides over the transport error
/// that wraps it.
fn classify_source_chain(first: Option<&(dyn StdError + 'static)>) -> Option<DispatchFailure> {
    let mut transport = false;
    let mut source = first;
    while let Some(err) = source {
        if err.downcast_ref::<tonic::ConnectError>().is_some() {
            return Some(DispatchFailure::NotSent);
        }
        if err.downcast_ref::<tonic::TimeoutExpired>().is_some() {
            return Some(DispatchFailure::ClientTimeout);
        }
        // hyper hands back a request it never gave to the connection (the
        // connection closed or was not ready first) as "canceled": it was
        // not sent, so even a write may go to the next candidate.
        if err
            .downcast_ref::<hyper::Error>()
            .is_some_and(hyper::Error::is_canceled)
        {
            return Some(DispatchFailure::NotSent);
        }
        // A reset of this one stream, not a GOAWAY or an I/O failure of the
        // connection: the shared channel is fine.
        if err
            .downcast_ref::<h2::Error>()
            .is_some_and(|e| e.is_reset() && !e.is_go_away() && !e.is_io())
        {
            return Some(DispatchFailure::StreamReset);
        }
        if err.downcast_ref::<tonic::transport::Error>().is_some()
            || err.downcast_ref::<hyper::Error>().is_some()
            || err.downcast_ref::<h2::Error>().is_some()
            || err.downcast_ref::<std::io::Error>().is_some()
        {
            transport = true;
        }
        // A status nested as a source: classify it by its code.
        if let Some(inner) = err.downcast_ref::<tonic::Status>() {
            if !transport && inner.code() == Code::DeadlineExceeded {
                return Some(DispatchFailure::Deadline);
            }
        }
        source = err.source();
    }
    transport.then_some(DispatchFailure::Transport)
}

/// Classifies any error a store mapping or a dispatch returned.
pub fn classify_dispatch_error(error: &Error) -> DispatchFailure {
    match error {
        Error::Grpc(status) => classify_grpc_error(status),
        Error::Connect { .. } | Error::ConnectTimeout { .. } => DispatchFailure::NotSent,
        Error::Timeout { .. } => DispatchFailure::ClientTimeout,
        // A store PD no longer knows cannot take the request: try the next.
        Error::StoreNotFound { .. } => DispatchFailure::NotSent,
        _ => DispatchFailure::Fatal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn with_source(code: Code, source: Arc<dyn StdError + Send + Sync>) -> tonic::Status {
        let mut s = tonic::Status::new(code, "x");
        s.set_source(source);
        s
    }

    #[derive(Debug)]
    struct Wrapper(Box<dyn StdError + Send + Sync>);
    impl std::fmt::Display for Wrapper {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "wrapped")
        }
    }
    impl StdError for Wrapper {
        fn source(&self) -> Option<&(dyn StdError + 'static)> {
            Some(self.0.as_ref())
        }
    }

    #[test]
    fn code_table_without_source() {
        let table = [
            (Code::DeadlineExceeded, DispatchFailure::Deadline),
            (Code::Unavailable, DispatchFailure::Transport),
            (Code::Cancelled, DispatchFailure::Transport),
            (Code::Internal, DispatchFailure::Transport),
            (Code::Unknown, DispatchFailure::Transport),
            (Code::InvalidArgument, DispatchFailure::Fatal),
            (Code::Unimplemented, DispatchFailure::Fatal),
            (Code::PermissionDenied, DispatchFailure::Fatal),
            (Code::Unauthenticated, DispatchFailure::Fatal),
            (Code::ResourceExhausted, DispatchFailure::Fatal),
            (Code::NotFound, DispatchFailure::Fatal),
            (Code::FailedPrecondition, DispatchFailure::Fatal),
        ];
        for (code, want) in table {
            assert_eq!(
                classify_grpc_error(&tonic::Status::new(code, "m")),
                want,
                "{code:?}"
            );
        }
    }

    #[test]
    fn source_chain_decides_before_the_code() {
        let io = || Arc::new(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        let table: Vec<(tonic::Status, DispatchFailure)> = vec![
            // I/O source under a status code that alone would be fatal.
            (
                with_source(Code::InvalidArgument, io()),
                DispatchFailure::Transport,
            ),
            (with_source(Code::Unknown, io()), DispatchFailure::Transport),
            // h2 source.
            (
                with_source(
                    Code::Internal,
                    Arc::new(h2::Error::from(h2::Reason::PROTOCOL_ERROR)),
                ),
                DispatchFailure::Transport,
            ),
            // Client-side timeout: Cancelled with TimeoutExpired.
            (
                with_source(Code::Cancelled, Arc::new(tonic::TimeoutExpired(()))),
                DispatchFailure::ClientTimeout,
            ),
            // Connect error, even wrapped and with an I/O error beneath it.
            (
                with_source(
                    Code::Unavailable,
                    Arc::new(Wrapper(Box::new(tonic::ConnectError(Box::new(
                        std::io::Error::from(std::io::ErrorKind::ConnectionRefused),
                    ))))),
                ),
                DispatchFailure::NotSent,
            ),
            // A timeout nested below a wrapper.
            (
                with_source(
                    Code::Cancelled,
                    Arc::new(Wrapper(Box::new(tonic::TimeoutExpired(())))),
                ),
                DispatchFailure::ClientTimeout,
            ),
            // An unrecognised source falls back to the code table.
            (
                with_source(
                    Code::PermissionDenied,
                    Arc::new(Wrapper(Box::new(std::fmt::Error))),
                ),
                DispatchFailure::Fatal,
            ),
        ];
        for (status, want) in table {
            assert_eq!(classify_grpc_error(&status), want, "{status:?}");
        }
    }

    #[test]
    fn tonic_from_error_keeps_the_timeout_recognisable() {
        let status = tonic::Status::from_error(Box::new(tonic::TimeoutExpired(())));
        assert_eq!(status.code(), Code::Cancelled);
        assert_eq!(classify_grpc_error(&status), DispatchFailure::ClientTimeout);
    }

    #[test]
    fn crate_errors_classify() {
        let table = [
            (
                Error::Connect {
                    address: "a".into(),
                    message: "refused".into(),
                },
                DispatchFailure::NotSent,
            ),
            (
                Error::ConnectTimeout {
                    address: "a".into(),
                    timeout: std::time::Duration::from_secs(1),
                },
                DispatchFailure::NotSent,
            ),
            (Error::Internal("bug".into()), DispatchFailure::Fatal),
            (
                Error::from(tonic::Status::unavailable("down")),
                DispatchFailure::Transport,
            ),
        ];
        for (e, want) in table {
            assert_eq!(classify_dispatch_error(&e), want, "{e}");
        }
    }

    #[test]
    fn failure_properties() {
        assert!(DispatchFailure::NotSent.invalidates_store());
        assert!(!DispatchFailure::NotSent.may_have_been_sent());
        assert!(DispatchFailure::Transport.invalidates_store());
        assert!(!DispatchFailure::ClientTimeout.invalidates_store());
        assert!(!DispatchFailure::Deadline.invalidates_store());
        assert!(DispatchFailure::Deadline.is_timeout());
    }
}
