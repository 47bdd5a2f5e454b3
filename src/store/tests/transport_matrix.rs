//! Each fault against both transports: a request sent as a unary call and
//! the same request sent over a BatchCommands stream must fail with the same
//! error variant and the same routing class ([routing.md's
//! table](crate::spec::routing#grpc-error-classification)), so a
//! caller, the retry loop and the replay rule cannot tell which transport
//! carried it. The servers speak HTTP/2 by hand on 127.0.0.1 and act once a
//! request's first bytes arrived (the request was written).
//!
//! Also here: a stream reset under load fails only the requests the
//! connection had taken; the queued ones are sent again and succeed.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::{http, Bytes};
use tonic::Code;

use crate::classify::{classify_dispatch_error, DispatchFailure};
use crate::proto::kvrpcpb;
use crate::store::batch::BatchOptions;
use crate::store::{KvClient, KvConnect, TikvConnect};
use crate::{Error, RpcMode, SecurityManager};

/// What the server does with each request (a unary call, or the
/// BatchCommands stream) once its first bytes arrived.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// `RST_STREAM` with this reason, before any answer.
    Reset(h2::Reason),
    /// Close the connection, before any answer.
    DropConnection,
    /// Response headers first; then close the connection.
    DropAfterHeaders,
    /// Response headers first; then `RST_STREAM` with this reason.
    ResetAfterHeaders(h2::Reason),
    /// A trailers-only answer with this gRPC status.
    Status(Code),
    /// Never answer.
    Silent,
}

/// The class routing must give the failure, whichever transport.
fn expected(fault: Fault) -> DispatchFailure {
    match fault {
        // A reset before the body: tonic's transport error over h2's.
        Fault::Reset(_) | Fault::ResetAfterHeaders(_) => DispatchFailure::StreamReset,
        Fault::DropConnection | Fault::DropAfterHeaders => DispatchFailure::Transport,
        Fault::Status(Code::DeadlineExceeded) => DispatchFailure::Deadline,
        Fault::Status(_) => DispatchFailure::Transport,
        Fault::Silent => DispatchFailure::ClientTimeout,
    }
}

async fn server(fault: Fault) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(serve(socket, fault));
        }
    });
    address
}

/// Serves one connection until a stream's fault closes it.
async fn serve(socket: TcpStream, fault: Fault) {
    let Ok(mut conn) = h2::server::handshake(socket).await else {
        return;
    };
    let (close, mut closing) = tokio::sync::mpsc::channel::<Held>(1);
    loop {
        tokio::select! {
            // Dropping the connection closes the socket; the stream's
            // handles go after it (dropped first, they would reset the
            // stream before the connection closed).
            held = closing.recv() => {
                drop(conn);
                drop(held);
                return;
            }
            next = conn.accept() => {
                let Some(Ok((request, respond))) = next else { return };
                tokio::spawn(act(request, respond, fault, close.clone()));
            }
        }
    }
}

/// A stream's handles, kept until its connection is closed.
type Held = (h2::server::SendResponse<Bytes>, h2::RecvStream);

fn grpc_head() -> http::response::Builder {
    http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
}

async fn act(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    fault: Fault,
    close: tokio::sync::mpsc::Sender<Held>,
) {
    let headers_first = matches!(fault, Fault::DropAfterHeaders | Fault::ResetAfterHeaders(_));
    let mut body_out = None;
    if headers_first {
        body_out = respond
            .send_response(grpc_head().body(()).unwrap(), false)
            .ok();
    }
    // The request's first bytes: it was written.
    let mut body_in = request.into_body();
    let _ = body_in.data().await;
    match fault {
        Fault::Reset(reason) => respond.send_reset(reason),
        Fault::DropConnection | Fault::DropAfterHeaders => {
            let _ = close.send((respond, body_in)).await;
            // (The body half of a `DropAfterHeaders` answer goes now: the
            // connection is closing anyway.)
        }
        Fault::ResetAfterHeaders(reason) => {
            if let Some(mut body) = body_out {
                body.send_reset(reason);
            }
        }
        Fault::Status(code) => {
            let head = grpc_head()
                .header("grpc-status", (code as i32).to_string())
                .header("grpc-message", "from the test server")
                .body(())
                .unwrap();
            let _ = respond.send_response(head, true);
        }
        Fault::Silent => {
            // Hold the stream (and the request body) open for good.
            std::mem::forget(respond);
            std::mem::forget(body_in);
        }
    }
}

fn connector(mode: RpcMode, options: BatchOptions) -> TikvConnect {
    TikvConnect::new(
        Arc::new(SecurityManager::plaintext()),
        Duration::from_millis(400),
        Duration::from_secs(3),
    )
    .with_rpc_mode(mode, options)
}

