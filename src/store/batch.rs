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
//! # Failures keep replay safety, one request at a time
//!
//! What happened to each request is known from the transport itself: a
//! request is *written* once the HTTP/2 connection polled the stream's body
//! and took it (it may then have reached the store); until then it is
//! *queued* and certainly unsent.
//!
//! * A request that is not answered within the request timeout is removed
//!   from its stream and fails as a unary call that timed out does
//!   (`Cancelled`, tonic's `TimeoutExpired` as the source). If the stream delivered no answer at all during
//!   that time, it has stalled (a frozen store, a connection that lost its
//!   peer): it is retired, so later requests go to a fresh stream, and its
//!   queued requests are sent again.
//! * The streams' connections send HTTP/2 keep-alive PINGs
//!   ([`BatchOptions::keepalive_interval`], 10 s of silence): a PING
//!   unanswered for [`BatchOptions::keepalive_timeout`] (3 s) closes the
//!   connection, so a store that froze or vanished fails its streams as a
//!   lost connection would, long before each request's own timeout.
//! * A dropped request future removes its entry too.
//! * When a stream fails (reset, connection lost, closed by the store), a
//!   written request fails with the stream's status as its source, so it
//!   classifies as a unary call in the same state would (a transport
//!   failure or a stream reset) and a write ends undetermined. A queued
//!   request is never failed: it is sent again as a unary call within what
//!   is left of its timeout
//!   ([routing.md, "Replay safety"](crate::spec::routing#replay-safety)).
//! * An answer over the size limit fails only its own request.
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
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use async_trait::async_trait;
use tokio::sync::oneshot;
use tonic::metadata::AsciiMetadataValue;
use tonic::transport::Channel;

mod stream;

use crate::sync::lock;
use stream::{BatchStream, Outgoing, OutgoingBatch, Reply};

use super::{KvClient, Request};
use crate::config::{
    DEFAULT_BATCH_MAX_SIZE, DEFAULT_BATCH_MAX_WAIT, DEFAULT_BATCH_STREAMS_PER_STORE,
    KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT,
};
use crate::proto::kvrpcpb;
use crate::proto::tikvpb::tikv_client::TikvClient;
use crate::security::{ConnectionWatch, SecurityManager};
use crate::{Error, Result};
use prost::bytes::{Buf, Bytes};
use tikv_plan_proto::answers::{
    decode_batch_answer, split_batch_response, AnswerError, BatchAnswers,
};
use tikv_plan_proto::methods::{KvMethod, BATCH_COMMANDS_PATH};
use tikv_plan_proto::requests::{batch_request_len, encode_batch_entry, write_batch_request};
use tonic::client::Grpc;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};
use tonic::codegen::http;

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
    /// HTTP/2 keep-alive of the streams' connections: a PING after this
    /// long without frames from the store, while a stream is open.
    pub keepalive_interval: Duration,
    /// How long a keep-alive PING may go unanswered before the connection
    /// (and every stream on it) is closed as failed.
    pub keepalive_timeout: Duration,
}

impl Default for BatchOptions {
    fn default() -> Self {
        BatchOptions {
            max_batch_size: DEFAULT_BATCH_MAX_SIZE,
            max_streams: DEFAULT_BATCH_STREAMS_PER_STORE,
            max_wait: DEFAULT_BATCH_MAX_WAIT,
            keepalive_interval: KEEPALIVE_INTERVAL,
            keepalive_timeout: KEEPALIVE_TIMEOUT,
        }
    }
}

impl From<&crate::Config> for BatchOptions {
    fn from(config: &crate::Config) -> Self {
        BatchOptions {
            max_batch_size: config.batch_max_size,
            max_streams: config.batch_streams_per_store,
            max_wait: config.batch_max_wait,
            ..BatchOptions::default()
        }
        .normalized()
    }
}

impl BatchOptions {
    /// The streams' keep-alive: the PING interval and how long one may go
    /// unanswered.
    pub(crate) fn keepalive(&self) -> (Duration, Duration) {
        (self.keepalive_interval, self.keepalive_timeout)
    }

