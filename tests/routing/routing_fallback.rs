//! Voter fallback within a candidate round (routing.md, "Candidates" and
//! "One round, per shard").
#![cfg(feature = "mock")]

use std::sync::Arc;

use crate::common::*;
use tikv_plan::mock::{self, MappingFailure, MockPdClient};
use tikv_plan::proto::kvrpcpb;
use tikv_plan::raw_lowering::new_raw_get_request;
use tikv_plan::request::{CollectSingle, Plan, PlanBuilder};
use tikv_plan::Failure;
use tikv_plan::{Backoff, Error};
use tokio::time::Instant;

#[tokio::test(start_paused = true)]
async fn unreachable_leader_falls_back_to_voter_without_replica_read() {
    let pd = three_voters();
    let routing = routing();
    pd.fail_store_mapping(1, MappingFailure::Refused);
    pd.set_dispatch_hook(accept);
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.dispatched_peers(), vec![12]);
    assert_leader_requests_only(&pd);
    let ctx = &pd.dispatch_log()[0].context;
    assert_eq!(ctx.region_id, 1);
    assert_eq!(
        ctx.region_epoch,
        Some(tikv_plan::proto::metapb::RegionEpoch {
            conf_ver: 1,
            version: 1
        })
    );
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
    let stats = routing.stats();
    assert_eq!(stats.fallback_attempts, 1);
    assert_eq!(stats.fallback_successes, 1);
}

#[tokio::test(start_paused = true)]
async fn fallback_changes_only_the_target_peer() {
    let pd = three_voters();
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            unavailable()
        } else {
            accept(peer, req)
        }
    });
    let mut request = new_raw_get_request(b"k".to_vec().into(), None);
    request.context = Some(kvrpcpb::Context {
        priority: 2,
        request_source: "test".to_owned(),
        api_version: kvrpcpb::ApiVersion::V2 as i32,
        ..Default::default()
    });
    let got = PlanBuilder::new(pd.clone(), tikv_plan::request::Keyspace::Disable, request)
        .retry_multi_region(backoff())
        .merge(CollectSingle)
        .post_process_default()
        .plan()
        .execute()
        .await
        .unwrap();
    assert_eq!(text(got), "from-12");
    let log = pd.dispatch_log();
    assert_eq!(log.len(), 2);
    let (a, b) = (&log[0].context, &log[1].context);
    assert_eq!(a.peer.map(|p| p.id), Some(11));
    assert_eq!(b.peer.map(|p| p.id), Some(12));
    for ctx in [a, b] {
        assert_eq!(ctx.region_id, 1);
        assert_eq!(ctx.region_epoch.map(|e| e.version), Some(1));
        assert_eq!(ctx.priority, 2);
        assert_eq!(ctx.request_source, "test");
        assert_eq!(ctx.api_version, kvrpcpb::ApiVersion::V2 as i32);
    }
    assert_leader_requests_only(&pd);
}

#[tokio::test(start_paused = true)]
async fn learner_and_witness_are_skipped() {
    let pd = Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &[
            mock::voter(11, 1),
            mock::learner(12, 2),
            mock::witness(13, 3),
            mock::voter(14, 4),
        ],
        Some(11),
    )]));
    let routing = routing();
    pd.fail_store_mapping(1, MappingFailure::Refused);
    pd.set_dispatch_hook(accept);
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-14");
    assert_eq!(pd.dispatched_peers(), vec![14]);
    assert_eq!(pd.map_calls_to_store(2), 0, "the learner is never mapped");
    assert_eq!(pd.map_calls_to_store(3), 0, "the witness is never mapped");
}

