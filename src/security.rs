//! TLS for connections to PD and TiKV: plaintext, TLS (the client checks the
//! server against a CA) and mutual TLS (the client also presents its own
//! certificate), through tonic's rustls support.

use std::path::{Path, PathBuf};
use std::time::Duration;

use std::future::Future;
use std::pin::Pin;

use hyper_util::client::legacy::connect::HttpConnector;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint, Identity};

use crate::config::{
    SecurityConfig, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT, KEEPALIVE_INTERVAL,
    KEEPALIVE_TIMEOUT,
};
use crate::Failure;
use crate::{Error, ErrorSource, Result};

mod watch;

pub(crate) use watch::ConnectionWatch;

/// A channel being dialled.
type Connecting =
    Pin<Box<dyn Future<Output = std::result::Result<Channel, tonic::transport::Error>> + Send>>;

/// Opens gRPC channels with the configured security and bounds.
#[derive(Clone, Default)]
pub struct SecurityManager {
    tls: Option<ClientTlsConfig>,
    /// What carries the channels' bytes instead of TCP (a simulated
    /// network), taken from [`transport::with_transport`] when the manager
    /// is built.
    #[cfg(feature = "unstable-internals")]
    transport: Option<transport::Transport>,
}

impl std::fmt::Debug for SecurityManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecurityManager")
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// A transport other than TCP for the channels of the clients built inside
/// [`with_transport`]: this repository's deterministic simulation runs
/// the client and the simulated cluster over a simulated network. Feature
/// `unstable-internals`: not for users, no semver promise.
#[cfg(feature = "unstable-internals")]
pub mod transport {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use hyper_util::rt::TokioIo;
    use tokio::io::{AsyncRead, AsyncWrite};
    use tonic::codegen::http::Uri;

    /// A byte stream a channel runs on.
    pub trait Io: AsyncRead + AsyncWrite + Send + Unpin + 'static {}
    impl<T: AsyncRead + AsyncWrite + Send + Unpin + 'static> Io for T {}

    /// The future of one dial.
    pub type Dial = Pin<Box<dyn Future<Output = std::io::Result<Box<dyn Io>>> + Send>>;

    /// Opens a byte stream to a host and port.
    #[derive(Clone)]
    pub struct Transport(Arc<dyn Fn(String, u16) -> Dial + Send + Sync>);

    impl Transport {
        /// A transport that dials with `dial(host, port)`.
        pub fn new(dial: impl Fn(String, u16) -> Dial + Send + Sync + 'static) -> Self {
            Transport(Arc::new(dial))
        }
    }

    impl std::fmt::Debug for Transport {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Transport")
        }
    }

    tokio::task_local! {
        static TRANSPORT: Transport;
    }

    /// Runs `f` with `transport` in place of TCP for every client `f`
    /// builds: their PD and store channels, now and later, dial through it.
    pub async fn with_transport<F: Future>(transport: Transport, f: F) -> F::Output {
        TRANSPORT.scope(transport, f).await
    }

    /// The transport of the scope this runs in, if any.
    pub(crate) fn current() -> Option<Transport> {
        TRANSPORT.try_with(Transport::clone).ok()
    }

    /// tonic's connector: a channel (re)connects by calling it with the
    /// endpoint's URI.
    impl tonic::codegen::Service<Uri> for Transport {
        type Response = TokioIo<Box<dyn Io>>;
        type Error = std::io::Error;
        type Future = Pin<Box<dyn Future<Output = std::io::Result<TokioIo<Box<dyn Io>>>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, uri: Uri) -> Self::Future {
            let host = uri.host().unwrap_or_default().to_owned();
            let port = uri.port_u16().unwrap_or(80);
            let dial = (self.0)(host, port);
            Box::pin(async move { dial.await.map(TokioIo::new) })
        }
    }
}

