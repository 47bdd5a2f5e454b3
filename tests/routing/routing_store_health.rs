//! Client-wide store health (routing.md, "Store health").
#![cfg(feature = "mock")]

use std::sync::Arc;

use crate::common::*;
use tikv_plan::mock::{self, MappingFailure, MockPdClient};
use tikv_plan::request::RoutingState;
use tikv_plan::Config;

/// A hundred Regions `[i, i+1)` (one-byte keys), each with voters on stores
/// 1, 2 and 3, all led from store 1.
fn hundred_regions() -> Arc<MockPdClient> {
    let regions = (0..100u64)
        .map(|i| {
            let start = [i as u8];
            let end = if i == 99 { vec![] } else { vec![i as u8 + 1] };
            let start: &[u8] = if i == 0 { b"" } else { &start };
            let base = 1000 + i * 10;
            mock::region(
                i + 1,
                start,
                &end,
                &[
                    mock::voter(base + 1, 1),
                    mock::voter(base + 2, 2),
                    mock::voter(base + 3, 3),
                ],
                Some(base + 1),
            )
        })
        .collect();
    Arc::new(MockPdClient::new(regions))
}

async fn read_every_region(pd: &Arc<MockPdClient>, routing: &Arc<RoutingState>) {
    for i in 0..100u8 {
        let got = get_with(pd, Some(routing), backoff(), &[i]).await.unwrap();
        assert!(text(got).ends_with('2'), "a voter on store 2 answered");
    }
}

#[tokio::test(start_paused = true)]
async fn hundred_regions_on_dead_store_cost_one_connect_attempt() {
    let pd = hundred_regions();
    let routing = routing();
    pd.fail_store_mapping(1, MappingFailure::ConnectTimeout);
    pd.set_dispatch_hook(accept);
    read_every_region(&pd, &routing).await;
    assert_eq!(pd.map_calls_to_store(1), 1, "one connect attempt in total");
    assert_eq!(pd.dispatches_to_store(2), 100);
    let stats = routing.stats();
    assert_eq!(stats.connect_timeouts, 1);
    assert_eq!(stats.fallback_successes, 100);
    assert_eq!(stats.stores_marked_unreachable, 1);
}

/// Cold Regions: the voters still name the dead store's peer as leader. The
/// hint must not undo "leader last", or every Region pays a connect attempt.
#[tokio::test(start_paused = true)]
async fn voters_naming_the_dead_leader_do_not_bring_it_forward() {
    let pd = hundred_regions();
    let routing = routing();
    pd.fail_store_mapping(1, MappingFailure::ConnectTimeout);
    pd.set_dispatch_hook(|peer, req| match peer.store_id {
        2 => {
            let leader = mock::voter(peer.id - 1, 1);
            region_error(req, mock::not_leader(0, Some(leader)))
        }
        _ => accept(peer, req),
    });
    for i in 0..100u8 {
        let got = get_with(&pd, Some(&routing), backoff(), &[i])
            .await
            .unwrap();
        assert!(text(got).ends_with('3'), "a voter on store 3 answered");
    }
    assert_eq!(pd.map_calls_to_store(1), 1, "one connect attempt in total");
    assert_eq!(routing.stats().connect_timeouts, 1);
}

#[tokio::test(start_paused = true)]
async fn store_health_off_pays_every_time() {
    let pd = hundred_regions();
    let routing = Arc::new(RoutingState::new(&Config::default().upstream_routing()));
    pd.fail_store_mapping(1, MappingFailure::ConnectTimeout);
    pd.set_dispatch_hook(accept);
    read_every_region(&pd, &routing).await;
    assert_eq!(
        pd.map_calls_to_store(1),
        100,
        "upstream pays once per Region"
    );
    assert_eq!(routing.stats().connect_timeouts, 100);
}

