//! [`TikvConnect`] opens bounded gRPC channels to stores; [`KvRpcClient`]
//! sends requests over one.

use std::any::Any;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use tonic::codegen::http::HeaderValue;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;

use super::batch::{BatchOptions, Dialer, KvBatchClient};
use super::{GrpcChannel, KvClient, KvConnect, Request};
use crate::config::{
    RpcMode, DEFAULT_CONNECT_TIMEOUT, DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE,
    DEFAULT_REQUEST_TIMEOUT, KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT,
};
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::security::{ConnectionWatch, SecurityManager};
use crate::Failure;
use crate::{Error, Result};
use tikv_plan_proto::methods::KvMethod;

/// Opens store clients. Connection setup is bounded by the connect
/// timeout, so an address that drops packets cannot stall a candidate round
/// ([routing.md, "Connections"](crate::spec::routing#connections)); each RPC is
/// bounded by the request timeout.
#[derive(Debug, Clone)]
pub struct TikvConnect {
    security: Arc<SecurityManager>,
    timeout: Duration,
    connect_timeout: Duration,
    max_decoding_message_size: usize,
    rpc_mode: RpcMode,
    batch: BatchOptions,
    /// Unary calls go through the typed path (`typed.rs`); false: through
    /// tonic's generated client and codec, for the benchmark that compares
    /// the two (see [`set_typed_path`]).
    typed_path: bool,
    /// The stores' health feedback, shared by every client this connector
    /// opens.
    feedback: super::StoreFeedback,
}

/// Whether connectors built from now on send unary calls on the typed path
/// (the default) or through tonic's generated client and its codec. Only
/// the side-by-side benchmark turns it off (`__internals`), to measure the
/// typed path against tonic's codec in one run; no user-facing setting.
static TYPED_PATH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(true);

/// Makes connectors built after this call send unary calls on the typed
/// path (`true`, the default) or through tonic's generated client and its
/// codec (`false`). Connectors already built keep what they had.
#[cfg(feature = "unstable-internals")]
pub fn set_typed_path(on: bool) {
    TYPED_PATH.store(on, std::sync::atomic::Ordering::Relaxed);
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
            rpc_mode: RpcMode::default(),
            batch: BatchOptions::default(),
            typed_path: TYPED_PATH.load(std::sync::atomic::Ordering::Relaxed),
            feedback: super::StoreFeedback::new(),
        }
    }

    /// Sends requests as unary calls or over BatchCommands streams
    /// (`Config::rpc_mode`), with the batched transport's limits.
    pub(crate) fn with_rpc_mode(mut self, mode: RpcMode, batch: BatchOptions) -> Self {
        self.rpc_mode = mode;
        self.batch = batch;
        self
    }

    /// The transport in use.
    pub fn rpc_mode(&self) -> RpcMode {
        self.rpc_mode
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
        self.open(address, None).await
    }

    /// A connection to the store at `proxy` whose every call asks that
    /// store to forward it to the store at `target` (TiKV's
    /// `tikv-forwarded-host`): unary calls and BatchCommands streams alike,
    /// its streams its own.
    async fn connect_forwarded(&self, proxy: &str, target: &str) -> Result<KvRpcClient> {
        self.open(proxy, Some(target)).await
    }

    fn store_feedback(&self) -> Option<&super::StoreFeedback> {
        Some(&self.feedback)
    }
}

impl TikvConnect {
    /// Opens a client to `address`, forwarding to `target` when given.
    async fn open(&self, address: &str, target: Option<&str>) -> Result<KvRpcClient> {
        let forwarded_host = match target {
            None => None,
            Some(target) => Some(forwarded_host(target)?),
        };
        // Keep-alive gives a connection up no sooner than its interval plus
        // its timeout (13 s) after the last frame read, and a healthy one
        // reads a PING's answer at least every interval (10 s): halfway
        // between tells the two apart. A loss stays news for 13 s.
        let patience = KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT / 2;
        let watch = ConnectionWatch::new(patience, KEEPALIVE_INTERVAL + KEEPALIVE_TIMEOUT);
        let channel = self
            .security
            .connect_store_channel(address, self.connect_timeout, self.timeout, &watch)
            .await?;
        let mut grpc = GrpcChannel::new(channel.clone())
            .max_decoding_message_size(self.max_decoding_message_size)
            .timeout(self.timeout);
        if let Some((_, header)) = &forwarded_host {
            grpc = grpc.forwarded_to(header.clone());
        }
        let rpc_client =
            TikvClient::new(channel).max_decoding_message_size(self.max_decoding_message_size);
        let batch = match self.rpc_mode {
            RpcMode::Unary => None,
            RpcMode::Batched => {
                let batch = self.batch_client(address, &rpc_client, &watch)?;
                Some(match &forwarded_host {
                    Some((host, _)) => batch.forwarded_to(host.clone()),
                    None => batch,
                })
            }
        };
        Ok(KvRpcClient {
            grpc,
            rpc_client,
            timeout: self.timeout,
            // The endpoint was built with `.timeout(self.timeout)`.
            channel_timeout: true,
            batch,
            typed_path: self.typed_path,
            watch: Some((watch, Arc::from(address))),
            forwarded_host: forwarded_host.map(|(host, _)| host),
        })
    }
}

