//! The typed gRPC path: a request is sent with its own response type (no
//! `Box<dyn Any>`), and kept by the plan for a retry. A request of ordinary
//! size is encoded once into a buffer of its own length that tonic copies
//! to the wire; a large one (a big batch) is lent to tonic as an `Arc` that
//! it encodes straight from, so its payload is never copied for the wire,
//! and taken back once the RPC is over.

use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use prost::bytes::{BufMut, Bytes};
use tonic::client::Grpc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http::uri::PathAndQuery;
use tonic::codegen::GrpcMethod;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::Channel;
use tonic::Status;

use crate::proto::kvrpcpb;
use crate::Result;

/// A gRPC channel to one store, as the typed path uses it.
pub type GrpcChannel = Grpc<Channel>;

/// A request of the wire protocol with a typed unary call of its own.
pub trait GrpcRequest: prost::Message + Default + Clone + Sized + 'static {
    /// The response the store sends back.
    type Reply: prost::Message + Default + Send + 'static;

    /// The method's name in `tikvpb.Tikv` (`RawGet`).
    const METHOD: &'static str;

    /// The method's path (`/tikvpb.Tikv/RawGet`).
    const PATH: &'static str;
}

/// Requests whose encoding is at most this long are encoded into a buffer
/// of their own; longer ones are lent to tonic (see the module docs). Up to
/// here the copy into tonic's buffer costs less than the allocation of the
/// whole request that lending needs (a request with its context is about a
/// kilobyte in memory, whatever its encoded length).
const ENCODE_AHEAD_LIMIT: usize = 16 * 1024;

/// Sends `request` on the typed path, with `timeout` as its `grpc-timeout`
/// (none: the channel's own timeout bounds it); `Some` always (the shape
/// [`KvRequest::dispatch_typed`](crate::request::KvRequest::dispatch_typed)
/// returns, so that method is this future, not a wrapper around it). The
/// request is the plan's again when this returns. A large request is moved
/// into an `Arc` for tonic and taken back out once the RPC is over (copied
/// only if tonic still held its handle then); if the future is dropped
/// mid-RPC it is left empty, and the plan drops it as well. One `async fn`
/// for the whole call: each nested future would be one more copy of the
/// RPC's state when it starts.
pub(crate) async fn send_typed<R: GrpcRequest + Send + Sync>(
    request: &mut R,
    grpc: &GrpcChannel,
    timeout: Option<Duration>,
) -> Option<Result<R::Reply>> {
    let length = request.encoded_len();
    let (body, shared) = if length <= ENCODE_AHEAD_LIMIT {
        let mut encoded = Vec::with_capacity(length);
        request.encode_raw(&mut encoded);
        (Body::Encoded(Bytes::from(encoded)), None)
    } else {
        let shared = Arc::new(std::mem::take(request));
        (Body::Shared(Arc::clone(&shared)), Some(shared))
    };
    let mut grpc = grpc.clone();
    let result = match grpc.ready().await {
        Err(e) => Err(Status::unknown(format!("Service was not ready: {e}")).into()),
        Ok(()) => {
            let mut req = tonic::Request::new(body);
            // tonic enforces the grpc-timeout header on the client side too
            // (as it does the channel's own timeout), so an unanswered RPC
            // ends with `TimeoutExpired`.
            if let Some(timeout) = timeout {
                set_timeout(&mut req, timeout);
            }
            req.extensions_mut()
                .insert(GrpcMethod::new("tikvpb.Tikv", R::METHOD));
            let codec = TypedCodec::<R, R::Reply>(PhantomData);
            grpc.unary(req, PathAndQuery::from_static(R::PATH), codec)
                .await
                .map(tonic::Response::into_inner)
                .map_err(Into::into)
        }
    };
    if let Some(shared) = shared {
        *request = Arc::try_unwrap(shared).unwrap_or_else(|still_shared| (*still_shared).clone());
    }
    Some(result)
}

/// What tonic is given to encode: the request's encoding, or the request.
enum Body<Req> {
    Encoded(Bytes),
    Shared(Arc<Req>),
}

/// Encodes a [`Body`], decodes a prost response.
struct TypedCodec<Req, Resp>(PhantomData<fn(Req) -> Resp>);

struct BodyEncoder<Req>(PhantomData<fn(Req)>);

impl<Req: prost::Message> Encoder for BodyEncoder<Req> {
    type Item = Body<Req>;
    type Error = Status;

    fn encode(
        &mut self,
        item: Body<Req>,
        buf: &mut EncodeBuf<'_>,
    ) -> std::result::Result<(), Status> {
        match item {
            Body::Encoded(bytes) => {
                buf.put(bytes);
                Ok(())
            }
            // The buffer grows as needed, so encoding cannot run out of
            // space.
            Body::Shared(request) => request
                .encode(buf)
                .map_err(|e| Status::internal(format!("encoding the request failed: {e}"))),
        }
    }
}

impl<Req, Resp> Codec for TypedCodec<Req, Resp>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + 'static,
{
    type Encode = Body<Req>;
    type Decode = Resp;
    type Encoder = BodyEncoder<Req>;
    type Decoder = ReplyDecoder<Resp>;

