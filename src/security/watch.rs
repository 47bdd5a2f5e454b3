//! Telling a store connection that its peer stopped answering from one that
//! was closed on purpose.
//!
//! A store's channels send HTTP/2 keep-alive PINGs; hyper closes a
//! connection whose PING goes unanswered for the keep-alive timeout, but
//! tonic's channel only reconnects on the next request, which would then
//! wait out its connect timeout against a store that drops packets. The
//! connector here wraps each connection's byte stream and notes when bytes
//! last came in and whether any were written since. A connection closed on
//! this side that had read nothing for the keep-alive interval plus its
//! timeout, with a write (the PING) waiting for an answer and the peer
//! never having closed it, was given up on by keep-alive: the
//! [`ConnectionWatch`] then holds a silent loss, and the store client fails
//! its next request at once as not sent, so the round moves on to the next
//! voter and the store is marked unreachable. That request does not use the
//! channel; the one after it reconnects as usual. A loss older than that
//! span again is not reported: the store may be back.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;
use tonic::codegen::http::Uri;
use tonic::codegen::Service;

/// Whether a store's connections were lost silently. Cloned into every
/// connection of the store's channels (unary and streams).
#[derive(Debug, Clone)]
pub(crate) struct ConnectionWatch(Arc<Shared>);

#[derive(Debug)]
struct Shared {
    /// When a connection was last lost silently, until taken.
    silent_loss: Mutex<Option<Instant>>,
    /// `silent_loss` may hold a loss: every request asks, and most find
    /// none without taking the lock.
    maybe_lost: AtomicBool,
    /// How long a connection must have read nothing, with a write waiting
    /// for an answer, before a local close counts as a silent loss: the
    /// keep-alive interval plus its timeout, the earliest keep-alive can
    /// give a connection up.
    patience: Duration,
    /// How long a silent loss stays news: a store found dead long ago may
    /// be back, and its next request then reconnects as usual.
    fresh_for: Duration,
}

impl ConnectionWatch {
    /// A watch that counts a connection closed after `patience` without a
    /// byte read, a write waiting, as lost silently, and reports such a
    /// loss for `fresh_for`.
    pub(crate) fn new(patience: Duration, fresh_for: Duration) -> Self {
        ConnectionWatch(Arc::new(Shared {
            silent_loss: Mutex::new(None),
            maybe_lost: AtomicBool::new(false),
            patience,
            fresh_for,
        }))
    }

    fn loss(&self) -> std::sync::MutexGuard<'_, Option<Instant>> {
        crate::sync::lock(&self.0.silent_loss)
    }

    /// True when a connection was lost silently, recently, since the last
    /// [`take_silent_loss`](Self::take_silent_loss).
    pub(crate) fn has_silent_loss(&self) -> bool {
        self.0.maybe_lost.load(Ordering::Acquire)
            && self
                .loss()
                .is_some_and(|at| at.elapsed() < self.0.fresh_for)
    }

    /// True (once) when a connection was lost silently, recently: the
    /// caller fails one request instead of waiting for the channel to
    /// reconnect.
    pub(crate) fn take_silent_loss(&self) -> bool {
        if !self.0.maybe_lost.load(Ordering::Acquire) {
            return false;
        }
        let mut loss = self.loss();
        self.0.maybe_lost.store(false, Ordering::Release);
        loss.take()
            .is_some_and(|at| at.elapsed() < self.0.fresh_for)
    }

    fn lost(&self) {
        let mut loss = self.loss();
        *loss = Some(Instant::now());
        self.0.maybe_lost.store(true, Ordering::Release);
    }

    /// `inner`, with each connection it opens watched.
    pub(crate) fn connector<C>(&self, inner: C) -> Watched<C> {
        Watched {
            inner,
            watch: self.clone(),
        }
    }
}

/// A connector whose connections report to a [`ConnectionWatch`].
#[derive(Debug, Clone)]
pub(crate) struct Watched<C> {
    inner: C,
    watch: ConnectionWatch,
}

impl<C, T> Service<Uri> for Watched<C>
where
    C: Service<Uri, Response = TokioIo<T>>,
    C::Future: Send + 'static,
    T: AsyncRead + AsyncWrite + Send + Unpin + 'static,
{
    type Response = TokioIo<WatchedIo<T>>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, C::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), C::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.inner.call(uri);
        let watch = self.watch.clone();
        Box::pin(async move {
            let io = connecting.await?.into_inner();
            Ok(TokioIo::new(WatchedIo {
                io,
                watch,
                last_read: Instant::now(),
                waiting: false,
                peer_closed: false,
            }))
        })
    }
}