    fn normalized(self) -> Self {
        BatchOptions {
            max_batch_size: self.max_batch_size.max(1),
            max_streams: self.max_streams.max(1),
            ..self
        }
    }
}

/// Decodes an encoded answer as one method's response type.
type DecodeAnswer = fn(Bytes) -> std::result::Result<Box<dyn Any + Send>, AnswerError>;

/// What a request's answer is: its method's label (for errors) and the
/// decoder of its response type.
#[derive(Clone, Copy)]
struct AnswerType {
    label: &'static str,
    decode: DecodeAnswer,
}

/// What a request got back: its answer still encoded (from its stream), or
/// the response of the unary call it was sent as instead.
enum Answered {
    Encoded(Bytes),
    Unary(Box<dyn Any + Send>),
}

/// Decodes the answer to a request of method `R` straight into its
/// response type.
fn decode_answer<R: KvMethod>(
    answer: Bytes,
) -> std::result::Result<Box<dyn Any + Send>, AnswerError> {
    decode_batch_answer::<R>(answer).map(|response| response as Box<dyn Any + Send>)
}

/// A request as a BatchCommands sub-request, encoded as its entry in a
/// `BatchCommandsRequest` (on the caller's task, straight from the request:
/// no copy of it waits in the queue), with its method's label and the
/// decoder of its answer; or None when the batch protocol has no case for
/// it (the wire protocol's table,
/// [`kv_methods!`](tikv_plan_proto::kv_methods), says which).
fn to_batch_entry(req: &dyn Request) -> Option<(Vec<u8>, AnswerType)> {
    let any = req.as_any();
    macro_rules! cases {
        ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
           [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
            if let Some(r) = any.downcast_ref::<kvrpcpb::$req>() {
                return encode_batch_entry(r).map(|entry| {
                    (entry, AnswerType {
                        label: <kvrpcpb::$req as KvMethod>::LABEL,
                        decode: decode_answer::<kvrpcpb::$req>,
                    })
                });
            }
        )*};
    }
    tikv_plan_proto::kv_methods!(cases);
    None
}

/// The codec of a BatchCommands stream: each request message written out
/// of its requests' encoded entries ([`write_batch_request`]), each
/// response message split into its ids and still-encoded answers
/// ([`split_batch_response`]); the stream's reader then hands each answer,
/// still encoded, to its request ([`BatchStream::deliver`]), which decodes
/// it as its own response type on its own task.
#[derive(Debug, Clone, Copy, Default)]
struct BatchCodec;

impl Codec for BatchCodec {
    type Encode = OutgoingBatch;
    type Decode = BatchAnswers;
    type Encoder = BatchCodec;
    type Decoder = BatchCodec;

    fn encoder(&mut self) -> Self::Encoder {
        BatchCodec
    }

    fn decoder(&mut self) -> Self::Decoder {
        BatchCodec
    }
}

impl Encoder for BatchCodec {
    type Item = OutgoingBatch;
    type Error = tonic::Status;

    fn encode(
        &mut self,
        batch: OutgoingBatch,
        dst: &mut EncodeBuf<'_>,
    ) -> std::result::Result<(), tonic::Status> {
        dst.reserve(batch_request_len(&batch.entries, &batch.request_ids));
        write_batch_request(&batch.entries, &batch.request_ids, dst);
        Ok(())
    }
}

impl Decoder for BatchCodec {
    type Item = BatchAnswers;
    type Error = tonic::Status;

    fn decode(
        &mut self,
        src: &mut DecodeBuf<'_>,
    ) -> std::result::Result<Option<BatchAnswers>, tonic::Status> {
        let message = src.copy_to_bytes(src.remaining());
        // A message prost could not decode fails as tonic fails it.
        split_batch_response(message)
            .map(Some)
            .map_err(|e| tonic::Status::internal(format!("a BatchCommands response: {e}")))
    }
}

/// How to open another connection to the store.
#[derive(Clone)]
pub(crate) struct Dialer {
    pub(crate) security: Arc<SecurityManager>,
    pub(crate) connect_timeout: Duration,
    /// The store client's watch over its connections.
    pub(crate) watch: Option<ConnectionWatch>,
}

