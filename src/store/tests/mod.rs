//! The store clients against real loopback servers: how each way an RPC
//! can fail is classified (unary, typed and batched paths), the RPC
//! timeout, stream resets, and the BatchCommands transport.

mod batch_commands;
mod net;
mod rpc_timeout;
mod stream_reset;
mod transport_classes;
mod transport_matrix;
mod typed_call;

use prost::Message;
use tonic::codegen::{http, Bytes};

use crate::proto::kvrpcpb;

/// Answers an h2 stream with a `RawGetResponse` carrying value `v` and
/// status OK (the test servers of these files speak HTTP/2 by hand).
pub(super) fn answer(mut respond: h2::server::SendResponse<Bytes>) {
    let head = http::Response::builder()
        .status(200)
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let Ok(mut body) = respond.send_response(head, false) else {
        return;
    };
    let message = kvrpcpb::RawGetResponse {
        value: b"v".to_vec(),
        ..Default::default()
    }
    .encode_to_vec();
    let mut frame = vec![0u8];
    frame.extend((message.len() as u32).to_be_bytes());
    frame.extend(message);
    let _ = body.send_data(Bytes::from(frame), false);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let _ = body.send_trailers(trailers);
}