    fn encoder(&mut self) -> Self::Encoder {
        BodyEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        ReplyDecoder(tonic_prost::ProstDecoder::default())
    }
}

struct ReplyDecoder<Resp>(tonic_prost::ProstDecoder<Resp>);

impl<Resp: prost::Message + Default> Decoder for ReplyDecoder<Resp> {
    type Item = Resp;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> std::result::Result<Option<Resp>, Status> {
        self.0.decode(buf)
    }
}

/// Sets the `grpc-timeout` header of `req` to `timeout`, as
/// [`tonic::Request::set_timeout`] does, but formats each distinct timeout
/// once per thread: nearly every RPC carries the client's own timeout, and
/// formatting it (a `u128` to text, then a copy into a header value) cost
/// more than the rest of the header work.
fn set_timeout<T>(req: &mut tonic::Request<T>, timeout: Duration) {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Duration, MetadataValue<Ascii>)>> =
            const { std::cell::RefCell::new(None) };
    }
    let cached = LAST.with(|last| match &*last.borrow() {
        Some((of, value)) if *of == timeout => Some(value.clone()),
        _ => None,
    });
    let value = match cached {
        Some(value) => value,
        None => {
            req.set_timeout(timeout);
            if let Some(value) = req.metadata().get(GRPC_TIMEOUT) {
                let value = value.clone();
                LAST.with(|last| *last.borrow_mut() = Some((timeout, value)));
            }
            return;
        }
    };
    req.metadata_mut().insert(GRPC_TIMEOUT, value);
}

/// The header that carries a call's timeout.
const GRPC_TIMEOUT: &str = "grpc-timeout";

macro_rules! grpc_request {
    ($($req:ident => $resp:ident, $method:literal;)*) => {$(
        impl GrpcRequest for kvrpcpb::$req {
            type Reply = kvrpcpb::$resp;
            const METHOD: &'static str = $method;
            const PATH: &'static str = concat!("/tikvpb.Tikv/", $method);
        }
    )*
        /// Every method the typed path calls.
        #[cfg(test)]
        const METHODS: &[&str] = &[$($method),*];
    };
}

grpc_request! {
    RawGetRequest => RawGetResponse, "RawGet";
    RawBatchGetRequest => RawBatchGetResponse, "RawBatchGet";
    RawPutRequest => RawPutResponse, "RawPut";
    RawBatchPutRequest => RawBatchPutResponse, "RawBatchPut";
    RawDeleteRequest => RawDeleteResponse, "RawDelete";
    RawBatchDeleteRequest => RawBatchDeleteResponse, "RawBatchDelete";
    RawScanRequest => RawScanResponse, "RawScan";
    RawBatchScanRequest => RawBatchScanResponse, "RawBatchScan";
    RawDeleteRangeRequest => RawDeleteRangeResponse, "RawDeleteRange";
    RawCasRequest => RawCasResponse, "RawCompareAndSwap";
    RawGetKeyTtlRequest => RawGetKeyTtlResponse, "RawGetKeyTTL";
    RawChecksumRequest => RawChecksumResponse, "RawChecksum";
    GetRequest => GetResponse, "KvGet";
    BatchGetRequest => BatchGetResponse, "KvBatchGet";
    ScanRequest => ScanResponse, "KvScan";
    PrewriteRequest => PrewriteResponse, "KvPrewrite";
    CommitRequest => CommitResponse, "KvCommit";
    BatchRollbackRequest => BatchRollbackResponse, "KvBatchRollback";
    PessimisticLockRequest => PessimisticLockResponse, "KvPessimisticLock";
    PessimisticRollbackRequest => PessimisticRollbackResponse, "KVPessimisticRollback";
    TxnHeartBeatRequest => TxnHeartBeatResponse, "KvTxnHeartBeat";
    CheckTxnStatusRequest => CheckTxnStatusResponse, "KvCheckTxnStatus";
    CheckSecondaryLocksRequest => CheckSecondaryLocksResponse, "KvCheckSecondaryLocks";
    ResolveLockRequest => ResolveLockResponse, "KvResolveLock";
    ScanLockRequest => ScanLockResponse, "KvScanLock";
    UnsafeDestroyRangeRequest => UnsafeDestroyRangeResponse, "UnsafeDestroyRange";
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The cached `grpc-timeout` header is the one tonic writes, for the
    /// timeout it was cached for and not for another.
    #[test]
    fn the_cached_timeout_header_matches_tonics() {
        for millis in [2000, 2000, 150, 2000, 1, 1] {
            let timeout = Duration::from_millis(millis);
            let mut ours = tonic::Request::new(());
            set_timeout(&mut ours, timeout);
            let mut theirs = tonic::Request::new(());
            theirs.set_timeout(timeout);
            assert_eq!(
                ours.metadata().get(GRPC_TIMEOUT),
                theirs.metadata().get(GRPC_TIMEOUT),
                "{millis} ms"
            );
        }
    }

    /// The typed path's method paths are the generated client's.
    #[test]
    fn paths_match_the_generated_client() {
        let generated = include_str!(concat!(env!("OUT_DIR"), "/tikvpb.rs"));
        for method in METHODS {
            let path = format!("\"/tikvpb.Tikv/{method}\"");
            assert!(generated.contains(&path), "{path} is not a Tikv method");
        }
    }
}
