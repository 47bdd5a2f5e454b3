//! The typed gRPC path: a request is sent with its own response type (no
//! `Box<dyn Any>`) as one unary gRPC call over tonic's HTTP/2 channel.
//!
//! The call is made at the HTTP level rather than through tonic's generic
//! `Grpc::unary`: the request is encoded once, with its 5-byte gRPC
//! message prefix, into a buffer of its exact length that becomes the HTTP
//! body as it is (tonic would copy it into an 8 KiB buffer of its own), and
//! a response that arrives in one HTTP/2 DATA frame, as nearly all do, is
//! decoded straight from that frame (tonic would copy it into another 8
//! KiB buffer). Errors keep tonic's meaning: transport failures become a
//! [`Status`] through [`Status::from_error`], as tonic makes them, and the
//! gRPC status comes from the headers or trailers as tonic reads it, so the
//! classification of a failed call (sent or not, timed out or not) is the
//! same on both paths.

use std::future::{poll_fn, Future};
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use http_body::Frame;
use prost::bytes::{Bytes, BytesMut};
use tikv_plan_proto::answers::decode_response;
use tikv_plan_proto::methods::{KvMethod, KvResponse};
use tonic::codegen::http::{self, HeaderMap, HeaderName, HeaderValue, Method, Uri, Version};
use tonic::codegen::{Body as HttpBody, Service};
use tonic::metadata::{MetadataMap, GRPC_CONTENT_TYPE};
use tonic::transport::Channel;
use tonic::{Code, Status};

use crate::config::{DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE, DEFAULT_REQUEST_TIMEOUT};
use crate::Result;

/// A gRPC channel to one store, as the typed path uses it: tonic's channel,
/// the largest response the path decodes from it, and the request timeout
/// that also bounds a response's body.
#[derive(Debug, Clone)]
pub struct GrpcChannel {
    channel: Channel,
    max_decoding_message_size: usize,
    timeout: Duration,
    /// The address every call asks the store to forward it to
    /// (`tikv-forwarded-host`), when the channel goes through a proxy.
    forwarded_host: Option<HeaderValue>,
}

impl GrpcChannel {
    /// The typed path over `channel`, decoding responses of up to
    /// `Config::grpc_max_decoding_message_size`'s default.
    pub fn new(channel: Channel) -> Self {
        GrpcChannel {
            channel,
            max_decoding_message_size: DEFAULT_GRPC_MAX_DECODING_MESSAGE_SIZE,
            timeout: DEFAULT_REQUEST_TIMEOUT,
            forwarded_host: None,
        }
    }

    /// Every call on this channel asks its store to forward it to `host`
    /// (the gRPC metadata `tikv-forwarded-host`).
    pub(crate) fn forwarded_to(mut self, host: HeaderValue) -> Self {
        self.forwarded_host = Some(host);
        self
    }

    /// Sets the request timeout (`Config::timeout`'s default until set).
    /// tonic's timeouts, the channel's and `grpc-timeout`, end when the
    /// response's headers arrive; a body that stalls after them fails the
    /// call once it has stalled this long, as a client timeout.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the largest response (in bytes, as encoded) the path decodes; a
    /// larger one fails with [`Failure::GrpcMessageTooLarge`](crate::Failure::GrpcMessageTooLarge).
    pub fn max_decoding_message_size(mut self, limit: usize) -> Self {
        self.max_decoding_message_size = limit;
        self
    }
}

/// The length of the prefix of a gRPC message: a compression flag and a
/// big-endian `u32` length.
const PREFIX_LEN: usize = 5;

/// Responses longer than this are decoded from the received `Bytes`, shorter
/// ones from a slice of them. prost takes each bytes field (a key, a value)
/// through `copy_to_bytes` before copying it into the field's `Vec`: on a
/// slice that is one more allocation and copy per field, on `Bytes` a
/// shared reference, after making the buffer shareable once (itself an
/// allocation when hyper's buffer is not shared yet). A short response has
/// a field or two (a get's value); a long one has many (a batch's pairs) or
/// a large one, whose extra copy would cost more than the sharing.
const DECODE_SHARED_ABOVE: usize = 512;