fn read_pem(path: &Path, what: &str) -> Result<Vec<u8>> {
    let bytes = std::fs::read(path).map_err(|e| {
        Error::from(Failure::Security {
            path: path.display().to_string(),
            message: format!("cannot read the {what} file: {e}"),
            source: Some(ErrorSource::new(e)),
        })
    })?;
    let text = String::from_utf8_lossy(&bytes);
    if !text.contains("-----BEGIN ") {
        return Err(Error::from(Failure::Security {
            path: path.display().to_string(),
            message: format!(
                "the {what} file is not PEM (no '-----BEGIN' line); convert it to PEM"
            ),
            source: None,
        }));
    }
    Ok(bytes)
}

impl SecurityManager {
    /// Plaintext connections.
    pub fn plaintext() -> Self {
        SecurityManager {
            tls: None,
            #[cfg(feature = "unstable-internals")]
            transport: transport::current(),
        }
    }

    /// Mutual TLS from three PEM files: the CA that signs the servers'
    /// certificates, the client's certificate and its private key
    /// (client-rust's signature). A missing or malformed file is an
    /// [`Failure::Security`](crate::Failure::Security) naming it. For TLS without a client certificate,
    /// or for plaintext, use [`SecurityManager::from_config`].
    pub fn load(
        ca_path: impl AsRef<Path>,
        cert_path: impl AsRef<Path>,
        key_path: impl Into<PathBuf>,
    ) -> Result<Self> {
        Self::from_config(&SecurityConfig {
            ca_path: Some(ca_path.as_ref().to_path_buf()),
            cert_path: Some(cert_path.as_ref().to_path_buf()),
            key_path: Some(key_path.into()),
        })
    }