/// The `tikv-forwarded-host` value naming `target`: an address that is not
/// valid in gRPC metadata is an error, and nothing is sent.
fn forwarded_host(target: &str) -> Result<(AsciiMetadataValue, HeaderValue)> {
    let metadata = AsciiMetadataValue::try_from(target).ok();
    let header = HeaderValue::from_str(target).ok();
    metadata.zip(header).ok_or_else(|| {
        Error::from(Failure::Connect {
            address: target.to_owned(),
            message: "the store's address cannot be carried in gRPC metadata \
                      (tikv-forwarded-host), so no call can be forwarded to it"
                .to_owned(),
            source: None,
        })
    })
}

impl TikvConnect {
    /// The batched transport to `address`: unary fallbacks over `unary`,
    /// streams on their own connections, opened without a request timeout.
    fn batch_client(
        &self,
        address: &str,
        unary: &TikvClient<Channel>,
        watch: &ConnectionWatch,
    ) -> Result<KvBatchClient> {
        let streams = self.security.lazy_stream_channel(
            address,
            self.connect_timeout,
            self.batch.keepalive(),
            Some(watch),
        )?;
        Ok(KvBatchClient::build(
            unary.clone(),
            streams,
            address,
            self.timeout,
            self.batch,
            Some(Dialer {
                security: self.security.clone(),
                connect_timeout: self.connect_timeout,
                watch: Some(watch.clone()),
            }),
            self.max_decoding_message_size,
        )
        .with_feedback(self.feedback.clone()))
    }
}

/// A client of one TiKV store over a gRPC channel: unary calls, or a
/// [`KvBatchClient`] when the connector is in batched mode.
#[derive(Debug, Clone)]
pub struct KvRpcClient {
    rpc_client: TikvClient<Channel>,
    grpc: GrpcChannel,
    timeout: Duration,
    /// The channel bounds every call by `timeout` itself (it was built by
    /// [`TikvConnect`]); see [`TypedChannel::enforces_timeout`].
    channel_timeout: bool,
    batch: Option<KvBatchClient>,
    /// Unary calls take the typed path ([`typed_channel`]).
    typed_path: bool,
    /// The watch over this client's connections and the store's address,
    /// when [`TikvConnect`] opened it: a connection that keep-alive found
    /// dead fails the next request at once, as not sent.
    watch: Option<(ConnectionWatch, Arc<str>)>,
    /// The store every call asks this client's store to forward it to,
    /// when it goes through a proxy.
    forwarded_host: Option<AsciiMetadataValue>,
}

impl KvRpcClient {
    /// Wraps an open channel; each RPC is bounded by `timeout`.
    pub fn new(channel: Channel, timeout: Duration) -> Self {
        KvRpcClient {
            grpc: GrpcChannel::new(channel.clone()).timeout(timeout),
            rpc_client: TikvClient::new(channel)
                .max_decoding_message_size(DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE),
            timeout,
            channel_timeout: false,
            batch: None,
            typed_path: true,
            watch: None,
            forwarded_host: None,
        }
    }

    /// True when every call of this client is forwarded by its store to
    /// another one.
    pub fn is_forwarded(&self) -> bool {
        self.forwarded_host.is_some()
    }

