//! The typed path's unary call, made at the HTTP level over tonic's
//! channel, against a scripted HTTP/2 server on loopback: a message cut
//! across DATA frames is decoded, and every failure (a status in the
//! headers or the trailers, a missing status, a reset stream, an oversized
//! message, a compressed one, an HTTP error) ends as tonic's generated
//! client ends it, or, for an HTTP error page, with the status gRPC's HTTP
//! mapping gives; and a real tonic server that compresses its answers
//! answers the path, which offers no compression, with plain ones.

use std::time::Duration;

use crate::classify::{classify_grpc_error, DispatchFailure};
use crate::proto::kvrpcpb;
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::request::TypedCall;
use crate::store::GrpcChannel;
use crate::Error;
use crate::Failure;
use prost::Message;
use tokio::net::TcpListener;
use tonic::codegen::{http, Bytes};
use tonic::Code;

/// The value every successful answer carries.
const VALUE: &[u8] = b"the value, long enough to be cut in several places";

/// Serves HTTP/2 on 127.0.0.1; each request's key names what to do.
async fn scripted_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut conn) = h2::server::handshake(socket).await else {
                    return;
                };
                while let Some(Ok((request, respond))) = conn.accept().await {
                    tokio::spawn(answer(request, respond));
                }
            });
        }
    });
    address
}

fn head(status: u16) -> http::Response<()> {
    http::Response::builder()
        .status(status)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap()
}

fn trailers(code: &'static str, message: &'static str) -> http::HeaderMap {
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static(code));
    if !message.is_empty() {
        trailers.insert("grpc-message", http::HeaderValue::from_static(message));
    }
    trailers
}

async fn answer(
    request: http::Request<h2::RecvStream>,
    mut respond: h2::server::SendResponse<Bytes>,
) {
    let mut body = request.into_body();
    let mut received = Vec::new();
    while let Some(Ok(chunk)) = body.data().await {
        let _ = body.flow_control().release_capacity(chunk.len());
        received.extend_from_slice(&chunk);
    }
    let key = kvrpcpb::RawGetRequest::decode(received.get(5..).unwrap_or_default())
        .map(|r| r.key)
        .unwrap_or_default();
    let reply = kvrpcpb::RawGetResponse {
        value: VALUE.to_vec(),
        ..Default::default()
    }
    .encode_to_vec();
    let mut framed = vec![0u8];
    framed.extend((reply.len() as u32).to_be_bytes());
    framed.extend(reply);
    match key.as_slice() {
        b"split" => {
            let Ok(mut stream) = respond.send_response(head(200), false) else {
                return;
            };
            // Cut inside the prefix and inside the message.
            for part in [&framed[..3], &framed[3..20], &framed[20..]] {
                let _ = stream.send_data(Bytes::copy_from_slice(part), false);
                tokio::task::yield_now().await;
            }
            let _ = stream.send_trailers(trailers("0", ""));
        }
        b"headers-status" => {
            let mut head = head(200);
            head.headers_mut()
                .insert("grpc-status", http::HeaderValue::from_static("14"));
            head.headers_mut().insert(
                "grpc-message",
                http::HeaderValue::from_static("store%20busy"),
            );
            let _ = respond.send_response(head, true);
        }
        b"trailer-status" => {
            let Ok(mut stream) = respond.send_response(head(200), false) else {
                return;
            };
            let _ = stream.send_data(Bytes::from(framed), false);
            let _ = stream.send_trailers(trailers("9", "not%20now"));
        }
        b"no-status" => {
            let Ok(mut stream) = respond.send_response(head(200), false) else {
                return;
            };
            let _ = stream.send_data(Bytes::from(framed), true);
        }
        b"no-message" => {
            let Ok(mut stream) = respond.send_response(head(200), false) else {
                return;
            };
            let _ = stream.send_trailers(trailers("0", ""));
        }
        b"oversized" => {
            let Ok(mut stream) = respond.send_response(head(200), false) else {
                return;
            };
            let mut prefix = vec![0u8];
            prefix.extend(((64u32 << 20) + 1).to_be_bytes());
            let _ = stream.send_data(Bytes::from(prefix), false);
            let _ = stream.send_trailers(trailers("0", ""));
        }
        // A compressed message under a `grpc-encoding` this client never
        // offered, and a compressed flag with no encoding named at all: the
        // bytes are not a plain message and must never be decoded as one.
        b"gzip-encoded" | b"flag-without-encoding" => {
            let mut head = head(200);
            if key == b"gzip-encoded" {
                head.headers_mut()
                    .insert("grpc-encoding", http::HeaderValue::from_static("gzip"));
            }
            let Ok(mut stream) = respond.send_response(head, false) else {
                return;
            };
            let mut flagged = framed.clone();
            flagged[0] = 1;
            let _ = stream.send_data(Bytes::from(flagged), false);
            let _ = stream.send_trailers(trailers("0", ""));
        }
        b"reset" => respond.send_reset(h2::Reason::INTERNAL_ERROR),
        b"stall-body" => {
            let Ok(mut stream) = respond.send_response(head(200), false) else {
                return;
            };
            // Half the message, then nothing: the stream stays open.
            let _ = stream.send_data(Bytes::copy_from_slice(&framed[..framed.len() / 2]), false);
            std::future::pending::<()>().await;
            drop(stream);
        }
        b"http-503" => {
            let Ok(mut stream) = respond.send_response(head(503), false) else {
                return;
            };
            let _ = stream.send_data(Bytes::from_static(b"<html>overloaded</html>"), true);
        }
        _ => {
            let Ok(mut stream) = respond.send_response(head(200), false) else {
                return;
            };
            let _ = stream.send_data(Bytes::from(framed), false);
            let _ = stream.send_trailers(trailers("0", ""));
        }
    }
}

