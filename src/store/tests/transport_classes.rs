//! One test per transport failure class, over real sockets on 127.0.0.1,
//! pinning both what tonic reports (the status code and what its source
//! chain holds) and how the router classifies it. The
//! classifier reads only tonic's own types, std `io::Error` kinds and status
//! codes, never hyper's or h2's error types; if a tonic (or hyper, h2)
//! upgrade changes how one of these failures surfaces, the test of that
//! class fails here instead of the routing silently changing.
//!
//! The classes: a refused connect, a connect timeout, a request the closed
//! connection never took, the server closing the connection mid-request
//! (before the answer and in the middle of it),
//! an HTTP/2 stream reset (`RST_STREAM`, each reason tonic maps), a client
//! timeout, and a plain gRPC status.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::classify::{classify_dispatch_error, classify_grpc_error, DispatchFailure};
use crate::proto::kvrpcpb;
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::store::{KvClient, KvConnect, TikvConnect};
use crate::Error;
use crate::Failure;
use crate::SecurityManager;
use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::{http, Bytes};
use tonic::transport::Endpoint;
use tonic::Code;

use super::net::hanging_listener;

/// What a status's source chain holds, in the terms the classifier uses.
#[derive(Debug, Default, PartialEq)]
struct Chain {
    connect_error: bool,
    timeout_expired: bool,
    transport_error: bool,
    io: Option<io::ErrorKind>,
}

fn chain_of(status: &tonic::Status) -> Chain {
    let mut chain = Chain::default();
    let mut source = std::error::Error::source(status);
    while let Some(err) = source {
        chain.connect_error |= err.is::<tonic::ConnectError>();
        chain.timeout_expired |= err.is::<tonic::TimeoutExpired>();
        chain.transport_error |= err.is::<tonic::transport::Error>();
        if let Some(e) = err.downcast_ref::<io::Error>() {
            chain.io.get_or_insert(e.kind());
        }
        source = err.source();
    }
    chain
}

/// An address nothing listens on (bound, then closed).
async fn dead_address() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    address
}

/// How the test HTTP/2 server treats the first request of a connection.
#[derive(Debug, Clone, Copy)]
enum Behaviour {
    /// `RST_STREAM` with this reason; later requests get an answer.
    Reset(h2::Reason),
    /// Drop the whole connection once the request arrived.
    DropConnection,
    /// Answer with headers and part of a message, then drop the
    /// connection once the client has read past its first flow-control
    /// window (so the headers certainly arrived first).
    DropMidBody,
    /// Answer with headers and part of a message, then reset the stream
    /// with this reason once the client has read past its first window.
    ResetMidBody(h2::Reason),
    /// Never answer (the connection stays open).
    Silent,
    /// A trailers-only response with this gRPC status code.
    Status(i32),
}

/// Serves HTTP/2 on 127.0.0.1 with `behaviour` for the first request of
/// each connection; returns the address and the count of connections.
async fn server(behaviour: Behaviour) -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let connections = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(socket, behaviour));
        }
    });
    (address, connections)
}

async fn serve(socket: TcpStream, behaviour: Behaviour) {
    let Ok(mut conn) = h2::server::handshake(socket).await else {
        return;
    };
    let mut first = true;
    while let Some(Ok((_request, mut respond))) = conn.accept().await {
        if !std::mem::take(&mut first) {
            super::answer(respond);
            continue;
        }
        match behaviour {
            Behaviour::Reset(reason) => respond.send_reset(reason),
            Behaviour::DropConnection => return,
            Behaviour::ResetMidBody(reason) => {
                let (past_the_window, _read) = tokio::sync::oneshot::channel();
                tokio::spawn(send_past_the_window(respond, past_the_window, Some(reason)));
            }
            Behaviour::DropMidBody => {
                let (past_the_window, mut read) = tokio::sync::oneshot::channel();
                tokio::spawn(send_past_the_window(respond, past_the_window, None));
                // Drive the connection until then, and drop it.
                loop {
                    tokio::select! {
                        _ = &mut read => return,
                        next = conn.accept() => if next.is_none() { return },
                    }
                }
            }
            // Keep the stream open, and the connection served.
            Behaviour::Silent => std::mem::forget(respond),
            Behaviour::Status(code) => {
                let head = http::Response::builder()
                    .status(200)
                    .header("content-type", "application/grpc")
                    .header("grpc-status", code.to_string())
                    .header("grpc-message", "from the test server")
                    .body(())
                    .unwrap();
                let _ = respond.send_response(head, true);
            }
        }
    }
}

/// The client's stream window in the mid-body test (HTTP/2's default).
const CLIENT_STREAM_WINDOW: usize = 65_535;

