//! Cancellation (routing.md, "Cancellation").
#![cfg(feature = "mock")]

use std::time::Duration;

use crate::common::*;

#[tokio::test(start_paused = true)]
async fn dropping_request_mid_round_contacts_no_one_and_leaks_no_permit() {
    let pd = three_voters();
    let routing = routing();
    // The leader never answers; the voters would.
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
    let request = get(&pd, &routing);
    let outcome = tokio::time::timeout(Duration::from_millis(100), request).await;
    assert!(
        outcome.is_err(),
        "the request was still waiting on the leader"
    );
    assert_eq!(routing.stats().rpcs_in_flight, 0, "the permit went with it");
    // Nothing happens afterwards on its account.
    tokio::time::advance(Duration::from_secs(60)).await;
    tokio::task::yield_now().await;
    assert_eq!(pd.dispatched_peers(), vec![11], "no one else was contacted");
    assert_eq!(pd.update_leader_calls(), 0);
    assert_eq!(pd.invalidate_store_cache_calls(), 0);
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
    assert_eq!(pd.cached_leader(1).map(|p| p.id), Some(11));
    // The client still works: a new request with a healthy leader goes through.
    pd.set_dispatch_hook(accept);
    assert_eq!(text(get(&pd, &routing).await.unwrap()), "from-11");
}

#[tokio::test(start_paused = true)]
async fn dropping_a_probing_request_releases_waiters() {
    use std::sync::Arc;
    use tikv_plan::mock;
    let pd = three_voters();
    let routing = routing();
    // The leader is busy; the followers hang.
    pd.set_async_dispatch_hook(|peer, req| {
        let id = peer.id;
        let busy = region_error(req, mock::server_is_busy(0, 0));
        Box::pin(async move {
            if id != 11 {
                futures::future::pending::<()>().await;
            }
            busy
        })
    });
    let prober = get(&pd, &routing);
    let _ = tokio::time::timeout(Duration::from_millis(100), prober).await;
    assert_eq!(routing.stats().busy_probes, 1);
    let before = pd.dispatched_peers().len();
    // A later request is not left waiting for the abandoned probe: the
    // dropped ticket released the Region. The abandoned probe changed
    // nothing, so the suspicion stands and this request probes at its first
    // busy answer.
    pd.set_dispatch_hook(|peer, req| match peer.id {
        11 => region_error(req, mock::server_is_busy(0, 0)),
        _ => accept(peer, req),
    });
    let got = tokio::time::timeout(Duration::from_secs(5), get(&pd, &Arc::clone(&routing))).await;
    assert_eq!(text(got.unwrap().unwrap()), "from-12");
    assert_eq!(routing.stats().busy_probes, 2);
    assert_eq!(pd.dispatched_peers()[before..], [11, 12]);
}
