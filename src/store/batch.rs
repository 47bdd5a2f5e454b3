//! The BatchCommands transport: [`KvBatchClient`] sends requests to one store
//! over long-lived `tikvpb.Tikv/BatchCommands` streams instead of one gRPC
//! call each.
//!
//! # How a request travels
//!
//! Each request gets an id and waits in the queue of one stream, picked as
//! the open stream with the fewest requests in flight. The stream's request
//! body is a [`Stream`] that the HTTP/2 connection polls whenever it can
//! write: each poll takes everything queued (up to the batch size) and turns
//! it into one `BatchCommandsRequest`. So a lone request is written at once
//! (no added latency at low load), while under load the requests that queue
//! up while the connection is busy go out together. With
//! [`BatchOptions::max_wait`] set, a *saturated* stream (a batch's worth of
//! requests in flight) may hold a partial batch up to that long.
//!
//! Responses come back in any order and grouping; each is routed by id to
//! the oneshot its request waits on.
//!
//! # Failures keep replay safety
//!
//! * A request that is not answered within the request timeout is removed
//!   from its stream and fails as a client timeout ([`Failure::Timeout`](crate::Failure::Timeout)).
//! * A dropped request future removes its entry too.
//! * When a stream fails, every request on it fails. A request the
//!   connection already took (written) may have reached the store: it fails
//!   with the stream's status, which classifies as a transport failure or a
//!   stream reset, so a write ends undetermined. A request still queued was
//!   never sent: it fails with [`Failure::Connect`](crate::Failure::Connect), which classifies as
//!   `NotSent`, so even a write may go to the next candidate
//!   ([routing.md, "Replay safety"](crate::spec::routing#replay-safety)).
//! * A broken stream is dropped; the next request opens a new one on the
//!   store's channel, which reconnects within the connect timeout.
//! * When a stream is saturated and fewer than [`BatchOptions::max_streams`]
//!   are open, another stream is opened, on a new connection, in the
//!   background.
//! * A store that does not implement BatchCommands (`Unimplemented`) is
//!   served with unary calls from then on.
//!
//! This file is over 800 lines with its unit tests, which sit beside the code
//! as client-rust and tokio keep them; the code is under 800.

use std::any::Any;
use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use async_trait::async_trait;
use futures::Stream;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;
use tonic::transport::Channel;

use super::{KvClient, Request};
use crate::config::{
    DEFAULT_BATCH_MAX_SIZE, DEFAULT_BATCH_MAX_WAIT, DEFAULT_BATCH_STREAMS_PER_STORE,
};
use crate::proto::kvrpcpb;
use crate::proto::tikvpb::batch_commands_request::request::Cmd as RequestCmd;
use crate::proto::tikvpb::batch_commands_response::response::Cmd as ResponseCmd;
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::proto::tikvpb::{batch_commands_request, BatchCommandsRequest, BatchCommandsResponse};
use crate::security::SecurityManager;
use crate::Failure;
use crate::{Error, Result};
use tikv_plan_proto::methods::{unpack_batch_response, KvMethod};

/// The limits of the batched transport (see [`crate::Config::batch_max_size`]
/// and its neighbours).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchOptions {
    /// The most requests in one `BatchCommandsRequest`, and the in-flight
    /// count at which a stream is saturated.
    pub max_batch_size: usize,
    /// The most streams open to one store.
    pub max_streams: usize,
    /// How long a saturated stream may hold a partial batch (zero: never).
    pub max_wait: Duration,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_batch_size: DEFAULT_BATCH_MAX_SIZE,
            max_streams: DEFAULT_BATCH_STREAMS_PER_STORE,
            max_wait: DEFAULT_BATCH_MAX_WAIT,
        }
    }
}

impl From<&crate::Config> for BatchOptions {
    fn from(config: &crate::Config) -> Self {
        BatchOptions {
            max_batch_size: config.batch_max_size,
            max_streams: config.batch_streams_per_store,
            max_wait: config.batch_max_wait,
        }
        .normalized()
    }
}