#[tokio::test(start_paused = true)]
async fn fallback_not_leader_and_busy_do_not_hide_remaining_voters() {
    let pd = voters(4);
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => unavailable(),
        12 => region_error(req, mock::not_leader(1, None)),
        13 => region_error(req, mock::server_is_busy(0, 0)),
        _ => accept(peer, req),
    });
    let start = Instant::now();
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-14");
    assert_eq!(
        start.elapsed(),
        std::time::Duration::ZERO,
        "one round, no sleep"
    );
    assert_eq!(pd.dispatched_peers(), vec![11, 12, 13, 14]);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(14));
    assert_eq!(routing.stats().fallback_attempts, 3);
}

#[tokio::test(start_paused = true)]
async fn follower_hint_never_updates_leader_cache() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => unavailable(),
        // Each follower names the other one.
        12 => region_error(req, mock::not_leader(1, Some(mock::voter(13, 3)))),
        _ => region_error(req, mock::not_leader(1, Some(mock::voter(12, 2)))),
    });
    let err = get_with(&pd, Some(&routing), Backoff::no_backoff(), b"k")
        .await
        .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::RetriesExhausted { .. })),
        "{err}"
    );
    assert_eq!(pd.dispatched_peers(), vec![11, 12, 13]);
    assert_eq!(pd.update_leader_calls(), 0, "hints never reach the cache");
    assert_leader_requests_only(&pd);
}

#[tokio::test(start_paused = true)]
async fn fallback_success_updates_leader_cache() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            unavailable()
        } else {
            accept(peer, req)
        }
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.update_leader_calls(), 1);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
    // The next request goes straight to the new leader.
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.dispatched_peers(), vec![11, 12, 12]);
}

#[tokio::test(start_paused = true)]
async fn fallback_key_error_updates_leader_cache() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, _req| {
        if peer.id == 11 {
            return unavailable();
        }
        Ok(Box::new(kvrpcpb::RawGetResponse {
            error: "key is locked".to_owned(),
            ..Default::default()
        }))
    });
    let err = get(&pd, &routing).await.unwrap_err();
    assert!(matches!(err, Error::KvError { .. }), "{err}");
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
    assert_eq!(pd.update_leader_calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn all_voters_not_leader_reloads_region() {
    let pd = three_voters();
    let routing = routing();
    // PD learned about a new membership: peer 14 on store 4 leads.
    let mut moved = mock::region(
        1,
        b"",
        b"",
        &[mock::voter(12, 2), mock::voter(13, 3), mock::voter(14, 4)],
        Some(14),
    );
    moved.region.region_epoch = Some(tikv_plan::proto::metapb::RegionEpoch {
        conf_ver: 2,
        version: 1,
    });
    pd.set_pd_view(moved);
    pd.set_dispatch_hook(|peer, req| match peer.id {
        14 => accept(peer, req),
        _ => region_error(req, mock::not_leader(1, None)),
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-14");
    assert_eq!(pd.dispatched_peers(), vec![11, 12, 13, 14]);
    assert_eq!(pd.invalidate_region_cache_calls(), 1);
    assert_eq!(pd.region_reloads(), 1);
    assert_eq!(routing.stats().region_invalidations, 1);
}

#[tokio::test(start_paused = true)]
async fn leader_hintless_not_leader_moves_to_voters_in_same_round() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => region_error(req, mock::not_leader(1, None)),
        _ => accept(peer, req),
    });
    let start = Instant::now();
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(start.elapsed(), std::time::Duration::ZERO, "no backoff");
    assert_eq!(pd.dispatched_peers(), vec![11, 12]);
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
}

