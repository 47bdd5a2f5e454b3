//! What a failed dispatch means for the candidate round ([routing.md, "gRPC
//! error classification"](crate::spec::routing#grpc-error-classification)).
//! Pure functions over errors: no I/O.

use std::error::Error as StdError;

use tonic::Code;

use crate::Error;
use crate::Failure;

/// The routing meaning of an error returned by a dispatch or a store
/// mapping, before any Region response arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchFailure {
    /// The connection could not be opened (refused, connect timeout, TLS
    /// handshake), or the channel handed the request back because its
    /// connection had closed: the request was never sent. Next candidate;
    /// invalidate the store.
    NotSent,
    /// The transport failed after the request may have left the client (an
    /// I/O error of the connection, a transport failure tonic could not map
    /// to a reason, or `Unavailable`/`Cancelled`/`Internal`/`Unknown` from
    /// the server). Next candidate; invalidate the store, and the Region if
    /// the round ends without success.
    Transport,
    /// The client gave up waiting (tonic's `TimeoutExpired`). Next candidate;
    /// caches stay.
    ClientTimeout,
    /// The channel failed this one call without an I/O error of the
    /// connection: tonic mapped an HTTP/2 reset reason to the status code
    /// (`RST_STREAM` of this stream; see [`classify_grpc_error`] for the
    /// cases that look the same). Next candidate; caches and the channel
    /// stay (tonic reconnects a channel whose connection ended by itself).
    /// The request may have been received.
    StreamReset,
    /// The server reported `DeadlineExceeded`. Next candidate; caches stay.
    Deadline,
    /// An answer from the server that another replica would give too
    /// (`InvalidArgument`, `PermissionDenied`, ...). Returned to the caller,
    /// never replayed.
    Fatal,
}