/// Sends `request` on the typed path, with `timeout` as its `grpc-timeout`
/// (none: the channel's own timeout bounds it). Either bounds the wait for
/// the response's headers, as tonic's timeouts do; a body that stalls after
/// them is bounded by the same timeout again, from the stall (a response's
/// body and trailers normally follow its headers at once, so the fast path
/// sets no timer for it); `Some` always (the shape
/// [`TypedCall::dispatch_typed`](crate::request::TypedCall::dispatch_typed)
/// returns, so that method is this future, not a wrapper around it). The
/// request is only read: it stays the plan's for a retry. One `async fn`
/// for the whole call: each nested future would be one more copy of the
/// RPC's state when it starts.
pub(crate) async fn send_typed<R: KvMethod>(
    request: &R,
    grpc: &GrpcChannel,
    timeout: Option<Duration>,
) -> Option<Result<R::Response>> {
    let http_request = match encode_request(request, R::PATH, timeout, grpc.forwarded_host.as_ref())
    {
        Ok(http_request) => http_request,
        Err(status) => return Some(Err(status.into())),
    };
    let mut channel = grpc.channel.clone();
    let result = match poll_fn(|cx| channel.poll_ready(cx)).await {
        // tonic's own words for a channel that cannot take a call.
        Err(e) => Err(Status::unknown(format!("Service was not ready: {e}"))),
        Ok(()) => match channel.call(http_request).await {
            Err(e) => Err(Status::from_error(e.into())),
            Ok(response) => {
                let stall_bound = timeout.unwrap_or(grpc.timeout);
                read_reply(response, grpc.max_decoding_message_size, stall_bound).await
            }
        },
    };
    Some(result.map_err(Into::into))
}

/// The HTTP request of one unary call: `POST path` with the gRPC headers
/// and the message, prefixed, as its whole body.
fn encode_request<M: prost::Message>(
    message: &M,
    path: &'static str,
    timeout: Option<Duration>,
    forwarded_host: Option<&HeaderValue>,
) -> std::result::Result<http::Request<tonic::body::Body>, Status> {
    let length = message.encoded_len();
    let prefix_length = u32::try_from(length).map_err(|_| {
        Status::out_of_range(format!(
            "the request encodes to {length} bytes, more than a gRPC message can carry (4 GiB); send it in smaller batches"
        ))
    })?;
    let mut frame = Vec::with_capacity(PREFIX_LEN + length);
    frame.push(0);
    frame.extend_from_slice(&prefix_length.to_be_bytes());
    message.encode_raw(&mut frame);
    let mut request =
        http::Request::new(tonic::body::Body::new(OneChunk(Some(Bytes::from(frame)))));
    *request.method_mut() = Method::POST;
    *request.version_mut() = Version::HTTP_2;
    *request.uri_mut() = method_uri(path);
    let headers = request.headers_mut();
    headers.insert(http::header::TE, HeaderValue::from_static("trailers"));
    headers.insert(http::header::CONTENT_TYPE, GRPC_CONTENT_TYPE);
    if let Some(timeout) = timeout {
        headers.insert(GRPC_TIMEOUT, timeout_header(timeout));
    }
    if let Some(host) = forwarded_host {
        headers.insert(FORWARDED_HOST_HEADER, host.clone());
    }
    Ok(request)
}

/// The URI of a method's path, parsed once per thread and path.
fn method_uri(path: &'static str) -> Uri {
    thread_local! {
        static URIS: std::cell::RefCell<Vec<(&'static str, Uri)>> =
            const { std::cell::RefCell::new(Vec::new()) };
    }
    URIS.with(|uris| {
        let mut uris = uris.borrow_mut();
        if let Some((_, uri)) = uris.iter().find(|(of, _)| std::ptr::eq(*of, path)) {
            return uri.clone();
        }
        let uri = Uri::from_static(path);
        uris.push((path, uri.clone()));
        uri
    })
}

/// A request body of one chunk.
struct OneChunk(Option<Bytes>);

impl HttpBody for OneChunk {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        _cx: &mut Context<'_>,
    ) -> Poll<Option<std::result::Result<Frame<Bytes>, Self::Error>>> {
        Poll::Ready(self.0.take().map(|chunk| Ok(Frame::data(chunk))))
    }

    fn is_end_stream(&self) -> bool {
        self.0.is_none()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.0.as_ref().map_or(0, |chunk| chunk.len() as u64))
    }
}

