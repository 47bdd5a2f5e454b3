//! Each fault against both transports: a request sent as a unary call and
//! the same request sent over a BatchCommands stream must fail with the same
//! error variant and the same routing class ([routing.md's
//! table](crate::spec::routing#grpc-error-classification)), so a
//! caller, the retry loop and the replay rule cannot tell which transport
//! carried it. The servers speak HTTP/2 by hand on 127.0.0.1 and act once a
//! request's first bytes arrived (the request was written).
//!
//! Also here: a stream reset under load fails only the requests the
//! connection had taken, and the queued ones are sent again and succeed
//! (the store sees no request twice); and a stream whose response headers
//! come only with its first answer is not cut by the request timeout.

use std::sync::Arc;
use std::time::Duration;

use tokio::net::{TcpListener, TcpStream};
use tonic::codegen::{http, Bytes};
use tonic::Code;

use crate::classify::{classify_dispatch_error, DispatchFailure};
use crate::proto::kvrpcpb;
use crate::proto::tikvpb::batch_commands_response::response::Cmd as ResponseCmd;
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

/// A test store's HTTP/2 connection, after the handshake.
type Conn = h2::server::Connection<TcpStream, Bytes>;

/// Listens on a fresh 127.0.0.1 port and runs `serve` on each connection;
/// returns the address.
async fn h2_store<F, Fut>(serve: F) -> String
where
    F: Fn(Conn) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let serve = Arc::new(serve);
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let serve = Arc::clone(&serve);
            tokio::spawn(async move {
                if let Ok(conn) = h2::server::handshake(socket).await {
                    serve(conn).await;
                }
            });
        }
    });
    address
}

async fn server(fault: Fault) -> String {
    h2_store(move |conn| serve(conn, fault)).await
}