/// A response whose body stalls after its headers (which tonic's timeouts
/// do not cover) fails once it has stalled for the request timeout, as a
/// client timeout: the call does not hang.
#[tokio::test]
async fn a_stalled_body_ends_as_a_client_timeout() {
    let address = scripted_server().await;
    let grpc = GrpcChannel::new(connect(&address).await).timeout(Duration::from_millis(200));
    let mut request = request("stall-body");
    // No `grpc-timeout` header: the channel's timeout (5 s) covers the
    // headers, the path's own (200 ms) the body.
    let call = request.dispatch_typed(&grpc, None);
    let outcome = tokio::time::timeout(Duration::from_secs(30), call)
        .await
        .expect("the stalled body must end the call, not hang it")
        .expect("the gRPC request types have a typed path");
    let status = match outcome {
        Err(Error::GrpcAPI(status)) => status,
        other => panic!("{other:?}"),
    };
    assert_eq!(status.code(), Code::Cancelled, "{status:?}");
    assert_eq!(
        classify_grpc_error(&status),
        DispatchFailure::ClientTimeout,
        "{status:?}"
    );
    assert!(DispatchFailure::ClientTimeout.may_have_been_sent());
    // The channel still serves.
    assert_eq!(typed(&grpc, "plain").await.unwrap().value, VALUE);
}

async fn connect(address: &str) -> tonic::transport::Channel {
    tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect()
        .await
        .unwrap()
}

fn request(key: &str) -> kvrpcpb::RawGetRequest {
    kvrpcpb::RawGetRequest {
        key: key.as_bytes().to_vec(),
        ..Default::default()
    }
}

/// The typed path's answer to `key`.
async fn typed(grpc: &GrpcChannel, key: &str) -> crate::Result<kvrpcpb::RawGetResponse> {
    let mut request = request(key);
    request
        .dispatch_typed(grpc, Some(Duration::from_secs(5)))
        .await
        .expect("the gRPC request types have a typed path")
}