    /// When keep-alive found one of this client's connections dead since
    /// the last request: the error that fails this request without sending
    /// it (the next one reconnects). The routing round then tries the next
    /// voter and marks the store unreachable, instead of this request
    /// waiting out a connect timeout against a store that drops packets.
    fn silently_lost(&self) -> Option<Error> {
        let (watch, address) = self.watch.as_ref()?;
        watch.take_silent_loss().then(|| {
            Error::from(Failure::Connect {
                address: address.to_string(),
                message: format!(
                    "the connection stopped answering HTTP/2 keep-alive PINGs (unanswered \
                     for {KEEPALIVE_TIMEOUT:?}) and was closed; the request was not sent"
                ),
                source: None,
            })
        })
    }

    /// The channel of the typed path (a request sent with its own response
    /// type, no `Box<dyn Any>`), when unary calls take it: no batched
    /// stream, and no connection found dead since the last request (that
    /// request goes through `dispatch_within`, which reports the loss).
    fn typed_channel(&self) -> Option<TypedChannel<'_>> {
        if self.batch.is_some() || !self.typed_path {
            return None;
        }
        if self
            .watch
            .as_ref()
            .is_some_and(|(w, _)| w.has_silent_loss())
        {
            return None;
        }
        Some(TypedChannel {
            grpc: &self.grpc,
            timeout: self.timeout,
            enforces_timeout: self.channel_timeout,
        })
    }

    /// True when the channel bounds every call by the client's timeout on
    /// its own ([`TypedChannel::enforces_timeout`]).
    #[cfg(test)]
    pub(crate) fn enforces_timeout(&self) -> bool {
        self.channel_timeout
    }

    #[cfg(test)]
    /// The batched transport, when this client uses one.
    pub(crate) fn batch_client(&self) -> Option<&KvBatchClient> {
        self.batch.as_ref()
    }
}

#[async_trait]
impl KvClient for KvRpcClient {
    async fn dispatch(&self, req: &dyn Request) -> Result<Box<dyn Any + Send>> {
        self.dispatch_within(req, None).await
    }

    /// One timer: the transport's own, set to the smaller of the client's
    /// timeout and `bound`. When `bound` is the smaller, the transport's
    /// timeout is reported as [`Failure::Timeout`](crate::Failure::Timeout)
    /// (what a timer around the RPC reported), so the classification and
    /// the error the caller sees stay the same.
    ///
    /// A backstop timer a moment after tonic's covers every unary call,
    /// a batched request's fallback to one included
    /// ([`KvBatchClient`]): tonic's timer starts only once its channel is
    /// ready, so a channel that reconnects first would add its connect
    /// wait to the bound.
    async fn dispatch_within(
        &self,
        req: &dyn Request,
        bound: Option<Duration>,
    ) -> Result<Box<dyn Any + Send>> {
        if let Some(lost) = self.silently_lost() {
            return Err(lost);
        }
        let (timeout, bounded) = call_timeout(bound, self.timeout);
        let backstop_fired = || {
            Error::from(Failure::Timeout {
                what: format!("the {} request", req.label()),
                after: timeout,
            })
        };
        if let Some(batch) = &self.batch {
            // The stream's requests wait at most the client's timeout (a
            // timer from the moment the request is queued; a unary call it
            // falls back to has a backstop of its own); a shorter bound
            // cuts the wait, and dropping the send takes the request out
            // of the stream's table.
            if !bounded {
                return batch.send(req).await;
            }
            return match tokio::time::timeout(timeout, batch.send(req)).await {
                Ok(result) => result,
                Err(_) => Err(backstop_fired()),
            };
        }
        let call = req.dispatch_forwarded(&self.rpc_client, timeout, self.forwarded_host.as_ref());
        match with_backstop(timeout, call).await {
            Ok(result) => timeout_as_error(result, bounded, req.label(), timeout),
            Err(_) => Err(backstop_fired()),
        }
    }
}

impl KvRpcClient {
    /// [`KvClient::dispatch_within`] on the batched transport for a request
    /// whose type is known: the same checks and the same one timer, the
    /// request encoded straight from its type and its answer decoded
    /// straight as its response type ([`KvBatchClient::send_typed`]), with
    /// no boxed future and no boxed response.
    async fn dispatch_batched<R: KvMethod + Request>(
        &self,
        batch: &KvBatchClient,
        req: &R,
        bound: Option<Duration>,
    ) -> Result<Box<R::Response>> {
        if let Some(lost) = self.silently_lost() {
            return Err(lost);
        }
        let (timeout, bounded) = call_timeout(bound, self.timeout);
        if !bounded {
            return batch.send_typed(req).await;
        }
        match tokio::time::timeout(timeout, batch.send_typed(req)).await {
            Ok(result) => result,
            Err(_) => Err(Error::from(Failure::Timeout {
                what: format!("the {} request", req.label()),
                after: timeout,
            })),
        }
    }
}