/// Serves one connection until a stream's fault closes it.
async fn serve(mut conn: Conn, fault: Fault) {
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

/// The keys a store received whole: on the BatchCommands stream, and as
/// unary calls.
#[derive(Default)]
struct Seen {
    streamed: Vec<Vec<u8>>,
    unary: Vec<Vec<u8>>,
}

/// A store whose BatchCommands stream reads one flow-control window of
/// requests without answering or releasing it (so the client's connection
/// stops taking requests from the stream), then resets the stream. Unary
/// calls are answered. It records the keys of the requests it received.
async fn resetting_store() -> (String, Arc<std::sync::Mutex<Seen>>) {
    let seen = Arc::new(std::sync::Mutex::new(Seen::default()));
    let recorded = Arc::clone(&seen);
    let address = h2_store(move |mut conn| {
        let recorded = Arc::clone(&recorded);
        async move {
            while let Some(Ok((request, respond))) = conn.accept().await {
                let recorded = Arc::clone(&recorded);
                if request.uri().path().ends_with("/BatchCommands") {
                    tokio::spawn(read_a_window_then_reset(request, respond, recorded));
                    continue;
                }
                tokio::spawn(async move {
                    let mut body = request.into_body();
                    let Some(bytes) = next_message(&mut body, &mut Vec::new()).await else {
                        return;
                    };
                    let put = <kvrpcpb::RawPutRequest as prost::Message>::decode(bytes.as_slice())
                        .unwrap();
                    recorded.lock().unwrap().unary.push(put.key);
                    super::answer(respond);
                });
            }
        }
    })
    .await;
    (address, seen)
}

async fn read_a_window_then_reset(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
    seen: Arc<std::sync::Mutex<Seen>>,
) {
    use crate::proto::tikvpb::batch_commands_request::request::Cmd;
    use crate::proto::tikvpb::BatchCommandsRequest;
    let mut body = request.into_body();
    let mut buffer = Vec::new();
    while buffer.len() < WINDOW {
        match body.data().await {
            Some(Ok(chunk)) => buffer.extend_from_slice(&chunk),
            _ => return,
        }
    }
    respond.send_reset(h2::Reason::CANCEL);
    // The requests that arrived whole (the last one may be cut short).
    let mut at = 0;
    while buffer.len() >= at + 5 {
        let len = u32::from_be_bytes([
            buffer[at + 1],
            buffer[at + 2],
            buffer[at + 3],
            buffer[at + 4],
        ]) as usize;
        let Some(bytes) = buffer.get(at + 5..at + 5 + len) else {
            break;
        };
        let message = <BatchCommandsRequest as prost::Message>::decode(bytes).unwrap();
        for request in message.requests {
            if let Some(Cmd::RawPut(put)) = request.cmd {
                seen.lock().unwrap().streamed.push(put.key);
            }
        }
        at += 5 + len;
    }
}

#[tokio::test]
async fn a_stream_reset_under_load_fails_only_the_requests_it_had_taken() {
    let (address, seen) = resetting_store().await;
    // One request per stream message, one stream: the connection takes
    // messages only while the window has room.
    let options = BatchOptions {
        max_batch_size: 1,
        max_streams: 1,
        max_wait: Duration::ZERO,
        ..BatchOptions::default()
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
    let seen = seen.lock().unwrap();
    // Each request that succeeded was served once, as a unary call; none
    // that reached the store on the stream was sent again.
    let succeeded: Vec<&Vec<u8>> = puts
        .iter()
        .zip(&results)
        .filter(|(_, r)| r.is_ok())
        .map(|(put, _)| &put.key)
        .collect();
    assert_eq!(seen.unary.len(), succeeded.len());
    assert!(succeeded.iter().all(|key| seen.unary.contains(key)));
    assert!(
        !seen.streamed.is_empty(),
        "the stream carried some requests"
    );
    for key in &seen.streamed {
        assert!(
            !seen.unary.contains(key),
            "{key:?} reached the store on the stream and was sent again"
        );
    }
}

/// Reads whole gRPC messages from an h2 request body: the bytes of each,
/// without the 5-byte prefix.
async fn next_message(body: &mut h2::RecvStream, buffer: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if buffer.len() >= 5 {
            let len = u32::from_be_bytes([buffer[1], buffer[2], buffer[3], buffer[4]]) as usize;
            if buffer.len() >= 5 + len {
                let message = buffer[5..5 + len].to_vec();
                buffer.drain(..5 + len);
                return Some(message);
            }
        }
        let chunk = body.data().await?.ok()?;
        let _ = body.flow_control().release_capacity(chunk.len());
        buffer.extend_from_slice(&chunk);
    }
}

/// One BatchCommands message, framed for gRPC, answering each of `ids` as
/// a `RawGet` that found "v".
fn raw_get_answers(ids: Vec<u64>) -> Bytes {
    use crate::proto::tikvpb::{batch_commands_response, BatchCommandsResponse};
    use prost::Message;
    let answer = BatchCommandsResponse {
        responses: ids
            .iter()
            .map(|_| batch_commands_response::Response {
                cmd: Some(ResponseCmd::RawGet(kvrpcpb::RawGetResponse {
                    value: b"v".to_vec(),
                    ..Default::default()
                })),
            })
            .collect(),
        request_ids: ids,
        ..Default::default()
    }
    .encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend((answer.len() as u32).to_be_bytes());
    frame.extend(answer);
    Bytes::from(frame)
}

/// A store whose BatchCommands stream sends its response headers only with
/// its first answer, as a gRPC server may: it holds everything until
/// `hold` after the first request arrived and a second one came too, then
/// answers both `RawGet`s.
async fn late_headers_store(hold: Duration) -> String {
    use crate::proto::tikvpb::BatchCommandsRequest;
    use prost::Message;
    h2_store(move |mut conn| async move {
        while let Some(Ok((request, mut respond))) = conn.accept().await {
            tokio::spawn(async move {
                let mut body = request.into_body();
                let mut buffer = Vec::new();
                let mut ids = Vec::new();
                let mut first_at = None;
                while ids.len() < 2 {
                    let Some(bytes) = next_message(&mut body, &mut buffer).await else {
                        return;
                    };
                    first_at.get_or_insert_with(tokio::time::Instant::now);
                    let message = BatchCommandsRequest::decode(bytes.as_slice()).unwrap();
                    ids.extend(message.request_ids);
                }
                tokio::time::sleep_until(first_at.unwrap() + hold).await;
                let Ok(mut out) = respond.send_response(grpc_head().body(()).unwrap(), false)
                else {
                    return;
                };
                let _ = out.send_data(raw_get_answers(ids), false);
                // Keep the stream open.
                std::mem::forget(out);
                std::mem::forget(body);
            });
        }
    })
    .await
}

/// tonic's request timeout bounds a call until its response headers: on
/// the stream's channel it would end a stream whose headers come with its
/// first answer, failing every request written on it at once. Streams open
/// on a channel without it; each request keeps its own timeout.
#[tokio::test]
async fn a_stream_outlives_the_rpc_timeout_until_its_first_answer() {
    let timeout = Duration::from_millis(1000);
    // The first request times out on its own at 1 s; the second, sent at
    // 0.5 s, waits until 1.5 s; the answers come at 1.2 s.
    let address = late_headers_store(Duration::from_millis(1200)).await;
    let store = TikvConnect::new(
        Arc::new(SecurityManager::plaintext()),
        timeout,
        Duration::from_secs(3),
    )
    .with_rpc_mode(RpcMode::Batched, BatchOptions::default())
    .connect(&address)
    .await
    .unwrap();
    let get = kvrpcpb::RawGetRequest {
        key: b"k".to_vec(),
        ..Default::default()
    };
    let first = store.dispatch(&get);
    let second = async {
        tokio::time::sleep(Duration::from_millis(500)).await;
        store.dispatch(&get).await
    };
    let (first, second) = tokio::join!(first, second);
    assert_eq!(
        classify_dispatch_error(&first.expect_err("answered after its timeout")),
        DispatchFailure::ClientTimeout
    );
    let answer = second.expect("answered within its own timeout");
    let answer = answer
        .downcast::<kvrpcpb::RawGetResponse>()
        .expect("a RawGet answer");
    assert_eq!(answer.value, b"v");
}

/// A store that takes the BatchCommands stream and its first request, then
/// freezes: it stops serving the connection altogether (no answer, no
/// PING reply), as a host that lost power would seem.
async fn frozen_store() -> String {
    h2_store(|mut conn| async move {
        let Some(Ok((request, respond))) = conn.accept().await else {
            return;
        };
        let mut body = request.into_body();
        // Drive the connection until the first request arrived.
        tokio::select! {
            _ = body.data() => {}
            _ = conn.accept() => return,
        }
        // Frozen: nothing polls the connection from here on, and the
        // socket stays open.
        std::mem::forget((conn, respond, body));
    })
    .await
}

/// A batched connector with request timeout `timeout` whose streams'
/// connections send a keep-alive PING after `keepalive` of silence and
/// give it as long to be answered.
fn with_keepalive(timeout: Duration, keepalive: Duration) -> TikvConnect {
    let options = BatchOptions {
        keepalive_interval: keepalive,
        keepalive_timeout: keepalive,
        ..BatchOptions::default()
    };
    TikvConnect::new(
        Arc::new(SecurityManager::plaintext()),
        timeout,
        Duration::from_secs(3),
    )
    .with_rpc_mode(RpcMode::Batched, options)
}

/// HTTP/2 keep-alive on the streams' connections: a store that froze with
/// a written request fails it as a lost connection (the write's outcome
/// is unknown) once a PING goes unanswered, well before the request's own
/// timeout would have ended it as a client timeout.
#[tokio::test]
async fn an_unanswered_keepalive_fails_the_written_requests() {
    let address = frozen_store().await;
    let store = with_keepalive(Duration::from_secs(30), Duration::from_millis(100))
        .connect(&address)
        .await
        .unwrap();
    let put = kvrpcpb::RawPutRequest {
        key: b"k".to_vec(),
        value: b"v".to_vec(),
        ..Default::default()
    };
    let error = store.dispatch(&put).await.expect_err("the store froze");
    let class = classify_dispatch_error(&error);
    assert_ne!(class, DispatchFailure::ClientTimeout, "{error:?}");
    assert!(class.may_have_been_sent(), "{class:?}: {error:?}");
}

/// A store whose first stream's connection freezes after taking its first
/// request (like [`frozen_store`]) while the store itself lives on: every
/// later stream answers each `RawGet` at once. Counts the connections that
/// opened a stream.
async fn store_with_a_frozen_connection() -> (String, Arc<std::sync::atomic::AtomicUsize>) {
    use crate::proto::tikvpb::BatchCommandsRequest;
    use prost::Message;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let connections = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&connections);
    let address = h2_store(move |mut conn| {
        let count = Arc::clone(&count);
        async move {
            let Some(Ok((request, mut respond))) = conn.accept().await else {
                return;
            };
            let first = count.fetch_add(1, Ordering::SeqCst) == 0;
            let mut body = request.into_body();
            if first {
                tokio::select! {
                    _ = body.data() => {}
                    _ = conn.accept() => return,
                }
                std::mem::forget((conn, respond, body));
                return;
            }
            tokio::spawn(async move { while conn.accept().await.is_some() {} });
            let Ok(mut out) = respond.send_response(grpc_head().body(()).unwrap(), false) else {
                return;
            };
            let mut buffer = Vec::new();
            while let Some(bytes) = next_message(&mut body, &mut buffer).await {
                let ids = BatchCommandsRequest::decode(bytes.as_slice())
                    .unwrap()
                    .request_ids;
                if out.send_data(raw_get_answers(ids), false).is_err() {
                    return;
                }
            }
        }
    })
    .await;
    (address, connections)
}

