//! The type-erased request a [`KvClient`](super::KvClient) sends, implemented
//! for every raw and transactional request of the wire protocol.

use std::any::Any;
use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel;

use crate::proto::kvrpcpb;
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::Result;

/// A TiKV request that can be sent over a gRPC channel.
#[async_trait]
pub trait Request: Any + Sync + Send + 'static {
    /// Sends the request with `client`, bounded by `timeout`.
    async fn dispatch(
        &self,
        client: &TikvClient<Channel>,
        timeout: Duration,
    ) -> Result<Box<dyn Any + Send>>;
    /// A short name for logs and counters (`raw_get`, ...).
    fn label(&self) -> &'static str;
    /// The request as `Any`, for test doubles that inspect it.
    fn as_any(&self) -> &dyn Any;
    /// The request's context, if set.
    fn context(&self) -> Option<&kvrpcpb::Context>;
    /// Replaces the request's context.
    fn set_context(&mut self, context: kvrpcpb::Context);
    /// The request's context to change in place, if set; `None` (the
    /// default) has callers replace it with
    /// [`set_context`](Self::set_context).
    fn context_mut(&mut self) -> Option<&mut kvrpcpb::Context> {
        None
    }
}

macro_rules! impl_request {
    ($req:ty, $resp:ty, $method:ident, $label:literal) => {
        #[async_trait]
        impl Request for $req {
            async fn dispatch(
                &self,
                client: &TikvClient<Channel>,
                timeout: Duration,
            ) -> Result<Box<dyn Any + Send>> {
                let mut req = tonic::Request::new(self.clone());
                // tonic enforces the grpc-timeout header on the client side
                // too, so an unanswered RPC ends with `TimeoutExpired`.
                req.set_timeout(timeout);
                let resp: $resp = client.clone().$method(req).await?.into_inner();
                Ok(Box::new(resp) as Box<dyn Any + Send>)
            }

            fn label(&self) -> &'static str {
                $label
            }

            fn as_any(&self) -> &dyn Any {
                self
            }

            fn context(&self) -> Option<&kvrpcpb::Context> {
                self.context.as_ref()
            }

            fn set_context(&mut self, context: kvrpcpb::Context) {
                self.context = Some(context);
            }

            fn context_mut(&mut self) -> Option<&mut kvrpcpb::Context> {
                self.context.as_mut()
            }
        }
    };
}

impl_request!(
    kvrpcpb::RawGetRequest,
    kvrpcpb::RawGetResponse,
    raw_get,
    "raw_get"
);
impl_request!(
    kvrpcpb::RawBatchGetRequest,
    kvrpcpb::RawBatchGetResponse,
    raw_batch_get,
    "raw_batch_get"
);
impl_request!(
    kvrpcpb::RawPutRequest,
    kvrpcpb::RawPutResponse,
    raw_put,
    "raw_put"
);
impl_request!(
    kvrpcpb::RawBatchPutRequest,
    kvrpcpb::RawBatchPutResponse,
    raw_batch_put,
    "raw_batch_put"
);
impl_request!(
    kvrpcpb::RawDeleteRequest,
    kvrpcpb::RawDeleteResponse,
    raw_delete,
    "raw_delete"
);
impl_request!(
    kvrpcpb::RawBatchDeleteRequest,
    kvrpcpb::RawBatchDeleteResponse,
    raw_batch_delete,
    "raw_batch_delete"
);
impl_request!(
    kvrpcpb::RawScanRequest,
    kvrpcpb::RawScanResponse,
    raw_scan,
    "raw_scan"
);
impl_request!(
    kvrpcpb::RawBatchScanRequest,
    kvrpcpb::RawBatchScanResponse,
    raw_batch_scan,
    "raw_batch_scan"
);
impl_request!(
    kvrpcpb::RawDeleteRangeRequest,
    kvrpcpb::RawDeleteRangeResponse,
    raw_delete_range,
    "raw_delete_range"
);
impl_request!(
    kvrpcpb::RawCasRequest,
    kvrpcpb::RawCasResponse,
    raw_compare_and_swap,
    "raw_compare_and_swap"
);
impl_request!(
    kvrpcpb::RawGetKeyTtlRequest,
    kvrpcpb::RawGetKeyTtlResponse,
    raw_get_key_ttl,
    "raw_get_key_ttl"
);

// The transactional requests (txn.md; wire.md for their fields).
impl_request!(kvrpcpb::GetRequest, kvrpcpb::GetResponse, kv_get, "kv_get");
impl_request!(
    kvrpcpb::BatchGetRequest,
    kvrpcpb::BatchGetResponse,
    kv_batch_get,
    "kv_batch_get"
);
impl_request!(
    kvrpcpb::ScanRequest,
    kvrpcpb::ScanResponse,
    kv_scan,
    "kv_scan"
);
impl_request!(
    kvrpcpb::PrewriteRequest,
    kvrpcpb::PrewriteResponse,
    kv_prewrite,
    "kv_prewrite"
);
impl_request!(
    kvrpcpb::CommitRequest,
    kvrpcpb::CommitResponse,
    kv_commit,
    "kv_commit"
);
impl_request!(
    kvrpcpb::BatchRollbackRequest,
    kvrpcpb::BatchRollbackResponse,
    kv_batch_rollback,
    "kv_batch_rollback"
);
impl_request!(
    kvrpcpb::PessimisticLockRequest,
    kvrpcpb::PessimisticLockResponse,
    kv_pessimistic_lock,
    "kv_pessimistic_lock"
);
impl_request!(
    kvrpcpb::PessimisticRollbackRequest,
    kvrpcpb::PessimisticRollbackResponse,
    kv_pessimistic_rollback,
    "kv_pessimistic_rollback"
);
impl_request!(
    kvrpcpb::TxnHeartBeatRequest,
    kvrpcpb::TxnHeartBeatResponse,
    kv_txn_heart_beat,
    "kv_txn_heart_beat"
);
impl_request!(
    kvrpcpb::CheckTxnStatusRequest,
    kvrpcpb::CheckTxnStatusResponse,
    kv_check_txn_status,
    "kv_check_txn_status"
);
impl_request!(
    kvrpcpb::CheckSecondaryLocksRequest,
    kvrpcpb::CheckSecondaryLocksResponse,
    kv_check_secondary_locks,
    "kv_check_secondary_locks"
);
impl_request!(
    kvrpcpb::ResolveLockRequest,
    kvrpcpb::ResolveLockResponse,
    kv_resolve_lock,
    "kv_resolve_lock"
);
impl_request!(
    kvrpcpb::ScanLockRequest,
    kvrpcpb::ScanLockResponse,
    kv_scan_lock,
    "kv_scan_lock"
);
impl_request!(
    kvrpcpb::UnsafeDestroyRangeRequest,
    kvrpcpb::UnsafeDestroyRangeResponse,
    unsafe_destroy_range,
    "unsafe_destroy_range"
);
impl_request!(
    kvrpcpb::RawChecksumRequest,
    kvrpcpb::RawChecksumResponse,
    raw_checksum,
    "raw_checksum"
);