/// `client` when it is the crate's own gRPC client on the batched
/// transport ([`send_batched`] sends on it); `None` sends the request
/// through [`KvClient::dispatch_within`].
pub(crate) fn batched_client(client: &(dyn KvClient + Send + Sync)) -> Option<&KvRpcClient> {
    let client: &dyn Any = client;
    client
        .downcast_ref::<KvRpcClient>()
        .filter(|c| c.batch.is_some())
}

/// Sends `req` on `client`'s batched transport within `bound` (see
/// `KvRpcClient::dispatch_batched`); `None` when the client sends unary
/// calls. What [`TypedCall::dispatch_batched`](crate::request::TypedCall::dispatch_batched)
/// returns for the requests of the wire protocol's table.
pub(crate) async fn send_batched<R: KvMethod + Request>(
    client: &KvRpcClient,
    req: &R,
    bound: Option<Duration>,
) -> Option<Result<Box<R::Response>>> {
    let batch = client.batch.as_ref()?;
    Some(client.dispatch_batched(batch, req, bound).await)
}

/// The typed path of a store client (see [`typed_channel`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct TypedChannel<'a> {
    /// The gRPC channel.
    pub(crate) grpc: &'a GrpcChannel,
    /// The client's own timeout of each RPC.
    pub(crate) timeout: Duration,
    /// The channel bounds every call by `timeout` on its own (tonic's
    /// endpoint timeout), so a call carries a `grpc-timeout` header only
    /// when a shorter bound applies; otherwise every call carries it.
    pub(crate) enforces_timeout: bool,
}

/// The typed path of `client`, when it is the crate's own gRPC client and
/// its unary calls take that path; `None` sends the request through
/// [`KvClient::dispatch_within`].
pub(crate) fn typed_channel(client: &(dyn KvClient + Send + Sync)) -> Option<TypedChannel<'_>> {
    let client: &dyn Any = client;
    client.downcast_ref::<KvRpcClient>()?.typed_channel()
}

/// How much later than a transport's own timer a backstop timer fires: an
/// RPC that times out in the ordinary way fails with the transport's error
/// (tonic's `Cancelled` with `TimeoutExpired`), and the backstop fires
/// only when the transport's timer started late.
pub(crate) const BACKSTOP_SLACK: Duration = Duration::from_millis(1);

/// `call` under a backstop timer [`BACKSTOP_SLACK`] after its own
/// `timeout`: it also covers what the transport's timer does not (a
/// channel reconnecting before tonic starts its timer).
pub(crate) fn with_backstop<F: std::future::Future>(
    timeout: Duration,
    call: F,
) -> tokio::time::Timeout<F> {
    tokio::time::timeout(timeout + BACKSTOP_SLACK, call)
}

/// The one timeout of an RPC bounded by the plan's `bound` on a store
/// client whose own timeout is `own`: the smaller of the two, and whether
/// it is the plan's bound (`bounded`: then a timeout is the plan's,
/// reported as a client timeout; see [`timeout_as_error`]).
pub(crate) fn call_timeout(bound: Option<Duration>, own: Duration) -> (Duration, bool) {
    match bound {
        Some(bound) if bound < own => (bound, true),
        _ => (own, false),
    }
}

/// When the plan's bound (not the client's own timeout) was the RPC's
/// timer (`bounded`), reports tonic's timeout as [`Failure::Timeout`](crate::Failure::Timeout), what a
/// timer around the RPC reported, so the classification and the error the
/// caller sees stay the same; any other outcome passes through.
pub(crate) fn timeout_as_error<T>(
    result: Result<T>,
    bounded: bool,
    label: &str,
    after: Duration,
) -> Result<T> {
    match result {
        Err(error)
            if bounded
                && crate::classify::classify_dispatch_error(&error)
                    == crate::classify::DispatchFailure::ClientTimeout =>
        {
            Err(Error::from(Failure::Timeout {
                what: format!("the {label} request"),
                after,
            }))
        }
        result => result,
    }
}