/// A connection that goes silent while the store lives on (a path that
/// black-holes one connection's packets; the deterministic simulation's
/// partitions do this): once a request times out on its stalled stream,
/// the next stream opens on a new connection instead of the silent one,
/// long before the keep-alive (an hour here) would notice.
#[tokio::test]
async fn a_stalled_stream_is_replaced_on_a_new_connection() {
    let (address, connections) = store_with_a_frozen_connection().await;
    let store = with_keepalive(Duration::from_millis(300), Duration::from_secs(3600))
        .connect(&address)
        .await
        .unwrap();
    let get = kvrpcpb::RawGetRequest {
        key: b"k".to_vec(),
        ..Default::default()
    };
    let first = store
        .dispatch(&get)
        .await
        .expect_err("its connection froze");
    assert_eq!(
        classify_dispatch_error(&first),
        DispatchFailure::ClientTimeout,
        "{first:?}"
    );
    let answer = store
        .dispatch(&get)
        .await
        .expect("answered on a new connection");
    let answer = answer
        .downcast::<kvrpcpb::RawGetResponse>()
        .expect("a RawGet answer");
    assert_eq!(answer.value, b"v");
    assert_eq!(
        connections.load(std::sync::atomic::Ordering::SeqCst),
        2,
        "one frozen connection, one new"
    );
    // The store is fine, the new connection too: no more are made.
    store.dispatch(&get).await.expect("answered again");
    assert_eq!(connections.load(std::sync::atomic::Ordering::SeqCst), 2);
}