struct Shared {
    address: String,
    timeout: Duration,
    options: BatchOptions,
    /// The store's channel, for unary calls (requests sent again, and a
    /// store without BatchCommands).
    base: TikvClient<Channel>,
    /// The channel the first stream opens on (and extra ones without a
    /// dialer): no request timeout (see
    /// [`SecurityManager::connect_stream_channel`]). Replaced by a fresh
    /// connection when a stream on it stalls (see [`Shared::redial_base`]).
    stream_base: Mutex<Channel>,
    /// The largest answer one request may get.
    response_limit: usize,
    dialer: Option<Dialer>,
    streams: Mutex<Vec<Arc<BatchStream>>>,
    /// An extra stream is being opened.
    opening: AtomicBool,
    /// The store does not serve BatchCommands.
    unsupported: AtomicBool,
    next_id: AtomicU64,
    /// The address every stream and unary call asks the store to forward
    /// to (`tikv-forwarded-host`), when this client goes through a proxy:
    /// one set of streams per (proxy, target).
    forwarded_host: Option<AsciiMetadataValue>,
    /// Where the stores' health feedback goes.
    feedback: super::StoreFeedback,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for stream in lock(&self.streams).drain(..) {
            stream.close();
        }
    }
}

impl Shared {
    /// Opens a stream over `channel` (`on_base`: the base connection);
    /// its reader runs in the background.
    fn open(&self, channel: Channel, on_base: bool) -> Arc<BatchStream> {
        // A message carries up to a batch of answers, each within the
        // per-answer limit checked in `deliver`.
        let stream_limit = self
            .response_limit
            .saturating_mul(self.options.max_batch_size.max(1));
        let client = Grpc::new(channel).max_decoding_message_size(stream_limit);
        let stream = BatchStream::with_limit(self.address.clone(), self.response_limit, on_base);
        let outgoing = Outgoing::new(stream.clone(), self.options);
        let task = tokio::spawn(read_responses(
            stream.clone(),
            client,
            outgoing,
            self.forwarded_host.clone(),
            self.feedback.clone(),
        ));
        stream.set_reader(task.abort_handle());
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
                let stream = self.open(lock(&self.stream_base).clone(), true);
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
        let base = lock(&self.stream_base).clone();
        let keepalive = self.options.keepalive();
        tokio::spawn(async move {
            let on_base = dialer.is_none();
            let client = match dialer {
                None => Ok(base),
                Some(d) => {
                    d.security
                        .connect_stream_channel(
                            &address,
                            d.connect_timeout,
                            keepalive,
                            d.watch.as_ref(),
                        )
                        .await
                }
            };
            let Some(shared) = weak.upgrade() else {
                return;
            };
            match client {
                Ok(client) => {
                    let stream = shared.open(client, on_base);
                    let mut streams = lock(&shared.streams);
                    streams.retain(|s| !s.is_closed());
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

    /// After a stream on the base connection stalled: the next stream opens
    /// on a new connection. A connection whose peer went silent (a frozen
    /// host, a path that black-holes its packets) stays open from this
    /// side until its keep-alive gives up; new streams on it would stall as
    /// well. The old connection closes once its last stream stops. Without
    /// a dialer (test clients over one channel) nothing changes.
    fn redial_base(&self) {
        let Some(dialer) = &self.dialer else { return };
        let keepalive = self.options.keepalive();
        match dialer.security.lazy_stream_channel(
            &self.address,
            dialer.connect_timeout,
            keepalive,
            dialer.watch.as_ref(),
        ) {
            Ok(channel) => *lock(&self.stream_base) = channel,
            Err(e) => tracing::debug!("could not redial the BatchCommands connection: {e}"),
        }
    }
}

/// Opens the stream and routes its responses until it ends.
async fn read_responses(
    stream: Arc<BatchStream>,
    mut client: Grpc<Channel>,
    outgoing: Outgoing,
    forwarded_host: Option<AsciiMetadataValue>,
    feedback: super::StoreFeedback,
) {
    // As the generated client's `batch_commands` calls it, with the codec
    // that leaves each answer encoded for its request.
    if let Err(e) = client.ready().await {
        // tonic's own words for a channel that cannot take a call.
        stream.fail(
            &tonic::Status::unknown(format!("Service was not ready: {e}")),
            true,
        );
        return;
    }
    let path = http::uri::PathAndQuery::from_static(BATCH_COMMANDS_PATH);
    let mut request = tonic::Request::new(outgoing);
    if let Some(host) = forwarded_host {
        request
            .metadata_mut()
            .insert(super::request::FORWARDED_HOST, host);
    }
    let call = client.streaming(request, path, BatchCodec);
    let mut incoming = match call.await {
        Ok(response) => response.into_inner(),
        Err(status) => {
            stream.fail(&status, true);
            return;
        }
    };
    loop {
        match incoming.message().await {
            Ok(Some(mut msg)) => {
                if let Some(health) = msg.health_feedback.take() {
                    feedback.record(&health);
                }
                if stream.deliver(msg) {
                    // Retired, and the last request on it answered.
                    return;
                }
            }
            Ok(None) => {
                stream.fail(
                    &tonic::Status::unavailable("the store closed the BatchCommands stream"),
                    false,
                );
                return;
            }
            Err(status) => {
                stream.fail(&status, false);
                return;
            }
        }
    }
}

/// Removes a request from its stream when its future ends early (timeout or
/// cancellation). Once the request got its reply the stream has removed it
/// already (every reply is sent after its entry left the table), so the
/// stream's lock is not taken again.
struct Entry<'a> {
    stream: &'a BatchStream,
    id: u64,
    replied: bool,
}

impl Drop for Entry<'_> {
    fn drop(&mut self) {
        if !self.replied {
            self.stream.forget(self.id);
        }
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
        let client = TikvClient::new(channel.clone())
            .max_decoding_message_size(crate::config::DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE);
        Self::build(
            client,
            channel,
            address,
            timeout,
            options,
            None,
            crate::config::DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE,
        )
    }

    pub(crate) fn build(
        base: TikvClient<Channel>,
        stream_base: Channel,
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
                stream_base: Mutex::new(stream_base),
                response_limit,
                dialer,
                streams: Mutex::new(Vec::new()),
                opening: AtomicBool::new(false),
                unsupported: AtomicBool::new(false),
                next_id: AtomicU64::new(1),
                forwarded_host: None,
                feedback: super::StoreFeedback::new(),
            }),
        }
    }

