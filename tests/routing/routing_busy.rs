//! The ServerIsBusy(0) follower probe (routing.md, "ServerIsBusy(0)
//! follower probe").
#![cfg(feature = "mock")]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use tikv_plan::mock;
use tikv_plan::request::RoutingState;
use tikv_plan::Failure;
use tikv_plan::{Backoff, Config};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn two_busy_zero_trigger_one_followers_only_probe() {
    for shared in [false, true] {
        let pd = three_voters();
        let routing = Arc::new(RoutingState::new(&{
            let mut config = Config::default();
            config.shared_busy_probe = shared;
            config
        }));
        pd.set_dispatch_hook(|peer, req| match peer.id {
            11 => region_error(req, mock::server_is_busy(0, 0)),
            12 => region_error(req, mock::not_leader(1, None)),
            _ => accept(peer, req),
        });
        assert_eq!(
            text(get(&pd, &routing).await.unwrap()),
            "from-13",
            "shared={shared}"
        );
        // Two busy answers from the leader, then the followers only.
        assert_eq!(
            pd.dispatched_peers(),
            vec![11, 11, 12, 13],
            "shared={shared}"
        );
        assert_leader_requests_only(&pd);
        assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(13));
        assert_eq!(routing.stats().busy_probes, 1);
    }
}

#[tokio::test(start_paused = true)]
async fn inconclusive_probe_restores_leader_and_probes_once() {
    for shared in [false, true] {
        let pd = three_voters();
        let routing = Arc::new(RoutingState::new(&{
            let mut config = Config::default();
            config.shared_busy_probe = shared;
            config
        }));
        let leader_calls = Arc::new(AtomicU32::new(0));
        let calls = leader_calls.clone();
        pd.set_dispatch_hook(move |peer, req| match peer.id {
            11 if calls.fetch_add(1, Ordering::SeqCst) < 5 => {
                region_error(req, mock::server_is_busy(0, 0))
            }
            11 => accept(peer, req),
            _ => region_error(req, mock::not_leader(1, None)),
        });
        assert_eq!(
            text(get(&pd, &routing).await.unwrap()),
            "from-11",
            "shared={shared}"
        );
        assert_eq!(
            pd.dispatched_peers(),
            vec![11, 11, 12, 13, 11, 11, 11, 11],
            "one probe, then the ordinary busy path; shared={shared}"
        );
        assert_eq!(
            pd.cached_leader(1).map(|p| p.id),
            Some(11),
            "leader restored"
        );
        assert_eq!(pd.invalidate_region_cache_calls(), 0);
        assert_eq!(routing.stats().busy_probes, 1);
        assert_leader_requests_only(&pd);
    }
}

#[tokio::test(start_paused = true)]
async fn non_zero_busy_follows_normal_path() {
    let pd = three_voters();
    let routing = routing();
    let calls = AtomicU32::new(0);
    pd.set_dispatch_hook(move |peer, req| {
        if calls.fetch_add(1, Ordering::SeqCst) < 3 {
            region_error(req, mock::server_is_busy(100, 300))
        } else {
            accept(peer, req)
        }
    });
    let start = Instant::now();
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-11");
    assert_eq!(
        pd.dispatched_peers(),
        vec![11, 11, 11, 11],
        "no follower is asked"
    );
    assert!(
        start.elapsed() >= Duration::from_millis(900),
        "backoff_ms honoured"
    );
    assert_eq!(routing.stats().busy_probes, 0);
}

/// Twenty requests to a Region whose stale leader answers ServerIsBusy(0):
/// with the shared suspicion one probe serves them all.
#[tokio::test(start_paused = true)]
async fn concurrent_requests_share_one_busy_probe() {
    async fn run(shared: bool) -> (u64, usize, usize) {
        let pd = three_voters();
        let routing = Arc::new(RoutingState::new(&{
            let mut config = Config::default();
            config.shared_busy_probe = shared;
            config
        }));
        pd.set_async_dispatch_hook(|peer, req| {
            let answer = match peer.id {
                11 => region_error(req, mock::server_is_busy(0, 0)),
                _ => accept(peer, req),
            };
            let delay = if peer.id == 11 { 1 } else { 10 };
            Box::pin(async move {
                tokio::time::sleep(Duration::from_millis(delay)).await;
                answer
            })
        });
        let requests = (0..20).map(|_| get(&pd, &routing));
        for got in futures::future::join_all(requests).await {
            assert_eq!(text(got.unwrap()), "from-12");
        }
        assert_leader_requests_only(&pd);
        (
            routing.stats().busy_probes,
            pd.dispatches_to_store(1),
            pd.dispatches_to_store(2),
        )
    }
    let (probes, leader_calls, follower_calls) = run(true).await;
    assert_eq!(probes, 1, "one probe for twenty requests");
    assert!(
        leader_calls <= 21,
        "no request pays two busy answers: {leader_calls}"
    );
    assert_eq!(
        follower_calls, 20,
        "one probe plus nineteen requests to the found leader"
    );
    let (probes, _, _) = run(false).await;
    assert!(probes > 1, "per-request counting probes more: {probes}");
}