#[tokio::test(start_paused = true)]
async fn timeout_strikes_mark_store_unreachable_without_invalidation() {
    let pd = three_regions_led_from_store_1();
    let routing = routing();
    // Store 1 accepts connections but never answers in time: the client's
    // request timeout ends each attempt.
    hang_store_1(&pd);
    for key in [b"a", b"b"] {
        let got = get_with(&pd, Some(&routing), backoff(), key).await.unwrap();
        assert!(text(got).ends_with('2'));
    }
    assert_eq!(pd.dispatches_to_store(1), 2, "two strikes");
    // Region 3 is led from store 1 too, but the store is now avoided.
    let got = get_with(&pd, Some(&routing), backoff(), b"c")
        .await
        .unwrap();
    assert_eq!(text(got), "from-32");
    assert_eq!(pd.dispatches_to_store(1), 2, "no third timeout");
    assert_eq!(pd.invalidate_store_cache_calls(), 0, "timeouts keep caches");
    assert_eq!(pd.invalidate_region_cache_calls(), 0);
    assert_eq!(routing.stats().stores_marked_unreachable, 1);
}

#[tokio::test(start_paused = true)]
async fn a_stores_deadline_exceeded_answer_is_no_timeout_strike() {
    // `DeadlineExceeded` comes from the store, so the store
    // answered; only a client-side timeout is a strike.
    let pd = three_regions_led_from_store_1();
    let routing = routing();
    pd.set_async_dispatch_hook(|peer, req| {
        let answer = accept(peer, req);
        let store = peer.store_id;
        Box::pin(async move {
            if store == 1 {
                return deadline();
            }
            answer
        })
    });
    for key in [b"a", b"b", b"c"] {
        let got = get_with(&pd, Some(&routing), backoff(), key).await.unwrap();
        assert!(text(got).ends_with('2'));
    }
    assert_eq!(pd.dispatches_to_store(1), 3, "store 1 is still asked first");
    assert!(!routing.is_store_unreachable(1));
    assert_eq!(routing.stats().stores_marked_unreachable, 0);
}

#[tokio::test(start_paused = true)]
async fn unreachable_store_is_tried_first_again_after_cooldown() {
    let pd = hundred_regions();
    let routing = routing();
    pd.fail_store_mapping(1, MappingFailure::Refused);
    pd.set_dispatch_hook(accept);
    get_with(&pd, Some(&routing), backoff(), &[0])
        .await
        .unwrap();
    get_with(&pd, Some(&routing), backoff(), &[1])
        .await
        .unwrap();
    assert_eq!(pd.map_calls_to_store(1), 1);
    // The store came back; after the (jittered) cool-down its Regions try
    // their cached leader first again.
    pd.heal_store(1);
    tokio::time::advance(Config::default().store_cooldown * 2).await;
    let got = get_with(&pd, Some(&routing), backoff(), &[2])
        .await
        .unwrap();
    assert_eq!(text(got), "from-1021");
    assert!(!routing.is_store_unreachable(1));
}

#[tokio::test(start_paused = true)]
async fn timeouts_after_waiting_for_a_permit_are_consecutive_strikes() {
    // A shard's send time was taken before it waited for
    // its permit, so with one permit the later shards' timeouts looked
    // concurrent with the first strike and a hung store was never marked.
    use tikv_plan::raw_lowering::new_raw_batch_get_request;
    use tikv_plan::request::{Collect, Plan, PlanBuilder};
    let pd = three_regions_led_from_store_1();
    let routing = routing();
    hang_store_1(&pd);
    let pairs: Vec<tikv_plan::KvPair> = PlanBuilder::new(
        pd.clone(),
        tikv_plan::request::Keyspace::Disable,
        new_raw_batch_get_request(
            vec![b"a".to_vec(), b"b".to_vec(), b"c".to_vec()]
                .into_iter()
                .map(Into::into),
            None,
        ),
    )
    .routing(routing.clone())
    .max_concurrency(1)
    .retry_multi_region(backoff())
    .merge(Collect)
    .plan()
    .execute()
    .await
    .unwrap();
    assert_eq!(pairs.len(), 0, "the mock's batch get answers no pairs");
    // Each shard chose store 1 before waiting for the one permit, so all
    // three were sent there, one after another: strikes, and the store is
    // marked (it never was when the send time was taken before the wait).
    assert_eq!(pd.dispatches_to_store(1), 3);
    assert_eq!(routing.stats().stores_marked_unreachable, 1);
    assert!(routing.is_store_unreachable(1));
    // The next request tries the voter first.
    let got = get_with(&pd, Some(&routing), backoff(), b"a")
        .await
        .unwrap();
    assert_eq!(text(got), "from-12");
    assert_eq!(pd.dispatches_to_store(1), 3);
}