/// Sends response headers and then the start of a 1 MiB message, as flow
/// control allows; once more than the client's first window went out, which
/// needs a `WINDOW_UPDATE` (the client has read the headers and data),
/// resets the stream with `reset` if given, and reports.
async fn send_past_the_window(
    mut respond: h2::server::SendResponse<Bytes>,
    past_the_window: tokio::sync::oneshot::Sender<()>,
    reset: Option<h2::Reason>,
) {
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let Ok(mut body) = respond.send_response(head, false) else {
        return;
    };
    let claimed = 1usize << 20;
    body.reserve_capacity(claimed + 5);
    let mut sent = 0;
    while sent <= CLIENT_STREAM_WINDOW {
        let Some(Ok(capacity)) = futures::future::poll_fn(|cx| body.poll_capacity(cx)).await else {
            return;
        };
        let mut chunk = Vec::with_capacity(capacity);
        if sent == 0 {
            chunk.push(0u8);
            chunk.extend((claimed as u32).to_be_bytes());
        }
        chunk.resize(capacity, 0);
        if body.send_data(Bytes::from(chunk), false).is_err() {
            return;
        }
        sent += capacity;
    }
    if let Some(reason) = reset {
        body.send_reset(reason);
    }
    let _ = past_the_window.send(());
}

async fn client(address: &str) -> TikvClient<tonic::transport::Channel> {
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    TikvClient::new(channel)
}

async fn raw_get(client: &mut TikvClient<tonic::transport::Channel>) -> tonic::Status {
    client
        .raw_get(kvrpcpb::RawGetRequest::default())
        .await
        .expect_err("the test server fails the first request")
}

/// A unary connector: these tests pin what tonic reports for one call
/// (`transport_matrix.rs` holds the batched transport to the same classes).
fn connector(timeout: Duration, connect_timeout: Duration) -> TikvConnect {
    TikvConnect::new(
        Arc::new(SecurityManager::plaintext()),
        timeout,
        connect_timeout,
    )
    .with_rpc_mode(crate::RpcMode::Unary, Default::default())
}

#[tokio::test]
async fn refused_connect_is_not_sent() {
    let address = dead_address().await;
    // The store path's own connect.
    let err = connector(Duration::from_secs(3), Duration::from_secs(3))
        .connect(&address)
        .await
        .expect_err("nothing listens there");
    assert!(
        matches!(err.failure(), Some(Failure::Connect { .. })),
        "{err:?}"
    );
    assert_eq!(classify_dispatch_error(&err), DispatchFailure::NotSent);
    assert_eq!(
        err.find_source::<io::Error>().map(io::Error::kind),
        Some(io::ErrorKind::ConnectionRefused),
        "{err:?}"
    );

    // A channel's (re)connect inside a call: tonic's ConnectError, code
    // Unavailable.
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_lazy();
    let status = raw_get(&mut TikvClient::new(channel)).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        chain_of(&status),
        Chain {
            connect_error: true,
            timeout_expired: false,
            transport_error: true,
            io: Some(io::ErrorKind::ConnectionRefused),
        },
        "{status:?}"
    );
    assert_eq!(classify_grpc_error(&status), DispatchFailure::NotSent);
}

#[tokio::test]
async fn connect_timeout_is_not_sent() {
    let (_listener, _held, address) = hanging_listener().await;
    // The connect never completes; with the clock paused, each timeout
    // fires as soon as nothing else can run.
    tokio::time::pause();
    let connect_timeout = Duration::from_secs(2);
    let err = connector(Duration::from_secs(5), connect_timeout)
        .connect(&address)
        .await
        .expect_err("the accept queue is full");
    match err.failure() {
        Some(Failure::ConnectTimeout {
            address: a,
            timeout,
            source,
        }) => {
            assert_eq!(a, &address);
            assert_eq!(*timeout, connect_timeout);
            assert!(source.is_some(), "the cause is kept");
        }
        _ => panic!("expected ConnectTimeout, got {err:?}"),
    }
    assert_eq!(classify_dispatch_error(&err), DispatchFailure::NotSent);

    // A channel's (re)connect inside a call, bounded by the endpoint's
    // connect timeout: tonic's ConnectError over an io TimedOut.
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .connect_timeout(connect_timeout)
        .connect_lazy();
    let status = raw_get(&mut TikvClient::new(channel)).await;
    assert_eq!(status.code(), Code::Unavailable, "{status:?}");
    assert_eq!(
        chain_of(&status),
        Chain {
            connect_error: true,
            timeout_expired: false,
            transport_error: true,
            io: Some(io::ErrorKind::TimedOut),
        },
        "{status:?}"
    );
    assert_eq!(classify_grpc_error(&status), DispatchFailure::NotSent);
}

