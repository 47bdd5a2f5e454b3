//! Request constructors with client-rust's signatures (`tikv_client::raw_lowering`):
//! each turns the client's key types into the wire request, for plans built
//! by hand with [`PlanBuilder`](crate::request::PlanBuilder).
//!
//! ```
//! use tikv_plan::raw_lowering::new_raw_get_request;
//!
//! let request = new_raw_get_request("k".to_owned().into(), None);
//! assert_eq!(request.key, b"k");
//! ```
//!
//! The plan each request takes, and what it yields:
//!
//! | request | plan after `retry_multi_region(backoff)` | result |
//! |---|---|---|
//! | get | `.merge(CollectSingle).post_process_default()` | `Option<Vec<u8>>` |
//! | get_key_ttl | `.merge(CollectSingle).post_process_default()` | `Option<u64>` (seconds) |
//! | compare_and_swap | `.merge(CollectSingle).post_process_default()` | `(Option<Vec<u8>>, bool)` |
//! | put, delete | `.merge(CollectSingle).post_process_default()` | `()` |
//! | batch_get | `.merge(Collect)` | `Vec<KvPair>` in key order |
//! | batch_put, batch_delete, delete_range | `.merge(CollectError).post_process_default()` | `()` |
//! | scan (one Region piece) | `.merge(Collect)` | `Vec<KvPair>` |
//! | batch_scan | `.merge(Collect)` | `Vec<KvPair>` in range order |
//! | coprocessor | `.preserve_shard()` first, then `.post_process_default()` | each Region's ranges with its answer |
//!
//! ```no_run
//! # #[cfg(feature = "mock")]
//! # async fn plans() -> tikv_plan::Result<()> {
//! use std::sync::Arc;
//! use tikv_plan::mock::MockPdClient;
//! use tikv_plan::raw_lowering::*;
//! use tikv_plan::request::{Collect, CollectError, CollectSingle, Plan, PlanBuilder, RoutingState};
//! use tikv_plan::{Backoff, Config};
//!
//! let pd = Arc::new(MockPdClient::new(vec![]));
//! let routing = Arc::new(RoutingState::new(&Config::default()));
//! let b = Backoff::no_jitter_backoff(2, 500, 10);
//! let builder = |req| PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, req).routing(routing.clone());
//!
//! let _: Option<Vec<u8>> = builder(new_raw_get_request("k".into(), None))
//!     .retry_multi_region(b.clone()).merge(CollectSingle).post_process_default()
//!     .plan().execute().await?;
//! let _: Option<u64> = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_get_key_ttl_request("k".into(), None))
//!     .retry_multi_region(b.clone()).merge(CollectSingle).post_process_default()
//!     .plan().execute().await?;
//! let _: (Option<Vec<u8>>, bool) = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_cas_request("k".into(), b"v".to_vec(), None, None))
//!     .retry_multi_region(b.clone()).merge(CollectSingle).post_process_default()
//!     .plan().execute().await?;
//! let _: () = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_put_request("k".into(), b"v".to_vec(), None, 0, false))
//!     .retry_multi_region(b.clone()).merge(CollectSingle).post_process_default()
//!     .plan().execute().await?;
//! let _: () = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_delete_request("k".into(), None, false))
//!     .retry_multi_region(b.clone()).merge(CollectSingle).post_process_default()
//!     .plan().execute().await?;
//! let _: Vec<tikv_plan::KvPair> = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_batch_get_request(["k".into()].into_iter(), None))
//!     .retry_multi_region(b.clone()).merge(Collect)
//!     .plan().execute().await?;
//! let _: () = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_batch_put_request(std::iter::empty(), std::iter::empty(), None, false))
//!     .retry_multi_region(b.clone()).merge(CollectError).post_process_default()
//!     .plan().execute().await?;
//! let _: () = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_batch_delete_request(std::iter::empty(), None))
//!     .retry_multi_region(b.clone()).merge(CollectError).post_process_default()
//!     .plan().execute().await?;
//! let _: () = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_delete_range_request(("a".to_owned().."z".to_owned()).into(), None))
//!     .retry_multi_region(b.clone()).merge(CollectError).post_process_default()
//!     .plan().execute().await?;
//! let _: Vec<tikv_plan::KvPair> = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_scan_request(("a".to_owned()..).into(), 10, false, false, None))
//!     .retry_multi_region(b.clone()).merge(Collect)
//!     .plan().execute().await?;
//! let _: Vec<tikv_plan::KvPair> = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, new_raw_batch_scan_request([("a".to_owned().."c".to_owned()).into()].into_iter(), 10, false, None))
//!     .retry_multi_region(b.clone()).merge(Collect)
//!     .plan().execute().await?;
//! # Ok(())
//! # }
//! ```