#[tokio::test(start_paused = true)]
async fn fallback_hint_naming_untried_voter_reorders_round() {
    let pd = voters(5);
    let routing = routing();
    pd.fail_store_mapping(1, MappingFailure::Refused);
    pd.set_dispatch_hook(|peer, req| match peer.id {
        12 => region_error(req, mock::not_leader(1, Some(mock::voter(15, 5)))),
        15 => accept(peer, req),
        _ => region_error(req, mock::not_leader(1, None)),
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-15");
    assert_eq!(pd.dispatched_peers(), vec![12, 15]);
    assert_eq!(pd.map_calls_to_store(3), 0);
    assert_eq!(pd.map_calls_to_store(4), 0);
}

#[tokio::test(start_paused = true)]
async fn fast_path_maps_one_store_and_dispatches_once() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(accept);
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-11");
    assert_eq!(pd.map_peer_to_store_calls(), 1);
    assert_eq!(pd.map_calls_to_store(1), 1);
    assert_eq!(pd.dispatches(), 1);
    assert_eq!(pd.update_leader_calls(), 0);
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
    assert_eq!(pd.invalidate_store_cache_calls(), 0);
    assert_eq!(pd.region_reloads(), 0);
    assert_eq!(routing.stats().fallback_attempts, 0);
}

#[tokio::test(start_paused = true)]
async fn exhausted_backoff_returns_strongest_error() {
    let pd = three_voters();
    let routing = routing();
    // Leader times out, one follower is busy, the other unreachable: the
    // routing failure is the strongest.
    pd.fail_store_mapping(3, MappingFailure::Refused);
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => deadline(),
        _ => region_error(req, mock::server_is_busy(0, 0)),
    });
    let err = get_with(
        &pd,
        Some(&routing),
        Backoff::no_jitter_backoff(2, 4, 2),
        b"k",
    )
    .await
    .unwrap_err();
    match err.failure() {
        Some(Failure::RetriesExhausted { attempts, last, .. }) => {
            assert_eq!(*attempts, 3);
            assert!(
                matches!(last.failure(), Some(Failure::Connect { .. })),
                "{last}"
            );
        }
        _ => panic!("{err}"),
    }
    // Without the routing failure, busy beats the timeout.
    let pd = three_voters();
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => deadline(),
        12 => deadline(),
        _ => region_error(req, mock::server_is_busy(0, 0)),
    });
    let err = get_with(&pd, None, Backoff::no_backoff(), b"k")
        .await
        .unwrap_err();
    // Retries spent on a Region error: client-rust's RegionError.
    assert!(
        matches!(&err, Error::RegionError(_)) && err.to_string().contains("busy"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn leaderless_region_starts_with_first_voter() {
    let pd = Arc::new(MockPdClient::new(vec![mock::region(
        1,
        b"",
        b"",
        &[mock::learner(11, 1), mock::voter(12, 2), mock::voter(13, 3)],
        None,
    )]));
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| match peer.id {
        12 => region_error(req, mock::not_leader(1, None)),
        _ => accept(peer, req),
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-13");
    assert_eq!(pd.dispatched_peers(), vec![12, 13]);
    assert_eq!(
        pd.cached_leader(1).map(|p| p.id),
        Some(13),
        "the first to accept leads"
    );
}

#[tokio::test(start_paused = true)]
async fn timed_out_leader_and_not_leader_voters_reload_the_region() {
    // The cached leader 11 times out, voters 12 and 13
    // say NotLeader without a hint. PD already knows peer 14 on store 4
    // leads. A leader that could not answer counts with the voters: the
    // Region is reloaded and the request reaches 14, instead of asking
    // 11, 12, 13 again until the budget is spent.
    let pd = three_voters();
    let routing = routing();
    let mut moved = mock::region(
        1,
        b"",
        b"",
        &[mock::voter(12, 2), mock::voter(13, 3), mock::voter(14, 4)],
        Some(14),
    );
    moved.region.region_epoch = Some(tikv_plan::proto::metapb::RegionEpoch {
        conf_ver: 2,
        version: 1,
    });
    pd.set_pd_view(moved);
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => client_timeout(),
        14 => accept(peer, req),
        _ => region_error(req, mock::not_leader(1, None)),
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-14");
    assert_eq!(pd.dispatched_peers(), vec![11, 12, 13, 14]);
    assert_eq!(pd.invalidate_region_cache_calls(), 1);
    assert_eq!(pd.region_reloads(), 1);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(14));
}