/// "At most one probe per request" holds across a split: the pieces a
/// request splits into after its probe take the ordinary busy path.
#[tokio::test(start_paused = true)]
async fn a_request_split_after_its_probe_does_not_probe_again() {
    use tikv_plan::mock::MockPdClient;
    use tikv_plan::proto::{errorpb, kvrpcpb, metapb};
    use tikv_plan::raw_lowering::new_raw_batch_get_request;
    use tikv_plan::request::{Collect, Plan, PlanBuilder};

    let peers = [mock::voter(11, 1), mock::voter(12, 2), mock::voter(13, 3)];
    let pd = Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &peers,
        Some(11),
    )]));
    let mut left = mock::region(1, b"", b"m", &peers, None);
    let mut right = mock::region(
        2,
        b"m",
        b"",
        &[mock::voter(21, 1), mock::voter(22, 2), mock::voter(23, 3)],
        None,
    );
    for r in [&mut left, &mut right] {
        r.region.region_epoch = Some(metapb::RegionEpoch {
            conf_ver: 1,
            version: 2,
        });
    }
    let current = vec![left.region.clone(), right.region.clone()];
    let (stale_calls, fresh_calls) = (AtomicU32::new(0), AtomicU32::new(0));
    pd.set_dispatch_hook(move |peer, req| {
        let version = req
            .as_any()
            .downcast_ref::<kvrpcpb::RawBatchGetRequest>()
            .and_then(|r| r.context.clone())
            .and_then(|c| c.region_epoch)
            .map(|e| e.version);
        match (peer.id, version) {
            // The stale leader: busy twice (the probe), then the split.
            (11, Some(1)) if stale_calls.fetch_add(1, Ordering::SeqCst) < 2 => {
                region_error(req, mock::server_is_busy(0, 0))
            }
            (11, Some(1)) => region_error(
                req,
                errorpb::Error {
                    epoch_not_match: Some(errorpb::EpochNotMatch {
                        current_regions: current.clone(),
                    }),
                    ..Default::default()
                },
            ),
            // Still busy after the split, twice, then it serves.
            (11, _) if fresh_calls.fetch_add(1, Ordering::SeqCst) < 2 => {
                region_error(req, mock::server_is_busy(0, 0))
            }
            (12 | 13, _) => region_error(req, mock::not_leader(1, None)),
            _ => accept(peer, req),
        }
    });
    let routing = routing();
    let pairs = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_batch_get_request(
            vec![b"a".to_vec(), b"x".to_vec()]
                .into_iter()
                .map(Into::into),
            None,
        ),
    )
    .routing(routing.clone())
    .retry_multi_region(crate::common::backoff())
    .merge(Collect)
    .plan()
    .execute()
    .await
    .unwrap();
    assert_eq!(pairs.len(), 0, "accept answers a batch get with no pairs");
    assert_eq!(routing.stats().busy_probes, 1, "one probe per request");
    assert_eq!(
        pd.dispatched_peers(),
        vec![11, 11, 12, 13, 11, 11, 11, 11, 21],
        "after the split: busy, busy, served; no second probe"
    );
    assert_leader_requests_only(&pd);
}

#[tokio::test(start_paused = true)]
async fn one_busy_probe_per_request_across_shards_of_one_region() {
    // A batch put split by size into three shards of the
    // same Region. The leader answers ServerIsBusy(0) throughout and the
    // followers say NotLeader, so every probe is inconclusive. The request
    // probes once, whichever shard gets there first, with the suspicion
    // shared or not.
    use tikv_plan::proto::kvrpcpb;
    use tikv_plan::raw_lowering::new_raw_batch_put_request;
    use tikv_plan::request::{CollectError, Plan, PlanBuilder};
    for shared in [true, false] {
        let pd = three_voters();
        let routing = Arc::new(RoutingState::new(&{
            let mut config = Config::default();
            config.shared_busy_probe = shared;
            config
        }));
        pd.set_dispatch_hook(|peer, req| match peer.id {
            11 => region_error(req, mock::server_is_busy(0, 0)),
            _ => region_error(req, mock::not_leader(1, None)),
        });
        let pairs: Vec<kvrpcpb::KvPair> = (0..3)
            .map(|i| kvrpcpb::KvPair {
                key: vec![b'a', i],
                value: vec![0; 10 * 1024],
                ..Default::default()
            })
            .collect();
        let result = PlanBuilder::new(
            pd.clone(),
            tikv_plan::request::Keyspace::Disable,
            new_raw_batch_put_request(
                pairs.into_iter().map(Into::into),
                std::iter::empty(),
                None,
                false,
            ),
        )
        .routing(routing.clone())
        .retry_multi_region(Backoff::no_jitter_backoff(2, 100, 4))
        .merge(CollectError)
        .plan()
        .execute()
        .await;
        assert!(result.is_err(), "the leader never stops being busy");
        let regions: Vec<u64> = pd
            .dispatch_log()
            .iter()
            .map(|d| d.context.region_id)
            .collect();
        assert!(regions.iter().all(|r| *r == 1));
        assert_eq!(routing.stats().busy_probes, 1, "shared = {shared}");
        assert_leader_requests_only(&pd);
    }
}

#[tokio::test(start_paused = true)]
async fn an_hour_of_busy_backoff_is_capped_and_the_deadline_ends_the_request() {
    // A store answering "back off for an hour" parks the request
    // for at most MAX_BUSY_BACKOFF a time, and the request deadline ends it.
    let pd = three_voters();
    let routing = Arc::new(RoutingState::new(
        &Config::default().with_request_deadline(Duration::from_secs(12)),
    ));
    pd.set_dispatch_hook(|_, req| region_error(req, mock::server_is_busy(5, 3_600_000)));
    let start = Instant::now();
    let err = get_with(&pd, Some(&routing), backoff(), b"k")
        .await
        .unwrap_err();
    let elapsed = start.elapsed();
    match err.failure() {
        Some(Failure::DeadlineExceeded { deadline, last, .. }) => {
            assert_eq!(*deadline, Duration::from_secs(12));
            assert!(last.to_string().contains("busy"), "{last}");
        }
        _ => panic!("{err}"),
    }
    assert!(elapsed <= Duration::from_secs(12), "{elapsed:?}");
    // Slept in steps of at most the cap: at least two tries fit in 12 s.
    assert!(pd.dispatches() >= 2, "{} dispatches", pd.dispatches(),);
}
