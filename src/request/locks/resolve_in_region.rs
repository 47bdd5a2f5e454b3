//! [`ResolveLockInRegion`]: `KvResolveLock` aimed at the Region that holds
//! a key, the lock resolver's per-(transaction, Region) request.

use async_trait::async_trait;

use crate::proto::kvrpcpb;
use crate::request::plan::shard::single_key_shardable;
use crate::request::plan::traits::KvRequest;
use crate::{Key, Result};

/// `KvResolveLock` for every lock of one transaction in the Region that
/// holds `key` (the request's `keys` stay empty, so TiKV resolves them
/// all): lock resolution is per (transaction, Region).
#[derive(Debug, Clone)]
pub struct ResolveLockInRegion {
    /// A key in the Region, to locate it (not sent).
    pub key: Vec<u8>,
    /// The request.
    pub request: kvrpcpb::ResolveLockRequest,
}

#[async_trait]
impl crate::store::Request for ResolveLockInRegion {
    async fn dispatch(
        &self,
        client: &crate::proto::tikvpb::tikv_client::TikvClient<tonic::transport::Channel>,
        timeout: std::time::Duration,
    ) -> Result<Box<dyn std::any::Any + Send>> {
        self.request.dispatch(client, timeout).await
    }

    fn label(&self) -> &'static str {
        "kv_resolve_lock"
    }

    fn as_any(&self) -> &dyn std::any::Any {
        &self.request
    }

    fn context(&self) -> Option<&kvrpcpb::Context> {
        self.request.context.as_ref()
    }

    fn set_context(&mut self, context: kvrpcpb::Context) {
        self.request.context = Some(context);
    }

    fn context_mut(&mut self) -> Option<&mut kvrpcpb::Context> {
        self.request.context.as_mut()
    }
}

impl KvRequest for ResolveLockInRegion {
    type Response = kvrpcpb::ResolveLockResponse;

    fn describe(&self) -> String {
        format!(
            "kv_resolve_lock of transaction {} in the Region of {:?}",
            self.request.start_version,
            Key::from(self.key.clone())
        )
    }
}

impl crate::request::plan::stage::TypedCall for ResolveLockInRegion {
    // The trait's signature, spelt out.
    #[allow(clippy::manual_async_fn)]
    fn dispatch_typed<'a>(
        &'a mut self,
        grpc: &'a crate::store::GrpcChannel,
        timeout: Option<std::time::Duration>,
    ) -> impl std::future::Future<Output = Option<Result<Self::Response>>> + Send + 'a {
        crate::store::send_typed(&self.request, grpc, timeout)
    }
}

single_key_shardable!(ResolveLockInRegion => key);