/// Serves one request on one connection and stops listening; closes that
/// connection when told, and reports when it is closed.
async fn one_shot_server(
    close: tokio::sync::oneshot::Receiver<()>,
    closed: tokio::sync::oneshot::Sender<()>,
) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        let (socket, _) = listener.accept().await.unwrap();
        drop(listener);
        let mut conn = h2::server::handshake(socket).await.unwrap();
        let (_request, respond) = conn.accept().await.unwrap().unwrap();
        super::answer(respond);
        // Drive the connection (the answer goes out) until told to close.
        tokio::select! {
            _ = close => {}
            _ = conn.accept() => {}
        }
        drop(conn);
        let _ = closed.send(());
    });
    address
}

/// A store that went down: its connection closed while the channel was
/// idle. The next request finds the connection closed before it could take
/// the request, and hyper hands it back: certainly not sent. (On this
/// single-threaded runtime the request is queued before the client's
/// connection task reads the close, every time.)
#[tokio::test]
async fn a_request_the_closed_connection_never_took_is_not_sent() {
    let (close, closing) = tokio::sync::oneshot::channel();
    let (closed, is_closed) = tokio::sync::oneshot::channel();
    let address = one_shot_server(closing, closed).await;
    let store = connector(Duration::from_secs(5), Duration::from_secs(3))
        .connect(&address)
        .await
        .unwrap();
    let request = kvrpcpb::RawGetRequest::default();
    store
        .dispatch(&request)
        .await
        .expect("the first request is served");
    close.send(()).unwrap();
    is_closed.await.unwrap();

    let err = store
        .dispatch(&request)
        .await
        .expect_err("the connection is gone");
    let Error::GrpcAPI(status) = &err else {
        panic!("expected a status, got {err:?}");
    };
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert_eq!(status.message(), "operation was canceled", "{status:?}");
    assert_eq!(
        chain_of(status),
        Chain {
            transport_error: true,
            ..Chain::default()
        },
        "{status:?}"
    );
    let class = classify_dispatch_error(&err);
    assert_eq!(class, DispatchFailure::NotSent, "{status:?}");
    assert!(!class.may_have_been_sent() && class.invalidates_store());

    // The channel then dials again, and nothing listens: refused.
    let err = store
        .dispatch(&request)
        .await
        .expect_err("nothing listens there any more");
    assert_eq!(classify_dispatch_error(&err), DispatchFailure::NotSent);
    assert_eq!(
        err.find_source::<io::Error>().map(io::Error::kind),
        Some(io::ErrorKind::ConnectionRefused),
        "{err:?}"
    );
}

#[tokio::test]
async fn connection_closed_mid_request_is_a_transport_failure() {
    let (address, _) = server(Behaviour::DropConnection).await;
    let status = raw_get(&mut client(&address).await).await;
    // hyper reports the connection's I/O error; tonic cannot map it.
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    let chain = chain_of(&status);
    assert!(chain.transport_error, "{status:?}");
    assert!(
        matches!(
            chain.io,
            Some(
                io::ErrorKind::BrokenPipe
                    | io::ErrorKind::ConnectionReset
                    | io::ErrorKind::UnexpectedEof
            )
        ),
        "an I/O error of the connection is in the chain: {status:?}"
    );
    let class = classify_grpc_error(&status);
    assert_eq!(class, DispatchFailure::Transport);
    assert!(class.may_have_been_sent() && class.invalidates_store());
}

/// The status of one `RawGet` to a server that fails it mid-body
/// (`behaviour`), over a channel with HTTP/2's default stream window, which
/// the server's answer overruns.
async fn mid_body_status(behaviour: Behaviour) -> tonic::Status {
    let (address, _) = server(behaviour).await;
    let channel = Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .initial_stream_window_size(CLIENT_STREAM_WINDOW as u32)
        .connect()
        .await
        .unwrap();
    raw_get(&mut TikvClient::new(channel)).await
}

#[tokio::test]
async fn connection_closed_mid_response_is_a_transport_failure() {
    let status = mid_body_status(Behaviour::DropMidBody).await;
    // The body read fails: hyper's body error over h2's I/O error, neither
    // a tonic transport error nor a visible io::Error, and a code tonic
    // could not map. The code table decides.
    assert_eq!(status.code(), Code::Unknown, "{status:?}");
    assert!(std::error::Error::source(&status).is_some(), "{status:?}");
    assert_eq!(chain_of(&status), Chain::default(), "{status:?}");
    let class = classify_grpc_error(&status);
    assert_eq!(class, DispatchFailure::Transport);
    assert!(class.may_have_been_sent() && class.invalidates_store());
}

