//! PD's timestamp oracle, GC safe point and Region boundaries as
//! transactional clients need them, over real gRPC.

use std::time::Duration;

use futures::StreamExt;
use tikv_sim::codec::{decode_bytes, encode_bytes};
use tikv_sim::proto::pdpb;
use tikv_sim::{control, SimCluster};

fn header(cluster: &SimCluster) -> Option<pdpb::RequestHeader> {
    Some(pdpb::RequestHeader {
        cluster_id: cluster.cluster_id(),
        sender_id: 0,
    })
}

fn compose(ts: &pdpb::Timestamp) -> u64 {
    (ts.physical as u64) << 18 | ts.logical as u64
}

#[tokio::test]
async fn concurrent_tso_requests_get_unique_increasing_timestamps() {
    let cluster = SimCluster::builder().start().await.unwrap();
    let pd = cluster.pd_client(0).await.unwrap();
    // 256 callers, each with its own stream of four requests.
    let mut tasks = Vec::new();
    for i in 0..256u32 {
        let mut pd = pd.clone();
        let header = header(&cluster);
        tasks.push(tokio::spawn(async move {
            let count = 1 + i % 3;
            let requests: Vec<pdpb::TsoRequest> = (0..4)
                .map(|_| pdpb::TsoRequest {
                    header,
                    count,
                    dc_location: String::new(),
                })
                .collect();
            let responses: Vec<pdpb::TsoResponse> = pd
                .tso(futures::stream::iter(requests))
                .await
                .unwrap()
                .into_inner()
                .map(|r| r.unwrap())
                .collect()
                .await;
            // Each response names the last of its `count` timestamps.
            let mut mine = Vec::new();
            for r in responses {
                assert_eq!(r.count, count);
                let last = compose(r.timestamp.as_ref().unwrap());
                mine.extend((0..u64::from(count)).rev().map(|d| last - d));
            }
            mine
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        let mine = t.await.unwrap();
        assert!(
            mine.windows(2).all(|w| w[0] < w[1]),
            "a stream's timestamps increase"
        );
        all.extend(mine);
    }
    let n = all.len();
    assert_eq!(n, (0..256).map(|i| 4 * (1 + i % 3)).sum::<usize>());
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), n, "every timestamp is unique");
    cluster.shutdown().await;
}

#[tokio::test]
async fn tso_refuses_bad_counts_and_follows_the_controllable_clock() {
    let cluster = SimCluster::builder().start().await.unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    for count in [0, 1 << 18] {
        let request = pdpb::TsoRequest {
            header: header(&cluster),
            count,
            dc_location: String::new(),
        };
        let mut stream = pd
            .tso(futures::stream::iter(vec![request]))
            .await
            .unwrap()
            .into_inner();
        let status = stream.next().await.unwrap().unwrap_err();
        assert_eq!(status.code(), tonic::Code::InvalidArgument, "count {count}");
    }
    let before = cluster.current_ts();
    cluster.advance_tso_clock(Duration::from_secs(3_600));
    let after = cluster.current_ts();
    assert!((after >> 18) - (before >> 18) >= 3_600_000);
    cluster.shutdown().await;
}

#[tokio::test]
async fn the_gc_safe_point_never_moves_backwards() {
    let cluster = SimCluster::builder().start().await.unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    let get = pd
        .get_gc_safe_point(pdpb::GetGcSafePointRequest {
            header: header(&cluster),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(get.safe_point, 0);
    let update = |safe_point| {
        let mut pd = pd.clone();
        let header = header(&cluster);
        async move {
            pd.update_gc_safe_point(pdpb::UpdateGcSafePointRequest { header, safe_point })
                .await
                .unwrap()
                .into_inner()
                .new_safe_point
        }
    };
    assert_eq!(update(100).await, 100);
    assert_eq!(update(50).await, 100);
    assert_eq!(update(200).await, 200);
    let get = pd
        .get_gc_safe_point(pdpb::GetGcSafePointRequest {
            header: header(&cluster),
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(get.safe_point, 200);
    assert_eq!(cluster.gc_safe_point(), 200);
    cluster.shutdown().await;
}

#[tokio::test]
async fn evenly_split_region_boundaries_decode_as_memcomparable_keys() {
    let cluster = SimCluster::builder()
        .stores(3)
        .split_keys(control::even_split_keys(8))
        .start()
        .await
        .unwrap();
    let mut pd = cluster.pd_client(0).await.unwrap();
    // Walk the key space through PD as a transactional client does: locate
    // the Region of an encoded key, decode both boundaries, go on from the
    // end.
    let mut key = encode_bytes(b"");
    let mut regions = 0;
    let mut decoded_ends = Vec::new();
    loop {
        let r = pd
            .get_region(pdpb::GetRegionRequest {
                header: header(&cluster),
                region_key: key.clone(),
                need_buckets: false,
            })
            .await
            .unwrap()
            .into_inner()
            .region
            .unwrap();
        regions += 1;
        for bound in [&r.start_key, &r.end_key] {
            if !bound.is_empty() {
                decode_bytes(bound).unwrap_or_else(|e| panic!("boundary {bound:?}: {e}"));
            }
        }
        if r.end_key.is_empty() {
            break;
        }
        decoded_ends.push(decode_bytes(&r.end_key).unwrap());
        key = r.end_key;
    }
    assert_eq!(regions, 8);
    assert_eq!(decoded_ends, control::even_plain_split_keys(8));
    cluster.shutdown().await;
}

#[tokio::test]
async fn a_given_clock_drives_the_physical_part_and_never_turns_it_back() {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;

    let now_ms = Arc::new(AtomicU64::new(1_700_000_000_000));
    let clock = Arc::clone(&now_ms);
    let cluster = SimCluster::builder()
        .tso_clock(move || Duration::from_millis(clock.load(Ordering::SeqCst)))
        .start()
        .await
        .unwrap();
    let physical = |ts: u64| ts >> 18;
    assert_eq!(physical(cluster.current_ts()), 1_700_000_000_000);
    now_ms.store(1_700_000_000_250, Ordering::SeqCst);
    let later = cluster.current_ts();
    assert_eq!(physical(later), 1_700_000_000_250);
    // A clock that steps back leaves the TSO where it was, still rising.
    now_ms.store(1_600_000_000_000, Ordering::SeqCst);
    let after_step_back = cluster.current_ts();
    assert_eq!(physical(after_step_back), 1_700_000_000_250);
    assert!(after_step_back > later);
    // The offset tests add moves on top of the given clock.
    now_ms.store(1_700_000_000_250, Ordering::SeqCst);
    cluster.advance_tso_clock(Duration::from_secs(10));
    assert_eq!(physical(cluster.current_ts()), 1_700_000_010_250);
    // Over gRPC, PD hands out the same clock.
    let mut pd = cluster.pd_client(0).await.unwrap();
    let request = pdpb::TsoRequest {
        header: header(&cluster),
        count: 1,
        dc_location: String::new(),
    };
    let answer = pd
        .tso(futures::stream::iter(vec![request]))
        .await
        .unwrap()
        .into_inner()
        .next()
        .await
        .unwrap()
        .unwrap();
    let ts = answer.timestamp.unwrap();
    assert_eq!(ts.physical, 1_700_000_010_250);
    cluster.shutdown().await;
}
