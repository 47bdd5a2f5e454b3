//! The network layer of one simulated server (a store or a PD member): its
//! own accept loop in front of a tonic server, so faults can close the
//! listener, freeze connections, or reset them, while the tonic server
//! itself lives as long as the cluster.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::service::Routes;
use tonic::transport::server::Connected;

use crate::{Error, Result};

/// What the connections of one server currently do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NetState {
    /// Bytes flow.
    Open,
    /// Reads and writes wait (packets are dropped): a `HangMode::Connect`.
    Frozen,
    /// Every read and write fails, so the server drops the connection.
    Killed,
}

type ChangeFuture = Pin<Box<dyn Future<Output = bool> + Send>>;

/// A TCP connection whose I/O obeys its server's [`NetState`].
pub(crate) struct SimConn {
    inner: TcpStream,
    net: watch::Receiver<NetState>,
    change: Option<ChangeFuture>,
    sender_gone: bool,
}

impl SimConn {
    fn new(inner: TcpStream, net: watch::Receiver<NetState>) -> Self {
        SimConn {
            inner,
            net,
            change: None,
            sender_gone: false,
        }
    }

    /// Ready(Ok) when I/O may proceed, Ready(Err) when the connection is
    /// killed, Pending while frozen. Always leaves a change notification
    /// armed, so an idle connection wakes up when it is killed or frozen.
    fn gate(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            let state = if self.sender_gone {
                NetState::Killed
            } else {
                *self.net.borrow_and_update()
            };
            if !self.sender_gone {
                let change = self.change.get_or_insert_with(|| {
                    let mut rx = self.net.clone();
                    Box::pin(async move { rx.changed().await.is_ok() })
                });
                if let Poll::Ready(changed) = change.as_mut().poll(cx) {
                    self.change = None;
                    if !changed {
                        self.sender_gone = true;
                    }
                    continue;
                }
            }
            return match state {
                NetState::Open => Poll::Ready(Ok(())),
                NetState::Frozen => Poll::Pending,
                NetState::Killed => Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::ConnectionReset,
                    "simulated connection reset",
                ))),
            };
        }
    }
}

impl Connected for SimConn {
    type ConnectInfo = ();

    fn connect_info(&self) -> Self::ConnectInfo {}
}

impl AsyncRead for SimConn {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        std::task::ready!(self.gate(cx))?;
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for SimConn {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        std::task::ready!(self.gate(cx))?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.gate(cx))?;
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// One simulated server: a fixed address, a tonic server fed by an accept
/// loop that can be stopped (down) and restarted on the same port (up).
pub(crate) struct Endpoint {
    addr: SocketAddr,
    conn_tx: mpsc::Sender<io::Result<SimConn>>,
    net: watch::Sender<NetState>,
    /// The generation the accept loop hands to new connections.
    current: Arc<Mutex<watch::Receiver<NetState>>>,
    /// The state new connections start in (Frozen during a connect hang).
    new_conn_state: NetState,
    accept_task: Option<JoinHandle<()>>,
    server_task: Option<JoinHandle<()>>,
    shutdown_tx: Option<oneshot::Sender<()>>,
}

impl Endpoint {
    /// Binds `addr` (port 0 picks a free port) and serves `routes` on it.
    pub(crate) async fn start(addr: SocketAddr, routes: Routes) -> Result<Endpoint> {
        let listener = bind(addr).await?;
        let addr = listener.local_addr().map_err(|e| Error::Connect {
            address: addr.to_string(),
            message: format!("cannot read the bound address: {e}"),
        })?;
        let (conn_tx, conn_rx) = mpsc::channel(64);
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let server_task = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .add_routes(routes)
                .serve_with_incoming_shutdown(ReceiverStream::new(conn_rx), async move {
                    let _ = shutdown_rx.await;
                })
                .await;
            if let Err(e) = served {
                log::warn!("simulated server on {addr} stopped: {e}");
            }
        });
        let (net, net_rx) = watch::channel(NetState::Open);
        let mut endpoint = Endpoint {
            addr,
            conn_tx,
            net,
            current: Arc::new(Mutex::new(net_rx)),
            new_conn_state: NetState::Open,
            accept_task: None,
            server_task: Some(server_task),
            shutdown_tx: Some(shutdown_tx),
        };
        endpoint.spawn_accept(listener);
        Ok(endpoint)
    }

    /// The bound address.
    pub(crate) fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// True while the listener is open.
    pub(crate) fn is_up(&self) -> bool {
        self.accept_task.is_some()
    }

    fn spawn_accept(&mut self, listener: TcpListener) {
        let conn_tx = self.conn_tx.clone();
        let current = self.current.clone();
        self.accept_task = Some(tokio::spawn(async move {
            loop {
                let stream = match listener.accept().await {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        log::debug!("simulated accept failed: {e}");
                        continue;
                    }
                };
                let _ = stream.set_nodelay(true);
                let net_rx = match current.lock() {
                    Ok(rx) => rx.clone(),
                    Err(poisoned) => poisoned.into_inner().clone(),
                };
                let conn = SimConn::new(stream, net_rx);
                if conn_tx.send(Ok(conn)).await.is_err() {
                    return;
                }
            }
        }));
    }

    /// Replaces the connection generation: the current connections get
    /// `old` (Killed to reset them), new ones start in `new_conn_state`.
    fn new_generation(&mut self, old: NetState) {
        self.net.send_replace(old);
        let (net, net_rx) = watch::channel(self.new_conn_state);
        self.net = net;
        match self.current.lock() {
            Ok(mut rx) => *rx = net_rx,
            Err(poisoned) => *poisoned.into_inner() = net_rx,
        }
    }

    /// Resets every open connection (the client sees a transport failure);
    /// the listener stays open, so new connections work.
    pub(crate) fn reset_connections(&mut self) {
        self.new_generation(NetState::Killed);
    }

    /// Closes the listener and kills every connection. Returns the accept
    /// task to await, so the port is closed when the caller returns.
    pub(crate) fn down(&mut self) -> Option<JoinHandle<()>> {
        self.new_generation(NetState::Killed);
        let task = self.accept_task.take();
        if let Some(t) = &task {
            t.abort();
        }
        task
    }

    /// Opens the accept loop again with a listener bound (by [`bind`]) on
    /// this endpoint's address. Does nothing when it is already up.
    pub(crate) fn up(&mut self, listener: TcpListener) {
        if self.accept_task.is_none() {
            self.spawn_accept(listener);
        }
    }

    /// Freezes (`true`) or thaws (`false`) every connection, current and
    /// future.
    pub(crate) fn set_frozen(&mut self, frozen: bool) {
        self.new_conn_state = if frozen {
            NetState::Frozen
        } else {
            NetState::Open
        };
        self.net.send_replace(self.new_conn_state);
    }

    /// Stops everything; the tasks are aborted.
    pub(crate) fn stop(&mut self) -> Vec<JoinHandle<()>> {
        self.net.send_replace(NetState::Killed);
        if let Some(tx) = self.shutdown_tx.take() {
            let _ = tx.send(());
        }
        let mut tasks = Vec::new();
        for task in [self.accept_task.take(), self.server_task.take()]
            .into_iter()
            .flatten()
        {
            task.abort();
            tasks.push(task);
        }
        tasks
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.stop();
    }
}

pub(crate) async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    TcpListener::bind(addr).await.map_err(|e| Error::Connect {
        address: addr.to_string(),
        message: format!("the simulated cluster cannot listen there: {e}"),
    })
}