/// [routing.md](crate::spec::routing): a status whose source chain holds an HTTP/2 or I/O error is a
/// transport failure whatever its code. A reset after the headers, while
/// the body is read, reaches tonic as hyper's and h2's own errors (no I/O
/// error, no tonic transport error), with the code of the reason; the codes
/// a server would mean as final (`ResourceExhausted`: h2's
/// `ENHANCE_YOUR_CALM`; `PermissionDenied`) must still send the request to
/// the next voter, never back to the caller.
#[tokio::test]
async fn a_stream_reset_mid_response_is_never_fatal() {
    let reasons = [
        (h2::Reason::ENHANCE_YOUR_CALM, Code::ResourceExhausted),
        (h2::Reason::INADEQUATE_SECURITY, Code::PermissionDenied),
        (h2::Reason::CANCEL, Code::Cancelled),
        (h2::Reason::INTERNAL_ERROR, Code::Internal),
    ];
    for (reason, code) in reasons {
        let status = mid_body_status(Behaviour::ResetMidBody(reason)).await;
        assert_eq!(status.code(), code, "{reason:?}: {status:?}");
        assert!(
            std::error::Error::source(&status).is_some(),
            "{reason:?}: {status:?}"
        );
        assert_eq!(
            chain_of(&status),
            Chain::default(),
            "{reason:?}: {status:?}"
        );
        let class = classify_grpc_error(&status);
        assert_eq!(class, DispatchFailure::Transport, "{reason:?}: {status:?}");
        assert!(class.may_have_been_sent() && class.invalidates_store());
    }
}

#[tokio::test]
async fn stream_resets_keep_the_channel() {
    // Each reason and the code tonic maps it to.
    let reasons = [
        (h2::Reason::INTERNAL_ERROR, Code::Internal),
        (h2::Reason::PROTOCOL_ERROR, Code::Internal),
        (h2::Reason::NO_ERROR, Code::Internal),
        (h2::Reason::CANCEL, Code::Cancelled),
        (h2::Reason::REFUSED_STREAM, Code::Unavailable),
        (h2::Reason::ENHANCE_YOUR_CALM, Code::ResourceExhausted),
        (h2::Reason::INADEQUATE_SECURITY, Code::PermissionDenied),
    ];
    for (reason, code) in reasons {
        let (address, connections) = server(Behaviour::Reset(reason)).await;
        let mut client = client(&address).await;
        let status = raw_get(&mut client).await;
        assert_eq!(status.code(), code, "{reason:?}: {status:?}");
        assert_eq!(
            chain_of(&status),
            Chain {
                transport_error: true,
                ..Chain::default()
            },
            "{reason:?}: no I/O error, no connect error: {status:?}"
        );
        let class = classify_grpc_error(&status);
        assert_eq!(class, DispatchFailure::StreamReset, "{reason:?}");
        assert!(class.may_have_been_sent() && !class.invalidates_store());
        // The same connection serves the next request.
        let answer = client
            .raw_get(kvrpcpb::RawGetRequest::default())
            .await
            .unwrap()
            .into_inner();
        assert_eq!(answer.value, b"v");
        assert_eq!(connections.load(Ordering::SeqCst), 1, "{reason:?}");
    }
}

#[tokio::test]
async fn client_timeout_keeps_caches() {
    let (address, _) = server(Behaviour::Silent).await;
    let timeout = Duration::from_secs(30);
    let store = connector(timeout, Duration::from_secs(3))
        .connect(&address)
        .await
        .unwrap();
    // Connected; from here on nothing but the timers can move the call.
    tokio::time::pause();
    let started = tokio::time::Instant::now();
    let err = store
        .dispatch(&kvrpcpb::RawGetRequest::default())
        .await
        .expect_err("the server never answers");
    assert!(started.elapsed() >= timeout, "{:?}", started.elapsed());
    let Error::GrpcAPI(status) = &err else {
        panic!("expected a status, got {err:?}");
    };
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert_eq!(
        chain_of(status),
        Chain {
            timeout_expired: true,
            transport_error: true,
            ..Chain::default()
        },
        "{status:?}"
    );
    let class = classify_dispatch_error(&err);
    assert_eq!(class, DispatchFailure::ClientTimeout);
    assert!(class.keeps_caches() && class.may_have_been_sent());
}

#[tokio::test]
async fn plain_grpc_statuses_classify_by_code() {
    // A status the server sent has no source: the code decides. `Internal`
    // from the server is a transport-like failure, unlike tonic's mapping
    // of a reset (above).
    let table = [
        (Code::Unavailable, DispatchFailure::Transport),
        (Code::Internal, DispatchFailure::Transport),
        (Code::DeadlineExceeded, DispatchFailure::Deadline),
        (Code::InvalidArgument, DispatchFailure::Fatal),
        (Code::PermissionDenied, DispatchFailure::Fatal),
    ];
    for (code, want) in table {
        let (address, _) = server(Behaviour::Status(code as i32)).await;
        let status = raw_get(&mut client(&address).await).await;
        assert_eq!(status.code(), code);
        assert_eq!(status.message(), "from the test server");
        assert_eq!(chain_of(&status), Chain::default(), "{status:?}");
        assert_eq!(classify_grpc_error(&status), want, "{code:?}");
    }
}
