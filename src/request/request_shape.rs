//! client-rust's traits that say what shape a request has: one key
//! ([`SingleKey`]), a key range ([`RangeRequest`]), or a range read in
//! batches ([`NextBatch`], [`HasNextBatch`]).

use crate::proto::kvrpcpb;
use crate::store::Request;

use super::plan::ResponseWithShard;

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

/// A response that says which range is left to read, if any.
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

/// A scan piece that returned as many pairs as asked may have more: the rest
/// starts after its last key (forward) or ends at it (reverse). The shard is
/// the piece `(start_key, end_key)` as the request took it.
impl HasNextBatch for ResponseWithShard<kvrpcpb::RawScanResponse, (Vec<u8>, Vec<u8>)> {
    fn has_next_batch(&self) -> Option<(Vec<u8>, Vec<u8>)> {
        let last = self.0.kvs.last()?;
        let (start, end) = &self.1;
        // The request's own convention: forward `start <= key < end`,
        // reverse `end <= key < start`; `start > end` (or an empty `end`
        // forward) tells which.
        let reverse = !end.is_empty() && start > end;
        if reverse {
            Some((last.key.clone(), end.clone()))
        } else {
            let mut after = last.key.clone();
            after.push(0);
            Some((after, end.clone()))
        }
    }
}
