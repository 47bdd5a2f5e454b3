//! client-rust's traits that say what shape a request has: one key
//! ([`SingleKey`]), a key range ([`RangeRequest`]), or a range read in
//! batches ([`NextBatch`], [`HasNextBatch`]).

use crate::proto::kvrpcpb;
use crate::store::Request;

use super::base::Dispatch;
use super::traits::KvRequest;

/// A request about one key.
pub trait SingleKey {
    /// The key, as sent (keyspace-encoded when in a keyspace).
    #[allow(clippy::ptr_arg)]
    fn key(&self) -> &Vec<u8>;
}

/// A request over a key range.
pub trait RangeRequest: Request {
    /// True when the range is walked from its end down.
    fn is_reverse(&self) -> bool {
        false
    }
}

/// A request that can continue with the next batch of its range.
pub trait NextBatch {
    /// Restricts the request to `range` (`[start, end)`, as sent).
    fn next_batch(&mut self, range: (Vec<u8>, Vec<u8>));
}

/// A response that says which range is left to read, if any (implemented
/// by requests that page through a range themselves; tikv-plan's raw scans
/// page in [`RawClient::scan_stream`](crate::RawClient::scan_stream)).
pub trait HasNextBatch {
    /// The range left, `(start, end)` as the request takes it.
    fn has_next_batch(&self) -> Option<(Vec<u8>, Vec<u8>)>;
}

macro_rules! single_key {
    ($($req:ty),*) => {$(
        impl SingleKey for $req {
            fn key(&self) -> &Vec<u8> {
                &self.key
            }
        }
    )*};
}

single_key!(
    kvrpcpb::RawGetRequest,
    kvrpcpb::RawPutRequest,
    kvrpcpb::RawDeleteRequest,
    kvrpcpb::RawCasRequest,
    kvrpcpb::RawGetKeyTtlRequest
);

impl RangeRequest for kvrpcpb::RawScanRequest {
    fn is_reverse(&self) -> bool {
        self.reverse
    }
}

impl RangeRequest for kvrpcpb::RawBatchScanRequest {
    fn is_reverse(&self) -> bool {
        self.reverse
    }
}

impl RangeRequest for kvrpcpb::RawDeleteRangeRequest {}

impl RangeRequest for kvrpcpb::RawChecksumRequest {}

impl NextBatch for kvrpcpb::RawScanRequest {
    fn next_batch(&mut self, (start_key, end_key): (Vec<u8>, Vec<u8>)) {
        self.start_key = start_key;
        self.end_key = end_key;
    }
}

impl NextBatch for kvrpcpb::ScanLockRequest {
    /// Moves the scan's start to `range.0`; a non-empty `range.1` also
    /// moves its end (an empty one keeps it: the next page of a lock scan
    /// ends where the scan does).
    fn next_batch(&mut self, (start_key, end_key): (Vec<u8>, Vec<u8>)) {
        self.start_key = start_key;
        if !end_key.is_empty() {
            self.end_key = end_key;
        }
    }
}

/// The page after a lock scan's answer starts just past its last lock.
impl HasNextBatch for kvrpcpb::ScanLockResponse {
    fn has_next_batch(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        self.locks.last().map(|lock| {
            let mut next = lock.key.clone();
            next.push(0);
            (next, Vec::new())
        })
    }
}

impl<Req: KvRequest + NextBatch> NextBatch for Dispatch<Req> {
    fn next_batch(&mut self, range: (Vec<u8>, Vec<u8>)) {
        self.request.next_batch(range);
    }
}