    /// Builds a manager from a [`SecurityConfig`]: plaintext when no path is
    /// set, TLS with only a CA, mutual TLS with a CA, certificate and key.
    /// A missing or malformed file is an [`Failure::Security`](crate::Failure::Security) naming it.
    pub fn from_config(config: &SecurityConfig) -> Result<Self> {
        let SecurityConfig {
            ca_path,
            cert_path,
            key_path,
        } = config;
        let Some(ca_path) = ca_path else {
            if cert_path.is_some() || key_path.is_some() {
                return Err(Error::from(Failure::Security {
                    path: "SecurityConfig".to_owned(),
                    message: "a client certificate or key was given without a CA; set ca_path too"
                        .to_owned(),
                    source: None,
                }));
            }
            return Ok(Self::plaintext());
        };
        let ca = read_pem(ca_path, "CA certificate")?;
        let mut tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca));
        match (cert_path, key_path) {
            (Some(cert), Some(key)) => {
                let cert = read_pem(cert, "client certificate")?;
                let key = read_pem(key, "client key")?;
                tls = tls.identity(Identity::from_pem(cert, key));
            }
            (None, None) => {}
            _ => {
                return Err(Error::from(Failure::Security {
                    path: "SecurityConfig".to_owned(),
                    message: "mutual TLS needs both cert_path and key_path; set both or neither"
                        .to_owned(),
                    source: None,
                }))
            }
        }
        Ok(SecurityManager {
            tls: Some(tls),
            #[cfg(feature = "unstable-internals")]
            transport: transport::current(),
        })
    }

    /// True when connections use TLS.
    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Opens a channel to `addr` (`host:port`, or a URL with a scheme) and
    /// hands it to `factory`, which wraps it in a gRPC client stub
    /// (client-rust's signature), e.g. `TikvClient::new`. The setup is
    /// bounded by [`DEFAULT_CONNECT_TIMEOUT`], each RPC on the channel by
    /// [`DEFAULT_REQUEST_TIMEOUT`]; [`SecurityManager::connect_channel`]
    /// takes both bounds.
    pub async fn connect<Factory, Client>(&self, addr: &str, factory: Factory) -> Result<Client>
    where
        Factory: FnOnce(Channel) -> Client,
    {
        let channel = self
            .connect_channel(addr, DEFAULT_CONNECT_TIMEOUT, DEFAULT_REQUEST_TIMEOUT)
            .await?;
        Ok(factory(channel))
    }

    /// Opens a channel to `address` (`host:port`, or a URL with a scheme).
    /// The whole setup (TCP, TLS and HTTP/2 handshakes) is bounded by
    /// `connect_timeout`; each RPC on the channel by `rpc_timeout`.
    ///
    /// The channel sends HTTP/2 keep-alive PINGs while a call is open (10 s
    /// of silence, 3 s to answer), so a call on a connection whose peer
    /// vanished fails when the PING goes unanswered.
    pub async fn connect_channel(
        &self,
        address: &str,
        connect_timeout: Duration,
        rpc_timeout: Duration,
    ) -> Result<Channel> {
        let endpoint = self.endpoint(address, connect_timeout, Some(rpc_timeout))?;
        self.dial(address, connect_timeout, endpoint, None).await
    }

    /// A store's unary channel: [`SecurityManager::connect_channel`] with
    /// keep-alive PINGs on an idle connection too, and its connections
    /// watched by `watch`, so a connection that keep-alive found dead is
    /// known before the next request waits on it.
    pub(crate) async fn connect_store_channel(
        &self,
        address: &str,
        connect_timeout: Duration,
        rpc_timeout: Duration,
        watch: &ConnectionWatch,
    ) -> Result<Channel> {
        let endpoint = self
            .endpoint(address, connect_timeout, Some(rpc_timeout))?
            .keep_alive_while_idle(true);
        self.dial(address, connect_timeout, endpoint, Some(watch))
            .await
    }

    /// A channel for long-lived streams (BatchCommands), dialled now: like
    /// [`SecurityManager::connect_channel`] but with no RPC timeout,
    /// and with HTTP/2 keep-alive (`keepalive`: the PING interval and how
    /// long one may go unanswered), so a connection whose peer is gone
    /// fails its streams instead of leaving them silent. tonic's request
    /// timeout bounds a call until its response headers arrive, and a gRPC
    /// server may send a stream's headers only with its first answer, so
    /// it would end an idle or slow stream; each request on the stream has
    /// its own timeout instead.
    pub(crate) async fn connect_stream_channel(
        &self,
        address: &str,
        connect_timeout: Duration,
        keepalive: (Duration, Duration),
        watch: Option<&ConnectionWatch>,
    ) -> Result<Channel> {
        let endpoint = self.stream_endpoint(address, connect_timeout, keepalive)?;
        self.dial(address, connect_timeout, endpoint, watch).await
    }

    /// [`SecurityManager::connect_stream_channel`], dialled on first use
    /// (within `connect_timeout`); a failed dial fails the stream's call.
    pub(crate) fn lazy_stream_channel(
        &self,
        address: &str,
        connect_timeout: Duration,
        keepalive: (Duration, Duration),
        watch: Option<&ConnectionWatch>,
    ) -> Result<Channel> {
        let endpoint = self.stream_endpoint(address, connect_timeout, keepalive)?;
        #[cfg(feature = "unstable-internals")]
        if let Some(transport) = &self.transport {
            return Ok(match watch {
                Some(w) => endpoint.connect_with_connector_lazy(w.connector(transport.clone())),
                None => endpoint.connect_with_connector_lazy(transport.clone()),
            });
        }
        Ok(match watch {
            Some(w) => endpoint.connect_with_connector_lazy(w.connector(tcp(connect_timeout))),
            None => endpoint.connect_lazy(),
        })
    }

    fn stream_endpoint(
        &self,
        address: &str,
        connect_timeout: Duration,
        (interval, timeout): (Duration, Duration),
    ) -> Result<Endpoint> {
        Ok(self
            .endpoint(address, connect_timeout, None)?
            .http2_keep_alive_interval(interval)
            .keep_alive_timeout(timeout)
            .keep_alive_while_idle(true))
    }

    /// Dials `endpoint` over TCP (or the simulated network), its
    /// connections watched by `watch` when given.
    fn connecting(
        &self,
        endpoint: Endpoint,
        connect_timeout: Duration,
        watch: Option<&ConnectionWatch>,
    ) -> Connecting {
        let watch = watch.cloned();
        #[cfg(feature = "unstable-internals")]
        if let Some(transport) = self.transport.clone() {
            return match watch {
                Some(w) => Box::pin(async move {
                    endpoint
                        .connect_with_connector(w.connector(transport))
                        .await
                }),
                None => Box::pin(async move { endpoint.connect_with_connector(transport).await }),
            };
        }
        match watch {
            Some(w) => Box::pin(async move {
                endpoint
                    .connect_with_connector(w.connector(tcp(connect_timeout)))
                    .await
            }),
            None => Box::pin(async move { endpoint.connect().await }),
        }
    }

    async fn dial(
        &self,
        address: &str,
        connect_timeout: Duration,
        endpoint: Endpoint,
        watch: Option<&ConnectionWatch>,
    ) -> Result<Channel> {
        let connect = self.connecting(endpoint, connect_timeout, watch);
        match tokio::time::timeout(connect_timeout, connect).await {
            Ok(Ok(channel)) => Ok(channel),
            Ok(Err(e)) => Err(connect_failed(address, connect_timeout, e)),
            Err(elapsed) => Err(Error::from(Failure::ConnectTimeout {
                address: address.to_owned(),
                timeout: connect_timeout,
                source: Some(ErrorSource::new(elapsed)),
            })),
        }
    }

    fn endpoint(
        &self,
        address: &str,
        connect_timeout: Duration,
        rpc_timeout: Option<Duration>,
    ) -> Result<Endpoint> {
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let url = if address.contains("://") {
            address.to_owned()
        } else {
            format!("{scheme}://{address}")
        };
        let invalid = |why: String| {
            Error::from(Failure::InvalidArgument(format!(
                "the address {address:?} is not usable: {why}; write it as host:port"
            )))
        };
        let mut endpoint = Endpoint::from_shared(url).map_err(|e| invalid(e.to_string()))?;
        if endpoint.uri().port_u16().is_none() {
            return Err(invalid("it has no port".to_owned()));
        }
        endpoint = endpoint
            .connect_timeout(connect_timeout)
            .tcp_nodelay(true)
            .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
            .keep_alive_timeout(KEEPALIVE_TIMEOUT);
        if let Some(timeout) = rpc_timeout {
            endpoint = endpoint.timeout(timeout);
        }
        #[cfg(feature = "unstable-internals")]
        if self.transport.is_some() {
            // h2 remembers a stream it reset for a while of wall-clock
            // time (a second by default), and answers a late frame for it
            // differently once it has forgotten the stream. In a simulation
            // whose clock is virtual, that would make a run depend on how
            // fast the machine is: remember them longer than any run lasts.
            endpoint = endpoint.http2_reset_stream_duration(Duration::from_secs(24 * 3600));
        }
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(|e| {
                Error::from(Failure::Security {
                    path: address.to_owned(),
                    message: error_chain(&e),
                    source: Some(ErrorSource::new(e)),
                })
            })?;
        }
        Ok(endpoint)
    }
}