impl BatchOptions {
    fn normalized(self) -> Self {
        BatchOptions {
            max_batch_size: self.max_batch_size.max(1),
            max_streams: self.max_streams.max(1),
            max_wait: self.max_wait,
        }
    }
}

/// A request as a BatchCommands sub-request, with its method's label, or
/// None when the batch protocol has no case for it (the wire protocol's
/// table, [`kv_methods!`](tikv_plan_proto::kv_methods), says which).
pub(crate) fn to_batch_cmd(req: &dyn Request) -> Option<(RequestCmd, &'static str)> {
    let any = req.as_any();
    macro_rules! cases {
        ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
           [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
            if let Some(r) = any.downcast_ref::<kvrpcpb::$req>() {
                return r.to_batch().map(|cmd| (cmd, <kvrpcpb::$req as KvMethod>::LABEL));
            }
        )*};
    }
    tikv_plan_proto::kv_methods!(cases);
    None
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// What a waiting request receives.
enum Reply {
    Answer(Box<ResponseCmd>),
    Failed(Error),
    /// The store refused the BatchCommands method itself: nothing was
    /// served; send the request as a unary call.
    Unsupported,
}

struct Waiter {
    tx: oneshot::Sender<Reply>,
    /// The connection took the request: it may have reached the store.
    written: bool,
}

/// The mutable state of one stream.
struct Core {
    /// Requests not yet taken by the connection (ids of cancelled ones are
    /// skipped when taken).
    queue: VecDeque<(u64, RequestCmd)>,
    /// Every request on the stream that still waits for its answer.
    waiting: HashMap<u64, Waiter>,
    closed: bool,
    /// The request body's waker, parked while the queue is empty.
    waker: Option<Waker>,
}

/// One open BatchCommands stream.
struct BatchStream {
    address: String,
    /// The largest answer one request may get (`Config::
    /// grpc_max_decoding_message_size`); the stream's own messages may be
    /// larger, as they carry many answers.
    response_limit: usize,
    core: Mutex<Core>,
    reader: Mutex<Option<AbortHandle>>,
}

impl BatchStream {
    #[cfg(test)]
    fn new(address: String) -> Arc<Self> {
        Self::with_limit(address, usize::MAX)
    }

    fn with_limit(address: String, response_limit: usize) -> Arc<Self> {
        Arc::new(BatchStream {
            address,
            response_limit,
            core: Mutex::new(Core {
                queue: VecDeque::new(),
                waiting: HashMap::new(),
                closed: false,
                waker: None,
            }),
            reader: Mutex::new(None),
        })
    }

    fn in_flight(&self) -> usize {
        lock(&self.core).waiting.len()
    }

    fn is_closed(&self) -> bool {
        lock(&self.core).closed
    }

