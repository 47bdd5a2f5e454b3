//! The typed gRPC path: a request is sent with its own response type (no
//! `Box<dyn Any>`), and tonic gets it by value as an `Arc` that it encodes
//! straight from, so the request is never copied for the wire and is handed
//! back for a retry once the RPC is over.

use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

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

    /// Sends the shared request over `grpc`, with `timeout` as its
    /// `grpc-timeout` (none: the channel's own timeout bounds it). tonic
    /// encodes from the `Arc` and drops its handle once encoded.
    fn call(
        grpc: &GrpcChannel,
        request: Arc<Self>,
        timeout: Option<Duration>,
    ) -> impl Future<Output = Result<Self::Reply>> + Send;
}

/// Sends `request` on the typed path and puts it back for a retry: it is
/// moved into an `Arc` for tonic, and taken back out once the RPC is over
/// (copied only if tonic still held its handle then). If the future is
/// dropped mid-RPC the request is left empty; the plan drops it as well.
pub(crate) async fn send_shared<R: GrpcRequest + Send + Sync>(
    request: &mut R,
    grpc: &GrpcChannel,
    timeout: Option<Duration>,
) -> Result<R::Reply> {
    let shared = Arc::new(std::mem::take(request));
    let result = R::call(grpc, Arc::clone(&shared), timeout).await;
    *request = Arc::try_unwrap(shared).unwrap_or_else(|still_shared| (*still_shared).clone());
    result
}

/// Encodes a shared request, decodes a prost response.
struct SharedCodec<Req, Resp>(PhantomData<fn(Req) -> Resp>);

struct SharedEncoder<Req>(PhantomData<fn(Req)>);

impl<Req: prost::Message> Encoder for SharedEncoder<Req> {
    type Item = Arc<Req>;
    type Error = Status;

    fn encode(
        &mut self,
        item: Arc<Req>,
        buf: &mut EncodeBuf<'_>,
    ) -> std::result::Result<(), Status> {
        // The buffer grows as needed, so encoding cannot run out of space.
        item.encode(buf)
            .map_err(|e| Status::internal(format!("encoding the request failed: {e}")))
    }
}

impl<Req, Resp> Codec for SharedCodec<Req, Resp>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + 'static,
{
    type Encode = Arc<Req>;
    type Decode = Resp;
    type Encoder = SharedEncoder<Req>;
    type Decoder = SharedDecoder<Resp>;

    fn encoder(&mut self) -> Self::Encoder {
        SharedEncoder(PhantomData)
    }

    fn decoder(&mut self) -> Self::Decoder {
        SharedDecoder(tonic_prost::ProstDecoder::default())
    }
}

struct SharedDecoder<Resp>(tonic_prost::ProstDecoder<Resp>);

impl<Resp: prost::Message + Default> Decoder for SharedDecoder<Resp> {
    type Item = Resp;
    type Error = Status;

    fn decode(&mut self, buf: &mut DecodeBuf<'_>) -> std::result::Result<Option<Resp>, Status> {
        self.0.decode(buf)
    }
}

/// One unary call, as tonic's generated client makes it (same readiness
/// error, same method extension), with the shared request.
async fn unary<Req, Resp>(
    grpc: &GrpcChannel,
    request: Arc<Req>,
    timeout: Option<Duration>,
    path: &'static str,
    method: &'static str,
) -> Result<Resp>
where
    Req: prost::Message + Send + Sync + 'static,
    Resp: prost::Message + Default + Send + 'static,
{
    let mut grpc = grpc.clone();
    grpc.ready()
        .await
        .map_err(|e| Status::unknown(format!("Service was not ready: {e}")))?;
    let mut req = tonic::Request::new(request);
    // tonic enforces the grpc-timeout header on the client side too (as it
    // does the channel's own timeout), so an unanswered RPC ends with
    // `TimeoutExpired`.
    if let Some(timeout) = timeout {
        set_timeout(&mut req, timeout);
    }
    req.extensions_mut()
        .insert(GrpcMethod::new("tikvpb.Tikv", method));
    let codec = SharedCodec::<Req, Resp>(PhantomData);
    let response = grpc
        .unary(req, PathAndQuery::from_static(path), codec)
        .await?;
    Ok(response.into_inner())
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

            fn call(
                grpc: &GrpcChannel,
                request: Arc<Self>,
                timeout: Option<Duration>,
            ) -> impl Future<Output = Result<Self::Reply>> + Send {
                unary(grpc, request, timeout, concat!("/tikvpb.Tikv/", $method), $method)
            }
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