impl DispatchFailure {
    #[cfg(test)]
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
pub fn classify_grpc_error(status: &tonic::Status) -> DispatchFailure {
    // A failure of the client's own (a connect, a timeout, a store PD no
    // longer knows) reported as a status: decided by what it is.
    if let Some(failure) = crate::error::status_failure(status) {
        return match failure {
            Failure::Connect { .. } | Failure::ConnectTimeout { .. } => DispatchFailure::NotSent,
            Failure::Timeout { .. } => DispatchFailure::ClientTimeout,
            // A store PD no longer knows cannot take the request: try the
            // next.
            Failure::StoreNotFound { .. } => DispatchFailure::NotSent,
            // Never sent to a TiFlash store; the round skips it without
            // blaming it (`routing/engine.rs`).
            Failure::NotTiKvStore { .. } => DispatchFailure::NotSent,
            _ => DispatchFailure::Fatal,
        };
    }
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

/// What a status's source chain says (a connect error, a client timeout,
/// an I/O error, or a failure of tonic's channel), or `None` when it names
/// nothing the transport did. The one transport classifier of the crate:
/// the store path and the PD path both ask it.
///
/// It relies only on what tonic exposes stably, never on hyper's or h2's
/// error types, checked per failure class over real sockets in
/// `src/store/tests/transport_classes.rs`:
///
/// - `tonic::ConnectError` (a refused or failed dial, a TLS handshake) or an
///   `std::io::Error` of kind `ConnectionRefused` anywhere in the chain:
///   [`NotSent`](DispatchFailure::NotSent); nothing left the client.
/// - `tonic::TimeoutExpired` (the channel's request timeout) or tokio's
///   `Elapsed`: [`ClientTimeout`](DispatchFailure::ClientTimeout).
/// - Any other `std::io::Error` (the connection broke: reset, broken pipe,
///   end of file, a TCP timeout): [`Transport`](DispatchFailure::Transport).
/// - A `tonic::transport::Error` without an I/O error under it: the channel
///   failed the call, and the code is tonic's mapping of the HTTP/2 reason
///   (`INTERNAL_ERROR`, `PROTOCOL_ERROR`, `NO_ERROR` → `Internal`; `CANCEL`
///   → `Cancelled`; `REFUSED_STREAM` → `Unavailable`; `ENHANCE_YOUR_CALM` →
///   `ResourceExhausted`; `INADEQUATE_SECURITY` → `PermissionDenied`):
///   [`StreamReset`](DispatchFailure::StreamReset). `Unknown` (a failure
///   tonic could not map) and anything else:
///   [`Transport`](DispatchFailure::Transport).
/// - The exception: a request hyper handed back unsent (`Cancelled`,
///   "operation was canceled", the connection closed before taking it) is
///   [`NotSent`](DispatchFailure::NotSent). tonic has no type for it; it is
///   recognised by its words (see `handed_back_unsent`), which fails safe.
/// - Any other error in the chain that is not itself a status (hyper's and
///   h2's own errors, when the stream is reset or the connection fails while
///   the response body is read, after the headers came): the HTTP/2 stack,
///   not the server's answer, failed the call, whatever code tonic gave it
///   (h2's `ENHANCE_YOUR_CALM` arrives as `ResourceExhausted`):
///   [`Transport`](DispatchFailure::Transport), as [routing.md's
///   table](crate::spec::routing#grpc-error-classification) says for a
///   status over an I/O, hyper or h2 error. Never
///   [`Fatal`](DispatchFailure::Fatal): another voter may well answer.
pub(crate) fn classify_status_source(status: &tonic::Status) -> Option<DispatchFailure> {
    let chain = walk_chain(status.source())?;
    if let Some(decided) = chain.decided {
        return Some(decided);
    }
    if chain.io {
        return Some(DispatchFailure::Transport);
    }
    if chain.channel && handed_back_unsent(status) {
        return Some(DispatchFailure::NotSent);
    }
    if chain.channel {
        // Without hyper's and h2's types, a reset of this one stream
        // (`RST_STREAM`) cannot be told from a `GOAWAY` of the connection,
        // from hyper's keep-alive timeout (`Unavailable`; set on the
        // BatchCommands streams' connections) or from hyper handing back a
        // request the closing connection never took (`Cancelled`,
        // "operation was canceled"):
        // tonic gives them the same codes and no I/O error. All but the
        // last may have reached the server, so the safe reading,
        // `StreamReset` (the request may have been received; writes end
        // undetermined), covers them all; tonic reconnects a channel whose
        // connection went away by itself. The last one is recognised
        // above by its words instead (`handed_back_unsent`).
        return Some(match status.code() {
            Code::Internal
            | Code::Cancelled
            | Code::Unavailable
            | Code::ResourceExhausted
            | Code::PermissionDenied => DispatchFailure::StreamReset,
            _ => DispatchFailure::Transport,
        });
    }
    if chain.nested_deadline {
        return Some(DispatchFailure::Deadline);
    }
    // A reset or failure after the response headers (while the body is
    // read) comes without tonic's transport error, as hyper's and h2's own
    // errors: still the transport, whatever the code (routing.md).
    chain.foreign.then_some(DispatchFailure::Transport)
}

/// hyper's description of a request it hands back without having given it
/// to the connection (hyper's `Canceled` kind), which tonic copies into the
/// status message.
const HANDED_BACK: &str = "operation was canceled";

/// The causes hyper (1.x, HTTP/2 client) gives for handing a request back:
/// the connection ended with the request still queued, or was not ready to
/// take it. Both mean it never reached the connection.
const HANDED_BACK_CAUSES: [&str; 2] = ["connection closed", "connection was not ready"];

/// True for a request hyper handed back unsent: the one channel failure
/// that is certain not to have left the client, and the common one when a
/// store went down (the cached channel's connection was reset, the next
/// request finds it closed). tonic reports it as `Cancelled` with hyper's
/// description as the message, and offers no type for it, so it is
/// recognised by those words and the cause at the root of the chain (a
/// plain message, no type either). Both must match: if hyper or tonic
/// change the words, this reads false and the failure stays the safe
/// `StreamReset` (`src/store/tests/transport_classes.rs` then fails loudly); it can
/// never turn a sent request into `NotSent`.
fn handed_back_unsent(status: &tonic::Status) -> bool {
    if status.code() != Code::Cancelled || !status.message().starts_with(HANDED_BACK) {
        return false;
    }
    let mut root = status.source();
    while let Some(next) = root.and_then(StdError::source) {
        root = Some(next);
    }
    root.is_some_and(|e| HANDED_BACK_CAUSES.contains(&e.to_string().as_str()))
}

/// What a walk of a source chain found.
#[derive(Debug, Default)]
struct ChainFindings {
    /// A finding that decides alone: a connect error or a client timeout
    /// anywhere in the chain decides over the transport error that wraps
    /// it.
    decided: Option<DispatchFailure>,
    /// An `std::io::Error` of the connection.
    io: bool,
    /// A `tonic::transport::Error`: the channel, not the server's answer,
    /// failed the call.
    channel: bool,
    /// A nested status with `DeadlineExceeded`.
    nested_deadline: bool,
    /// An error that is none of the above and not a status (hyper's or
    /// h2's): the HTTP/2 stack failed the call.
    foreign: bool,
}

/// Walks a source chain; `None` for an empty one.
fn walk_chain(first: Option<&(dyn StdError + 'static)>) -> Option<ChainFindings> {
    let mut findings = ChainFindings::default();
    let mut source = Some(first?);
    while let Some(err) = source {
        if err.is::<tonic::ConnectError>() {
            findings.decided = Some(DispatchFailure::NotSent);
            return Some(findings);
        }
        if err.is::<tonic::TimeoutExpired>() || err.is::<tokio::time::error::Elapsed>() {
            findings.decided = Some(DispatchFailure::ClientTimeout);
            return Some(findings);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            // Only a dial is refused: an open connection is reset instead.
            if io.kind() == std::io::ErrorKind::ConnectionRefused {
                findings.decided = Some(DispatchFailure::NotSent);
                return Some(findings);
            }
            findings.io = true;
        }
        if err.is::<tonic::transport::Error>() {
            findings.channel = true;
        }
        if let Some(inner) = err.downcast_ref::<tonic::Status>() {
            if inner.code() == Code::DeadlineExceeded {
                findings.nested_deadline = true;
            }
        } else {
            // Decided above if it names a failure class; the flags say
            // which findings take precedence.
            findings.foreign = true;
        }
        source = err.source();
    }
    Some(findings)
}

/// Classifies any error a store mapping or a dispatch returned.
pub fn classify_dispatch_error(error: &Error) -> DispatchFailure {
    match error {
        Error::GrpcAPI(status) => classify_grpc_error(status),
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
            // A refused dial, even without tonic's ConnectError around it.
            (
                with_source(
                    Code::Unavailable,
                    Arc::new(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)),
                ),
                DispatchFailure::NotSent,
            ),
            // tokio's elapsed timeout.
            (
                with_source(Code::Cancelled, Arc::new(elapsed())),
                DispatchFailure::ClientTimeout,
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
            // Any other error under the status is the HTTP/2 stack's, not
            // the server's answer: a transport failure whatever the code.
            (
                with_source(
                    Code::PermissionDenied,
                    Arc::new(Wrapper(Box::new(std::fmt::Error))),
                ),
                DispatchFailure::Transport,
            ),
        ];
        for (status, want) in table {
            assert_eq!(classify_grpc_error(&status), want, "{status:?}");
        }
    }

    fn elapsed() -> tokio::time::error::Elapsed {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        runtime
            .block_on(async {
                tokio::time::timeout(std::time::Duration::ZERO, std::future::pending::<()>()).await
            })
            .unwrap_err()
    }

    /// A real `tonic::transport::Error` (tonic has no public constructor).
    fn transport_error() -> tonic::transport::Error {
        tonic::transport::Endpoint::from_shared("not a uri").unwrap_err()
    }

    #[test]
    fn a_channel_failure_without_io_classifies_by_tonics_reason_code() {
        let table = [
            (Code::Internal, DispatchFailure::StreamReset),
            (Code::Cancelled, DispatchFailure::StreamReset),
            (Code::Unavailable, DispatchFailure::StreamReset),
            (Code::ResourceExhausted, DispatchFailure::StreamReset),
            (Code::PermissionDenied, DispatchFailure::StreamReset),
            (Code::Unknown, DispatchFailure::Transport),
            (Code::InvalidArgument, DispatchFailure::Transport),
        ];
        for (code, want) in table {
            let status = with_source(code, Arc::new(transport_error()));
            assert_eq!(classify_grpc_error(&status), want, "{code:?}");
            // Wrapped once more, the same.
            let status = with_source(code, Arc::new(Wrapper(Box::new(transport_error()))));
            assert_eq!(classify_grpc_error(&status), want, "{code:?} wrapped");
        }
        // An I/O error under the channel's error: the connection broke.
        let io = std::io::Error::from(std::io::ErrorKind::BrokenPipe);
        let status = with_source(
            Code::Internal,
            Arc::new(Wrapper(Box::new(Wrapper(Box::new(io))))),
        );
        assert_eq!(classify_grpc_error(&status), DispatchFailure::Transport);
    }

    #[test]
    fn handed_back_needs_the_channel_the_words_and_the_cause() {
        // hyper's words under tonic's transport error, but another cause at
        // the root: not recognised, the safe reading stays.
        let status = with_source(Code::Cancelled, Arc::new(transport_error()));
        let mut words = tonic::Status::new(Code::Cancelled, "operation was canceled");
        words.set_source(Arc::new(transport_error()));
        assert_eq!(classify_grpc_error(&status), DispatchFailure::StreamReset);
        assert_eq!(classify_grpc_error(&words), DispatchFailure::StreamReset);
        // The words and the cause without the channel's error (a status
        // some other code built, here over an I/O error): not recognised.
        let mut no_channel = tonic::Status::new(Code::Cancelled, "operation was canceled");
        no_channel.set_source(Arc::new(Wrapper(Box::new(std::io::Error::other(
            "connection closed",
        )))));
        assert_eq!(classify_grpc_error(&no_channel), DispatchFailure::Transport);
        // (The recognised case itself is pinned over a real socket in
        // src/store/tests/transport_classes.rs.)
    }

    /// An error of the HTTP/2 stack that is neither a status, an I/O error
    /// nor tonic's (h2's reset reason, hyper's body error).
    #[derive(Debug)]
    struct StackError;
    impl std::fmt::Display for StackError {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "stream error received: not a result of an error")
        }
    }
    impl StdError for StackError {}

