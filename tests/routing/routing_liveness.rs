//! Store liveness (routing.md, "Store liveness"): an RPC unanswered for
//! `store_probe_after` gets its store probed; a failed probe marks the store
//! at once and the re-sendable requests waiting on it give up.
#![cfg(feature = "mock")]

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::common::*;
use tikv_plan::mock::MockPdClient;
use tikv_plan::Failure;

/// The three Regions of [`three_regions_led_from_store_1`], with a client
/// that can probe stores.
fn probing_pd() -> Arc<MockPdClient> {
    let pd = three_regions_led_from_store_1();
    pd.probe_stores(true);
    pd
}

#[tokio::test(start_paused = true)]
async fn reads_waiting_on_a_hung_store_give_up_when_its_one_probe_fails() {
    let pd = probing_pd();
    let routing = routing();
    hang_store_1(&pd);
    let started = Instant::now();
    let (a, b, c) = tokio::join!(
        get_with(&pd, Some(&routing), backoff(), b"a"),
        get_with(&pd, Some(&routing), backoff(), b"b"),
        get_with(&pd, Some(&routing), backoff(), b"c"),
    );
    let took = started.elapsed();
    for got in [a, b, c] {
        assert!(
            text(got.unwrap()).ends_with('2'),
            "a voter on store 2 answered"
        );
    }
    // 500 ms of waiting, then a probe bounded by 500 ms: one connect
    // timeout in all, half the RPC timeout of 2 s.
    assert!(
        took >= Duration::from_millis(1000) && took < Duration::from_millis(1010),
        "took {took:?}"
    );
    assert_eq!(pd.probes_of_store(1), 1, "one probe for the three reads");
    assert_eq!(pd.dispatches_to_store(1), 3);
    let stats = routing.stats();
    assert_eq!(stats.liveness_probes, 1);
    assert_eq!(stats.rpcs_given_up, 3);
    assert_eq!(stats.stores_marked_unreachable, 1);
    assert!(routing.is_store_unreachable(1));
    assert_eq!(pd.invalidate_store_cache_calls(), 0, "the caches stay");
    // The next read of a Region led from store 1 goes to the voter first.
    let got = get_with(&pd, Some(&routing), backoff(), b"a")
        .await
        .unwrap();
    assert_eq!(text(got), "from-12");
    assert_eq!(pd.dispatches_to_store(1), 3);
}

#[tokio::test(start_paused = true)]
async fn a_slow_store_that_answers_its_probe_keeps_its_requests() {
    let pd = probing_pd();
    let routing = routing();
    // Store 1 answers requests after 800 ms and its probe at once.
    pd.set_async_dispatch_hook(|peer, req| {
        let answer = accept(peer, req);
        let slow = peer.store_id == 1 && peer.id != 0;
        Box::pin(async move {
            if slow {
                tokio::time::sleep(Duration::from_millis(800)).await;
            }
            answer
        })
    });
    let started = Instant::now();
    let got = get_with(&pd, Some(&routing), backoff(), b"a")
        .await
        .unwrap();
    assert_eq!(text(got), "from-11", "the leader answered");
    assert_eq!(started.elapsed(), Duration::from_millis(800));
    assert_eq!(pd.probes_of_store(1), 1);
    assert_eq!(pd.dispatches_to_store(2), 0);
    assert!(!routing.is_store_unreachable(1));
    assert_eq!(routing.stats().rpcs_given_up, 0);
}

#[tokio::test(start_paused = true)]
async fn a_write_that_must_not_be_sent_twice_ends_undetermined_at_the_verdict_and_is_not_sent_again(
) {
    let pd = probing_pd();
    let routing = routing();
    hang_store_1(&pd);
    let started = Instant::now();
    let error = put(&pd, &routing).await.unwrap_err();
    assert!(
        matches!(error.failure(), Some(Failure::Undetermined { .. })),
        "{error}"
    );
    // Probed after 500 ms, marked when the probe failed 500 ms later: the
    // put gave up then (well before its 2 s timeout), was reported
    // undetermined, and was not sent again anywhere.
    assert_eq!(started.elapsed(), Duration::from_millis(1000));
    assert!(started.elapsed() < routing.rpc_timeout());
    assert_eq!(pd.probes_of_store(1), 1);
    assert!(routing.is_store_unreachable(1));
    assert_eq!(pd.dispatches_to_store(1), 1);
    assert_eq!(pd.dispatches_to_store(2), 0, "never sent again");
    assert_eq!(pd.dispatches_to_store(3), 0, "never sent again");
    assert_eq!(routing.stats().rpcs_given_up, 1);
}

#[tokio::test(start_paused = true)]
async fn a_request_answered_before_the_wait_probes_nothing() {
    let pd = probing_pd();
    let routing = routing();
    pd.set_dispatch_hook(accept);
    for key in [b"a", b"b", b"c"] {
        get_with(&pd, Some(&routing), backoff(), key).await.unwrap();
    }
    assert_eq!(pd.probes_of_store(1), 0);
    assert_eq!(routing.stats().liveness_probes, 0);
}

#[tokio::test(start_paused = true)]
async fn a_store_that_answers_probes_but_not_requests_still_collects_its_strikes() {
    let pd = probing_pd();
    let routing = routing();
    // Store 1 answers its probes at once and no request: an answered
    // probe must not clear the timeouts its requests add up.
    pd.set_async_dispatch_hook(|peer, req| {
        let answer = accept(peer, req);
        let hangs = peer.store_id == 1 && peer.id != 0;
        Box::pin(async move {
            if hangs {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
            answer
        })
    });
    for key in [b"a", b"b"] {
        let got = get_with(&pd, Some(&routing), backoff(), key).await.unwrap();
        assert!(text(got).ends_with('2'), "a voter on store 2 answered");
    }
    let stats = routing.stats();
    assert_eq!(stats.liveness_probes, 2);
    assert_eq!(stats.rpcs_given_up, 0, "the probes were answered");
    assert_eq!(stats.stores_marked_unreachable, 1, "two strikes");
    assert!(routing.is_store_unreachable(1));
}

#[tokio::test(start_paused = true)]
async fn a_store_that_answers_a_waiting_request_during_its_probe_is_slow_not_gone() {
    let pd = probing_pd();
    let routing = routing();
    // Store 1 answers Region 1's read after 700 ms, never Region 2's, and
    // never its probe.
    pd.set_async_dispatch_hook(|peer, req| {
        let answer = accept(peer, req);
        let wait = match (peer.store_id, peer.id) {
            (1, 11) => Some(Duration::from_millis(700)),
            (1, _) => Some(Duration::from_secs(3600)),
            _ => None,
        };
        Box::pin(async move {
            if let Some(wait) = wait {
                tokio::time::sleep(wait).await;
            }
            answer
        })
    });
    let started = Instant::now();
    let (a, b) = tokio::join!(
        get_with(&pd, Some(&routing), backoff(), b"a"),
        get_with(&pd, Some(&routing), backoff(), b"b"),
    );
    assert_eq!(text(a.unwrap()), "from-11");
    // The probe got no answer, but the store answered a waiting read
    // after it was sent: not marked, so the other read waited out its
    // timeout before it went to the voter.
    assert_eq!(text(b.unwrap()), "from-22");
    assert_eq!(started.elapsed(), routing.rpc_timeout());
    let stats = routing.stats();
    assert_eq!(stats.liveness_probes, 1);
    assert_eq!(stats.rpcs_given_up, 0);
    assert_eq!(stats.stores_marked_unreachable, 0);
}
