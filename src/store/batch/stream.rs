//! One BatchCommands stream: the queue of requests the connection has not
//! taken yet, the table of requests waiting for their answers, the request
//! body the connection polls, and what each request gets when the stream
//! ends (see [`super`] for how the client uses it).

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::hash::{BuildHasherDefault, Hasher};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use futures::Stream;
use tokio::sync::oneshot;
use tokio::task::AbortHandle;

use super::BatchOptions;
use crate::sync::lock;
use crate::Error;
use crate::Failure;
use prost::bytes::Bytes;
use tikv_plan_proto::answers::BatchAnswers;

/// What a waiting request receives.
pub(super) enum Reply {
    /// The answer, still encoded: the waiting request decodes it as its
    /// own response type, on its own task (see [`super::KvBatchClient`]).
    Answer(Bytes),
    Failed(Error),
    /// The stream ended before the connection took this request: nothing
    /// was sent; send it again (as a unary call).
    Resend,
    /// The store refused the BatchCommands method itself: nothing was
    /// served; send the request as a unary call.
    Unsupported,
}

struct Waiter {
    tx: oneshot::Sender<Reply>,
    /// The connection took the request: it may have reached the store.
    written: bool,
}

/// Hashes a request id for the table of waiting requests. The stream
/// makes its ids itself (one counter), so nobody can choose them to collide:
/// a multiplication spreads them over the table, at a fraction of the cost
/// of the standard library's keyed hash (three lookups per request).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Not used for `u64` keys; kept correct for any other key.
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, id: u64) {
        // Fibonacci hashing: the high bits, which the table reads first,
        // depend on every bit of the id.
        self.0 = id.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

/// The table of waiting requests, by request id.
type Waiting = HashMap<u64, Waiter, BuildHasherDefault<IdHasher>>;

/// The mutable state of one stream.
struct Core {
    /// Requests not yet taken by the connection, each encoded as its entry
    /// in a `BatchCommandsRequest` (ids of cancelled ones are skipped when
    /// taken).
    queue: VecDeque<(u64, Vec<u8>)>,
    /// Every request on the stream that still waits for its answer.
    waiting: Waiting,
    closed: bool,
    /// The request body's waker, parked while the queue is empty.
    waker: Option<Waker>,
}

/// One open BatchCommands stream.
pub(super) struct BatchStream {
    address: String,
    /// The largest answer one request may get (`Config::
    /// grpc_max_decoding_message_size`); the stream's own messages may be
    /// larger, as they carry many answers.
    response_limit: usize,
    core: Mutex<Core>,
    /// How many answers the stream has delivered: a request that times out
    /// while this count stood still found the stream stalled. Outside the
    /// core's lock, so a request reads it without taking that lock.
    answers: AtomicU64,
    reader: Mutex<Option<AbortHandle>>,
    /// Opened on the client's base connection (not one of its own).
    on_base: bool,
}

impl BatchStream {
    #[cfg(test)]
    fn new(address: String) -> Arc<Self> {
        Self::with_limit(address, usize::MAX, true)
    }

    /// Keeps the handle of the task reading the stream's answers.
    pub(super) fn set_reader(&self, reader: AbortHandle) {
        *lock(&self.reader) = Some(reader);
    }

    pub(super) fn with_limit(address: String, response_limit: usize, on_base: bool) -> Arc<Self> {
        Arc::new(BatchStream {
            address,
            response_limit,
            core: Mutex::new(Core {
                queue: VecDeque::new(),
                waiting: Waiting::default(),
                closed: false,
                waker: None,
            }),
            answers: AtomicU64::new(0),
            reader: Mutex::new(None),
            on_base,
        })
    }

    /// Opened on the client's base connection.
    pub(super) fn on_base(&self) -> bool {
        self.on_base
    }

    pub(super) fn in_flight(&self) -> usize {
        lock(&self.core).waiting.len()
    }

    pub(super) fn is_closed(&self) -> bool {
        lock(&self.core).closed
    }

    /// Queues a request; gives it back when the stream has closed
    /// meanwhile.
    pub(super) fn enqueue(
        &self,
        id: u64,
        entry: Vec<u8>,
        tx: oneshot::Sender<Reply>,
    ) -> std::result::Result<(), (Vec<u8>, oneshot::Sender<Reply>)> {
        let waker = {
            let mut core = lock(&self.core);
            if core.closed {
                return Err((entry, tx));
            }
            core.waiting.insert(id, Waiter { tx, written: false });
            core.queue.push_back((id, entry));
            core.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        Ok(())
    }

    /// Forgets a request (timed out or cancelled). A queued copy is skipped
    /// when the connection takes it.
    pub(super) fn forget(&self, id: u64) {
        let mut core = lock(&self.core);
        core.waiting.remove(&id);
        if core.closed && core.waiting.is_empty() {
            // A retired stream nobody waits on any more: stop reading it.
            drop(core);
            self.stop_reading();
            return;
        }
        // A stalled connection (a frozen store) never takes its queue: drop
        // the copies nobody waits for before they pile up.
        if core.queue.len() > 2 * core.waiting.len() + 64 {
            let Core { queue, waiting, .. } = &mut *core;
            queue.retain(|(id, _)| waiting.contains_key(id));
        }
    }

    /// Hands each answer of a stream message to its request; true when the
    /// stream is closed and nobody waits on it any more (stop reading).
    pub(super) fn deliver(&self, msg: BatchAnswers) -> bool {
        let mut answered = Vec::with_capacity(msg.request_ids.len());
        let done = {
            let mut core = lock(&self.core);
            self.answers
                .fetch_add(msg.request_ids.len() as u64, Ordering::Relaxed);
            for (id, resp) in msg.request_ids.into_iter().zip(msg.responses) {
                // None: timed out or cancelled meanwhile.
                if let Some(waiter) = core.waiting.remove(&id) {
                    answered.push((id, waiter, resp));
                }
            }
            core.closed && core.waiting.is_empty()
        };
        // Sizes and sends (which wake the requests) outside the lock.
        for (id, waiter, resp) in answered {
            let size = resp.len();
            let reply = if size > self.response_limit {
                // One answer over the limit fails its own request, not the
                // stream.
                Reply::Failed(Error::from(Failure::GrpcMessageTooLarge {
                    address: self.address.clone(),
                    limit: self.response_limit,
                    message: format!(
                        "the answer to request {id} of a BatchCommands stream is {size} bytes"
                    ),
                    source: None,
                }))
            } else {
                // A slice of the message this thread received (the answers
                // of one message share its buffer and its reference count),
                // decoded by the request on its own task: the reader only
                // routes, so it does not serialise every decode.
                Reply::Answer(resp)
            };
            let _ = waiter.tx.send(reply);
        }
        done
    }

    /// How many answers the stream has delivered so far.
    pub(super) fn answers(&self) -> u64 {
        self.answers.load(Ordering::Relaxed)
    }

    /// Takes a stalled stream out of service: no request is queued on it
    /// any more, the requests still queued are sent again elsewhere, and
    /// the written ones keep waiting for their answers until their own
    /// deadlines (a unary call in the same state would too). True when
    /// this call retired it (false: it had closed already).
    pub(super) fn retire(&self) -> bool {
        let (resend, waker, idle) = {
            let mut core = lock(&self.core);
            if core.closed {
                return false;
            }
            core.closed = true;
            let queued: Vec<u64> = core.queue.drain(..).map(|(id, _)| id).collect();
            let resend: Vec<Waiter> = queued
                .into_iter()
                .filter_map(|id| core.waiting.remove(&id))
                .collect();
            (resend, core.waker.take(), core.waiting.is_empty())
        };
        if idle {
            // Nothing written waits for an answer (the stream may never
            // have opened): stop reading it now.
            self.stop_reading();
        }
        tracing::debug!(
            "the BatchCommands stream to {} stopped answering; {} queued requests go elsewhere",
            self.address,
            resend.len()
        );
        if let Some(w) = waker {
            w.wake();
        }
        for waiter in resend {
            let _ = waiter.tx.send(Reply::Resend);
        }
        true
    }

    fn stop_reading(&self) {
        if let Some(reader) = lock(&self.reader).take() {
            reader.abort();
        }
    }

    /// Ends the stream: every waiting request fails, classified by whether
    /// the connection had taken it. `refused_at_start`: the status ended the
    /// call before the stream opened, so an `Unimplemented` one means the
    /// store has no BatchCommands (no handler ran: every request may go
    /// unary); mid-stream, `Unimplemented` is a failure like any other.
    pub(super) fn fail(&self, status: &tonic::Status, refused_at_start: bool) {
        let unsupported = refused_at_start && status.code() == tonic::Code::Unimplemented;
        let (waiting, waker) = {
            let mut core = lock(&self.core);
            core.closed = true;
            core.queue.clear();
            let mut waiting: Vec<(u64, Waiter)> = core.waiting.drain().collect();
            // In the order they were sent, not the map's: the requests wake
            // in a reproducible order (a simulation replays from its seed).
            waiting.sort_unstable_by_key(|(id, _)| *id);
            (waiting, core.waker.take())
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
                // Never taken by the connection: sent again, never failed.
                Reply::Resend
            };
            let _ = waiter.tx.send(reply);
        }
    }

    /// Closes the request half (the store finishes what it has) and stops
    /// reading.
    pub(super) fn close(&self) {
        let waker = {
            let mut core = lock(&self.core);
            core.closed = true;
            core.waker.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
        self.stop_reading();
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

/// One message of a stream's request body: the encoded entries of its
/// requests and their ids, in the same order (written out by
/// [`write_batch_request`](tikv_plan_proto::requests::write_batch_request)).
#[derive(Debug, Default, PartialEq)]
pub(super) struct OutgoingBatch {
    pub(super) entries: Vec<Vec<u8>>,
    pub(super) request_ids: Vec<u64>,
}

/// The request body of one stream: each poll takes what is queued.
pub(super) struct Outgoing {
    stream: Arc<BatchStream>,
    options: BatchOptions,
    timer: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl Outgoing {
    pub(super) fn new(stream: Arc<BatchStream>, options: BatchOptions) -> Self {
        Outgoing {
            stream,
            options,
            timer: None,
        }
    }
}

impl Stream for Outgoing {
    type Item = OutgoingBatch;

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
        let count = core.queue.len().min(max);
        let mut msg = OutgoingBatch {
            entries: Vec::with_capacity(count),
            request_ids: Vec::with_capacity(count),
        };
        while msg.entries.len() < max {
            let Some((id, entry)) = core.queue.pop_front() else {
                break;
            };
            if let Some(waiter) = core.waiting.get_mut(&id) {
                waiter.written = true;
                msg.entries.push(entry);
                msg.request_ids.push(id);
            }
        }
        if msg.entries.is_empty() {
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::kvrpcpb;
    use futures::{FutureExt, StreamExt};
    use std::time::Duration;

    fn get(key: &[u8]) -> Vec<u8> {
        let request = kvrpcpb::RawGetRequest {
            key: key.to_vec(),
            ..Default::default()
        };
        tikv_plan_proto::requests::encode_batch_entry(&request).unwrap()
    }

    #[test]
    fn request_ids_spread_over_the_waiting_table() {
        use std::hash::BuildHasher;
        let build = BuildHasherDefault::<IdHasher>::default();
        // A run of ids, as one stream makes them: each lands in its own
        // slot of a table of that size, and the high bits the table's
        // control bytes keep vary.
        let hashes: Vec<u64> = (5_000u64..6_024).map(|id| build.hash_one(id)).collect();
        let slots: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 1023).collect();
        assert_eq!(slots.len(), 1024);
        let tops: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(tops.len() > 100, "{} distinct high bits", tops.len());
    }

    fn outgoing(stream: &Arc<BatchStream>, max_batch_size: usize, max_wait: Duration) -> Outgoing {
        Outgoing {
            stream: stream.clone(),
            options: BatchOptions {
                max_batch_size,
                max_streams: 1,
                max_wait,
                ..BatchOptions::default()
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

    fn now_or_never(out: &mut Outgoing) -> Option<Option<OutgoingBatch>> {
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
        assert_eq!(msg.entries, vec![get(b"k")], "the request as it was queued");
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

    /// A stream with requests 1..=`queued` queued, of which the connection
    /// took the first `batch` (one message).
    fn partly_written(
        batch: usize,
        queued: u64,
    ) -> (Arc<BatchStream>, Outgoing, Vec<oneshot::Receiver<Reply>>) {
        let stream = BatchStream::new("s".into());
        let mut out = outgoing(&stream, batch, Duration::ZERO);
        let rx = queue(&stream, 1, queued);
        let written: Vec<u64> = (1..=batch as u64).collect();
        assert_eq!(
            now_or_never(&mut out).flatten().unwrap().request_ids,
            written
        );
        (stream, out, rx)
    }

    #[test]
    fn a_failed_stream_tells_written_from_queued_requests() {
        let (stream, _out, mut rx) = partly_written(1, 2);
        // A cause that alone would read as "not sent" (a connect error).
        let mut status = tonic::Status::unavailable("gone");
        status.set_source(Arc::new(tonic::ConnectError(Box::new(
            std::io::Error::from(std::io::ErrorKind::ConnectionReset),
        ))));
        stream.fail(&status, false);
        let classify = |reply: Reply| match reply {
            Reply::Failed(e) => crate::classify::classify_dispatch_error(&e),
            _ => panic!("a failure"),
        };
        let queued = rx.pop().unwrap().try_recv();
        let written = rx.pop().unwrap().try_recv().ok().map(classify);
        assert_eq!(written, Some(crate::classify::DispatchFailure::Transport));
        assert!(
            matches!(queued, Ok(Reply::Resend)),
            "a request the connection never took is sent again, not failed"
        );
        assert!(stream.is_closed());
        assert_eq!(stream.in_flight(), 0);
    }

    #[test]
    fn a_retired_stream_resends_its_queue_and_keeps_its_written_requests() {
        let (stream, mut out, mut rx) = partly_written(2, 3);
        assert!(stream.retire());
        assert!(stream.is_closed(), "no new request is queued on it");
        assert!(matches!(rx.pop().unwrap().try_recv(), Ok(Reply::Resend)));
        assert_eq!(stream.in_flight(), 2, "the written ones still wait");
        assert_eq!(now_or_never(&mut out), Some(None), "its body ends");
        // A late answer still reaches its request.
        stream.deliver(BatchAnswers {
            request_ids: vec![2],
            responses: vec![Bytes::from_static(b"an answer")],
            ..BatchAnswers::default()
        });
        assert!(matches!(rx.pop().unwrap().try_recv(), Ok(Reply::Answer(_))));
        assert_eq!(stream.answers(), 1);
    }

    #[test]
    fn unimplemented_mid_stream_fails_what_was_written() {
        // Only a call refused at its start means "no BatchCommands"; later
        // (a proxy's answer, say) a written request may have been served.
        let (stream, _out, mut rx) = partly_written(1, 2);
        stream.fail(&tonic::Status::unimplemented("from a proxy"), false);
        assert!(matches!(rx.pop().unwrap().try_recv(), Ok(Reply::Resend)));
        assert!(matches!(rx.pop().unwrap().try_recv(), Ok(Reply::Failed(_))));
    }

    #[test]
    fn an_unimplemented_stream_sends_everyone_to_unary() {
        let stream = BatchStream::new("s".into());
        let mut rx = queue(&stream, 1, 1);
        stream.fail(&tonic::Status::unimplemented("no"), true);
        assert!(matches!(
            rx.pop().unwrap().try_recv(),
            Ok(Reply::Unsupported)
        ));
    }
}