/// Reads a unary call's response: its one message, then its status.
async fn read_reply<M: KvResponse>(
    response: http::Response<tonic::body::Body>,
    limit: usize,
    stall_bound: Duration,
) -> std::result::Result<M, Status> {
    let (mut parts, mut body) = response.into_parts();
    // A trailers-only response: the status is in the headers, no body.
    let headers_status = grpc_status(&mut parts.headers);
    if let Some(Err(status)) = headers_status {
        return Err(status);
    }
    if let Some(encoding) = parts.headers.get(&GRPC_ENCODING) {
        if encoding.as_bytes() != b"identity" {
            return Err(Status::unimplemented(format!(
                "the store compressed its response ({encoding:?}) although this client asks for none"
            )));
        }
    }
    // A response that is not HTTP 200 without a gRPC status (a proxy's
    // error page, say) has no gRPC message: its status decides below.
    let http_ok = parts.status == http::StatusCode::OK;
    let mut message = Message::default();
    let mut trailers = None;
    // Armed only when the body is not all there at once (boxed: the fast
    // path's future stays small).
    let mut stalled: Option<Pin<Box<tokio::time::Sleep>>> = None;
    loop {
        let next = poll_fn(|cx| match Pin::new(&mut body).poll_frame(cx) {
            Poll::Ready(frame) => Poll::Ready(frame.transpose()),
            Poll::Pending => {
                let timer =
                    stalled.get_or_insert_with(|| Box::pin(tokio::time::sleep(stall_bound)));
                // What tonic's own timeout reports: a client timeout.
                timer
                    .as_mut()
                    .poll(cx)
                    .map(|()| Err(Status::from_error(Box::new(tonic::TimeoutExpired(())))))
            }
        });
        let Some(frame) = next.await? else { break };
        match frame.into_data() {
            Ok(chunk) if http_ok => message.push(chunk, limit)?,
            Ok(_) => {}
            Err(frame) => {
                if let Ok(more) = frame.into_trailers() {
                    match &mut trailers {
                        None => trailers = Some(more),
                        Some(all) => all.extend(more),
                    }
                }
            }
        }
    }
    if headers_status.is_none() {
        final_status(trailers.as_mut(), parts.status)?;
    }
    message.decode()
}

/// The bytes of a response's first message as they arrive: the first DATA
/// frame kept as it is, later ones appended to a copy only if the message
/// spans frames.
#[derive(Default)]
struct Message {
    first: Bytes,
    joined: Option<BytesMut>,
    /// The message's length, once its prefix has arrived.
    length: Option<usize>,
}

impl Message {
    fn push(&mut self, chunk: Bytes, limit: usize) -> std::result::Result<(), Status> {
        if let Some(length) = self.length {
            if self.received() >= PREFIX_LEN + length {
                // A second message in a unary response: tonic ignores it too.
                return Ok(());
            }
        }
        if self.first.is_empty() && self.joined.is_none() {
            self.first = chunk;
        } else {
            let first = &self.first;
            let whole = self.length.map_or(0, |length| PREFIX_LEN + length);
            let joined = self.joined.get_or_insert_with(|| {
                let mut joined = BytesMut::with_capacity(whole.max(first.len() + chunk.len()));
                joined.extend_from_slice(first);
                joined
            });
            joined.extend_from_slice(&chunk);
        }
        if self.length.is_none() && self.received() >= PREFIX_LEN {
            let bytes = self.bytes();
            if bytes[0] != 0 {
                return Err(Status::internal(format!(
                    "protocol error: the store sent a message with compression flag {} although this client asks for no compression",
                    bytes[0]
                )));
            }
            let length = u32::from_be_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]) as usize;
            if length > limit {
                // tonic's wording, which `Failure::GrpcMessageTooLarge` reads.
                return Err(Status::out_of_range(format!(
                    "Error, decoded message length too large: found {length} bytes, the limit is: {limit} bytes"
                )));
            }
            if let Some(joined) = &mut self.joined {
                joined.reserve((PREFIX_LEN + length).saturating_sub(joined.len()));
            }
            self.length = Some(length);
        }
        Ok(())
    }

    fn received(&self) -> usize {
        self.joined.as_ref().map_or(self.first.len(), BytesMut::len)
    }

    fn bytes(&self) -> &[u8] {
        match &self.joined {
            Some(joined) => joined,
            None => &self.first,
        }
    }

    /// The message, decoded as an `M` (its pairs' vector sized first).
    fn decode<M: KvResponse>(self) -> std::result::Result<M, Status> {
        let Some(length) = self.length else {
            return Err(if self.received() == 0 {
                Status::internal("Missing response message.")
            } else {
                Status::internal("Unexpected EOF decoding stream.")
            });
        };
        let end = PREFIX_LEN + length;
        if self.received() < end {
            return Err(Status::internal("Unexpected EOF decoding stream."));
        }
        let decoded = if length > DECODE_SHARED_ABOVE {
            let whole = match self.joined {
                Some(joined) => joined.freeze(),
                None => self.first,
            };
            decode_response::<M, _>(whole.slice(PREFIX_LEN..end))
        } else {
            decode_response::<M, _>(self.bytes().get(PREFIX_LEN..end).unwrap_or_default())
        };
        decoded.map_err(|e| Status::internal(e.to_string()))
    }
}

