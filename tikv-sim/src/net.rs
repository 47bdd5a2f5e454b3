//! The network layer of one simulated server (a store or a PD member): its
//! own accept loop in front of a tonic server, so faults can close the
//! listener, freeze connections, or reset them, while the tonic server
//! itself lives as long as the cluster.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
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

/// One watched [`NetState`]: the state a connection's generation is in,
/// and a wake-up armed for its next change.
struct Gate {
    net: watch::Receiver<NetState>,
    change: Option<ChangeFuture>,
    sender_gone: bool,
}

impl Gate {
    fn new(net: watch::Receiver<NetState>) -> Self {
        Gate {
            net,
            change: None,
            sender_gone: false,
        }
    }

    /// The state now (Killed once the generation is gone). Always leaves a
    /// change notification armed, so an idle connection wakes up when it
    /// is killed or frozen.
    fn state(&mut self, cx: &mut Context<'_>) -> NetState {
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
            return state;
        }
    }
}

/// A TCP connection whose I/O obeys its server's [`NetState`], and for a
/// client's connection also the server's cut from clients.
pub(crate) struct SimConn {
    inner: TcpStream,
    net: Gate,
    /// `None` for a connection another simulated server opened (a
    /// forwarding store), which a cut from clients leaves alone.
    cut: Option<Gate>,
}

impl SimConn {
    fn new(
        inner: TcpStream,
        net: watch::Receiver<NetState>,
        cut: Option<watch::Receiver<NetState>>,
    ) -> Self {
        SimConn {
            inner,
            net: Gate::new(net),
            cut: cut.map(Gate::new),
        }
    }

    /// Ready(Ok) when I/O may proceed, Ready(Err) when the connection is
    /// killed, Pending while frozen: the worse of its two gates.
    fn gate(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let net = self.net.state(cx);
        let cut = self.cut.as_mut().map_or(NetState::Open, |g| g.state(cx));
        match (net, cut) {
            (NetState::Killed, _) | (_, NetState::Killed) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::ConnectionReset,
                "simulated connection reset",
            ))),
            (NetState::Frozen, _) | (_, NetState::Frozen) => Poll::Pending,
            (NetState::Open, NetState::Open) => Poll::Ready(Ok(())),
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

/// The listen backlog of every simulated server. Small on purpose: during
/// a connect hang the accept loop pauses and the backlog is filled, after
/// which the kernel drops new SYNs, so a client's TCP connect really hangs.
const LISTEN_BACKLOG: u32 = 8;

/// How long one backlog filler may take to connect; a timeout means the
/// backlog is full.
const FILLER_CONNECT_TIMEOUT: Duration = Duration::from_millis(20);

/// Most fillers one hang opens (a bound in case the accept loop keeps
/// taking them on another worker thread for a while).
const MAX_FILLERS: usize = 512;

/// One simulated server: a fixed address, a tonic server fed by an accept
/// loop that can be paused (connect hang), stopped (down) and restarted on
/// the same port (up).
pub(crate) struct Endpoint {
    addr: SocketAddr,
    conn_tx: mpsc::Sender<io::Result<SimConn>>,
    net: watch::Sender<NetState>,
    /// The generation the accept loop hands to new connections.
    current: Arc<Mutex<watch::Receiver<NetState>>>,
    /// The state new connections start in (Frozen during a connect hang).
    new_conn_state: NetState,
    /// The generation of clients' connections as a cut from clients sees
    /// them ([`Endpoint::set_client_cut`]); other servers' connections
    /// ignore it.
    cut_net: watch::Sender<NetState>,
    cut_current: Arc<Mutex<watch::Receiver<NetState>>>,
    /// How clients are cut off, if they are.
    client_cut: Option<ClientCut>,
    /// Local ports of the connections simulated servers opened to each
    /// other: a connection from one of them is not a client's.
    peers: PeerPorts,
    /// False while the accept loop must not accept (connect hang).
    accepting: watch::Sender<bool>,
    /// Our own connections that keep the backlog full during a connect
    /// hang.
    fillers: Vec<std::net::TcpStream>,
    /// The listener while up (shared with the accept loop).
    listener: Option<Arc<TcpListener>>,
    accept_task: Option<JoinHandle<()>>,
    server_task: Option<JoinHandle<()>>,
    shutdown_tx: Option<oneshot::Sender<()>>,
}