/// A connection's byte stream, watched.
#[derive(Debug)]
pub(crate) struct WatchedIo<T> {
    io: T,
    watch: ConnectionWatch,
    /// When bytes last came in (or the connection opened).
    last_read: Instant,
    /// Bytes were written since.
    waiting: bool,
    /// The peer ended the connection (end of stream or an error).
    peer_closed: bool,
}

impl<T> WatchedIo<T> {
    fn wrote(&mut self, n: usize) {
        if n > 0 {
            self.waiting = true;
        }
    }
}

impl<T> Drop for WatchedIo<T> {
    fn drop(&mut self) {
        if !self.peer_closed && self.waiting && self.last_read.elapsed() >= self.watch.0.patience {
            self.watch.lost();
        }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for WatchedIo<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let polled = Pin::new(&mut self.io).poll_read(cx, buf);
        match &polled {
            Poll::Ready(Ok(())) if buf.filled().len() > before => {
                self.last_read = Instant::now();
                self.waiting = false;
            }
            // End of stream (room to read, nothing read) or an error.
            Poll::Ready(Ok(())) if buf.remaining() > 0 => self.peer_closed = true,
            Poll::Ready(Err(_)) => self.peer_closed = true,
            _ => {}
        }
        polled
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for WatchedIo<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write(cx, data);
        if let Poll::Ready(Ok(n)) = polled {
            self.wrote(n);
        }
        polled
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let Poll::Ready(Ok(n)) = polled {
            self.wrote(n);
        }
        polled
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    fn watched(
        io: tokio::io::DuplexStream,
        watch: &ConnectionWatch,
    ) -> WatchedIo<tokio::io::DuplexStream> {
        WatchedIo {
            io,
            watch: watch.clone(),
            last_read: Instant::now(),
            waiting: false,
            peer_closed: false,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_unanswered_past_the_patience_then_closed_here_is_a_silent_loss() {
        let watch = ConnectionWatch::new(Duration::from_secs(3), Duration::from_secs(13));
        let (ours, _peer) = tokio::io::duplex(64);
        let mut io = watched(ours, &watch);
        io.write_all(b"ping").await.unwrap();
        tokio::time::advance(Duration::from_secs(3)).await;
        drop(io);
        assert!(watch.has_silent_loss());
        assert!(watch.take_silent_loss());
        assert!(!watch.take_silent_loss(), "taken once");

        // A loss that is old news is not reported: the store may be back.
        let (ours, _peer) = tokio::io::duplex(64);
        let mut io = watched(ours, &watch);
        io.write_all(b"ping").await.unwrap();
        tokio::time::advance(Duration::from_secs(3)).await;
        drop(io);
        tokio::time::advance(Duration::from_secs(13)).await;
        assert!(!watch.has_silent_loss());
        assert!(!watch.take_silent_loss());
    }

    #[tokio::test(start_paused = true)]
    async fn an_answered_write_or_a_short_wait_is_no_loss() {
        let watch = ConnectionWatch::new(Duration::from_secs(3), Duration::from_secs(13));
        let (ours, mut peer) = tokio::io::duplex(64);
        let mut io = watched(ours, &watch);
        io.write_all(b"ping").await.unwrap();
        peer.write_all(b"ack").await.unwrap();
        let mut got = [0u8; 3];
        io.read_exact(&mut got).await.unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        drop(io);
        assert!(!watch.has_silent_loss(), "the write was answered");

        let (ours, _peer) = tokio::io::duplex(64);
        let mut io = watched(ours, &watch);
        io.write_all(b"ping").await.unwrap();
        tokio::time::advance(Duration::from_secs(2)).await;
        drop(io);
        assert!(
            !watch.has_silent_loss(),
            "closed before the patience ran out"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_the_peer_closed_is_no_silent_loss() {
        let watch = ConnectionWatch::new(Duration::from_secs(3), Duration::from_secs(13));
        let (ours, peer) = tokio::io::duplex(64);
        let mut io = watched(ours, &watch);
        io.write_all(b"ping").await.unwrap();
        drop(peer);
        let mut rest = Vec::new();
        io.read_to_end(&mut rest).await.unwrap();
        tokio::time::advance(Duration::from_secs(10)).await;
        drop(io);
        assert!(!watch.has_silent_loss(), "the peer closed it");
    }
}