    /// Queues a request; gives it back when the stream has closed
    /// meanwhile.
    fn enqueue(
        &self,
        id: u64,
        cmd: RequestCmd,
        tx: oneshot::Sender<Reply>,
    ) -> std::result::Result<(), Box<(RequestCmd, oneshot::Sender<Reply>)>> {
        let waker = {
            let mut core = lock(&self.core);
            if core.closed {
                return Err(Box::new((cmd, tx)));
            }
            core.waiting.insert(id, Waiter { tx, written: false });
            core.queue.push_back((id, cmd));
            core.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Forgets a request (timed out or cancelled). A queued copy is skipped
    /// when the connection takes it.
    fn forget(&self, id: u64) {
        let mut core = lock(&self.core);
        core.waiting.remove(&id);
        // A stalled connection (a frozen store) never takes its queue: drop
        // the copies nobody waits for before they pile up.
        if core.queue.len() > 2 * core.waiting.len() + 64 {
            let Core { queue, waiting, .. } = &mut *core;
            queue.retain(|(id, _)| waiting.contains_key(id));
        }
    }

    fn deliver(&self, msg: BatchCommandsResponse) {
        let mut core = lock(&self.core);
        for (id, resp) in msg.request_ids.into_iter().zip(msg.responses) {
            let Some(waiter) = core.waiting.remove(&id) else {
                // Timed out or cancelled meanwhile.
                continue;
            };
            let size = prost::Message::encoded_len(&resp);
            let reply = match resp.cmd {
                // One answer over the limit fails its own request, not the
                // stream.
                Some(_) if size > self.response_limit => Reply::Failed(Error::from(Failure::GrpcMessageTooLarge {
                    address: self.address.clone(),
                    limit: self.response_limit,
                    message: format!(
                        "the answer to request {id} of a BatchCommands stream is {size} bytes"
                    ),
                    source: None,
                })),
                Some(cmd) => Reply::Answer(Box::new(cmd)),
                None => Reply::Failed(Error::InternalError { message: format!(
                    "the store at {} answered request {id} of a BatchCommands stream with an empty response",
                    self.address
                ) }),
            };
            let _ = waiter.tx.send(reply);
        }
    }

    /// Ends the stream: every waiting request fails, classified by whether
    /// the connection had taken it.
    fn fail(&self, status: &tonic::Status) {
        let unsupported = status.code() == tonic::Code::Unimplemented;
        let (waiting, waker) = {
            let mut core = lock(&self.core);
            core.closed = true;
            core.queue.clear();
            (std::mem::take(&mut core.waiting), core.waker.take())
        };
        if let Some(w) = waker {
            w.wake();
        }
        if !waiting.is_empty() {
            tracing::debug!(
                "BatchCommands stream to {} failed with {} requests in flight: {status}",
                self.address,
                waiting.len()
            );
        }
        for (_, waiter) in waiting {
            let reply = if unsupported {
                Reply::Unsupported
            } else if waiter.written {
                Reply::Failed(written_error(&self.address, status))
            } else {
                Reply::Failed(not_sent_error(&self.address, status))
            };
            let _ = waiter.tx.send(reply);
        }
    }

    /// Closes the request half (the store finishes what it has) and stops
    /// reading.
    fn close(&self) {
        let waker = {
            let mut core = lock(&self.core);
            core.closed = true;
            core.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        if let Some(reader) = lock(&self.reader).take() {
            reader.abort();
        }
    }
}

/// The failure of a request the connection had taken: the stream's status
/// (kept as the source, so a reset or timeout cause still classifies),
/// which may have reached the store. A cause that would read as "never
/// sent" (hyper cancels the streams of a connection that died) is dropped:
/// this request was written, so it becomes a plain transport failure.
fn written_error(address: &str, status: &tonic::Status) -> Error {
    let message = format!(
        "the BatchCommands stream to {address} failed after the request was written, so the store may have received it: {}: {}",
        status.code(),
        status.message()
    );
    let failure = crate::classify::classify_grpc_error(status);
    if !failure.may_have_been_sent() || failure == crate::classify::DispatchFailure::Fatal {
        return Error::GrpcAPI(tonic::Status::unavailable(message));
    }
    let mut wrapped = tonic::Status::new(status.code(), message);
    wrapped.set_source(Arc::new(status.clone()));
    Error::GrpcAPI(wrapped)
}

/// The failure of a request still queued: it was never sent.
fn not_sent_error(address: &str, status: &tonic::Status) -> Error {
    Error::from(Failure::Connect {
        address: address.to_owned(),
        message: format!(
            "the BatchCommands stream failed before this request was written, so it was not sent ({}: {})",
            status.code(),
            status.message()
        ),
        source: Some(crate::error::ErrorSource::new(status.clone())),
    })
}

/// The request body of one stream: each poll takes what is queued.
struct Outgoing {
    stream: Arc<BatchStream>,
    options: BatchOptions,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Stream for Outgoing {
    type Item = BatchCommandsRequest;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let mut core = lock(&this.stream.core);
        if core.closed {
            return Poll::Ready(None);
        }
        if core.queue.is_empty() {
            core.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        let max = this.options.max_batch_size;
        if !this.options.max_wait.is_zero() && core.queue.len() < max {
            // Only a saturated stream waits to fill its batch.
            let written = core.waiting.len().saturating_sub(core.queue.len());
            if written >= max {
                let wait = this.options.max_wait;
                let timer = this
                    .timer
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(wait)));
                if timer.as_mut().poll(cx).is_pending() {
                    core.waker = Some(cx.waker().clone());
                    return Poll::Pending;
                }
            }
        }
        this.timer = None;
        let mut msg = BatchCommandsRequest::default();
        while msg.requests.len() < max {
            let Some((id, cmd)) = core.queue.pop_front() else {
                break;
            };
            if let Some(waiter) = core.waiting.get_mut(&id) {
                waiter.written = true;
                msg.requests
                    .push(batch_commands_request::Request { cmd: Some(cmd) });
                msg.request_ids.push(id);
            }
        }
        if msg.requests.is_empty() {
            // Everything queued was cancelled.
            core.waker = Some(cx.waker().clone());
            return Poll::Pending;
        }
        if !core.queue.is_empty() {
            // More than one batch is queued: come back for the rest.
            cx.waker().wake_by_ref();
        }
        Poll::Ready(Some(msg))
    }
}

/// How to open another connection to the store.
#[derive(Clone)]
pub(crate) struct Dialer {
    pub(crate) security: Arc<SecurityManager>,
    pub(crate) connect_timeout: Duration,
    pub(crate) max_decoding_message_size: usize,
}

struct Shared {
    address: String,
    timeout: Duration,
    options: BatchOptions,
    /// The store's channel: unary fallbacks and the first stream.
    base: TikvClient<Channel>,
    /// The largest answer one request may get.
    response_limit: usize,
    dialer: Option<Dialer>,
    streams: Mutex<Vec<Arc<BatchStream>>>,
    /// An extra stream is being opened.
    opening: AtomicBool,
    /// The store does not serve BatchCommands.
    unsupported: AtomicBool,
    next_id: AtomicU64,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for stream in lock(&self.streams).drain(..) {
            stream.close();
        }
    }
}

impl Shared {
    /// Opens a stream over `client`; its reader runs in the background.
    fn open(&self, client: TikvClient<Channel>) -> Arc<BatchStream> {
        // A message carries up to a batch of answers, each within the
        // per-answer limit checked in `deliver`.
        let stream_limit = self
            .response_limit
            .saturating_mul(self.options.max_batch_size.max(1));
        let client = client.max_decoding_message_size(stream_limit);
        let stream = BatchStream::with_limit(self.address.clone(), self.response_limit);
        let outgoing = Outgoing {
            stream: stream.clone(),
            options: self.options,
            timer: None,
        };
        let task = tokio::spawn(read_responses(stream.clone(), client, outgoing));
        *lock(&stream.reader) = Some(task.abort_handle());
        stream
    }

