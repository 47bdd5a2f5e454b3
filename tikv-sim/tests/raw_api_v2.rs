//! Raw keys in API v2: the stores check them against Region boundaries on
//! their memcomparable encoding (TiKV's `ApiV2::encode_raw_key` is
//! `Key::from_raw`), answer `KeyNotInRegion` with the encoded key, and move
//! raw data with splits and merges by the encoding. Requests and answers
//! carry the keys as sent. In API v1 raw keys stay plain bytes.
//!
//! The boundary of these tests is `encode_bytes(b"r\0\0\x01m")`, keyspace
//! 1's raw key `m`. Compared as sent, `r\0\0\x01m` and `r\0\0\x01m\0` both
//! sort below it (they are prefixes of it), yet their encodings sort at and
//! above it: a request routed by the plain key goes to the wrong Region.

use tikv_sim::codec::encode_bytes;
use tikv_sim::proto::kvrpcpb::{self, ApiVersion, KvPair};
use tikv_sim::proto::metapb;
use tikv_sim::proto::tikvpb::tikv_client::TikvClient;
use tikv_sim::{keyspace_split_keys, KeyspaceMode, Outcome, SimCluster};
use tonic::transport::Channel;

const BELOW: &[u8] = b"r\0\0\x01l\xff";
const AT: &[u8] = b"r\0\0\x01m";
const ABOVE: &[u8] = b"r\0\0\x01m\0";
const KEYSPACE_END: &[u8] = b"r\0\0\x02";

/// An API v2 cluster of one store whose raw key space of keyspace 1 is
/// split at `m`: the Regions below and above the boundary.
async fn split_at_m() -> (SimCluster, metapb::Region, metapb::Region) {
    let split = keyspace_split_keys(1, KeyspaceMode::Raw, ["m"]);
    assert_eq!(split, vec![encode_bytes(AT)]);
    let cluster = SimCluster::builder()
        .stores(1)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .split_keys(split)
        .start()
        .await
        .unwrap();
    let regions = cluster.regions();
    let (below, above) = (regions[0].clone(), regions[1].clone());
    (cluster, below, above)
}

/// A context for `region` on store 1, in API v2 and keyspace 1.
fn ctx(cluster: &SimCluster, region: &metapb::Region) -> Option<kvrpcpb::Context> {
    let mut ctx = cluster.context(region.id, 1)?;
    ctx.api_version = ApiVersion::V2 as i32;
    ctx.keyspace_id = 1;
    Some(ctx)
}

fn pair(key: &[u8]) -> KvPair {
    KvPair {
        error: None,
        key: key.to_vec(),
        value: key.to_vec(),
    }
}

fn keys(pairs: &[KvPair]) -> Vec<Vec<u8>> {
    pairs.iter().map(|p| p.key.clone()).collect()
}