#[tokio::test]
async fn answers_decode_and_failures_match_tonic() {
    let address = scripted_server().await;
    let channel = connect(&address).await;
    let grpc = GrpcChannel::new(channel.clone());
    let mut generated = TikvClient::new(channel);

    for key in ["plain", "split"] {
        let answer = typed(&grpc, key).await.unwrap();
        assert_eq!(answer.value, VALUE, "{key}");
        let theirs = generated.raw_get(request(key)).await.unwrap().into_inner();
        assert_eq!(answer, theirs, "{key}");
    }

    for (key, code) in [
        ("headers-status", Code::Unavailable),
        ("trailer-status", Code::FailedPrecondition),
        ("no-status", Code::Unknown),
        ("no-message", Code::Internal),
        ("reset", Code::Internal),
        // Compressed frames are refused with tonic's codes, never misread.
        ("gzip-encoded", Code::Unimplemented),
        ("flag-without-encoding", Code::Internal),
    ] {
        let ours = match typed(&grpc, key).await {
            Err(Error::GrpcAPI(status)) => status,
            other => panic!("{key}: {other:?}"),
        };
        let theirs = generated.raw_get(request(key)).await.unwrap_err();
        assert_eq!(ours.code(), code, "{key}: {ours:?}");
        assert_eq!(ours.code(), theirs.code(), "{key}: {ours:?} / {theirs:?}");
        assert_eq!(
            classify_grpc_error(&ours),
            classify_grpc_error(&theirs),
            "{key}: {ours:?} / {theirs:?}"
        );
        if key == "headers-status" {
            assert_eq!(ours.message(), "store busy");
        }
    }

    // Over the 4 MiB default limit: refused from the prefix alone, as the
    // crate's typed error that names the setting to raise.
    let oversized = typed(&grpc, "oversized").await;
    match oversized.as_ref().err().and_then(|e| e.failure()) {
        Some(Failure::GrpcMessageTooLarge { limit, .. }) => assert_eq!(*limit, 4 << 20),
        _ => panic!("oversized: {oversized:?}"),
    }
    let grpc_large = GrpcChannel::new(connect(&address).await).max_decoding_message_size(128 << 20);
    match typed(&grpc_large, "oversized").await {
        // Under a raised limit the prefix passes, and the message that
        // never comes is reported as cut short.
        Err(Error::GrpcAPI(status)) => {
            assert_eq!(status.code(), Code::Internal, "{status:?}");
            assert!(status.message().contains("EOF"), "{status:?}");
        }
        other => panic!("oversized under a raised limit: {other:?}"),
    }

    // An HTTP error page without a gRPC status: gRPC's HTTP mapping.
    match typed(&grpc, "http-503").await {
        Err(Error::GrpcAPI(status)) => assert_eq!(status.code(), Code::Unavailable, "{status:?}"),
        other => panic!("http-503: {other:?}"),
    }

    // The channel still serves after all of that.
    assert_eq!(typed(&grpc, "plain").await.unwrap().value, VALUE);
}

/// A store that is not there: the typed path fails the way the generated
/// client does, with the same classification.
#[tokio::test]
async fn a_closed_port_fails_like_tonic() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    drop(listener);
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{address}"))
        .unwrap()
        .timeout(Duration::from_secs(5))
        .connect_lazy();
    let grpc = GrpcChannel::new(channel.clone());
    let mut generated = TikvClient::new(channel);
    let ours = match typed(&grpc, "plain").await {
        Err(Error::GrpcAPI(status)) => status,
        other => panic!("{other:?}"),
    };
    let theirs = generated.raw_get(request("plain")).await.unwrap_err();
    assert_eq!(ours.code(), theirs.code(), "{ours:?} / {theirs:?}");
    assert_eq!(
        classify_grpc_error(&ours),
        classify_grpc_error(&theirs),
        "{ours:?} / {theirs:?}"
    );
}

/// A real tonic server that compresses its answers (gzip) whenever the
/// client accepts it: the typed path offers no compression, so it gets plain
/// messages and decodes them, while tonic's generated client that accepts
/// gzip gets them compressed (the server does compress, so the typed path's
/// plain answers come from what it asks for, not from a server that never
/// compresses).
#[tokio::test]
async fn a_compressing_tonic_server_answers_the_typed_path_uncompressed() {
    use crate::proto::tikvpb::tikv_client::TikvClient;
    use crate::proto::tikvpb::tikv_server::{Tikv, TikvServer};
    use tonic::codec::CompressionEncoding;

    struct Echo;
    #[tonic::async_trait]
    impl Tikv for Echo {
        async fn raw_get(
            &self,
            request: tonic::Request<kvrpcpb::RawGetRequest>,
        ) -> Result<tonic::Response<kvrpcpb::RawGetResponse>, tonic::Status> {
            // Long and repetitive, so gzip has something to do.
            let value = request.into_inner().key.repeat(64);
            Ok(tonic::Response::new(kvrpcpb::RawGetResponse {
                value,
                ..Default::default()
            }))
        }
    }
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap().to_string();
    let server = tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(
                TikvServer::new(Echo)
                    .send_compressed(CompressionEncoding::Gzip)
                    .accept_compressed(CompressionEncoding::Gzip),
            )
            .serve_with_incoming(tokio_stream::wrappers::TcpListenerStream::new(listener)),
    );
    let channel = connect(&address).await;
    let grpc = GrpcChannel::new(channel.clone());

    let ours = typed(&grpc, "compress me").await.unwrap();
    assert_eq!(ours.value, b"compress me".repeat(64));

    let answer = TikvClient::new(channel)
        .accept_compressed(CompressionEncoding::Gzip)
        .raw_get(request("compress me"))
        .await
        .unwrap();
    assert_eq!(
        answer
            .metadata()
            .get("grpc-encoding")
            .map(|v| v.to_str().unwrap()),
        Some("gzip"),
        "the server compresses for a client that accepts it"
    );
    assert_eq!(answer.into_inner(), ours);
    server.abort();
}