    /// The open stream with the fewest requests in flight (opening one when
    /// none is open); starts another in the background when it is
    /// saturated.
    fn pick(self: &Arc<Self>) -> Arc<BatchStream> {
        let mut streams = lock(&self.streams);
        streams.retain(|s| !s.is_closed());
        let best = streams
            .iter()
            .map(|s| (s.in_flight(), s))
            .min_by_key(|(n, _)| *n)
            .map(|(n, s)| (n, s.clone()));
        match best {
            None => {
                let stream = self.open(self.base.clone());
                streams.push(stream.clone());
                stream
            }
            Some((in_flight, stream)) => {
                if in_flight >= self.options.max_batch_size
                    && streams.len() < self.options.max_streams
                    && !self.opening.swap(true, Ordering::AcqRel)
                {
                    self.open_extra();
                }
                stream
            }
        }
    }

    /// Opens one more stream, on a new connection when a dialer is known.
    fn open_extra(self: &Arc<Self>) {
        let weak: Weak<Shared> = Arc::downgrade(self);
        let dialer = self.dialer.clone();
        let address = self.address.clone();
        let timeout = self.timeout;
        let base = self.base.clone();
        tokio::spawn(async move {
            let client = match dialer {
                None => Ok(base),
                Some(d) => d
                    .security
                    .connect_channel(&address, d.connect_timeout, timeout)
                    .await
                    .map(|channel| {
                        TikvClient::new(channel)
                            .max_decoding_message_size(d.max_decoding_message_size)
                    }),
            };
            let Some(shared) = weak.upgrade() else {
                return;
            };
            match client {
                Ok(client) => {
                    let stream = shared.open(client);
                    let mut streams = lock(&shared.streams);
                    if streams.len() < shared.options.max_streams {
                        streams.push(stream);
                    } else {
                        stream.close();
                    }
                }
                Err(e) => tracing::debug!("could not open another BatchCommands connection: {e}"),
            }
            shared.opening.store(false, Ordering::Release);
        });
    }
}

/// Opens the stream and routes its responses until it ends.
async fn read_responses(
    stream: Arc<BatchStream>,
    mut client: TikvClient<Channel>,
    outgoing: Outgoing,
) {
    let mut incoming = match client.batch_commands(outgoing).await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            stream.fail(&status);
            return;
        }
    };
    loop {
        match incoming.message().await {
            Ok(Some(msg)) => stream.deliver(msg),
            Ok(None) => {
                stream.fail(&tonic::Status::unavailable(
                    "the store closed the BatchCommands stream",
                ));
                return;
            }
            Err(status) => {
                stream.fail(&status);
                return;
            }
        }
    }
}