use std::ops::Range;
use std::sync::Arc;

use super::coprocessor::RawCoprocessorRequest;
use super::requests;
use crate::proto::{kvrpcpb, metapb};
use crate::{BoundRange, ColumnFamily, Key, KvPair, Value};

/// A range as the wire's `(start, end)`; an unbounded end is empty.
fn range_keys(range: BoundRange) -> (Vec<u8>, Vec<u8>) {
    let (start, end) = range.into_keys();
    (start.into(), end.map(Vec::from).unwrap_or_default())
}

fn cf(cf: Option<ColumnFamily>) -> Option<String> {
    ColumnFamily::request_field(cf)
}

/// A raw get of `key`.
pub fn new_raw_get_request(key: Key, cf_: Option<ColumnFamily>) -> kvrpcpb::RawGetRequest {
    requests::new_raw_get_request(key.into(), cf(cf_))
}

/// A raw get of the time-to-live of `key`.
pub fn new_raw_get_key_ttl_request(
    key: Key,
    cf_: Option<ColumnFamily>,
) -> kvrpcpb::RawGetKeyTtlRequest {
    requests::new_raw_get_key_ttl_request(key.into(), cf(cf_))
}

/// A raw batch get of `keys`.
pub fn new_raw_batch_get_request(
    keys: impl Iterator<Item = Key>,
    cf_: Option<ColumnFamily>,
) -> kvrpcpb::RawBatchGetRequest {
    requests::new_raw_batch_get_request(keys.map(Into::into).collect(), cf(cf_))
}

/// A raw put of `key` = `value`, with a time-to-live in seconds (0: none);
/// `atomic` marks it for use together with compare-and-swap.
pub fn new_raw_put_request(
    key: Key,
    value: Value,
    cf_: Option<ColumnFamily>,
    ttl: u64,
    atomic: bool,
) -> kvrpcpb::RawPutRequest {
    requests::new_raw_put_request(key.into(), value, cf(cf_), ttl, atomic)
}

/// A raw batch put of `pairs`, with one time-to-live per pair (or none):
/// `ttls` is read up to the number of pairs, so an endless iterator
/// (`std::iter::repeat(0)`) works.
pub fn new_raw_batch_put_request(
    pairs: impl Iterator<Item = KvPair>,
    ttls: impl Iterator<Item = u64>,
    cf_: Option<ColumnFamily>,
    atomic: bool,
) -> kvrpcpb::RawBatchPutRequest {
    let pairs: Vec<kvrpcpb::KvPair> = pairs.map(Into::into).collect();
    let ttls = ttls.take(pairs.len()).collect();
    requests::new_raw_batch_put_request(pairs, ttls, cf(cf_), atomic)
}

/// A raw delete of `key`.
pub fn new_raw_delete_request(
    key: Key,
    cf_: Option<ColumnFamily>,
    atomic: bool,
) -> kvrpcpb::RawDeleteRequest {
    requests::new_raw_delete_request(key.into(), cf(cf_), atomic)
}

/// A raw batch delete of `keys` (not for use with compare-and-swap).
pub fn new_raw_batch_delete_request(
    keys: impl Iterator<Item = Key>,
    cf_: Option<ColumnFamily>,
) -> kvrpcpb::RawBatchDeleteRequest {
    requests::new_raw_batch_delete_request(keys.map(Into::into).collect(), cf(cf_), false)
}

/// A raw delete of every key in `range`.
pub fn new_raw_delete_range_request(
    range: BoundRange,
    cf_: Option<ColumnFamily>,
) -> kvrpcpb::RawDeleteRangeRequest {
    let (start, end) = range_keys(range);
    requests::new_raw_delete_range_request(start, end, cf(cf_))
}

/// A raw scan of `range`, at most `limit` pairs. A reverse scan runs from
/// the range's end down to its start, as TiKV expects it.
pub fn new_raw_scan_request(
    range: BoundRange,
    limit: u32,
    key_only: bool,
    reverse: bool,
    cf_: Option<ColumnFamily>,
) -> kvrpcpb::RawScanRequest {
    let (start, end) = range_keys(range);
    let (start, end) = if reverse { (end, start) } else { (start, end) };
    requests::new_raw_scan_request(start, end, limit, key_only, reverse, cf(cf_))
}

