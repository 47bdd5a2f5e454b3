//! [`TikvConnect`] opens bounded gRPC channels to stores; [`KvRpcClient`]
//! sends requests over one.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tonic::transport::Channel;

use super::{KvClient, KvConnect, Request};
use crate::config::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE, DEFAULT_REQUEST_TIMEOUT,
};
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::security::SecurityManager;
use crate::Result;

/// Opens [`KvRpcClient`]s. Connection setup is bounded by the connect
/// timeout, so an address that drops packets cannot stall a candidate round
/// ([routing.md, "Connections"](crate::spec::routing#connections)); each RPC is
/// bounded by the request timeout.
#[derive(Debug, Clone)]
pub struct TikvConnect {
    security: Arc<SecurityManager>,
    timeout: Duration,
    connect_timeout: Duration,
    max_decoding_message_size: usize,
}

impl TikvConnect {
    /// A connector with the given security, request timeout and connect
    /// timeout.
    pub fn new(
        security: Arc<SecurityManager>,
        timeout: Duration,
        connect_timeout: Duration,
    ) -> Self {
        TikvConnect {
            security,
            timeout,
            connect_timeout,
            max_decoding_message_size: DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE,
        }
    }

    /// Sets the largest response decoded from a store
    /// (`Config::grpc_max_decoding_message_size`).
    pub fn with_max_decoding_message_size(mut self, limit: usize) -> Self {
        self.max_decoding_message_size = limit;
        self
    }

    /// The request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }
}

impl Default for TikvConnect {
    fn default() -> Self {
        TikvConnect::new(
            Arc::new(SecurityManager::plaintext()),
            DEFAULT_REQUEST_TIMEOUT,
            DEFAULT_CONNECT_TIMEOUT,
        )
    }
}

#[async_trait]
impl KvConnect for TikvConnect {
    type KvClient = KvRpcClient;

    async fn connect(&self, address: &str) -> Result<KvRpcClient> {
        let channel = self
            .security
            .connect(address, self.connect_timeout, self.timeout)
            .await?;
        Ok(KvRpcClient {
            rpc_client: TikvClient::new(channel)
                .max_decoding_message_size(self.max_decoding_message_size),
            timeout: self.timeout,
        })
    }
}

/// A client of one TiKV store over a gRPC channel.
#[derive(Debug, Clone)]
pub struct KvRpcClient {
    rpc_client: TikvClient<Channel>,
    timeout: Duration,
}

impl KvRpcClient {
    /// Wraps an open channel; each RPC is bounded by `timeout`.
    pub fn new(channel: Channel, timeout: Duration) -> Self {
        KvRpcClient {
            rpc_client: TikvClient::new(channel)
                .max_decoding_message_size(DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE),
            timeout,
        }
    }
}

#[async_trait]
impl KvClient for KvRpcClient {
    async fn dispatch(&self, req: &dyn Request) -> Result<Box<dyn Any + Send>> {
        req.dispatch(&self.rpc_client, self.timeout).await
    }
}