/// Removes a request from its stream when its future ends early (timeout or
/// cancellation); a no-op once answered.
struct Entry<'a> {
    stream: &'a BatchStream,
    id: u64,
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        self.stream.forget(self.id);
    }
}

/// A [`KvClient`] that sends requests to one store over BatchCommands
/// streams (see the module documentation). Clones share the streams.
#[derive(Clone)]
pub struct KvBatchClient {
    shared: Arc<Shared>,
}

impl std::fmt::Debug for KvBatchClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KvBatchClient")
            .field("address", &self.shared.address)
            .field("options", &self.shared.options)
            .finish_non_exhaustive()
    }
}

impl KvBatchClient {
    #[cfg(test)]
    /// A client over an open channel to the store at `address`; each request
    /// waits at most `timeout` for its answer. Extra streams share the
    /// channel (a client from [`TikvConnect`](super::TikvConnect) opens a
    /// connection for each instead).
    pub fn new(channel: Channel, address: &str, timeout: Duration, options: BatchOptions) -> Self {
        Self::build(
            TikvClient::new(channel)
                .max_decoding_message_size(crate::config::DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE),
            address,
            timeout,
            options,
            None,
            crate::config::DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE,
        )
    }

    pub(crate) fn build(
        base: TikvClient<Channel>,
        address: &str,
        timeout: Duration,
        options: BatchOptions,
        dialer: Option<Dialer>,
        response_limit: usize,
    ) -> Self {
        KvBatchClient {
            shared: Arc::new(Shared {
                address: address.to_owned(),
                timeout,
                options: options.normalized(),
                base,
                response_limit,
                dialer,
                streams: Mutex::new(Vec::new()),
                opening: AtomicBool::new(false),
                unsupported: AtomicBool::new(false),
                next_id: AtomicU64::new(1),
            }),
        }
    }

    #[cfg(test)]
    /// How many requests wait for an answer on this client's streams.
    pub fn in_flight(&self) -> usize {
        lock(&self.shared.streams)
            .iter()
            .map(|s| s.in_flight())
            .sum()
    }

    #[cfg(test)]
    /// How many streams are open.
    pub fn open_streams(&self) -> usize {
        lock(&self.shared.streams)
            .iter()
            .filter(|s| !s.is_closed())
            .count()
    }

    async fn unary(&self, req: &dyn Request) -> Result<Box<dyn Any + Send>> {
        req.dispatch(&self.shared.base, self.shared.timeout).await
    }
}

#[async_trait]
impl KvClient for KvBatchClient {
    async fn dispatch(&self, req: &dyn Request) -> Result<Box<dyn Any + Send>> {
        if self.shared.unsupported.load(Ordering::Acquire) {
            return self.unary(req).await;
        }
        let Some((cmd, case)) = to_batch_cmd(req) else {
            return self.unary(req).await;
        };
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (mut cmd, (mut tx, rx)) = (cmd, oneshot::channel());
        // A stream may close between the pick and the enqueue: pick again
        // once (the next pick opens a fresh stream).
        for _ in 0..2 {
            let stream = self.shared.pick();
            match stream.enqueue(id, cmd, tx) {
                Ok(()) => return self.wait(req, &stream, id, case, rx).await,
                Err(back) => (cmd, tx) = *back,
            }
        }
        Err(Error::from(Failure::Connect {
            address: self.shared.address.clone(),
            message: "every BatchCommands stream closed before the request was queued, so it was not sent"
                .to_owned(),
            source: None,
        }))
    }
}