async fn put(
    store: &mut TikvClient<Channel>,
    context: Option<kvrpcpb::Context>,
    key: &[u8],
) -> kvrpcpb::RawPutResponse {
    store
        .raw_put(kvrpcpb::RawPutRequest {
            context,
            key: key.to_vec(),
            value: key.to_vec(),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner()
}

/// The request a client routing by plain keys sends near the boundary is
/// refused, as TiKV refuses it: `KeyNotInRegion` with the key's encoding
/// and the Region's (encoded) boundaries.
#[tokio::test]
async fn a_plain_routed_key_at_an_encoded_boundary_is_refused() {
    let (cluster, below, above) = split_at_m().await;
    let mut store = cluster.tikv_client(1).await.unwrap();
    for key in [AT, ABOVE] {
        // Compared as sent, the key lies in the lower Region.
        assert!(key < below.end_key.as_slice());
        let refused = put(&mut store, ctx(&cluster, &below), key).await;
        let error = refused.region_error.and_then(|e| e.key_not_in_region);
        let error = error.unwrap_or_else(|| panic!("{key:?} was not refused"));
        assert_eq!(error.key, encode_bytes(key));
        assert_eq!(error.region_id, below.id);
        assert_eq!(
            (error.start_key, error.end_key),
            (below.start_key.clone(), below.end_key.clone())
        );
        assert_eq!(cluster.value_of(key), None);
        let served = put(&mut store, ctx(&cluster, &above), key).await;
        assert!(served.region_error.is_none(), "{served:?}");
        assert_eq!(cluster.value_of(key), Some(key.to_vec()));
    }
    let refused = put(&mut store, ctx(&cluster, &above), BELOW).await;
    assert!(refused.region_error.unwrap().key_not_in_region.is_some());
    let served = put(&mut store, ctx(&cluster, &below), BELOW).await;
    assert!(served.region_error.is_none(), "{served:?}");
    let counters = cluster.counters(1);
    assert_eq!(counters.count("raw_put", Outcome::KeyNotInRegion), 3);
    assert_eq!(counters.count("raw_put", Outcome::Ok), 3);
    cluster.shutdown().await;
}

/// Every raw method on the Region above the boundary: keys as sent in and
/// out, scans clamped to the Region by the encoding, in both directions and
/// with limits, delete-range, TTL and compare-and-swap.
#[tokio::test]
async fn raw_methods_work_on_encoded_regions() {
    let (cluster, below, above) = split_at_m().await;
    let mut store = cluster.tikv_client(1).await.unwrap();
    let (lo, hi) = (ctx(&cluster, &below), ctx(&cluster, &above));
    let batch = |context: Option<kvrpcpb::Context>, keys: &[&[u8]]| kvrpcpb::RawBatchPutRequest {
        context,
        pairs: keys.iter().map(|k| pair(k)).collect(),
        ..Default::default()
    };
    let answer = store
        .raw_batch_put(batch(hi.clone(), &[AT, ABOVE, b"r\0\0\x01z"]))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.region_error.is_none(), "{answer:?}");
    let answer = store
        .raw_batch_put(batch(lo.clone(), &[BELOW, AT]))
        .await
        .unwrap()
        .into_inner();
    assert!(answer.region_error.unwrap().key_not_in_region.is_some());
    let answer = store.raw_batch_put(batch(lo.clone(), &[BELOW])).await;
    assert!(answer.unwrap().into_inner().region_error.is_none());

    let scan = |context, start: &[u8], end: &[u8], limit, reverse| kvrpcpb::RawScanRequest {
        context,
        start_key: start.to_vec(),
        end_key: end.to_vec(),
        limit,
        reverse,
        ..Default::default()
    };
    // The whole keyspace asked of each Region: each answers its own part.
    let from = b"r\0\0\x01".as_slice();
    let got = store.raw_scan(scan(lo.clone(), from, KEYSPACE_END, 10, false));
    assert_eq!(keys(&got.await.unwrap().into_inner().kvs), [BELOW]);
    let got = store.raw_scan(scan(hi.clone(), AT, KEYSPACE_END, 2, false));
    assert_eq!(keys(&got.await.unwrap().into_inner().kvs), [AT, ABOVE]);
    let got = store.raw_scan(scan(hi.clone(), KEYSPACE_END, AT, 2, true));
    let got = got.await.unwrap().into_inner();
    assert_eq!(keys(&got.kvs), [b"r\0\0\x01z".as_slice(), ABOVE]);
    // A reverse scan from the boundary down is the lower Region's.
    let got = store.raw_scan(scan(lo.clone(), AT, from, 10, true));
    assert_eq!(keys(&got.await.unwrap().into_inner().kvs), [BELOW]);
    let got = store.raw_scan(scan(lo.clone(), ABOVE, from, 10, true));
    let refused = got.await.unwrap().into_inner().region_error.unwrap();
    assert_eq!(refused.key_not_in_region.unwrap().key, encode_bytes(ABOVE));

    let batch_get = kvrpcpb::RawBatchGetRequest {
        context: hi.clone(),
        keys: vec![AT.to_vec(), ABOVE.to_vec()],
        cf: String::new(),
    };
    let got = store.raw_batch_get(batch_get).await.unwrap().into_inner();
    assert_eq!(keys(&got.pairs), [AT, ABOVE]);

    let cas = |context, previous: &[u8], value: &[u8]| kvrpcpb::RawCasRequest {
        context,
        key: AT.to_vec(),
        value: value.to_vec(),
        previous_value: previous.to_vec(),
        ..Default::default()
    };
    let swapped = store.raw_compare_and_swap(cas(hi.clone(), AT, b"new"));
    assert!(swapped.await.unwrap().into_inner().succeed);
    assert_eq!(cluster.value_of(AT), Some(b"new".to_vec()));
    let refused = store.raw_compare_and_swap(cas(lo.clone(), b"new", b"x"));
    let refused = refused.await.unwrap().into_inner();
    assert!(refused.region_error.unwrap().key_not_in_region.is_some());

    let with_ttl = kvrpcpb::RawPutRequest {
        context: hi.clone(),
        key: ABOVE.to_vec(),
        value: b"v".to_vec(),
        ttl: 60,
        ..Default::default()
    };
    store.raw_put(with_ttl).await.unwrap();
    let ttl = kvrpcpb::RawGetKeyTtlRequest {
        context: hi.clone(),
        key: ABOVE.to_vec(),
        cf: String::new(),
    };
    let ttl = store.raw_get_key_ttl(ttl).await.unwrap().into_inner();
    assert!(!ttl.not_found && ttl.ttl > 0 && ttl.ttl <= 60, "{ttl:?}");

    // Delete-range over the upper Region: its start must lie in it by its
    // encoding, its end may be the keyspace's end.
    let delete_range = |context, start: &[u8]| kvrpcpb::RawDeleteRangeRequest {
        context,
        start_key: start.to_vec(),
        end_key: KEYSPACE_END.to_vec(),
        ..Default::default()
    };
    let refused = store.raw_delete_range(delete_range(lo.clone(), AT));
    let refused = refused.await.unwrap().into_inner();
    assert!(refused.region_error.unwrap().key_not_in_region.is_some());
    let deleted = store.raw_delete_range(delete_range(hi.clone(), ABOVE));
    assert!(deleted.await.unwrap().into_inner().region_error.is_none());
    assert_eq!(cluster.value_of(ABOVE), None);
    assert_eq!(cluster.value_of(AT), Some(b"new".to_vec()));
    assert_eq!(cluster.value_of(BELOW), Some(BELOW.to_vec()));

    // A checksum of the keyspace's pieces in each Region counts each
    // Region's own keys.
    for (context, start, expected) in [(lo, from, 1), (hi, AT, 1)] {
        let checksum = kvrpcpb::RawChecksumRequest {
            context,
            ranges: vec![kvrpcpb::KeyRange {
                start_key: start.to_vec(),
                end_key: KEYSPACE_END.to_vec(),
            }],
            ..Default::default()
        };
        let sum = store.raw_checksum(checksum).await.unwrap().into_inner();
        assert_eq!(sum.total_kvs, expected, "{sum:?}");
    }
    cluster.shutdown().await;
}

/// Splitting and merging move raw data by its encoding: a key as sent that
/// sorts below the boundary but whose encoding does not stays above.
#[tokio::test]
async fn raw_data_moves_with_splits_and_merges_by_its_encoding() {
    let cluster = SimCluster::builder()
        .stores(1)
        .api_version(ApiVersion::V2)
        .keyspace("a", 1)
        .start()
        .await
        .unwrap();
    let whole = cluster.regions()[0].clone();
    let mut store = cluster.tikv_client(1).await.unwrap();
    for key in [BELOW, AT, ABOVE] {
        let answer = put(&mut store, ctx(&cluster, &whole), key).await;
        assert!(answer.region_error.is_none(), "{answer:?}");
    }
    let new_id = cluster.split_region(&encode_bytes(AT)).unwrap();
    let below = cluster.region(new_id).unwrap();
    let above = cluster.region(whole.id).unwrap();
    assert_eq!(below.end_key, encode_bytes(AT));
    let scan_all = |region: &metapb::Region| kvrpcpb::RawScanRequest {
        context: ctx(&cluster, region),
        start_key: b"r\0\0\x01".to_vec(),
        end_key: KEYSPACE_END.to_vec(),
        limit: 10,
        ..Default::default()
    };
    let mut scan_below = scan_all(&below);
    scan_below.start_key = Vec::new();
    let got = store.raw_scan(scan_below).await.unwrap().into_inner();
    assert_eq!(keys(&got.kvs), [BELOW]);
    let mut scan_above = scan_all(&above);
    scan_above.start_key = AT.to_vec();
    let got = store.raw_scan(scan_above).await.unwrap().into_inner();
    assert_eq!(keys(&got.kvs), [AT, ABOVE]);
    for key in [BELOW, AT, ABOVE] {
        assert_eq!(cluster.value_of(key), Some(key.to_vec()), "{key:?}");
    }

    cluster.merge_regions(below.id, above.id).unwrap();
    let merged = cluster.region(above.id).unwrap();
    let got = store
        .raw_scan(scan_all(&merged))
        .await
        .unwrap()
        .into_inner();
    assert_eq!(keys(&got.kvs), [BELOW, AT, ABOVE]);
    cluster.shutdown().await;
}

/// API v1 keeps raw keys plain: the same keys around a plain boundary are
/// checked as sent.
#[tokio::test]
async fn api_v1_raw_keys_stay_plain() {
    let cluster = SimCluster::builder()
        .stores(1)
        .split_keys(vec![b"m".to_vec()])
        .start()
        .await
        .unwrap();
    let regions = cluster.regions();
    let mut store = cluster.tikv_client(1).await.unwrap();
    let ctx = |r: &metapb::Region| cluster.context(r.id, 1);
    let answer = put(&mut store, ctx(&regions[1]), b"m").await;
    assert!(answer.region_error.is_none(), "{answer:?}");
    let refused = put(&mut store, ctx(&regions[0]), b"m\0").await;
    let error = refused.region_error.unwrap().key_not_in_region.unwrap();
    assert_eq!(error.key, b"m\0".to_vec());
    assert_eq!(cluster.value_of(b"m"), Some(b"m".to_vec()));
    cluster.shutdown().await;
}