/// The gRPC status `headers` carry, if any: `Ok(())` for OK (read without
/// building a [`Status`], as on every successful call), the error
/// otherwise. A `grpc-status-details-bin` that is not valid base64 is
/// dropped first: [`Status::from_header_map`] would panic on it.
fn grpc_status(headers: &mut HeaderMap) -> Option<std::result::Result<(), Status>> {
    if headers.get(&GRPC_STATUS)?.as_bytes() == b"0" {
        return Some(Ok(()));
    }
    if let Some(details) = headers.remove(GRPC_STATUS_DETAILS) {
        let mut alone = HeaderMap::new();
        alone.insert(GRPC_STATUS_DETAILS, details.clone());
        let valid = MetadataMap::from_headers(alone)
            .get_bin(GRPC_STATUS_DETAILS.as_str())
            .is_some_and(|value| value.to_bytes().is_ok());
        if valid {
            headers.insert(GRPC_STATUS_DETAILS, details);
        }
    }
    match Status::from_header_map(headers)? {
        status if status.code() == Code::Ok => Some(Ok(())),
        status => Some(Err(status)),
    }
}

/// The status of a response that did not carry it in its headers: the
/// trailers' `grpc-status`, or, without one, what the HTTP status means
/// (the mapping of gRPC's "HTTP to gRPC Status Code Mapping").
fn final_status(
    trailers: Option<&mut HeaderMap>,
    http_status: http::StatusCode,
) -> std::result::Result<(), Status> {
    if let Some(status) = trailers.and_then(grpc_status) {
        return status;
    }
    let code =
        match http_status {
            http::StatusCode::BAD_REQUEST => Code::Internal,
            http::StatusCode::UNAUTHORIZED => Code::Unauthenticated,
            http::StatusCode::FORBIDDEN => Code::PermissionDenied,
            http::StatusCode::NOT_FOUND => Code::Unimplemented,
            http::StatusCode::TOO_MANY_REQUESTS
            | http::StatusCode::BAD_GATEWAY
            | http::StatusCode::SERVICE_UNAVAILABLE
            | http::StatusCode::GATEWAY_TIMEOUT => Code::Unavailable,
            http::StatusCode::OK => return Err(Status::unknown(
                "protocol error: the response ended without a grpc-status (cut short on the way?)",
            )),
            _ => Code::Unknown,
        };
    Err(Status::new(
        code,
        format!(
            "the response had no grpc-status; HTTP status {} maps to {code:?}",
            http_status.as_u16()
        ),
    ))
}

/// The `grpc-timeout` header of `timeout`, formatted once per thread for
/// each distinct timeout: nearly every RPC carries the client's own
/// timeout, and formatting it cost more than the rest of the header work.
fn timeout_header(timeout: Duration) -> HeaderValue {
    thread_local! {
        static LAST: std::cell::RefCell<Option<(Duration, HeaderValue)>> =
            const { std::cell::RefCell::new(None) };
    }
    if let Some(value) = LAST.with(|last| match &*last.borrow() {
        Some((of, value)) if *of == timeout => Some(value.clone()),
        _ => None,
    }) {
        return value;
    }
    let value = format_timeout(timeout);
    LAST.with(|last| *last.borrow_mut() = Some((timeout, value.clone())));
    value
}