/// The TCP connector tonic builds for an endpoint (`Endpoint::connect`),
/// made here so its connections can be watched: no HTTP-only check (the
/// scheme may be https), no Nagle delay, the dial bounded by
/// `connect_timeout`.
fn tcp(connect_timeout: Duration) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    http
}

/// The error of a connect that failed before the client's own timeout: a
/// [`Failure::ConnectTimeout`](crate::Failure::ConnectTimeout) when the transport timed out (the endpoint's own
/// connect timeout, kept for tonic's lazy reconnects, has the same deadline
/// and may fire first), else a [`Failure::Connect`](crate::Failure::Connect). Either keeps tonic's
/// error, whose chain ends in the `std::io::Error` of the dial, as its
/// source; the message names the root cause.
pub(crate) fn connect_failed(
    address: &str,
    connect_timeout: Duration,
    error: tonic::transport::Error,
) -> Error {
    if is_timeout(&error) {
        return Error::from(Failure::ConnectTimeout {
            address: address.to_owned(),
            timeout: connect_timeout,
            source: Some(ErrorSource::new(error)),
        });
    }
    Error::from(Failure::Connect {
        address: address.to_owned(),
        message: root_cause(&error),
        source: Some(ErrorSource::new(error)),
    })
}

/// The innermost error of a chain, in words (for a refused dial,
/// "Connection refused (os error 111)").
fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut root = e;
    while let Some(next) = root.source() {
        root = next;
    }
    root.to_string()
}

