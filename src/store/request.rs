//! The type-erased request a [`KvClient`](super::KvClient) sends, implemented
//! for every raw and transactional request of the wire protocol.

use std::any::Any;
use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel;

use crate::proto::kvrpcpb;
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::Result;
use tikv_plan_proto::methods::KvMethod;

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

    /// Sends the request with `client`, bounded by `timeout`, asking the
    /// store to forward it to `forwarded_host` (the gRPC metadata
    /// `tikv-forwarded-host`) when one is given. Every request of the wire
    /// protocol implements it; the default, for a request type of your own,
    /// sends it as [`dispatch`](Self::dispatch) does and refuses to forward
    /// it, so such a request never reaches the proxy's own store as if it
    /// were meant for it.
    #[doc(hidden)]
    async fn dispatch_forwarded(
        &self,
        client: &TikvClient<Channel>,
        timeout: Duration,
        forwarded_host: Option<&tonic::metadata::AsciiMetadataValue>,
    ) -> Result<Box<dyn Any + Send>> {
        match forwarded_host {
            None => self.dispatch(client, timeout).await,
            Some(host) => Err(crate::Error::from(crate::Failure::Connect {
                address: format!("{host:?}"),
                message: format!(
                    "the {} request is not one of the wire protocol's, so it cannot be \
                     forwarded through another store; it was not sent",
                    self.label()
                ),
                source: None,
            })),
        }
    }
}

/// The cheapest call a store answers: a raw get in Region 0, which no
/// store holds, so any store answers it at once with `RegionNotFound`
/// (or any other answer); an answer of any kind proves the store (or the
/// route through a proxy) reachable.
pub(crate) fn liveness_probe() -> kvrpcpb::RawGetRequest {
    kvrpcpb::RawGetRequest {
        context: Some(kvrpcpb::Context::default()),
        ..Default::default()
    }
}

/// The gRPC metadata key that asks a store to forward a call to the store
/// at the address it holds (TiKV's `tikv-forwarded-host`).
pub(crate) const FORWARDED_HOST: &str = "tikv-forwarded-host";

/// `Request` for every method of the wire protocol's table
/// ([`kv_methods!`](tikv_plan_proto::kv_methods)).
macro_rules! impl_requests {
    ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
       [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
        #[async_trait]
        impl Request for kvrpcpb::$req {
            async fn dispatch(
                &self,
                client: &TikvClient<Channel>,
                timeout: Duration,
            ) -> Result<Box<dyn Any + Send>> {
                self.dispatch_forwarded(client, timeout, None).await
            }

            async fn dispatch_forwarded(
                &self,
                client: &TikvClient<Channel>,
                timeout: Duration,
                forwarded_host: Option<&tonic::metadata::AsciiMetadataValue>,
            ) -> Result<Box<dyn Any + Send>> {
                let mut req = tonic::Request::new(self.clone());
                // tonic enforces the grpc-timeout header on the client side
                // too, so an unanswered RPC ends with `TimeoutExpired`.
                req.set_timeout(timeout);
                if let Some(host) = forwarded_host {
                    req.metadata_mut().insert(FORWARDED_HOST, host.clone());
                }
                let resp: kvrpcpb::$resp = client.clone().$stub(req).await?.into_inner();
                Ok(Box::new(resp) as Box<dyn Any + Send>)
            }

            fn label(&self) -> &'static str {
                <Self as KvMethod>::LABEL
            }

            fn as_any(&self) -> &dyn Any {
                self
            }

            fn context(&self) -> Option<&kvrpcpb::Context> {
                KvMethod::context(self)
            }

            fn set_context(&mut self, context: kvrpcpb::Context) {
                *<Self as KvMethod>::context_mut(self) = Some(context);
            }

            fn context_mut(&mut self) -> Option<&mut kvrpcpb::Context> {
                <Self as KvMethod>::context_mut(self).as_mut()
            }
        }
    )*};
}

tikv_plan_proto::kv_methods!(impl_requests);