/// `timeout` as gRPC's `grpc-timeout` value: at most 8 digits and a unit,
/// the finest unit that fits, rounded down (as tonic sends it).
fn format_timeout(timeout: Duration) -> HeaderValue {
    const MAX_DIGITS: u128 = 99_999_999;
    let nanos = timeout.as_nanos();
    let (value, unit) = if nanos <= MAX_DIGITS {
        (nanos, "n")
    } else if nanos / 1_000 <= MAX_DIGITS {
        (nanos / 1_000, "u")
    } else if nanos / 1_000_000 <= MAX_DIGITS {
        (nanos / 1_000_000, "m")
    } else if nanos / 1_000_000_000 <= MAX_DIGITS {
        (nanos / 1_000_000_000, "S")
    } else if nanos / 60_000_000_000 <= MAX_DIGITS {
        (nanos / 60_000_000_000, "M")
    } else {
        ((nanos / 3_600_000_000_000).min(MAX_DIGITS), "H")
    };
    // Digits and one ASCII letter: always a valid header value.
    HeaderValue::try_from(format!("{value}{unit}")).unwrap_or(HeaderValue::from_static("99999999H"))
}

/// The header that carries a call's timeout.
const GRPC_TIMEOUT: HeaderName = HeaderName::from_static("grpc-timeout");

/// `tikv-forwarded-host` as a header name.
const FORWARDED_HOST_HEADER: HeaderName = HeaderName::from_static(super::request::FORWARDED_HOST);

/// The header of a call's status code.
const GRPC_STATUS: HeaderName = HeaderName::from_static("grpc-status");

/// The header of a status's details (base64).
const GRPC_STATUS_DETAILS: HeaderName = HeaderName::from_static("grpc-status-details-bin");