    /// A client, just built, whose streams hand the stores' health
    /// feedback to `feedback`.
    pub(crate) fn with_feedback(mut self, feedback: super::StoreFeedback) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.feedback = feedback;
        }
        self
    }

    /// A client, just built, whose streams and unary calls all ask the
    /// store to forward them to `host`.
    pub(crate) fn forwarded_to(mut self, host: AsciiMetadataValue) -> Self {
        if let Some(shared) = Arc::get_mut(&mut self.shared) {
            shared.forwarded_host = Some(host);
        }
        self
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
        self.unary_within(req, self.shared.timeout).await
    }

    /// A unary call bounded by `timeout`: tonic's timer, backed by one a
    /// moment later that also covers the channel's reconnect (tonic's
    /// starts only once the channel is ready, and a request whose stream
    /// ended may go to a store whose connection is gone).
    async fn unary_within(
        &self,
        req: &dyn Request,
        timeout: Duration,
    ) -> Result<Box<dyn Any + Send>> {
        let call = req.dispatch_forwarded(
            &self.shared.base,
            timeout,
            self.shared.forwarded_host.as_ref(),
        );
        match crate::store::with_backstop(timeout, call).await {
            Ok(result) => result,
            Err(_) => Err(self.timed_out(req, timeout)),
        }
    }
}

#[async_trait]
impl KvClient for KvBatchClient {
    async fn dispatch(&self, req: &dyn Request) -> Result<Box<dyn Any + Send>> {
        self.send(req).await
    }
}