async fn failure_of(fault: Fault, mode: RpcMode) -> Error {
    let address = server(fault).await;
    let store = connector(mode, BatchOptions::default())
        .connect(&address)
        .await
        .unwrap();
    assert_eq!(store.batch_client().is_some(), mode == RpcMode::Batched);
    let put = kvrpcpb::RawPutRequest {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    };
    store
        .dispatch(&put)
        .await
        .expect_err("the server fails every request")
}

#[tokio::test]
async fn each_fault_fails_a_batched_request_as_it_fails_a_unary_one() {
    let faults = [
        Fault::Reset(h2::Reason::CANCEL),
        Fault::Reset(h2::Reason::REFUSED_STREAM),
        Fault::Reset(h2::Reason::INTERNAL_ERROR),
        Fault::Reset(h2::Reason::ENHANCE_YOUR_CALM),
        Fault::DropConnection,
        Fault::DropAfterHeaders,
        Fault::ResetAfterHeaders(h2::Reason::ENHANCE_YOUR_CALM),
        Fault::ResetAfterHeaders(h2::Reason::CANCEL),
        Fault::Status(Code::Unavailable),
        Fault::Status(Code::Internal),
        Fault::Status(Code::DeadlineExceeded),
        Fault::Silent,
    ];
    let mut mismatches = Vec::new();
    for fault in faults {
        let unary = failure_of(fault, RpcMode::Unary).await;
        let batched = failure_of(fault, RpcMode::Batched).await;
        let classes = (
            classify_dispatch_error(&unary),
            classify_dispatch_error(&batched),
        );
        let same_variant = matches!((&unary, &batched), (Error::GrpcAPI(_), Error::GrpcAPI(_)));
        if classes != (expected(fault), expected(fault)) || !same_variant {
            mismatches.push(format!(
                "{fault:?}: unary {:?} ({unary:?}), batched {:?} ({batched:?})",
                classes.0, classes.1
            ));
        }
    }
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

/// How many bytes of request data the connection's first window lets the
/// client send before the server reads (HTTP/2's default).
const WINDOW: usize = 65_535;

/// A store whose BatchCommands stream reads one flow-control window of
/// requests without answering or releasing it (so the client's connection
/// stops taking requests from the stream), then resets the stream. Unary
/// calls are answered; the count of them is returned.
async fn resetting_store() -> (String, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let unary = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&unary);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let counted = Arc::clone(&counted);
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((request, respond))) = conn.accept().await {
                    if request.uri().path().ends_with("/BatchCommands") {
                        tokio::spawn(read_a_window_then_reset(request, respond));
                    } else {
                        counted.fetch_add(1, Ordering::SeqCst);
                        super::answer(respond);
                    }
                }
            });
        }
    });
    (address, unary)
}

async fn read_a_window_then_reset(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let mut body = request.into_body();
    let mut read = 0;
    while read < WINDOW {
        match body.data().await {
            Some(Ok(chunk)) => read += chunk.len(),
            _ => return,
        }
    }
    respond.send_reset(h2::Reason::CANCEL);
}

#[tokio::test]
async fn a_stream_reset_under_load_fails_only_the_requests_it_had_taken() {
    let (address, unary_calls) = resetting_store().await;
    // One request per stream message, one stream: the connection takes
    // messages only while the window has room.
    let options = BatchOptions {
        max_batch_size: 1,
        max_streams: 1,
        max_wait: Duration::ZERO,
    };
    let store = connector(RpcMode::Batched, options)
        .connect(&address)
        .await
        .unwrap();
    let value = vec![7u8; 16 * 1024];
    let total = 24;
    let puts: Vec<_> = (0..total)
        .map(|i| kvrpcpb::RawPutRequest {
            key: format!("k{i:02}").into_bytes(),
            value: value.clone(),
            ..Default::default()
        })
        .collect();
    let results = futures::future::join_all(puts.iter().map(|put| store.dispatch(put))).await;
    let failed: Vec<&Error> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    for error in &failed {
        let class = classify_dispatch_error(error);
        assert!(
            class.may_have_been_sent(),
            "a failed request was written: {class:?} {error:?}"
        );
    }
    // The connection can have taken at most a window's worth of 16 KiB
    // requests (four, and one more that tonic's encoder holds, and one in
    // h2's buffer): every other request was still queued, and was sent
    // again as a unary call.
    assert!(failed.len() <= 6, "{} of {total} failed", failed.len());
    assert!(!failed.is_empty(), "the reset failed the written requests");
    let succeeded = total - failed.len();
    assert_eq!(unary_calls.load(Ordering::SeqCst), succeeded);
}