    #[test]
    fn a_status_over_an_error_of_the_http2_stack_is_never_fatal() {
        // What tonic makes of a reset while the body is read: the code of
        // the reason, the stack's error as the source. Codes that are final
        // from a server are a transport failure here: the next voter may
        // answer.
        let codes = [
            Code::ResourceExhausted,
            Code::PermissionDenied,
            Code::InvalidArgument,
            Code::Internal,
            Code::Cancelled,
            Code::Unknown,
        ];
        for code in codes {
            let status = with_source(code, Arc::new(Wrapper(Box::new(StackError))));
            assert_eq!(
                classify_grpc_error(&status),
                DispatchFailure::Transport,
                "{code:?}"
            );
        }
        // A status from the server, passed on as the source of another
        // (the batched transport does so), is still the server's answer.
        let server = tonic::Status::resource_exhausted("quota");
        let passed_on = with_source(Code::ResourceExhausted, Arc::new(server));
        assert_eq!(classify_grpc_error(&passed_on), DispatchFailure::Fatal);
    }

    #[test]
    fn a_nested_deadline_status_is_a_deadline() {
        let inner = tonic::Status::deadline_exceeded("late");
        let status = with_source(Code::Unknown, Arc::new(inner));
        assert_eq!(classify_grpc_error(&status), DispatchFailure::Deadline);
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
                Error::from(Failure::Connect {
                    address: "a".into(),
                    message: "refused".into(),
                    source: None,
                }),
                DispatchFailure::NotSent,
            ),
            (
                Error::from(Failure::ConnectTimeout {
                    address: "a".into(),
                    timeout: std::time::Duration::from_secs(1),
                    source: None,
                }),
                DispatchFailure::NotSent,
            ),
            (
                Error::InternalError {
                    message: "bug".into(),
                },
                DispatchFailure::Fatal,
            ),
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