impl KvBatchClient {
    /// Sends `req` over a stream (or as a unary call, see the module
    /// documentation). The body of [`KvClient::dispatch`], callable without
    /// the trait's boxed future: the store client that holds this one
    /// awaits it inside its own.
    pub(crate) async fn send(&self, req: &dyn Request) -> Result<Box<dyn Any + Send>> {
        if self.shared.unsupported.load(Ordering::Acquire) {
            return self.unary(req).await;
        }
        let Some((entry, answer)) = to_batch_entry(req) else {
            return self.unary(req).await;
        };
        let (id, answered) = self.send_entry(req, entry).await?;
        match answered {
            Answered::Unary(response) => Ok(response),
            Answered::Encoded(bytes) => {
                (answer.decode)(bytes).map_err(|e| self.undecodable(id, answer.label, e))
            }
        }
    }

    /// [`send`](Self::send) for a request whose type is known: encoded
    /// straight from it, its answer decoded straight as its response type
    /// (in the box it then moves in) on the caller's task.
    pub(crate) async fn send_typed<R>(&self, req: &R) -> Result<Box<R::Response>>
    where
        R: KvMethod + Request,
    {
        let entry = if self.shared.unsupported.load(Ordering::Acquire) {
            None
        } else {
            encode_batch_entry(req)
        };
        let answered = match entry {
            Some(entry) => self.send_entry(req, entry).await?,
            None => (0, Answered::Unary(self.unary(req).await?)),
        };
        match answered {
            (id, Answered::Encoded(bytes)) => {
                decode_batch_answer::<R>(bytes).map_err(|e| self.undecodable(id, R::LABEL, e))
            }
            (_, Answered::Unary(response)) => response.downcast().map_err(|_| {
                let label = R::LABEL;
                Error::InternalError {
                    message: format!(
                        "the store client answered {label} with a response of another type"
                    ),
                }
            }),
        }
    }

    /// Queues `req`, encoded as `entry`, on a stream and waits for what it
    /// gets; with the request's id.
    async fn send_entry(&self, req: &dyn Request, entry: Vec<u8>) -> Result<(u64, Answered)> {
        let id = self.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let (mut entry, (mut tx, rx)) = (entry, oneshot::channel());
        // A stream may close between the pick and the enqueue: pick again
        // once (the next pick opens a fresh stream).
        for _ in 0..2 {
            let stream = self.shared.pick();
            match stream.enqueue(id, entry, tx) {
                Ok(()) => return Ok((id, self.wait(req, &stream, id, rx).await?)),
                Err(back) => (entry, tx) = back,
            }
        }
        // Every stream picked closed before it could take the request:
        // nothing was sent; a unary call it is.
        Ok((id, Answered::Unary(self.unary(req).await?)))
    }

    /// The error of an answer that does not decode as its request's
    /// response type.
    fn undecodable(&self, id: u64, label: &str, e: AnswerError) -> Error {
        Error::InternalError {
            message: format!(
                "the store at {} answered request {id} ({label}) of a BatchCommands stream with {e}",
                self.shared.address
            ),
        }
    }

    async fn wait(
        &self,
        req: &dyn Request,
        stream: &BatchStream,
        id: u64,
        rx: oneshot::Receiver<Reply>,
    ) -> Result<Answered> {
        let mut entry = Entry {
            stream,
            id,
            replied: false,
        };
        let timeout = self.shared.timeout;
        let deadline = tokio::time::Instant::now() + timeout;
        let answers_before = stream.answers();
        let reply = match super::shared_timer::until(deadline, rx).await {
            None => {
                if stream.answers() == answers_before {
                    // Not one answer on this stream for a whole request
                    // timeout: it stalled (a frozen store, a connection
                    // that lost its peer). Later requests go to a new
                    // stream, on a new connection. Under the streams' lock,
                    // which `pick` takes first: no stream can open on the
                    // old connection between the two.
                    let _streams = lock(&self.shared.streams);
                    if stream.retire() && stream.on_base() {
                        self.shared.redial_base();
                    }
                }
                return Err(self.timed_out(req, timeout));
            }
            Some(Err(_)) => {
                return Err(Error::GrpcAPI(tonic::Status::unavailable(format!(
                    "the BatchCommands stream to {} went away without an answer",
                    self.shared.address
                ))))
            }
            Some(Ok(reply)) => {
                entry.replied = true;
                reply
            }
        };
        match reply {
            Reply::Answer(answer) => Ok(Answered::Encoded(answer)),
            Reply::Failed(e) => Err(e),
            // Its stream ended before the connection took it: nothing was
            // sent, so it goes again as a unary call, and fails as such a
            // call would.
            Reply::Resend => self
                .unary_until(req, deadline, timeout)
                .await
                .map(Answered::Unary),
            Reply::Unsupported => {
                tracing::info!(
                    "the store at {} does not serve BatchCommands; using unary calls",
                    self.shared.address
                );
                self.shared.unsupported.store(true, Ordering::Release);
                self.unary_until(req, deadline, timeout)
                    .await
                    .map(Answered::Unary)
            }
        }
    }