impl Endpoint {
    /// Binds `addr` (port 0 picks a free port) and serves `routes` on it:
    /// over HTTP/2 only, or also over HTTP/1.1 when `accept_http1` (PD
    /// serves its HTTP API on its gRPC port; TiKV's gRPC port speaks
    /// HTTP/2 alone).
    pub(crate) async fn start(
        addr: SocketAddr,
        routes: Routes,
        peers: PeerPorts,
        accept_http1: bool,
    ) -> Result<Endpoint> {
        let listener = bind(addr).await?;
        let addr = listener.local_addr().map_err(|e| Error::Connect {
            address: addr.to_string(),
            message: format!("cannot read the bound address: {e}"),
            source: Some(Box::new(e)),
        })?;
        let (conn_tx, conn_rx) = mpsc::channel(64);
        let (shutdown_tx, shutdown_rx) = oneshot::channel::<()>();
        let server_task = tokio::spawn(async move {
            let served = tonic::transport::Server::builder()
                .accept_http1(accept_http1)
                .add_routes(routes)
                .serve_with_incoming_shutdown(ReceiverStream::new(conn_rx), async move {
                    let _ = shutdown_rx.await;
                })
                .await;
            if let Err(e) = served {
                tracing::warn!("simulated server on {addr} stopped: {e}");
            }
        });
        let (net, net_rx) = watch::channel(NetState::Open);
        let (cut_net, cut_rx) = watch::channel(NetState::Open);
        let (accepting, _) = watch::channel(true);
        let mut endpoint = Endpoint {
            addr,
            conn_tx,
            net,
            current: Arc::new(Mutex::new(net_rx)),
            new_conn_state: NetState::Open,
            cut_net,
            cut_current: Arc::new(Mutex::new(cut_rx)),
            client_cut: None,
            peers,
            accepting,
            fillers: Vec::new(),
            listener: None,
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
        let listener = Arc::new(listener);
        self.listener = Some(listener.clone());
        let conn_tx = self.conn_tx.clone();
        let current = self.current.clone();
        let cut_current = self.cut_current.clone();
        let peers = self.peers.clone();
        let mut accepting = self.accepting.subscribe();
        self.accept_task = Some(tokio::spawn(async move {
            loop {
                if !*accepting.borrow_and_update() {
                    if accepting.changed().await.is_err() {
                        return;
                    }
                    continue;
                }
                let stream = tokio::select! {
                    // A pause wins over a pending connection.
                    biased;
                    changed = accepting.changed() => {
                        if changed.is_err() {
                            return;
                        }
                        continue;
                    }
                    accepted = listener.accept() => match accepted {
                        Ok((stream, _)) => stream,
                        Err(e) => {
                            // E.g. out of file descriptors: do not spin.
                            tracing::warn!("simulated accept failed: {e}");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    },
                };
                let _ = stream.set_nodelay(true);
                let net_rx = receiver(&current);
                let cut_rx = (!peers.is_peer(&stream)).then(|| receiver(&cut_current));
                if conn_tx
                    .send(Ok(SimConn::new(stream, net_rx, cut_rx)))
                    .await
                    .is_err()
                {
                    return;
                }
            }
        }));
        if self.new_conn_state == NetState::Frozen {
            self.fill_backlog();
        }
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
        self.fillers.clear();
        self.listener = None;
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

    /// Moves this endpoint to the address `listener` is bound to, and
    /// accepts there when `accept` (else it stays down, to come up on the
    /// new address). Call after [`Endpoint::down`]. Returns the new address.
    pub(crate) fn rebind(&mut self, listener: TcpListener, accept: bool) -> Result<SocketAddr> {
        self.addr = listener.local_addr().map_err(|e| Error::Connect {
            address: self.addr.to_string(),
            message: format!("cannot read the bound address: {e}"),
            source: Some(Box::new(e)),
        })?;
        if accept {
            self.up(listener);
        }
        Ok(self.addr)
    }

    /// Cuts the server off from clients (`Some`), or joins them again
    /// (`None`); connections other simulated servers open (forwarding) are
    /// not affected. [`ClientCut::Refuse`] resets every client connection
    /// and each new one at once; lifted, new connections work.
    /// [`ClientCut::Drop`] freezes them (packets dropped); lifted, they
    /// move again.
    pub(crate) fn set_client_cut(&mut self, cut: Option<ClientCut>) {
        match cut {
            Some(ClientCut::Refuse) => self.new_cut_generation(NetState::Killed),
            Some(ClientCut::Drop) => {
                if self.client_cut == Some(ClientCut::Refuse) {
                    self.new_cut_generation(NetState::Frozen);
                } else {
                    self.cut_net.send_replace(NetState::Frozen);
                }
            }
            None => match self.client_cut {
                Some(ClientCut::Refuse) => self.new_cut_generation(NetState::Open),
                _ => {
                    self.cut_net.send_replace(NetState::Open);
                }
            },
        }
        self.client_cut = cut;
    }

    /// Kills every client connection's cut gate; new client connections
    /// start in `state`.
    fn new_cut_generation(&mut self, state: NetState) {
        self.cut_net.send_replace(NetState::Killed);
        let (net, rx) = watch::channel(state);
        self.cut_net = net;
        match self.cut_current.lock() {
            Ok(mut current) => *current = rx,
            Err(poisoned) => *poisoned.into_inner() = rx,
        }
    }

    /// Freezes (`true`) or thaws (`false`) the server's network: open
    /// connections stop moving bytes, the accept loop pauses and the
    /// listen backlog is filled so new TCP connects hang.
    pub(crate) fn set_frozen(&mut self, frozen: bool) {
        self.new_conn_state = if frozen {
            NetState::Frozen
        } else {
            NetState::Open
        };
        self.net.send_replace(self.new_conn_state);
        self.accepting.send_replace(!frozen);
        if frozen {
            if self.accept_task.is_some() {
                self.fill_backlog();
            }
        } else {
            self.fillers.clear();
            self.drain_backlog();
        }
    }

    /// Accepts everything queued in the backlog right now (fillers and any
    /// client that got in), so a client connecting just after a thaw finds
    /// room instead of waiting for a SYN retransmission.
    fn drain_backlog(&mut self) {
        let Some(listener) = &self.listener else {
            return;
        };
        // poll_accept's waker slot is separate from the accept loop's
        // `accept().await`, so a no-op waker here steals no wake-up.
        let mut cx = Context::from_waker(Waker::noop());
        while let Poll::Ready(Ok((stream, _))) = listener.poll_accept(&mut cx) {
            let _ = stream.set_nodelay(true);
            let cut_rx = (!self.peers.is_peer(&stream)).then(|| receiver(&self.cut_current));
            let conn = SimConn::new(stream, self.net.subscribe(), cut_rx);
            if self.conn_tx.try_send(Ok(conn)).is_err() {
                tracing::debug!(
                    "simulated server {}: dropped a queued connection",
                    self.addr
                );
            }
        }
    }

    /// Connects to our own listener until the kernel stops completing
    /// handshakes: from then on, SYNs to this port are dropped.
    fn fill_backlog(&mut self) {
        while self.fillers.len() < MAX_FILLERS {
            match std::net::TcpStream::connect_timeout(&self.addr, FILLER_CONNECT_TIMEOUT) {
                Ok(stream) => self.fillers.push(stream),
                Err(_) => return,
            }
        }
        tracing::warn!(
            "simulated server {}: the listen backlog did not fill; new connections may still complete",
            self.addr
        );
    }

    /// Stops everything; the tasks are aborted.
    pub(crate) fn stop(&mut self) -> Vec<JoinHandle<()>> {
        self.net.send_replace(NetState::Killed);
        self.fillers.clear();
        self.listener = None;
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

/// A receiver of the generation `current` holds.
fn receiver(current: &Mutex<watch::Receiver<NetState>>) -> watch::Receiver<NetState> {
    match current.lock() {
        Ok(rx) => rx.clone(),
        Err(poisoned) => poisoned.into_inner().clone(),
    }
}

/// How a server cut off from clients treats their connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientCut {
    /// Every client connection is reset at once, new ones as soon as they
    /// are accepted (a firewall that rejects).
    Refuse,
    /// Client connections stop moving bytes (a firewall that drops).
    Drop,
}

/// The local ports of connections the simulated servers opened to each
/// other (a store forwarding a call), shared by the whole cluster: an
/// accepted connection from one of them is not a client's.
#[derive(Debug, Clone, Default)]
pub(crate) struct PeerPorts(Arc<Mutex<std::collections::HashSet<u16>>>);

impl PeerPorts {
    fn is_peer(&self, stream: &TcpStream) -> bool {
        let Ok(peer) = stream.peer_addr() else {
            return false;
        };
        match self.0.lock() {
            Ok(ports) => ports.contains(&peer.port()),
            Err(poisoned) => poisoned.into_inner().contains(&peer.port()),
        }
    }

    /// Records (`true`) or forgets a local port of a server's own
    /// connection.
    pub(crate) fn mark(&self, port: u16, peer: bool) {
        let mut ports = match self.0.lock() {
            Ok(ports) => ports,
            Err(poisoned) => poisoned.into_inner(),
        };
        if peer {
            ports.insert(port);
        } else {
            ports.remove(&port);
        }
    }
}

/// Listens on `addr` with address reuse (so a store comes back on its port
/// at once) and the small [`LISTEN_BACKLOG`].
pub(crate) async fn bind(addr: SocketAddr) -> Result<TcpListener> {
    let fail = |e: io::Error| Error::Connect {
        address: addr.to_string(),
        message: format!("the simulated cluster cannot listen there: {e}"),
        source: Some(Box::new(e)),
    };
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(fail)?;
    socket.set_reuseaddr(true).map_err(fail)?;
    socket.bind(addr).map_err(fail)?;
    socket.listen(LISTEN_BACKLOG).map_err(fail)
}
