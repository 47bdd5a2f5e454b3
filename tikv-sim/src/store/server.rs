//! The store's gRPC server as it is served: the generated `TikvServer` for
//! every unary method, and `tikvpb.Tikv/BatchCommands` with a codec of its
//! own.
//!
//! The codec differs from tonic's prost codec in one way: it sizes the
//! buffer for a response message before encoding it. A BatchCommands
//! message carries many answers (a scan of 100 pairs is 12 KB each), and
//! prost, writing into tonic's 8 KB buffer, grows it by doubling, copying
//! what it had written each time; the encoded bytes are the same.

use std::convert::Infallible;
use std::task::{Context, Poll};

use prost::Message;
use tonic::body::Body;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::{http, BoxFuture, Service};
use tonic::server::{Grpc, NamedService, StreamingService};
use tonic::{Request, Response, Status, Streaming};

use super::forward::{ForwardDial, Forwarder, FORWARD_LABEL};
use super::StoreService;
use crate::limits::STORE_GRPC_MAX_MESSAGE_SIZE;
use crate::net::PeerPorts;
use crate::proto::tikvpb::tikv_server::{Tikv, TikvServer};
use crate::proto::tikvpb::{BatchCommandsRequest, BatchCommandsResponse};
use tikv_plan_proto::methods::BATCH_COMMANDS_PATH;

/// The `tikvpb.Tikv` service of one store.
#[derive(Clone)]
pub(crate) struct StoreServer {
    unary: TikvServer<StoreService>,
    service: StoreService,
    forwarder: Forwarder,
}

impl StoreServer {
    pub(crate) fn new(service: StoreService, peers: PeerPorts, dial: Option<ForwardDial>) -> Self {
        StoreServer {
            // TiKV's server takes and sends messages of any size (`limits.rs`).
            unary: TikvServer::new(service.clone())
                .max_decoding_message_size(STORE_GRPC_MAX_MESSAGE_SIZE)
                .max_encoding_message_size(STORE_GRPC_MAX_MESSAGE_SIZE),
            service,
            forwarder: Forwarder::new(peers, dial),
        }
    }
}

impl NamedService for StoreServer {
    const NAME: &'static str = <TikvServer<StoreService> as NamedService>::NAME;
}

impl Service<http::Request<Body>> for StoreServer {
    type Response = http::Response<Body>;
    type Error = Infallible;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<Body>) -> Self::Future {
        if let Some(target) = Forwarder::target(&req) {
            if self.service.address().as_deref() != Some(target.as_str()) {
                let (service, forwarder) = (self.service.clone(), self.forwarder.clone());
                return Box::pin(async move {
                    // A store that hangs answers nothing, forwarded or not.
                    if let Err(status) = service.wait_out_hang(FORWARD_LABEL).await {
                        return Ok(status.into_http());
                    }
                    let answer = forwarder.forward(&target, req).await;
                    service.record_forward(answer.is_err());
                    Ok(answer.unwrap_or_else(|status| status.into_http()))
                });
            }
        }
        if req.uri().path() != BATCH_COMMANDS_PATH {
            return self.unary.call(req);
        }
        let service = self.service.clone();
        Box::pin(async move {
            // The same limits as the unary methods: none, as TiKV's.
            let mut grpc = Grpc::new(BatchCodec)
                .max_decoding_message_size(STORE_GRPC_MAX_MESSAGE_SIZE)
                .max_encoding_message_size(STORE_GRPC_MAX_MESSAGE_SIZE);
            Ok(grpc.streaming(BatchCommands(service), req).await)
        })
    }
}

/// The BatchCommands method, served by [`Tikv::batch_commands`].
struct BatchCommands(StoreService);

impl StreamingService<BatchCommandsRequest> for BatchCommands {
    type Response = BatchCommandsResponse;
    type ResponseStream = tonic::codegen::BoxStream<BatchCommandsResponse>;
    type Future = BoxFuture<Response<Self::ResponseStream>, Status>;

    fn call(&mut self, request: Request<Streaming<BatchCommandsRequest>>) -> Self::Future {
        let service = self.0.clone();
        Box::pin(async move { service.batch_commands(request).await })
    }
}

/// The stream's codec: prost's encoding, into a buffer sized first.
#[derive(Debug, Clone, Copy, Default)]
struct BatchCodec;

impl Codec for BatchCodec {
    type Encode = BatchCommandsResponse;
    type Decode = BatchCommandsRequest;
    type Encoder = BatchCodec;
    type Decoder = BatchCodec;

    fn encoder(&mut self) -> Self::Encoder {
        BatchCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        BatchCodec
    }
}

impl Encoder for BatchCodec {
    type Item = BatchCommandsResponse;
    type Error = Status;

    fn encode(&mut self, item: Self::Item, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.reserve(item.encoded_len());
        item.encode(dst)
            .map_err(|e| Status::internal(format!("encoding a BatchCommands response: {e}")))
    }
}

impl Decoder for BatchCodec {
    type Item = BatchCommandsRequest;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<Self::Item>, Status> {
        // A message prost cannot decode fails the call as tonic's codec
        // fails it.
        BatchCommandsRequest::decode(src)
            .map(Some)
            .map_err(|e| Status::internal(e.to_string()))
    }
}