/// The header naming a message's compression.
const GRPC_ENCODING: HeaderName = HeaderName::from_static("grpc-encoding");

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::kvrpcpb;

    /// The `grpc-timeout` header is the one tonic writes, for the timeout
    /// it was cached for and not for another, at every unit.
    #[test]
    fn the_timeout_header_matches_tonics() {
        let timeouts = [
            Duration::from_millis(2000),
            Duration::from_millis(2000),
            Duration::from_millis(150),
            Duration::from_nanos(1),
            Duration::from_nanos(99_999_999),
            Duration::from_nanos(100_000_001),
            Duration::from_secs(99_999),
            Duration::from_secs(100_000_000),
            Duration::from_secs(7_000_000_000),
            Duration::from_millis(1),
        ];
        for timeout in timeouts {
            let mut theirs = tonic::Request::new(());
            theirs.set_timeout(timeout);
            let theirs = theirs
                .metadata()
                .get(GRPC_TIMEOUT.as_str())
                .map(|v| v.to_str().ok());
            let ours = timeout_header(timeout);
            assert_eq!(Some(ours.to_str().ok()), theirs, "{timeout:?}");
        }
    }

    fn framed(message: &kvrpcpb::RawGetResponse) -> Vec<u8> {
        let mut bytes = vec![0];
        bytes.extend_from_slice(&(prost::Message::encoded_len(message) as u32).to_be_bytes());
        prost::Message::encode_raw(message, &mut bytes);
        bytes
    }

    /// A message is decoded whether it arrives in one DATA frame or cut
    /// anywhere across several, and bytes after it are ignored.
    #[test]
    fn a_message_is_decoded_however_it_is_cut() {
        let reply = kvrpcpb::RawGetResponse {
            value: vec![7; 300],
            not_found: false,
            ..Default::default()
        };
        let bytes = framed(&reply);
        for cut in 0..=bytes.len() {
            for second_cut in cut..=bytes.len() {
                let mut message = Message::default();
                for chunk in [&bytes[..cut], &bytes[cut..second_cut], &bytes[second_cut..]] {
                    if !chunk.is_empty() {
                        message.push(Bytes::copy_from_slice(chunk), 1024).unwrap();
                    }
                }
                message
                    .push(Bytes::from_static(b"\0\0\0\0\x01x"), 1024)
                    .unwrap();
                let decoded: kvrpcpb::RawGetResponse = message.decode().unwrap();
                assert_eq!(decoded, reply, "cut at {cut} and {second_cut}");
            }
        }
    }

    /// A message over the limit, a compressed one, a truncated one and a
    /// missing one are refused, the first with tonic's wording (which the
    /// crate's `GrpcMessageTooLarge` reads back).
    #[test]
    fn bad_messages_are_refused() {
        let reply = kvrpcpb::RawGetResponse {
            value: vec![1; 100],
            ..Default::default()
        };
        let bytes = framed(&reply);

        let mut message = Message::default();
        let status = message.push(Bytes::from(bytes.clone()), 50).unwrap_err();
        assert_eq!(status.code(), Code::OutOfRange);
        let error = crate::Error::from(status);
        assert!(
            matches!(
                error.failure(),
                Some(crate::Failure::GrpcMessageTooLarge { limit: 50, .. })
            ),
            "{error:?}"
        );

        let mut compressed = bytes.clone();
        compressed[0] = 1;
        let status = Message::default()
            .push(Bytes::from(compressed), 1024)
            .unwrap_err();
        assert_eq!(status.code(), Code::Internal);

        let mut message = Message::default();
        message
            .push(Bytes::copy_from_slice(&bytes[..bytes.len() - 1]), 1024)
            .unwrap();
        let status = message.decode::<kvrpcpb::RawGetResponse>().unwrap_err();
        assert_eq!(status.message(), "Unexpected EOF decoding stream.");

        let status = Message::default()
            .decode::<kvrpcpb::RawGetResponse>()
            .unwrap_err();
        assert_eq!(status.message(), "Missing response message.");
    }

    /// Without a `grpc-status` trailer the HTTP status decides, as gRPC's
    /// mapping says; with one, the trailer does.
    #[test]
    fn the_final_status_follows_trailers_then_http() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("14"));
        trailers.insert("grpc-message", HeaderValue::from_static("store%20down"));
        let status = final_status(Some(&mut trailers), http::StatusCode::OK).unwrap_err();
        assert_eq!(status.code(), Code::Unavailable);
        assert_eq!(status.message(), "store down");
        trailers.insert("grpc-status", HeaderValue::from_static("0"));
        assert!(final_status(Some(&mut trailers), http::StatusCode::OK).is_ok());
        for (http_status, code) in [
            (http::StatusCode::OK, Code::Unknown),
            (http::StatusCode::BAD_REQUEST, Code::Internal),
            (http::StatusCode::NOT_FOUND, Code::Unimplemented),
            (http::StatusCode::SERVICE_UNAVAILABLE, Code::Unavailable),
            (http::StatusCode::IM_A_TEAPOT, Code::Unknown),
        ] {
            let status = final_status(None, http_status).unwrap_err();
            assert_eq!(status.code(), code, "{http_status}");
        }
    }

    /// A status whose details are not base64 keeps its code and message
    /// (tonic's `Status::from_header_map` would panic on it); valid details
    /// are kept.
    #[test]
    fn bad_status_details_do_not_panic() {
        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("13"));
        trailers.insert("grpc-message", HeaderValue::from_static("broken"));
        trailers.insert(
            GRPC_STATUS_DETAILS,
            HeaderValue::from_static("%%%not base64"),
        );
        let status = final_status(Some(&mut trailers), http::StatusCode::OK).unwrap_err();
        assert_eq!(status.code(), Code::Internal);
        assert_eq!(status.message(), "broken");
        assert!(status.details().is_empty());

        let mut trailers = HeaderMap::new();
        trailers.insert("grpc-status", HeaderValue::from_static("13"));
        trailers.insert(GRPC_STATUS_DETAILS, HeaderValue::from_static("AQID"));
        let status = final_status(Some(&mut trailers), http::StatusCode::OK).unwrap_err();
        assert_eq!(status.details(), &[1, 2, 3]);
    }

    /// The request is the message, prefixed, as the whole body, with the
    /// gRPC headers.
    #[test]
    fn the_request_is_framed_with_grpc_headers() {
        let request = kvrpcpb::RawGetRequest {
            key: b"k".to_vec(),
            ..Default::default()
        };
        let http_request = encode_request(
            &request,
            kvrpcpb::RawGetRequest::PATH,
            Some(Duration::from_secs(2)),
            None,
        )
        .unwrap();
        assert_eq!(http_request.uri().path(), "/tikvpb.Tikv/RawGet");
        assert_eq!(http_request.method(), Method::POST);
        let headers = http_request.headers();
        assert_eq!(headers.get("te").unwrap(), "trailers");
        assert_eq!(headers.get("content-type").unwrap(), "application/grpc");
        assert_eq!(headers.get(&GRPC_TIMEOUT).unwrap(), "2000000u");
        let hint = HttpBody::size_hint(http_request.body());
        assert_eq!(
            hint.exact(),
            Some((PREFIX_LEN + prost::Message::encoded_len(&request)) as u64)
        );
    }
}
