//! Forwarding, as TiKV's server does it (`get_target_address`,
//! `forward_unary!`, `forward_duplex!` in its `server/` code): a call whose
//! metadata carries `tikv-forwarded-host` naming another address is proxied
//! there over gRPC — a unary call or a whole `BatchCommands` stream — and
//! the target's answer (or the failure to reach it, as a gRPC status, never
//! a Region error) goes back to the caller. The header is not passed on.
//!
//! The proxy connects from a port it records in [`PeerPorts`], so a store
//! cut off from clients still accepts it.

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpSocket, TcpStream};
use tonic::body::Body;
use tonic::codegen::{http, BoxFuture, Service};
use tonic::transport::Channel;
use tonic::Status;

use crate::net::PeerPorts;

/// The metadata key naming the store a call is meant for.
pub const FORWARDED_HOST: &str = "tikv-forwarded-host";

/// The method label a hung proxy's counter shows for the calls it holds.
pub(crate) const FORWARD_LABEL: &str = "forward";

/// How long a forwarding store waits to connect to the target.
const FORWARD_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// A connection a [`ForwardDial`] opens.
pub trait ForwardStream: AsyncRead + AsyncWrite + Send + Unpin {}

impl<T: AsyncRead + AsyncWrite + Send + Unpin> ForwardStream for T {}

/// How a hosted store opens a connection to another store's address to
/// forward a call ([`SimClusterBuilder::forward_dial`](crate::SimClusterBuilder::forward_dial)):
/// the simulated network's dial, run on the forwarding store's host.
pub type ForwardDial =
    Arc<dyn Fn(String) -> BoxFuture<Box<dyn ForwardStream>, io::Error> + Send + Sync>;

/// A [`ForwardDial`] kept by the builder (which is `Debug`).
#[derive(Clone)]
pub(crate) struct DialHolder(pub(crate) ForwardDial);

impl std::fmt::Debug for DialHolder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ForwardDial")
    }
}

/// A store's proxy: one channel per target address, reused.
#[derive(Clone)]
pub(crate) struct Forwarder {
    channels: Arc<Mutex<HashMap<String, Channel>>>,
    peers: PeerPorts,
    dial: Option<ForwardDial>,
}

impl Forwarder {
    pub(crate) fn new(peers: PeerPorts, dial: Option<ForwardDial>) -> Self {
        Forwarder {
            channels: Arc::default(),
            peers,
            dial,
        }
    }

    /// The address `req` asks to be forwarded to, if it names one.
    pub(crate) fn target(req: &http::Request<Body>) -> Option<String> {
        req.headers()
            .get(FORWARDED_HOST)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
            .filter(|t| !t.is_empty())
    }

    /// Proxies `req` to `target`. `Err` carries the status for a target
    /// that could not be reached.
    pub(crate) async fn forward(
        &self,
        target: &str,
        mut req: http::Request<Body>,
    ) -> Result<http::Response<Body>, Status> {
        req.headers_mut().remove(FORWARDED_HOST);
        let mut channel = self.channel(target)?;
        futures::future::poll_fn(|cx| channel.poll_ready(cx))
            .await
            .map_err(|e| unreachable_target(target, &e))?;
        channel
            .call(req)
            .await
            .map_err(|e| unreachable_target(target, &e))
    }

    fn channel(&self, target: &str) -> Result<Channel, Status> {
        let mut channels = match self.channels.lock() {
            Ok(c) => c,
            Err(poisoned) => poisoned.into_inner(),
        };
        if let Some(channel) = channels.get(target) {
            return Ok(channel.clone());
        }
        let endpoint = Channel::from_shared(format!("http://{target}")).map_err(|e| {
            Status::invalid_argument(format!(
                "{FORWARDED_HOST} {target:?} is not an address: {e}"
            ))
        })?;
        let channel = endpoint
            .connect_timeout(FORWARD_CONNECT_TIMEOUT)
            .connect_with_connector_lazy(PeerConnector {
                peers: self.peers.clone(),
                dial: self.dial.clone(),
            });
        channels.insert(target.to_owned(), channel.clone());
        Ok(channel)
    }
}

fn unreachable_target(target: &str, error: &dyn std::fmt::Display) -> Status {
    Status::unavailable(format!("forwarding to {target} failed: {error}"))
}

/// Connects a forwarding store to its target from a port recorded as a
/// peer's.
#[derive(Clone)]
struct PeerConnector {
    peers: PeerPorts,
    dial: Option<ForwardDial>,
}

impl Service<http::Uri> for PeerConnector {
    type Response = TokioIo<Box<dyn ForwardStream>>;
    type Error = io::Error;
    type Future = BoxFuture<Self::Response, Self::Error>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: http::Uri) -> Self::Future {
        let peers = self.peers.clone();
        let dial = self.dial.clone();
        Box::pin(async move {
            let authority = uri.authority().map(|a| a.as_str().to_owned());
            let authority = authority.ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, format!("no address in {uri}"))
            })?;
            if let Some(dial) = dial {
                return Ok(TokioIo::new(dial(authority).await?));
            }
            let target: SocketAddr = tokio::net::lookup_host(&authority)
                .await?
                .next()
                .ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("{authority} resolves to nothing"),
                    )
                })?;
            let socket = if target.is_ipv4() {
                TcpSocket::new_v4()?
            } else {
                TcpSocket::new_v6()?
            };
            socket.bind(SocketAddr::new(target.ip(), 0))?;
            let port = socket.local_addr()?.port();
            // Marked before connecting, so the target never takes it for a
            // client's; unmarked when the connection (or the attempt) ends.
            let mark = PortMark::new(peers, port);
            let inner = socket.connect(target).await?;
            let _ = inner.set_nodelay(true);
            let stream: Box<dyn ForwardStream> = Box::new(PeerStream { inner, _mark: mark });
            Ok(TokioIo::new(stream))
        })
    }
}

/// A local port recorded as a peer's while this lives.
struct PortMark {
    peers: PeerPorts,
    port: u16,
}

impl PortMark {
    fn new(peers: PeerPorts, port: u16) -> Self {
        peers.mark(port, true);
        PortMark { peers, port }
    }
}

impl Drop for PortMark {
    fn drop(&mut self) {
        self.peers.mark(self.port, false);
    }
}

/// A forwarding store's connection, its port marked as a peer's.
struct PeerStream {
    inner: TcpStream,
    _mark: PortMark,
}

impl AsyncRead for PeerStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for PeerStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

impl super::StoreService {
    /// The address the store listens on now.
    pub(crate) fn address(&self) -> Option<String> {
        let state = self.shared.lock();
        state.stores.get(&self.store_id).map(|s| s.address.clone())
    }

    /// Counts a forwarded call.
    pub(crate) fn record_forward(&self, failed: bool) {
        if let Some(store) = self.shared.lock().stores.get_mut(&self.store_id) {
            store.counters.record_forward(failed);
        }
    }
}
