//! gRPC failures during dispatch (routing.md, "gRPC error classification").
#![cfg(feature = "mock")]

use crate::common::*;
use tikv_plan::Failure;
use tikv_plan::{Backoff, Error};

#[tokio::test(start_paused = true)]
async fn transport_failure_invalidates_store_and_region() {
    // A failed round: every store invalidated, then the Region.
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|_peer, _req| unavailable());
    let err = get_with(&pd, Some(&routing), Backoff::no_backoff(), b"k")
        .await
        .unwrap_err();
    assert!(
        matches!(err.failure(), Some(Failure::RetriesExhausted { .. })),
        "{err}"
    );
    assert_eq!(pd.invalidate_store_cache_calls(), 3);
    assert_eq!(pd.invalidate_region_cache_calls(), 1);
    assert!(pd.cached_region(1).is_none(), "the Region route is dropped");

    // A round that succeeds on a voter drops only the failed store. (Fresh
    // routing state: store 1 is cooling down in the old one.)
    let pd = three_voters();
    let routing = crate::common::routing();
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            unavailable()
        } else {
            accept(peer, req)
        }
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.invalidate_store_cache_calls(), 1);
    assert!(!pd.is_store_cached(1));
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
}

/// A round that saw a transport failure and then ends on a voter's Region
/// error has ended without success: the Region route goes too.
#[tokio::test(start_paused = true)]
async fn transport_failure_then_region_error_reloads_the_region() {
    let pd = three_voters();
    let routing = routing();
    let voter_calls = std::sync::atomic::AtomicU32::new(0);
    pd.set_dispatch_hook(move |peer, req| match peer.id {
        11 => unavailable(),
        12 if voter_calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 => region_error(
            req,
            tikv_plan::proto::errorpb::Error {
                data_is_not_ready: Some(Default::default()),
                ..Default::default()
            },
        ),
        _ => accept(peer, req),
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.dispatched_peers(), vec![11, 12, 12]);
    assert_eq!(pd.invalidate_store_cache_calls(), 1);
    assert_eq!(
        pd.invalidate_region_cache_calls(),
        1,
        "the Region is reloaded before the next round"
    );
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(12));
}

#[tokio::test(start_paused = true)]
async fn deadline_retries_without_cache_churn() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            deadline()
        } else {
            accept(peer, req)
        }
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.invalidate_store_cache_calls(), 0);
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
    assert!(pd.is_store_cached(1));

    // A round of timeouts only: caches stay, the next round retries.
    let pd = three_voters();
    let calls = std::sync::atomic::AtomicU32::new(0);
    pd.set_dispatch_hook(move |peer, req| {
        if calls.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 3 {
            deadline()
        } else {
            accept(peer, req)
        }
    });
    assert_eq!(
        text(get_with(&pd, None, backoff(), b"k").await.unwrap()),
        "from-11"
    );
    assert_eq!(pd.dispatched_peers(), vec![11, 12, 13, 11]);
    assert_eq!(pd.invalidate_store_cache_calls(), 0);
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn client_timeout_keeps_caches() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            client_timeout()
        } else {
            accept(peer, req)
        }
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(
        pd.invalidate_store_cache_calls(),
        0,
        "upstream would drop store 1"
    );
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
    assert!(pd.is_store_cached(1));
    assert_eq!(routing.stats().store_invalidations, 0);
}

#[tokio::test(start_paused = true)]
async fn other_grpc_status_is_returned_without_replay() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|_peer, _req| {
        Err(Error::from(tonic::Status::invalid_argument("bad request")))
    });
    let err = get(&pd, &routing).await.unwrap_err();
    assert!(
        matches!(err, Error::GrpcAPI(ref s) if s.code() == tonic::Code::InvalidArgument),
        "{err}"
    );
    assert_eq!(
        pd.dispatched_peers(),
        vec![11],
        "never replayed on another replica"
    );
    assert_eq!(pd.invalidate_store_cache_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn transport_status_with_io_source_is_a_routing_failure() {
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, req| {
        if peer.id == 11 {
            // A status code alone would be fatal; the I/O source says otherwise.
            let mut s = tonic::Status::permission_denied("broken pipe");
            s.set_source(std::sync::Arc::new(std::io::Error::from(
                std::io::ErrorKind::BrokenPipe,
            )));
            return Err(Error::from(s));
        }
        accept(peer, req)
    });
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(pd.invalidate_store_cache_calls(), 1);
}

#[tokio::test(start_paused = true)]
async fn rpc_is_bounded_by_the_rpc_timeout() {
    use std::sync::Arc;
    use std::time::Duration;
    use tikv_plan::request::RoutingState;
    use tikv_plan::Config;
    let pd = three_voters();
    let routing = Arc::new(RoutingState::new(
        &Config::default().with_timeout(Duration::from_millis(500)),
    ));
    // The leader's store accepts the request and never answers.
    pd.set_async_dispatch_hook(|peer, req| {
        let id = peer.id;
        let ok = accept(peer, req);
        Box::pin(async move {
            if id == 11 {
                futures::future::pending::<()>().await;
            }
            ok
        })
    });
    let start = tokio::time::Instant::now();
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-12");
    assert_eq!(start.elapsed(), Duration::from_millis(500));
    assert_eq!(
        pd.invalidate_store_cache_calls(),
        0,
        "a timeout keeps caches"
    );
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn transport_failure_then_a_fatal_status_drops_the_region_route() {
    // The leader's transport failed, then a voter
    // answered a status that is returned to the caller. The round ended
    // without success after a routing failure: the Region route goes too
    // (routing.md, "One round").
    let pd = three_voters();
    let routing = routing();
    pd.set_dispatch_hook(|peer, _req| match peer.id {
        11 => unavailable(),
        _ => Err(Error::from(tonic::Status::invalid_argument("bad request"))),
    });
    let err = get(&pd, &routing).await.unwrap_err();
    assert!(matches!(err, Error::GrpcAPI(_)), "{err}");
    assert_eq!(pd.dispatched_peers(), vec![11, 12], "never replayed");
    assert_eq!(pd.invalidate_store_cache_calls(), 1);
    assert_eq!(pd.invalidate_region_cache_calls(), 1);
    assert_eq!(routing.stats().region_invalidations, 1);
}