impl KvBatchClient {
    async fn wait(
        &self,
        req: &dyn Request,
        stream: &BatchStream,
        id: u64,
        case: &'static str,
        rx: oneshot::Receiver<Reply>,
    ) -> Result<Box<dyn Any + Send>> {
        let _entry = Entry { stream, id };
        let timeout = self.shared.timeout;
        let reply = match tokio::time::timeout(timeout, rx).await {
            Err(_) => {
                return Err(Error::from(Failure::Timeout {
                    what: format!(
                        "{} over the BatchCommands stream to {}",
                        req.label(),
                        self.shared.address
                    ),
                    after: timeout,
                }))
            }
            Ok(Err(_)) => {
                return Err(Error::GrpcAPI(tonic::Status::unavailable(format!(
                    "the BatchCommands stream to {} went away without an answer",
                    self.shared.address
                ))))
            }
            Ok(Ok(reply)) => reply,
        };
        match reply {
            Reply::Answer(cmd) => {
                let (got, resp) = unpack_batch_response(*cmd);
                if got != case {
                    return Err(Error::InternalError { message: format!(
                        "the store at {} answered a {case} request with a {got} response on a BatchCommands stream",
                        self.shared.address
                    ) });
                }
                Ok(resp)
            }
            Reply::Failed(e) => Err(e),
            Reply::Unsupported => {
                tracing::info!(
                    "the store at {} does not serve BatchCommands; using unary calls",
                    self.shared.address
                );
                self.shared.unsupported.store(true, Ordering::Release);
                self.unary(req).await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::{FutureExt, StreamExt};

    fn get(key: &[u8]) -> RequestCmd {
        RequestCmd::RawGet(kvrpcpb::RawGetRequest {
            key: key.to_vec(),
            ..Default::default()
        })
    }

    fn outgoing(stream: &Arc<BatchStream>, max_batch_size: usize, max_wait: Duration) -> Outgoing {
        Outgoing {
            stream: stream.clone(),
            options: BatchOptions {
                max_batch_size,
                max_streams: 1,
                max_wait,
            },
            timer: None,
        }
    }

    /// Queues `n` requests with ids from `first`, keeping their receivers.
    fn queue(stream: &BatchStream, first: u64, n: u64) -> Vec<oneshot::Receiver<Reply>> {
        (first..first + n)
            .map(|id| {
                let (tx, rx) = oneshot::channel();
                assert!(stream.enqueue(id, get(b"k"), tx).is_ok());
                rx
            })
            .collect()
    }

    fn now_or_never(out: &mut Outgoing) -> Option<Option<BatchCommandsRequest>> {
        out.next().now_or_never()
    }

    #[test]
    fn a_lone_request_goes_out_at_once_and_a_crowd_in_bounded_batches() {
        let stream = BatchStream::new("s".into());
        let mut out = outgoing(&stream, 3, Duration::ZERO);
        assert!(now_or_never(&mut out).is_none(), "nothing queued: pending");
        let _one = queue(&stream, 1, 1);
        let msg = now_or_never(&mut out).flatten().unwrap();
        assert_eq!(msg.request_ids, vec![1]);
        let _many = queue(&stream, 2, 7);
        let sizes: Vec<Vec<u64>> = (0..3)
            .map(|_| now_or_never(&mut out).flatten().unwrap().request_ids)
            .collect();
        assert_eq!(sizes, vec![vec![2, 3, 4], vec![5, 6, 7], vec![8]]);
        assert!(now_or_never(&mut out).is_none());
        assert_eq!(stream.in_flight(), 8, "written, waiting for answers");
    }

    #[test]
    fn cancelled_requests_are_skipped_and_a_closed_stream_ends_the_body() {
        let stream = BatchStream::new("s".into());
        let mut out = outgoing(&stream, 8, Duration::ZERO);
        let _rx = queue(&stream, 1, 3);
        stream.forget(2);
        let msg = now_or_never(&mut out).flatten().unwrap();
        assert_eq!(msg.request_ids, vec![1, 3]);
        stream.close();
        assert_eq!(now_or_never(&mut out), Some(None));
    }

    #[test]
    fn requests_forgotten_on_a_stalled_stream_do_not_pile_up() {
        let stream = BatchStream::new("s".into());
        let _rx = queue(&stream, 1, 200);
        for id in 1..=200 {
            stream.forget(id);
        }
        let core = lock(&stream.core);
        assert!(core.queue.len() <= 64, "{}", core.queue.len());
        assert!(core.waiting.is_empty());
    }

    #[tokio::test(start_paused = true)]
    async fn only_a_saturated_stream_waits_and_never_past_the_bound() {
        let wait = Duration::from_millis(5);
        let stream = BatchStream::new("s".into());
        let mut out = outgoing(&stream, 2, wait);
        // Not saturated: no wait even with a bound set.
        let _a = queue(&stream, 1, 2);
        let first = out.next().await.unwrap();
        assert_eq!(first.request_ids, vec![1, 2]);
        // Two written and unanswered: saturated. A lone request waits for
        // company, up to the bound.
        let _b = queue(&stream, 3, 1);
        let started = tokio::time::Instant::now();
        assert!(now_or_never(&mut out).is_none(), "holds the partial batch");
        let msg = out.next().await.unwrap();
        assert_eq!(msg.request_ids, vec![3]);
        assert_eq!(started.elapsed(), wait);
        // A full batch goes at once even when saturated.
        let _c = queue(&stream, 4, 2);
        let started = tokio::time::Instant::now();
        assert_eq!(out.next().await.unwrap().request_ids, vec![4, 5]);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[test]
    fn a_failed_stream_tells_written_from_queued_requests() {
        let stream = BatchStream::new("s".into());
        let mut out = outgoing(&stream, 1, Duration::ZERO);
        let mut rx = queue(&stream, 1, 2);
        assert_eq!(
            now_or_never(&mut out).flatten().unwrap().request_ids,
            vec![1]
        );
        // A cause that alone would read as "not sent" (a connect error).
        let mut status = tonic::Status::unavailable("gone");
        status.set_source(Arc::new(tonic::ConnectError(Box::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        ))));
        stream.fail(&status);
        let classify = |reply: Reply| match reply {
            Reply::Failed(e) => crate::classify::classify_dispatch_error(&e),
            _ => panic!("a failure"),
        };
        let queued = rx.pop().unwrap().try_recv().ok().map(classify);
        let written = rx.pop().unwrap().try_recv().ok().map(classify);
        assert_eq!(written, Some(crate::classify::DispatchFailure::Transport));
        assert_eq!(queued, Some(crate::classify::DispatchFailure::NotSent));
        assert!(stream.is_closed());
        assert_eq!(stream.in_flight(), 0);
    }

    #[test]
    fn an_unimplemented_stream_sends_everyone_to_unary() {
        let stream = BatchStream::new("s".into());
        let mut rx = queue(&stream, 1, 1);
        stream.fail(&tonic::Status::unimplemented("no"));
        assert!(matches!(
            rx.pop().unwrap().try_recv(),
            Ok(Reply::Unsupported)
        ));
    }

    #[test]
    fn every_batch_case_round_trips_its_response_type() {
        let req = kvrpcpb::PrewriteRequest::default();
        let (cmd, case) = to_batch_cmd(&req).unwrap();
        assert!(matches!(cmd, RequestCmd::Prewrite(_)));
        assert_eq!(case, "kv_prewrite");
        let (got, resp) = unpack_batch_response(ResponseCmd::Prewrite(Default::default()));
        assert_eq!(got, "kv_prewrite");
        assert!(resp.downcast::<kvrpcpb::PrewriteResponse>().is_ok());
        assert!(to_batch_cmd(&kvrpcpb::RawCasRequest::default()).is_none());
        assert!(to_batch_cmd(&kvrpcpb::RawGetKeyTtlRequest::default()).is_none());
    }
}