/// True when `e` or one of its sources is a timeout.
fn is_timeout(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut current = Some(e);
    while let Some(e) = current {
        if e.is::<tokio::time::error::Elapsed>()
            || e.downcast_ref::<std::io::Error>()
                .is_some_and(|io| io.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        current = e.source();
    }
    false
}

/// An error and its sources, joined with ": ".
pub(crate) fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !out.contains(&text) {
            out.push_str(": ");
            out.push_str(&text);
        }
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn file(contents: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(contents.as_bytes()).unwrap();
        f
    }

    #[test]
    fn empty_config_is_plaintext() {
        let m = SecurityManager::from_config(&SecurityConfig::default()).unwrap();
        assert!(!m.is_tls());
    }

    #[test]
    fn missing_ca_file_names_the_file() {
        let cfg = SecurityConfig {
            ca_path: Some("/nonexistent/ca.pem".into()),
            ..Default::default()
        };
        let err = SecurityManager::from_config(&cfg).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err.failure(), Some(Failure::Security { .. })));
        assert!(text.contains("/nonexistent/ca.pem"), "{text}");
        assert!(text.contains("cannot read"), "{text}");
    }

    #[test]
    fn malformed_pem_is_rejected_with_a_hint() {
        let ca = file("this is not a certificate");
        let cfg = SecurityConfig {
            ca_path: Some(ca.path().into()),
            ..Default::default()
        };
        let text = SecurityManager::from_config(&cfg).unwrap_err().to_string();
        assert!(text.contains("not PEM"), "{text}");
    }

    #[test]
    fn cert_without_key_is_rejected() {
        let ca = file("-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n");
        let cfg = SecurityConfig {
            ca_path: Some(ca.path().into()),
            cert_path: Some(ca.path().into()),
            key_path: None,
        };
        let text = SecurityManager::from_config(&cfg).unwrap_err().to_string();
        assert!(text.contains("both cert_path and key_path"), "{text}");
    }

    #[test]
    fn key_without_ca_is_rejected() {
        let cfg = SecurityConfig {
            key_path: Some("/tmp/key.pem".into()),
            ..Default::default()
        };
        assert!(matches!(
            SecurityManager::from_config(&cfg)
                .as_ref()
                .err()
                .and_then(|e| e.failure()),
            Some(Failure::Security { .. })
        ));
    }

    #[test]
    fn address_without_port_is_an_invalid_argument() {
        let m = SecurityManager::plaintext();
        let err = m
            .endpoint(
                "127.0.0.1",
                Duration::from_secs(1),
                Some(Duration::from_secs(1)),
            )
            .unwrap_err();
        assert!(
            matches!(err.failure(), Some(Failure::InvalidArgument(_))),
            "{err}"
        );
        let err = m
            .endpoint(
                "not a url at all",
                Duration::from_secs(1),
                Some(Duration::from_secs(1)),
            )
            .unwrap_err();
        assert!(
            matches!(err.failure(), Some(Failure::InvalidArgument(_))),
            "{err}"
        );
    }
}