/// A raw batch scan of `ranges`, at most `each_limit` pairs per range.
pub fn new_raw_batch_scan_request(
    ranges: impl Iterator<Item = BoundRange>,
    each_limit: u32,
    key_only: bool,
    cf_: Option<ColumnFamily>,
) -> kvrpcpb::RawBatchScanRequest {
    requests::new_raw_batch_scan_request(
        ranges.map(range_keys).collect(),
        each_limit,
        key_only,
        cf(cf_),
    )
}

/// A raw compare-and-swap: `key` becomes `value` if its value is
/// `previous_value` (`None`: if it does not exist).
pub fn new_cas_request(
    key: Key,
    value: Value,
    previous_value: Option<Value>,
    cf_: Option<ColumnFamily>,
) -> kvrpcpb::RawCasRequest {
    requests::new_cas_request(key.into(), value, previous_value, cf(cf_))
}

/// A raw coprocessor call of the plugin `copr_name` whose version meets
/// `copr_version_req` (semver), over `ranges`. `request_builder` makes the
/// plugin's request for each Region from the Region and the pieces of the
/// ranges inside it, when the request is sent there.
pub fn new_raw_coprocessor_request(
    copr_name: String,
    copr_version_req: String,
    ranges: impl Iterator<Item = BoundRange>,
    request_builder: impl Fn(metapb::Region, Vec<Range<Key>>) -> Vec<u8> + Send + Sync + 'static,
) -> RawCoprocessorRequest {
    RawCoprocessorRequest {
        inner: kvrpcpb::RawCoprocessorRequest {
            context: None,
            copr_name,
            copr_version_req,
            ranges: ranges
                .map(|range| {
                    let (start_key, end_key) = range_keys(range);
                    kvrpcpb::KeyRange { start_key, end_key }
                })
                .collect(),
            data: Vec::new(),
        },
        data_builder: Arc::new(request_builder),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_become_the_wire_bounds() {
        let scan = new_raw_scan_request(
            ("a".to_owned().."c".to_owned()).into(),
            7,
            true,
            false,
            Some(ColumnFamily::Write),
        );
        assert_eq!(
            (scan.start_key.as_slice(), scan.end_key.as_slice()),
            (&b"a"[..], &b"c"[..])
        );
        assert_eq!(
            (scan.limit, scan.key_only, scan.cf.as_str()),
            (7, true, "write")
        );
        let reverse = new_raw_scan_request(
            ("a".to_owned().."c".to_owned()).into(),
            7,
            false,
            true,
            None,
        );
        assert_eq!(
            (reverse.start_key.as_slice(), reverse.end_key.as_slice()),
            (&b"c"[..], &b"a"[..])
        );
        let open = new_raw_delete_range_request(("b".to_owned()..).into(), None);
        assert_eq!(
            (open.start_key.as_slice(), open.end_key.as_slice()),
            (&b"b"[..], &b""[..])
        );
        let batch = new_raw_batch_scan_request(
            vec![
                ("a".to_owned().."b".to_owned()).into(),
                ("x".to_owned()..).into(),
            ]
            .into_iter(),
            3,
            false,
            None,
        );
        let ranges: Vec<_> = batch
            .ranges
            .iter()
            .map(|r| (r.start_key.clone(), r.end_key.clone()))
            .collect();
        assert_eq!(
            ranges,
            vec![(b"a".to_vec(), b"b".to_vec()), (b"x".to_vec(), Vec::new())]
        );
    }

    #[test]
    fn keys_pairs_and_flags_are_carried() {
        let put = new_raw_batch_put_request(
            vec![KvPair::new("k".to_owned(), b"v".to_vec())].into_iter(),
            vec![9].into_iter(),
            None,
            true,
        );
        assert_eq!(
            (put.pairs[0].key.as_slice(), put.pairs[0].value.as_slice()),
            (&b"k"[..], &b"v"[..])
        );
        assert_eq!((put.ttls.as_slice(), put.for_cas), (&[9][..], true));
        // TTLs are read up to the pair count: an endless iterator works.
        let endless = new_raw_batch_put_request(
            vec![
                KvPair::new("a".to_owned(), b"1".to_vec()),
                KvPair::new("b".to_owned(), b"2".to_vec()),
            ]
            .into_iter(),
            std::iter::repeat(0),
            None,
            false,
        );
        assert_eq!(endless.ttls, vec![0, 0]);
        let cas = new_cas_request("k".to_owned().into(), b"n".to_vec(), None, None);
        assert!(cas.previous_not_exist);
        let delete =
            new_raw_batch_delete_request(vec![Key::from("a".to_owned())].into_iter(), None);
        assert_eq!((delete.keys.len(), delete.for_cas), (1, false));
    }
}