    /// A unary call within what is left of the request's timeout.
    async fn unary_until(
        &self,
        req: &dyn Request,
        deadline: tokio::time::Instant,
        timeout: Duration,
    ) -> Result<Box<dyn Any + Send>> {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            return Err(self.timed_out(req, timeout));
        }
        self.unary_within(req, left).await
    }

    /// A request that ran out of its timeout fails as a unary call that
    /// did: tonic's `Cancelled` with its `TimeoutExpired` as the source.
    fn timed_out(&self, req: &dyn Request, after: Duration) -> Error {
        let mut status = tonic::Status::cancelled(format!(
            "{} over the BatchCommands stream to {} got no answer within {after:?}",
            req.label(),
            self.shared.address
        ));
        status.set_source(Arc::new(tonic::TimeoutExpired(())));
        Error::GrpcAPI(status)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::tikvpb::batch_commands_request::request::Cmd as RequestCmd;
    use crate::proto::tikvpb::batch_commands_response::{response::Cmd as ResponseCmd, Response};
    use crate::proto::tikvpb::BatchCommandsRequest;
    use prost::Message;

    #[test]
    fn every_batch_case_is_written_as_its_case_and_decodes_its_answer_as_its_response_type() {
        macro_rules! check {
            ($($name:ident: $req:ident => $resp:ident, $grpc:literal, $stub:ident,
               [$($case:ident)?], $shape:ident $(($field:ident))?;)*) => {$(
                let found = to_batch_entry(&kvrpcpb::$req::default());
                assert_eq!(found.is_some(), false $(|| stringify!($case) != "")?, stringify!($req));
                $(
                    let (entry, answer) = found.unwrap();
                    // The entry, written out, is a message of this one case.
                    let mut message = Vec::new();
                    write_batch_request(&[entry], &[9], &mut message);
                    let sent = BatchCommandsRequest::decode(&message[..]).unwrap();
                    assert_eq!(sent.request_ids, vec![9]);
                    assert!(matches!(
                        sent.requests[..],
                        [crate::proto::tikvpb::batch_commands_request::Request {
                            cmd: Some(RequestCmd::$case(_))
                        }]
                    ), stringify!($req));
                    assert_eq!(answer.label, <kvrpcpb::$req as KvMethod>::LABEL);
                    let reply = Response {
                        cmd: Some(ResponseCmd::$case(Default::default())),
                    };
                    let decoded = (answer.decode)(Bytes::from(reply.encode_to_vec())).unwrap();
                    assert!(decoded.downcast::<kvrpcpb::$resp>().is_ok(), stringify!($resp));
                )?
            )*};
        }
        tikv_plan_proto::kv_methods!(check);
        // Another method's answer is refused, never decoded as this one's.
        let (_, answer) = to_batch_entry(&kvrpcpb::RawGetRequest::default()).unwrap();
        let scan = Response {
            cmd: Some(ResponseCmd::RawScan(Default::default())),
        };
        assert!(matches!(
            (answer.decode)(Bytes::from(scan.encode_to_vec())),
            Err(AnswerError::OtherCase(_))
        ));
    }
}
